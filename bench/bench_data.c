/* bench_data.c -- deterministic test tensors for the benchmarks, in f32, f16 or bf16, and their
 * block-format copies */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
    /* 64-byte aligned so that the widest loads are whole cache lines; buffers of 2 MiB and more
       on 2 MiB boundaries with transparent huge pages requested (where the kernel has them), as
       an engine would allocate a KV cache: with 4 KiB pages a stream through hundreds of MiB
       misses the TLB every 4 KiB, which costs the kernels and the read-bandwidth test alike */
    const size_t huge = (size_t)2 << 20;
    if (bytes >= huge) {
        const size_t rounded = (bytes + huge - 1) / huge * huge;
        if (posix_memalign(&p, huge, rounded) != 0) return NULL;
#ifdef MADV_HUGEPAGE
        (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    } else if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

void bench_free(void *p) { free(p); }

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

void *bench_alloc_quantized(sdpa_dtype dst, const void *src, sdpa_dtype src_type, size_t n)
{
    enum { CHUNK = 4096 }; /* a multiple of the 32-element block */
    const size_t bytes = sdpa_dtype_bytes(dst, n), es = sdpa_dtype_size(src_type);
    if (!src || bytes == 0 || es == 0 || sdpa_dtype_block(dst) != 32) return NULL;
    char *p = (char *)bench_alloc_zero(bytes);
    if (!p) return NULL;
    float f[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        const size_t m = n - i < CHUNK ? n - i : CHUNK;
        for (size_t j = 0; j < m; j++) {
            if (src_type == SDPA_F32)
                f[j] = ((const float *)src)[i + j];
            else if (src_type == SDPA_F16)
                f[j] = sdpa_f16_to_f32(((const uint16_t *)src)[i + j]);
            else
                f[j] = sdpa_bf16_to_f32(((const uint16_t *)src)[i + j]);
        }
        /* i and m are multiples of 32, so chunk i starts on block i / 32 */
        char *out = p + sdpa_dtype_bytes(dst, i);
        const sdpa_status r = sdpa_quantize(dst, f, m, out);
        if (r != SDPA_OK) {
            bench_free(p);
            return NULL;
        }
    }
    return p;
}
