/* neon.c -- the armv8-a Advanced SIMD (NEON) implementation: primitives, exp, fused tile kernels */
#include <arm_neon.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "convert.h"
#include "kernel_table.h"
#include "kernel_util.h"


/* ------------------------------------------------------------------------------------------ */
/* exp                                                                                         */
/* ------------------------------------------------------------------------------------------ */

#include "exp_coeffs.h" /* the exp every SIMD implementation shares */

SDPA_INLINE float32x4_t exp_neon_v(float32x4_t x)
{
    /* Below -104 every result rounds to 0 and above 89 to inf, so clamping loses nothing and keeps
       n in [-150, 129]. FMAX/FMIN return NaN for a NaN input, so NaN flows through to the end. */
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(EXP_LO)), vdupq_n_f32(EXP_HI));
    const float32x4_t nf = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(EXP_LOG2E)));
    float32x4_t r = vfmsq_f32(x, nf, vdupq_n_f32(EXP_LN2_HI));
    r = vfmsq_f32(r, nf, vdupq_n_f32(EXP_LN2_LO));

    float32x4_t q = vfmaq_f32(vdupq_n_f32(EXP_C5), r, vdupq_n_f32(EXP_C6));
    q = vfmaq_f32(vdupq_n_f32(EXP_C4), r, q);
    q = vfmaq_f32(vdupq_n_f32(EXP_C3), r, q);
    q = vfmaq_f32(vdupq_n_f32(0.5f), r, q);
    q = vfmaq_f32(vdupq_n_f32(1.0f), r, q);
    const float32x4_t p = vfmaq_f32(vdupq_n_f32(1.0f), r, q);

    /* 2^n as 2^n1 * 2^n2, n1 = floor(n/2): both factors are normal floats for every n in range,
       p * 2^n1 is exact and only the second product rounds, so results in the subnormal range
       (x down to about -103.97) are correctly scaled with a single rounding, and large x
       overflows to inf instead of wrapping the exponent field. */
    const int32x4_t n = vcvtq_s32_f32(nf); /* NaN converts to 0; p is already NaN */
    const int32x4_t n1 = vshrq_n_s32(n, 1);
    const int32x4_t n2 = vsubq_s32(n, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

static void exp_f32_neon(const float *x, float *y, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, exp_neon_v(vld1q_f32(x + i)));
    if (i < n) { /* the tail through a padded copy: never touches memory past x[n-1] / y[n-1] */
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        memcpy(t, x + i, (n - i) * sizeof *t);
        vst1q_f32(t, exp_neon_v(vld1q_f32(t)));
        memcpy(y + i, t, (n - i) * sizeof *t);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The three primitives                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Loads n < 4 floats into the low lanes of a vector whose other lanes are `fill`. */
SDPA_INLINE float32x4_t load_partial_neon(const float *p, size_t n, float fill)
{
    float t[4] = {fill, fill, fill, fill};
    memcpy(t, p, n * sizeof *t);
    return vld1q_f32(t);
}

SDPA_INLINE void store_partial_neon(float *p, size_t n, float32x4_t x)
{
    float t[4];
    vst1q_f32(t, x);
    memcpy(p, t, n * sizeof *t);
}

/* The d-dot products of q with four keys; four independent FMA chains hide FMA latency. */
static void score_f32_neon(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                       float scale, float *s)
{
    const size_t d4 = d & ~(size_t)3, dr = d - d4;
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *k0 = k + j * k_stride, *k1 = k0 + k_stride, *k2 = k1 + k_stride,
                    *k3 = k2 + k_stride;
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
        for (size_t c = 0; c < d4; c += 4) {
            const float32x4_t qv = vld1q_f32(q + c);
            a0 = vfmaq_f32(a0, qv, vld1q_f32(k0 + c));
            a1 = vfmaq_f32(a1, qv, vld1q_f32(k1 + c));
            a2 = vfmaq_f32(a2, qv, vld1q_f32(k2 + c));
            a3 = vfmaq_f32(a3, qv, vld1q_f32(k3 + c));
        }
        if (dr) {
            const float32x4_t qv = load_partial_neon(q + d4, dr, 0.0f);
            a0 = vfmaq_f32(a0, qv, load_partial_neon(k0 + d4, dr, 0.0f));
            a1 = vfmaq_f32(a1, qv, load_partial_neon(k1 + d4, dr, 0.0f));
            a2 = vfmaq_f32(a2, qv, load_partial_neon(k2 + d4, dr, 0.0f));
            a3 = vfmaq_f32(a3, qv, load_partial_neon(k3 + d4, dr, 0.0f));
        }
        /* pairwise adds put the four sums in one vector, lane i for key j + i */
        const float32x4_t sum = vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3));
        vst1q_f32(s + j, vmulq_n_f32(sum, scale));
    }
    for (; j < n; j++) {
        const float *kj = k + j * k_stride;
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
        size_t c = 0;
        for (; c + 8 <= d4; c += 8) {
            a0 = vfmaq_f32(a0, vld1q_f32(q + c), vld1q_f32(kj + c));
            a1 = vfmaq_f32(a1, vld1q_f32(q + c + 4), vld1q_f32(kj + c + 4));
        }
        if (c < d4) a0 = vfmaq_f32(a0, vld1q_f32(q + c), vld1q_f32(kj + c));
        if (dr)
            a1 = vfmaq_f32(a1, load_partial_neon(q + d4, dr, 0.0f),
                           load_partial_neon(kj + d4, dr, 0.0f));
        s[j] = scale * vaddvq_f32(vaddq_f32(a0, a1));
    }
}

