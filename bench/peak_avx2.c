/* peak_avx2.c -- AVX2+FMA peak kernels (built with -mavx2 -mfma -mf16c only): 256-bit FMA chains,
 * 256-bit read sum, the decode's arithmetic floor */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h"

/* The sum of x's 8 lanes, in lane order. */
static inline float sum8(__m256 x)
{
    float t[8];
    _mm256_storeu_ps(t, x);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

/* 12 independent chains of _mm256_fmadd_ps: two FMA pipes times a 4-5 cycle latency need 8-10
   in flight, and 12 chains plus two constants still fit the 16 ymm registers. */
double bench_fma_avx2(uint64_t iters, float *sink)
{
    const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
    __m256 a0 = _mm256_set1_ps(1.05f), a1 = _mm256_set1_ps(1.1f), a2 = _mm256_set1_ps(1.2f);
    __m256 a3 = _mm256_set1_ps(1.3f), a4 = _mm256_set1_ps(1.4f), a5 = _mm256_set1_ps(1.5f);
    __m256 a6 = _mm256_set1_ps(1.6f), a7 = _mm256_set1_ps(1.7f), a8 = _mm256_set1_ps(1.8f);
    __m256 a9 = _mm256_set1_ps(1.9f), a10 = _mm256_set1_ps(2.0f), a11 = _mm256_set1_ps(2.1f);
    for (uint64_t i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, b, c);
        a1 = _mm256_fmadd_ps(a1, b, c);
        a2 = _mm256_fmadd_ps(a2, b, c);
        a3 = _mm256_fmadd_ps(a3, b, c);
        a4 = _mm256_fmadd_ps(a4, b, c);
        a5 = _mm256_fmadd_ps(a5, b, c);
        a6 = _mm256_fmadd_ps(a6, b, c);
        a7 = _mm256_fmadd_ps(a7, b, c);
        a8 = _mm256_fmadd_ps(a8, b, c);
        a9 = _mm256_fmadd_ps(a9, b, c);
        a10 = _mm256_fmadd_ps(a10, b, c);
        a11 = _mm256_fmadd_ps(a11, b, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    *sink = sum8(s);
    return (double)iters * 12.0 * 8.0 * 2.0;
}

/* Two streams at once, the halves of p[0..n) side by side (see bench_read2_avx512). */
float bench_read2_avx2(const float *p, size_t n)
{
    const size_t h = n / 128 * 64;
    const float *q = p + h;
    __m256 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm256_setzero_ps();
    for (size_t i = 0; i < h; i += 64)
        for (int k = 0; k < 8; k++) {
            s[k] = _mm256_add_ps(s[k], _mm256_load_ps(p + i + 8 * k));
            s[k] = _mm256_add_ps(s[k], _mm256_load_ps(q + i + 8 * k));
        }
    for (int k = 1; k < 8; k++) s[0] = _mm256_add_ps(s[0], s[k]);
    float sum = sum8(s[0]);
    for (size_t i = 2 * h; i < n; i++) sum += p[i];
    return sum;
}

/* p is 64-byte aligned (bench_alloc_*); eight accumulators keep the adds off the critical path. */
float bench_read_avx2(const float *p, size_t n)
{
    __m256 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 8; k++) s[k] = _mm256_add_ps(s[k], _mm256_load_ps(p + i + 8 * k));
    for (int k = 1; k < 8; k++) s[0] = _mm256_add_ps(s[0], s[k]);
    float sum = sum8(s[0]);
    for (; i < n; i++) sum += p[i];
    return sum;
}

/* bench_xor_avx512's read in 256-bit loads, two per line. */
uint64_t bench_xor_avx2(const void *p, size_t bytes)
{
    const __m256i *a = (const __m256i *)p;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 4 <= bytes / 32; i += 4) {
        s0 = _mm256_xor_si256(s0, _mm256_load_si256(a + i));
        s1 = _mm256_xor_si256(s1, _mm256_load_si256(a + i + 1));
        s2 = _mm256_xor_si256(s2, _mm256_load_si256(a + i + 2));
        s3 = _mm256_xor_si256(s3, _mm256_load_si256(a + i + 3));
    }
    for (; i < bytes / 32; i++) s0 = _mm256_xor_si256(s0, _mm256_load_si256(a + i));
    const __m256i s = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, s);
    return t[0] ^ t[1] ^ t[2] ^ t[3];
}

