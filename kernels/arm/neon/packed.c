/* packed.c -- the NEON path: K packed per key block, register-blocked score and P·V tiles */
#include "neon.h"

/* ------------------------------------------------------------------------------------------ */
/* Packing K                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Stores rows r0..r3 (4 keys, 4 consecutive dimensions each) transposed into a panel of width W:
   dst[i * W + c] = element i of key c. */
SDPA_INLINE void store_neon_4x4t(float32x4_t r0, float32x4_t r1, float32x4_t r2, float32x4_t r3,
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
SDPA_INLINE void pack_neon_4x4(const void *k, ptrdiff_t ks, ptrdiff_t row0, size_t dd, sdpa_dtype t,
                               float *dst, size_t W)
{
    const ptrdiff_t o = row0 * ks + (ptrdiff_t)dd;
    store_neon_4x4t(load_neon_1x4(k, o, t), load_neon_1x4(k, o + ks, t),
                    load_neon_1x4(k, o + 2 * ks, t), load_neon_1x4(k, o + 3 * ks, t), dst, W);
}

/* One panel of W (4 or 16) keys starting at row `row0` of k (not a block format). */
SDPA_INLINE void pack_neon_panel(const void *k, ptrdiff_t ks, ptrdiff_t row0, size_t d,
                                 sdpa_dtype t, size_t W, float *dst)
{
    size_t dd = 0;
    for (; dd + 4 <= d; dd += 4)
        for (size_t g = 0; g < W; g += 4)
            pack_neon_4x4(k, ks, row0 + (ptrdiff_t)g, dd, t, dst + dd * W + g, W);
    for (; dd < d; dd++)
        for (size_t c = 0; c < W; c++)
            dst[dd * W + c] = load_neon_1x1(k, (row0 + (ptrdiff_t)c) * ks + (ptrdiff_t)dd, t);
}

/* Keys of a block format into the same panels, four keys at a time whatever the panel's width
   (one copy of that code per type): each block dequantized in registers half by half (16
   elements of 4 keys: 16 vectors) and transposed 4x4 into the panel (d is a multiple of 32);
   the last nb % 4 keys row by row. Run by run (sdpa_k_run): a block's runs but its last are
   whole pages of a multiple of 16 keys (rows_loop.h's page grid), so no panel straddles two
   and the layout is the contiguous block's. */
SDPA_INLINE void pack_k_neon_q(const sdpa_rows *w, size_t j0, size_t nb, float *kp, sdpa_dtype t)
{
    const size_t d = w->d, bb = sdpa_block_bytes(t), n16 = nb & ~(size_t)15;
    const ptrdiff_t ks = w->k_stride;
    const int hm = sdpa_dtype_has_min(t);
    for (size_t c = 0, e, n, row; c < nb; c = e) {
        n = nb - c;
        const unsigned char *k = sdpa_k_run(w, j0, nb, c, &n, &row);
        const ptrdiff_t r0 = (ptrdiff_t)row - (ptrdiff_t)c; /* block key i: row r0 + i of k */
        e = c + n;
        for (; c + 4 <= e; c += 4) {
            const size_t W = c < n16 ? 16 : 4, c0 = c < n16 ? c & ~(size_t)15 : c;
            float *dst = kp + c0 * d + (c - c0);
            const unsigned char *r[4];
            for (int i = 0; i < 4; i++) r[i] = k + sdpa_off_bytes(t, (r0 + (ptrdiff_t)c + i) * ks);
            for (size_t b = 0; b < d / SDPA_QK; b++) {
                float32x4_t dk[4], mk[4];
                int8x16_t q[4][2];
                for (int i = 0; i < 4; i++) {
                    dk[i] = vdupq_n_f32(qscale_neon(r[i] + b * bb));
                    mk[i] = hm ? vdupq_n_f32(qmin_neon(r[i] + b * bb)) : dk[i];
                    quants_neon(r[i] + b * bb, t, &q[i][0], &q[i][1]);
                }
                for (int h = 0; h < 2; h++) {
                    float32x4_t y[4][4];
                    for (int i = 0; i < 4; i++) widen_q_neon(q[i][h], dk[i], mk[i], hm, y[i]);
                    float *col = dst + (b * SDPA_QK + 16 * (size_t)h) * W;
                    for (int x = 0; x < 4; x++, col += 4 * W)
                        store_neon_4x4t(y[0][x], y[1][x], y[2][x], y[3][x], col, W);
                }
            }
        }
        for (; c < e; c++) row_to_f32_neon(k, (r0 + (ptrdiff_t)c) * ks, d, t, kp + c * d);
    }
}

/* Panels of 16, then of 4, then rows, run by run as pack_k_neon_q. */
SDPA_INLINE void pack_k_neon_typed(const sdpa_rows *w, size_t j0, size_t nb, float *kp,
                                   sdpa_dtype t)
{
    if (sdpa_dtype_quantized(t)) {
        pack_k_neon_q(w, j0, nb, kp, t);
        return;
    }
    const size_t d = w->d;
    const ptrdiff_t ks = w->k_stride;
    for (size_t c = 0, e, n, row; c < nb; c = e) {
        n = nb - c;
        const void *k = sdpa_k_run(w, j0, nb, c, &n, &row);
        const ptrdiff_t r0 = (ptrdiff_t)row - (ptrdiff_t)c; /* block key i: row r0 + i of k */
        e = c + n;
        for (; c + 16 <= e; c += 16)
            pack_neon_panel(k, ks, r0 + (ptrdiff_t)c, d, t, 16, kp + c * d);
        for (; c + 4 <= e; c += 4) pack_neon_panel(k, ks, r0 + (ptrdiff_t)c, d, t, 4, kp + c * d);
        for (; c < e; c++) row_to_f32_neon(k, (r0 + (ptrdiff_t)c) * ks, d, t, kp + c * d);
    }
}

static void pack_k(const sdpa_rows *w, size_t j0, size_t nb, float *kp)
{
    /* one specialised copy per storage type, so the per-element conversion is branch-free */
#define PACK(T) pack_k_neon_typed(w, j0, nb, kp, T)
    SDPA_TYPE_SWITCH(w->k_type, PACK, PACK);
#undef PACK
}

/* ------------------------------------------------------------------------------------------ */
/* Score and P·V tiles                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* One step of a register tile: acc[r][x] += the 4 floats at b + 4x times lane L (a constant) of
   c[r], for r < mr and x < NV (the tile's constants in scope). */
#define FMA_LANES(acc, b, c, L)                                                                    \
    do {                                                                                           \
        const float *b_ = (b);                                                                     \
        for (int x_ = 0; x_ < NV; x_++) {                                                          \
            const float32x4_t bv_ = vld1q_f32(b_ + 4 * x_);                                        \
            for (int r_ = 0; r_ < mr; r_++)                                                        \
                (acc)[r_][x_] = vfmaq_laneq_f32((acc)[r_][x_], bv_, (c)[r_], L);                   \
        }                                                                                          \
    } while (0)
/* STEP(L) for the four lanes L of a vector, in order */
#define LANES4(STEP)                                                                               \
    STEP(0);                                                                                       \
    STEP(1);                                                                                       \
    STEP(2);                                                                                       \
    STEP(3)

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
#define SCORE_STEP(L) FMA_LANES(acc, kp + (dd + (L)) * W, qv, L)
        LANES4(SCORE_STEP);
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

static void score_neon_panel(const float *q, size_t mr, size_t d, const float *kp, float *S,
                             size_t lds, size_t W)
{
#define SCORE16(m) score_neon_mxn(q, d, kp, S, lds, m, 4)
#define SCORE4(m)  score_neon_mxn(q, d, kp, S, lds, m, 1)
    if (W == 16) {
        SDPA_ROWS4_SWITCH(mr, score_neon_4x16(q, d, kp, S, lds), SCORE16);
    } else {
        SDPA_ROWS4_SWITCH(mr, score_neon_4x4(q, d, kp, S, lds), SCORE4);
    }
#undef SCORE4
#undef SCORE16
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
        for (; c < n16; c += 16) score_neon_panel(qr, mr, d, kp + c * d, Sr + c, lds, 16);
        for (; c < n4; c += 4) score_neon_panel(qr, mr, d, kp + c * d, Sr + c, lds, 4);
        /* the last nb % 4 keys are packed row by row: plain dot products */
        if (c < nb)
            for (size_t r = 0; r < mr; r++)
                score_neon_1xn(qr + r * d, kp + c * d, d, nb - c, d, 1.0f, Sr + r * lds + c);
    }
}

