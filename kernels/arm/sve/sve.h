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
#define TILE_MR 4 /* query rows per micro-kernel */
/* the tiles are two vectors wide, a length known only at run time: nr is not stated */
#define SCORE_MR TILE_MR
#define PV_MR TILE_MR
#define PAGED_ROWS SIZE_MAX /* paged units: every one (rows_loop.h) */
#define QUANT_ROWS SIZE_MAX /* q8_0/q4_0 K and V, and fast scores: every unit */

/* The packed path (packed.c: rows_loop.h over packed_path.h) and its scratch size in floats. */
void   sdpa_packed_sve(const sdpa_rows *w);
size_t sdpa_packed_ws_sve(size_t rows, size_t d, size_t dv, size_t block);
/* Fast scores (q8_scores.c): packed_path.h's pack_kq and score_q8_tile. */
void   sdpa_pack_kq_sve(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd);
void   sdpa_score_q8_sve(const int8_t *qq, const float *qd, size_t ra, size_t d,
                         const int8_t *kq, const float *kd, size_t nb, float *S, size_t lds);

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

/* The f16 scale of a q8_0/q4_0 block at p, exactly to f32, in every lane. */
SDPA_INLINE svfloat32_t qscale_sve(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return widen_sve(svptrue_b32(), svdup_n_u32(h), SDPA_F16);
}

/* Lanes of a q8_0/q4_0 block's quants as int32 (q4_0's nibbles n as n - 8): q8_0 elements
   i.. (pg within 32), or for q4_0 the low (hi = 0: elements i..) or high nibbles (16 + i..)
   of bytes i.. (pg within 16). */
SDPA_INLINE svint32_t quants_sve(svbool_t pg, const unsigned char *p, size_t i, sdpa_dtype t,
                                 int hi)
{
    if (t == SDPA_Q8_0) return svld1sb_s32(pg, (const int8_t *)(p + 2) + i);
    const svuint32_t x = svld1ub_u32(pg, p + 2 + i);
    const svuint32_t n = hi ? svlsr_n_u32_x(pg, x, 4) : svand_n_u32_x(pg, x, 15);
    return svsub_n_s32_x(pg, svreinterpret_s32_u32(n), 8);
}

/* One row of n elements (element offset off) converted to f32 (widening 16-bit loads for f16 /
   bf16; for q8_0/q4_0, n and off multiples of 32, each block's d q exact in f32). */
SDPA_INLINE void row_to_f32_sve(const void *src, ptrdiff_t off, size_t n, sdpa_dtype t, float *dst)
{
    if (sdpa_dtype_quantized(t)) {
        const unsigned char *p = (const unsigned char *)src + sdpa_off_bytes(t, off);
        const size_t bb = sdpa_block_bytes(t), half = t == SDPA_Q8_0 ? SDPA_QK : SDPA_QK / 2;
        for (size_t b = 0; b < n / SDPA_QK; b++, p += bb, dst += SDPA_QK) {
            const svfloat32_t d = qscale_sve(p);
            for (size_t i = 0; i < half; i += svcntw()) {
                const svbool_t pg = svwhilelt_b32_u64(i, half);
                svst1_f32(pg, dst + i,
                          svmul_f32_x(pg, svcvt_f32_s32_x(pg, quants_sve(pg, p, i, t, 0)), d));
                if (t == SDPA_Q4_0)
                    svst1_f32(pg, dst + SDPA_QK / 2 + i,
                              svmul_f32_x(pg, svcvt_f32_s32_x(pg, quants_sve(pg, p, i, t, 1)), d));
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
#define SVE_FOR_BLOCK(OP)                                                                     \
    do {                                                                                      \
        OP(0, 0);                                                                             \
        if (NV > 1) OP(0, 1);                                                                 \
        if (mr > 1) { OP(1, 0); if (NV > 1) OP(1, 1); }                                       \
        if (mr > 2) { OP(2, 0); if (NV > 1) OP(2, 1); }                                       \
        if (mr > 3) { OP(3, 0); if (NV > 1) OP(3, 1); }                                       \
    } while (0)

#endif /* SDPA_SVE_H */
