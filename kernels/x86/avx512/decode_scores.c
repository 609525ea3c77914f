/* decode_scores.c -- the AVX-512 decode's score tiles (f32, f16, bf16 K), one instance per
   storage type and row count: decode.c's, in a unit of their own */
#include "decode_pf.h"

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

/* Scores of rows [0, R) (a tile shaped for RP in {1, 2, 4, 8} rows, whose padding rows take no
   arithmetic) against the keys [0, nk) of the block starting at key j0, into S[r][0..nk).
   RP * NK = 16 dot products per tile, so a single shuffle tree reduces them all and lane
   r * NK + i of its result is row r's score for key i (the sum of accumulator r * NK + i's lanes
   alone): no horizontal sum per key, and (unlike a per-row pass) K is read and converted once
   for all rows. A tail tile repeats its last key (in bounds) in the missing lanes and stores
   only the real ones. Each live stream gets PK rows' lines a tile: NK (a row per key), or NK / 2
   when the phase requests half a phase of rows of each array (decode_values_ilv). With pages kp
   (not NULL), K is the pages of a paged unit whose keys j0 + j are, j0 on the page grid and
   pages of a multiple of 16 keys: no tile straddles two pages. */
SDPA_INLINE void score_avx512_decode_pk(int R, int PK, sdpa_dtype kt, const float *const *qr,
                                        size_t d, const void *k, const sdpa_pages *kp, ptrdiff_t ks,
                                        size_t j0, size_t nk, float *S, size_t lds, decode_pf *pfs,
                                        const float *qp)
{
    /* with pages, tile j's keys are at row j - jp of K page pg */
    size_t pg = 0, jp = 0;
    if (kp) {
        pg = j0 / kp->size, j0 = 0;
        k = kp->k[pg - kp->first];
    }
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
        decode_pf_take(&pf);
        if (kp && j - jp == kp->size) {
            jp = j, pg++;
            k = kp->k[pg - kp->first];
        }
        if (nv == (size_t)NK && fsteps) {
            __m512 a[16];
            SDPA_UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
            const char *kc = (const char *)k + sdpa_row_off(ks, j0 + j - jp) * (ptrdiff_t)es;
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
            store_tile16(R, NK, reduce16(a), (size_t)NK, S, lds, j);
            continue;
        }
        ptrdiff_t ko[16];
        SDPA_UNROLL for (int i = 0; i < NK; i++) ko[i] =
            sdpa_row_off(ks, j0 + j - jp + sdpa_min((size_t)i, nv - 1));
        __m512 a[16];
        SDPA_UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
        size_t c = 0;
        _Pragma("GCC unroll 2") for (; c + 16 <= d; c += 16)
            score_avx512_decode_step(R, NK, kt, a, qr, k, ko, c, 0xFFFF, &pf);
        if (c < d) score_avx512_decode_step(R, NK, kt, a, qr, k, ko, c, lanes(d - c), &pf);
        store_tile16(R, NK, reduce16(a), nv, S, lds, j);
    }
    pfs->s[0] = pf.s[0];
    pfs->s[1] = pf.s[1];
}

SDPA_INLINE void score_avx512_decode_block(int R, sdpa_dtype kt, const float *const *qr, size_t d,
                                           const void *k, const sdpa_pages *kp, ptrdiff_t ks,
                                           size_t j0, size_t nk, float *S, size_t lds,
                                           decode_pf *pf, const float *qp, int half)
{
    const int NK = R == 1 ? 16 : R == 2 ? 8 : R <= 4 ? 4 : 2;
    /* pages come only with the interleaved turns (half); K's own rows keep an instance free of
       them */
    if (half && R <= DECODE_ILV_ROWS && kp)
        score_avx512_decode_pk(R, NK / 2, kt, qr, d, k, kp, ks, j0, nk, S, lds, pf, qp);
    else if (half && R <= DECODE_ILV_ROWS)
        score_avx512_decode_pk(R, NK / 2, kt, qr, d, k, NULL, ks, j0, nk, S, lds, pf, qp);
    else
        score_avx512_decode_pk(R, NK, kt, qr, d, k, NULL, ks, j0, nk, S, lds, pf, qp);
}

/* One function per shape (storage type by row count), called once per block. */
typedef void score_avx512_decode_fn(const float *const *qr, size_t d, const void *k,
                                    const sdpa_pages *kp, ptrdiff_t ks, size_t j0, size_t nk,
                                    float *S, size_t lds, decode_pf *pf, const float *qp, int half);
#define SCORE_DECODE_FN(T, R)                                                                      \
    SDPA_NOINLINE void score_avx512_decode_##T##_##R(                                              \
        const float *const *qr, size_t d, const void *k, const sdpa_pages *kp, ptrdiff_t ks,       \
        size_t j0, size_t nk, float *S, size_t lds, decode_pf *pf, const float *qp, int half)      \
    {                                                                                              \
        score_avx512_decode_block(R, SDPA_##T, qr, d, k, kp, ks, j0, nk, S, lds, pf, qp, half);    \
    }
/* clang-format off */
#define SCORE_DECODE_FNS(T)                                                                        \
    SCORE_DECODE_FN(T, 1) SCORE_DECODE_FN(T, 2) SCORE_DECODE_FN(T, 3) SCORE_DECODE_FN(T, 4)        \
    SCORE_DECODE_FN(T, 5) SCORE_DECODE_FN(T, 6) SCORE_DECODE_FN(T, 7) SCORE_DECODE_FN(T, 8)
/* clang-format on */
SCORE_DECODE_FNS(F32)
SCORE_DECODE_FNS(F16)
SCORE_DECODE_FNS(BF16)
static score_avx512_decode_fn *const score_avx512_decode_fns[3][DECODE_MAX_ROWS] =
    DECODE_TABLE8(score_avx512_decode);
#undef SCORE_DECODE_FNS
#undef SCORE_DECODE_FN

void sdpa_score_decode_avx512(const float *const *qr, size_t R, size_t d, const void *k,
                              const sdpa_pages *kp, sdpa_dtype kt, ptrdiff_t ks, size_t j0,
                              size_t nk, float *S, size_t lds, decode_pf *pf, const float *qp,
                              int half)
{
    if (R >= 1 && R <= DECODE_MAX_ROWS)
        score_avx512_decode_fns[decode_type_ix(kt)][R - 1](qr, d, k, kp, ks, j0, nk, S, lds, pf, qp,
                                                           half);
}
