/* peak_avx512.c -- AVX-512F peak kernels (built with -mavx512f only): 512-bit FMA chains, 512-bit read sum */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h"

/* 16 independent chains of _mm512_fmadd_ps: enough for two 512-bit FMA pipes at 4-6 cycles of
   latency, and with the two constants well inside the 32 zmm registers. */
double bench_fma_avx512(uint64_t iters, float *sink)
{
    const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    __m512 a0 = _mm512_set1_ps(1.05f), a1 = _mm512_set1_ps(1.1f), a2 = _mm512_set1_ps(1.2f);
    __m512 a3 = _mm512_set1_ps(1.3f), a4 = _mm512_set1_ps(1.4f), a5 = _mm512_set1_ps(1.5f);
    __m512 a6 = _mm512_set1_ps(1.6f), a7 = _mm512_set1_ps(1.7f), a8 = _mm512_set1_ps(1.8f);
    __m512 a9 = _mm512_set1_ps(1.9f), a10 = _mm512_set1_ps(2.0f), a11 = _mm512_set1_ps(2.1f);
    __m512 a12 = _mm512_set1_ps(2.2f), a13 = _mm512_set1_ps(2.3f), a14 = _mm512_set1_ps(2.4f);
    __m512 a15 = _mm512_set1_ps(2.5f);
    for (uint64_t i = 0; i < iters; i++) {
        a0 = _mm512_fmadd_ps(a0, b, c);
        a1 = _mm512_fmadd_ps(a1, b, c);
        a2 = _mm512_fmadd_ps(a2, b, c);
        a3 = _mm512_fmadd_ps(a3, b, c);
        a4 = _mm512_fmadd_ps(a4, b, c);
        a5 = _mm512_fmadd_ps(a5, b, c);
        a6 = _mm512_fmadd_ps(a6, b, c);
        a7 = _mm512_fmadd_ps(a7, b, c);
        a8 = _mm512_fmadd_ps(a8, b, c);
        a9 = _mm512_fmadd_ps(a9, b, c);
        a10 = _mm512_fmadd_ps(a10, b, c);
        a11 = _mm512_fmadd_ps(a11, b, c);
        a12 = _mm512_fmadd_ps(a12, b, c);
        a13 = _mm512_fmadd_ps(a13, b, c);
        a14 = _mm512_fmadd_ps(a14, b, c);
        a15 = _mm512_fmadd_ps(a15, b, c);
    }
    __m512 s0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    __m512 s1 = _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7));
    __m512 s2 = _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11));
    __m512 s3 = _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15));
    *sink = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    return (double)iters * 16.0 * 16.0 * 2.0;
}

/* The same sum read as two streams at once, the halves of p[0..n) side by side (4 lines of
   each per step): on some machines one core pulls more from memory through two streams than
   through one, and the bandwidth a kernel is judged against must be the most it can get. */
float bench_read2_avx512(const float *p, size_t n)
{
    const size_t h = n / 128 * 64; /* p[0..h) and p[h..2h), whole 256-byte steps */
    const float *q = p + h;
    __m512 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm512_setzero_ps();
    for (size_t i = 0; i < h; i += 64)
        for (int k = 0; k < 4; k++) {
            s[k] = _mm512_add_ps(s[k], _mm512_load_ps(p + i + 16 * k));
            s[4 + k] = _mm512_add_ps(s[4 + k], _mm512_load_ps(q + i + 16 * k));
        }
    for (int k = 1; k < 8; k++) s[0] = _mm512_add_ps(s[0], s[k]);
    float sum = _mm512_reduce_add_ps(s[0]);
    for (size_t i = 2 * h; i < n; i++) sum += p[i];
    return sum;
}

/* p is 64-byte aligned (bench_alloc_*): every load is one whole cache line. */
float bench_read_avx512(const float *p, size_t n)
{
    __m512 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 128 <= n; i += 128)
        for (int k = 0; k < 8; k++) s[k] = _mm512_add_ps(s[k], _mm512_load_ps(p + i + 16 * k));
    for (int k = 1; k < 8; k++) s[0] = _mm512_add_ps(s[0], s[k]);
    float sum = _mm512_reduce_add_ps(s[0]);
    for (; i < n; i++) sum += p[i];
    return sum;
}
