/* sve.h -- what the SVE kernel files share: tuning, exp, softmax, K/V conversions, tile blocks */
#ifndef SDPA_SVE_H
#define SDPA_SVE_H

#include <arm_sve.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "convert.h"
#include "exp_coeffs.h" /* the exp every SIMD implementation shares */
#include "kernel_table.h"
#include "kernel_util.h"

/* Nothing in the SVE kernels assumes a vector length: every loop steps by svcntw() lanes and
   every tail is a svwhilelt predicate, so no load or store touches an element past its array. */

/* ------------------------------------------------------------------------------------------ */
/* Tuning (reported through sdpa_kernels.tuning)                                               */
/* ------------------------------------------------------------------------------------------ */

/* Packed keys of a block of nb: panels of W = min(2 * VL, keys left) keys; the panel starting at
   key c0 sits at kp + c0 * d and holds element dd of its key c at [dd * W + c], so one vector
   load gives the same dimension of consecutive keys: a score tile is then broadcast-q x K-vector
   FMAs. The last, narrower panel is read with predicates; the layout needs exactly nb * d. */
#define SDPA_KPAD(d) (d)
#define TILE_MR      4 /* query rows per micro-kernel */
/* the tiles are two vectors wide, a length known only at run time: nr is not stated */
#define SCORE_MR   TILE_MR
#define PV_MR      TILE_MR
#define PAGED_ROWS SIZE_MAX /* paged units: every one (rows_loop.h) */
#define QUANT_ROWS SIZE_MAX /* block-format K and V, and fast scores: every unit */

/* The packed path (packed.c: rows_loop.h over packed_path.h) and its scratch size in floats. */
void sdpa_packed_sve(const sdpa_rows *w);
size_t sdpa_packed_ws_sve(size_t rows, size_t d, size_t dv, size_t block);
/* Fast scores (q8_scores.c): packed_path.h's pack_kq and score_q8_tile. */
void sdpa_pack_kq_sve(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd, float *km);
void sdpa_score_q8_sve(const int8_t *qq, const float *qd, const float *qs, size_t ra, size_t d,
                       const int8_t *kq, const float *kd, const float *km, size_t nb, float *S,
                       size_t lds);

/* ------------------------------------------------------------------------------------------ */
/* exp and the softmax                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* e^x on every lane (inactive lanes of a caller's predicate are computed too and ignored). */
SDPA_INLINE svfloat32_t exp_sve(svfloat32_t x)
{
    const svbool_t all = svptrue_b32();
    /* Below -104 every result rounds to 0 and above 89 to inf, so clamping loses nothing and keeps
       n in [-150, 129]. FMAX/FMIN return NaN for a NaN input, so NaN flows through to the end. */
    x = svmin_n_f32_x(all, svmax_n_f32_x(all, x, EXP_LO), EXP_HI);
    const svfloat32_t nf = svrintn_f32_x(all, svmul_n_f32_x(all, x, EXP_LOG2E));
    svfloat32_t r = svmls_n_f32_x(all, x, nf, EXP_LN2_HI);
    r = svmls_n_f32_x(all, r, nf, EXP_LN2_LO);

    svfloat32_t q = svmad_n_f32_x(all, svdup_n_f32(EXP_C6), r, EXP_C5); /* C6 * r + C5 */
    q = svmad_n_f32_x(all, q, r, EXP_C4);
    q = svmad_n_f32_x(all, q, r, EXP_C3);
    q = svmad_n_f32_x(all, q, r, 0.5f);
    q = svmad_n_f32_x(all, q, r, 1.0f);
    const svfloat32_t p = svmad_n_f32_x(all, q, r, 1.0f);

    /* 2^n as 2^n1 * 2^n2, n1 = floor(n/2): both factors are normal floats for every n in range,
       p * 2^n1 is exact and only the second product rounds, so results in the subnormal range
       (x down to about -103.97) are correctly scaled with a single rounding, and large x
       overflows to inf instead of wrapping the exponent field. */
    const svint32_t n = svcvt_s32_f32_x(all, nf); /* NaN converts to 0; p is already NaN */
    const svint32_t n1 = svasr_n_s32_x(all, n, 1);
    const svint32_t n2 = svsub_s32_x(all, n, n1);
    const svint32_t e1 = svlsl_n_s32_x(all, svadd_n_s32_x(all, n1, 127), 23);
    const svint32_t e2 = svlsl_n_s32_x(all, svadd_n_s32_x(all, n2, 127), 23);
    const svfloat32_t s1 = svreinterpret_f32_s32(e1), s2 = svreinterpret_f32_s32(e2);
    return svmul_f32_x(all, svmul_f32_x(all, p, s1), s2);
}

