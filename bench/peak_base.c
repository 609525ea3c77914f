/* peak_base.c -- baseline-flags peak kernels: 1-lane scalar multiply-add chains, and a
 * read-bandwidth sum */
/*
 * Built with vectorisation and FP contraction off (bench/meson.build), so that the "scalar" peak
 * is what one lane of plain mul+add can reach: the ceiling a portable C kernel is judged against.
 * The read kernel uses the widest loads the baseline ABI guarantees (SSE2 on x86-64, Advanced
 * SIMD on AArch64), since any CPU running the library can use them.
 */
#include <stddef.h>
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "bench.h"

/* 12 independent chains a = a * b + c: mul+add latency times the two mul/add pipes of current
   cores needs 8-16 in flight; b < 1 and c > 0 keep every value near 1 (no denormals or
   overflow however long it runs). No chain starts at the fixed point c / (1 - b) = 1, which a
   compiler can prove and fold away (the peak kernels of every ISA follow the same rule). */
double bench_fma_scalar(uint64_t iters, float *sink)
{
    const float b = 0.999f, c = 0.001f;
    float a0 = 1.05f, a1 = 1.1f, a2 = 1.2f, a3 = 1.3f, a4 = 1.4f, a5 = 1.5f;
    float a6 = 1.6f, a7 = 1.7f, a8 = 1.8f, a9 = 1.9f, a10 = 2.0f, a11 = 2.1f;
    for (uint64_t i = 0; i < iters; i++) {
        a0 = a0 * b + c;
        a1 = a1 * b + c;
        a2 = a2 * b + c;
        a3 = a3 * b + c;
        a4 = a4 * b + c;
        a5 = a5 * b + c;
        a6 = a6 * b + c;
        a7 = a7 * b + c;
        a8 = a8 * b + c;
        a9 = a9 * b + c;
        a10 = a10 * b + c;
        a11 = a11 * b + c;
    }
    *sink = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    return (double)iters * 12.0 * 2.0;
}

#if defined(__aarch64__)
/* Advanced SIMD is part of armv8-a: 12 chains of 4-lane fused multiply-add. */
double bench_fma_neon(uint64_t iters, float *sink)
{
    const float32x4_t b = vdupq_n_f32(0.999f), c = vdupq_n_f32(0.001f);
    float32x4_t a[12];
    for (int k = 0; k < 12; k++) a[k] = vdupq_n_f32(1.05f + 0.1f * (float)k);
    for (uint64_t i = 0; i < iters; i++) {
        a[0] = vfmaq_f32(c, a[0], b);
        a[1] = vfmaq_f32(c, a[1], b);
        a[2] = vfmaq_f32(c, a[2], b);
        a[3] = vfmaq_f32(c, a[3], b);
        a[4] = vfmaq_f32(c, a[4], b);
        a[5] = vfmaq_f32(c, a[5], b);
        a[6] = vfmaq_f32(c, a[6], b);
        a[7] = vfmaq_f32(c, a[7], b);
        a[8] = vfmaq_f32(c, a[8], b);
        a[9] = vfmaq_f32(c, a[9], b);
        a[10] = vfmaq_f32(c, a[10], b);
        a[11] = vfmaq_f32(c, a[11], b);
    }
    float32x4_t s = a[0];
    for (int k = 1; k < 12; k++) s = vaddq_f32(s, a[k]);
    *sink = vaddvq_f32(s);
    return (double)iters * 12.0 * 4.0 * 2.0;
}
#endif

const char *bench_read_base_name(void)
{
#if defined(__SSE2__)
    return "sse2";
#elif defined(__aarch64__)
    return BENCH_HAVE_NEON;
#else
    return "scalar";
#endif
}

/* Two streams at once, the halves of p[0..n) side by side (see bench_read2_avx512), through
   the one-stream kernel a 256-byte step of each half at a time. */
float bench_read2_base(const float *p, size_t n)
{
    const size_t h = n / 128 * 64;
    float sum = 0.0f;
    for (size_t i = 0; i < h; i += 64)
        sum += bench_read_base(p + i, 64) + bench_read_base(p + h + i, 64);
    for (size_t i = 2 * h; i < n; i++) sum += p[i];
    return sum;
}

/* Eight independent accumulators so that the adds never limit a memory-bound loop. */
float bench_read_base(const float *p, size_t n)
{
    size_t i = 0;
#if defined(__SSE2__)
    __m128 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm_setzero_ps();
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 8; k++) s[k] = _mm_add_ps(s[k], _mm_load_ps(p + i + 4 * k));
    for (int k = 1; k < 8; k++) s[0] = _mm_add_ps(s[0], s[k]);
    float t[4];
    _mm_storeu_ps(t, s[0]);
    float sum = t[0] + t[1] + t[2] + t[3];
#elif defined(__aarch64__)
    float32x4_t s[8];
    for (int k = 0; k < 8; k++) s[k] = vdupq_n_f32(0.0f);
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 8; k++) s[k] = vaddq_f32(s[k], vld1q_f32(p + i + 4 * k));
    for (int k = 1; k < 8; k++) s[0] = vaddq_f32(s[0], s[k]);
    float sum = vaddvq_f32(s[0]);
#else
    float s[8] = {0};
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += p[i + k];
    float sum = 0.0f;
    for (int k = 0; k < 8; k++) sum += s[k];
#endif
    for (; i < n; i++) sum += p[i];
    return sum;
}

/* bench_xor_avx512's read in the baseline's widest loads (16 bytes with SSE2 or NEON). */
uint64_t bench_xor_base(const void *p, size_t bytes)
{
    typedef uint64_t v2 __attribute__((vector_size(16)));
    const v2 *a = (const v2 *)p;
    v2 s0 = {0, 0}, s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 4 <= bytes / 16; i += 4) {
        s0 ^= a[i];
        s1 ^= a[i + 1];
        s2 ^= a[i + 2];
        s3 ^= a[i + 3];
    }
    const v2 s = s0 ^ s1 ^ s2 ^ s3;
    return s[0] ^ s[1];
}
