/* prefill.c -- the AVX2 prefill path: K and V packed per block, register-blocked micro-kernels */
#include "avx2.h"
#include "variants.h"

/*
 * Per key block, K is converted and packed transposed in panels of SCORE_NR keys ([d][16]
 * each) and V in panels of PV_NR columns ([nb][16] each), so that both products are
 * register-blocked GEMMs: score_avx2_<mr>x16 broadcasts q[r][c] and FMAs it with two Kᵀ
 * vectors, pv_avx2_<mr>x16 broadcasts p[r][j] and FMAs it with two V vectors, mr <= 6 rows in
 * 12 accumulators. Packing costs O(nb * d) per block and is shared by all R rows.
 */

/* Scratch: S [R][lds] | alpha [R] | Kᵀ panels [lds * d] | V panels [lds * dv16] |
   packed queries [R rounded up to SCORE_MR][d] | lane-wise row maxima [R][8]. */
size_t sdpa_prefill_ws_avx2(size_t rows, size_t d, size_t dv, size_t block)
{
    const size_t lds = sdpa_round16(block_keys(block, PREFILL_BLOCK));
    return rows * lds + sdpa_round16(rows) + lds * d + lds * sdpa_round16(dv) +
           sdpa_round16((rows + SCORE_MR - 1) / SCORE_MR * SCORE_MR * d) + 8 * rows;
}

/* --- GEMM path: packing ------------------------------------------------------------------ */

/* Keys [j0, j0 + nb) into panels of 16: key j0 + 16p + i, element c at kp[16pd + 16c + i];
   a last partial panel is padded with zero keys. */
SDPA_INLINE void pack_k_avx2_t(const void *k, sdpa_dtype t, ptrdiff_t ks, size_t j0, size_t nb,
                               size_t d, float *kp)
{
    for (size_t p0 = 0; p0 < nb; p0 += SCORE_NR) {
        float *panel = kp + p0 * d;
        for (size_t h = 0; h < 2; h++) {
            const size_t jb = p0 + 8 * h;
            const size_t nk = jb < nb ? (nb - jb < 8 ? nb - jb : 8) : 0;
            for (size_t c = 0; c < d; c += 8) {
                const size_t cnt = d - c < 8 ? d - c : 8;
                __m256 r[8];
                for (size_t i = 0; i < 8; i++) {
                    const ptrdiff_t off = (ptrdiff_t)(j0 + jb + i) * ks + (ptrdiff_t)c;
                    if (i >= nk)
                        r[i] = _mm256_setzero_ps();
                    else if (cnt == 8)
                        r[i] = load8_any(k, t, off);
                    else
                        r[i] = loadn_any(k, t, off, cnt);
                }
                transpose8(r);
                for (size_t i = 0; i < cnt; i++)
                    _mm256_store_ps(panel + (c + i) * SCORE_NR + 8 * h, r[i]);
            }
        }
    }
}

static void pack_k_avx2(const sdpa_rows *w, size_t j0, size_t nb, float *kp)
{
    switch (w->k_type) {
    case SDPA_F16:
        pack_k_avx2_t(w->k, SDPA_F16, w->k_stride, j0, nb, w->d, kp);
        break;
    case SDPA_BF16:
        pack_k_avx2_t(w->k, SDPA_BF16, w->k_stride, j0, nb, w->d, kp);
        break;
    default:
        pack_k_avx2_t(w->k, SDPA_F32, w->k_stride, j0, nb, w->d, kp);
        break;
    }
}

/* Columns [c0, dv) of values [j0, j0 + nb) into panels of PV_NR = 16 columns of ld keys each,
   from key o of the panels on: column c0 + 16p + i of key j at vp[16p ld + 16(o + j) + i];
   columns past dv are zero. c0 is a multiple of 16. */
SDPA_INLINE void pack_v_avx2_t(const void *v, sdpa_dtype t, ptrdiff_t vs, size_t j0, size_t nb,
                               size_t c0, size_t dv, float *vp, size_t ld, size_t o)
{
    for (size_t j = 0; j < nb; j++) {
        const ptrdiff_t row = (ptrdiff_t)(j0 + j) * vs;
        /* where column c of key j goes */
#define VP_AT(c) (vp + ((c)-c0) / PV_NR * PV_NR * ld + (o + j) * PV_NR + (c) % PV_NR)
        size_t c = c0;
        for (; c + 8 <= dv; c += 8) _mm256_store_ps(VP_AT(c), load8_any(v, t, row + (ptrdiff_t)c));
        if (c < dv) {
            _mm256_store_ps(VP_AT(c), loadn_any(v, t, row + (ptrdiff_t)c, dv - c));
            c += 8;
        }
        if (c % PV_NR) _mm256_store_ps(VP_AT(c), _mm256_setzero_ps()); /* the panel's last 8 */
#undef VP_AT
    }
}