#define softmax_row softmax_neon

/* pack_v: the generic one in rows_loop.h, converting with this ISA's row converter */
#define SDPA_ROW_TO_F32 row_to_f32_neon

/* acc[r][c..c+4*NV) = alpha[r] * acc + sum_j P[r][j] * v[j][c..] for r < mr: the column block of
   mr rows stays in registers over all nb keys; four keys per step, each P[r][j..j+3] loaded once
   and used lane by lane. */
SDPA_INLINE void pv_neon_mxn(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
                             const float *v, ptrdiff_t vs, size_t nb, const int mr, const int NV)
{
    float32x4_t a[TILE_MR][4];
    for (int r = 0; r < mr; r++)
        for (int x = 0; x < NV; x++)
            a[r][x] = vmulq_n_f32(vld1q_f32(acc + r * dv + 4 * x), alpha[r]);
    size_t j = 0;
    for (; j + 4 <= nb; j += 4) {
        float32x4_t pv[TILE_MR];
        for (int r = 0; r < mr; r++) pv[r] = vld1q_f32(P + r * lds + j);
#define PV_STEP(L) FMA_LANES(a, v + (ptrdiff_t)(j + (L)) * vs, pv, L)
        LANES4(PV_STEP);
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

static void pv_neon_block(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
                          const float *v, ptrdiff_t vs, size_t nb, size_t mr, size_t W)
{
#define PV16(m) pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, m, 4)
#define PV4(m)  pv_neon_mxn(acc, dv, alpha, P, lds, v, vs, nb, m, 1)
    if (W == 16) {
        SDPA_ROWS4_SWITCH(mr, pv_neon_4x16(acc, dv, alpha, P, lds, v, vs, nb), PV16);
    } else {
        SDPA_ROWS4_SWITCH(mr, PV4(4), PV4);
    }
#undef PV4
#undef PV16
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
            pv_neon_block(ar + c, dv, alpha + r0, Pr, lds, v + c, vs, nb, mr, 16);
        for (; c < c4; c += 4) pv_neon_block(ar + c, dv, alpha + r0, Pr, lds, v + c, vs, nb, mr, 4);
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

/* ------------------------------------------------------------------------------------------ */
/* The path                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* fast scores: q8_scores.c */
#define pack_kq       sdpa_pack_kq_neon
#define score_q8_tile sdpa_score_q8_neon

#define SDPA_ROWS_FN packed_neon
#define SDPA_WS_FN   packed_ws_neon
#include "packed_path.h"

void sdpa_packed_neon(const sdpa_rows *w) { packed_neon(w); }
size_t sdpa_packed_ws_neon(size_t rows, size_t d, size_t dv, size_t block)
{
    return packed_ws_neon(rows, d, dv, block);
}
