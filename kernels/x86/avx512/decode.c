/* decode.c -- the AVX-512 decode path: few query rows, K and V read once, in place, from memory */
#include "avx512.h"
#include "prefetch.h"
#include "variants.h"

/*
 * Work of at most DECODE_MAX_ROWS rows is bound by reading K and V once, and the core overlaps
 * little of its arithmetic with the memory stream, so every operation per key counts. Per block
 * of keys: scores in tiles of RP rows x 16/RP keys (RP = R rounded up to 1, 2, 4 or 8), each K
 * chunk loaded and converted once, in a register, and used by every row, the 16 dot products of
 * a tile reduced by one shuffle tree; then one online-softmax step per row for the whole block;
 * then P·V with each V vector converted once in a register and used by every row, the
 * accumulators of R rows x NV column vectors in registers. K and V are requested ahead of their
 * use, in address order (decode_pf).
 */

static size_t decode_block(size_t block) { return sdpa_min(block ? block : 1, DECODE_BLOCK); }

size_t sdpa_decode_ws_avx512(size_t rows, size_t d, size_t dv, size_t block)
{
    /* alpha | scores | q packed by lines (padded to 8 rows) */
    (void)block, (void)dv;
    return sdpa_max(state_floats(rows) + rows * DECODE_LDS + DECODE_MAX_ROWS * (d + 32),
                    sdpa_decode_q_ws_avx512(rows, d)); /* or the block-format path's */
}

/* The decode loop's two prefetch streams while one phase runs, each requested in address
   order (sdpa_pf_rows) a fixed number of lines per step of the phase's work: s[0] is the
   phase's own array DECODE_PF_KEYS keys ahead, s[1] the other array one phase ahead (while the
   score loop reads a block's K rows it requests the block's V rows, and while the P·V loop
   reads them, the next block's K rows), so that the next phase starts on rows already in cache
   and two streams of requests are in flight at all times. s[1] is used with one or two rows,
   with blocks of DECODE_BLOCK_FEW keys, so that both arrays stream at once almost all the time;
   with more rows the extra requests cost more than the concurrency gives, so there s[1] is
   empty and requests nothing (decode_pf_mode 2). */
typedef struct decode_pf {
    sdpa_pf_rows s[2];
    int per[2]; /* lines per step */
} decode_pf;

/* keys rows of each stream over `steps` steps (rounded up: a stream never falls behind) */
static inline void decode_pf_rate(decode_pf *p, size_t keys, size_t steps)
{
    for (int i = 0; i < 2; i++)
        p->per[i] = steps ? (int)((keys * p->s[i].L + steps - 1) / steps) : 0;
}

SDPA_INLINE void decode_pf_step(decode_pf *p)
{
    sdpa_pf_rows_next(&p->s[0], p->per[0]);
    sdpa_pf_rows_next(&p->s[1], p->per[1]);
}

/* How a run of steps may request its lines when its rows have L lines each: 1 when both
   streams have such rows laid end to end (no gap: the next line is always the one after) and
   at least `lines` lines left each, 2 when the first does and the second is empty (one
   stream), else 0 (the general cursor, decode_pf_step). In modes 1 and 2 a step requests its
   lines with a pointer bump (decode_pf_simple), the general cursor's bookkeeping costing more
   than the requests themselves when the data is already in cache. */
static inline int decode_pf_mode(const decode_pf *p, size_t L, size_t lines)
{
    if (p->s[0].skip != 0 || p->s[0].L != L || p->s[0].n < lines) return 0;
    if (p->s[1].n == 0) return 2;
    return p->s[1].skip == 0 && p->s[1].L == L && p->s[1].n >= lines ? 1 : 0;
}

/* `per` lines of the first stream (and of the second when `two`) from line offset `at` (in
   lines) of the plain run starting at the streams' current lines. */
SDPA_INLINE void decode_pf_simple(const decode_pf *p, int per, size_t at, int two)
{
    SDPA_UNROLL for (int i = 0; i < per; i++)
    {
        __builtin_prefetch(p->s[0].p + 64 * (at + (size_t)i), 0, SDPA_PF_STREAM_LOCALITY);
        if (two) __builtin_prefetch(p->s[1].p + 64 * (at + (size_t)i), 0, SDPA_PF_STREAM_LOCALITY);
    }
}

/* Advances the first stream of a plain run (and the second when `two`) by `lines` lines (the
   line-in-row count only matters for rows with a gap, which a plain run never has). */
static inline void decode_pf_skip(decode_pf *p, size_t lines, int two)
{
    for (int i = 0; i < 1 + two; i++) {
        p->s[i].p += 64 * lines;
        p->s[i].n -= lines;
    }
}

