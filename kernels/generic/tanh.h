/* tanh.h -- the tanh softcap uses: plain C that every implementation's ISA flags vectorise */
#ifndef SDPA_TANH_H
#define SDPA_TANH_H

#include <stddef.h>
#include <stdint.h>

#include "exp_coeffs.h"  /* the Cody-Waite split of ln 2 and the polynomial of e^r */
#include "kernel_util.h" /* sdpa_f32_bits, sdpa_bits_f32 */

/*
 * y = tanh(x), computed on a = |x| with the sign bit of x put back at the end, so the function
 * is odd bit for bit and tanh(-0) = -0. Only + - * / and, where the ISA has it, the fused
 * multiply-add (SDPA_TANH_FMA: one rounding, the same bits on every ISA that fuses; the kernels
 * are compiled with -ffp-contract=off, so nothing else is fused); no libm call. The element
 * function inlines into loops (sdpa_tanh_f32, softcap's) that each ISA's flags vectorise.
 *
 * a < TANH_SMALL (tanh(a) < 0.5006): a + a*(z*P(z)), z = a*a, P of degree 4: a weighted Remez
 * fit of (tanh(a)/a - 1)/z for the relative error of the result on (0, TANH_SMALL], the
 * coefficients rounded to float one at a time with the rest refitted. The correction a*z*P is
 * small beside a, so its roundings add little to the final addition's half ULP. Tiny a: z*P
 * underflows to 0 and y = a exactly.
 *
 * a >= TANH_SMALL (tanh(a) > 0.5, one ULP = 2^-24): tanh(a) = 1 - q, q = 2e/(1 + e) < 0.5,
 * e = e^(-2a) < 0.333: -2a = n ln2 + r (n = round(-2a log2 e) in [-29, -2], a clamped to
 * TANH_CLAMP; r by the two-part ln 2 of exp_coeffs.h), e = 2^n (1 + r + r^2 (1/2 + EXP_C3 r +
 * ...)). e's relative error carries into q, whose ULP (q < 0.5) is at most half the result's;
 * the roundings of 1 + e, of the quotient and of 1 - q add theirs, and the error is largest just
 * above TANH_SMALL. a >= TANH_CLAMP: e < 2^-27, and 1 - q rounds to exactly 1.
 *
 * NaN takes the small branch and propagates; +-inf takes the large one and gives +-1.
 *
 * Stated bound, over every float (error in ULPs of the exact result, a ULP being at least
 * 2^-149): SDPA_TANH_MAX_ULP. tests/test_tanh.c checks it on every non-negative float, and
 * oddness on every negative one, on every implementation.
 */
#define SDPA_TANH_MAX_ULP 2.0

#define TANH_SMALL 0.55f
#define TANH_CLAMP 10.0f
#define TANH_P0    -0x1.55554ap-2f
#define TANH_P1    0x1.110ceep-3f
#define TANH_P2    -0x1.b91e7ep-5f
#define TANH_P3    0x1.58e518p-6f
#define TANH_P4    -0x1.9921a2p-8f
/* 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to an integer, left in the low bits */
#define TANH_ROUND 0x1.8p23f

#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define SDPA_TANH_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define SDPA_TANH_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* tanh of one float, for loops to inline and vectorise. */
static inline __attribute__((always_inline)) float sdpa_tanh1(float x)
{
    const uint32_t xb = sdpa_f32_bits(x);
    const uint32_t ab = xb & 0x7fffffffu;
    const float a = sdpa_bits_f32(ab);

    /* small branch */
    const float z = a * a;
    float p = SDPA_TANH_FMA(TANH_P4, z, TANH_P3);
    p = SDPA_TANH_FMA(p, z, TANH_P2);
    p = SDPA_TANH_FMA(p, z, TANH_P1);
    p = SDPA_TANH_FMA(p, z, TANH_P0);
    const float small = SDPA_TANH_FMA(a, z * p, a);

    /* large branch. The clamp is an integer min of the bits (they order like the values; NaN
       becomes TANH_CLAMP): a float compare lets GCC split off a >= TANH_CLAMP as a constant
       path, and that control flow keeps the loop scalar. */
    const int32_t cb = (int32_t)sdpa_f32_bits(TANH_CLAMP);
    const float ac = sdpa_bits_f32((uint32_t)((int32_t)ab < cb ? (int32_t)ab : cb));
    const float v = -2.0f * ac;
    const float nr = SDPA_TANH_FMA(v, EXP_LOG2E, TANH_ROUND);
    const float nf = nr - TANH_ROUND;
    /* 2^n from the exponent field: (bits(nr) << 23) = n << 23, as bits(TANH_ROUND) << 23 wraps
       to 0 */
    const float two_n = sdpa_bits_f32((sdpa_f32_bits(nr) << 23) + 0x3f800000u);
    const float r = SDPA_TANH_FMA(nf, -EXP_LN2_LO, SDPA_TANH_FMA(nf, -EXP_LN2_HI, v));
    float c = SDPA_TANH_FMA(EXP_C6, r, EXP_C5);
    c = SDPA_TANH_FMA(c, r, EXP_C4);
    c = SDPA_TANH_FMA(c, r, EXP_C3);
    c = SDPA_TANH_FMA(c, r, 0.5f);
    const float em1 = SDPA_TANH_FMA(r * r, c, r); /* e^r - 1 */
    const float e = SDPA_TANH_FMA(two_n, em1, two_n);
    const float large = 1.0f - (e + e) / (1.0f + e);

    /* The branches are selected by bit masks: with ?: GCC moves the large branch (and its
       division, which may trap) under a condition that it then cannot if-convert. */
    const uint32_t big = 0u - (uint32_t)(a >= TANH_SMALL);
    const uint32_t tb = (sdpa_f32_bits(large) & big) | (sdpa_f32_bits(small) & ~big);
    return sdpa_bits_f32(tb | (xb & 0x80000000u));
}

/* y[i] = tanh(x[i]) for i < n; y may equal x (each element is read before it is written). */
static inline void sdpa_tanh_f32(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = sdpa_tanh1(x[i]);
}

#endif /* SDPA_TANH_H */
