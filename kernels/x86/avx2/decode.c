/* decode.c -- the AVX2 decode path: few query rows, K and V read once, in place, from memory */
#include "avx2.h"
#include "decode_ilv.h"
#include "prefetch.h"
#include "variants.h"

/*
 * Packing would be a second pass over data used only a few times, so K and V are read in
 * place, converted in registers, and every load is shared by all rows: scores as dot products
 * along d (rows x keys accumulators, reduced at the end), values as rows x columns accumulators
 * over the block's keys. With at most DECODE_ILV_ROWS rows the P·V of a block and the scores of
 * the next go in alternating turns of DECODE_ILV_TURN keys, so that both arrays stream together
 * (decode_values_ilv).
 */

/* Scratch: S [R][lds] | alpha [R]. */
size_t sdpa_decode_ws_avx2(size_t rows, size_t d, size_t dv, size_t block)
{
    (void)dv;
    return sdpa_max(rows * sdpa_round16(block_keys(block, DECODE_BLOCK)) + sdpa_round16(rows),
                    sdpa_decode_q_ws_avx2(rows, d));
}

/* --- direct path (few rows): micro-kernels reading K/V in place --------------------------- */

/* The requests of one turn of decode_values_ilv: two runs of lines in address order (run 0 of
   the turn's own array, run 1 of the other), each one turn ahead of its use. Each tile (a score
   tile, or a P·V column pass) takes a share of b lines of each run (ilv_pf_share) and requests
   at most per lines of each a step, so that the turn's requests spread over its arithmetic. */
typedef struct ilv_pf {
    const char *p0, *p1; /* the next line of each run */
    size_t n0, n1;       /* lines of each run not yet shared out */
    size_t m0, m1;       /* lines of the current share not yet requested */
    size_t b0, b1, per;  /* lines of each run per share; most lines of a run per step */
} ilv_pf;

/* lines shared over `units` tiles of `steps` steps each */
static inline void ilv_pf_rate(ilv_pf *s, size_t units, size_t steps)
{
    s->b0 = (s->n0 + units - 1) / units;
    s->b1 = (s->n1 + units - 1) / units;
    s->per = steps ? (sdpa_max(s->b0, s->b1) + steps - 1) / steps : 0;
}

static inline void ilv_pf_share(ilv_pf *s)
{
    s->m0 = sdpa_min(s->b0, s->n0), s->n0 -= s->m0;
    s->m1 = sdpa_min(s->b1, s->n1), s->n1 -= s->m1;
}

SDPA_INLINE void ilv_pf_step(ilv_pf *s)
{
    for (size_t i = 0; i < s->per && s->m0; i++, s->m0--, s->p0 += 64)
        __builtin_prefetch(s->p0, 0, SDPA_PF_STREAM_LOCALITY);
    for (size_t i = 0; i < s->per && s->m1; i++, s->m1--, s->p1 += 64)
        __builtin_prefetch(s->p1, 0, SDPA_PF_STREAM_LOCALITY);
}

/* Scores of mr rows against nk keys (mr * nk <= 12), S[r][i] for keys j..j+nk. */
SDPA_INLINE void score_avx2_decode_tile(size_t mr, size_t nk, sdpa_dtype t, const float *q,
                                        size_t d, const void *k, ptrdiff_t ks, size_t j, float *S,
                                        size_t lds, ptrdiff_t pfo, const char *oth,
                                        const char *oend, size_t oper, ilv_pf *ip)
{
    /* pfo != 0: the rows pfo elements past this tile's keys exist, and each step that starts
       a cache line of them requests it: the requests spread over the arithmetic. oth != NULL:
       the lines [oth, oend) (the tile's V rows, end to end) are requested the same way, oper
       at each such step (callers without them pass a constant NULL, and the code goes).
       ip != NULL: decode_values_ilv's runs, a step each */
    const ptrdiff_t es = t == SDPA_F32 ? 4 : 2;
    /* mr * nk <= 12 accumulators (12: four rows by three keys, whose 12 FMA chains leave the
       FMA units slack that 8 chains of 4-cycle latency would not) */
    __m256 a[16];
    for (size_t i = 0; i < 16; i++) a[i] = _mm256_setzero_ps();
    size_t c = 0;
    for (; c + 8 <= d; c += 8) {
        if (pfo && (((ptrdiff_t)c * es) & 63) == 0)
            for (size_t i = 0; i < nk; i++)
                __builtin_prefetch((const char *)k +
                                       ((ptrdiff_t)(j + i) * ks + (ptrdiff_t)c + pfo) * es,
                                   0, SDPA_PF_STREAM_LOCALITY);
        if (oth && (((ptrdiff_t)c * es) & 63) == 0)
            for (size_t i = 0; i < oper && oth < oend; i++, oth += 64)
                __builtin_prefetch(oth, 0, SDPA_PF_STREAM_LOCALITY);
        if (ip) ilv_pf_step(ip);
        __m256 kv[8];
        for (size_t i = 0; i < nk; i++)
            kv[i] = load8_any(k, t, (ptrdiff_t)(j + i) * ks + (ptrdiff_t)c);
        for (size_t r = 0; r < mr; r++) {
            __m256 qv = _mm256_loadu_ps(q + r * d + c);
            /* one load per query vector: left alone, the compiler folds it into every FMA that
               uses it, and the loads (not the FMAs) become the limit */
            if (nk > 1) __asm__("" : "+x"(qv));
            for (size_t i = 0; i < nk; i++)
                a[r * nk + i] = _mm256_fmadd_ps(qv, kv[i], a[r * nk + i]);
        }
    }
    if (c < d) {
        const __m256i mk = lanes_mask(d - c);
        __m256 kv[8];
        for (size_t i = 0; i < nk; i++)
            kv[i] = loadn_any(k, t, (ptrdiff_t)(j + i) * ks + (ptrdiff_t)c, d - c);
        for (size_t r = 0; r < mr; r++) {
            const __m256 qv = _mm256_maskload_ps(q + r * d + c, mk);
            for (size_t i = 0; i < nk; i++)
                a[r * nk + i] = _mm256_fmadd_ps(qv, kv[i], a[r * nk + i]);
        }
    }
    float out[16];
    _mm256_storeu_ps(out, reduce8x8(a));
    if (mr * nk > 8) _mm256_storeu_ps(out + 8, reduce8x8(a + 8)); /* a[12..16) stay zero */
    for (size_t r = 0; r < mr; r++)
        for (size_t i = 0; i < nk; i++) S[r * lds + i] = out[r * nk + i];
}

