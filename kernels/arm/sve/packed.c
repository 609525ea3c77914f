/* packed.c -- the SVE path: K packed per key block, register-blocked score and P·V tiles */
#include "sve.h"

/* ------------------------------------------------------------------------------------------ */
/* Packing K                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Keys of a block format into panels of W = min(2 VL, keys left): each key's blocks dequantized
   lane by lane and scattered into its panel column (index lane * W). A panel may span pages:
   its keys are taken run by run (sdpa_k_run). */
SDPA_INLINE void pack_k_sve_q(const sdpa_rows *w, size_t j0, size_t nb, float *kp, sdpa_dtype t)
{
    const size_t d = w->d, bb = sdpa_block_bytes(t), half = qhalf_sve(t);
    const int hm = sdpa_dtype_has_min(t);
    const uint64_t vl = svcntw();
    for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
        const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
        const svint32_t idx = svindex_s32(0, (int32_t)W);
        float *panel = kp + c0 * d;
        for (size_t c = 0, e, n, row; c < W; c = e) {
            n = W - c;
            const unsigned char *k = sdpa_k_run(w, j0, nb, c0 + c, &n, &row);
            const ptrdiff_t r0 = (ptrdiff_t)row - (ptrdiff_t)c; /* panel key i: row r0 + i */
            for (e = c + n; c < e; c++) {
                const unsigned char *p = k + sdpa_off_bytes(t, (r0 + (ptrdiff_t)c) * w->k_stride);
                for (size_t b = 0; b < d / SDPA_QK; b++, p += bb) {
                    const svfloat32_t dq = qscale_sve(p), mq = hm ? qmin_sve(p) : dq;
                    float *col = panel + b * SDPA_QK * W + c;
                    for (size_t i = 0; i < half; i += vl) {
                        const svbool_t pg = svwhilelt_b32_u64(i, half);
                        svst1_scatter_s32index_f32(
                            pg, col + i * W, idx,
                            deq_sve(pg, quants_sve(pg, p, i, t, 0), dq, mq, hm));
                        if (t != SDPA_Q8_0)
                            svst1_scatter_s32index_f32(
                                pg, col + (SDPA_QK / 2 + i) * W, idx,
                                deq_sve(pg, quants_sve(pg, p, i, t, 1), dq, mq, hm));
                    }
                }
            }
        }
    }
}

/* Lanes of a panel column: element dd of consecutive keys, gathered with a signed 32-bit
   index (the caller checks it fits). */
SDPA_INLINE svfloat32_t gather_sve(svbool_t pg, const void *src, ptrdiff_t off, svint32_t idx,
                                   sdpa_dtype t)
{
    if (t == SDPA_F32) return svld1_gather_s32index_f32(pg, (const float *)src + off, idx);
    return widen_sve(pg, svld1uh_gather_s32index_u32(pg, (const uint16_t *)src + off, idx), t);
}

/* Panels of W = min(2 VL, keys left) keys, each taken run by run (sdpa_k_run: the whole panel
   on a contiguous unit): a run of panel keys [c, e) from row r of its array fills lanes [c, e)
   of the panel's two vectors (predicates p0, p1), lane i of vector x gathered at index
   (x VL + i - c) ks from row r, less than 2 VL |ks| in magnitude. */
SDPA_INLINE void pack_k_sve_typed(const sdpa_rows *w, size_t j0, size_t nb, float *kp, sdpa_dtype t)
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
            for (size_t c = 0, e, n, row; c < W; c = e) {
                n = W - c;
                const void *k = sdpa_k_run(w, j0, nb, c0 + c, &n, &row);
                const ptrdiff_t r0 = (ptrdiff_t)row - (ptrdiff_t)c; /* panel key i: row r0 + i */
                for (e = c + n; c < e; c++) {
                    const ptrdiff_t o = (r0 + (ptrdiff_t)c) * ks;
                    for (size_t dd = 0; dd < d; dd++) {
                        const ptrdiff_t x = o + (ptrdiff_t)dd;
                        const uint16_t h = t == SDPA_F32 ? 0 : ((const uint16_t *)k)[x];
                        panel[dd * W + c] = t == SDPA_F32   ? ((const float *)k)[x]
                                            : t == SDPA_F16 ? sdpa_f16_to_f32(h)
                                                            : sdpa_bf16_to_f32(h);
                    }
                }
            }
        }
        return;
    }
    const svbool_t all = svptrue_b32();
    for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
        const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
        float *panel = kp + c0 * d;
        for (size_t c = 0, e, n, row; c < W; c = e) {
            n = W - c;
            const void *k = sdpa_k_run(w, j0, nb, c0 + c, &n, &row);
            e = c + n;
            const svbool_t p0 = svbic_b_z(all, svwhilelt_b32_u64(0, e), svwhilelt_b32_u64(0, c));
            const svbool_t p1 = svbic_b_z(all, svwhilelt_b32_u64(vl, e), svwhilelt_b32_u64(vl, c));
            const svint32_t i0 = svindex_s32((int32_t)(-(ptrdiff_t)c * ks), (int32_t)ks);
            const svint32_t i1 =
                svindex_s32((int32_t)(((ptrdiff_t)vl - (ptrdiff_t)c) * ks), (int32_t)ks);
            const ptrdiff_t r = (ptrdiff_t)row * ks;
            for (size_t dd = 0; dd < d; dd++) {
                if (c < vl)
                    svst1_f32(p0, panel + dd * W, gather_sve(p0, k, r + (ptrdiff_t)dd, i0, t));
                if (e > vl)
                    svst1_f32(p1, panel + dd * W + vl, gather_sve(p1, k, r + (ptrdiff_t)dd, i1, t));
            }
        }
    }
}

