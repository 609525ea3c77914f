/* decode_pv.h -- the AVX-512 decode's P·V tiles (f32, f16, bf16 V), instantiated per storage type
 * and row count by decode_pv.c (f32, f16, and the dispatcher sdpa_pv_decode_avx512) and
 * decode_pv_bf16.c (bf16): units apart from decode.c, and from each other, for their compile
 * time */
#ifndef SDPA_AVX512_DECODE_PV_H
#define SDPA_AVX512_DECODE_PV_H

#include "decode_pf.h"

/* Whether a P·V tile holds bf16 V in column pairs: with whole vectors (mk all full) vector 2u
   holds the even columns of the 32 from c0 + 32u and vector 2u + 1 the odd ones, so that a
   load of 32 elements converts with one shift and one mask (two operations, not four); the
   tile permutes its accumulators to that order and back (pv_pairs_load, pv_pairs_store). Each
   column's sum is the same sequence of operations in either order. */
#define PV_BF16_PAIRS(vt, NV, full) ((vt) == SDPA_BF16 && (NV) % 2 == 0 && (full))

/* The 32 accumulator columns at o, natural order, as the even (*e) and odd (*d) ones. */
SDPA_INLINE void pv_pairs_load(const float *o, __m512 *e, __m512 *d)
{
    const __m512 n0 = _mm512_loadu_ps(o), n1 = _mm512_loadu_ps(o + 16);
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    *e = _mm512_permutex2var_ps(n0, ie, n1);
    *d = _mm512_permutex2var_ps(n0, _mm512_add_epi32(ie, _mm512_set1_epi32(1)), n1);
}

/* pv_pairs_load's inverse: the even (e) and odd (d) columns back to o in natural order. */
SDPA_INLINE void pv_pairs_store(float *o, __m512 e, __m512 d)
{
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    _mm512_storeu_ps(o, _mm512_permutex2var_ps(e, lo, d));
    _mm512_storeu_ps(o + 16,
                     _mm512_permutex2var_ps(e, _mm512_add_epi32(lo, _mm512_set1_epi32(8)), d));
}

/* NV vectors of a V row from row (its column c0; masks mk), converted, after the pass's
   prefetch step for the key: PER lines from each plain stream's line pp[i] (plain != 0: the
   second stream too when plain == 1), else the general cursor's next; pairs: PV_BF16_PAIRS's
   order. */
SDPA_INLINE void pv_avx512_decode_key(int NV, __m512 *x, const void *row, sdpa_dtype vt,
                                      const __mmask16 *mk, decode_pf *pf, const char *const *pp,
                                      int plain, int PER, int pairs)
{
    if (plain)
        decode_pf_lines(pp, PER, plain == 1);
    else
        decode_pf_step(pf);
    if (pairs) {
        /* 32 bf16 as 16 words: element 2i is word i's low half, 2i + 1 its high half */
        const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
        SDPA_UNROLL for (int t = 0; t < NV; t += 2)
        {
            const __m512i w = _mm512_loadu_si512((const uint16_t *)row + 16 * t);
            x[t] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
            x[t + 1] = _mm512_castsi512_ps(_mm512_and_si512(w, hi));
        }
        return;
    }
    SDPA_UNROLL for (int t = 0; t < NV; t++) x[t] = load_kv(row, vt, 16 * t, mk[t]);
}

/* Column c0 of V row j: of v, or with pages vp (not NULL) of the page holding the paged unit's
   key j. */
SDPA_INLINE const char *pv_row(const void *v, const sdpa_pages *vp, sdpa_dtype vt, ptrdiff_t vs,
                               size_t j, size_t c0)
{
    if (vp) {
        const size_t p = j / vp->size;
        v = vp->v[p - vp->first];
        j -= p * vp->size;
    }
    return (const char *)v +
           (sdpa_row_off(vs, j) + (ptrdiff_t)c0) * (ptrdiff_t)(vt == SDPA_F32 ? 4 : 2);
}

