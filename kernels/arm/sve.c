/* sve.c -- the SVE implementation (any vector length): primitives, exp and fused tile kernels */
#include <arm_sve.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "convert.h"
#include "kernel_table.h"
#include "kernel_util.h"


/* Nothing here assumes a vector length: every loop steps by svcntw() lanes and every tail is a
   svwhilelt predicate, so no load or store touches an element past the end of its array. */

/* ------------------------------------------------------------------------------------------ */
/* exp                                                                                         */
/* ------------------------------------------------------------------------------------------ */

#include "exp_coeffs.h" /* the exp every SIMD implementation shares */

/* e^x on every lane (inactive lanes of a caller's predicate are computed too and ignored). */
SDPA_INLINE svfloat32_t exp_sve_v(svfloat32_t x)
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

static void exp_f32_sve(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i += svcntw()) {
        const svbool_t pg = svwhilelt_b32_u64(i, n);
        svst1_f32(pg, y + i, exp_sve_v(svld1_f32(pg, x + i)));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The three primitives                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Four keys at a time, four independent FMA chains over d; the d tail is a predicated step
   (inactive lanes load as 0 and leave the merging FMA's accumulator as it was). */
static void score_f32_sve(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                      float scale, float *s)
{
    const svbool_t all = svptrue_b32();
    const uint64_t vl = svcntw();
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *k0 = k + j * k_stride, *k1 = k0 + k_stride, *k2 = k1 + k_stride,
                    *k3 = k2 + k_stride;
        svfloat32_t a0 = svdup_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
        for (size_t c = 0; c < d; c += vl) {
            const svbool_t pg = svwhilelt_b32_u64(c, d);
            const svfloat32_t qv = svld1_f32(pg, q + c);
            a0 = svmla_f32_m(pg, a0, qv, svld1_f32(pg, k0 + c));
            a1 = svmla_f32_m(pg, a1, qv, svld1_f32(pg, k1 + c));
            a2 = svmla_f32_m(pg, a2, qv, svld1_f32(pg, k2 + c));
            a3 = svmla_f32_m(pg, a3, qv, svld1_f32(pg, k3 + c));
        }
        s[j] = scale * svaddv_f32(all, a0);
        s[j + 1] = scale * svaddv_f32(all, a1);
        s[j + 2] = scale * svaddv_f32(all, a2);
        s[j + 3] = scale * svaddv_f32(all, a3);
    }
    for (; j < n; j++) {
        const float *kj = k + j * k_stride;
        svfloat32_t a0 = svdup_n_f32(0.0f);
        for (size_t c = 0; c < d; c += vl) {
            const svbool_t pg = svwhilelt_b32_u64(c, d);
            a0 = svmla_f32_m(pg, a0, svld1_f32(pg, q + c), svld1_f32(pg, kj + c));
        }
        s[j] = scale * svaddv_f32(all, a0);
    }
}

static float softmax_online_f32_sve(float *s, size_t n, float *m, float *l)
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
    const float alpha = svlastb_f32(svptrue_pat_b32(SV_VL1), exp_sve_v(svdup_n_f32(m_old - m_new)));
    svfloat32_t sum = svdup_n_f32(0.0f);
    for (size_t i = 0; i < n; i += vl) {
        const svbool_t pg = svwhilelt_b32_u64(i, n);
        const svfloat32_t p = exp_sve_v(svsub_n_f32_x(all, svld1_f32(pg, s + i), m_new));
        svst1_f32(pg, s + i, p);
        sum = svadd_f32_m(pg, sum, p);
    }
    *m = m_new;
    *l = alpha * *l + svaddv_f32(all, sum);
    return alpha;
}