/* NaN-propagating maximum, as FMAX: a NaN on either side wins. */
SDPA_INLINE float max_nan_neon(float a, float b)
{
    return vgetq_lane_f32(vmaxq_f32(vdupq_n_f32(a), vdupq_n_f32(b)), 0);
}

static float softmax_online_f32_neon(float *s, size_t n, float *m, float *l)
{
    const size_t n4 = n & ~(size_t)3, nr = n - n4;
    /* Block maximum with FMAX/FMAXV, which propagate NaN: a NaN score makes m_new, every p and
       hence l NaN, even in a block whose other scores are all -inf. Tail lanes are padded with
       -inf, which is neutral for the max and gives p = 0 for the sum. */
    float32x4_t vmx = vdupq_n_f32(-INFINITY);
    for (size_t i = 0; i < n4; i += 4) vmx = vmaxq_f32(vmx, vld1q_f32(s + i));
    if (nr) vmx = vmaxq_f32(vmx, load_partial_neon(s + n4, nr, -INFINITY));
    const float m_old = *m;
    const float m_new = max_nan_neon(m_old, vmaxvq_f32(vmx));
    if (m_new == -INFINITY) { /* nothing but -inf so far: weights 0, state unchanged */
        memset(s, 0, n * sizeof *s);
        return 1.0f;
    }
    const float32x4_t vm = vdupq_n_f32(m_new);
    const float alpha = vgetq_lane_f32(exp_neon_v(vdupq_n_f32(m_old - m_new)), 0);
    float32x4_t sum0 = vdupq_n_f32(0.0f), sum1 = sum0;
    size_t i = 0;
    for (; i + 8 <= n4; i += 8) {
        const float32x4_t p0 = exp_neon_v(vsubq_f32(vld1q_f32(s + i), vm));
        const float32x4_t p1 = exp_neon_v(vsubq_f32(vld1q_f32(s + i + 4), vm));
        vst1q_f32(s + i, p0);
        vst1q_f32(s + i + 4, p1);
        sum0 = vaddq_f32(sum0, p0);
        sum1 = vaddq_f32(sum1, p1);
    }
    if (i < n4) {
        const float32x4_t p0 = exp_neon_v(vsubq_f32(vld1q_f32(s + i), vm));
        vst1q_f32(s + i, p0);
        sum0 = vaddq_f32(sum0, p0);
    }
    if (nr) {
        const float32x4_t p = exp_neon_v(vsubq_f32(load_partial_neon(s + n4, nr, -INFINITY), vm));
        store_partial_neon(s + n4, nr, p);
        sum1 = vaddq_f32(sum1, p);
    }
    *m = m_new;
    *l = alpha * *l + vaddvq_f32(vaddq_f32(sum0, sum1));
    return alpha;
}

