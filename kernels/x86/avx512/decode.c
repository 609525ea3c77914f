/* decode.c -- the AVX-512 decode path: few query rows, K and V read once, in place, from memory */
#include "decode_ilv.h"
#include "decode_pf.h"
#include "variants.h"

/*
 * Work of at most DECODE_MAX_ROWS rows is bound by reading K and V once, and the core overlaps
 * little of its arithmetic with the memory stream, so every operation per key counts. Per block
 * of keys: scores in tiles of RP rows x 16/RP keys (RP = R rounded up to 1, 2, 4 or 8; the
 * padding rows take no arithmetic), each K chunk loaded and converted once, in a register, and
 * used by every row, the 16 dot products of a tile reduced by one shuffle tree
 * (decode_scores.c); then one online-softmax step per row for the whole block; then P·V with
 * each V vector converted once in a register and used by every row, the accumulators of R rows
 * x NV column vectors in registers (decode_pv.h). K and V are requested ahead of their use, in
 * address order (decode_pf.h); with at most DECODE_ILV_ROWS rows the P·V of a block and the
 * scores of the next go in alternating turns of DECODE_ILV_TURN keys, so that both arrays stream
 * together (decode_values_ilv).
 */

static size_t decode_block(size_t block) { return sdpa_min(block ? block : 1, DECODE_BLOCK); }

size_t sdpa_decode_ws_avx512(size_t rows, size_t d, size_t dv, size_t block)
{
    /* alpha | scores | q packed by lines (padded to 8 rows) */
    (void)block, (void)dv;
    return sdpa_max(state_floats(rows) + rows * DECODE_LDS + DECODE_MAX_ROWS * (d + 32),
                    sdpa_decode_q_ws_avx512(rows, d)); /* or the block-format path's */
}

/* q rows [0, R) padded to RP (repeating the last), packed line by line for
   score_avx512_decode_fast: the E elements of line g of row r at qp[(g * RP + r) * E], the
   partial last line zero-padded. */
static void pack_q_lines(const float *const *qr, size_t RP, size_t d, size_t E, float *qp)
{
    const size_t lines = (d + E - 1) / E;
    for (size_t g = 0; g < lines; g++)
        for (size_t r = 0; r < RP; r++)
            for (size_t e = 0; e < E; e += 16) {
                const size_t c = g * E + e;
                const __mmask16 m = c < d ? lanes(d - c) : 0;
                _mm512_storeu_ps(qp + (g * RP + r) * E + e,
                                 _mm512_maskz_loadu_ps(m, qr[r] + (c < d ? c : 0)));
            }
}

/* --- the hooks of the generic loop (rows_loop.h) -------------------------------------------- */

typedef struct decode_ctx {
    const float *qr[DECODE_MAX_ROWS]; /* query rows, the last repeated up to DECODE_MAX_ROWS */
    float *qpk;                       /* q packed by lines for score_avx512_decode_fast */
    float *S;                         /* the scores' scratch ([rows][DECODE_LDS]) */
    size_t ek, ev;                    /* bytes per K, V element */
    size_t kend;                      /* keys past it are never read (of the unit last given) */
    size_t NB;
    int other;        /* the other array's stream, and short blocks (decode_pf) */
    int ilv;          /* the next block's scores among the P·V (decode_values_ilv) */
    int ilv_pages;    /* ... and a paged unit's pages fit its turns (they request those pages) */
    int pv_pages;     /* a paged unit's block comes whole to loop_values (decode_values_pages) */
    decode_pf pf;     /* the block's streams, from the scores to the values */
    sdpa_ilv_pre pre; /* the block the last P·V scored ahead */
} decode_ctx;

