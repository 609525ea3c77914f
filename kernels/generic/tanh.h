/* tanh.h -- the tanh softcap uses: plain C that every implementation's ISA flags vectorise */
#ifndef SDPA_TANH_H
#define SDPA_TANH_H

#include <stddef.h>
#include <stdint.h>

#include "exp_coeffs.h" /* the Cody-Waite split of ln 2 and the polynomial of e^r */

/*
 * y = tanh(x), computed on a = |x| with the sign bit of x put back at the end, so the function
 * is odd bit for bit and tanh(-0) = -0. Only correctly rounded + - * / (no libm call, no fused
 * operation: the kernels are compiled with -ffp-contract=off), so every implementation, scalar
 * included, gives the same bits; the one loop is vectorised by each implementation's flags.
 *
 * a < TANH_SMALL (tanh(a) < 0.5006): a + a*(z*P(z)), z = a*a, P of degree 4: a weighted Remez
 * fit of (tanh(a)/a - 1)/z for the relative error of the result on a in (0, TANH_SMALL], the
 * coefficients rounded to float one at a time with the rest refitted: relative error 1.14e-9
 * (0.02 ULP). The correction a*z*P is at most 10 % of the result, so its few roundings add
 * little to the final addition's half ULP. Tiny a: z*P underflows to 0 and y = a exactly.
 *
 * a >= TANH_SMALL (tanh(a) > 0.5, one ULP = 2^-24): tanh(a) = 1 - q, q = 2e/(1 + e) < 0.5,
 * e = e^(-2a) < 0.333. The roundings on the way to q are compensated, so that what is left is
 * the final subtraction (0.5 ULP), the roundings of q and of its correction (0.125 ULP each, as
 * q < 0.5) and the exponential's polynomial:
 *   -2a = n ln2 + r, n = round(-2a log2 e) in [-29, -2] (a clamped to TANH_CLAMP), rh =
 *   -2a - n*EXP_LN2_HI exact (n*EXP_LN2_HI is exact, the difference by Sterbenz's lemma);
 *   e = 2^n (1 + s), s = e^r - 1 = r + r^2 (1/2 + EXP_C3 r + ...).
 *   s = sh + sl, e = eh + el and 1 + e = dh + dl each carry the rounding error of their last
 *   addition (Fast2Sum: exact when the first operand is the larger, which fails only for
 *   s = rh + w with |rh| < 5e-5, where the lost part is far below e's ULP).
 *   q0 = 2eh / dh rounded; to first order q = 2(eh + el) / (dh + dl) = q0 - (q0 dl - 2 el) / dh,
 *   with 1/dh = 1 - q0/2.
 * Without the compensations (1 - 2e/(1 + e) from a rounded e) the maximum is 1.53 ULP.
 * a >= TANH_CLAMP: e < 2^-27, and 1 - q rounds to exactly 1.
 *
 * NaN takes the small branch and propagates; +-inf takes the large one and gives +-1.
 *
 * Stated bound, over every float (error in ULPs of the exact result, a ULP being at least
 * 2^-149): SDPA_TANH_MAX_ULP. tests/test_tanh.c checks it on every non-negative float, and
 * oddness on every negative one, on every implementation. Measured maximum: 1.044 ULP at
 * x = 0.552490532, in the large branch (the small one's: 0.77 ULP).
 */
#define SDPA_TANH_MAX_ULP 1.5

#define TANH_SMALL 0.55f
#define TANH_CLAMP 10.0f
#define TANH_P0    -0x1.55554ap-2f
#define TANH_P1    0x1.110ceep-3f
#define TANH_P2    -0x1.b91e7ep-5f
#define TANH_P3    0x1.58e518p-6f
#define TANH_P4    -0x1.9921a2p-8f
/* 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to an integer, left in the low bits */
#define TANH_ROUND 0x1.8p23f

/* Bit casts through a union: GCC keeps them in registers and vectorises them as no-ops. */
typedef union sdpa_tanh_pun {
    float f;
    uint32_t u;
} sdpa_tanh_pun;
static inline uint32_t sdpa_tanh_bits(float f) { return (sdpa_tanh_pun){.f = f}.u; }
static inline float sdpa_tanh_float(uint32_t u) { return (sdpa_tanh_pun){.u = u}.f; }

/* y[i] = tanh(x[i]) for i < n; y may equal x (each element is read before it is written). */
static inline void sdpa_tanh_f32(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t xb = sdpa_tanh_bits(x[i]);
        const uint32_t ab = xb & 0x7fffffffu;
        const float a = sdpa_tanh_float(ab);

        /* small branch */
        const float z = a * a;
        float p = TANH_P4 * z + TANH_P3;
        p = p * z + TANH_P2;
        p = p * z + TANH_P1;
        p = p * z + TANH_P0;
        const float small = a + a * (z * p);

        /* large branch. The clamp is an integer min of the bits (they order like the values;
           NaN becomes TANH_CLAMP): a float compare lets GCC split off a >= TANH_CLAMP as a
           constant path, and that control flow keeps the loop scalar. */
        const int32_t cb = (int32_t)sdpa_tanh_bits(TANH_CLAMP);
        const float ac = sdpa_tanh_float((uint32_t)((int32_t)ab < cb ? (int32_t)ab : cb));
        const float v = -2.0f * ac;
        const float nr = v * EXP_LOG2E + TANH_ROUND;
        const float nf = nr - TANH_ROUND;
        /* 2^n from the exponent field: (bits(nr) << 23) = n << 23, as bits(TANH_ROUND) << 23
           wraps to 0 */
        const float two_n = sdpa_tanh_float((sdpa_tanh_bits(nr) << 23) + 0x3f800000u);
        const float rh = v - nf * EXP_LN2_HI;
        const float rl = nf * EXP_LN2_LO;
        const float r = rh - rl;
        float c = EXP_C6 * r + EXP_C5;
        c = c * r + EXP_C4;
        c = c * r + EXP_C3;
        c = c * r + 0.5f;
        const float w = r * (r * c) - rl;
        const float sh = rh + w;
        const float sl = w - (sh - rh);
        const float m = two_n * sh; /* exact */
        const float eh = two_n + m;
        const float el = (m - (eh - two_n)) + two_n * sl;
        const float dh = 1.0f + eh;
        const float dl = (eh - (dh - 1.0f)) + el;
        const float q0 = (eh + eh) / dh;
        const float dq = (q0 * dl - (el + el)) * (1.0f - 0.5f * q0);
        const float large = 1.0f - (q0 - dq);

        /* The branches are selected by bit masks: with ?: GCC moves the large branch (and its
           division, which may trap) under a condition that it then cannot if-convert. */
        const uint32_t big = 0u - (uint32_t)(a >= TANH_SMALL);
        const uint32_t tb = (sdpa_tanh_bits(large) & big) | (sdpa_tanh_bits(small) & ~big);
        y[i] = sdpa_tanh_float(tb | (xb & 0x80000000u));
    }
}

#endif /* SDPA_TANH_H */
