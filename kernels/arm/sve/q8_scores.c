/* q8_scores.c -- SVE fast scores (sdpa_rows.qq): int8 key panels and the SDOT score tile */
#include "sve.h"

/* Fast scores (sdpa_rows.qq). Keys in panels as pack_k's (W = min(2 VL, keys left), the
   panel of key c0 at kq + c0 * d bytes): word g (quants 4g..4g+3, quants_sve_b) of key c at
   int32 [g * W + c], so one vector holds a word of consecutive keys and SDOT (indexed) takes
   the row's word from a replicated quadword; block b's scales at kd + c0 * d / 32 + b * W + c,
   its minima (q4_1, q5_1) likewise in km. Every query row of the unit reuses them. */
SDPA_INLINE void pack_kq_sve_typed(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd,
                                   float *km, sdpa_dtype t)
{
    const size_t d = w->d, nblk = d / SDPA_QK, bb = sdpa_block_bytes(t), half = qhalf_sve(t);
    const uint64_t vl = svcntw(), vb = svcntb();
    for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
        const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
        const svint32_t idx = svindex_s32(0, (int32_t)W);
        int32_t *panel = (int32_t *)(void *)(kq + c0 * d); /* 4-byte aligned: c0 * d % 32 == 0 */
        float *kdp = kd + c0 * nblk, *kmp = km + c0 * nblk;
        for (size_t c = 0, e, n, row; c < W; c = e) { /* run by run: a panel may span pages */
            n = W - c;
            const unsigned char *k = sdpa_k_run(w, j0, nb, c0 + c, &n, &row);
            const ptrdiff_t r0 = (ptrdiff_t)row - (ptrdiff_t)c; /* panel key i: row r0 + i */
            for (e = c + n; c < e; c++) {
                const unsigned char *p = k + sdpa_off_bytes(t, (r0 + (ptrdiff_t)c) * w->k_stride);
                for (size_t b = 0; b < nblk; b++, p += bb) {
                    uint16_t h;
                    memcpy(&h, p, sizeof h);
                    kdp[b * W + c] = sdpa_f16_to_f32(h);
                    if (sdpa_dtype_has_min(t)) {
                        memcpy(&h, p + 2, sizeof h);
                        kmp[b * W + c] = sdpa_f16_to_f32(h);
                    }
                    int32_t *col = panel + b * (SDPA_QK / 4) * W + c;
                    for (size_t i = 0; i < half; i += vb) {
                        const svbool_t pb = svwhilelt_b8_u64(i, half);
                        const svbool_t pw = svwhilelt_b32_u64(i / 4, half / 4);
                        svst1_scatter_s32index_s32(
                            pw, col + (i / 4) * W, idx,
                            svreinterpret_s32_s8(quants_sve_b(pb, p, i, t, 0)));
                        if (t != SDPA_Q8_0)
                            svst1_scatter_s32index_s32(
                                pw, col + (SDPA_QK / 8 + i / 4) * W, idx,
                                svreinterpret_s32_s8(quants_sve_b(pb, p, i, t, 1)));
                    }
                }
            }
        }
    }
}

void sdpa_pack_kq_sve(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd, float *km)
{
#define PACK(T) pack_kq_sve_typed(w, j0, nb, kq, kd, km, T)
    SDPA_FORMAT_SWITCH(w->k_type, PACK);
#undef PACK
}

/* Fast scores of mr rows against a panel of W <= NV * VL keys: per block, int32 sums by SDOT
   (each lane a key, four quants per step), then s += (qd d_k) sum and, with a minimum (qs not
   NULL: one branch per block, not a copy per case), s += (qd m_k) qs in f32, blocks in order
   (the scalar reference's arithmetic, op for op). */
SDPA_INLINE void score_q8_sve_mxn(const int8_t *qq, const float *qd, const float *qs, size_t d,
                                  const int32_t *kq, const float *kd, const float *km, size_t W,
                                  float *S, size_t lds, const int mr, const int NV)
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
    svfloat32_t s0 = z, s1 = z, m0 = z, m1 = z;