static inline size_t loop_begin(decode_ctx *c, const sdpa_rows *w, float **S, size_t *lds,
                                float **alpha)
{
    const size_t R = w->rows, d = w->d, dv = w->dv;
    c->other = R <= 2;
    c->NB = c->other ? sdpa_min(DECODE_BLOCK_FEW, decode_block(w->block)) : decode_block(w->block);
    *lds = DECODE_LDS;
    *alpha = w->ws;                /* the state stays in w->m, w->l */
    *S = *alpha + state_floats(R); /* [R][lds] */
    c->qpk = *S + R * DECODE_LDS;  /* aligned */
    c->S = *S;
    c->ilv = R <= DECODE_ILV_ROWS && !sdpa_is_variant(w);
    c->ilv_pages = c->ilv && w->piece_of && sdpa_ilv_pages_ok(w->piece_of, DECODE_PV_KB);
    /* a paged block's P·V in sub-blocks over two pages, rather than a call per 16-key page
       (each reloading and storing the rows' accumulators); with one or two rows outside the
       turns the scores already request each page's V rows, and the call per page is kept */
    c->pv_pages =
        (c->ilv || !c->other) && w->piece_of && 2 * w->piece_of->pages->size == DECODE_PV_KB;
    c->pre.n = 0;
    for (size_t r = 0; r < DECODE_MAX_ROWS; r++) c->qr[r] = w->q + sdpa_min(r, R - 1) * d;
    const size_t RP = R == 1 ? 1 : R == 2 ? 2 : R <= 4 ? 4 : 8;
    pack_q_lines(c->qr, RP, d, w->k_type == SDPA_F32 ? 16 : 32, c->qpk);
    c->ek = w->k_type == SDPA_F32 ? 4 : 2;
    c->ev = w->v_type == SDPA_F32 ? 4 : 2;
    c->kend = sdpa_min(w->kv_end, w->kv_limit[R - 1]);
    /* the steady-state streams run DECODE_PF_KEYS keys ahead; the call's first keys are
       requested here, at once, so that they too are on their way before they are needed (later
       requests are spread among the arithmetic: a burst of a whole block's lines would stall on
       the few line-fill buffers while no arithmetic runs) */
    sdpa_pf_rows k0 =
        decode_rows(w->k, w->k_stride, c->ek, d * c->ek, w->kv_begin, DECODE_PF_KEYS, c->kend);
    sdpa_pf_rows v0 =
        decode_rows(w->v, w->v_stride, c->ev, dv * c->ev, w->kv_begin, DECODE_PF_KEYS, c->kend);
    sdpa_pf_rows_next(&k0, (int)k0.n);
    sdpa_pf_rows_next(&v0, (int)v0.n);
    return c->NB;
}

/* A paged piece's rows of a later page (sdpa_rows.ahead_row, ahead_n) for the phase's streams:
   the second stream when it is free (more than two rows), so that they are requested from the
   piece's first keys on, far ahead of their use (the core's own prefetcher has not yet found
   that page); else after the first stream's rows. */
static inline void decode_ahead(decode_ctx *c, const void *row, size_t row_bytes, size_t n)
{
    if (!n) return;
    if (c->other)
        sdpa_pf_rows_chain(&c->pf.s[0], row, row_bytes, n);
    else
        c->pf.s[1] =
            sdpa_pf_rows_begin(row, c->pf.s[0].skip + (ptrdiff_t)(64 * c->pf.s[0].L), row_bytes, n);
}

/* The rows of keys [j, j + n) of x as a prefetch stream (K: v = 0), cut at x's kend and at the
   end of j's page. */
static inline sdpa_pf_rows ilv_rows(const decode_ctx *c, const sdpa_rows *w, const sdpa_ilv_keys *x,
                                    int v, size_t j, size_t n)
{
    const void *base;
    size_t jend;
    const size_t lj = sdpa_ilv_span(x, v, j, &base, &jend);
    return v ? decode_rows(base, w->v_stride, c->ev, w->dv * c->ev, lj, n, jend)
             : decode_rows(base, w->k_stride, c->ek, w->d * c->ek, lj, n, jend);
}

/* All rows are computed (r0 is ignored): the score tiles are shaped by the row count. */
static inline void loop_scores(decode_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               float *S, size_t lds)
{
    (void)r0;
    const size_t d = w->d;
    c->kend = sdpa_min(w->kv_end, w->kv_limit[w->rows - 1]); /* w may be a page's piece */
    if (sdpa_ilv_pre_hit(&c->pre, w, j0, nb, (size_t)(S - c->S))) return; /* scored ahead */
    /* the score loop requests K DECODE_PF_KEYS keys ahead (and, with few rows, this block's V
       rows); never a key at or past kend (see decode_pf) */
    const decode_pf pf = {
        {decode_rows(w->k, w->k_stride, c->ek, d * c->ek, j0 + DECODE_PF_KEYS, nb, c->kend),
         decode_rows(w->v, w->v_stride, c->ev, w->dv * c->ev, j0, c->other ? nb : 0, c->kend)},
        {0, 0}};
    c->pf = pf;
    decode_ahead(c, w->ahead_row, d * c->ek, w->ahead_n);
    sdpa_score_decode_avx512(c->qr, w->rows, d, w->k, NULL, w->k_type, w->k_stride, j0, nb, S, lds,
                             &c->pf, c->qpk, 0);
}

