/* neon.h -- what the NEON kernel files share: tuning, exp, softmax, K/V loads and conversions */
#ifndef SDPA_NEON_H
#define SDPA_NEON_H

#include <arm_neon.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "convert.h"
#include "exp_coeffs.h" /* the exp every SIMD implementation shares */
#include "kernel_table.h"
#include "kernel_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Tuning (reported through sdpa_kernels.tuning)                                               */
/* ------------------------------------------------------------------------------------------ */

/* Packed keys of a block of nb: keys [0, n16) in panels of 16, then [n16, n4) in panels of 4,
   then the last nb % 4 keys row by row. A panel of width W starting at key c0 sits at
   kp + c0 * d and holds element dd of its key c at [dd * W + c], so one vector load gives the
   same dimension of 4 consecutive keys: a score tile is then broadcast-q x K-vector FMAs.
   The layout needs exactly nb * d floats. */
#define SDPA_KPAD(d) (d)
#define TILE_MR      4 /* query rows per micro-kernel */
#define SCORE_MR     TILE_MR
#define SCORE_NR     16
#define PV_MR        TILE_MR
#define PV_NR        16
#define PAGED_ROWS   SIZE_MAX /* paged units: every one (rows_loop.h) */
#define QUANT_ROWS   SIZE_MAX /* block-format K and V, and fast scores: every unit */

/* The packed path (packed.c: rows_loop.h over packed_path.h) and its scratch size in floats. */
void sdpa_packed_neon(const sdpa_rows *w);
size_t sdpa_packed_ws_neon(size_t rows, size_t d, size_t dv, size_t block);
/* Fast scores (q8_scores.c): packed_path.h's pack_kq and score_q8_tile. */
void sdpa_pack_kq_neon(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd, float *km);
void sdpa_score_q8_neon(const int8_t *qq, const float *qd, const float *qs, size_t ra, size_t d,
                        const int8_t *kq, const float *kd, const float *km, size_t nb, float *S,
                        size_t lds);

/* ------------------------------------------------------------------------------------------ */
/* exp and the primitives the packed path shares                                               */
/* ------------------------------------------------------------------------------------------ */

SDPA_INLINE float32x4_t exp_neon(float32x4_t x)
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

/* s[j] = scale * dot(q, key j) for one query row and n keys (k_stride floats apart): four keys
   at a time, in four independent FMA chains that hide FMA latency, then key by key. */
SDPA_INLINE void score_neon_1xn(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
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

/* The online-softmax primitive (sdpa.h's contract), for the kernel table and the packed path. */
SDPA_INLINE float softmax_neon(float *s, size_t n, float *m, float *l)
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
    const float alpha = vgetq_lane_f32(exp_neon(vdupq_n_f32(m_old - m_new)), 0);
    float32x4_t sum0 = vdupq_n_f32(0.0f), sum1 = sum0;
    size_t i = 0;
    for (; i + 8 <= n4; i += 8) {
        const float32x4_t p0 = exp_neon(vsubq_f32(vld1q_f32(s + i), vm));
        const float32x4_t p1 = exp_neon(vsubq_f32(vld1q_f32(s + i + 4), vm));
        vst1q_f32(s + i, p0);
        vst1q_f32(s + i + 4, p1);
        sum0 = vaddq_f32(sum0, p0);
        sum1 = vaddq_f32(sum1, p1);
    }
    if (i < n4) {
        const float32x4_t p0 = exp_neon(vsubq_f32(vld1q_f32(s + i), vm));
        vst1q_f32(s + i, p0);
        sum0 = vaddq_f32(sum0, p0);
    }
    if (nr) {
        const float32x4_t p = exp_neon(vsubq_f32(load_partial_neon(s + n4, nr, -INFINITY), vm));
        store_partial_neon(s + n4, nr, p);
        sum1 = vaddq_f32(sum1, p);
    }
    *m = m_new;
    *l = alpha * *l + vaddvq_f32(vaddq_f32(sum0, sum1));
    return alpha;
}

/* ------------------------------------------------------------------------------------------ */
/* K and V rows: element loads, the block formats, the row converter                          */
/* ------------------------------------------------------------------------------------------ */