/* Rows [j, min(j + n, jend)) of a K/V view as a prefetch stream (empty when j >= jend). */
static inline sdpa_pf_rows decode_rows(const void *base, ptrdiff_t stride, size_t es, size_t rb,
                                       size_t j, size_t n, size_t jend)
{
    n = j < jend ? sdpa_min(n, jend - j) : 0;
    if (!n) j = 0; /* an empty stream still points at a row of the view */
    return sdpa_pf_rows_begin((const char *)base + sdpa_row_off(stride, j) * (ptrdiff_t)es,
                              stride * (ptrdiff_t)es, rb, n);
}

/* One 16-element chunk (columns [c, c + 16), mask m) of the RP x NK score tile: each key chunk
   is converted once, in a register, and feeds the R real rows (R <= RP; the padding rows' sums
   stay 0); a[PERM16(r * NK + i)] holds the 16-lane partial sums of row r and key i. */
SDPA_INLINE void score_avx512_decode_step(int R, int NK, sdpa_dtype kt, __m512 *a,
                                          const float *const *qr, const void *k,
                                          const ptrdiff_t *ko, size_t c, __mmask16 m, decode_pf *pf)
{
    const size_t es = kt == SDPA_F32 ? 4 : 2;
    if (((c * es) & 63) == 0) decode_pf_step(pf); /* once per line of the rows */
    __m512 qv[DECODE_MAX_ROWS];
    SDPA_UNROLL for (int r = 0; r < R; r++) qv[r] = _mm512_maskz_loadu_ps(m, qr[r] + c);
    SDPA_UNROLL for (int i = 0; i < NK; i++)
    {
        const __m512 kv = load_kv(k, kt, ko[i] + (ptrdiff_t)c, m);
        SDPA_UNROLL for (int r = 0; r < R; r++) a[PERM16(r * NK + i)] =
            _mm512_fmadd_ps(qv[r], kv, a[PERM16(r * NK + i)]);
    }
}

/* The fast path of a full score tile (NK keys), one 64-byte line of each K row per step. The
   slow path (score_avx512_decode_step) keeps a row offset per key and a pointer per query row: more
   integers than registers, and the spills and reloads it then makes compete with the FMAs for
   issue ports. Here q is packed (qp, see pack_q_lines) and every K row is kc + i * ksb, whole
   lines of each row; a last partial line (masked, zero-padded q) is done without requests. */
SDPA_INLINE void score_avx512_decode_fast(int R, int RP, int NK, int PF, sdpa_dtype kt, int plain,
                                          const float *qp, size_t d, const char *kc, ptrdiff_t ksb,
                                          decode_pf *pf, __m512 *a)
{
    const size_t es = kt == SDPA_F32 ? 4 : 2, E = 64 / es; /* elements per line */
    const size_t lines = d / E;
    for (size_t g = 0; g < lines; g++, kc += 64, qp += RP * E) {
        if (plain)
            decode_pf_simple(pf, PF, g * (size_t)PF, plain == 1);
        else
            decode_pf_step(pf);
        SDPA_UNROLL for (size_t h = 0; h < E / 16; h++)
        {
            __m512 qv[DECODE_MAX_ROWS];
            SDPA_UNROLL for (int r = 0; r < R; r++) qv[r] =
                _mm512_load_ps(qp + (size_t)r * E + 16 * h);
            SDPA_UNROLL for (int i = 0; i < NK; i++)
            {
                const __m512 kv = load_kv(kc + i * ksb, kt, (ptrdiff_t)(16 * h), 0xFFFF);
                SDPA_UNROLL for (int r = 0; r < R; r++) a[PERM16(r * NK + i)] =
                    _mm512_fmadd_ps(qv[r], kv, a[PERM16(r * NK + i)]);
            }
        }
    }
    /* the partial last line */
    for (size_t c = lines * E; c < d; c += 16, qp += 16) {
        const __mmask16 m = lanes(d - c);
        SDPA_UNROLL for (int i = 0; i < NK; i++)
        {
            const __m512 kv = load_kv(kc + i * ksb, kt, (ptrdiff_t)(c - lines * E), m);
            SDPA_UNROLL for (int r = 0; r < R; r++) a[PERM16(r * NK + i)] =
                _mm512_fmadd_ps(_mm512_load_ps(qp + (size_t)r * E), kv, a[PERM16(r * NK + i)]);
        }
    }
}

/* q rows [0, R) padded to RP (repeating the last), packed line by line for
   score_avx512_decode_fast: the E elements of line g of row r at qp[(g * RP + r) * E], the
   partial last line zero-padded. */
