/* decode_pf.h -- the AVX-512 decode's prefetch streams, shared by its score and P·V units */
#ifndef SDPA_AVX512_DECODE_PF_H
#define SDPA_AVX512_DECODE_PF_H

#include "avx512.h"
#include "prefetch.h"

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

/* Takes up each stream's chained run once its first has run out: once a tile, not once a step
   (decode_pf_step's cursor stops at a run's end). */
static inline void decode_pf_take(decode_pf *p)
{
    sdpa_pf_rows_take(&p->s[0]);
    sdpa_pf_rows_take(&p->s[1]);
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

/* `per` lines from line pp[0] of a plain run (and from pp[1] when `two`). */
SDPA_INLINE void decode_pf_lines(const char *const *pp, int per, int two)
{
    SDPA_UNROLL for (int i = 0; i < per; i++)
    {
        __builtin_prefetch(pp[0] + 64 * i, 0, SDPA_PF_STREAM_LOCALITY);
        if (two) __builtin_prefetch(pp[1] + 64 * i, 0, SDPA_PF_STREAM_LOCALITY);
    }
}

/* `per` lines of the first stream (and of the second when `two`) from line offset `at` (in
   lines) of the plain run starting at the streams' current lines. */
SDPA_INLINE void decode_pf_simple(const decode_pf *p, int per, size_t at, int two)
{
    const char *const pp[2] = {p->s[0].p + 64 * at, p->s[1].p + 64 * at};
    decode_pf_lines(pp, per, two);
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

/* The row of a [type] table: F32, F16, anything else as BF16. */
static inline size_t decode_type_ix(sdpa_dtype t)
{
    return t == SDPA_F32 ? 0 : t == SDPA_F16 ? 1 : 2;
}

/* A [F32, F16, BF16][rows - 1] table of the instances P_T_R, R from 1 to DECODE_MAX_ROWS (8). */
#define DECODE_ROW8(P, T)                                                                          \
    {                                                                                              \
        P##_##T##_1, P##_##T##_2, P##_##T##_3, P##_##T##_4, P##_##T##_5, P##_##T##_6, P##_##T##_7, \
            P##_##T##_8                                                                            \
    }
#define DECODE_TABLE8(P)                                                                           \
    {                                                                                              \
        DECODE_ROW8(P, F32), DECODE_ROW8(P, F16), DECODE_ROW8(P, BF16)                             \
    }

/* Scores of rows [0, R) against keys [j0, j0 + nk) of K (f32, f16 or bf16) into S[r][0..nk),
   the streams pf requested among the arithmetic (at half rate when half); qp: the rows packed
   by lines (decode.c's pack_q_lines). K is k's rows, or with kp (not NULL; half and at most
   DECODE_ILV_ROWS rows) the K pages of a paged unit, j0 on the page grid, pages of a multiple
   of 16 keys. decode_scores.c, a unit of its own for its compile time. */
void sdpa_score_decode_avx512(const float *const *qr, size_t R, size_t d, const void *k,
                              const sdpa_pages *kp, sdpa_dtype kt, ptrdiff_t ks, size_t j0,
                              size_t nk, float *S, size_t lds, decode_pf *pf, const float *qp,
                              int half);

/* acc[r] = alpha[r] * acc[r] (alpha applied by the sub-block at key 0) + sum_j S[r][j] V[j0 + j]
   for rows r < R over keys [ja0, ja1) of the block at j0, key j only for rows with j < nk[r],
   V (f32, f16 or bf16) converted in registers, in sub-blocks of DECODE_PV_KB keys; the streams
   pf requested among the arithmetic (at half rate when half, decode_values_ilv). V is v's rows,
   or with vp (not NULL) the V pages of a paged unit whose keys j0 + j are. decode_pv.c
   (decode_pv.h's tiles; bf16 in decode_pv_bf16.c), units of their own for their compile time. */
void sdpa_pv_decode_avx512(size_t R, float *acc, size_t dv, const float *alpha, const float *S,
                           const void *v, const sdpa_pages *vp, sdpa_dtype vt, ptrdiff_t vs,
                           size_t j0, const size_t *nk, decode_pf *pf, size_t ja0, size_t ja1,
                           int half);

#endif /* SDPA_AVX512_DECODE_PF_H */