static void accumulate_f32_neon(float *o, float alpha, const float *p, const float *v,
                            size_t v_stride, size_t n, size_t dv)
{
    size_t c = 0;
    /* 16 columns at a time stay in four registers across all n value rows */
    for (; c + 16 <= dv; c += 16) {
        float32x4_t a0 = vmulq_n_f32(vld1q_f32(o + c), alpha);
        float32x4_t a1 = vmulq_n_f32(vld1q_f32(o + c + 4), alpha);
        float32x4_t a2 = vmulq_n_f32(vld1q_f32(o + c + 8), alpha);
        float32x4_t a3 = vmulq_n_f32(vld1q_f32(o + c + 12), alpha);
        for (size_t j = 0; j < n; j++) {
            const float *vj = v + j * v_stride + c;
            a0 = vfmaq_n_f32(a0, vld1q_f32(vj), p[j]);
            a1 = vfmaq_n_f32(a1, vld1q_f32(vj + 4), p[j]);
            a2 = vfmaq_n_f32(a2, vld1q_f32(vj + 8), p[j]);
            a3 = vfmaq_n_f32(a3, vld1q_f32(vj + 12), p[j]);
        }
        vst1q_f32(o + c, a0);
        vst1q_f32(o + c + 4, a1);
        vst1q_f32(o + c + 8, a2);
        vst1q_f32(o + c + 12, a3);
    }
    for (; c + 4 <= dv; c += 4) {
        float32x4_t a0 = vmulq_n_f32(vld1q_f32(o + c), alpha);
        for (size_t j = 0; j < n; j++) a0 = vfmaq_n_f32(a0, vld1q_f32(v + j * v_stride + c), p[j]);
        vst1q_f32(o + c, a0);
    }
    if (c < dv) {
        const size_t r = dv - c;
        float32x4_t a0 = vmulq_n_f32(load_partial_neon(o + c, r, 0.0f), alpha);
        for (size_t j = 0; j < n; j++)
            a0 = vfmaq_n_f32(a0, load_partial_neon(v + j * v_stride + c, r, 0.0f), p[j]);
        store_partial_neon(o + c, r, a0);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Fused tile kernels for rows_loop.h                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Packed keys of a block of nb: keys [0, n16) in panels of 16, then [n16, n4) in panels of 4,
   then the last nb % 4 keys row by row. A panel of width W starting at key c0 sits at
   kp + c0 * d and holds element dd of its key c at [dd * W + c], so one vector load gives the
   same dimension of 4 consecutive keys: a score tile is then broadcast-q x K-vector FMAs.
   The layout needs exactly nb * d floats. */
#define SDPA_KPAD(d) (d)
#define TILE_MR 4 /* query rows per micro-kernel */

/* 4 consecutive elements of a K or V row, converted exactly to f32. */
SDPA_INLINE float32x4_t load4_neon(const void *base, ptrdiff_t off, sdpa_dtype t)
{
    if (t == SDPA_F32) return vld1q_f32((const float *)base + off);
    const uint16x4_t h = vld1_u16((const uint16_t *)base + off);
    if (t == SDPA_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

SDPA_INLINE float load1_neon(const void *base, ptrdiff_t off, sdpa_dtype t)
{
    if (t == SDPA_F32) return ((const float *)base)[off];
    const uint16_t h = ((const uint16_t *)base)[off];
    return t == SDPA_F16 ? sdpa_f16_to_f32(h) : sdpa_bf16_to_f32(h);
}

/* Stores rows r0..r3 (4 keys, 4 consecutive dimensions each) transposed into a panel of width W:
   dst[i * W + c] = element i of key c. */
SDPA_INLINE void store_4x4t_neon(float32x4_t r0, float32x4_t r1, float32x4_t r2, float32x4_t r3,
                                 float *dst, size_t W)
{
    const float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
    const float64x2_t t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
    const float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
    const float64x2_t t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
    vst1q_f32(dst, vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)));
    vst1q_f32(dst + W, vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)));
    vst1q_f32(dst + 2 * W, vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)));
    vst1q_f32(dst + 3 * W, vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)));
}

/* Transposes the 4x4 block of keys c..c+3, dimensions dd..dd+3 into the panel (width W). */
SDPA_INLINE void pack_4x4_neon(const void *k, ptrdiff_t ks, ptrdiff_t row0, size_t dd,
                               sdpa_dtype t, float *dst, size_t W)
{
    const ptrdiff_t o = row0 * ks + (ptrdiff_t)dd;
    store_4x4t_neon(load4_neon(k, o, t), load4_neon(k, o + ks, t), load4_neon(k, o + 2 * ks, t),
                    load4_neon(k, o + 3 * ks, t), dst, W);
}