/* acc[r][c0..) = alpha[r] * acc (alpha != NULL) + sum_{j in [ja, jb), j < nk[r]} S[r][j] *
   V[j][c0..) for r < R (nk non-decreasing in r), NV column vectors (masked past dv), V converted
   in registers, each converted vector feeding all R rows. Keys a row does not see are skipped
   rather than weighted by 0 (an inf or NaN there stays out of that row). With pages vp, V row j
   is the paged unit's key j0 + j (pv_row): the keys go in runs within a page. */
SDPA_INLINE void pv_avx512_decode_tile_p(int R, int NV, int full, int plain, int PQ, float *acc,
                                         size_t dv, size_t c0, const float *alpha, const float *S,
                                         const void *v, const sdpa_pages *vp, sdpa_dtype vt,
                                         ptrdiff_t vs, size_t j0, size_t ja, size_t jb,
                                         const size_t *nk, decode_pf *pfp)
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
    const int pairs = PV_BF16_PAIRS(vt, NV, full);
    SDPA_UNROLL for (int r = 0; r < R; r++)
    {
        if (pairs)
            SDPA_UNROLL for (int t = 0; t < NV; t += 2)
                pv_pairs_load(acc + r * dv + c0 + 16 * t, &a[r][t], &a[r][t + 1]);
        else
            SDPA_UNROLL for (int t = 0; t < NV; t++) a[r][t] =
                _mm512_maskz_loadu_ps(mk[t], acc + r * dv + c0 + 16 * t);
        if (alpha) {
            const __m512 al = _mm512_set1_ps(alpha[r]);
            SDPA_UNROLL for (int t = 0; t < NV; t++) a[r][t] = _mm512_mul_ps(a[r][t], al);
        }
    }
    size_t j = ja;
    const size_t jall = sdpa_min(jb, nk[0]), jmax = sdpa_min(jb, nk[R - 1]);
    /* plain (and pages): V row j's column c0, and the streams' lines for key j, as pointers
       stepped per key (no multiply or counter for the compiler to keep; with pages, no division
       per key); else the row by its index */
    const ptrdiff_t vstep = vs * (ptrdiff_t)(vt == SDPA_F32 ? 4 : 2);
    const char *row = pv_row(v, vp, vt, vs, j0 + ja, c0);
    const char *pp[2] = {pf->s[0].p, pf->s[1].p};
    /* with pages, the keys in runs within a page: pg the page of key j0 + j, run its keys left */
    size_t pg = vp ? (j0 + ja) / vp->size : 0, run = vp ? (pg + 1) * vp->size - (j0 + ja) : 0;
    for (;;) {
        const size_t je = vp ? sdpa_min(jall, j + run) : jall;
        _Pragma("GCC unroll 2") for (; j < je;
                                     j++, row += vstep, pp[0] += 64 * PQ, pp[1] += 64 * PQ)
        {
            __m512 x[8];
            pv_avx512_decode_key(NV, x, plain || vp ? row : pv_row(v, NULL, vt, vs, j0 + j, c0), vt,
                                 mk, pf, pp, plain, PQ, pairs);
            SDPA_UNROLL for (int r = 0; r < R; r++)
            {
                const __m512 p = _mm512_set1_ps(S[r * lds + j]);
                SDPA_UNROLL for (int t = 0; t < NV; t++) a[r][t] =
                    _mm512_fmadd_ps(p, x[t], a[r][t]);
            }
        }
        if (!vp || j >= jall) break;
        pg++, run = vp->size;
        row = (const char *)vp->v[pg - vp->first] + c0 * (vt == SDPA_F32 ? 4 : 2);
    }
    for (; j < jmax; j++, row += vstep, pp[0] += 64 * PQ, pp[1] += 64 * PQ) {
        __m512 x[8];
        pv_avx512_decode_key(NV, x, vp || !plain ? pv_row(v, vp, vt, vs, j0 + j, c0) : row, vt, mk,
                             pf, pp, plain, PQ, pairs);
        SDPA_UNROLL for (int r = 1; r < R; r++)
        {
            if (j < nk[r]) {
                const __m512 p = _mm512_set1_ps(S[r * lds + j]);
                SDPA_UNROLL for (int t = 0; t < NV; t++) a[r][t] =
                    _mm512_fmadd_ps(p, x[t], a[r][t]);
            }
        }
    }
    SDPA_UNROLL for (int r = 0; r < R; r++)
    {
        if (pairs)
            SDPA_UNROLL for (int t = 0; t < NV; t += 2)
                pv_pairs_store(acc + r * dv + c0 + 16 * t, a[r][t], a[r][t + 1]);
        else
            SDPA_UNROLL for (int t = 0; t < NV; t++)
                _mm512_mask_storeu_ps(acc + r * dv + c0 + 16 * t, mk[t], a[r][t]);
    }
    if (plain) decode_pf_skip(pf, (size_t)PQ * kmax, plain == 1);
    decode_pf_take(pf);
    *pfp = pf[0];
}

