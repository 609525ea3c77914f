/* packed_path.h -- the rows_loop.h hooks of a path that packs each key block and runs row-major
 * tiles */
/*
 * For implementations with one path for every unit (neon, sve): K is converted and packed per
 * block, V converted per block (f32 V read in place), and two register-blocked tile kernels do
 * the products. Included by the implementation's translation unit after it defines, as static
 * inline functions compiled for its ISA:
 *
 *   SDPA_KPAD(d)                       floats per packed key row (>= d), a macro
 *   void  pack_k(const sdpa_rows *w, size_t j0, size_t nb, float *kp)
 *         converts keys [j0, j0 + nb) to f32 in the ISA's packed layout in kp
 *         (room: nb * SDPA_KPAD(d) floats, 64-byte aligned); on a paged unit (w->pages) the
 *         whole block at once, its rows read through the pages in the contiguous block's
 *         layout, each page's later rows requested as rows_loop.h did per piece (see below)
 *   void  score_tile(const float *q, size_t ra, size_t d, const float *kp, size_t nb,
 *                    float *S, size_t lds)
 *         S[r * lds + j] = dot(q[r * d ..], key j) for r < ra, j < nb
 *   float softmax_row(float *s, size_t n, float *m, float *l)
 *         the online-softmax primitive (sdpa.h contract)
 *   SDPA_ROW_TO_F32(src, element_offset, n, dtype, dst), its converter of one row of any
 *         storage type (for the block formats n and the offset are multiples of SDPA_QK)
 *   void  pack_kq(const sdpa_rows *w, size_t j0, size_t nb, int8_t *kq, float *kd, float *km)
 *         fast scores (sdpa_rows.qq): the integer quants of keys [j0, j0 + nb) as int8
 *         (sdpa_block_quants) in the ISA's layout in kq (room: nb * d bytes), their block
 *         scales in kd and, for the types with a minimum, their block minima in km in the same
 *         layout (room: nb * d / SDPA_QK floats each); a paged unit's block as pack_k's
 *   void  score_q8_tile(const int8_t *qq, const float *qd, const float *qs, size_t ra,
 *                       size_t d, const int8_t *kq, const float *kd, const float *km,
 *                       size_t nb, float *S, size_t lds)
 *         S[r * lds + j] = sum_b (qd_b d_k[j][b]) dot_b(qq[r * d ..], k_j) (+ (qd_b m_k[j][b])
 *         qs_b when qs is not NULL) for r < ra, j < nb, with qd_b = qd[r * d / 32 + b] and
 *         qs_b = qs[r * d / 32 + b] the sum of the row's block quants: block dot products
 *         exact in int32, each block's terms added in that order, the blocks in order
 *   void  pv_tile(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
 *                 size_t ra, const float *v, ptrdiff_t vs, size_t nb)
 *         acc[r] = alpha[r] * acc[r] + sum_j P[r * lds + j] * v[j * vs ..] for r < ra
 *
 * and SDPA_ROWS_FN / SDPA_WS_FN, the names to give the path and its scratch size.
 *
 * A paged unit's block takes one loop_scores call and one loop_values call
 * (SDPA_LOOP_SCORES_PAGED, SDPA_LOOP_VALUES_PAGED): the packers walk its pages, so every key's
 * score is computed as in the contiguous block. rows_loop.h then requests no later rows for
 * the scores: pack_k and pack_kq request, on reaching each page, the K rows the loop requested
 * before that page's piece, so that the requests stay a page or two ahead of the packing
 * rather than cover a whole block (sized to a large part of L2) at once.
 */
#include <math.h>

#include "kernel_table.h"
#include "kernel_util.h"

typedef struct packed_ctx {
    float *kp, *vp;
    float *ones; /* rows floats of 1: the alpha of a run after the first */
    /* fast scores with K of a type with a minimum: each row's block sums of its quants
       (rows * d / 32, exact in f32: at most 32 * 127), once per unit; else NULL */
    float *qs;
} packed_ctx;

/* f32 values of a view are used in place; rows of the other types, and a paged unit's rows,
   are converted into vp (the dtype a constant in each loop, so the converter specialises when
   it inlines). */
static const float *pack_v(const sdpa_rows *w, size_t j0, size_t nb, float *vp, ptrdiff_t *vs)
{
    const ptrdiff_t stride = w->v_stride;
    if (w->v_type == SDPA_F32 && !w->pages) {
        *vs = stride;
        return (const float *)w->v + (ptrdiff_t)j0 * stride;
    }
    const size_t dv = w->dv;
    *vs = (ptrdiff_t)dv;
#define PACK_V_AS(T)                                                                               \
    for (size_t j = 0, n, r; j < nb; j += n) {                                                     \
        n = nb - j;                                                                                \
        const void *src = sdpa_key_rows(w, 1, j0 + j, &n, &r);                                     \
        for (size_t i = 0; i < n; i++)                                                             \
            SDPA_ROW_TO_F32(src, (ptrdiff_t)(r + i) * stride, dv, T, vp + (j + i) * dv);           \
    }
    switch (w->v_type) {
    case SDPA_F32: /* a paged unit's */
        PACK_V_AS(SDPA_F32);
        break;
    case SDPA_F16:
        PACK_V_AS(SDPA_F16);
        break;
    case SDPA_Q8_0:
        PACK_V_AS(SDPA_Q8_0);
        break;
    case SDPA_Q4_0:
        PACK_V_AS(SDPA_Q4_0);
        break;
    case SDPA_Q4_1:
        PACK_V_AS(SDPA_Q4_1);
        break;
    case SDPA_Q5_0:
        PACK_V_AS(SDPA_Q5_0);
        break;
    case SDPA_Q5_1:
        PACK_V_AS(SDPA_Q5_1);
        break;
    case SDPA_IQ4_NL:
        PACK_V_AS(SDPA_IQ4_NL);
        break;
    default:
        PACK_V_AS(SDPA_BF16);
        break;
    }
#undef PACK_V_AS
    return vp;
}