/* Software prefetch. The kernel alternates a score pass over K and a value pass over V per
   block; left to the hardware prefetchers, memory would sit idle during whichever pass is
   compute-bound. So each pass requests the row DECODE_PF_KEYS keys ahead of the one it works on,
   in the same array, a few lines per key spread among the arithmetic: the score pass whole K
   rows, each value pass the lines of its own columns of the V row. The requests run past the
   block's end into the next block, so only a call's first keys need requesting up front (K at
   the call's start, V during the first score pass). Never at or past kv_end.

   One-row work has little arithmetic per key, and its score and value passes would each stream
   one array while the other sits idle. So when the call streams K and V from memory
   (sdpa_rows.stream) it goes in blocks of DECODE_BLOCK_FEW keys, and each pass also requests the
   other array one pass ahead: the score pass the block's V rows (inside its tiles, in address
   order, when they lie end to end), the first value pass the next block's K rows. In cache the
   scheme is slower, hence the flag; with two or more rows it does not pay.

   The interleaved turns (decode_values_ilv) replace both schemes where they apply: each turn
   requests its share of two runs, half a turn of rows of each array, and nothing else. */
/* Whether this work takes the one-row streaming scheme above. */
static inline int stream_one_row(const sdpa_rows *w) { return w->rows == 1 && w->stream; }

/* Keys per score tile for R rows: see score_avx2_decode_tile. */
#define SCORE_TILE_KEYS(R) ((R) == 4 ? 3 : 8 / (R))

/* Keys [j0, j0 + nb) for all R <= 8 rows, in tiles of nk keys (8 / R, or 3 for R = 4), so each
   loaded K vector feeds R FMAs. */
SDPA_INLINE void score_avx2_decode_block(sdpa_dtype t, size_t R, const float *q, size_t d,
                                         const void *k, ptrdiff_t ks, size_t j0, size_t nb,
                                         float *S, size_t lds, const sdpa_rows *w, int other)
{
    const size_t nk = SCORE_TILE_KEYS(R);
    const size_t ke = t == SDPA_F32 ? 4 : 2, ve = w->v_type == SDPA_F32 ? 4 : 2;
    const int first = j0 == w->kv_begin; /* nothing requested this block's first V rows */
    /* other (a constant at each call, so that the loop without it is as lean as before): the
       block's V rows too (see DECODE_BLOCK_FEW), inside the tiles when they lie end to end in whole
       lines, else here */
    const size_t vrow = w->dv * ve;
    const int vplain = (ptrdiff_t)vrow == w->v_stride * (ptrdiff_t)ve && vrow % 64 == 0 &&
                       ((uintptr_t)w->v & 63) == 0;
    /* the tile's nk V rows over its steps that start a line of K, an equal share each */
    const size_t starts = ((d & ~(size_t)7) * ke + 63) / 64;
    const size_t oper = starts ? (nk * vrow / 64 + starts - 1) / starts : 0;
    size_t j = 0;
    if (first)
        for (size_t i = 0; i < DECODE_PF_KEYS && j0 + i < w->kv_end; i++)
            sdpa_pf_row(k, ke, ks, j0 + i, d);
    for (; j < nb; j += nk) {
        const size_t n = nb - j < nk ? nb - j : nk; /* only R <= 4 has nk > 1, hence a tail */
        /* the rows DECODE_PF_KEYS ahead: requested inside the tile when they all exist, else here
         */
        const ptrdiff_t pfo = j0 + j + n - 1 + DECODE_PF_KEYS < w->kv_end ? DECODE_PF_KEYS * ks : 0;
        const int oin = other && vplain && n == nk;
        const char *oth = oin ? (const char *)w->v + (j0 + j) * vrow : NULL;
        for (size_t i = 0; i < n; i++) {
            if (!pfo && j0 + j + i + DECODE_PF_KEYS < w->kv_end)
                sdpa_pf_row(k, ke, ks, j0 + j + i + DECODE_PF_KEYS, d);
            if ((other && !oin) || (first && j + i < DECODE_PF_KEYS))
                sdpa_pf_row(w->v, ve, w->v_stride, j0 + j + i, w->dv);
        }
        /* a tile of m rows x n_ keys from key j0 + jj, requesting no other array */
#define SCORE_TILE(m, n_, jj)                                                                      \
    score_avx2_decode_tile(m, n_, t, q, d, k, ks, j0 + (jj), S + (jj), lds, pfo, NULL, NULL, 0,    \
                           NULL)
#define TILE_CASE(m, n_)                                                                           \
    case m:                                                                                        \
        SCORE_TILE(m, n_, j);                                                                      \
        break;
        if (n == nk) {
            switch (R) { /* constant shapes, so the accumulators live in registers */
            case 1:
                if (oth)
                    score_avx2_decode_tile(1, 8, t, q, d, k, ks, j0 + j, S + j, lds, pfo, oth,
                                           oth + 8 * vrow, oper, NULL);
                else
                    SCORE_TILE(1, 8, j);
                break;
                TILE_CASE(2, 4)
                TILE_CASE(3, 2)
                TILE_CASE(4, 3)
                TILE_CASE(5, 1)
                TILE_CASE(6, 1)
                TILE_CASE(7, 1)
#undef TILE_CASE
            default:
                SCORE_TILE(8, 1, j);
                break;
            }
        } else {
            for (size_t i = 0; i < n; i++) {
#define SCORE_KEY(m) SCORE_TILE(m, 1, j + i)
                switch (R) {
                    SDPA_CASES3(SCORE_KEY)
                default:
                    SCORE_KEY(4);
                    break;
                }
#undef SCORE_KEY
            }
        }
#undef SCORE_TILE
    }
}