/* Full passes over rows of whole lines laid end to end request PQ lines of each stream per
   key with a pointer bump: PER, a pass's share of a row (when both streams' rows are dv's
   size), or PER / 2 when the phase requests half a phase of rows of each array (half,
   decode_values_ilv); the cases (two streams, one, the general cursor) are separate instances
   so that the plain ones keep their few pointers in registers. */
SDPA_INLINE void pv_avx512_decode_tile(int R, int NV, int full, int half, float *acc, size_t dv,
                                       size_t c0, const float *alpha, const float *S, const void *v,
                                       const sdpa_pages *vp, sdpa_dtype vt, ptrdiff_t vs, size_t j0,
                                       size_t ja, size_t jb, const size_t *nk, decode_pf *pf)
{
    const size_t ev = vt == SDPA_F32 ? 4 : 2;
    const int PER = NV * (int)ev / 4, PQ = half && PER >= 2 ? PER / 2 : PER;
    const size_t kmax = sdpa_min(jb, nk[R - 1]) - ja, L = dv * ev / 64;
    const int pm = full && dv % (16 * (size_t)NV) == 0 && (dv * ev) % 64 == 0
                       ? decode_pf_mode(pf, L, (size_t)PQ * kmax)
                       : 0;
#define PV_TILE_P(p, pages)                                                                        \
    pv_avx512_decode_tile_p(R, NV, full, p, PQ, acc, dv, c0, alpha, S, v, pages, vt, vs, j0, ja,   \
                            jb, nk, pf)
    if (vp) /* a paged unit's V: the two-stream case and the general one */
        if (pm == 1)
            PV_TILE_P(1, vp);
        else
            PV_TILE_P(0, vp);
    else if (pm == 1)
        PV_TILE_P(1, NULL);
    else if (pm == 2)
        PV_TILE_P(2, NULL);
    else
        PV_TILE_P(0, NULL);
#undef PV_TILE_P
}

/* The value type is a template parameter so that each instance converts with one instruction
   sequence and no per-load branch. Keys go in sub-blocks of DECODE_PV_KB, each one's V rows (a few
   KB) staying in L1 while every column chunk passes over them; alpha is applied by the first. NV
   (column vectors per pass) keeps R * NV accumulators at 8..24: at least 8 independent FMA
   chains to cover the FMA latency, few enough to stay in registers. */