/* The online-softmax primitive (sdpa.h's contract), for the kernel table and the packed path. */
SDPA_INLINE float softmax_sve(float *s, size_t n, float *m, float *l)
{
    const svbool_t all = svptrue_b32();
    const uint64_t vl = svcntw();
    /* Block maximum with FMAX/FMAXV, which propagate NaN: a NaN score makes m_new, every p and
       hence l NaN, even in a block whose other scores are all -inf. Merging keeps the lanes a
       short tail does not reach at their -inf start. */
    svfloat32_t vmx = svdup_n_f32(-INFINITY);
    for (size_t i = 0; i < n; i += vl) {
        const svbool_t pg = svwhilelt_b32_u64(i, n);
        vmx = svmax_f32_m(pg, vmx, svld1_f32(pg, s + i));
    }
    const float m_old = *m;
    const float m_new = svmaxv_f32(all, svmax_n_f32_x(all, vmx, m_old));
    if (m_new == -INFINITY) { /* nothing but -inf so far: weights 0, state unchanged */
        memset(s, 0, n * sizeof *s);
        return 1.0f;
    }
    const float alpha = svlastb_f32(svptrue_pat_b32(SV_VL1), exp_sve(svdup_n_f32(m_old - m_new)));
    svfloat32_t sum = svdup_n_f32(0.0f);
    for (size_t i = 0; i < n; i += vl) {
        const svbool_t pg = svwhilelt_b32_u64(i, n);
        const svfloat32_t p = exp_sve(svsub_n_f32_x(all, svld1_f32(pg, s + i), m_new));
        svst1_f32(pg, s + i, p);
        sum = svadd_f32_m(pg, sum, p);
    }
    *m = m_new;
    *l = alpha * *l + svaddv_f32(all, sum);
    return alpha;
}

/* ------------------------------------------------------------------------------------------ */
/* K and V rows: widening, the block formats, the row converter                                */
/* ------------------------------------------------------------------------------------------ */

SDPA_INLINE svfloat32_t widen_sve(svbool_t pg, svuint32_t h, sdpa_dtype t)
{
    if (t == SDPA_F16) return svcvt_f32_f16_x(pg, svreinterpret_f16_u32(h)); /* exact */
    return svreinterpret_f32_u32(svlsl_n_u32_x(pg, h, 16));                  /* bf16 */
}

/* The f16 scale d of a block at p (every block format starts with it), exactly to f32, in
   every lane. */
SDPA_INLINE svfloat32_t qscale_sve(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return widen_sve(svptrue_b32(), svdup_n_u32(h), SDPA_F16);
}

/* The f16 minimum m of a q4_1/q5_1 block at p (after d), exactly to f32, in every lane. */
SDPA_INLINE svfloat32_t qmin_sve(const unsigned char *p) { return qscale_sve(p + 2); }

/* The byte offset of a block's quants: q8_0's int8, or the nibbles (after d, m and qh). */
SDPA_INLINE size_t qbytes_off_sve(sdpa_dtype t)
{
    return t == SDPA_Q4_1 ? 4 : t == SDPA_Q5_0 ? 6 : t == SDPA_Q5_1 ? 8 : 2;
}

