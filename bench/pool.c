/* pool.c -- a persistent pthread pool implementing sdpa_parallel_for_fn, for the benchmarks and the
 * tests */
/*
 * The workers are created once. Between calls each polls for the next one for spin_us
 * microseconds, then sleeps on a condition variable; the caller, once out of tasks, polls for
 * the workers to finish the same way. An engine's pool behaves so: ggml's polls about 6.5
 * million pause rounds by default (poll level 50, 128 Ki rounds a level) before it sleeps, and
 * OpenMP runtimes spin-wait a while by default. With spin_us = 0 every call pays a wake-up of
 * sleeping threads, which in a virtual machine can cost as much as 0.1 ms. The caller takes
 * part as thread 0; tasks are claimed through one atomic counter, so a slow or descheduled
 * thread simply takes fewer of them. The k-th claim runs task task_at(k): the identity, its
 * reverse or a permutation, which is how the tests vary the order.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pool.h"

typedef struct worker_arg {
    struct bench_pool *pool;
    size_t index; /* thread index passed to tasks: 1..n_threads-1 */
} worker_arg;

struct bench_pool {
    bench_pool_options opts;
    pthread_t *threads;
    worker_arg *args;
    size_t started;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* a new generation of work, or stop */
    pthread_cond_t done; /* the last busy worker finished the generation */
    /* generation and stop change under mu, so that a sleeper cannot miss them; busy falls
       without it, and its last decrement signals done under mu. Pollers read all three bare. */
    _Atomic uint64_t generation;
    atomic_bool stop;
    atomic_size_t busy;  /* workers still inside the current generation */
    atomic_flag in_call; /* set for the length of a call: catches concurrent or nested use */
    /* the current call, written by the caller before the workers are woken */
    sdpa_task_fn fn;
    void *arg;
    size_t n_tasks;
    atomic_size_t next; /* claims handed out so far */
    uint64_t key;       /* BENCH_POOL_SHUFFLE: this call's permutation */
    unsigned bits;      /* BENCH_POOL_SHUFFLE: the permutation acts on [0, 2^bits) */
    /* checks (opts.check): per-task run counts and per-thread-index "running" flags */
    atomic_uint *ran; /* NULL for a call whose counters could not be allocated */
    size_t ran_cap;
    atomic_uchar *running;
    atomic_size_t bad_thread, overlaps;
    uint64_t calls, tasks, miscounts; /* the caller's alone */
};

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

/* A bijection of [0, 2^bits): each step (odd multiply plus key, mod 2^bits; xor with a right
   shift within bits) is invertible. */
static uint64_t shuffle_step(uint64_t x, uint64_t key, unsigned bits)
{
    const uint64_t mask = bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
    const unsigned s = (bits + 1) / 2;
    x = (x * 0xd6e8feb86659fd93u + key) & mask;
    x ^= x >> s;
    x = (x * 0x9e3779b97f4a7c15u + (key >> 32)) & mask;
    x ^= x >> s;
    return x;
}

/* The task run by the k-th claim of the call. Cycle-walking the bijection of [0, 2^bits) until
   it lands below n_tasks gives a bijection of [0, n_tasks); 2^bits < 2 n_tasks, so the walk
   takes under two steps on average. */
static size_t task_at(const struct bench_pool *p, size_t k)
{
    switch (p->opts.order) {
    case BENCH_POOL_REVERSE:
        return p->n_tasks - 1 - k;
    case BENCH_POOL_SHUFFLE: {
        uint64_t x = k;
        do x = shuffle_step(x, p->key, p->bits);
        while (x >= p->n_tasks);
        return (size_t)x;
    }
    case BENCH_POOL_FORWARD:
    default:
        return k;
    }
}

static void run_claim(struct bench_pool *p, size_t k, size_t thread)
{
    const size_t i = task_at(p, k);
    const bool check = p->opts.check;
    if (check) {
        if (thread >= p->opts.n_threads)
            atomic_fetch_add(&p->bad_thread, 1);
        else if (atomic_exchange(&p->running[thread], 1))
            atomic_fetch_add(&p->overlaps, 1);
        if (p->ran) atomic_fetch_add_explicit(&p->ran[i], 1, memory_order_relaxed);
    }
    p->fn(p->arg, i, thread);
    if (check && thread < p->opts.n_threads) atomic_store(&p->running[thread], 0);
}