static void accumulate_f32_sve(float *o, float alpha, const float *p, const float *v,
                           size_t v_stride, size_t n, size_t dv)
{
    const svbool_t all = svptrue_b32();
    const uint64_t vl = svcntw();
    /* two vectors of columns stay in registers across all n value rows */
    for (size_t c = 0; c < dv; c += 2 * vl) {
        const svbool_t p0 = svwhilelt_b32_u64(c, dv), p1 = svwhilelt_b32_u64(c + vl, dv);
        svfloat32_t a0 = svmul_n_f32_x(all, svld1_f32(p0, o + c), alpha);
        svfloat32_t a1 = svmul_n_f32_x(all, svld1_f32(p1, o + c + vl), alpha);
        for (size_t j = 0; j < n; j++) {
            const float *vj = v + j * v_stride + c;
            a0 = svmla_n_f32_x(all, a0, svld1_f32(p0, vj), p[j]);
            a1 = svmla_n_f32_x(all, a1, svld1_f32(p1, vj + vl), p[j]);
        }
        svst1_f32(p0, o + c, a0);
        svst1_f32(p1, o + c + vl, a1);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Fused tile kernels for rows_loop.h                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Packed keys of a block of nb: panels of W = min(2 * VL, keys left) keys; the panel starting at
   key c0 sits at kp + c0 * d and holds element dd of its key c at [dd * W + c], so one vector
   load gives the same dimension of consecutive keys: a score tile is then broadcast-q x K-vector
   FMAs. The last, narrower panel is read with predicates; the layout needs exactly nb * d. */
#define SDPA_KPAD(d) (d)
#define TILE_MR 4 /* query rows per micro-kernel */

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
    if (sdpa_dtype_quantized((int)t)) {
        const unsigned char *p = (const unsigned char *)src + sdpa_off_bytes((int)t, off);
        const size_t bb = sdpa_block_bytes((int)t), half = t == SDPA_Q8_0 ? SDPA_QK : SDPA_QK / 2;
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

/* q8_0/q4_0 keys into panels of W = min(2 VL, keys left): each key's blocks dequantized lane
   by lane and scattered into its panel column (index lane * W). */
SDPA_INLINE void pack_k_q_sve(const sdpa_rows *w, size_t j0, size_t nb, float *kp, sdpa_dtype t)
{
    const size_t d = w->d, bb = sdpa_block_bytes((int)t);
    const size_t half = t == SDPA_Q8_0 ? SDPA_QK : SDPA_QK / 2;
    const uint64_t vl = svcntw();
    for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
        const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
        const svint32_t idx = svindex_s32(0, (int32_t)W);
        float *panel = kp + c0 * d;
        for (size_t c = 0; c < W; c++) {
            const unsigned char *p = (const unsigned char *)w->k +
                                     sdpa_off_bytes((int)t, (ptrdiff_t)(j0 + c0 + c) * w->k_stride);
            for (size_t b = 0; b < d / SDPA_QK; b++, p += bb) {
                const svfloat32_t dq = qscale_sve(p);
                float *col = panel + b * SDPA_QK * W + c;
                for (size_t i = 0; i < half; i += vl) {
                    const svbool_t pg = svwhilelt_b32_u64(i, half);
                    svst1_scatter_s32index_f32(
                        pg, col + i * W, idx,
                        svmul_f32_x(pg, svcvt_f32_s32_x(pg, quants_sve(pg, p, i, t, 0)), dq));
                    if (t == SDPA_Q4_0)
                        svst1_scatter_s32index_f32(
                            pg, col + (SDPA_QK / 2 + i) * W, idx,
                            svmul_f32_x(pg, svcvt_f32_s32_x(pg, quants_sve(pg, p, i, t, 1)), dq));
                }
            }
        }
    }
}

/* Lanes [0, W) of a panel column: element dd of W consecutive keys, gathered with a signed
   32-bit index of lane * ks (the caller checks it fits). */
SDPA_INLINE svfloat32_t gather_sve(svbool_t pg, const void *src, ptrdiff_t off, svint32_t idx,
                                  sdpa_dtype t)
{
    if (t == SDPA_F32) return svld1_gather_s32index_f32(pg, (const float *)src + off, idx);
    return widen_sve(pg, svld1uh_gather_s32index_u32(pg, (const uint16_t *)src + off, idx), t);
}

SDPA_INLINE void pack_k_typed_sve(const sdpa_rows *w, size_t j0, size_t nb, float *kp, sdpa_dtype t)
{
    const size_t d = w->d;
    const ptrdiff_t ks = w->k_stride;
    const uint64_t vl = svcntw();
    const ptrdiff_t aks = ks < 0 ? -ks : ks;
    if (aks > (ptrdiff_t)(INT32_MAX / (int64_t)(2 * vl))) {
        /* strides too large for 32-bit gather indices: element by element */
        for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
            const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
            float *panel = kp + c0 * d;
            for (size_t c = 0; c < W; c++) {
                const ptrdiff_t o = (ptrdiff_t)(j0 + c0 + c) * ks;
                for (size_t dd = 0; dd < d; dd++) {
                    const ptrdiff_t e = o + (ptrdiff_t)dd;
                    const uint16_t h = t == SDPA_F32 ? 0 : ((const uint16_t *)w->k)[e];
                    panel[dd * W + c] = t == SDPA_F32   ? ((const float *)w->k)[e]
                                        : t == SDPA_F16 ? sdpa_f16_to_f32(h)
                                                        : sdpa_bf16_to_f32(h);
                }
            }
        }
        return;
    }
    const svint32_t idx = svindex_s32(0, (int32_t)ks);
    for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
        const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
        const svbool_t p0 = svwhilelt_b32_u64(0, W), p1 = svwhilelt_b32_u64(vl, W);
        const ptrdiff_t r0 = (ptrdiff_t)(j0 + c0) * ks, r1 = r0 + (ptrdiff_t)vl * ks;
        float *panel = kp + c0 * d;
        for (size_t dd = 0; dd < d; dd++) {
            svst1_f32(p0, panel + dd * W, gather_sve(p0, w->k, r0 + (ptrdiff_t)dd, idx, t));
            if (W > vl)
                svst1_f32(p1, panel + dd * W + vl,
                          gather_sve(p1, w->k, r1 + (ptrdiff_t)dd, idx, t));
        }
    }
}