static void pack_q_lines(const float *const *qr, size_t RP, size_t d, size_t E, float *qp)
{
    const size_t lines = (d + E - 1) / E;
    for (size_t g = 0; g < lines; g++)
        for (size_t r = 0; r < RP; r++)
            for (size_t e = 0; e < E; e++) {
                const size_t c = g * E + e;
                qp[(g * RP + r) * E + e] = c < d ? qr[r][c] : 0.0f;
            }
}

/* Scores of rows [0, R) (a tile shaped for RP in {1, 2, 4, 8} rows, whose padding rows take no
   arithmetic) against the keys [0, nk) of the block starting at key j0, into S[r][0..nk).
   RP * NK = 16 dot products per tile, so a single shuffle tree reduces them all and lane
   r * NK + i of its result is row r's score for key i (the sum of accumulator r * NK + i's lanes
   alone): no horizontal sum per key, and (unlike a per-row pass) K is read and converted once
   for all rows. A tail tile repeats its last key (in bounds) in the missing lanes and stores
   only the real ones. Each live stream gets PK rows' lines a tile: NK (a row per key), or NK / 2
   when the phase requests half a phase of rows of each array (decode_values_ilv). */
SDPA_INLINE void score_avx512_decode_pk(int R, int PK, sdpa_dtype kt, const float *const *qr,
                                        size_t d, const void *k, ptrdiff_t ks, size_t j0, size_t nk,
                                        float *S, size_t lds, decode_pf *pfs, const float *qp)
{
    const int RP = R == 1 ? 1 : R == 2 ? 2 : R <= 4 ? 4 : 8, NK = 16 / RP;
    const size_t es = kt == SDPA_F32 ? 4 : 2;
    const ptrdiff_t ksb = ks * (ptrdiff_t)es;
    /* the streams' lines of PK rows a tile, spread over its steps (one per line of K) */
    const size_t steps = (d * es + 63) / 64, fsteps = d * es / 64;
    decode_pf pf = *pfs, pff = pf;
    decode_pf_rate(&pf, (size_t)PK, steps);
    decode_pf_rate(&pff, (size_t)PK, fsteps);
    for (size_t j = 0; j < nk; j += NK) {
        const size_t nv = sdpa_min(NK, nk - j);
        if (nv == (size_t)NK && fsteps) {
            __m512 a[16];
            SDPA_UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
            const char *kc = (const char *)k + sdpa_row_off(ks, j0 + j) * (ptrdiff_t)es;
            /* rows of whole lines (L = fsteps), end to end: PK lines of each live stream a step */
            const size_t tl = (size_t)PK * fsteps;
            const int pm = decode_pf_mode(&pf, fsteps, tl);
            if (pm == 1) {
                score_avx512_decode_fast(R, RP, NK, PK, kt, 1, qp, d, kc, ksb, &pf, a);
                decode_pf_skip(&pf, tl, 1);
            } else if (pm == 2) {
                score_avx512_decode_fast(R, RP, NK, PK, kt, 2, qp, d, kc, ksb, &pf, a);
                decode_pf_skip(&pf, tl, 0);
            } else {
                pff.s[0] = pf.s[0];
                pff.s[1] = pf.s[1];
                score_avx512_decode_fast(R, RP, NK, PK, kt, 0, qp, d, kc, ksb, &pff, a);
                pf.s[0] = pff.s[0];
                pf.s[1] = pff.s[1];
            }
            const __m512 sv = reduce16(a);
            SDPA_UNROLL for (int r = 0; r < R; r++)
                _mm512_mask_storeu_ps(S + (size_t)r * lds + j - (size_t)r * NK,
                                      (__mmask16)(((1u << NK) - 1u) << (r * NK)), sv);
            continue;
        }
        ptrdiff_t ko[16];
        SDPA_UNROLL for (int i = 0; i < NK; i++) ko[i] =
            sdpa_row_off(ks, j0 + j + sdpa_min((size_t)i, nv - 1));
        __m512 a[16];
        SDPA_UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
        size_t c = 0;
        _Pragma("GCC unroll 2") for (; c + 16 <= d; c += 16)
            score_avx512_decode_step(R, NK, kt, a, qr, k, ko, c, 0xFFFF, &pf);
        if (c < d) score_avx512_decode_step(R, NK, kt, a, qr, k, ko, c, lanes(d - c), &pf);
        const __m512 s = reduce16(a);
        const unsigned keys = (1u << nv) - 1u;
        /* row r's lanes [r * NK, r * NK + nv) go to S[r][j..); the pointer stays inside S */
        SDPA_UNROLL for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(
            S + (size_t)r * lds + j - (size_t)r * NK, (__mmask16)(keys << (r * NK)), s);
    }
    pfs->s[0] = pf.s[0];
    pfs->s[1] = pf.s[1];
}