/* 4 consecutive elements of a K or V row, converted exactly to f32. */
SDPA_INLINE float32x4_t load_neon_1x4(const void *base, ptrdiff_t off, sdpa_dtype t)
{
    if (t == SDPA_F32) return vld1q_f32((const float *)base + off);
    const uint16x4_t h = vld1_u16((const uint16_t *)base + off);
    if (t == SDPA_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

SDPA_INLINE float load_neon_1x1(const void *base, ptrdiff_t off, sdpa_dtype t)
{
    if (t == SDPA_F32) return ((const float *)base)[off];
    const uint16_t h = ((const uint16_t *)base)[off];
    return t == SDPA_F16 ? sdpa_f16_to_f32(h) : sdpa_bf16_to_f32(h);
}

/* The f16 scale d of a block at p (every block format starts with it), exactly to f32. */
SDPA_INLINE float qscale_neon(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* The f16 minimum m of a q4_1/q5_1 block at p (after d), exactly to f32. */
SDPA_INLINE float qmin_neon(const unsigned char *p) { return qscale_neon(p + 2); }

/* The byte offset of a block's quants: q8_0's int8, or the nibbles (after d, m and qh). */
SDPA_INLINE size_t qbytes_off_neon(sdpa_dtype t)
{
    return t == SDPA_Q4_1 ? 4 : t == SDPA_Q5_0 ? 6 : t == SDPA_Q5_1 ? 8 : 2;
}

/* q5_0/q5_1's fifth bits (the u32 qh at p, bit i element i) as 16 in the bytes of the elements
   that have it: elements 0..15 in *lo, 16..31 in *hi. Each byte of qh is spread over 8 lanes
   (TBL), whose bit masks 1, 2, .., 128 pick one bit each (CMTST). */
SDPA_INLINE void qhigh_neon(const unsigned char *p, uint8x16_t *lo, uint8x16_t *hi)
{
    uint32_t qh;
    memcpy(&qh, p, sizeof qh);
    const uint8x16_t x = vreinterpretq_u8_u32(vdupq_n_u32(qh));
    const uint8x16_t bits = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201u));
    const uint8x16_t s01 = vcombine_u8(vdup_n_u8(0), vdup_n_u8(1));
    const uint8x16_t s23 = vcombine_u8(vdup_n_u8(2), vdup_n_u8(3));
    *lo = vandq_u8(vtstq_u8(vqtbl1q_u8(x, s01), bits), vdupq_n_u8(16));
    *hi = vandq_u8(vtstq_u8(vqtbl1q_u8(x, s23), bits), vdupq_n_u8(16));
}

/* The 32 integer quants of a block at p as int8, elements 0..15 in *lo and 16..31 in *hi (see
   sdpa_block_quants): q8_0's int8; the nibbles n as n - 8 (q4_0) or n (q4_1); with the fifth
   bit, n - 16 (q5_0) or n (q5_1); iq4_nl's table values (TBL). t is a constant after inlining. */
SDPA_INLINE void quants_neon(const unsigned char *p, sdpa_dtype t, int8x16_t *lo, int8x16_t *hi)
{
    if (t == SDPA_Q8_0) {
        *lo = vld1q_s8((const int8_t *)(p + 2));
        *hi = vld1q_s8((const int8_t *)(p + 2 + 16));
        return;
    }
    const uint8x16_t x = vld1q_u8(p + qbytes_off_neon(t));
    uint8x16_t nl = vandq_u8(x, vdupq_n_u8(15)), nh = vshrq_n_u8(x, 4);
    if (t == SDPA_IQ4_NL) {
        const int8x16_t tab = vld1q_s8(sdpa_iq4nl_values);
        *lo = vqtbl1q_s8(tab, nl);
        *hi = vqtbl1q_s8(tab, nh);
        return;
    }
    if (t == SDPA_Q5_0 || t == SDPA_Q5_1) {
        uint8x16_t bl, bh;
        qhigh_neon(p + qbytes_off_neon(t) - 4, &bl, &bh);
        nl = vorrq_u8(nl, bl);
        nh = vorrq_u8(nh, bh);
    }
    *lo = vreinterpretq_s8_u8(nl);
    *hi = vreinterpretq_s8_u8(nh);
    if (t == SDPA_Q4_0 || t == SDPA_Q5_0) {
        const int8x16_t bias = vdupq_n_s8(t == SDPA_Q4_0 ? 8 : 16);
        *lo = vsubq_s8(*lo, bias);
        *hi = vsubq_s8(*hi, bias);
    }
}

/* int8 x 16 -> four float32x4 (exact), each d q, exact in f32 (an f16 times a small integer),
   or for the types with a minimum (has_min, a constant) d q + m: d q is exact, so the FMA
   rounds once, as the scalar dequantizer's d q + m. */
SDPA_INLINE void widen_q_neon(int8x16_t q, float32x4_t d, float32x4_t m, const int has_min,
                              float32x4_t *y)
{
    const int16x8_t a = vmovl_s8(vget_low_s8(q)), b = vmovl_high_s8(q);
    const float32x4_t f[4] = {
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(a))), vcvtq_f32_s32(vmovl_high_s16(a)),
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(b))), vcvtq_f32_s32(vmovl_high_s16(b))};
    for (int i = 0; i < 4; i++) y[i] = has_min ? vfmaq_f32(m, f[i], d) : vmulq_f32(f[i], d);
}

/* One block at p dequantized to y[0..8) (elements 4i..4i+3 in y[i]). */
SDPA_INLINE void dequant_neon_block(const unsigned char *p, sdpa_dtype t, float32x4_t *y)
{
    const int hm = sdpa_dtype_has_min(t);
    const float32x4_t d = vdupq_n_f32(qscale_neon(p));
    const float32x4_t m = hm ? vdupq_n_f32(qmin_neon(p)) : d;
    int8x16_t lo, hi;
    quants_neon(p, t, &lo, &hi);
    widen_q_neon(lo, d, m, hm, y);
    widen_q_neon(hi, d, m, hm, y + 4);
}

/* One row of n elements (element offset off) converted to f32; for the block formats n and off
   are multiples of 32. */
SDPA_INLINE void row_to_f32_neon(const void *src, ptrdiff_t off, size_t n, sdpa_dtype t, float *dst)
{
    if (sdpa_dtype_quantized(t)) {
        const unsigned char *p = (const unsigned char *)src + sdpa_off_bytes(t, off);
        const size_t bb = sdpa_block_bytes(t);
        for (size_t b = 0; b < n / SDPA_QK; b++) {
            float32x4_t y[8];
            dequant_neon_block(p + b * bb, t, y);
            for (int i = 0; i < 8; i++) vst1q_f32(dst + b * SDPA_QK + 4 * (size_t)i, y[i]);
        }
        return;
    }
    size_t c = 0;
    for (; c + 4 <= n; c += 4) vst1q_f32(dst + c, load_neon_1x4(src, off + (ptrdiff_t)c, t));
    for (; c < n; c++) dst[c] = load_neon_1x1(src, off + (ptrdiff_t)c, t);
}

#endif /* SDPA_NEON_H */