static void pack_k(const sdpa_rows *w, size_t j0, size_t nb, float *kp)
{
    /* one specialised copy per storage type, so the per-element conversion is branch-free */
    switch (w->k_type) {
    case SDPA_F16: pack_k_typed_sve(w, j0, nb, kp, SDPA_F16); break;
    case SDPA_BF16: pack_k_typed_sve(w, j0, nb, kp, SDPA_BF16); break;
    case SDPA_Q8_0: pack_k_q_sve(w, j0, nb, kp, SDPA_Q8_0); break;
    case SDPA_Q4_0: pack_k_q_sve(w, j0, nb, kp, SDPA_Q4_0); break;
    default: pack_k_typed_sve(w, j0, nb, kp, SDPA_F32); break;
    }
}

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

/* S[r][0..W) = dot(q_r, keys of a panel of width W <= NV * VL) for r < mr. Four dimensions per
   step: LD1RQ puts q_r[dd..dd+3] in every 128-bit segment and FMLA (indexed) multiplies the K
   vectors by one of them. */
SDPA_INLINE void score_sve_mxn(const float *q, size_t d, const float *kp, size_t W, float *S,
                              size_t lds, const int mr, const int NV)
{
    const svbool_t all = svptrue_b32();
    const uint64_t vl = svcntw();
    const svbool_t p0 = svwhilelt_b32_u64(0, W), p1 = svwhilelt_b32_u64(vl, W);
    const svfloat32_t z = svdup_n_f32(0.0f);
    svfloat32_t a00 = z, a01 = z, a10 = z, a11 = z, a20 = z, a21 = z, a30 = z, a31 = z;
    svfloat32_t q0 = z, q1 = z, q2 = z, q3 = z, k0 = z, k1 = z;
    size_t dd = 0;
#define SC_FMA_LANE(r, x, L) a##r##x = svmla_lane_f32(a##r##x, k##x, q##r, L)
    for (; dd + 4 <= d; dd += 4) {
        q0 = svld1rq_f32(all, q + dd);
        if (mr > 1) q1 = svld1rq_f32(all, q + d + dd);
        if (mr > 2) q2 = svld1rq_f32(all, q + 2 * d + dd);
        if (mr > 3) q3 = svld1rq_f32(all, q + 3 * d + dd);
#define SC_STEP(L)                                                                            \
    do {                                                                                      \
        k0 = svld1_f32(p0, kp + (dd + (L)) * W);                                              \
        if (NV > 1) k1 = svld1_f32(p1, kp + (dd + (L)) * W + vl);                             \
    } while (0)
#define SC_OP0(r, x) SC_FMA_LANE(r, x, 0)
#define SC_OP1(r, x) SC_FMA_LANE(r, x, 1)
#define SC_OP2(r, x) SC_FMA_LANE(r, x, 2)
#define SC_OP3(r, x) SC_FMA_LANE(r, x, 3)
        SC_STEP(0);
        SVE_FOR_BLOCK(SC_OP0);
        SC_STEP(1);
        SVE_FOR_BLOCK(SC_OP1);
        SC_STEP(2);
        SVE_FOR_BLOCK(SC_OP2);
        SC_STEP(3);
        SVE_FOR_BLOCK(SC_OP3);
    }
    for (; dd < d; dd++) {
        k0 = svld1_f32(p0, kp + dd * W);
        if (NV > 1) k1 = svld1_f32(p1, kp + dd * W + vl);
#define SC_OPN(r, x) a##r##x = svmla_n_f32_x(all, a##r##x, k##x, q[(r) * d + dd])
        SVE_FOR_BLOCK(SC_OPN);
    }
#define SC_STORE(r, x) svst1_f32(x ? p1 : p0, S + (r) * lds + (x) * vl, a##r##x)
    SVE_FOR_BLOCK(SC_STORE);
#undef SC_FMA_LANE
#undef SC_STEP
#undef SC_OP0
#undef SC_OP1
#undef SC_OP2
#undef SC_OP3
#undef SC_OPN
#undef SC_STORE
    (void)q1, (void)q2, (void)q3, (void)k1;
}