#define Q8_ZERO(r, x) i##r##x = zi
#define Q8_DOT0(r, x) i##r##x = svdot_lane_s32(i##r##x, k##x, q##r, 0)
#define Q8_DOT1(r, x) i##r##x = svdot_lane_s32(i##r##x, k##x, q##r, 1)
#define Q8_DOT2(r, x) i##r##x = svdot_lane_s32(i##r##x, k##x, q##r, 2)
#define Q8_DOT3(r, x) i##r##x = svdot_lane_s32(i##r##x, k##x, q##r, 3)
#define Q8_WORD(g)                                                                                 \
    do {                                                                                           \
        k0 = svreinterpret_s8_s32(svld1_s32(p0, kq + (g)*W));                                      \
        if (NV > 1) k1 = svreinterpret_s8_s32(svld1_s32(p1, kq + (g)*W + vl));                     \
    } while (0)
#define Q8_SCALE(r, x)                                                                             \
    a##r##x = svadd_f32_x(all, a##r##x,                                                            \
                          svmul_f32_x(all, svmul_n_f32_x(all, s##x, qd[(r)*nblk + b]),             \
                                      svcvt_f32_s32_x(all, i##r##x)))
#define Q8_MIN(r, x)                                                                               \
    a##r##x = svadd_f32_x(                                                                         \
        all, a##r##x,                                                                              \
        svmul_n_f32_x(all, svmul_n_f32_x(all, m##x, qd[(r)*nblk + b]), qs[(r)*nblk + b]))
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
        if (qs) {
            m0 = svld1_f32(p0, km + b * W);
            if (NV > 1) m1 = svld1_f32(p1, km + b * W + vl);
            SVE_FOR_BLOCK(Q8_MIN);
        }
    }
#define Q8_STORE(r, x) svst1_f32(x ? p1 : p0, S + (r)*lds + (x)*vl, a##r##x)
    SVE_FOR_BLOCK(Q8_STORE);
#undef Q8_ZERO
#undef Q8_DOT0
#undef Q8_DOT1
#undef Q8_DOT2
#undef Q8_DOT3
#undef Q8_WORD
#undef Q8_SCALE
#undef Q8_MIN
#undef Q8_STORE
    (void)q1, (void)q2, (void)q3, (void)k1, (void)s1, (void)m1;
}

static void score_q8_sve_4x2v(const int8_t *qq, const float *qd, const float *qs, size_t d,
                              const int32_t *kq, const float *kd, const float *km, size_t W,
                              float *S, size_t lds)
{
    score_q8_sve_mxn(qq, qd, qs, d, kq, kd, km, W, S, lds, 4, 2);
}

void sdpa_score_q8_sve(const int8_t *qq, const float *qd, const float *qs, size_t ra, size_t d,
                       const int8_t *kq, const float *kd, const float *km, size_t nb, float *S,
                       size_t lds)
{
    const uint64_t vl = svcntw();
    const size_t nblk = d / SDPA_QK;
    for (size_t r0 = 0; r0 < ra; r0 += TILE_MR) {
        const size_t mr = ra - r0 < TILE_MR ? ra - r0 : TILE_MR;
        const int8_t *qr = qq + r0 * d;
        const float *qdr = qd + r0 * nblk, *qsr = qs ? qs + r0 * nblk : NULL;
        float *Sr = S + r0 * lds;
        for (size_t c0 = 0; c0 < nb; c0 += 2 * vl) {
            const size_t W = nb - c0 < 2 * vl ? nb - c0 : 2 * vl;
            const int32_t *pn = (const int32_t *)(const void *)(kq + c0 * d);
            const float *kdp = kd + c0 * nblk, *kmp = km + c0 * nblk;
            float *Sc = Sr + c0;
            /* mr rows (1 to TILE_MR = 4) by two vectors of keys, or one for a narrow last panel */
#define Q8_TILE2(m) score_q8_sve_mxn(qr, qdr, qsr, d, pn, kdp, kmp, W, Sc, lds, m, 2)
#define Q8_TILE1(m) score_q8_sve_mxn(qr, qdr, qsr, d, pn, kdp, kmp, W, Sc, lds, m, 1)
            if (W > vl) {
                SDPA_ROWS4_SWITCH(mr, score_q8_sve_4x2v(qr, qdr, qsr, d, pn, kdp, kmp, W, Sc, lds),
                                  Q8_TILE2);
            } else {
                SDPA_ROWS4_SWITCH(mr, Q8_TILE1(4), Q8_TILE1);
            }
#undef Q8_TILE1
#undef Q8_TILE2
        }
    }
}