static inline float loop_softmax(decode_ctx *c, size_t r, float *s, size_t nv, size_t nb, float *m,
                                 float *l)
{
    (void)c, (void)r, (void)nb;
    return softmax_avx512(1, s, nv, m, l);
}

/* The P·V of the keys [j0, j0 + nb) of the view w (at S, alpha: the block's first such part
   or not) in turns of x->turn keys, each followed by the scores of the same keys of the next
   block, [jn, jn + nbn) of x, into the part of S the turn has used up (recorded for
   loop_scores by loop_values). a0 is key j0's index in x. Every turn of either kind requests
   half a turn of rows of both arrays, one turn ahead of their use (V from a0 + turn, K from
   jn + turn: what the last phases requested), so that K and V stream together.
   The softmax blocks, the score tiles (the turns fall on the tile grid) and the P·V sub-blocks
   are unchanged: the results are bitwise those of the block order. */
static void decode_values_ilv(decode_ctx *c, const sdpa_rows *w, const sdpa_ilv_keys *x, size_t j0,
                              size_t a0, size_t nb, size_t jn, size_t nbn, float *S,
                              const float *alpha, const size_t *valid)
{
    const size_t R = w->rows, T = x->turn, h = T / 2;
    const sdpa_pages *pg = w->pages; /* w a paged unit: K and V through its pages */
    size_t vk = a0 + T, kk = jn + T; /* the first rows of each array not yet requested */
    for (size_t ja = 0; ja < nb; ja += T) {
        const int both = ja < nbn; /* a score turn follows */
        c->pf.s[0] = ilv_rows(c, w, x, 1, vk, both ? h : T);
        c->pf.s[1] = ilv_rows(c, w, x, 0, kk, both ? h : 0);
        vk += both ? h : T, kk += both ? h : 0;
        sdpa_pv_decode_avx512(R, w->acc, w->dv, alpha, S, w->v, pg, w->v_type, w->v_stride, j0,
                              valid, &c->pf, ja, ja + T, both);
        if (!both) continue;
        c->pf.s[0] = ilv_rows(c, w, x, 0, kk, h);
        c->pf.s[1] = ilv_rows(c, w, x, 1, vk, h);
        vk += h, kk += h;
        const void *kp = x->k;
        const size_t kj = pg ? jn + ja : sdpa_ilv_page(x, 0, jn + ja, &kp);
        sdpa_score_decode_avx512(c->qr, R, w->d, kp, pg, w->k_type, w->k_stride, kj,
                                 sdpa_min(T, nbn - ja), S + ja, DECODE_LDS, &c->pf, c->qpk, 1);
    }
}

/* The P·V of a paged unit's block, keys [j0, j0 + nb) of w (pages of DECODE_PV_KB / 2 keys), in
   one pass through the pages rather than a call per page: with the turns (c->ilv) as
   decode_values_ilv's turns of DECODE_PV_KB keys, each scoring the next block's keys at the same
   place, when the next block lies whole before the rows' end and every row sees this one (all
   but a unit's last block); else in sub-blocks of DECODE_PV_KB keys, each requesting the V rows
   of the next. The results are bitwise those of the call per page. */
static void decode_values_pages(decode_ctx *c, const sdpa_rows *w, size_t j0, size_t nb,
                                const float *alpha, size_t *valid)
{
    const size_t R = w->rows, T = DECODE_PV_KB;
    const sdpa_ilv_keys x = {w->pages, NULL, NULL, c->kend, T};
    const size_t jn = j0 + nb, nbn = jn < c->kend ? sdpa_page_block(w, jn, c->NB) : 0;
    c->pre.n = 0;
    if (c->ilv && valid[0] == nb && nbn && jn + nbn <= c->kend) {
        decode_values_ilv(c, w, &x, j0, j0, nb, jn, nbn, c->S, alpha, valid);
        sdpa_ilv_scored(&c->pre, w, 0, jn, nbn);
        return;
    }
    for (size_t ja = 0; ja < nb; ja += T) { /* the next sub-block's two pages, a stream each */
        c->pf.s[0] = ilv_rows(c, w, &x, 1, j0 + ja + T, T / 2);
        c->pf.s[1] = ilv_rows(c, w, &x, 1, j0 + ja + T + T / 2, T / 2);
        sdpa_pv_decode_avx512(R, w->acc, w->dv, alpha, c->S, w->v, w->pages, w->v_type, w->v_stride,
                              j0, valid, &c->pf, ja, sdpa_min(ja + T, nb), 0);
    }
}

