/* pool.h -- a persistent pthread pool implementing sdpa_parallel_for_fn, for the benchmarks and the
 * tests */
#ifndef BENCH_POOL_H
#define BENCH_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bench_pool bench_pool;

/* The order in which the tasks of one call are claimed. Whatever the order, every task runs
   exactly once per call; the non-default orders exist to show that results do not depend on it. */
typedef enum bench_pool_order {
    BENCH_POOL_FORWARD = 0, /* 0, 1, ..., n_tasks - 1 (the benchmarks' order) */
    BENCH_POOL_REVERSE,     /* n_tasks - 1, ..., 1, 0 */
    BENCH_POOL_SHUFFLE      /* a pseudo-random permutation, a different one each call, from seed */
} bench_pool_order;

typedef struct bench_pool_options {
    size_t n_threads; /* >= 1, counting the caller; tasks see thread < n_threads */
    bench_pool_order order;
    /* No worker threads: the caller runs every task itself, one after another in the claim
       order, the k-th claimed task under thread index k % n_threads. */
    bool serial;
    /* Checks the sdpa_parallel_for_fn contract on every call (see bench_pool_stats). */
    bool check;
    uint64_t seed; /* BENCH_POOL_SHUFFLE: the same seed gives the same orders */
    /* Microseconds an idle worker polls for the next call, and the caller for the workers to
       finish, before sleeping on a condition variable; 0 sleeps at once (the tests' pools, which
       may have more threads than the machine has cores). */
    uint32_t spin_us;
} bench_pool_options;

/* sdpa-bench's polling time (--sdpa_pool_spin_us): longer than a benchmark's 1-thread call, so
   that the paired rows' N-thread call finds its workers awake, as an engine's op finds its pool
   mid-graph. */
#define BENCH_POOL_SPIN_US 50000

/* What a pool has seen since it was created; read between calls, from the calling thread. */
typedef struct bench_pool_stats {
    uint64_t calls; /* bench_pool_parallel_for calls */
    uint64_t tasks; /* n_tasks summed over the calls */
    /* with check only, each 0 when the contract held: */
    uint64_t bad_thread; /* tasks given a thread index >= n_threads */
    uint64_t overlaps;   /* tasks started under a thread index another task was running under */
    uint64_t miscounts;  /* calls in which some task ran other than exactly once, or could not
                            be counted (no memory for the counters), so a check never passes
                            silently */
} bench_pool_stats;

/* A pool of opts->n_threads >= 1 threads counting the caller, which runs tasks as thread 0;
   NULL when n_threads is 0 or on failure (nothing left running). */
bench_pool *bench_pool_create_opts(const bench_pool_options *opts);
/* Stops and joins the workers and frees the pool; NULL is a no-op. Not during a call. */
void bench_pool_destroy(bench_pool *pool);
/* n_threads of the pool (1 for NULL). */
size_t bench_pool_threads(const bench_pool *pool);
/* The counts so far (all 0 for NULL). */
bench_pool_stats bench_pool_get_stats(const bench_pool *pool);

/* sdpa_parallel_for_fn: pool is a bench_pool * (NULL: every task on the caller as thread 0).
   One call at a time per pool, and a task must not call back into its own pool (either
   aborts rather than deadlock). Tasks may wait for one another: without serial, a call with
   n_tasks <= n_threads whose tasks each block until all have started runs each on its own
   thread, all at once (machine.c's gang barrier relies on it). */
void bench_pool_parallel_for(void *pool, size_t n_tasks, sdpa_task_fn task, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* BENCH_POOL_H */