/* The f16 scale of a q8_0/q4_0 block at p, exactly to f32. */
SDPA_INLINE float qscale_neon(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* The 32 quants of a q8_0/q4_0 block at p as int8 (q4_0's nibbles n as n - 8), elements
   0..15 in *lo and 16..31 in *hi. */
SDPA_INLINE void quants_neon(const unsigned char *p, sdpa_dtype t, int8x16_t *lo, int8x16_t *hi)
{
    if (t == SDPA_Q8_0) {
        *lo = vld1q_s8((const int8_t *)(p + 2));
        *hi = vld1q_s8((const int8_t *)(p + 2 + 16));
    } else {
        const uint8x16_t x = vld1q_u8(p + 2);
        *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(15))), vdupq_n_s8(8));
        *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(x, 4)), vdupq_n_s8(8));
    }
}

/* int8 x 16 -> four float32x4 (exact), each times d: d q is exact in f32 (an f16 times a
   small integer), as the scalar dequantizer gives it. */
SDPA_INLINE void widen_q_neon(int8x16_t q, float32x4_t d, float32x4_t *y)
{
    const int16x8_t a = vmovl_s8(vget_low_s8(q)), b = vmovl_high_s8(q);
    y[0] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(a))), d);
    y[1] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(a)), d);
    y[2] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(b))), d);
    y[3] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(b)), d);
}

/* One q8_0/q4_0 block at p dequantized to y[0..8) (elements 4i..4i+3 in y[i]). */
SDPA_INLINE void dequant_block_neon(const unsigned char *p, sdpa_dtype t, float32x4_t *y)
{
    const float32x4_t d = vdupq_n_f32(qscale_neon(p));
    int8x16_t lo, hi;
    quants_neon(p, t, &lo, &hi);
    widen_q_neon(lo, d, y);
    widen_q_neon(hi, d, y + 4);
}

/* A q8_0/q4_0 panel of W keys: four keys at a time, each block dequantized in registers half
   by half (16 elements of 4 keys: 16 vectors) and transposed 4x4 into the panel (d is a
   multiple of 32). */
SDPA_INLINE void pack_panel_q_neon(const void *k, ptrdiff_t ks, ptrdiff_t row0, size_t d,
                                   sdpa_dtype t, size_t W, float *dst)
{
    const size_t bb = sdpa_block_bytes((int)t);
    for (size_t g = 0; g < W; g += 4) {
        const unsigned char *r[4];
        for (int i = 0; i < 4; i++)
            r[i] = (const unsigned char *)k +
                   sdpa_off_bytes((int)t, (row0 + (ptrdiff_t)(g + (size_t)i)) * ks);
        for (size_t b = 0; b < d / SDPA_QK; b++) {
            float32x4_t dk[4];
            int8x16_t q[4][2];
            for (int i = 0; i < 4; i++) {
                dk[i] = vdupq_n_f32(qscale_neon(r[i] + b * bb));
                quants_neon(r[i] + b * bb, t, &q[i][0], &q[i][1]);
            }
            for (int h = 0; h < 2; h++) {
                float32x4_t y[4][4];
                for (int i = 0; i < 4; i++) widen_q_neon(q[i][h], dk[i], y[i]);
                float *col = dst + (b * SDPA_QK + 16 * (size_t)h) * W + g;
                for (int x = 0; x < 4; x++)
                    store_4x4t_neon(y[0][x], y[1][x], y[2][x], y[3][x], col + 4 * (size_t)x * W, W);
            }
        }
    }
}

/* One panel of W (4 or 16) keys starting at row `row0` of k. */
SDPA_INLINE void pack_panel_neon(const void *k, ptrdiff_t ks, ptrdiff_t row0, size_t d,
                                 sdpa_dtype t, size_t W, float *dst)
{
    if (sdpa_dtype_quantized((int)t)) {
        pack_panel_q_neon(k, ks, row0, d, t, W, dst);
        return;
    }
    size_t dd = 0;
    for (; dd + 4 <= d; dd += 4)
        for (size_t g = 0; g < W; g += 4)
            pack_4x4_neon(k, ks, row0 + (ptrdiff_t)g, dd, t, dst + dd * W + g, W);
    for (; dd < d; dd++)
        for (size_t c = 0; c < W; c++)
            dst[dd * W + c] = load1_neon(k, (row0 + (ptrdiff_t)c) * ks + (ptrdiff_t)dd, t);
}

/* One row of n elements (element offset off) converted to f32; for q8_0/q4_0 n and off are
   multiples of 32. */