/* Rows [j0, j0 + nb) of v (stride vs), columns [c0, dv), into vp from key o of panels of ld keys
   (pack_v_avx2_t, the type a constant in each call). */
static void pack_v_avx2_any(const void *v, sdpa_dtype t, ptrdiff_t vs, size_t j0, size_t nb,
                            size_t c0, size_t dv, float *vp, size_t ld, size_t o)
{
    if (t == SDPA_F16)
        pack_v_avx2_t(v, SDPA_F16, vs, j0, nb, c0, dv, vp, ld, o);
    else if (t == SDPA_BF16)
        pack_v_avx2_t(v, SDPA_BF16, vs, j0, nb, c0, dv, vp, ld, o);
    else
        pack_v_avx2_t(v, SDPA_F32, vs, j0, nb, c0, dv, vp, ld, o);
}

/* f32 values need no conversion: only a partial last panel (dv not a multiple of 16) is
   packed, so that the micro-kernel never reads past a row; returns the first packed column. A
   paged unit's rows are packed whole, page by page, each page's first line of the next
   requested as it starts (the core's prefetcher then starts on that page). */
static size_t pack_v_avx2(const sdpa_rows *w, size_t j0, size_t nb, float *vp)
{
    const size_t c0 = w->v_type == SDPA_F32 && !w->pages ? w->dv / PV_NR * PV_NR : 0;
    for (size_t j = j0, e = j0 + nb, n, r; c0 < w->dv && j < e; j += n) {
        n = e - j;
        const void *x = sdpa_key_rows(w, 1, j, &n, &r);
        if (w->pages) sdpa_page_touch(w, 1, j + 1, j + 1 + w->pages->size);
        pack_v_avx2_any(x, w->v_type, w->v_stride, r, n, c0, w->dv, vp, nb, j - j0);
    }
    return c0;
}

/* --- GEMM path: micro-kernels --------------------------------------------------------------- */

/* The accumulators are named variables, not arrays: GCC otherwise keeps a copy of an array
   tile in memory and stores it on every iteration. ACC_ROWS(X) expands X(r) for r < 6; the
   "if (mr > r)" guards fold away since mr is a constant in every instantiation. */
#define ACC_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
/* row r's two accumulators += a times the 16 columns b0 b1 */
#define FMA_ROW(r, a)                                                                              \
    c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0), c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1)

/* Queries packed once per call in row panels of SCORE_MR rows, k-major: row 6g + i, element k at
   qp[6gd + 6k + i] (a last partial panel keeps the stride 6). Every broadcast of the score
   micro-kernel then comes from one pointer at constant offsets, so the unrolled loop needs no
   index arithmetic. */
static void pack_q_avx2(const float *q, size_t R, size_t d, float *qp)
{
    for (size_t g = 0; g < R; g += SCORE_MR) {
        const size_t mr = R - g < SCORE_MR ? R - g : SCORE_MR;
        float *dst = qp + g * d;
        for (size_t i = 0; i < mr; i++)
            for (size_t k = 0; k < d; k++) dst[k * SCORE_MR + i] = q[(g + i) * d + k];
    }
}

/* S[r][0..16) = q_r . K^T panel for r < mr, q packed (pack_q_avx2); also folds the 16 scores
   into the row's running lane-wise max rm[8r..8r+8), so that the softmax needs no max pass.
   NaN scores are left out of it, as the softmax's own max pass leaves them out: max(x, m)
   returns m when x is NaN. */