/* Instantiations named after their register block: rows x vectors of keys. */
static void score_sve_4x2v(const float *q, size_t d, const float *kp, size_t W, float *S,
                           size_t lds)
{
    score_sve_mxn(q, d, kp, W, S, lds, 4, 2);
}

static void score_tile(const float *q, size_t ra, size_t d, const float *kp, size_t nb, float *S,
                       size_t lds)
{
    const uint64_t vl = svcntw();
    for (size_t r0 = 0; r0 < ra; r0 += TILE_MR) {
        const size_t mr = ra - r0 < TILE_MR ? ra - r0 : TILE_MR;
        const float *qr = q + r0 * d;
        float *Sr = S + r0 * lds;
        for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
            const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
            const float *panel = kp + c0 * d;
            if (W > vl) {
                switch (mr) {
                case 4: score_sve_4x2v(qr, d, panel, W, Sr + c0, lds); break;
                case 3: score_sve_mxn(qr, d, panel, W, Sr + c0, lds, 3, 2); break;
                case 2: score_sve_mxn(qr, d, panel, W, Sr + c0, lds, 2, 2); break;
                default: score_sve_mxn(qr, d, panel, W, Sr + c0, lds, 1, 2); break;
                }
            } else { /* a narrow last panel needs one vector of keys */
                switch (mr) {
                case 4: score_sve_mxn(qr, d, panel, W, Sr + c0, lds, 4, 1); break;
                case 3: score_sve_mxn(qr, d, panel, W, Sr + c0, lds, 3, 1); break;
                case 2: score_sve_mxn(qr, d, panel, W, Sr + c0, lds, 2, 1); break;
                default: score_sve_mxn(qr, d, panel, W, Sr + c0, lds, 1, 1); break;
                }
            }
        }
    }
}

#define softmax_row softmax_online_f32_sve