SDPA_INLINE void row_to_f32_neon(const void *src, ptrdiff_t off, size_t n, sdpa_dtype t,
                                 float *dst)
{
    if (sdpa_dtype_quantized((int)t)) {
        const unsigned char *p = (const unsigned char *)src + sdpa_off_bytes((int)t, off);
        const size_t bb = sdpa_block_bytes((int)t);
        for (size_t b = 0; b < n / SDPA_QK; b++) {
            float32x4_t y[8];
            dequant_block_neon(p + b * bb, t, y);
            for (int i = 0; i < 8; i++) vst1q_f32(dst + b * SDPA_QK + 4 * (size_t)i, y[i]);
        }
        return;
    }
    size_t c = 0;
    for (; c + 4 <= n; c += 4) vst1q_f32(dst + c, load4_neon(src, off + (ptrdiff_t)c, t));
    for (; c < n; c++) dst[c] = load1_neon(src, off + (ptrdiff_t)c, t);
}

SDPA_INLINE void pack_k_typed_neon(const sdpa_rows *w, size_t j0, size_t nb, float *kp,
                                   sdpa_dtype t)
{
    const size_t d = w->d;
    const ptrdiff_t ks = w->k_stride;
    size_t c = 0;
    for (; c + 16 <= nb; c += 16)
        pack_panel_neon(w->k, ks, (ptrdiff_t)(j0 + c), d, t, 16, kp + c * d);
    for (; c + 4 <= nb; c += 4)
        pack_panel_neon(w->k, ks, (ptrdiff_t)(j0 + c), d, t, 4, kp + c * d);
    for (; c < nb; c++) row_to_f32_neon(w->k, (ptrdiff_t)(j0 + c) * ks, d, t, kp + c * d);
}

static void pack_k(const sdpa_rows *w, size_t j0, size_t nb, float *kp)
{
    /* one specialised copy per storage type, so the per-element conversion is branch-free */
    switch (w->k_type) {
    case SDPA_F16: pack_k_typed_neon(w, j0, nb, kp, SDPA_F16); break;
    case SDPA_BF16: pack_k_typed_neon(w, j0, nb, kp, SDPA_BF16); break;
    case SDPA_Q8_0: pack_k_typed_neon(w, j0, nb, kp, SDPA_Q8_0); break;
    case SDPA_Q4_0: pack_k_typed_neon(w, j0, nb, kp, SDPA_Q4_0); break;
    default: pack_k_typed_neon(w, j0, nb, kp, SDPA_F32); break;
    }
}

/* S[r][0..4*NV) = dot(q_r, keys of a panel of width 4*NV) for r < mr (mr <= 4 and NV are
   compile-time constants after inlining, so acc stays in registers). Four dimensions per step:
   one q load per row, lane-indexed FMAs (FMLA by element) against the K vectors. */
SDPA_INLINE void score_neon_mxn(const float *q, size_t d, const float *kp, float *S, size_t lds,
                                const int mr, const int NV)
{
    const size_t W = 4 * (size_t)NV;
    float32x4_t acc[TILE_MR][4];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = vdupq_n_f32(0.0f);
    size_t dd = 0;
    for (; dd + 4 <= d; dd += 4) {
        float32x4_t qv[TILE_MR];
        for (int r = 0; r < mr; r++) qv[r] = vld1q_f32(q + r * d + dd);
#define SCORE_STEP(L)                                                                          \
    do {                                                                                       \
        const float *kr = kp + (dd + (L)) * W;                                                 \
        for (int v = 0; v < NV; v++) {                                                         \
            const float32x4_t kv = vld1q_f32(kr + 4 * v);                                      \
            for (int r = 0; r < mr; r++) acc[r][v] = vfmaq_laneq_f32(acc[r][v], kv, qv[r], L); \
        }                                                                                      \
    } while (0)
        SCORE_STEP(0);
        SCORE_STEP(1);
        SCORE_STEP(2);
        SCORE_STEP(3);
#undef SCORE_STEP
    }
    for (; dd < d; dd++)
        for (int v = 0; v < NV; v++) {
            const float32x4_t kv = vld1q_f32(kp + dd * W + 4 * v);
            for (int r = 0; r < mr; r++) acc[r][v] = vfmaq_n_f32(acc[r][v], kv, q[r * d + dd]);
        }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < NV; v++) vst1q_f32(S + r * lds + 4 * v, acc[r][v]);
}

