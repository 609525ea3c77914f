/* test_active_threads.c -- 16 threads asking for the active implementation at the same instant all get the same one */
#include "testlib.h"

#include <pthread.h>

/* The first library call of this process is made by 16 threads released together by a barrier,
   so that an initialisation that is not idempotent and thread-safe would show up as different
   answers (or a crash under the sanitizers). */
enum { N = 16 };
static pthread_barrier_t start;
static const sdpa_impl *seen[N];

static void *ask(void *arg)
{
    size_t i = (size_t)(uintptr_t)arg;
    pthread_barrier_wait(&start);
    seen[i] = sdpa_active();
    return NULL;
}

int main(void)
{
    tl_header("sdpa_active from 16 threads at once");
    pthread_t th[N];
    pthread_barrier_init(&start, NULL, N);
    for (size_t i = 0; i < N; i++)
        if (pthread_create(&th[i], NULL, ask, (void *)(uintptr_t)i) != 0) {
            printf("Bail out! pthread_create failed\n");
            return 1;
        }
    for (size_t i = 0; i < N; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    tl_start("sdpa_active from 16 threads", seen[0] ? sdpa_impl_name(seen[0]) : "NULL");
    for (size_t i = 0; i < N; i++)
        CHECK(seen[i] != NULL && seen[i] == seen[0], "thread %zu saw %s, thread 0 saw %s", i, sdpa_impl_name(seen[i]),
              sdpa_impl_name(seen[0]));
    CHECK(seen[0] == sdpa_active() && sdpa_impl_supported(seen[0]), "the answer is not the active, supported one");
    tl_end();
    return tl_finish();
}
