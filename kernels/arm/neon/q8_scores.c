/* q8_scores.c -- NEON fast scores (sdpa_rows.qq): int8 keys per block and the int8 score tile */
#include "neon.h"

/* Fast scores (sdpa_rows.qq). Key j's 32-quant blocks at kq + j * d as int8 (quants_neon),
   its block scales at kd[b * nb + j] and minima (q4_1, q5_1) at km[b * nb + j], so that four
   keys' scales of a block are one load (nb the whole block's: a paged block is packed in one
   call, run by run through sdpa_k_run). Every query row of the unit reuses them. */
SDPA_INLINE void pack_kq_neon_typed(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd,
                                    float *km, sdpa_dtype t)
{
    const size_t d = w->d, bb = sdpa_block_bytes(t);
    for (size_t j = 0, e, n, row; j < nb; j = e) {
        n = nb - j;
        const unsigned char *k = sdpa_k_run(w, j0, nb, j, &n, &row);
        const ptrdiff_t r0 = (ptrdiff_t)row - (ptrdiff_t)j; /* block key i: row r0 + i of k */
        for (e = j + n; j < e; j++) {
            const unsigned char *p = k + sdpa_off_bytes(t, (r0 + (ptrdiff_t)j) * w->k_stride);
            int8_t *q = kq + j * d;
            for (size_t b = 0; b < d / SDPA_QK; b++, p += bb, q += SDPA_QK) {
                kd[b * nb + j] = qscale_neon(p);
                if (sdpa_dtype_has_min(t)) km[b * nb + j] = qmin_neon(p);
                int8x16_t lo, hi;
                quants_neon(p, t, &lo, &hi);
                vst1q_s8(q, lo);
                vst1q_s8(q + 16, hi);
            }
        }
    }
}

void sdpa_pack_kq_neon(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd, float *km)
{
#define PACK(T) pack_kq_neon_typed(w, j0, nb, kq, kd, km, T)
    SDPA_FORMAT_SWITCH(w->k_type, PACK);
#undef PACK
}

/* s + the exact int32 dot product of 32 int8 pairs, in four lanes: armv8-a has no SDOT, so
   SMULL (each product fits int16, -128 * -128 included) and SADALP (pairs into int32). */
SDPA_INLINE int32x4_t dot_q8_neon(int32x4_t s, int8x16_t qa, int8x16_t qb, int8x16_t ka,
                                  int8x16_t kb)
{
    s = vpadalq_s16(s, vmull_s8(vget_low_s8(qa), vget_low_s8(ka)));
    s = vpadalq_s16(s, vmull_high_s8(qa, ka));
    s = vpadalq_s16(s, vmull_s8(vget_low_s8(qb), vget_low_s8(kb)));
    return vpadalq_s16(s, vmull_high_s8(qb, kb));
}

/* Fast scores of mr (1 or 2) rows against four keys (kq at the first, kd and km at its block-0
   scale and minimum, ldk keys between blocks): per block the int32 sums of the 4 x mr pairs,
   then s += (qd d_k) sum and, with a minimum (hm, a constant), s += (qd m_k) qs in f32, blocks
   in order (the scalar reference's arithmetic, op for op). */
SDPA_INLINE void score_q8_neon_mx4(const int8_t *qq, const float *qd, const float *qs, size_t d,
                                   const int8_t *kq, const float *kd, const float *km, size_t ldk,
                                   float *S, size_t lds, const int mr, const int hm)
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
            for (int r = 0; r < mr; r++) s[r][i] = dot_q8_neon(s[r][i], qa[r], qb[r], ka, kb);
        }
        const float32x4_t kdv = vld1q_f32(kd + b * ldk);
        for (int r = 0; r < mr; r++) {
            /* lane i: key i's sum */
            const int32x4_t sum =
                vpaddq_s32(vpaddq_s32(s[r][0], s[r][1]), vpaddq_s32(s[r][2], s[r][3]));
            const float qdb = qd[(size_t)r * nblk + b];
            const float32x4_t sc = vmulq_n_f32(kdv, qdb);
            acc[r] = vaddq_f32(acc[r], vmulq_f32(sc, vcvtq_f32_s32(sum)));
            if (hm) {
                const float32x4_t sm = vmulq_n_f32(vld1q_f32(km + b * ldk), qdb);
                acc[r] = vaddq_f32(acc[r], vmulq_n_f32(sm, qs[(size_t)r * nblk + b]));
            }
        }
    }
    for (int r = 0; r < mr; r++) vst1q_f32(S + (size_t)r * lds, acc[r]);
}

/* One row against one key, as score_q8_neon_mx4 (qs NULL: no minimum). */
SDPA_INLINE float score_q8_neon_1x1(const int8_t *qq, const float *qd, const float *qs, size_t d,
                                    const int8_t *kq, const float *kd, const float *km, size_t ldk)
{
    float acc = 0.0f;
    for (size_t b = 0; b < d / SDPA_QK; b++) {
        const size_t o = b * SDPA_QK;
        const int32x4_t s = dot_q8_neon(vdupq_n_s32(0), vld1q_s8(qq + o), vld1q_s8(qq + o + 16),
                                        vld1q_s8(kq + o), vld1q_s8(kq + o + 16));
        acc += kd[b * ldk] * qd[b] * (float)vaddvq_s32(s);
        if (qs) acc += km[b * ldk] * qd[b] * qs[b];
    }
    return acc;
}

/* The tile's four-key columns for rows of 2, then 1; hm: the keys have a minimum. */
SDPA_INLINE void score_q8_neon_cols(const int8_t *qq, const float *qd, const float *qs, size_t ra,
                                    size_t d, const int8_t *kq, const float *kd, const float *km,
                                    size_t nb, float *S, size_t lds, const int hm)
{
    const size_t nblk = d / SDPA_QK, n4 = nb & ~(size_t)3;
    size_t r = 0;
    for (; r + 2 <= ra; r += 2)
        for (size_t j = 0; j < n4; j += 4)
            score_q8_neon_mx4(qq + r * d, qd + r * nblk, hm ? qs + r * nblk : NULL, d, kq + j * d,
                              kd + j, km + j, nb, S + r * lds + j, lds, 2, hm);
    for (; r < ra; r++)
        for (size_t j = 0; j < n4; j += 4)
            score_q8_neon_mx4(qq + r * d, qd + r * nblk, hm ? qs + r * nblk : NULL, d, kq + j * d,
                              kd + j, km + j, nb, S + r * lds + j, lds, 1, hm);
}

void sdpa_score_q8_neon(const int8_t *qq, const float *qd, const float *qs, size_t ra, size_t d,
                        const int8_t *kq, const float *kd, const float *km, size_t nb, float *S,
                        size_t lds)
{
    const size_t nblk = d / SDPA_QK, n4 = nb & ~(size_t)3;
    if (qs)
        score_q8_neon_cols(qq, qd, qs, ra, d, kq, kd, km, nb, S, lds, 1);
    else
        score_q8_neon_cols(qq, qd, qs, ra, d, kq, kd, km, nb, S, lds, 0);
    for (size_t r = 0; r < ra; r++)
        for (size_t j = n4; j < nb; j++)
            S[r * lds + j] = score_q8_neon_1x1(qq + r * d, qd + r * nblk, qs ? qs + r * nblk : NULL,
                                               d, kq + j * d, kd + j, km + j, nb);
}