/* Instantiations named after their register block, rows x keys. */
static void score_neon_4x16(const float *q, size_t d, const float *kp, float *S, size_t lds)
{
    score_neon_mxn(q, d, kp, S, lds, 4, 4);
}
static void score_neon_4x4(const float *q, size_t d, const float *kp, float *S, size_t lds)
{
    score_neon_mxn(q, d, kp, S, lds, 4, 1);
}

static void score_panel_neon(const float *q, size_t mr, size_t d, const float *kp, float *S,
                             size_t lds, size_t W)
{
    if (W == 16) {
        switch (mr) {
        case 4: score_neon_4x16(q, d, kp, S, lds); break;
        case 3: score_neon_mxn(q, d, kp, S, lds, 3, 4); break;
        case 2: score_neon_mxn(q, d, kp, S, lds, 2, 4); break;
        default: score_neon_mxn(q, d, kp, S, lds, 1, 4); break;
        }
    } else {
        switch (mr) {
        case 4: score_neon_4x4(q, d, kp, S, lds); break;
        case 3: score_neon_mxn(q, d, kp, S, lds, 3, 1); break;
        case 2: score_neon_mxn(q, d, kp, S, lds, 2, 1); break;
        default: score_neon_mxn(q, d, kp, S, lds, 1, 1); break;
        }
    }
}

static void score_tile(const float *q, size_t ra, size_t d, const float *kp, size_t nb, float *S,
                       size_t lds)
{
    const size_t n16 = nb & ~(size_t)15, n4 = nb & ~(size_t)3;
    for (size_t r0 = 0; r0 < ra; r0 += TILE_MR) {
        const size_t mr = ra - r0 < TILE_MR ? ra - r0 : TILE_MR;
        const float *qr = q + r0 * d;
        float *Sr = S + r0 * lds;
        size_t c = 0;
        for (; c < n16; c += 16) score_panel_neon(qr, mr, d, kp + c * d, Sr + c, lds, 16);
        for (; c < n4; c += 4) score_panel_neon(qr, mr, d, kp + c * d, Sr + c, lds, 4);
        /* the last nb % 4 keys are packed row by row: plain dot products */
        if (c < nb)
            for (size_t r = 0; r < mr; r++)
                score_f32_neon(qr + r * d, kp + c * d, d, nb - c, d, 1.0f, Sr + r * lds + c);
    }
}

#define softmax_row softmax_online_f32_neon

/* pack_v: the generic one in rows_loop.h, converting with this ISA's row converter */
#define SDPA_ROW_TO_F32 row_to_f32_neon

/* acc[r][c..c+4*NV) = alpha[r] * acc + sum_j P[r][j] * v[j][c..] for r < mr: the column block of
   mr rows stays in registers over all nb keys; four keys per step, each P[r][j..j+3] loaded once
   and used lane by lane. */
SDPA_INLINE void pv_neon_mxn(float *acc, size_t dv, const float *alpha, const float *P,
                             size_t lds, const float *v, ptrdiff_t vs, size_t nb, const int mr,
                             const int NV)
{
    float32x4_t a[TILE_MR][4];
    for (int r = 0; r < mr; r++)
        for (int x = 0; x < NV; x++)
            a[r][x] = vmulq_n_f32(vld1q_f32(acc + r * dv + 4 * x), alpha[r]);
    size_t j = 0;
    for (; j + 4 <= nb; j += 4) {
        float32x4_t pv[TILE_MR];
        for (int r = 0; r < mr; r++) pv[r] = vld1q_f32(P + r * lds + j);
#define PV_STEP(L)                                                                             \
    do {                                                                                       \
        const float *vr = v + (ptrdiff_t)(j + (L)) * vs;                                       \
        for (int x = 0; x < NV; x++) {                                                         \
            const float32x4_t vv = vld1q_f32(vr + 4 * x);                                      \
            for (int r = 0; r < mr; r++) a[r][x] = vfmaq_laneq_f32(a[r][x], vv, pv[r], L);     \
        }                                                                                      \
    } while (0)
        PV_STEP(0);
        PV_STEP(1);
        PV_STEP(2);
        PV_STEP(3);
#undef PV_STEP
    }
    for (; j < nb; j++)
        for (int x = 0; x < NV; x++) {
            const float32x4_t vv = vld1q_f32(v + (ptrdiff_t)j * vs + 4 * x);
            for (int r = 0; r < mr; r++) a[r][x] = vfmaq_n_f32(a[r][x], vv, P[r * lds + j]);
        }
    for (int r = 0; r < mr; r++)
        for (int x = 0; x < NV; x++) vst1q_f32(acc + r * dv + 4 * x, a[r][x]);
}