/* pack_v: the generic one in rows_loop.h, converting with this ISA's row converter */
#define SDPA_ROW_TO_F32 row_to_f32_sve

/* acc[r][c..c+NV*VL) = alpha[r] * acc + sum_j P[r][j] * v[j][c..] for r < mr (columns past dv
   masked off): the block stays in registers over all nb keys; four keys per step, P[r][j..j+3]
   replicated per 128-bit segment and used by indexed FMLA. */
SDPA_INLINE void pv_sve_mxn(float *acc, size_t dv, size_t c, const float *alpha, const float *P,
                           size_t lds, const float *v, ptrdiff_t vs, size_t nb, const int mr,
                           const int NV)
{
    const svbool_t all = svptrue_b32();
    const uint64_t vl = svcntw();
    const svbool_t p0 = svwhilelt_b32_u64(c, dv), p1 = svwhilelt_b32_u64(c + vl, dv);
    const svfloat32_t z = svdup_n_f32(0.0f);
    svfloat32_t a00 = z, a01 = z, a10 = z, a11 = z, a20 = z, a21 = z, a30 = z, a31 = z;
    svfloat32_t q0 = z, q1 = z, q2 = z, q3 = z, k0 = z, k1 = z; /* q: P values, k: V rows */
#define PV_LOAD(r, x)                                                                         \
    a##r##x = svmul_n_f32_x(all, svld1_f32(x ? p1 : p0, acc + (r) * dv + c + (x) * vl), alpha[r])
    SVE_FOR_BLOCK(PV_LOAD);
    size_t j = 0;
#define PV_FMA_LANE(r, x, L) a##r##x = svmla_lane_f32(a##r##x, k##x, q##r, L)
#define PV_OP0(r, x) PV_FMA_LANE(r, x, 0)
#define PV_OP1(r, x) PV_FMA_LANE(r, x, 1)
#define PV_OP2(r, x) PV_FMA_LANE(r, x, 2)
#define PV_OP3(r, x) PV_FMA_LANE(r, x, 3)
#define PV_ROW(L)                                                                             \
    do {                                                                                      \
        k0 = svld1_f32(p0, v + (ptrdiff_t)(j + (L)) * vs + c);                                \
        if (NV > 1) k1 = svld1_f32(p1, v + (ptrdiff_t)(j + (L)) * vs + c + vl);               \
    } while (0)
    for (; j + 4 <= nb; j += 4) {
        q0 = svld1rq_f32(all, P + j);
        if (mr > 1) q1 = svld1rq_f32(all, P + lds + j);
        if (mr > 2) q2 = svld1rq_f32(all, P + 2 * lds + j);
        if (mr > 3) q3 = svld1rq_f32(all, P + 3 * lds + j);
        PV_ROW(0);
        SVE_FOR_BLOCK(PV_OP0);
        PV_ROW(1);
        SVE_FOR_BLOCK(PV_OP1);
        PV_ROW(2);
        SVE_FOR_BLOCK(PV_OP2);
        PV_ROW(3);
        SVE_FOR_BLOCK(PV_OP3);
    }
    for (; j < nb; j++) {
        PV_ROW(0);
#define PV_OPN(r, x) a##r##x = svmla_n_f32_x(all, a##r##x, k##x, P[(r) * lds + j])
        SVE_FOR_BLOCK(PV_OPN);
    }
#define PV_STORE(r, x) svst1_f32(x ? p1 : p0, acc + (r) * dv + c + (x) * vl, a##r##x)
    SVE_FOR_BLOCK(PV_STORE);
#undef PV_LOAD
#undef PV_FMA_LANE
#undef PV_OP0
#undef PV_OP1
#undef PV_OP2
#undef PV_OP3
#undef PV_ROW
#undef PV_OPN
#undef PV_STORE
    (void)q1, (void)q2, (void)q3, (void)k1;
}

static void pv_sve_4x2v(float *acc, size_t dv, size_t c, const float *alpha, const float *P,
                        size_t lds, const float *v, ptrdiff_t vs, size_t nb)
{
    pv_sve_mxn(acc, dv, c, alpha, P, lds, v, vs, nb, 4, 2);
}