/* bench_floor_avx512's work in 256-bit vectors (floor_loop.h): per 8 elements one conversion, 8
   score accumulators, P·V passes of NV 8, 4, 2, 1 vectors at 1, 2, 4, 7 rows (R * NV
   accumulators beside the rows' q: the 16 registers). */
static inline __m256 floor_cvt(const uint16_t *p, int bf16)
{
    const __m128i h = _mm_load_si128((const __m128i *)p);
    if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}
#define FLOOR_FN           bench_floor_avx2
#define FLOOR_VEC          __m256
#define FLOOR_W            8
#define FLOOR_ZERO()       _mm256_setzero_ps()
#define FLOOR_SET1(x)      _mm256_set1_ps(x)
#define FLOOR_LOAD(p)      _mm256_load_ps(p)
#define FLOOR_STORE(p, x)  _mm256_store_ps(p, x)
#define FLOOR_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define FLOOR_ADD(a, b)    _mm256_add_ps(a, b)
#define FLOOR_SUM(x)       sum8(x)
#define FLOOR_CVT(p, b)    floor_cvt(p, b)
#define FLOOR_NA           8
#define FLOOR_NV1          8
#define FLOOR_NV2          4
#define FLOOR_NV4          2
#define FLOOR_NV7          1
#include "floor_loop.h"

/* bench_mix_avx512's loop in 256-bit vectors, for the 16-bit formats (fmt 0 f16 `vcvtph2ps`, 1
   bf16 widen and shift): per 8 elements of K, in L1, one conversion feeding 4 rows' FMAs; 8
   accumulators, which with the 4 rows' q and two converted vectors fill the 16 registers.
   Returns the FMA flops. */
#define MIX2_Q 4096
static uint16_t mix2_h[MIX2_Q] __attribute__((aligned(32)));

static inline __m256 mix2_conv(int fmt, size_t i)
{
    const __m128i h = _mm_load_si128((const __m128i *)(mix2_h + i));
    if (fmt == 0) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

#define MIX2_ROWS4(k, a0, a1, a2, a3)                                                              \
    a0 = _mm256_fmadd_ps(q0, k, a0), a1 = _mm256_fmadd_ps(q1, k, a1),                              \
    a2 = _mm256_fmadd_ps(q2, k, a2), a3 = _mm256_fmadd_ps(q3, k, a3)

static inline __attribute__((always_inline)) double mix2_run(int fmt, uint64_t iters, float *sink)
{
    const __m256 q0 = _mm256_set1_ps(0.5f), q1 = _mm256_set1_ps(0.25f), q2 = _mm256_set1_ps(0.125f),
                 q3 = _mm256_set1_ps(0.0625f);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (uint64_t it = 0; it < iters; it++)
        for (size_t i = 0; i < MIX2_Q; i += 16) {
            const __m256 k0 = mix2_conv(fmt, i), k1 = mix2_conv(fmt, i + 8);
            MIX2_ROWS4(k0, a0, a1, a2, a3);
            MIX2_ROWS4(k1, a4, a5, a6, a7);
        }
    const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                   _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    *sink = sum8(s);
    return (double)iters * (MIX2_Q / 8) * 4.0 * 8.0 * 2.0;
}

double bench_mix_avx2(int fmt, uint64_t iters, float *sink)
{
    for (size_t i = 0; i < MIX2_Q; i++) mix2_h[i] = (uint16_t)(0x3800u + (i & 255u));
    return fmt == 0 ? mix2_run(0, iters, sink) : mix2_run(1, iters, sink);
}