static void pv_neon_4x16(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
                         const float *v, ptrdiff_t vs, size_t nb)
{
    pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, 4, 4);
}

static void pv_block_neon(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
                          const float *v, ptrdiff_t vs, size_t nb, size_t mr, size_t W)
{
    if (W == 16) {
        switch (mr) {
        case 4: pv_neon_4x16(acc, dv, alpha, P, lds, v, vs, nb); break;
        case 3: pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, 3, 4); break;
        case 2: pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, 2, 4); break;
        default: pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, 1, 4); break;
        }
    } else {
        switch (mr) {
        case 4: pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, 4, 1); break;
        case 3: pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, 3, 1); break;
        case 2: pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, 2, 1); break;
        default: pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, 1, 1); break;
        }
    }
}

static void pv_tile(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
                    size_t ra, const float *v, ptrdiff_t vs, size_t nb)
{
    const size_t c16 = dv & ~(size_t)15, c4 = dv & ~(size_t)3;
    for (size_t r0 = 0; r0 < ra; r0 += TILE_MR) {
        const size_t mr = ra - r0 < TILE_MR ? ra - r0 : TILE_MR;
        float *ar = acc + r0 * dv;
        const float *Pr = P + r0 * lds;
        size_t c = 0;
        for (; c < c16; c += 16)
            pv_block_neon(ar + c, dv, alpha + r0, Pr, lds, v + c, vs, nb, mr, 16);
        for (; c < c4; c += 4)
            pv_block_neon(ar + c, dv, alpha + r0, Pr, lds, v + c, vs, nb, mr, 4);
        if (c < dv) /* the last dv % 4 columns, one row at a time through padded vectors */
            for (size_t r = 0; r < mr; r++) {
                const size_t rem = dv - c;
                float32x4_t x =
                    vmulq_n_f32(load_partial_neon(ar + r * dv + c, rem, 0.0f), alpha[r0 + r]);
                for (size_t j = 0; j < nb; j++)
                    x = vfmaq_n_f32(x, load_partial_neon(v + (ptrdiff_t)j * vs + c, rem, 0.0f),
                                    Pr[r * lds + j]);
                store_partial_neon(ar + r * dv + c, rem, x);
            }
    }
}

/* Fast scores (sdpa_rows.qq). Key j's 32-quant blocks at kq + j * d as int8 (q4_0's nibbles
   expanded to n - 8), its block scales at kd[b * nb + j], so that four keys' scales of a block
   are one load. Every query row of the unit reuses them. */
static void pack_kq(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd)
{
    const sdpa_dtype t = w->k_type;
    const size_t d = w->d, bb = sdpa_block_bytes((int)t);
    for (size_t j = 0; j < nb; j++) {
        const unsigned char *p = (const unsigned char *)w->k +
                                 sdpa_off_bytes((int)t, (ptrdiff_t)(j0 + j) * w->k_stride);
        int8_t *q = kq + j * d;
        for (size_t b = 0; b < d / SDPA_QK; b++, p += bb, q += SDPA_QK) {
            kd[b * nb + j] = qscale_neon(p);
            int8x16_t lo, hi;
            if (t == SDPA_Q8_0)
                quants_neon(p, SDPA_Q8_0, &lo, &hi);
            else
                quants_neon(p, SDPA_Q4_0, &lo, &hi);
            vst1q_s8(q, lo);
            vst1q_s8(q + 16, hi);
        }
    }
}

/* s + the exact int32 dot product of 32 int8 pairs, in four lanes: armv8-a has no SDOT, so
   SMULL (each product fits int16, -128 * -128 included) and SADALP (pairs into int32). */
SDPA_INLINE int32x4_t dot32_neon(int32x4_t s, int8x16_t qa, int8x16_t qb, int8x16_t ka,
                                 int8x16_t kb)
{
    s = vpadalq_s16(s, vmull_s8(vget_low_s8(qa), vget_low_s8(ka)));
    s = vpadalq_s16(s, vmull_high_s8(qa, ka));
    s = vpadalq_s16(s, vmull_s8(vget_low_s8(qb), vget_low_s8(kb)));
    return vpadalq_s16(s, vmull_high_s8(qb, kb));
}

