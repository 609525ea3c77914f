/* pool.c -- a small persistent pthread pool for the benchmarks, implementing sdpa_parallel_for_fn */
/*
 * The workers are created once and sleep on a condition variable between calls, so a forward
 * call pays one wake-up, not a thread creation (an engine's pool behaves the same way). The
 * caller takes part as thread 0; tasks are handed out through one atomic counter, so a slow or
 * descheduled thread simply takes fewer of them.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "bench.h"

typedef struct worker_arg {
    struct bench_pool *pool;
    size_t             index; /* thread index passed to tasks: 1..n_threads-1 */
} worker_arg;

struct bench_pool {
    size_t          n_threads;
    pthread_t      *threads;
    worker_arg     *args;
    size_t          started;
    pthread_mutex_t mu;
    pthread_cond_t  wake; /* a new generation of work, or stop */
    pthread_cond_t  done; /* the last busy worker finished the generation */
    uint64_t        generation;
    bool            stop;
    size_t          busy; /* workers still inside the current generation */
    /* the current call */
    sdpa_task_fn    fn;
    void           *arg;
    size_t          n_tasks;
    atomic_size_t   next;
};

static void run_tasks(struct bench_pool *p, size_t thread)
{
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n_tasks) break;
        p->fn(p->arg, i, thread);
    }
}

static void *worker_main(void *varg)
{
    worker_arg *wa = varg;
    struct bench_pool *p = wa->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, wa->index);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

bench_pool *bench_pool_create(size_t n_threads)
{
    if (n_threads < 1) return NULL;
    struct bench_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->next, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->threads = calloc(n_threads - 1, sizeof *p->threads);
        p->args = calloc(n_threads - 1, sizeof *p->args);
        if (!p->threads || !p->args) {
            bench_pool_destroy(p);
            return NULL;
        }
        for (size_t i = 0; i + 1 < n_threads; i++) {
            p->args[i].pool = p;
            p->args[i].index = i + 1;
            if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) {
                bench_pool_destroy(p);
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
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->args);
    free(p);
}

size_t bench_pool_threads(const bench_pool *p)
{
    return p ? p->n_threads : 1;
}

void bench_pool_parallel_for(void *vpool, size_t n_tasks, sdpa_task_fn task, void *arg)
{
    struct bench_pool *p = vpool;
    if (n_tasks == 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) { /* nothing to share: no wake-up cost */
        for (size_t i = 0; i < n_tasks; i++) task(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = task;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->busy = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu); /* the unlock publishes fn/arg/n_tasks to the workers */
    run_tasks(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