/* Scratch layout: S [rows][lds], kp [block][KPAD(d)], vp [block][dv], alpha [rows], ones [rows],
   qs [rows][d / 32]. */
static size_t SDPA_WS_FN(size_t rows, size_t d, size_t dv, size_t block)
{
    const size_t lds = sdpa_round16(block);
    return rows * lds + sdpa_round16(block * SDPA_KPAD(d)) + sdpa_round16(block * dv) +
           2 * sdpa_round16(rows) + sdpa_round16(rows * (d / SDPA_QK));
}

static inline size_t loop_begin(packed_ctx *c, const sdpa_rows *w, float **S, size_t *lds,
                                float **alpha)
{
    const size_t B = w->block;
    *lds = sdpa_round16(B);
    *S = w->ws;
    c->kp = *S + w->rows * *lds;
    c->vp = c->kp + sdpa_round16(B * SDPA_KPAD(w->d));
    *alpha = c->vp + sdpa_round16(B * w->dv);
    c->ones = *alpha + sdpa_round16(w->rows);
    for (size_t r = 0; r < w->rows; r++) c->ones[r] = 1.0f;
    c->qs = NULL;
    if (w->qq && sdpa_dtype_has_min(w->k_type)) {
        c->qs = c->ones + sdpa_round16(w->rows);
        for (size_t i = 0; i < w->rows * (w->d / SDPA_QK); i++) {
            int32_t sum = 0;
            for (size_t e = 0; e < SDPA_QK; e++) sum += w->qq[i * SDPA_QK + e];
            c->qs[i] = (float)sum;
        }
    }
    return B;
}

/* w: a unit, or a paged unit itself for a whole block (its keys read through the pages) */
static inline void loop_scores(packed_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               float *S, size_t lds)
{
    if (w->qq) {
        /* fast scores: f32 K is not needed, so its quants, scales and minima use kp's room
           (nb * d bytes and 2 nb * d / 32 floats fit in its nb * KPAD(d) floats, d >= 32) */
        const size_t d = w->d, nblk = d / SDPA_QK;
        int8_t *kq = (int8_t *)(void *)c->kp;
        float *kd = c->kp + sdpa_round16((nb * d + 3) / 4), *km = kd + nb * nblk;
        pack_kq(w, j0, nb, kq, kd, km);
        score_q8_tile(w->qq + r0 * d, w->qd + r0 * nblk, c->qs ? c->qs + r0 * nblk : NULL,
                      w->rows - r0, d, kq, kd, km, nb, S + r0 * lds, lds);
        return;
    }
    pack_k(w, j0, nb, c->kp);
    score_tile(w->q + r0 * w->d, w->rows - r0, w->d, c->kp, nb, S + r0 * lds, lds);
}

/* the diagonal tile: keys past the row's limit get weight exactly 0 */
static inline float loop_softmax(packed_ctx *c, size_t r, float *s, size_t nv, size_t nb, float *m,
                                 float *l)
{
    (void)c, (void)r;
    for (size_t j = nv; j < nb; j++) s[j] = -INFINITY;
    return softmax_row(s, nb, m, l);
}

static inline void loop_values(packed_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               const float *alpha, const float *S, size_t lds)
{
    ptrdiff_t vs;
    const float *vr = pack_v(w, j0, nb, c->vp, &vs);
    const size_t dv = w->dv;
    /* rows [a, rows) over keys [ka, kb) (SDPA_PV_TILES): a key past a row's limit whose V is
       not finite is skipped, not weighted by its p = 0; alpha (applied by the first run) is
       then 1 */
#define PACKED_RUN(a, ka, kb)                                                                      \
    pv_tile(w->acc + (a)*dv, dv, (ka) ? c->ones : alpha + (a), S + (a)*lds + (ka), lds,            \
            w->rows - (a), vr + (ptrdiff_t)(ka)*vs, vs, (kb) - (ka))
    SDPA_PV_TILES(w, w->kv_limit, r0, w->rows, j0, nb, PACKED_RUN);
#undef PACKED_RUN
}

#define SDPA_LOOP_FN              SDPA_ROWS_FN
#define SDPA_LOOP_CTX             packed_ctx
#define SDPA_LOOP_VALUES_PAGED(c) 1 /* a paged block's V converted page by page (pack_v) */
#define SDPA_LOOP_SCORES_PAGED(c) 1 /* and its K packed page by page (pack_k, pack_kq) */
#include "rows_loop.h"