/* One function per shape: each storage type by row count, and the one-row streaming scheme
   (other = 1, one row only); called once per block. */
typedef void score_avx2_decode_fn(const sdpa_rows *w, const float *q, size_t j0, size_t nb,
                                  float *S, size_t lds);
#define SCORE_DECODE_FN(T, R, O)                                                                   \
    SDPA_NOINLINE void score_avx2_decode_##T##_##R##_##O(                                          \
        const sdpa_rows *w, const float *q, size_t j0, size_t nb, float *S, size_t lds)            \
    {                                                                                              \
        score_avx2_decode_block(SDPA_##T, R, q, w->d, w->k, w->k_stride, j0, nb, S, lds, w, O);    \
    }
/* The shapes of a decode function F(T, R, O) for a storage type T: the one-row streaming
   scheme (O = 1), then 1 to 8 rows; DECODE_FNS makes them for F32, F16 and BF16, and
   DECODE_TABLE(P) lists functions P_T_R_O as [F32, F16, BF16][0: one streaming row, else R]. */
/* clang-format off */
#define DECODE_SHAPES(F, T)                                                                        \
    F(T, 1, 1) F(T, 1, 0) F(T, 2, 0) F(T, 3, 0) F(T, 4, 0) F(T, 5, 0) F(T, 6, 0) F(T, 7, 0)       \
    F(T, 8, 0)
#define DECODE_FNS(F) DECODE_SHAPES(F, F32) DECODE_SHAPES(F, F16) DECODE_SHAPES(F, BF16)
#define DECODE_ROW(P, T)                                                                           \
    {P##_##T##_1_1, P##_##T##_1_0, P##_##T##_2_0, P##_##T##_3_0, P##_##T##_4_0, P##_##T##_5_0,     \
     P##_##T##_6_0, P##_##T##_7_0, P##_##T##_8_0}
#define DECODE_TABLE(P) {DECODE_ROW(P, F32), DECODE_ROW(P, F16), DECODE_ROW(P, BF16)}
/* clang-format on */
DECODE_FNS(SCORE_DECODE_FN)
static score_avx2_decode_fn *const score_avx2_decode_fns[3][DECODE_MAX_ROWS + 1] =
    DECODE_TABLE(score_avx2_decode);
#undef SCORE_DECODE_FN

/* A score turn of decode_values_ilv (R <= DECODE_ILV_ROWS): keys [j0, j0 + nb) in the tiles of
   score_avx2_decode_block from j0 on, the runs of ip its only requests, a share per tile. */
SDPA_INLINE void score_avx2_ilv_block(sdpa_dtype t, size_t R, const float *q, size_t d,
                                      const void *k, ptrdiff_t ks, size_t j0, size_t nb, float *S,
                                      size_t lds, ilv_pf *ip)
{
    const size_t nk = SCORE_TILE_KEYS(R);
    ilv_pf_rate(ip, (nb + nk - 1) / nk, d / 8); /* the tail's single keys take one share */
    for (size_t j = 0; j < nb; j += nk) {
        ilv_pf_share(ip);
        if (nb - j >= nk)
            score_avx2_decode_tile(R, nk, t, q, d, k, ks, j0 + j, S + j, lds, 0, NULL, NULL, 0, ip);
        else
            for (size_t i = j; i < nb; i++)
                score_avx2_decode_tile(R, 1, t, q, d, k, ks, j0 + i, S + i, lds, 0, NULL, NULL, 0,
                                       ip);
    }
}

/* The turns of decode_values_ilv: a function F(T, R) per storage type and row count up to
   DECODE_ILV_ROWS; ILV_TABLE(P) lists functions P_T_R as [F32, F16, BF16][R - 1]. */
_Static_assert(DECODE_ILV_ROWS == 4, "ILV_SHAPES makes 1 to 4 rows");
/* clang-format off */
#define ILV_SHAPES(F, T) F(T, 1) F(T, 2) F(T, 3) F(T, 4)
#define ILV_FNS(F)       ILV_SHAPES(F, F32) ILV_SHAPES(F, F16) ILV_SHAPES(F, BF16)
#define ILV_ROW(P, T)    {P##_##T##_1, P##_##T##_2, P##_##T##_3, P##_##T##_4}
#define ILV_TABLE(P)     {ILV_ROW(P, F32), ILV_ROW(P, F16), ILV_ROW(P, BF16)}
/* clang-format on */
/* k: the rows of w's K layout holding the keys (a page of the unit a piece belongs to) */
typedef void score_avx2_ilv_fn(const sdpa_rows *w, const void *k, size_t j0, size_t nb, float *S,
                               size_t lds, const ilv_pf *ip);
#define SCORE_ILV_FN(T, R)                                                                         \
    SDPA_NOINLINE void score_avx2_ilv_##T##_##R(const sdpa_rows *w, const void *k, size_t j0,      \
                                                size_t nb, float *S, size_t lds, const ilv_pf *ip) \
    {                                                                                              \
        ilv_pf s = *ip; /* a local copy, kept in registers */                                      \
        score_avx2_ilv_block(SDPA_##T, R, w->q, w->d, k, w->k_stride, j0, nb, S, lds, &s);         \
    }
ILV_FNS(SCORE_ILV_FN)
static score_avx2_ilv_fn *const score_avx2_ilv_fns[3][DECODE_ILV_ROWS] = ILV_TABLE(score_avx2_ilv);
#undef SCORE_ILV_FN

/* The row of a [type] table for a K or V storage type: F32, F16, BF16 (anything else as F32). */
static inline size_t decode_type_ix(sdpa_dtype t)
{
    return t == SDPA_F16 ? 1 : t == SDPA_BF16 ? 2 : 0;
}
/* The column of a [rows] table for R rows (more as DECODE_MAX_ROWS); s: the streaming scheme. */
static inline size_t decode_rows_ix(size_t R, int s)
{
    return R == 1 && s ? 0 : sdpa_min(R, DECODE_MAX_ROWS);
}

static void score_avx2_decode(const sdpa_rows *w, size_t r0, size_t j0, size_t nb, float *S,
                              size_t lds)
{
    const size_t R = w->rows - r0;
    score_avx2_decode_fns[decode_type_ix(w->k_type)][decode_rows_ix(R, stream_one_row(w))](
        w, w->q + r0 * w->d, j0, nb, S + r0 * lds, lds);
}

/* Column c0 of V row j: with pages vp, of the page holding the paged unit's key j. */
static inline const char *pv_page_row(const sdpa_pages *vp, ptrdiff_t vs, size_t es, size_t j,
                                      size_t c0)
{
    size_t row;
    const char *base = (const char *)sdpa_page_at(vp, 1, j, &row);
    return base + (sdpa_row_off(vs, row) + (ptrdiff_t)c0) * (ptrdiff_t)es;
}

/* acc[r][c0..c0+8nv) = alpha_r acc + sum_j P[r][j] v_j for r < mr; cnt < 8 * nv means a tail
   panel (nv == 1), read element-safely. With pages vp (not NULL: then pf->end is 0), V row j is
   the paged unit's key j0 + j, and the keys go in runs within a page. */
typedef struct pv_prefetch {
    size_t end;      /* kv_end: no row at or past it is requested */
    size_t es;       /* bytes per V element */
    const char *k;   /* K, whose rows `ahead` keys on the first pass requests (with other) */
    ptrdiff_t kstep; /* bytes from a K row to the next */
    size_t kbytes;   /* bytes of a K row */
    size_t ahead;    /* keys: the block's size, so the next block's rows */
} pv_prefetch;

SDPA_INLINE void pv_avx2_decode_tile(size_t mr, size_t nv, sdpa_dtype t, float *acc, size_t dv,
                                     const float *alpha, const float *P, size_t lds, const void *v,
                                     const sdpa_pages *vp, ptrdiff_t vs, size_t j0, size_t nb,
                                     size_t c0, size_t cnt, pv_prefetch *pf, int other, ilv_pf *ip)
{
    __m256 a[12];
    const int full = cnt == 8 * nv;
    const __m256i mk = lanes_mask(cnt);
    for (size_t r = 0; r < mr; r++) {
        const __m256 al = _mm256_broadcast_ss(alpha + r);
        for (size_t i = 0; i < nv; i++) {
            const float *o = acc + r * dv + c0 + 8 * i;
            a[r * nv + i] =
                _mm256_mul_ps(al, full ? _mm256_loadu_ps(o) : _mm256_maskload_ps(o, mk));
        }
    }
    /* V and P are stepped by pointer, with no index arithmetic, which on a 16-FMA body would
       compete with the FMAs for issue slots. Keys whose row DECODE_PF_KEYS ahead exists request
       this pass's columns of it (rows past kv_end are not requested: the last ones already were) */
    const char *vb =
        vp ? pv_page_row(vp, vs, pf->es, j0, c0)
           : (const char *)v + ((ptrdiff_t)j0 * vs + (ptrdiff_t)c0) * (ptrdiff_t)pf->es;
    size_t pend = vp ? (j0 / vp->size + 1) * vp->size - j0 : 0; /* the keys to its page's end */
    const ptrdiff_t vstep = vs * (ptrdiff_t)pf->es;
    const ptrdiff_t ahead = DECODE_PF_KEYS * vstep;
    const size_t pbytes = cnt * pf->es;
    const float *pj = P;
    size_t j = 0;
    const size_t jp =
        j0 + DECODE_PF_KEYS < pf->end
            ? (pf->end - j0 - DECODE_PF_KEYS < nb ? pf->end - j0 - DECODE_PF_KEYS : nb)
            : 0;
    /* the first column pass requests the K rows pf->ahead keys on, when all of this sub-block's
       exist, with `other` (a constant at each call: the loop without it stays as it was) */
    const size_t ka = j0 + pf->ahead;
    const int kreq = other && c0 == 0 && ka < pf->end && pf->end - ka >= nb;
    const char *kr = kreq ? pf->k + (ptrdiff_t)ka * pf->kstep : NULL;
    for (int with_pf = 1; with_pf >= 0; with_pf--) {
        const size_t run_end = with_pf ? jp : nb;
        for (;;) {
            const size_t je = vp ? sdpa_min(run_end, pend) : run_end;
            for (; j < je; j++, vb += vstep, pj++) {
                if (with_pf)
                    for (size_t off = 0; off < pbytes; off += 64)
                        __builtin_prefetch(vb + ahead + off, 0, SDPA_PF_STREAM_LOCALITY);
                if (kreq) {
                    for (size_t off = 0; off < pf->kbytes; off += 64)
                        __builtin_prefetch(kr + off, 0, SDPA_PF_STREAM_LOCALITY);
                    kr += pf->kstep;
                }
                if (ip) ilv_pf_step(ip); /* decode_values_ilv's runs (its pf->end is 0) */
                __m256 b[8];
                for (size_t i = 0; i < nv; i++)
                    b[i] = full ? load8_any(vb, t, 8 * (ptrdiff_t)i) : loadn_any(vb, t, 0, cnt);
                for (size_t r = 0; r < mr; r++) {
                    const __m256 p = _mm256_broadcast_ss(pj + r * lds);
                    for (size_t i = 0; i < nv; i++)
                        a[r * nv + i] = _mm256_fmadd_ps(p, b[i], a[r * nv + i]);
                }
            }
            if (!vp || j >= run_end) break;
            vb = pv_page_row(vp, vs, pf->es, j0 + j, c0); /* the next page's first row */
            pend += vp->size;
        }
    }
    for (size_t r = 0; r < mr; r++)
        for (size_t i = 0; i < nv; i++) {
            float *o = acc + r * dv + c0 + 8 * i;
            if (full)
                _mm256_storeu_ps(o, a[r * nv + i]);
            else
                _mm256_maskstore_ps(o, mk, a[r * nv + i]);
        }
}

/* Keys in sub-blocks of DECODE_PV_KB, every column pass over one before the next: the sub-block's V
   rows stay in L1 across the passes, and the rows a pass requests DECODE_PF_KEYS keys ahead arrive
   in the time of whole sub-blocks, not of one fast pass. alpha is applied by the first sub-block
   only. Columns in panels of 8 * NV(R) (NV chosen so R * NV accumulators fill the registers),
   then 8-column panels, then one element-safe tail panel. */
/* the tile of mr rows x nv vectors at column c, cnt columns, of sub-block g */
#define PV_TILE(mr, nv, cnt)                                                                       \
    pv_avx2_decode_tile(mr, nv, t, acc, dv, al, P + g, lds, v, NULL, vs, j0 + g, ng, c, cnt, &pf,  \
                        other, NULL)
#define PV_DECODE_CASE(m, nv)                                                                      \
    case m:                                                                                        \
        for (size_t g = 0; g < nb; g += DECODE_PV_KB) {                                            \
            const size_t ng = nb - g < DECODE_PV_KB ? nb - g : DECODE_PV_KB;                       \
            const float *al = g == 0 ? alpha : ones;                                               \
            size_t c = 0;                                                                          \
            for (; c + 8 * (nv) <= dv; c += 8 * (nv)) PV_TILE(m, nv, 8 * (nv));                    \
            for (; c + 8 <= dv; c += 8) PV_TILE(m, 1, 8);                                          \
            if (c < dv) PV_TILE(m, 1, dv - c);                                                     \
        }                                                                                          \
        break;

SDPA_INLINE void pv_avx2_decode_block(sdpa_dtype t, size_t R, float *acc, size_t dv,
                                      const float *alpha, const float *P, size_t lds, const void *v,
                                      ptrdiff_t vs, size_t j0, size_t nb, pv_prefetch pf, int other)
{
    static const float ones[DECODE_MAX_ROWS] = {1, 1, 1, 1, 1, 1, 1, 1};
    switch (R) {
        PV_DECODE_CASE(1, 8)
        PV_DECODE_CASE(2, 4)
        PV_DECODE_CASE(3, 4)
        PV_DECODE_CASE(4, 3)
        PV_DECODE_CASE(5, 2)
        PV_DECODE_CASE(6, 2)
        PV_DECODE_CASE(7, 1)
    default:
        PV_DECODE_CASE(8, 1)
    }
}
#undef PV_DECODE_CASE
#undef PV_TILE

typedef void pv_avx2_decode_fn(float *acc, size_t dv, const float *alpha, const float *P,
                               size_t lds, const void *v, ptrdiff_t vs, size_t j0, size_t nb,
                               const pv_prefetch *pf);
#define PV_DECODE_FN(T, R, O)                                                                      \
    SDPA_NOINLINE void pv_avx2_decode_##T##_##R##_##O(                                             \
        float *acc, size_t dv, const float *alpha, const float *P, size_t lds, const void *v,      \
        ptrdiff_t vs, size_t j0, size_t nb, const pv_prefetch *pf)                                 \
    {                                                                                              \
        pv_avx2_decode_block(SDPA_##T, R, acc, dv, alpha, P, lds, v, vs, j0, nb, *pf, O);          \
    }
DECODE_FNS(PV_DECODE_FN)
static pv_avx2_decode_fn *const pv_avx2_decode_fns[3][DECODE_MAX_ROWS + 1] =
    DECODE_TABLE(pv_avx2_decode);

/* A P·V turn of decode_values_ilv (R <= DECODE_ILV_ROWS): one turn (nb <= DECODE_PV_KB
   keys) in the column panels of pv_avx2_decode_block, the runs of ip its only requests (pf.end
   0: none of the tiles' own), a share per column pass; with pages vp, V through a paged unit's
   pages (see pv_avx2_decode_tile), a turn of any length. */
SDPA_INLINE void pv_avx2_ilv_block(sdpa_dtype t, size_t R, float *acc, size_t dv,
                                   const float *alpha, const float *P, size_t lds, const void *v,
                                   const sdpa_pages *vp, ptrdiff_t vs, size_t j0, size_t nb,
                                   ilv_pf *ip)
{
    pv_prefetch pf = {0, t == SDPA_F32 ? 4 : 2, NULL, 0, 0, 0};
    const size_t nv = R == 1 ? 8 : R == 4 ? 3 : 4; /* pv_avx2_decode_block's NV(R) */
    ilv_pf_rate(ip, dv / (8 * nv) + dv % (8 * nv) / 8 + (dv % 8 != 0), nb);
    size_t c = 0;
    for (; c + 8 * nv <= dv; c += 8 * nv) {
        ilv_pf_share(ip);
        pv_avx2_decode_tile(R, nv, t, acc, dv, alpha, P, lds, v, vp, vs, j0, nb, c, 8 * nv, &pf, 0,
                            ip);
    }
    for (; c + 8 <= dv; c += 8) {
        ilv_pf_share(ip);
        pv_avx2_decode_tile(R, 1, t, acc, dv, alpha, P, lds, v, vp, vs, j0, nb, c, 8, &pf, 0, ip);
    }
    if (c < dv) {
        ilv_pf_share(ip);
        pv_avx2_decode_tile(R, 1, t, acc, dv, alpha, P, lds, v, vp, vs, j0, nb, c, dv - c, &pf, 0,
                            ip);
    }
}

/* pv_avx2_ilv_T_R reads V at v (vp unused), pv_avx2_ilvp_T_R through the pages vp (v unused):
   separate instances, so that the contiguous one has no page to follow. */
typedef void pv_avx2_ilv_fn(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
                            const void *v, const sdpa_pages *vp, ptrdiff_t vs, size_t j0, size_t nb,
                            const ilv_pf *ip);
#define PV_ILV_FN_P(T, R, NAME, PAGES)                                                             \
    SDPA_NOINLINE void NAME##_##T##_##R(float *acc, size_t dv, const float *alpha, const float *P, \
                                        size_t lds, const void *v, const sdpa_pages *vp,           \
                                        ptrdiff_t vs, size_t j0, size_t nb, const ilv_pf *ip)      \
    {                                                                                              \
        ilv_pf s = *ip; /* a local copy, kept in registers */                                      \
        (void)vp;                                                                                  \
        pv_avx2_ilv_block(SDPA_##T, R, acc, dv, alpha, P, lds, v, PAGES, vs, j0, nb, &s);          \
    }
#define PV_ILV_FN(T, R)  PV_ILV_FN_P(T, R, pv_avx2_ilv, NULL)
#define PV_ILVP_FN(T, R) PV_ILV_FN_P(T, R, pv_avx2_ilvp, vp)
ILV_FNS(PV_ILV_FN)
ILV_FNS(PV_ILVP_FN)
static pv_avx2_ilv_fn *const pv_avx2_ilv_fns[3][DECODE_ILV_ROWS] = ILV_TABLE(pv_avx2_ilv);
static pv_avx2_ilv_fn *const pv_avx2_ilvp_fns[3][DECODE_ILV_ROWS] = ILV_TABLE(pv_avx2_ilvp);
#undef PV_ILVP_FN
#undef PV_ILV_FN
#undef PV_ILV_FN_P
#undef ILV_TABLE
#undef ILV_ROW
#undef ILV_FNS
#undef ILV_SHAPES
#undef DECODE_TABLE
#undef DECODE_ROW
#undef DECODE_FNS
#undef DECODE_SHAPES
#undef PV_DECODE_FN

static void pv_avx2_decode(const sdpa_rows *w, size_t r0, size_t j0, size_t nb, const float *alpha,
                           const float *S, size_t lds)
{
    const size_t R = w->rows - r0, dv = w->dv;
    float *acc = w->acc + r0 * dv;
    S += r0 * lds;
    alpha += r0;
    const size_t ke = w->k_type == SDPA_F32 ? 4 : 2;
    const pv_prefetch pf = {w->kv_end,          w->v_type == SDPA_F32 ? 4 : 2,
                            (const char *)w->k, w->k_stride * (ptrdiff_t)ke,
                            w->d * ke,          nb};
    static const float ones[DECODE_MAX_ROWS] = {1, 1, 1, 1, 1, 1, 1, 1};
    pv_avx2_decode_fn *const *fns = pv_avx2_decode_fns[decode_type_ix(w->v_type)];
    const int s = stream_one_row(w);
    /* rows [a, R) over keys [ka, kb) (SDPA_PV_TILES) */
#define PV_DECODE_RUN(a, ka, kb)                                                                   \
    fns[decode_rows_ix(R - (a), s)](acc + (a)*dv, dv, (ka) ? ones : alpha + (a),                   \
                                    S + (a)*lds + (ka), lds, w->v, w->v_stride, j0 + (ka),         \
                                    (kb) - (ka), &pf);
    SDPA_PV_TILES(w, w->kv_limit + r0, 0, R, j0, nb, PV_DECODE_RUN);
#undef PV_DECODE_RUN
}

/* --- the hooks of the generic loop (rows_loop.h) -------------------------------------------- */

typedef struct decode_ctx {
    float *S;         /* the scores' scratch */
    size_t B;         /* keys per block */
    int ilv;          /* the next block's scores among the P·V (decode_values_ilv) */
    int ilv_pages;    /* ... and a paged unit's pages fit its turns (they request those pages) */
    int pv_pages;     /* a paged unit's block comes whole to loop_values (decode_values_pages) */
    sdpa_ilv_pre pre; /* the block the last P·V scored ahead */
} decode_ctx;

static inline size_t loop_begin(decode_ctx *c, const sdpa_rows *w, float **S, size_t *lds,
                                float **alpha)
{
    const size_t B = stream_one_row(w) && block_keys(w->block, DECODE_BLOCK) > DECODE_BLOCK_FEW
                         ? DECODE_BLOCK_FEW
                         : block_keys(w->block, DECODE_BLOCK);
    *lds = sdpa_round16(B);
    *S = w->ws;
    *alpha = *S + w->rows * *lds;
    c->S = *S, c->B = B, c->pre.n = 0;
    /* plain units of few rows whose K and V rows each lie end to end (the turns' runs) */
    c->ilv = w->rows <= DECODE_ILV_ROWS && !sdpa_is_variant(w) && w->k_stride == (ptrdiff_t)w->d &&
             w->v_stride == (ptrdiff_t)w->dv;
    c->ilv_pages = c->ilv && w->piece_of && sdpa_ilv_pages_ok(w->piece_of, DECODE_PV_KB);
    /* pages of half a turn: a turn's two pages in one P·V call, not a call per page */
    c->pv_pages = c->ilv && w->piece_of && 2 * w->piece_of->pages->size == DECODE_PV_KB;
    return B;
}

static inline void loop_scores(decode_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               float *S, size_t lds)
{
    if (sdpa_ilv_pre_hit(&c->pre, w, j0, nb, (size_t)(S - c->S))) return; /* scored ahead */
    score_avx2_decode(w, r0, j0, nb, S, lds);
}

static inline float loop_softmax(decode_ctx *c, size_t r, float *s, size_t nv, size_t nb, float *m,
                                 float *l)
{
    (void)c, (void)r;
    return softmax_avx2(1, s, nv, nb, m, l, NULL);
}

/* The lines of the rows of keys [j, j + n) of x (K: v = 0), rb bytes each and end to end, cut at
   x's kend and at the end of j's page: a run from *p, *lines lines (none past the cut). */
static inline void ilv_run(const sdpa_ilv_keys *x, int v, size_t rb, size_t j, size_t n,
                           const char **p, size_t *lines)
{
    const void *base;
    size_t jend;
    j = sdpa_ilv_span(x, v, j, &base, &jend);
    n = j < jend ? sdpa_min(n, jend - j) : 0;
    const uintptr_t a = (uintptr_t)base + j * rb;
    *p = (const char *)(a & ~(uintptr_t)63);
    *lines = n ? ((a & 63) + n * rb + 63) / 64 : 0;
}

/* The part of ip's runs for keys [a, b) of a turn's n keys: their share of the lines. */
static inline ilv_pf ilv_pf_part(const ilv_pf *ip, size_t a, size_t b, size_t n)
{
    ilv_pf s = *ip;
    const size_t a0 = ip->n0 * a / n, a1 = ip->n1 * a / n;
    s.p0 += 64 * a0, s.n0 = ip->n0 * b / n - a0;
    s.p1 += 64 * a1, s.n1 = ip->n1 * b / n - a1;
    return s;
}

/* The P·V of the keys [j0, j0 + nb) of the view w (at S, alpha: the block's first such part or
   not) in turns of x->turn keys (its sub-blocks, or parts of them: the same sums in the same
   order), each followed by the scores of the next block's keys [jn, jn + nbn) of x that lie in
   the part of S the turn has used up, whole tiles of the block order (recorded for loop_scores
   by loop_values). a0 is key j0's index in x. Every turn of either kind requests half a turn of
   rows of both arrays, one turn ahead of their use (V from a0 + turn, K from jn + turn: what
   the last phases requested), never a key at or past x's kend, so that K and V stream
   together. A score is its key's own dot product and reduction whatever tile holds it, the
   softmax blocks and the P·V sub-blocks are unchanged: the results are bitwise those of the
   block order. w a paged unit (w->pages, pages of half a turn: decode_values_pages): its whole
   block, a turn's P·V in one call through two pages, its scores a call per page. */
static void decode_values_ilv(const sdpa_rows *w, const sdpa_ilv_keys *x, size_t j0, size_t a0,
                              size_t nb, size_t jn, size_t nbn, float *S, const float *alpha,
                              size_t lds)
{
    static const float ones[DECODE_MAX_ROWS] = {1, 1, 1, 1, 1, 1, 1, 1};
    const size_t R = w->rows, T = x->turn, h = T / 2, nk = SCORE_TILE_KEYS(R);
    const size_t kb = w->d * (w->k_type == SDPA_F32 ? 4 : 2);
    const size_t vb = w->dv * (w->v_type == SDPA_F32 ? 4 : 2);
    const sdpa_pages *vp = w->pages;
    pv_avx2_ilv_fn *const pv =
        (vp ? pv_avx2_ilvp_fns : pv_avx2_ilv_fns)[decode_type_ix(w->v_type)][R - 1];
    score_avx2_ilv_fn *const sc = score_avx2_ilv_fns[decode_type_ix(w->k_type)][R - 1];
    const void *kp; /* the next keys' rows: one view, or one page */
    const size_t kj = sdpa_ilv_page(x, 0, jn, &kp);
    size_t vk = a0 + T, kk = jn + T; /* the first rows of each array not yet requested */
    size_t s = 0;                    /* the next block's keys [0, s) are scored */
    for (size_t ja = 0; ja < nb; ja += T) {
        const int both = ja < nbn; /* a score turn follows */
        ilv_pf ip = {0};
        ilv_run(x, 1, vb, vk, both || vp ? h : T, &ip.p0, &ip.n0); /* a run stays in a page */
        if (both || !vp)
            ilv_run(x, 0, kb, kk, both ? h : 0, &ip.p1, &ip.n1);
        else
            ilv_run(x, 1, vb, vk + h, h, &ip.p1, &ip.n1);
        vk += both ? h : T, kk += both ? h : 0;
        pv(w->acc, w->dv, ja ? ones : alpha, S + ja, lds, w->v, vp, w->v_stride, j0 + ja,
           sdpa_min(T, nb - ja), &ip);
        if (!both) continue;
        /* the keys up to the turn's end, on the tile grid (the last turn: up to nbn); with pages,
           whole pages */
        const size_t e = ja + T >= nbn ? nbn : vp ? ja + T : (ja + T) / nk * nk;
        ilv_run(x, 0, kb, kk, h, &ip.p0, &ip.n0);
        ilv_run(x, 1, vb, vk, h, &ip.p1, &ip.n1);
        vk += h, kk += h;
        for (size_t u = s, n; vp && u < e; u += n) { /* a call per page, a share of the runs each */
            const void *kq;
            const size_t kr = sdpa_ilv_page(x, 0, jn + u, &kq);
            n = sdpa_min(e - u, x->pg->size - kr);
            const ilv_pf part = ilv_pf_part(&ip, u - s, u - s + n, e - s);
            sc(w, kq, kr, n, S + u, lds, &part);
        }
        if (!vp && e > s) sc(w, kp, kj + s, e - s, S + s, lds, &ip);
        s = e;
    }
}

/* The P·V of a paged unit's block, keys [j0, j0 + nb) of w (pages of DECODE_PV_KB / 2 keys, at
   most DECODE_ILV_ROWS rows), as decode_values_ilv's turns of DECODE_PV_KB keys through the
   pages, each scoring the next block's keys at the same place, when the next block lies whole
   before the rows' end and every row sees this one (all but a unit's last block); else a call
   per page, as the loop would make. The results are bitwise those of the call per page. */
static void decode_values_pages(decode_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                                const float *alpha, const float *S, size_t lds)
{
    static const float ones[DECODE_MAX_ROWS] = {1, 1, 1, 1, 1, 1, 1, 1};
    const size_t kend = sdpa_min(w->kv_end, w->kv_limit[w->rows - 1]);
    const size_t jn = j0 + nb, nbn = jn < kend ? sdpa_page_block(w, jn, c->B) : 0;
    c->pre.n = 0;
    if (r0 == 0 && sdpa_visible(w, 0, j0, nb) == nb && nbn && jn + nbn <= kend) {
        const sdpa_ilv_keys x = {w->pages, NULL, NULL, kend, DECODE_PV_KB};
        decode_values_ilv(w, &x, j0, j0, nb, jn, nbn, c->S, alpha, lds);
        sdpa_ilv_scored(&c->pre, w, 0, jn, nbn);
        return;
    }
    sdpa_rows u;
    sdpa_mods um;
    for (size_t o = 0, n; o < nb; o += n) {
        n = nb - o;
        const size_t lj = sdpa_page_piece(w, j0 + o, &n, &u, &um);
        pv_avx2_decode(&u, r0, lj, n, o ? ones : alpha, S + o, lds);
    }
}

static inline void loop_values(decode_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               const float *alpha, const float *S, size_t lds)
{
    if (w->pages) { /* the whole block of a paged unit (c->pv_pages) */
        decode_values_pages(c, w, r0, j0, nb, alpha, S, lds);
        return;
    }
    const size_t kend = sdpa_min(w->kv_end, w->kv_limit[w->rows - 1]), o = (size_t)(S - c->S);
    sdpa_ilv_keys x;
    size_t a0, jn, nbn;
    /* turns of DECODE_ILV_TURN over a view's own rows or a page's piece (a paged unit's whole
       block, decode_values_pages, takes turns of a sub-block: two 16-key pages) */
    if (sdpa_ilv_plan(w, j0, nb, o, c->B, kend, DECODE_ILV_TURN, &c->pre, &x, &a0, &jn, &nbn) &&
        c->ilv && r0 == 0 && sdpa_visible(w, 0, j0, nb) == nb) {
        decode_values_ilv(w, &x, j0, a0, nb, jn, nbn, c->S + o, alpha, lds);
        sdpa_ilv_scored(&c->pre, w, o, jn, nbn);
        return;
    }
    pv_avx2_decode(w, r0, j0, nb, alpha, S, lds);
}

#define SDPA_LOOP_FN  decode_loop_avx2
#define SDPA_LOOP_CTX decode_ctx
/* the turns request the next keys' pages (decode_values_ilv); other units get the first line
   of each next page, a burst of all its lines stalling the arithmetic on the line-fill
   buffers */
#define SDPA_LOOP_PAGES_SELF(c)   ((c)->ilv_pages)
#define SDPA_LOOP_AHEAD_TOUCH     1
#define SDPA_LOOP_VALUES_PAGED(c) ((c)->pv_pages)
/* a whole block's turns scored the next block: no piece of it is made for loop_scores */
#define SDPA_LOOP_SCORED(c, w, j0, nb) ((c)->pv_pages && sdpa_ilv_pre_hit(&(c)->pre, w, j0, nb, 0))
#include "rows_loop.h"

void sdpa_decode_avx2(const sdpa_rows *w)
{
    if (w->qq || sdpa_dtype_quantized(w->k_type) || sdpa_dtype_quantized(w->v_type))
        sdpa_decode_q_avx2(w);
    else
        decode_loop_avx2(w);
}