SDPA_INLINE void score_avx512_decode_block(int R, sdpa_dtype kt, const float *const *qr, size_t d,
                                           const void *k, ptrdiff_t ks, size_t j0, size_t nk,
                                           float *S, size_t lds, decode_pf *pf, const float *qp,
                                           int half)
{
    const int NK = R == 1 ? 16 : R == 2 ? 8 : R <= 4 ? 4 : 2;
    if (half && R <= DECODE_ILV_ROWS)
        score_avx512_decode_pk(R, NK / 2, kt, qr, d, k, ks, j0, nk, S, lds, pf, qp);
    else
        score_avx512_decode_pk(R, NK, kt, qr, d, k, ks, j0, nk, S, lds, pf, qp);
}

/* One function per shape (storage type by row count), called once per block. */
typedef void score_avx512_decode_fn(const float *const *qr, size_t d, const void *k, ptrdiff_t ks,
                                    size_t j0, size_t nk, float *S, size_t lds, decode_pf *pf,
                                    const float *qp, int half);
#define SCORE_DECODE_FN(T, R)                                                                      \
    SDPA_NOINLINE void score_avx512_decode_##T##_##R(                                              \
        const float *const *qr, size_t d, const void *k, ptrdiff_t ks, size_t j0, size_t nk,       \
        float *S, size_t lds, decode_pf *pf, const float *qp, int half)                            \
    {                                                                                              \
        score_avx512_decode_block(R, SDPA_##T, qr, d, k, ks, j0, nk, S, lds, pf, qp, half);        \
    }
/* clang-format off */
#define SCORE_DECODE_FNS(T)                                                                        \
    SCORE_DECODE_FN(T, 1) SCORE_DECODE_FN(T, 2) SCORE_DECODE_FN(T, 3) SCORE_DECODE_FN(T, 4)        \
    SCORE_DECODE_FN(T, 5) SCORE_DECODE_FN(T, 6) SCORE_DECODE_FN(T, 7) SCORE_DECODE_FN(T, 8)
/* clang-format on */
SCORE_DECODE_FNS(F32)
SCORE_DECODE_FNS(F16)
SCORE_DECODE_FNS(BF16)
#define SCORE_DECODE_ROW(T)                                                                        \
    {                                                                                              \
        score_avx512_decode_##T##_1, score_avx512_decode_##T##_2, score_avx512_decode_##T##_3,     \
            score_avx512_decode_##T##_4, score_avx512_decode_##T##_5, score_avx512_decode_##T##_6, \
            score_avx512_decode_##T##_7, score_avx512_decode_##T##_8                               \
    }
/* [F32, F16, BF16][rows - 1] */
static score_avx512_decode_fn *const score_avx512_decode_fns[3][DECODE_MAX_ROWS] = {
    SCORE_DECODE_ROW(F32), SCORE_DECODE_ROW(F16), SCORE_DECODE_ROW(BF16)};
#undef SCORE_DECODE_ROW
#undef SCORE_DECODE_FNS
#undef SCORE_DECODE_FN

/* The row of a [type] table: F32, F16, anything else as BF16. */
static inline size_t decode_type_ix(sdpa_dtype t)
{
    return t == SDPA_F32 ? 0 : t == SDPA_F16 ? 1 : 2;
}

static void score_avx512_decode(const float *const *qr, size_t R, size_t d, const void *k,
                                sdpa_dtype kt, ptrdiff_t ks, size_t j0, size_t nk, float *S,
                                size_t lds, decode_pf *pf, const float *qp, int half)
{
    if (R >= 1 && R <= DECODE_MAX_ROWS)
        score_avx512_decode_fns[decode_type_ix(kt)][R - 1](qr, d, k, ks, j0, nk, S, lds, pf, qp,
                                                           half);
}

/* NV vectors of V row j0 + j from column c0 (masks mk), converted, after the pass's prefetch
   step for key j: the plain cursor's step j - ja (plain != 0), else the general cursor's next. */
SDPA_INLINE void pv_avx512_decode_key(int NV, __m512 *x, const void *v, sdpa_dtype vt, ptrdiff_t vs,
                                      size_t c0, const __mmask16 *mk, size_t j0, size_t j,
                                      size_t ja, decode_pf *pf, int plain, int PER)
{
    const ptrdiff_t off = sdpa_row_off(vs, j0 + j) + (ptrdiff_t)c0;
    if (plain)
        decode_pf_simple(pf, PER, (j - ja) * (size_t)PER, plain == 1);
    else
        decode_pf_step(pf);
    SDPA_UNROLL for (int t = 0; t < NV; t++) x[t] = load_kv(v, vt, off + 16 * t, mk[t]);
}

/* acc[r][c0..) = alpha[r] * acc (alpha != NULL) + sum_{j in [ja, jb), j < nk[r]} S[r][j] *
   V[j][c0..) for r < R (nk non-decreasing in r), NV column vectors (masked past dv), V converted
   in registers, each converted vector feeding all R rows. Keys a row does not see are skipped
   rather than weighted by 0 (an inf or NaN there stays out of that row). */
SDPA_INLINE void pv_avx512_decode_tile_p(int R, int NV, int full, int plain, int PQ, float *acc,
                                         size_t dv, size_t c0, const float *alpha, const float *S,
                                         const void *v, sdpa_dtype vt, ptrdiff_t vs, size_t j0,
                                         size_t ja, size_t jb, const size_t *nk, decode_pf *pfp)
{
    const size_t lds = DECODE_LDS;
    decode_pf pf[1] = {*pfp}; /* a local copy, kept in registers */
    const size_t kmax = sdpa_min(jb, nk[R - 1]) - ja;
    __m512 a[DECODE_MAX_ROWS][8];
    __mmask16 mk[8];
    /* full: all NV vectors lie inside dv, so every load is a plain one */
    SDPA_UNROLL for (int t = 0; t < NV; t++) mk[t] = full               ? (__mmask16)0xFFFF
                                                     : c0 + 16 * t < dv ? lanes(dv - c0 - 16 * t)
                                                                        : 0;
    SDPA_UNROLL for (int r = 0; r < R; r++)
    {
        SDPA_UNROLL for (int t = 0; t < NV; t++) a[r][t] =
            _mm512_maskz_loadu_ps(mk[t], acc + r * dv + c0 + 16 * t);
        if (alpha) {
            const __m512 al = _mm512_set1_ps(alpha[r]);
            SDPA_UNROLL for (int t = 0; t < NV; t++) a[r][t] = _mm512_mul_ps(a[r][t], al);
        }
    }
    size_t j = ja;
    const size_t jall = sdpa_min(jb, nk[0]), jmax = sdpa_min(jb, nk[R - 1]);
    _Pragma("GCC unroll 2") for (; j < jall; j++)
    {
        __m512 x[8];
        pv_avx512_decode_key(NV, x, v, vt, vs, c0, mk, j0, j, ja, pf, plain, PQ);
        SDPA_UNROLL for (int r = 0; r < R; r++)
        {
            const __m512 p = _mm512_set1_ps(S[r * lds + j]);
            SDPA_UNROLL for (int t = 0; t < NV; t++) a[r][t] = _mm512_fmadd_ps(p, x[t], a[r][t]);
        }
    }
    for (; j < jmax; j++) {
        __m512 x[8];
        pv_avx512_decode_key(NV, x, v, vt, vs, c0, mk, j0, j, ja, pf, plain, PQ);
        SDPA_UNROLL for (int r = 1; r < R; r++)
        {
            if (j < nk[r]) {
                const __m512 p = _mm512_set1_ps(S[r * lds + j]);
                SDPA_UNROLL for (int t = 0; t < NV; t++) a[r][t] =
                    _mm512_fmadd_ps(p, x[t], a[r][t]);
            }
        }
    }
    SDPA_UNROLL for (int r = 0; r < R; r++) SDPA_UNROLL for (int t = 0; t < NV; t++)
        _mm512_mask_storeu_ps(acc + r * dv + c0 + 16 * t, mk[t], a[r][t]);
    if (plain) decode_pf_skip(pf, (size_t)PQ * kmax, plain == 1);
    *pfp = pf[0];
}

/* Full passes over rows of whole lines laid end to end request PQ lines of each stream per
   key with a pointer bump: PER, a pass's share of a row (when both streams' rows are dv's
   size), or PER / 2 when the phase requests half a phase of rows of each array (half,
   decode_values_ilv); the cases (two streams, one, the general cursor) are separate instances
   so that the plain ones keep their few pointers in registers. */
SDPA_INLINE void pv_avx512_decode_tile(int R, int NV, int full, int half, float *acc, size_t dv,
                                       size_t c0, const float *alpha, const float *S, const void *v,
                                       sdpa_dtype vt, ptrdiff_t vs, size_t j0, size_t ja, size_t jb,
                                       const size_t *nk, decode_pf *pf)
{
    const size_t ev = vt == SDPA_F32 ? 4 : 2;
    const int PER = NV * (int)ev / 4, PQ = half && PER >= 2 ? PER / 2 : PER;
    const size_t kmax = sdpa_min(jb, nk[R - 1]) - ja, L = dv * ev / 64;
    const int pm = full && dv % (16 * (size_t)NV) == 0 && (dv * ev) % 64 == 0
                       ? decode_pf_mode(pf, L, (size_t)PQ * kmax)
                       : 0;
#define PV_TILE_P(p)                                                                               \
    pv_avx512_decode_tile_p(R, NV, full, p, PQ, acc, dv, c0, alpha, S, v, vt, vs, j0, ja, jb, nk,  \
                            pf)
    if (pm == 1)
        PV_TILE_P(1);
    else if (pm == 2)
        PV_TILE_P(2);
    else
        PV_TILE_P(0);
#undef PV_TILE_P
}

/* The value type is a template parameter so that each instance converts with one instruction
   sequence and no per-load branch. Keys go in sub-blocks of DECODE_PV_KB, each one's V rows (a few
   KB) staying in L1 while every column chunk passes over them; alpha is applied by the first. NV
   (column vectors per pass) keeps R * NV accumulators at 8..24: at least 8 independent FMA
   chains to cover the FMA latency, few enough to stay in registers. */
SDPA_INLINE void pv_avx512_decode_h(int R, int NV, int half, sdpa_dtype vt, float *acc, size_t dv,
                                    const float *alpha, const float *S, const void *v, ptrdiff_t vs,
                                    size_t j0, const size_t *nk, decode_pf *pf, size_t ja0,
                                    size_t ja1)
{
    const size_t cw = 16 * (size_t)NV, passes = (dv + cw - 1) / cw; /* columns per pass */
    decode_pf_rate(pf, 1, half ? 2 * passes : passes);
    for (size_t ja = ja0; ja < sdpa_min(ja1, nk[R - 1]); ja += DECODE_PV_KB) {
        const float *al = ja == 0 ? alpha : NULL;
        const size_t jb = sdpa_min(ja + DECODE_PV_KB, nk[R - 1]);
        for (size_t c0 = 0; c0 < dv; c0 += cw) {
            if (c0 + cw <= dv)
                pv_avx512_decode_tile(R, NV, 1, half, acc, dv, c0, al, S, v, vt, vs, j0, ja, jb, nk,
                                      pf);
            else
                pv_avx512_decode_tile(R, NV, 0, half, acc, dv, c0, al, S, v, vt, vs, j0, ja, jb, nk,
                                      pf);
        }
    }
}

/* Keys [ja0, ja1) of the block (ja0 a multiple of DECODE_PV_KB); half: the streams hold half a
   phase of rows each (decode_values_ilv), requested at half the rate. */
SDPA_INLINE void pv_avx512_decode_r(int R, int NV, sdpa_dtype vt, float *acc, size_t dv,
                                    const float *alpha, const float *S, const void *v, ptrdiff_t vs,
                                    size_t j0, const size_t *nk, decode_pf *pf, size_t ja0,
                                    size_t ja1, int half)
{
    if (half && R <= DECODE_ILV_ROWS)
        pv_avx512_decode_h(R, NV, 1, vt, acc, dv, alpha, S, v, vs, j0, nk, pf, ja0, ja1);
    else
        pv_avx512_decode_h(R, NV, 0, vt, acc, dv, alpha, S, v, vs, j0, nk, pf, ja0, ja1);
}

/* One function per shape (storage type by row count), called once per block. */
typedef void pv_avx512_decode_fn(float *acc, size_t dv, const float *alpha, const float *S,
                                 const void *v, ptrdiff_t vs, size_t j0, const size_t *nk,
                                 decode_pf *pf, size_t ja0, size_t ja1, int half);
#define PV_DECODE_FN(T, R, NV)                                                                     \
    SDPA_NOINLINE void pv_avx512_decode_##T##_##R(                                                 \
        float *acc, size_t dv, const float *alpha, const float *S, const void *v, ptrdiff_t vs,    \
        size_t j0, const size_t *nk, decode_pf *pf, size_t ja0, size_t ja1, int half)              \
    {                                                                                              \
        pv_avx512_decode_r(R, NV, SDPA_##T, acc, dv, alpha, S, v, vs, j0, nk, pf, ja0, ja1, half); \
    }
/* clang-format off */
#define PV_DECODE_FNS(T)                                                                           \
    PV_DECODE_FN(T, 1, 8)                                                                          \
    PV_DECODE_FN(T, 2, 8) PV_DECODE_FN(T, 3, 4) PV_DECODE_FN(T, 4, 4) PV_DECODE_FN(T, 5, 4)        \
    PV_DECODE_FN(T, 6, 4) PV_DECODE_FN(T, 7, 2) PV_DECODE_FN(T, 8, 2)
/* clang-format on */
PV_DECODE_FNS(F32)
PV_DECODE_FNS(F16)
PV_DECODE_FNS(BF16)
#define PV_DECODE_ROW(T)                                                                           \
    {                                                                                              \
        pv_avx512_decode_##T##_1, pv_avx512_decode_##T##_2, pv_avx512_decode_##T##_3,              \
            pv_avx512_decode_##T##_4, pv_avx512_decode_##T##_5, pv_avx512_decode_##T##_6,          \
            pv_avx512_decode_##T##_7, pv_avx512_decode_##T##_8                                     \
    }
/* [F32, F16, BF16][rows - 1] */
static pv_avx512_decode_fn *const pv_avx512_decode_fns[3][DECODE_MAX_ROWS] = {
    PV_DECODE_ROW(F32), PV_DECODE_ROW(F16), PV_DECODE_ROW(BF16)};
#undef PV_DECODE_ROW
#undef PV_DECODE_FNS
#undef PV_DECODE_FN

static void pv_avx512_decode(size_t R, float *acc, size_t dv, const float *alpha, const float *S,
                             const void *v, sdpa_dtype vt, ptrdiff_t vs, size_t j0,
                             const size_t *nk, decode_pf *pf, size_t ja0, size_t ja1, int half)
{
    if (R >= 1 && R <= DECODE_MAX_ROWS)
        pv_avx512_decode_fns[decode_type_ix(vt)][R - 1](acc, dv, alpha, S, v, vs, j0, nk, pf, ja0,
                                                        ja1, half);
}

/* --- the hooks of the generic loop (rows_loop.h) -------------------------------------------- */

typedef struct decode_ctx {
    const float *qr[DECODE_MAX_ROWS]; /* query rows, the last repeated up to DECODE_MAX_ROWS */
    float *qpk;                       /* q packed by lines for score_avx512_decode_fast */
    float *S;                         /* the scores' scratch ([rows][DECODE_LDS]) */
    size_t ek, ev;                    /* bytes per K, V element */
    size_t kend;                      /* keys past it are never read (of the unit last given) */
    size_t NB;
    int other;    /* the other array's stream, and short blocks (decode_pf) */
    int ilv;      /* the next block's scores among the P·V (decode_values_ilv) */
    decode_pf pf; /* the block's streams, from the scores to the values */
    /* keys [pre_j0, pre_j0 + pre_n) of the K view pre_k, already scored into S[r][0..pre_n) */
    const void *pre_k;
    size_t pre_j0, pre_n;
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
    c->pre_n = 0;
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

/* All rows are computed (r0 is ignored): the score tiles are shaped by the row count. */
static inline void loop_scores(decode_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               float *S, size_t lds)
{
    (void)r0;
    const size_t d = w->d;
    c->kend = sdpa_min(w->kv_end, w->kv_limit[w->rows - 1]); /* w may be a page's piece */
    if (c->pre_n) { /* the keys the last P·V scored: this very block, or nothing */
        const int hit = j0 == c->pre_j0 && nb == c->pre_n && w->k == c->pre_k && S == c->S;
        c->pre_n = 0;
        if (hit) return;
    }
    /* the score loop requests K DECODE_PF_KEYS keys ahead (and, with few rows, this block's V
       rows); never a key at or past kend (see decode_pf) */
    const decode_pf pf = {
        {decode_rows(w->k, w->k_stride, c->ek, d * c->ek, j0 + DECODE_PF_KEYS, nb, c->kend),
         decode_rows(w->v, w->v_stride, c->ev, w->dv * c->ev, j0, c->other ? nb : 0, c->kend)},
        {0, 0}};
    c->pf = pf;
    decode_ahead(c, w->ahead_row, d * c->ek, w->ahead_n);
    score_avx512_decode(c->qr, w->rows, d, w->k, w->k_type, w->k_stride, j0, nb, S, lds, &c->pf,
                        c->qpk, 0);
}

static inline float loop_softmax(decode_ctx *c, size_t r, float *s, size_t nv, size_t nb, float *m,
                                 float *l)
{
    (void)c, (void)r, (void)nb;
    return softmax_avx512(1, s, nv, m, l);
}

/* The P·V of the block [j0, j0 + nb) in turns of DECODE_PV_KB keys, each followed by the scores
   of the same keys of the next block [jn, jn + nbn) into the part of S the turn has used up
   (left for loop_scores in pre_k, pre_j0, pre_n). Every turn of either kind requests half a
   turn of rows of both arrays, one turn ahead of their use (V from j0 + DECODE_PV_KB, K from
   jn + DECODE_PV_KB: what the last phases requested), so that K and V stream together. The
   softmax blocks, the score tiles (the turns fall on the tile grid) and the P·V sub-blocks are
   unchanged: the results are bitwise those of the block order. */
static void decode_values_ilv(decode_ctx *c, const sdpa_rows *w, size_t j0, size_t nb, size_t jn,
                              size_t nbn, const float *alpha, const size_t *valid)
{
    const size_t R = w->rows, T = DECODE_PV_KB, h = T / 2;
    size_t vk = j0 + T, kk = jn + T; /* the first rows of each array not yet requested */
    for (size_t ja = 0; ja < nb; ja += T) {
        const int both = ja < nbn; /* a score turn follows */
        c->pf.s[0] =
            decode_rows(w->v, w->v_stride, c->ev, w->dv * c->ev, vk, both ? h : T, c->kend);
        c->pf.s[1] = decode_rows(w->k, w->k_stride, c->ek, w->d * c->ek, kk, both ? h : 0, c->kend);
        vk += both ? h : T, kk += both ? h : 0;
        pv_avx512_decode(R, w->acc, w->dv, alpha, c->S, w->v, w->v_type, w->v_stride, j0, valid,
                         &c->pf, ja, ja + T, both);
        if (!both) continue;
        c->pf.s[0] = decode_rows(w->k, w->k_stride, c->ek, w->d * c->ek, kk, h, c->kend);
        c->pf.s[1] = decode_rows(w->v, w->v_stride, c->ev, w->dv * c->ev, vk, h, c->kend);
        vk += h, kk += h;
        score_avx512_decode(c->qr, R, w->d, w->k, w->k_type, w->k_stride, jn + ja,
                            sdpa_min(T, nbn - ja), c->S + ja, DECODE_LDS, &c->pf, c->qpk, 1);
    }
    c->pre_k = w->k, c->pre_j0 = jn, c->pre_n = nbn;
}

static inline void loop_values(decode_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               const float *alpha, const float *S, size_t lds)
{
    (void)r0, (void)lds;
    const size_t R = w->rows;
    size_t valid[DECODE_MAX_ROWS];
    for (size_t r = 0; r < R; r++) valid[r] = sdpa_visible(w, r, j0, nb);
    c->kend = sdpa_min(w->kv_end, w->kv_limit[R - 1]);
    /* the next block, when every row sees all of this one and it lies whole before kend (so
       the loop will score it, and exactly it, next) */
    const size_t jn = j0 + nb, nbn = w->kv_end > jn ? sdpa_min(c->NB, w->kv_end - jn) : 0;
    if (c->ilv && nb == c->NB && nbn && jn + nbn <= c->kend && valid[0] == nb && S == c->S &&
        !w->ahead_n) {
        decode_values_ilv(c, w, j0, nb, jn, nbn, alpha, valid);
        return;
    }
    /* the P·V loop requests V DECODE_PF_KEYS keys ahead (and, with few rows, the next block's K
       rows) */
    c->pf.s[0] =
        decode_rows(w->v, w->v_stride, c->ev, w->dv * c->ev, j0 + DECODE_PF_KEYS, nb, c->kend);
    c->pf.s[1] = decode_rows(w->k, w->k_stride, c->ek, w->d * c->ek, j0 + c->NB,
                             c->other ? c->NB : 0, c->kend);
    decode_ahead(c, w->ahead_row, w->dv * c->ev, w->ahead_n);
    pv_avx512_decode(R, w->acc, w->dv, alpha, S, w->v, w->v_type, w->v_stride, j0, valid, &c->pf, 0,
                     nb, 0);
}

#define SDPA_LOOP_FN         decode_loop_avx512
#define SDPA_LOOP_CTX        decode_ctx
#define SDPA_LOOP_AHEAD_ROWS 1 /* a paged piece's rows ahead join the streams (decode_pf) */
#include "rows_loop.h"

void sdpa_decode_avx512(const sdpa_rows *w)
{
    if (w->qq || sdpa_dtype_quantized(w->k_type) || sdpa_dtype_quantized(w->v_type))
        sdpa_decode_q_avx512(w);
    else
        decode_loop_avx512(w);
}
