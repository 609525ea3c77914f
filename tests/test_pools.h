/* test_pools.h -- the thread pools the forward tests run the library on (bench/pool.h) */
#ifndef SDPA_TEST_POOLS_H
#define SDPA_TEST_POOLS_H

#include "testlib.h"

#include "pool.h"

/* pools[i] gets first + i threads for i < n, the last running its tasks in shuffled order (a
   schedule no real pool is bound to follow). False, after a TAP bail-out, when one cannot be
   made. */
static inline bool tl_pools_create(bench_pool **pools, size_t n, size_t first, uint64_t seed)
{
    for (size_t t = 0; t < n; t++) {
        pools[t] = bench_pool_create_opts(
            &(bench_pool_options){.n_threads = first + t,
                                  .order = t + 1 == n ? BENCH_POOL_SHUFFLE : BENCH_POOL_FORWARD,
                                  .seed = seed});
        if (!pools[t]) {
            printf("Bail out! no thread pool\n");
            return false;
        }
    }
    return true;
}

/* The end of a test with n pools: destroys them and returns tl_finish's exit status. */
static inline int tl_pools_finish(bench_pool **pools, size_t n)
{
    for (size_t t = 0; t < n; t++) bench_pool_destroy(pools[t]);
    return tl_finish();
}

/* sdpa_impl_forward of p on impl: serially when pool is NULL, else through that pool. */
static inline sdpa_status tl_forward_on(const sdpa_impl *impl, const sdpa_params *p,
                                        bench_pool *pool, const sdpa_tensor *q,
                                        const sdpa_tensor *k, const sdpa_tensor *v,
                                        const sdpa_tensor *o)
{
    sdpa_params c = *p;
    if (pool) {
        c.parallel_for = bench_pool_parallel_for;
        c.pool = pool;
        c.n_threads = bench_pool_threads(pool);
    }
    return sdpa_impl_forward(impl, &c, q, k, v, o);
}

#endif /* SDPA_TEST_POOLS_H */