/* q5_0/q5_1's high bits: the u32 qh, 4 bytes before the nibbles. */
SDPA_INLINE uint32_t qhigh_sve(const unsigned char *p, sdpa_dtype t)
{
    uint32_t qh;
    memcpy(&qh, p + qbytes_off_sve(t) - 4, sizeof qh);
    return qh;
}

/* Quant bytes a block stores per lane sweep: q8_0's 32, or the 16 bytes of nibbles, each
   giving element i (low nibble) and 16 + i (high nibble). */
SDPA_INLINE size_t qhalf_sve(sdpa_dtype t) { return t == SDPA_Q8_0 ? SDPA_QK : SDPA_QK / 2; }

/* Lanes of a block's integer quants (sdpa_block_quants) as int32: q8_0 elements i.. (pg within
   32), or for the nibble formats the low (hi = 0: elements i..) or high nibbles (16 + i..) of
   bytes i.. (pg within 16): n - 8 (q4_0), n (q4_1), with the fifth bit of qh n - 16 (q5_0) or
   n (q5_1), iq4_nl's table value (TBL on the bytes, then the low byte sign-extended). */
SDPA_INLINE svint32_t quants_sve(svbool_t pg, const unsigned char *p, size_t i, sdpa_dtype t,
                                 int hi)
{
    if (t == SDPA_Q8_0) return svld1sb_s32(pg, (const int8_t *)(p + 2) + i);
    const svuint32_t x = svld1ub_u32(pg, p + qbytes_off_sve(t) + i);
    svuint32_t n = hi ? svlsr_n_u32_x(pg, x, 4) : svand_n_u32_x(pg, x, 15);
    if (t == SDPA_IQ4_NL) {
        const svint8_t tab = svld1rq_s8(svptrue_b8(), sdpa_iq4nl_values);
        return svextb_s32_x(pg, svreinterpret_s32_s8(svtbl_s8(tab, svreinterpret_u8_u32(n))));
    }
    if (t == SDPA_Q5_0 || t == SDPA_Q5_1) {
        const svuint32_t e = svindex_u32((uint32_t)(i + (hi ? SDPA_QK / 2 : 0)), 1);
        const svuint32_t bit = svlsr_u32_x(pg, svdup_n_u32(qhigh_sve(p, t)), e);
        n = svorr_u32_x(pg, n, svlsl_n_u32_x(pg, svand_n_u32_x(pg, bit, 1), 4));
    }
    const svint32_t q = svreinterpret_s32_u32(n);
    if (t == SDPA_Q4_0 || t == SDPA_Q5_0) return svsub_n_s32_x(pg, q, t == SDPA_Q4_0 ? 8 : 16);
    return q;
}

/* The same quants as bytes (pb a byte predicate): q8_0 elements i.., or the low or high
   nibbles' elements of bytes i..; q5's bit of element e is bit e % 8 of qh's byte e / 8. */
SDPA_INLINE svint8_t quants_sve_b(svbool_t pb, const unsigned char *p, size_t i, sdpa_dtype t,
                                  int hi)
{
    if (t == SDPA_Q8_0) return svld1_s8(pb, (const int8_t *)(p + 2) + i);
    const svuint8_t x = svld1_u8(pb, p + qbytes_off_sve(t) + i);
    svuint8_t n = hi ? svlsr_n_u8_x(pb, x, 4) : svand_n_u8_x(pb, x, 15);
    if (t == SDPA_IQ4_NL) return svtbl_s8(svld1rq_s8(svptrue_b8(), sdpa_iq4nl_values), n);
    if (t == SDPA_Q5_0 || t == SDPA_Q5_1) {
        const svuint8_t e = svindex_u8((uint8_t)(i + (hi ? SDPA_QK / 2 : 0)), 1);
        const svuint8_t qh = svreinterpret_u8_u32(svdup_n_u32(qhigh_sve(p, t)));
        const svuint8_t by = svtbl_u8(qh, svlsr_n_u8_x(pb, e, 3));
        const svuint8_t bit = svlsr_u8_x(pb, by, svand_n_u8_x(pb, e, 7));
        n = svorr_u8_x(pb, n, svlsl_n_u8_x(pb, svand_n_u8_x(pb, bit, 1), 4));
    }
    const svint8_t q = svreinterpret_s8_u8(n);
    if (t == SDPA_Q4_0 || t == SDPA_Q5_0) return svsub_n_s8_x(pb, q, t == SDPA_Q4_0 ? 8 : 16);
    return q;
}

