/* bench_data.c -- deterministic test tensors for the benchmarks, in f32, f16 or bf16 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "convert.h"

/* splitmix64: a fixed sequence per seed, so every run measures the same data */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void *bench_alloc_zero(size_t bytes)
{
    void *p = NULL;
    /* 64-byte aligned so that the widest loads are whole cache lines */
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}

void bench_free(void *p)
{
    free(p);
}

void *bench_alloc_random(sdpa_dtype dtype, size_t n, uint64_t seed)
{
    const size_t es = sdpa_dtype_size(dtype);
    if (es == 0 || n > SIZE_MAX / es) return NULL;
    void *p = bench_alloc_zero(n * es);
    if (!p) return NULL;
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        /* 24 random bits -> [-1, 1) */
        float x = (float)(next_u64(&s) >> 40) * (2.0f / 16777216.0f) - 1.0f;
        if (dtype == SDPA_F32)
            ((float *)p)[i] = x;
        else if (dtype == SDPA_F16)
            ((uint16_t *)p)[i] = sdpa_f32_to_f16(x);
        else
            ((uint16_t *)p)[i] = sdpa_f32_to_bf16(x);
    }
    return p;
}