SDPA_INLINE void score_avx2_mx16(size_t mr, const float *qp, size_t d, const float *b, float *S,
                                 size_t lds, float *rm)
{
#define DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
    ACC_ROWS(DECL)
#undef DECL
#pragma GCC unroll 4
    for (size_t k = 0; k < d; k++) {
        const __m256 b0 = _mm256_load_ps(b + k * SCORE_NR),
                     b1 = _mm256_load_ps(b + k * SCORE_NR + 8);
#define STEP(r)                                                                                    \
    if (mr > r) {                                                                                  \
        const __m256 a = _mm256_broadcast_ss(qp + k * SCORE_MR + r);                               \
        FMA_ROW(r, a);                                                                             \
    }
        ACC_ROWS(STEP)
#undef STEP
    }
#define STORE(r)                                                                                   \
    if (mr > r) {                                                                                  \
        _mm256_store_ps(S + r * lds, c##r##0);                                                     \
        _mm256_store_ps(S + r * lds + 8, c##r##1);                                                 \
        const __m256 mx = _mm256_max_ps(c##r##0, _mm256_load_ps(rm + 8 * r));                      \
        _mm256_store_ps(rm + 8 * r, _mm256_max_ps(c##r##1, mx));                                   \
    }
    ACC_ROWS(STORE)
#undef STORE
}

#define SCORE_KERNEL(m)                                                                            \
    static void score_avx2_##m##x16(const float *qp, size_t d, const float *b, float *S,           \
                                    size_t lds, float *rm)                                         \
    {                                                                                              \
        score_avx2_mx16(m, qp, d, b, S, lds, rm);                                                  \
    }
SCORE_KERNEL(1)
SCORE_KERNEL(2)
SCORE_KERNEL(3)
SCORE_KERNEL(4)
SCORE_KERNEL(5)
SCORE_KERNEL(6)

typedef void (*score_mk_fn)(const float *, size_t, const float *, float *, size_t, float *);
static const score_mk_fn score_mks[SCORE_MR + 1] = {NULL,
                                                    score_avx2_1x16,
                                                    score_avx2_2x16,
                                                    score_avx2_3x16,
                                                    score_avx2_4x16,
                                                    score_avx2_5x16,
                                                    score_avx2_6x16};

/* S[r][j] = q_r . key j for g0 <= r < R, j < sdpa_round16(nb) and j < the row panel's last limit,
   g0 a multiple of SCORE_MR, each score (padding keys of a last partial panel included) folded
   into row r's running lane-wise max rm[r]: panels outer, so each K^T panel (16 d floats) is
   reused from L1 by all row panels. */
static void score_avx2_tile(const float *qp, size_t g0, size_t R, size_t d, const float *kp,
                            size_t nb, float *S, size_t lds, float *rm, const size_t *lim,
                            size_t j0)
{
    for (size_t p0 = 0; p0 < nb; p0 += SCORE_NR) {
        const float *b = kp + p0 * d;
        size_t r = g0;
        /* row panels whose last row sees none of this K panel are skipped (the diagonal of causal
           attention): the softmax reads no score past a row's limit, and their rm is unused */
        while (r < R && lim[(r + SCORE_MR < R ? r + SCORE_MR : R) - 1] <= j0 + p0) r += SCORE_MR;
        for (; r + SCORE_MR <= R; r += SCORE_MR)
            score_avx2_6x16(qp + r * d, d, b, S + r * lds + p0, lds, rm + 8 * r);
        if (r < R) score_mks[R - r](qp + r * d, d, b, S + r * lds + p0, lds, rm + 8 * r);
    }
}

/* acc[r][0..cols) = alpha_r acc[r] + sum_j P[r][j] V panel[j], r < mr, cols <= 16. */
SDPA_INLINE void pv_avx2_mx16(size_t mr, float *acc, size_t dv, const float *alpha, const float *P,
                              size_t lds, const float *b, ptrdiff_t bs, size_t nb, size_t cols)
{
    const int full = cols == PV_NR;
    const __m256i m0 = lanes_mask(cols), m1 = lanes_mask(cols > 8 ? cols - 8 : 0);
#define LOAD(r)                                                                                    \
    __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();                           \
    if (mr > r) {                                                                                  \
        const __m256 al = _mm256_broadcast_ss(alpha + r);                                          \
        const float *o = acc + r * dv;                                                             \
        c##r##0 = _mm256_mul_ps(al, full ? _mm256_loadu_ps(o) : _mm256_maskload_ps(o, m0));        \
        c##r##1 =                                                                                  \
            _mm256_mul_ps(al, full ? _mm256_loadu_ps(o + 8) : _mm256_maskload_ps(o + 8, m1));      \
    }
    ACC_ROWS(LOAD)
#undef LOAD
    const float *P3 = P + 3 * lds;
#pragma GCC unroll 4
    for (size_t j = 0; j < nb; j++) {
        const float *bj = b + (ptrdiff_t)j * bs;
        const __m256 b0 = _mm256_loadu_ps(bj), b1 = _mm256_loadu_ps(bj + 8);
#define STEP(r)                                                                                    \
    if (mr > r) {                                                                                  \
        const __m256 a = _mm256_broadcast_ss((r < 3 ? P : P3) + (r % 3) * lds + j);                \
        FMA_ROW(r, a);                                                                             \
    }
        ACC_ROWS(STEP)
#undef STEP
    }
#define STORE(r)                                                                                   \
    if (mr > r) {                                                                                  \
        float *o = acc + r * dv;                                                                   \
        if (full) {                                                                                \
            _mm256_storeu_ps(o, c##r##0);                                                          \
            _mm256_storeu_ps(o + 8, c##r##1);                                                      \
        } else {                                                                                   \
            _mm256_maskstore_ps(o, m0, c##r##0);                                                   \
            _mm256_maskstore_ps(o + 8, m1, c##r##1);                                               \
        }                                                                                          \
    }
    ACC_ROWS(STORE)
#undef STORE
}

#define PV_KERNEL(m)                                                                               \
    static void pv_avx2_##m##x16(float *acc, size_t dv, const float *alpha, const float *P,        \
                                 size_t lds, const float *b, ptrdiff_t bs, size_t nb, size_t cols) \
    {                                                                                              \
        pv_avx2_mx16(m, acc, dv, alpha, P, lds, b, bs, nb, cols);                                  \
    }
PV_KERNEL(1)
PV_KERNEL(2)
PV_KERNEL(3)
PV_KERNEL(4)
PV_KERNEL(5)
PV_KERNEL(6)

typedef void (*pv_mk_fn)(float *, size_t, const float *, const float *, size_t, const float *,
                         ptrdiff_t, size_t, size_t);
static const pv_mk_fn pv_mks[PV_MR + 1] = {NULL,         pv_avx2_1x16, pv_avx2_2x16, pv_avx2_3x16,
                                           pv_avx2_4x16, pv_avx2_5x16, pv_avx2_6x16};

/* Column panels outer, so each V panel (nb x 16 floats) is reused from L1/L2 by all row panels.
   Panels before c_pack are read in place from f32 V rows (vd, stride vs); the rest come packed
   from vp (stride 16). */
static void pv_avx2_tile(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
                         size_t ra, const float *vd, ptrdiff_t vs, size_t c_pack, const float *vp,
                         size_t nb, const size_t *lim, size_t j0, bool v_finite)
{
    static const float ones[PV_MR] = {1, 1, 1, 1, 1, 1};
    for (size_t c = 0; c < dv; c += PV_NR) {
        const int packed = c >= c_pack;
        const float *b = packed ? vp + (c - c_pack) * nb : vd + c;
        const ptrdiff_t bs = packed ? PV_NR : vs;
        const size_t cols = dv - c < PV_NR ? dv - c : PV_NR;
        for (size_t r = 0; r < ra; r += PV_MR) {
            const size_t mr = ra - r < PV_MR ? ra - r : PV_MR;
            /* rows [a, r + mr) over keys [ka, kb): one call per row panel when the keys some rows
               do not see have finite V (p = 0 then adds exactly 0), else runs of keys all of
               the rows see, so that an inf or NaN there is skipped, not weighted by 0 */
#define PV_RUN(a, ka, kb)                                                                          \
    do {                                                                                           \
        const size_t n_ = r + mr - (a);                                                            \
        const float *al_ = (ka) ? ones : alpha + (a);                                              \
        if (n_ == PV_MR)                                                                           \
            pv_avx2_6x16(acc + (a)*dv + c, dv, al_, P + (a)*lds + (ka), lds,                       \
                         b + (ptrdiff_t)(ka)*bs, bs, (kb) - (ka), cols);                           \
        else                                                                                       \
            pv_mks[n_](acc + (a)*dv + c, dv, al_, P + (a)*lds + (ka), lds, b + (ptrdiff_t)(ka)*bs, \
                       bs, (kb) - (ka), cols);                                                     \
    } while (0)
            if (v_finite)
                PV_RUN(r, 0, sdpa_seen(lim[r + mr - 1], j0, nb));
            else
                SDPA_VISIBLE_RUNS(lim, r, r + mr, j0, nb, PV_RUN);
#undef PV_RUN
        }
    }
}

/* --- the hooks of the generic loop (rows_loop.h) -------------------------------------------- */

/* rm holds each row's running lane-wise max of the scores computed since its last softmax
   step (all of a block's score calls, whatever their number), -inf once that step read it. */
typedef struct prefill_ctx {
    float *kp, *vp, *qp, *rm;
    int rm_ok; /* the score kernel's row maxima are the scores' (no multipliers, no modifiers) */
} prefill_ctx;

static inline void rm_reset(prefill_ctx *c, size_t r)
{
    _mm256_store_ps(c->rm + 8 * r, _mm256_set1_ps(-INFINITY));
}

static inline size_t loop_begin(prefill_ctx *c, const sdpa_rows *w, float **S, size_t *lds,
                                float **alpha)
{
    const size_t R = w->rows, d = w->d;
    const size_t B = block_keys(w->block, PREFILL_BLOCK);
    *lds = sdpa_round16(B);
    *S = w->ws;
    *alpha = *S + R * *lds;
    c->kp = *alpha + sdpa_round16(R);
    c->vp = c->kp + *lds * d;
    c->qp = c->vp + *lds * sdpa_round16(w->dv);
    c->rm = c->qp + sdpa_round16((R + SCORE_MR - 1) / SCORE_MR * SCORE_MR * d);
    pack_q_avx2(w->q, R, d, c->qp);
    for (size_t r = 0; r < R; r++) rm_reset(c, r);
    /* multipliers and modifiers change the scores after the kernel took their maxima */
    c->rm_ok = w->score_mul == NULL && !sdpa_is_variant(w);
    return B;
}

static inline void loop_scores(prefill_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               float *S, size_t lds)
{
    pack_k_avx2(w, j0, nb, c->kp);
    /* from r0's row panel: rows before r0 in it get scores that are never used, and no maxima */
    const size_t g0 = r0 / SCORE_MR * SCORE_MR;
    score_avx2_tile(c->qp, g0, w->rows, w->d, c->kp, nb, S, lds, c->rm, w->kv_limit, j0);
    for (size_t r = g0; r < r0; r++) rm_reset(c, r);
}

static inline float loop_softmax(prefill_ctx *c, size_t r, float *s, size_t nv, size_t nb, float *m,
                                 float *l)
{
    /* the score kernel's max is exact when the row sees every key of the block and the block
       has no zero padding keys (score calls start at multiples of 16 columns: only the
       block's last panel can be partial) */
    const float *rmax = nv == nb && nb % SCORE_NR == 0 && c->rm_ok ? c->rm + 8 * r : NULL;
    const float alpha = softmax_avx2(1, s, nv, nb, m, l, rmax);
    rm_reset(c, r);
    return alpha;
}

static inline void loop_values(prefill_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               const float *alpha, const float *S, size_t lds)
{
    const size_t c_pack = pack_v_avx2(w, j0, nb, c->vp);
    /* f32 V in place (columns before c_pack; none of a paged unit) */
    const float *vd = w->pages ? c->vp : (const float *)w->v + (ptrdiff_t)j0 * w->v_stride;
    /* the keys some rows of the unit do not see (a causal diagonal), checked once a block */
    const size_t first = sdpa_visible(w, r0, j0, nb), last = sdpa_visible(w, w->rows - 1, j0, nb);
    const bool v_finite = first == last || sdpa_v_finite(w, j0 + first, j0 + last);
    pv_avx2_tile(w->acc + r0 * w->dv, w->dv, alpha + r0, S + r0 * lds, lds, w->rows - r0, vd,
                 w->v_stride, c_pack, c->vp, nb, w->kv_limit + r0, j0, v_finite);
}

#define SDPA_LOOP_FN              prefill_loop_avx2
#define SDPA_LOOP_CTX             prefill_ctx
#define SDPA_LOOP_VALUES_PAGED(c) 1 /* a paged block's V packed page by page (pack_v_avx2) */
#include "rows_loop.h"

void sdpa_prefill_avx2(const sdpa_rows *w) { prefill_loop_avx2(w); }