/* Lanes of quants to f32 values: d q, exact (an f16 times a small integer), or with a minimum
   (hm, a constant) d q + m: d q is exact, so the FMA rounds once, as the scalar dequantizer. */
SDPA_INLINE svfloat32_t deq_sve(svbool_t pg, svint32_t q, svfloat32_t d, svfloat32_t m,
                                const int hm)
{
    const svfloat32_t f = svcvt_f32_s32_x(pg, q);
    return hm ? svmla_f32_x(pg, m, f, d) : svmul_f32_x(pg, f, d);
}

/* One row of n elements (element offset off) converted to f32 (widening 16-bit loads for f16 /
   bf16; for the block formats, n and off multiples of 32, each block dequantized exactly). */
SDPA_INLINE void row_to_f32_sve(const void *src, ptrdiff_t off, size_t n, sdpa_dtype t, float *dst)
{
    if (sdpa_dtype_quantized(t)) {
        const unsigned char *p = (const unsigned char *)src + sdpa_off_bytes(t, off);
        const size_t bb = sdpa_block_bytes(t), half = qhalf_sve(t);
        const int hm = sdpa_dtype_has_min(t);
        for (size_t b = 0; b < n / SDPA_QK; b++, p += bb, dst += SDPA_QK) {
            const svfloat32_t d = qscale_sve(p), m = hm ? qmin_sve(p) : d;
            for (size_t i = 0; i < half; i += svcntw()) {
                const svbool_t pg = svwhilelt_b32_u64(i, half);
                svst1_f32(pg, dst + i, deq_sve(pg, quants_sve(pg, p, i, t, 0), d, m, hm));
                if (t != SDPA_Q8_0)
                    svst1_f32(pg, dst + SDPA_QK / 2 + i,
                              deq_sve(pg, quants_sve(pg, p, i, t, 1), d, m, hm));
            }
        }
        return;
    }
    for (size_t c = 0; c < n; c += svcntw()) {
        const svbool_t pg = svwhilelt_b32_u64(c, n);
        svfloat32_t x;
        if (t == SDPA_F32)
            x = svld1_f32(pg, (const float *)src + off + (ptrdiff_t)c);
        else
            x = widen_sve(pg, svld1uh_u32(pg, (const uint16_t *)src + off + (ptrdiff_t)c), t);
        svst1_f32(pg, dst + c, x);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Register blocks of the tiles                                                                */
/* ------------------------------------------------------------------------------------------ */

/* Apply OP(r, x) to every live accumulator of an mr x NV block (mr <= 4, NV <= 2 are
   compile-time constants after inlining; sizeless SVE types cannot form arrays). */
#define SVE_FOR_BLOCK(OP)                                                                          \
    do {                                                                                           \
        OP(0, 0);                                                                                  \
        if (NV > 1) OP(0, 1);                                                                      \
        if (mr > 1) {                                                                              \
            OP(1, 0);                                                                              \
            if (NV > 1) OP(1, 1);                                                                  \
        }                                                                                          \
        if (mr > 2) {                                                                              \
            OP(2, 0);                                                                              \
            if (NV > 1) OP(2, 1);                                                                  \
        }                                                                                          \
        if (mr > 3) {                                                                              \
            OP(3, 0);                                                                              \
            if (NV > 1) OP(3, 1);                                                                  \
        }                                                                                          \
    } while (0)

#endif /* SDPA_SVE_H */