static void run_claims(struct bench_pool *p, size_t thread)
{
    for (;;) {
        size_t k = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (k >= p->n_tasks) break;
        run_claim(p, k, thread);
    }
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Polls until ready(p, ctx) holds or spin_us have passed (the clock read every 256 rounds);
   returns whether it holds. Acquire loads in ready() pair with the writer's release. */
static bool poll_for(struct bench_pool *p, bool (*ready)(struct bench_pool *, uint64_t),
                     uint64_t ctx)
{
    if (ready(p, ctx)) return true;
    if (p->opts.spin_us == 0) return false;
    const uint64_t end = now_ns() + (uint64_t)p->opts.spin_us * 1000u;
    for (unsigned i = 1;; i++) {
        cpu_relax();
        if (ready(p, ctx)) return true;
        if (i % 256 == 0 && now_ns() >= end) return false;
    }
}

static bool new_work(struct bench_pool *p, uint64_t seen)
{
    return atomic_load_explicit(&p->generation, memory_order_acquire) != seen ||
           atomic_load_explicit(&p->stop, memory_order_acquire);
}

static bool all_done(struct bench_pool *p, uint64_t unused)
{
    (void)unused;
    return atomic_load_explicit(&p->busy, memory_order_acquire) == 0;
}

static void *worker_main(void *varg)
{
    worker_arg *wa = varg;
    struct bench_pool *p = wa->pool;
    uint64_t seen = 0;
    for (;;) {
        if (!poll_for(p, new_work, seen)) {
            pthread_mutex_lock(&p->mu);
            while (!new_work(p, seen)) pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        run_claims(p, wa->index);
        /* release: the tasks' writes happen before the caller sees busy reach 0 */
        if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu); /* a caller between its check and its wait holds mu */
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

bench_pool *bench_pool_create_opts(const bench_pool_options *opts)
{
    if (!opts || opts->n_threads < 1) return NULL;
    struct bench_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->opts = *opts;
    atomic_init(&p->next, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->busy, 0);
    atomic_init(&p->bad_thread, 0);
    atomic_init(&p->overlaps, 0);
    atomic_flag_clear(&p->in_call);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (opts->check) {
        p->running = calloc(opts->n_threads, sizeof *p->running);
        if (!p->running) {
            bench_pool_destroy(p);
            return NULL;
        }
        for (size_t t = 0; t < opts->n_threads; t++) atomic_init(&p->running[t], 0);
    }
    if (opts->n_threads > 1 && !opts->serial) {
        p->threads = calloc(opts->n_threads - 1, sizeof *p->threads);
        p->args = calloc(opts->n_threads - 1, sizeof *p->args);
        if (!p->threads || !p->args) {
            bench_pool_destroy(p);
            return NULL;
        }
        for (size_t i = 0; i + 1 < opts->n_threads; i++) {
            p->args[i].pool = p;
            p->args[i].index = i + 1;
            if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) {
                bench_pool_destroy(p); /* joins the ones already started */
                return NULL;
            }
            p->started++;
        }
    }
    return p;
}

void bench_pool_destroy(bench_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->stop, true, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->args);
    free(p->ran);
    free(p->running);
    free(p);
}

size_t bench_pool_threads(const bench_pool *p) { return p ? p->opts.n_threads : 1; }

bench_pool_stats bench_pool_get_stats(const bench_pool *p)
{
    bench_pool_stats s = {0};
    if (!p) return s;
    struct bench_pool *q = (struct bench_pool *)p; /* C11's atomic_load takes no const pointer */
    s.calls = p->calls;
    s.tasks = p->tasks;
    s.bad_thread = atomic_load(&q->bad_thread);
    s.overlaps = atomic_load(&q->overlaps);
    s.miscounts = p->miscounts;
    return s;
}

/* Zeroed run counters for n tasks, or p->ran = NULL when they cannot be had. */
static void reset_counters(struct bench_pool *p, size_t n)
{
    if (n > p->ran_cap) {
        free(p->ran);
        p->ran_cap = 0;
        p->ran = n <= SIZE_MAX / sizeof *p->ran ? malloc(n * sizeof *p->ran) : NULL;
        if (!p->ran) return;
        p->ran_cap = n;
    }
    for (size_t i = 0; i < n; i++) atomic_store_explicit(&p->ran[i], 0, memory_order_relaxed);
}

static bool counters_all_one(const struct bench_pool *p, size_t n)
{
    if (!p->ran) return false;
    for (size_t i = 0; i < n; i++)
        if (atomic_load_explicit(&p->ran[i], memory_order_relaxed) != 1) return false;
    return true;
}

void bench_pool_parallel_for(void *vpool, size_t n_tasks, sdpa_task_fn task, void *arg)
{
    struct bench_pool *p = vpool;
    if (!p) {
        for (size_t i = 0; i < n_tasks; i++) task(arg, i, 0);
        return;
    }
    if (atomic_flag_test_and_set(&p->in_call)) {
        fprintf(stderr, "bench_pool: a call on a pool already inside one (concurrent or nested)\n");
        abort();
    }
    p->calls++;
    p->tasks += n_tasks;
    if (n_tasks == 0) {
        atomic_flag_clear(&p->in_call);
        return;
    }
    p->fn = task;
    p->arg = arg;
    p->n_tasks = n_tasks;
    if (p->opts.order == BENCH_POOL_SHUFFLE) {
        p->key = splitmix64(p->opts.seed ^ splitmix64(p->calls));
        p->bits = 1;
        while (p->bits < 64 && ((uint64_t)1 << p->bits) < n_tasks) p->bits++;
    }
    if (p->opts.check) reset_counters(p, n_tasks);

    if (p->opts.serial) {
        for (size_t k = 0; k < n_tasks; k++) run_claim(p, k, k % p->opts.n_threads);
    } else if (p->started == 0 || n_tasks == 1) { /* nothing to share: no wake-up cost */
        for (size_t k = 0; k < n_tasks; k++) run_claim(p, k, 0);
    } else {
        atomic_store_explicit(&p->next, 0, memory_order_relaxed);
        atomic_store_explicit(&p->busy, p->started, memory_order_relaxed);
        pthread_mutex_lock(&p->mu);
        /* release: a poller that sees the new generation sees the call written before it */
        atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        run_claims(p, 0);
        if (!poll_for(p, all_done, 0)) {
            pthread_mutex_lock(&p->mu);
            while (!all_done(p, 0)) pthread_cond_wait(&p->done, &p->mu);
            pthread_mutex_unlock(&p->mu);
        } /* either way the workers' writes happen before this returns (acquire on busy) */
    }

    if (p->opts.check && !counters_all_one(p, n_tasks)) p->miscounts++;
    atomic_flag_clear(&p->in_call);
}