static void pv_tile(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
                    size_t ra, const float *v, ptrdiff_t vs, size_t nb)
{
    const uint64_t vl = svcntw();
    for (size_t r0 = 0; r0 < ra; r0 += TILE_MR) {
        const size_t mr = ra - r0 < TILE_MR ? ra - r0 : TILE_MR;
        float *ar = acc + r0 * dv;
        const float *Pr = P + r0 * lds, *al = alpha + r0;
        for (size_t c = 0; c < dv; c += 2 * vl) {
            if (dv - c > vl) {
                switch (mr) {
                case 4: pv_sve_4x2v(ar, dv, c, al, Pr, lds, v, vs, nb); break;
                case 3: pv_sve_mxn(ar, dv, c, al, Pr, lds, v, vs, nb, 3, 2); break;
                case 2: pv_sve_mxn(ar, dv, c, al, Pr, lds, v, vs, nb, 2, 2); break;
                default: pv_sve_mxn(ar, dv, c, al, Pr, lds, v, vs, nb, 1, 2); break;
                }
            } else { /* the last columns fit one vector */
                switch (mr) {
                case 4: pv_sve_mxn(ar, dv, c, al, Pr, lds, v, vs, nb, 4, 1); break;
                case 3: pv_sve_mxn(ar, dv, c, al, Pr, lds, v, vs, nb, 3, 1); break;
                case 2: pv_sve_mxn(ar, dv, c, al, Pr, lds, v, vs, nb, 2, 1); break;
                default: pv_sve_mxn(ar, dv, c, al, Pr, lds, v, vs, nb, 1, 1); break;
                }
            }
        }
    }
}

/* Fast scores (sdpa_rows.qq). Keys in panels as pack_k's (W = min(2 VL, keys left), the
   panel of key c0 at kq + c0 * d bytes): word g (quants 4g..4g+3, q4_0 expanded to n - 8) of
   key c at int32 [g * W + c], so one vector holds a word of consecutive keys and SDOT
   (indexed) takes the row's word from a replicated quadword; block b's scales at
   kd + c0 * d / 32 + b * W + c. Every query row of the unit reuses them. */
static void pack_kq(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd)
{
    const sdpa_dtype t = w->k_type;
    const size_t d = w->d, nblk = d / SDPA_QK, bb = sdpa_block_bytes((int)t);
    const size_t half = t == SDPA_Q8_0 ? SDPA_QK : SDPA_QK / 2; /* quant bytes a block stores */
    const uint64_t vl = svcntw(), vb = svcntb();
    for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
        const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
        const svint32_t idx = svindex_s32(0, (int32_t)W);
        int32_t *panel = (int32_t *)(void *)(kq + c0 * d); /* 4-byte aligned: c0 * d % 32 == 0 */
        float *kdp = kd + c0 * nblk;
        for (size_t c = 0; c < W; c++) {
            const unsigned char *p = (const unsigned char *)w->k +
                                     sdpa_off_bytes((int)t, (ptrdiff_t)(j0 + c0 + c) * w->k_stride);
            for (size_t b = 0; b < nblk; b++, p += bb) {
                uint16_t h;
                memcpy(&h, p, sizeof h);
                kdp[b * W + c] = sdpa_f16_to_f32(h);
                int32_t *col = panel + b * (SDPA_QK / 4) * W + c;
                for (size_t i = 0; i < half; i += vb) {
                    const svbool_t pb = svwhilelt_b8_u64(i, half);
                    const svbool_t pw = svwhilelt_b32_u64(i / 4, half / 4);
                    if (t == SDPA_Q8_0) {
                        const svint8_t x = svld1_s8(pb, (const int8_t *)(p + 2) + i);
                        svst1_scatter_s32index_s32(pw, col + (i / 4) * W, idx,
                                                   svreinterpret_s32_s8(x));
                    } else {
                        const svuint8_t x = svld1_u8(pb, p + 2 + i);
                        const svint8_t lo = svsub_n_s8_x(
                            pb, svreinterpret_s8_u8(svand_n_u8_x(pb, x, 15)), 8);
                        const svint8_t hi = svsub_n_s8_x(
                            pb, svreinterpret_s8_u8(svlsr_n_u8_x(pb, x, 4)), 8);
                        svst1_scatter_s32index_s32(pw, col + (i / 4) * W, idx,
                                                   svreinterpret_s32_s8(lo));
                        svst1_scatter_s32index_s32(pw, col + (SDPA_QK / 8 + i / 4) * W, idx,
                                                   svreinterpret_s32_s8(hi));
                    }
                }
            }
        }
    }
}