SDPA_INLINE void pv_avx512_decode_h(int R, int NV, int half, sdpa_dtype vt, float *acc, size_t dv,
                                    const float *alpha, const float *S, const void *v,
                                    const sdpa_pages *vp, ptrdiff_t vs, size_t j0, const size_t *nk,
                                    decode_pf *pf, size_t ja0, size_t ja1)
{
    const size_t cw = 16 * (size_t)NV, passes = (dv + cw - 1) / cw; /* columns per pass */
    decode_pf_rate(pf, 1, half ? 2 * passes : passes);
    for (size_t ja = ja0; ja < sdpa_min(ja1, nk[R - 1]); ja += DECODE_PV_KB) {
        const float *al = ja == 0 ? alpha : NULL;
        const size_t jb = sdpa_min(sdpa_min(ja + DECODE_PV_KB, ja1), nk[R - 1]);
        for (size_t c0 = 0; c0 < dv; c0 += cw) {
            if (c0 + cw <= dv)
                pv_avx512_decode_tile(R, NV, 1, half, acc, dv, c0, al, S, v, vp, vt, vs, j0, ja, jb,
                                      nk, pf);
            else
                pv_avx512_decode_tile(R, NV, 0, half, acc, dv, c0, al, S, v, vp, vt, vs, j0, ja, jb,
                                      nk, pf);
        }
    }
}

/* Keys [ja0, ja1) of the block (ja0 a multiple of DECODE_PV_KB or of a turn: a sub-block cut in
   parts sums its keys in the same order); half: the streams hold half a phase of rows each
   (decode_values_ilv), requested at half the rate. */
SDPA_INLINE void pv_avx512_decode_r(int R, int NV, sdpa_dtype vt, float *acc, size_t dv,
                                    const float *alpha, const float *S, const void *v,
                                    const sdpa_pages *vp, ptrdiff_t vs, size_t j0, const size_t *nk,
                                    decode_pf *pf, size_t ja0, size_t ja1, int half)
{
    if (half && R <= DECODE_ILV_ROWS)
        pv_avx512_decode_h(R, NV, 1, vt, acc, dv, alpha, S, v, vp, vs, j0, nk, pf, ja0, ja1);
    else
        pv_avx512_decode_h(R, NV, 0, vt, acc, dv, alpha, S, v, vp, vs, j0, nk, pf, ja0, ja1);
}

/* One function per shape (storage type by row count), called once per block. */
typedef void pv_avx512_decode_fn(float *acc, size_t dv, const float *alpha, const float *S,
                                 const void *v, const sdpa_pages *vp, ptrdiff_t vs, size_t j0,
                                 const size_t *nk, decode_pf *pf, size_t ja0, size_t ja1, int half);
#define PV_DECODE_FN(T, R, NV)                                                                     \
    SDPA_NOINLINE void pv_avx512_decode_##T##_##R(                                                 \
        float *acc, size_t dv, const float *alpha, const float *S, const void *v,                  \
        const sdpa_pages *vp, ptrdiff_t vs, size_t j0, const size_t *nk, decode_pf *pf,            \
        size_t ja0, size_t ja1, int half)                                                          \
    {                                                                                              \
        pv_avx512_decode_r(R, NV, SDPA_##T, acc, dv, alpha, S, v, vp, vs, j0, nk, pf, ja0, ja1,    \
                           half);                                                                  \
    }
/* clang-format off */
#define PV_DECODE_FNS(T)                                                                           \
    PV_DECODE_FN(T, 1, 8)                                                                          \
    PV_DECODE_FN(T, 2, 8) PV_DECODE_FN(T, 3, 4) PV_DECODE_FN(T, 4, 4) PV_DECODE_FN(T, 5, 4)        \
    PV_DECODE_FN(T, 6, 4) PV_DECODE_FN(T, 7, 2) PV_DECODE_FN(T, 8, 2)
/* clang-format on */

/* sdpa_pv_decode_avx512 (decode_pf.h) for bf16 V: decode_pv_bf16.c. */
void sdpa_pv_decode_avx512_bf16(size_t R, float *acc, size_t dv, const float *alpha, const float *S,
                                const void *v, const sdpa_pages *vp, ptrdiff_t vs, size_t j0,
                                const size_t *nk, decode_pf *pf, size_t ja0, size_t ja1, int half);

#endif /* SDPA_AVX512_DECODE_PV_H */
