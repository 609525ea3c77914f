/* test_active_threads.c -- 16 threads asking for the active implementation at the same instant all
 * get the same one */
#include "testlib.h"

#include <pthread.h>

#include "pool.h"

/* The first library call of this process is made by 16 threads of the tests' pool, whose tasks
   are released together by a barrier, so that an initialisation that is not idempotent and
   thread-safe would show up as different answers (or a crash under the sanitizers). Tasks that
   wait for each other get a thread each on a pool of as many threads (bench/pool.h). */
enum { N = 16 };
static pthread_barrier_t start;
static const sdpa_impl *seen[N];

static void ask(void *arg, size_t task, size_t thread)
{
    (void)arg, (void)thread;
    pthread_barrier_wait(&start);
    seen[task] = sdpa_active();
}

int main(void)
{
    tl_header("sdpa_active from 16 threads at once");
    const bench_pool_options opts = {.n_threads = N, .check = true};
    bench_pool *pool = bench_pool_create_opts(&opts);
    if (!pool) {
        printf("Bail out! the 16-thread pool could not be started\n");
        return 1;
    }
    pthread_barrier_init(&start, NULL, N);
    bench_pool_parallel_for(pool, N, ask, NULL);
    pthread_barrier_destroy(&start);
    const bench_pool_stats st = bench_pool_get_stats(pool);
    bench_pool_destroy(pool);
    tl_start("sdpa_active from 16 threads", seen[0] ? sdpa_impl_name(seen[0]) : "NULL");
    CHECK(st.bad_thread == 0 && st.overlaps == 0 && st.miscounts == 0,
          "the pool broke the hook's contract");
    for (size_t i = 0; i < N; i++)
        CHECK(seen[i] != NULL && seen[i] == seen[0], "task %zu saw %s, task 0 saw %s", i,
              sdpa_impl_name(seen[i]), sdpa_impl_name(seen[0]));
    CHECK(seen[0] == sdpa_active() && sdpa_impl_supported(seen[0]),
          "the answer is not the active, supported one");
    tl_end();
    return tl_finish();
}