static void pack_k(const sdpa_rows *w, size_t j0, size_t nb, float *kp)
{
    /* one specialised copy per storage type, so the per-element conversion is branch-free */
#define PACK(T)   pack_k_sve_typed(w, j0, nb, kp, T)
#define PACK_Q(T) pack_k_sve_q(w, j0, nb, kp, T)
    SDPA_TYPE_SWITCH(w->k_type, PACK, PACK_Q);
#undef PACK_Q
#undef PACK
}

/* ------------------------------------------------------------------------------------------ */
/* Score and P·V tiles                                                                         */
/* ------------------------------------------------------------------------------------------ */

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
#define SC_STEP(L)                                                                                 \
    do {                                                                                           \
        k0 = svld1_f32(p0, kp + (dd + (L)) * W);                                                   \
        if (NV > 1) k1 = svld1_f32(p1, kp + (dd + (L)) * W + vl);                                  \
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
#define SC_OPN(r, x) a##r##x = svmla_n_f32_x(all, a##r##x, k##x, q[(r)*d + dd])
        SVE_FOR_BLOCK(SC_OPN);
    }
#define SC_STORE(r, x) svst1_f32(x ? p1 : p0, S + (r)*lds + (x)*vl, a##r##x)
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
#define SCORE2(m) score_sve_mxn(qr, d, panel, W, Sr + c0, lds, m, 2)
#define SCORE1(m) score_sve_mxn(qr, d, panel, W, Sr + c0, lds, m, 1)
            if (W > vl) {
                SDPA_ROWS4_SWITCH(mr, score_sve_4x2v(qr, d, panel, W, Sr + c0, lds), SCORE2);
            } else { /* a narrow last panel needs one vector of keys */
                SDPA_ROWS4_SWITCH(mr, SCORE1(4), SCORE1);
            }
#undef SCORE1
#undef SCORE2
        }
    }
}

#define softmax_row softmax_sve

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
#define PV_LOAD(r, x)                                                                              \
    a##r##x = svmul_n_f32_x(all, svld1_f32(x ? p1 : p0, acc + (r)*dv + c + (x)*vl), alpha[r])
    SVE_FOR_BLOCK(PV_LOAD);
    size_t j = 0;
#define PV_FMA_LANE(r, x, L) a##r##x = svmla_lane_f32(a##r##x, k##x, q##r, L)
#define PV_OP0(r, x)         PV_FMA_LANE(r, x, 0)
#define PV_OP1(r, x)         PV_FMA_LANE(r, x, 1)
#define PV_OP2(r, x)         PV_FMA_LANE(r, x, 2)
#define PV_OP3(r, x)         PV_FMA_LANE(r, x, 3)
#define PV_ROW(L)                                                                                  \
    do {                                                                                           \
        k0 = svld1_f32(p0, v + (ptrdiff_t)(j + (L)) * vs + c);                                     \
        if (NV > 1) k1 = svld1_f32(p1, v + (ptrdiff_t)(j + (L)) * vs + c + vl);                    \
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
#define PV_OPN(r, x) a##r##x = svmla_n_f32_x(all, a##r##x, k##x, P[(r)*lds + j])
        SVE_FOR_BLOCK(PV_OPN);
    }
#define PV_STORE(r, x) svst1_f32(x ? p1 : p0, acc + (r)*dv + c + (x)*vl, a##r##x)
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
#define PV2(m) pv_sve_mxn(ar, dv, c, al, Pr, lds, v, vs, nb, m, 2)
#define PV1(m) pv_sve_mxn(ar, dv, c, al, Pr, lds, v, vs, nb, m, 1)
            if (dv - c > vl) {
                SDPA_ROWS4_SWITCH(mr, pv_sve_4x2v(ar, dv, c, al, Pr, lds, v, vs, nb), PV2);
            } else { /* the last columns fit one vector */
                SDPA_ROWS4_SWITCH(mr, PV1(4), PV1);
            }
#undef PV1
#undef PV2
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The path                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* fast scores: q8_scores.c */
#define pack_kq       sdpa_pack_kq_sve
#define score_q8_tile sdpa_score_q8_sve

#define SDPA_ROWS_FN packed_sve
#define SDPA_WS_FN   packed_ws_sve
#include "packed_path.h"

void sdpa_packed_sve(const sdpa_rows *w) { packed_sve(w); }
size_t sdpa_packed_ws_sve(size_t rows, size_t d, size_t dv, size_t block)
{
    return packed_ws_sve(rows, d, dv, block);
}