/* Fast scores of mr (1 or 2) rows against four keys (kq at the first, kd at its block-0
   scale, ldk keys between block scales): per block the int32 sums of the 4 x mr pairs, then
   s += (qd d_k) sum in f32, blocks in order (the scalar reference's arithmetic, op for op). */
SDPA_INLINE void score_q8_neon_mx4(const int8_t *qq, const float *qd, size_t d, const int8_t *kq,
                                   const float *kd, size_t ldk, float *S, size_t lds, const int mr)
{
    const size_t nblk = d / SDPA_QK;
    float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (size_t b = 0; b < nblk; b++) {
        const size_t o = b * SDPA_QK;
        int32x4_t s[2][4];
        int8x16_t qa[2], qb[2];
        for (int r = 0; r < mr; r++) {
            qa[r] = vld1q_s8(qq + (size_t)r * d + o);
            qb[r] = vld1q_s8(qq + (size_t)r * d + o + 16);
            for (int i = 0; i < 4; i++) s[r][i] = vdupq_n_s32(0);
        }
        for (int i = 0; i < 4; i++) {
            const int8x16_t ka = vld1q_s8(kq + (size_t)i * d + o);
            const int8x16_t kb = vld1q_s8(kq + (size_t)i * d + o + 16);
            for (int r = 0; r < mr; r++) s[r][i] = dot32_neon(s[r][i], qa[r], qb[r], ka, kb);
        }
        const float32x4_t kdv = vld1q_f32(kd + b * ldk);
        for (int r = 0; r < mr; r++) {
            /* lane i: key i's sum */
            const int32x4_t sum =
                vpaddq_s32(vpaddq_s32(s[r][0], s[r][1]), vpaddq_s32(s[r][2], s[r][3]));
            const float32x4_t sc = vmulq_n_f32(kdv, qd[(size_t)r * nblk + b]);
            acc[r] = vaddq_f32(acc[r], vmulq_f32(sc, vcvtq_f32_s32(sum)));
        }
    }
    for (int r = 0; r < mr; r++) vst1q_f32(S + (size_t)r * lds, acc[r]);
}

/* One row against one key, as score_q8_neon_mx4. */
SDPA_INLINE float score_q8_neon_1x1(const int8_t *qq, const float *qd, size_t d, const int8_t *kq,
                                    const float *kd, size_t ldk)
{
    float acc = 0.0f;
    for (size_t b = 0; b < d / SDPA_QK; b++) {
        const size_t o = b * SDPA_QK;
        const int32x4_t s = dot32_neon(vdupq_n_s32(0), vld1q_s8(qq + o), vld1q_s8(qq + o + 16),
                                       vld1q_s8(kq + o), vld1q_s8(kq + o + 16));
        acc += kd[b * ldk] * qd[b] * (float)vaddvq_s32(s);
    }
    return acc;
}

static void score_q8_tile(const int8_t *qq, const float *qd, size_t ra, size_t d,
                          const int8_t *kq, const float *kd, size_t nb, float *S, size_t lds)
{
    const size_t nblk = d / SDPA_QK, n4 = nb & ~(size_t)3;
    size_t r = 0;
    for (; r + 2 <= ra; r += 2)
        for (size_t j = 0; j < n4; j += 4)
            score_q8_neon_mx4(qq + r * d, qd + r * nblk, d, kq + j * d, kd + j, nb, S + r * lds + j,
                              lds, 2);
    for (; r < ra; r++)
        for (size_t j = 0; j < n4; j += 4)
            score_q8_neon_mx4(qq + r * d, qd + r * nblk, d, kq + j * d, kd + j, nb, S + r * lds + j,
                              lds, 1);
    for (r = 0; r < ra; r++)
        for (size_t j = n4; j < nb; j++)
            S[r * lds + j] =
                score_q8_neon_1x1(qq + r * d, qd + r * nblk, d, kq + j * d, kd + j, nb);
}

#define SDPA_ROWS_FN rows_neon
#define SDPA_WS_FN ws_floats_neon
#include "packed_path.h"

#define SCORE_MR TILE_MR
#define SCORE_NR 16
#define PV_MR TILE_MR
#define PV_NR 16
#define PAGED_ROWS SIZE_MAX /* paged units: every one (rows_loop.h) */
#define QUANT_ROWS SIZE_MAX /* q8_0/q4_0 K and V, and fast scores: every unit */
#include "kernel_def.h"

SDPA_DEFINE_KERNELS(neon, EXP_MAX_ULP);