/* Fast scores of mr rows against a panel of W <= NV * VL keys: per block, int32 sums by SDOT
   (each lane a key, four quants per step), then s += (qd d_k) sum in f32, blocks in order (the
   scalar reference's arithmetic, op for op). */
SDPA_INLINE void score_q8_sve_mxn(const int8_t *qq, const float *qd, size_t d, const int32_t *kq,
                                  const float *kd, size_t W, float *S, size_t lds, const int mr,
                                  const int NV)
{
    const svbool_t all = svptrue_b32(), all8 = svptrue_b8(); /* all8: byte-granular loads */
    const uint64_t vl = svcntw();
    const size_t nblk = d / SDPA_QK;
    const svbool_t p0 = svwhilelt_b32_u64(0, W), p1 = svwhilelt_b32_u64(vl, W);
    const svfloat32_t z = svdup_n_f32(0.0f);
    const svint32_t zi = svdup_n_s32(0);
    const svint8_t zb = svdup_n_s8(0);
    svfloat32_t a00 = z, a01 = z, a10 = z, a11 = z, a20 = z, a21 = z, a30 = z, a31 = z;
    svint32_t i00, i01, i10, i11, i20, i21, i30, i31;
    svint8_t q0 = zb, q1 = zb, q2 = zb, q3 = zb, k0 = zb, k1 = zb;
    svfloat32_t s0 = z, s1 = z;
#define Q8_ZERO(r, x) i##r##x = zi
#define Q8_DOT0(r, x) i##r##x = svdot_lane_s32(i##r##x, k##x, q##r, 0)
#define Q8_DOT1(r, x) i##r##x = svdot_lane_s32(i##r##x, k##x, q##r, 1)
#define Q8_DOT2(r, x) i##r##x = svdot_lane_s32(i##r##x, k##x, q##r, 2)
#define Q8_DOT3(r, x) i##r##x = svdot_lane_s32(i##r##x, k##x, q##r, 3)
#define Q8_WORD(g)                                                                            \
    do {                                                                                      \
        k0 = svreinterpret_s8_s32(svld1_s32(p0, kq + (g) * W));                               \
        if (NV > 1) k1 = svreinterpret_s8_s32(svld1_s32(p1, kq + (g) * W + vl));              \
    } while (0)
#define Q8_SCALE(r, x)                                                                        \
    a##r##x = svadd_f32_x(all, a##r##x,                                                       \
                          svmul_f32_x(all, svmul_n_f32_x(all, s##x, qd[(r) * nblk + b]),      \
                                      svcvt_f32_s32_x(all, i##r##x)))
    for (size_t b = 0; b < nblk; b++) {
        SVE_FOR_BLOCK(Q8_ZERO);
        for (size_t g = 0; g < SDPA_QK / 4; g += 4) { /* four words: one quadword of q */
            const size_t o = b * SDPA_QK + 4 * g, gw = b * (SDPA_QK / 4) + g;
            q0 = svld1rq_s8(all8, qq + o);
            if (mr > 1) q1 = svld1rq_s8(all8, qq + d + o);
            if (mr > 2) q2 = svld1rq_s8(all8, qq + 2 * d + o);
            if (mr > 3) q3 = svld1rq_s8(all8, qq + 3 * d + o);
            Q8_WORD(gw);
            SVE_FOR_BLOCK(Q8_DOT0);
            Q8_WORD(gw + 1);
            SVE_FOR_BLOCK(Q8_DOT1);
            Q8_WORD(gw + 2);
            SVE_FOR_BLOCK(Q8_DOT2);
            Q8_WORD(gw + 3);
            SVE_FOR_BLOCK(Q8_DOT3);
        }
        s0 = svld1_f32(p0, kd + b * W);
        if (NV > 1) s1 = svld1_f32(p1, kd + b * W + vl);
        SVE_FOR_BLOCK(Q8_SCALE);
    }
#define Q8_STORE(r, x) svst1_f32(x ? p1 : p0, S + (r) * lds + (x) * vl, a##r##x)
    SVE_FOR_BLOCK(Q8_STORE);
#undef Q8_ZERO
#undef Q8_DOT0
#undef Q8_DOT1
#undef Q8_DOT2
#undef Q8_DOT3
#undef Q8_WORD
#undef Q8_SCALE
#undef Q8_STORE
    (void)q1, (void)q2, (void)q3, (void)k1, (void)s1;
}

static void score_q8_sve_4x2v(const int8_t *qq, const float *qd, size_t d, const int32_t *kq,
                              const float *kd, size_t W, float *S, size_t lds)
{
    score_q8_sve_mxn(qq, qd, d, kq, kd, W, S, lds, 4, 2);
}

static void score_q8_tile(const int8_t *qq, const float *qd, size_t ra, size_t d,
                          const int8_t *kq, const float *kd, size_t nb, float *S, size_t lds)
{
    const uint64_t vl = svcntw();
    const size_t nblk = d / SDPA_QK;
    for (size_t r0 = 0; r0 < ra; r0 += TILE_MR) {
        const size_t mr = ra - r0 < TILE_MR ? ra - r0 : TILE_MR;
        const int8_t *qr = qq + r0 * d;
        const float *qdr = qd + r0 * nblk;
        float *Sr = S + r0 * lds;
        for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
            const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
            const int32_t *panel = (const int32_t *)(const void *)(kq + c0 * d);
            const float *kdp = kd + c0 * nblk;
            if (W > vl) {
                switch (mr) {
                case 4: score_q8_sve_4x2v(qr, qdr, d, panel, kdp, W, Sr + c0, lds); break;
                case 3: score_q8_sve_mxn(qr, qdr, d, panel, kdp, W, Sr + c0, lds, 3, 2); break;
                case 2: score_q8_sve_mxn(qr, qdr, d, panel, kdp, W, Sr + c0, lds, 2, 2); break;
                default: score_q8_sve_mxn(qr, qdr, d, panel, kdp, W, Sr + c0, lds, 1, 2); break;
                }
            } else {
                switch (mr) {
                case 4: score_q8_sve_mxn(qr, qdr, d, panel, kdp, W, Sr + c0, lds, 4, 1); break;
                case 3: score_q8_sve_mxn(qr, qdr, d, panel, kdp, W, Sr + c0, lds, 3, 1); break;
                case 2: score_q8_sve_mxn(qr, qdr, d, panel, kdp, W, Sr + c0, lds, 2, 1); break;
                default: score_q8_sve_mxn(qr, qdr, d, panel, kdp, W, Sr + c0, lds, 1, 1); break;
                }
            }
        }
    }
}

#define SDPA_ROWS_FN rows_sve
#define SDPA_WS_FN ws_floats_sve
#include "packed_path.h"

/* the tiles are two vectors wide, a length known only at run time: nr is not stated */
#define SCORE_MR TILE_MR
#define PV_MR TILE_MR
#define PAGED_ROWS SIZE_MAX /* paged units: every one (rows_loop.h) */
#define QUANT_ROWS SIZE_MAX /* q8_0/q4_0 K and V, and fast scores: every unit */
#include "kernel_def.h"

SDPA_DEFINE_KERNELS(sve, EXP_MAX_ULP);