/* Keys per turn of decode_values_ilv over a view's own rows or a page's piece: DECODE_ILV_TURN,
   half a P·V sub-block, so that fewer rows of each array are in use at once (the longer turns
   ran slower where K and V lie at the same address modulo 4 KiB); a P·V sub-block for bf16 V,
   whose P·V tiles permute the rows' accumulators at each call (PV_BF16_PAIRS), once per turn.
   (A paged unit's whole block, decode_values_pages, takes turns of a sub-block: two 16-key
   pages.) */
_Static_assert(DECODE_PV_KB % DECODE_ILV_TURN == 0, "a turn is a part of a P·V sub-block");
static inline size_t ilv_turn(const sdpa_rows *w)
{
    return w->v_type == SDPA_BF16 ? DECODE_PV_KB : DECODE_ILV_TURN;
}

static inline void loop_values(decode_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               const float *alpha, const float *S, size_t lds)
{
    (void)r0, (void)lds;
    const size_t R = w->rows, o = (size_t)(S - c->S);
    size_t valid[DECODE_MAX_ROWS];
    for (size_t r = 0; r < R; r++) valid[r] = sdpa_visible(w, r, j0, nb);
    c->kend = sdpa_min(w->kv_end, w->kv_limit[R - 1]);
    if (w->pages) { /* the whole block of a paged unit (c->pv_pages) */
        decode_values_pages(c, w, j0, nb, alpha, valid);
        return;
    }
    sdpa_ilv_keys x;
    size_t a0, jn, nbn;
    if (sdpa_ilv_plan(w, j0, nb, o, c->NB, c->kend, ilv_turn(w), &c->pre, &x, &a0, &jn, &nbn) &&
        c->ilv && valid[0] == nb) {
        decode_values_ilv(c, w, &x, j0, a0, nb, jn, nbn, c->S + o, alpha, valid);
        sdpa_ilv_scored(&c->pre, w, o, jn, nbn);
        return;
    }
    /* the P·V loop requests V DECODE_PF_KEYS keys ahead (and, with few rows, the next block's K
       rows) */
    c->pf.s[0] =
        decode_rows(w->v, w->v_stride, c->ev, w->dv * c->ev, j0 + DECODE_PF_KEYS, nb, c->kend);
    c->pf.s[1] = decode_rows(w->k, w->k_stride, c->ek, w->d * c->ek, j0 + c->NB,
                             c->other ? c->NB : 0, c->kend);
    decode_ahead(c, w->ahead_row, w->dv * c->ev, w->ahead_n);
    sdpa_pv_decode_avx512(R, w->acc, w->dv, alpha, S, w->v, NULL, w->v_type, w->v_stride, j0, valid,
                          &c->pf, 0, nb, 0);
}

#define SDPA_LOOP_FN         decode_loop_avx512
#define SDPA_LOOP_CTX        decode_ctx
#define SDPA_LOOP_AHEAD_ROWS 1 /* a paged piece's rows ahead join the streams (decode_pf) */
/* the turns request the next keys' pages (decode_values_ilv) */
#define SDPA_LOOP_PAGES_SELF(c)   ((c)->ilv_pages)
#define SDPA_LOOP_VALUES_PAGED(c) ((c)->pv_pages)
/* a whole block's turns scored the next block: no piece of it is made for loop_scores */
#define SDPA_LOOP_SCORED(c, w, j0, nb) ((c)->pv_pages && sdpa_ilv_pre_hit(&(c)->pre, w, j0, nb, 0))
#include "rows_loop.h"

void sdpa_decode_avx512(const sdpa_rows *w)
{
    if (w->qq || sdpa_dtype_quantized(w->k_type) || sdpa_dtype_quantized(w->v_type))
        sdpa_decode_q_avx512(w);
    else
        decode_loop_avx512(w);
}
