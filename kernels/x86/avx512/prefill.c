/* prefill.c -- the AVX-512 prefill path: many query rows, two transposed GEMMs per key block */
#include "avx512.h"
#include "prefetch.h"
#include "variants.h"

/*
 * Two GEMMs per key block, computed transposed so that nothing but Q is ever transposed:
 * Sᵀ[j][r] = sum_c K[j][c] * Qᵀ[c][r] (keys broadcast, 16 query rows per vector, Qᵀ packed once
 * per call in panels of PREFILL_PANEL rows), the online softmax then runs along the key axis
 * with 16 rows per vector (no horizontal reductions; causal masks are per-lane compares), and
 * O[r][:] += Pᵀ[j][r] * V[j][:] broadcasts P against V rows (f32 V used in place, f16/bf16 V
 * converted once per block; a paged unit's K and V rows gathered page by page into that copy,
 * f32 too). The transposed layout is why this path keeps its own block loop rather than the
 * generic one (kernels/generic/rows_loop.h), whose tiles are row-major.
 */

/* vectors of 16 lanes: the score tile's query rows, the P·V tile's columns */
enum { SCORE_NV = SCORE_MR / 16, PV_NV = PV_NR / 16 };

static size_t prefill_block(size_t block) { return sdpa_min(block ? block : 1, PREFILL_BLOCK); }

size_t sdpa_prefill_ws_avx512(size_t rows, size_t d, size_t dv, size_t block)
{
    const size_t nb = prefill_block(block);
    return state_floats(rows) + sdpa_round16(rows) * d + nb * PREFILL_PANEL + nb * sdpa_round16(d) +
           nb * sdpa_round16(dv) + PREFILL_PANEL + sdpa_round16(rows);
}

/* Convert rows [j0, j0 + nb) of a K/V view (n elements each) to f32 rows of stride ld. */
static void convert_rows(const void *src, sdpa_dtype t, ptrdiff_t stride, size_t j0, size_t nb,
                         size_t n, float *dst, size_t ld)
{
    for (size_t j = 0; j < nb; j++) {
        const ptrdiff_t o = sdpa_row_off(stride, j0 + j);
        float *d = dst + j * ld;
        for (size_t c = 0; c < n; c += 16) {
            const __mmask16 m = lanes(n - c);
            __m512 x;
            if (t == SDPA_F16)
                x = load_f16((const uint16_t *)src + o + (ptrdiff_t)c, m);
            else if (t == SDPA_BF16)
                x = load_bf16((const uint16_t *)src + o + (ptrdiff_t)c, m);
            else
                x = _mm512_maskz_loadu_ps(m, (const float *)src + o + (ptrdiff_t)c);
            _mm512_mask_storeu_ps(d + c, m, x);
        }
    }
}

/* Rows [j0, j0 + nb) of K (v = 0) or V (v = 1) as f32 rows, *stride floats apart: f32 rows of a
   view in place, else converted into buf (stride ld); a paged unit's page by page, each next
   page's first line requested as a page starts (that early miss starts the core's stream
   prefetcher on it). */
static const float *block_rows(const sdpa_rows *w, int v, size_t j0, size_t nb, float *buf,
                               size_t ld, ptrdiff_t *stride)
{
    const sdpa_dtype t = v ? w->v_type : w->k_type;
    const ptrdiff_t st = v ? w->v_stride : w->k_stride;
    if (t == SDPA_F32 && !w->pages) {
        *stride = st;
        return (const float *)(v ? w->v : w->k) + sdpa_row_off(st, j0);
    }
    for (size_t j = j0, e = j0 + nb, m, r; j < e; j += m) {
        m = e - j;
        const void *x = sdpa_key_rows(w, v, j, &m, &r);
        if (w->pages) sdpa_page_touch(w, v, j + 1, j + 1 + w->pages->size);
        convert_rows(x, t, st, r, m, v ? w->dv : w->d, buf + (j - j0) * ld, ld);
    }
    *stride = (ptrdiff_t)ld;
    return buf;
}

/* Sᵀ tile: st[i][0..16*NV) = sum_c k[i][c] * qt[c][0..16*NV) for 16 NV query rows (NV
   vectors) and NK keys i (key index j + i within the block). qt is a Qᵀ panel [d][pw]; each
   step broadcasts NK key elements against NV query vectors. With masking on, a key at or past a
   lane's limit lim[] becomes -inf (whatever it computed, NaN included). The tile's maximum joins
   the panel's running maximum mx (NaN scores skipped: MAXPS returns the second operand, the
   running maximum, for a NaN). */
SDPA_INLINE void score_avx512_tile(int NV, int NK, const float *qt, size_t pw, const float *k,
                                   ptrdiff_t ks, size_t d, float *st, size_t j, int masked,
                                   const int32_t *lim, float *mx)
{
    __m512 a[SCORE_NR][SCORE_NV];
    const float *kr[SCORE_NR];
    SDPA_UNROLL for (int i = 0; i < NK; i++)
    {
        kr[i] = k + i * ks;
        SDPA_UNROLL for (int t = 0; t < NV; t++) a[i][t] = _mm512_setzero_ps();
    }
    _Pragma("GCC unroll 2") for (size_t c = 0; c < d; c++)
    {
        __m512 qv[SCORE_NV];
        SDPA_UNROLL for (int t = 0; t < NV; t++) qv[t] = _mm512_load_ps(qt + c * pw + 16 * t);
        SDPA_UNROLL for (int i = 0; i < NK; i++)
        {
            const __m512 kv = _mm512_set1_ps(kr[i][c]);
            SDPA_UNROLL for (int t = 0; t < NV; t++) a[i][t] = _mm512_fmadd_ps(kv, qv[t], a[i][t]);
        }
    }
    if (masked) {
        const __m512 ninf = _mm512_set1_ps(-INFINITY);
        SDPA_UNROLL for (int t = 0; t < NV; t++)
        {
            const __m512i L = _mm512_loadu_si512(lim + 16 * t);
            SDPA_UNROLL for (int i = 0; i < NK; i++)
            {
                const __mmask16 in =
                    _mm512_cmpgt_epi32_mask(L, _mm512_set1_epi32((int32_t)(j + i)));
                a[i][t] = _mm512_mask_mov_ps(ninf, in, a[i][t]);
            }
        }
    }
    SDPA_UNROLL for (int t = 0; t < NV; t++)
    {
        __m512 m = _mm512_load_ps(mx + 16 * t);
        SDPA_UNROLL for (int i = 0; i < NK; i++)
        {
            _mm512_store_ps(st + i * pw + 16 * t, a[i][t]);
            m = _mm512_max_ps(a[i][t], m);
        }
        _mm512_store_ps(mx + 16 * t, m);
    }
}

#define SCORE_TILE_NV(NK)                                                                          \
    case NK:                                                                                       \
        switch (nv) {                                                                              \
        case 1:                                                                                    \
            score_avx512_tile(1, NK, qt, pw, k, ks, d, st, j, 1, lim, mx);                         \
            break;                                                                                 \
        case 2:                                                                                    \
            score_avx512_tile(2, NK, qt, pw, k, ks, d, st, j, 1, lim, mx);                         \
            break;                                                                                 \
        case 3:                                                                                    \
            score_avx512_tile(3, NK, qt, pw, k, ks, d, st, j, 1, lim, mx);                         \
            break;                                                                                 \
        default:                                                                                   \
            score_avx512_tile(4, NK, qt, pw, k, ks, d, st, j, 1, lim, mx);                         \
            break;                                                                                 \
        }                                                                                          \
        break;

/* Every tile shape other than the full unmasked one, up to SCORE_MR rows (nv vectors) by
   SCORE_NR keys (nk): key tails, narrow panels, the diagonal. */
static void score_avx512_64x6(size_t nv, size_t nk, const float *qt, size_t pw, const float *k,
                              ptrdiff_t ks, size_t d, float *st, size_t j, const int32_t *lim,
                              float *mx)
{
    switch (nk) {
        SCORE_TILE_NV(1)
        SCORE_TILE_NV(2)
        SCORE_TILE_NV(3)
        SCORE_TILE_NV(4)
        SCORE_TILE_NV(5)
        SCORE_TILE_NV(6)
    default:
        break;
    }
}
#undef SCORE_TILE_NV

/* The whole Sᵀ of a panel: keys [0, nk) (rows k, stride ks) against its pw rows, masked by the
   rows' limits lim[], with the row maxima left in mx[0..pw) (-inf where nothing is seen). */
static void score_avx512_panel(const float *qt, size_t pw, const float *k, ptrdiff_t ks, size_t d,
                               size_t nk, float *st, const int32_t *lim, float *mx,
                               sdpa_pf_cursor *pf)
{
    const size_t nv = pw / 16;
    /* limits are non-decreasing over the panel: keys below the first row's need no mask */
    const size_t jfree = (size_t)lim[0];
    for (size_t t = 0; t < pw; t += 16) _mm512_store_ps(mx + t, _mm512_set1_ps(-INFINITY));
    size_t j = 0;
    if (nv == SCORE_NV)
        for (; j + SCORE_NR <= nk && j + SCORE_NR <= jfree; j += SCORE_NR) {
            score_avx512_tile(SCORE_NV, SCORE_NR, qt, pw, k + (ptrdiff_t)j * ks, ks, d, st + j * pw,
                              j, 0, lim, mx);
            sdpa_pf_lines(pf, PREFILL_PF_LINES);
        }
    for (; j < nk; j += SCORE_NR) {
        /* on the diagonal, a 16-row vector whose last row's limit is at or before key j sees
           none of the tile: skipped (its softmax stops at that limit and never reads here) */
        size_t t0 = 0;
        while ((size_t)lim[16 * t0 + 15] <= j) t0++; /* ends: the panel's last limit is nk */
        score_avx512_64x6(nv - t0, sdpa_min(SCORE_NR, nk - j), qt + 16 * t0, pw,
                          k + (ptrdiff_t)j * ks, ks, d, st + j * pw + 16 * t0, j, lim + 16 * t0,
                          mx + 16 * t0);
        sdpa_pf_lines(pf, PREFILL_PF_LINES);
    }
}

/* The rows' score multipliers (sdpa_rows.score_mul, powers of two) applied to a panel's Sᵀ,
   keys [0, nk), and to its block maxima: a positive factor keeps the maximum where it was. */
static void scale_avx512_panel(float *st, size_t pw, size_t nk, const float *mul, float *bm)
{
    for (size_t t = 0; t < pw; t += 16) {
        const __m512 f = _mm512_loadu_ps(mul + t);
        for (size_t j = 0; j < nk; j++)
            _mm512_store_ps(st + j * pw + t, _mm512_mul_ps(f, _mm512_load_ps(st + j * pw + t)));
        _mm512_store_ps(bm + t, _mm512_mul_ps(f, _mm512_load_ps(bm + t)));
    }
}

/* O tile: acc[i][c0..c0+PV_NR) (= alpha[i] * acc first when alpha != NULL) += sum_j P[j][i] *
   V[j][c0..) for MR rows i and keys j < nk[i] (non-decreasing in i); columns past dv masked
   off. A row's excluded keys are skipped, not multiplied by p = 0, so that an inf or NaN in a
   value row that only later rows see cannot reach it. */
SDPA_INLINE void pv_avx512_tile(int MR, int full, float *acc, size_t dv, size_t c0,
                                const float *alpha, const float *P, size_t pw, const float *v,
                                ptrdiff_t vs, const size_t *nk)
{
    __m512 a[PV_MR][PV_NV];
    __mmask16 mk[PV_NV];
    /* full: all PV_NR columns inside dv, every load a plain one */
    SDPA_UNROLL for (int t = 0; t < PV_NV; t++) mk[t] = full               ? (__mmask16)0xFFFF
                                                        : c0 + 16 * t < dv ? lanes(dv - c0 - 16 * t)
                                                                           : 0;
    SDPA_UNROLL for (int i = 0; i < MR; i++)
    {
        SDPA_UNROLL for (int t = 0; t < PV_NV; t++) a[i][t] =
            _mm512_maskz_loadu_ps(mk[t], acc + i * dv + c0 + 16 * t);
        if (alpha) {
            const __m512 al = _mm512_set1_ps(alpha[i]);
            SDPA_UNROLL for (int t = 0; t < PV_NV; t++) a[i][t] = _mm512_mul_ps(a[i][t], al);
        }
    }
    /* pointers stepped per key (no index multiply), the bound in a register: the integer
       work shares ports with the 512-bit FMAs */
    const float *vp = v + c0, *pp = P;
    size_t j = 0;
    const size_t n0 = nk[0], n1 = nk[MR - 1];
    _Pragma("GCC unroll 2") for (; j < n0; j++, vp += vs, pp += pw)
    {
        __m512 x[PV_NV];
        SDPA_UNROLL for (int t = 0; t < PV_NV; t++) x[t] =
            full ? _mm512_loadu_ps(vp + 16 * t) : _mm512_maskz_loadu_ps(mk[t], vp + 16 * t);
        SDPA_UNROLL for (int i = 0; i < MR; i++)
        {
            const __m512 p = _mm512_set1_ps(pp[i]);
            SDPA_UNROLL for (int t = 0; t < PV_NV; t++) a[i][t] = _mm512_fmadd_ps(p, x[t], a[i][t]);
        }
    }
    for (; j < n1; j++) { /* the diagonal: some rows stop earlier */
        __m512 x[PV_NV];
        SDPA_UNROLL for (int t = 0; t < PV_NV; t++) x[t] =
            _mm512_maskz_loadu_ps(mk[t], v + (ptrdiff_t)j * vs + (ptrdiff_t)(c0 + 16 * t));
        SDPA_UNROLL for (int i = 1; i < MR; i++)
        {
            if (j < nk[i]) {
                const __m512 p = _mm512_set1_ps(P[j * pw + i]);
                SDPA_UNROLL for (int t = 0; t < PV_NV; t++) a[i][t] =
                    _mm512_fmadd_ps(p, x[t], a[i][t]);
            }
        }
    }
    SDPA_UNROLL for (int i = 0; i < MR; i++) SDPA_UNROLL for (int t = 0; t < PV_NV; t++)
        _mm512_mask_storeu_ps(acc + i * dv + c0 + 16 * t, mk[t], a[i][t]);
}

static void pv_avx512_6x64(size_t mr, float *acc, size_t dv, size_t c0, const float *alpha,
                           const float *P, size_t pw, const float *v, ptrdiff_t vs,
                           const size_t *nk)
{
    if (mr == PV_MR && c0 + PV_NR <= dv) {
        pv_avx512_tile(PV_MR, 1, acc, dv, c0, alpha, P, pw, v, vs, nk);
        return;
    }
#define PV_TILE(m) pv_avx512_tile(m, 0, acc, dv, c0, alpha, P, pw, v, vs, nk)
    switch (mr) {
        SDPA_CASES6(PV_TILE)
    default:
        break;
    }
#undef PV_TILE
}

/* The online softmax of one 16-row vector of a panel's Sᵀ (stride pw), keys [0, nk), whose
   masked entries are already -inf and whose block maxima are bm (16 lanes). m, l, alpha: 16
   lanes in memory, updated. */
static void softmax_avx512_t16(float *st, size_t pw, size_t nk, const float *bm, float *m, float *l,
                               float *alpha)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __m512 mo = _mm512_loadu_ps(m);
    /* NaN-free: bm skipped NaN scores and m is never NaN */
    const __m512 mn = _mm512_max_ps(_mm512_load_ps(bm), mo);
    /* a lane that has seen only -inf subtracts 0: p = exp(-inf) = 0, alpha 1, no NaN */
    const __mmask16 dead = _mm512_cmpeq_ps_mask(mn, ninf);
    const __m512 msub = _mm512_mask_mov_ps(mn, dead, _mm512_setzero_ps());
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    size_t j = 0;
    for (; j + 2 <= nk; j += 2) {
        const __m512 p0 = exp_avx512_ftz(_mm512_sub_ps(_mm512_load_ps(st + j * pw), msub));
        const __m512 p1 = exp_avx512_ftz(_mm512_sub_ps(_mm512_load_ps(st + (j + 1) * pw), msub));
        _mm512_store_ps(st + j * pw, p0);
        _mm512_store_ps(st + (j + 1) * pw, p1);
        s0 = _mm512_add_ps(s0, p0);
        s1 = _mm512_add_ps(s1, p1);
    }
    if (j < nk) {
        const __m512 p0 = exp_avx512_ftz(_mm512_sub_ps(_mm512_load_ps(st + j * pw), msub));
        _mm512_store_ps(st + j * pw, p0);
        s0 = _mm512_add_ps(s0, p0);
    }
    const __m512 al =
        _mm512_mask_mov_ps(exp_avx512_ftz(_mm512_sub_ps(mo, mn)), dead, _mm512_set1_ps(1.0f));
    _mm512_storeu_ps(alpha, al);
    _mm512_storeu_ps(l,
                     _mm512_add_ps(_mm512_mul_ps(al, _mm512_loadu_ps(l)), _mm512_add_ps(s0, s1)));
    _mm512_storeu_ps(m, mn);
}

/* In-register transpose of a 16 x 16 block: r[i] lane c becomes r[c] lane i. 32-bit, then 64-bit
   unpacks within 128-bit lanes leave u[4g + j] lane k holding column 4k + j of rows 4g..4g+3;
   two rounds of 128-bit lane shuffles then gather each column's four quads of rows. */
SDPA_INLINE void transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    SDPA_UNROLL for (int i = 0; i < 16; i += 2)
    {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    SDPA_UNROLL for (int g = 0; g < 16; g += 4)
    {
        const __m512d a = _mm512_castps_pd(t[g]), b = _mm512_castps_pd(t[g + 1]);
        const __m512d c = _mm512_castps_pd(t[g + 2]), e = _mm512_castps_pd(t[g + 3]);
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
    }
    SDPA_UNROLL for (int j = 0; j < 4; j++)
    {
        const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

/* Qᵀ panels from the packed rows q[R][d]: panel p0 (width pw = min(PREFILL_PANEL, Rp - p0)) is
   qt[p0 * d + c * pw + r], rows R..Rp zero. 16 x 16 blocks through registers: every load and
   store a whole line (a strided scalar copy touched a new line per element). */
static void pack_qt(const float *q, size_t R, size_t d, size_t Rp, float *qt)
{
    for (size_t p0 = 0; p0 < Rp; p0 += PREFILL_PANEL) {
        const size_t pw = sdpa_min(PREFILL_PANEL, Rp - p0);
        float *qp = qt + p0 * d;
        for (size_t rb = 0; rb < pw; rb += 16) {
            const size_t r0 = p0 + rb;
            for (size_t c = 0; c < d; c += 16) {
                const __mmask16 mc = lanes(d - c);
                __m512 x[16];
                SDPA_UNROLL for (int i = 0; i < 16; i++) x[i] =
                    r0 + i < R ? _mm512_maskz_loadu_ps(mc, q + (r0 + i) * d + c)
                               : _mm512_setzero_ps();
                transpose16(x);
                const size_t nc = sdpa_min(16, d - c);
                SDPA_UNROLL for (int i = 0; i < 16; i++) if ((size_t)i < nc)
                    _mm512_store_ps(qp + (c + i) * pw + rb, x[i]);
            }
        }
    }
}

/* tanh of 16 lanes: sdpa_tanh1 (kernels/generic/tanh.h) operation for operation, each fused
   multiply-add where it has one, so that every lane has the same bits as the scalar code's. */
SDPA_INLINE __m512 tanh_avx512(__m512 x)
{
    const __m512i xb = _mm512_castps_si512(x);
    const __m512i ab = _mm512_and_si512(xb, _mm512_set1_epi32(0x7fffffff));
    const __m512 a = _mm512_castsi512_ps(ab);

    const __m512 z = _mm512_mul_ps(a, a);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(TANH_P4), z, _mm512_set1_ps(TANH_P3));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_P2));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_P1));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_P0));
    const __m512 small = _mm512_fmadd_ps(a, _mm512_mul_ps(z, p), a);
    const __m512i sign = _mm512_and_si512(xb, _mm512_set1_epi32((int32_t)0x80000000u));
    /* a >= TANH_SMALL, false for NaN, which takes the small branch. Scores well below the cap
       take it in every lane, and then the large branch (its division) is left out. */
    const __mmask16 big = _mm512_cmp_ps_mask(a, _mm512_set1_ps(TANH_SMALL), _CMP_GE_OQ);
    if (big == 0) return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(small), sign));

    /* the clamp on the bits, NaN included, as the scalar code's */
    const __m512 ac = _mm512_castsi512_ps(
        _mm512_min_epi32(ab, _mm512_set1_epi32((int32_t)sdpa_f32_bits(TANH_CLAMP))));
    const __m512 v = _mm512_mul_ps(_mm512_set1_ps(-2.0f), ac);
    const __m512 nr = _mm512_fmadd_ps(v, _mm512_set1_ps(EXP_LOG2E), _mm512_set1_ps(TANH_ROUND));
    const __m512 nf = _mm512_sub_ps(nr, _mm512_set1_ps(TANH_ROUND));
    const __m512 two_n = _mm512_castsi512_ps(_mm512_add_epi32(
        _mm512_slli_epi32(_mm512_castps_si512(nr), 23), _mm512_set1_epi32(0x3f800000)));
    const __m512 r = _mm512_fmadd_ps(nf, _mm512_set1_ps(-EXP_LN2_LO),
                                     _mm512_fmadd_ps(nf, _mm512_set1_ps(-EXP_LN2_HI), v));
    __m512 c = _mm512_fmadd_ps(_mm512_set1_ps(EXP_C6), r, _mm512_set1_ps(EXP_C5));
    c = _mm512_fmadd_ps(c, r, _mm512_set1_ps(EXP_C4));
    c = _mm512_fmadd_ps(c, r, _mm512_set1_ps(EXP_C3));
    c = _mm512_fmadd_ps(c, r, _mm512_set1_ps(0.5f));
    const __m512 em1 = _mm512_fmadd_ps(_mm512_mul_ps(r, r), c, r);
    const __m512 e = _mm512_fmadd_ps(two_n, em1, two_n);
    const __m512 large =
        _mm512_sub_ps(_mm512_set1_ps(1.0f),
                      _mm512_div_ps(_mm512_add_ps(e, e), _mm512_add_ps(_mm512_set1_ps(1.0f), e)));

    const __m512i tb = _mm512_castps_si512(_mm512_mask_mov_ps(small, big, large));
    return _mm512_castsi512_ps(_mm512_or_si512(tb, sign));
}

/* a + b and a * b with a the first source operand, the one x86 keeps when both are NaN: an
   intrinsic leaves the order of a commutative operation to the compiler. */
SDPA_INLINE __m512 add_a_first(__m512 a, __m512 b)
{
    __m512 r;
    __asm__("vaddps %2, %1, %0" : "=v"(r) : "v"(a), "v"(b));
    return r;
}

SDPA_INLINE __m512 mul_a_first(__m512 a, __m512 b)
{
    __m512 r;
    __asm__("vmulps %2, %1, %0" : "=v"(r) : "v"(a), "v"(b));
    return r;
}

/* The modifiers of one 16-row vector of a panel: what is constant along its keys. */
typedef struct mods16 {
    __m512i lim, first; /* keys [first, lim) of the block seen, per lane (padding lanes: none) */
    __m512 slope, base; /* ALiBi: s -= slope |base + j| */
    __m512 mscale;      /* the mask's factors */
    __m512 cap, inv;    /* softcap: s = cap tanh(s inv), or tanh(s / cap) where inv = 0 */
    /* which modifiers, copied out of sdpa_mods: the tile's stores cannot alias them */
    bool softcap, by_inv, alibi, mask, scaled;
} mods16;

/* Key j of the block (jv, jf: j in every lane) on a vector's scores s, mask entries x (f32,
   lane i row i's entry for key j) when the unit has a mask: sdpa_softcap then sdpa_modify_row,
   the same operations in the same order; keys a lane does not see become -inf, and any gains
   the lanes where the mask hides a key the lane sees. */
SDPA_INLINE __m512 modify16(const mods16 *m, __m512 s, __m512i jv, __m512 jf, __m512 x,
                            __mmask16 *any)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    if (m->softcap) {
        const __m512 y = m->by_inv ? _mm512_mul_ps(s, m->inv) : _mm512_div_ps(s, m->cap);
        s = _mm512_mul_ps(m->cap, tanh_avx512(y));
    }
    if (m->alibi) {
        const __m512 t = _mm512_abs_ps(_mm512_add_ps(m->base, jf));
        s = _mm512_sub_ps(s, _mm512_mul_ps(m->slope, t));
    }
    const __mmask16 in = _mm512_cmpgt_epi32_mask(m->lim, jv);
    if (m->mask) {
        /* of two NaNs the factor's, then the mask term's is kept, as in the scalar loop as
           compiled */
        const __mmask16 hm = _mm512_cmpeq_epi32_mask(_mm512_castps_si512(x),
                                                     _mm512_set1_epi32((int32_t)0xff800000u));
        const __m512 y = m->scaled ? mul_a_first(m->mscale, x) : x;
        s = _mm512_mask_mov_ps(add_a_first(y, s), hm, ninf);
        *any |= hm & in;
    }
    s = _mm512_mask_mov_ps(s, _mm512_cmpgt_epi32_mask(m->first, jv), ninf);
    return _mm512_mask_mov_ps(ninf, in, s);
}

/* The mask entries of 16 rows (row pointers x[i] at the block's first key, lane i reading keys
   [jb, n[i]) of its row only) for keys jb..jb+15, transposed: y[k] lane i is row i's entry for
   key jb + k, exact in f32; entries not read are 0. full: every n[i] >= jb + 16. */
SDPA_INLINE void mask_tile16(int full, const void *const x[16], const int32_t n[16], sdpa_dtype t,
                             size_t jb, __m512 y[16])
{
    SDPA_UNROLL for (int i = 0; i < 16; i++)
    {
        const __mmask16 m = full                 ? (__mmask16)0xFFFF
                            : n[i] > (int32_t)jb ? lanes((size_t)n[i] - jb)
                                                 : 0;
        if (t == SDPA_F32)
            y[i] = _mm512_maskz_loadu_ps(m, (const float *)x[i] + jb);
        else if (t == SDPA_F16)
            y[i] = load_f16((const uint16_t *)x[i] + jb, m);
        else
            y[i] = load_bf16((const uint16_t *)x[i] + jb, m);
    }
    transpose16(y);
}

/* Every modifier and the window starts on a panel's Sᵀ (rows p0.., nreal of them real, keys of
   block j0, lim: their limits within it), in place of sdpa_softcap and sdpa_modify_row per row,
   bit for bit: each 16-row vector takes the keys below its real rows' limits, keys a row
   does not see become -inf, and bm gets each row's block maximum (NaN skipped, as in the score
   kernel; padding rows: -inf). Returns whether a key below a real row's limit is hidden from it
   by the mask, or any real row's window starts past j0, as sdpa_modify_row says. */
static bool modify_avx512_panel(const sdpa_rows *w, size_t p0, size_t nreal, size_t j0, float *st,
                                size_t pw, const int32_t *lim, float *bm)
{
    const sdpa_mods *md = w->mods ? w->mods : &(const sdpa_mods){0};
    const size_t eb = md->mask ? sdpa_block_bytes((int)md->mask_type) : 0;
    bool hidden = false;
    __mmask16 any = 0;
    for (size_t t = 0; t < pw; t += 16) {
        const size_t nr = sdpa_min(16, nreal - t); /* every vector has a real row */
        const __mmask16 real = lanes(nr);
        size_t nt = 0; /* the keys its rows see */
        for (size_t i = 0; i < nr; i++) nt = sdpa_max(nt, (size_t)lim[t + i]);
        mods16 m;
        int32_t fl[16], nl[16];
        float sl[16], bs[16], ms[16];
        const void *mr[16];
        for (size_t i = 0; i < 16; i++) {
            const size_t r = p0 + t + sdpa_min(i, nr - 1); /* padding lanes: the last real row */
            const size_t f = sdpa_first(w, r);
            fl[i] = (int32_t)(f > j0 ? sdpa_min(f - j0, nt) : 0);
            if (i < nr && f > j0) hidden = true;
            nl[i] = i < nr ? lim[t + i] : 0;
            sl[i] = md->slope ? md->slope[r] : 0.0f;
            bs[i] = md->slope ? (float)((ptrdiff_t)j0 - md->pos[r]) : 0.0f;
            ms[i] = md->mask_scale ? md->mask_scale[r] : 0.0f;
            mr[i] = md->mask ? (const char *)md->mask[r] + j0 * eb : NULL;
        }
        m.lim = _mm512_maskz_loadu_epi32(real, nl);
        m.first = _mm512_loadu_si512(fl);
        m.slope = _mm512_loadu_ps(sl);
        m.base = _mm512_loadu_ps(bs);
        m.mscale = _mm512_loadu_ps(ms);
        m.cap = _mm512_set1_ps(md->softcap);
        m.inv = _mm512_set1_ps(md->inv_softcap);
        m.softcap = md->softcap > 0.0f;
        m.by_inv = md->inv_softcap != 0.0f;
        m.alibi = md->slope != NULL;
        m.mask = md->mask != NULL;
        m.scaled = md->mask_scale != NULL;
        int32_t nmin = nl[0]; /* the keys every lane sees, 0 with a padding lane */
        for (size_t i = 1; i < 16; i++) nmin = nl[i] < nmin ? nl[i] : nmin;

        __m512 mx = _mm512_set1_ps(-INFINITY);
        float *s = st + t;
        if (md->mask) {
            for (size_t jb = 0; jb < nt; jb += 16) {
                __m512 x[16];
                if (jb + 16 <= (size_t)nmin)
                    mask_tile16(1, mr, nl, md->mask_type, jb, x);
                else
                    mask_tile16(0, mr, nl, md->mask_type, jb, x);
                const size_t nk = sdpa_min(16, nt - jb);
                for (size_t k = 0; k < nk; k++) {
                    const size_t j = jb + k;
                    const __m512 y =
                        modify16(&m, _mm512_load_ps(s + j * pw), _mm512_set1_epi32((int32_t)j),
                                 _mm512_set1_ps((float)(int32_t)j), x[k], &any);
                    _mm512_store_ps(s + j * pw, y);
                    mx = _mm512_max_ps(y, mx);
                }
            }
        } else {
            for (size_t j = 0; j < nt; j++) {
                const __m512 y =
                    modify16(&m, _mm512_load_ps(s + j * pw), _mm512_set1_epi32((int32_t)j),
                             _mm512_set1_ps((float)(int32_t)j), _mm512_setzero_ps(), &any);
                _mm512_store_ps(s + j * pw, y);
                mx = _mm512_max_ps(y, mx);
            }
        }
        _mm512_store_ps(bm + t, mx);
    }
    return hidden || any != 0;
}

void sdpa_prefill_avx512(const sdpa_rows *w)
{
    const size_t R = w->rows, d = w->d, dv = w->dv, Rp = sdpa_round16(R);
    const size_t dp = sdpa_round16(d), dvp = sdpa_round16(dv);
    const size_t NB = prefill_block(w->block);
    float *mw = w->ws, *lw = mw + Rp, *aw = lw + Rp;
    int32_t *lim = (int32_t *)(void *)(aw + Rp);
    float *qt = mw + state_floats(R);    /* panels [R/64][d][64], the last one narrower */
    float *st = qt + Rp * d;             /* [NB][PREFILL_PANEL] */
    float *kc = st + NB * PREFILL_PANEL; /* [NB][dp] */
    float *vc = kc + NB * dp;            /* [NB][dvp] */
    float *bm = vc + NB * dvp;           /* [PREFILL_PANEL] block maxima of a panel's rows */
                                         /* then [Rp] score multipliers, with score_mul */
    sdpa_pf_cursor pfc = sdpa_pf_begin(w);

    /* Pack Qᵀ once per call (padding rows are zero), load the row state (padding rows: dead). */
    pack_qt(w->q, R, d, Rp, qt);
    for (size_t r = 0; r < Rp; r++) {
        mw[r] = r < R ? w->m[r] : -INFINITY;
        lw[r] = r < R ? w->l[r] : 0.0f;
    }
    float *mulw = NULL; /* the rows' score multipliers, padded with 1 */
    if (w->score_mul) {
        mulw = bm + PREFILL_PANEL;
        for (size_t r = 0; r < Rp; r++) mulw[r] = r < R ? w->score_mul[r] : 1.0f;
    }

    const bool var = sdpa_is_variant(w); /* window starts or modifiers */

    /* blocks in decreasing order when the driver asks (sdpa_rows.reverse) */
    const size_t nblk = (w->kv_end - w->kv_begin + NB - 1) / NB;
    for (size_t bi = 0; bi < nblk; bi++) {
        const size_t j0 = w->kv_begin + (w->reverse ? nblk - 1 - bi : bi) * NB;
        const size_t nb = sdpa_min(NB, w->kv_end - j0);
        /* a block no row sees (left of every window, or masked for every row) is skipped */
        if (var && sdpa_block_hidden(w, 0, R, j0, nb)) continue;
        for (size_t r = 0; r < Rp; r++) {
            /* padding rows copy the last real row's limit, keeping limits non-decreasing */
            const size_t L = w->kv_limit[r < R ? r : R - 1];
            lim[r] = (int32_t)(L <= j0 ? 0 : sdpa_min(nb, L - j0));
        }
        /* the last row sees the most keys: nothing past its limit is converted or read */
        const size_t nmax = (size_t)lim[R - 1];
        ptrdiff_t ks, vs;
        const float *kr = block_rows(w, 0, j0, nmax, kc, dp, &ks);
        const float *vr = block_rows(w, 1, j0, nmax, vc, dvp, &vs);

        for (size_t p0 = 0; p0 < Rp; p0 += PREFILL_PANEL) {
            const size_t pw = sdpa_min(PREFILL_PANEL, Rp - p0);
            const size_t rl = sdpa_min(R, p0 + pw) - 1; /* the panel's last real row */
            const size_t np = (size_t)lim[rl];          /* keys any row of the panel sees */
            if (np == 0) continue;                      /* nothing seen: state unchanged */
            if (var && sdpa_block_hidden(w, p0, rl + 1, j0, nb)) continue;
            score_avx512_panel(qt + p0 * d, pw, kr, ks, d, np, st, lim + p0, bm, &pfc);
            if (w->score_mul) scale_avx512_panel(st, pw, np, mulw + p0, bm);
            bool hidden = false; /* a key hidden from a row by its first or the mask */
            if (var) hidden = modify_avx512_panel(w, p0, rl + 1 - p0, j0, st, pw, lim + p0, bm);
            /* a vector's keys stop at its last row's limit: P past a row's limit is never read */
            for (size_t t = 0; t < pw; t += 16)
                softmax_avx512_t16(st + t, pw, sdpa_min(np, (size_t)lim[p0 + t + 15]), bm + t,
                                   mw + p0 + t, lw + p0 + t, aw + p0 + t);
            /* P·V over the panel's real rows, keys in L1-sized sub-blocks; hidden keys carry
               p = 0, which adds exactly 0 when their V is finite, else the exact per-row path
               skips them */
            const size_t nrow = rl + 1 - p0;
            if (hidden && !sdpa_rows_finite(vr, SDPA_F32, vs, dv, 0, np)) {
                for (size_t i = 0; i < nrow; i++)
                    sdpa_pv_row_exact_at(w, p0 + i, j0, (size_t)lim[p0 + i], aw[p0 + i], st + i, pw,
                                         vr, SDPA_F32, vs, 0);
                continue;
            }
            for (size_t kb = 0; kb < np; kb += PV_KB) {
                for (size_t c0 = 0; c0 < dv; c0 += PV_NR) {
                    for (size_t i = 0; i < nrow; i += PV_MR) {
                        const size_t mr = sdpa_min(PV_MR, nrow - i);
                        size_t nk[PV_MR]; /* keys of this sub-block each row sees */
                        for (size_t t = 0; t < mr; t++) {
                            const size_t li = (size_t)lim[p0 + i + t];
                            nk[t] = li <= kb ? 0 : sdpa_min(PV_KB, li - kb);
                        }
                        /* no key seen at all: kb > 0, or kb == 0 and alpha = 1, p = 0 */
                        if (nk[mr - 1] == 0) continue;
                        pv_avx512_6x64(mr, w->acc + (p0 + i) * dv, dv, c0,
                                       kb == 0 ? aw + p0 + i : NULL, st + kb * pw + i, pw,
                                       vr + (ptrdiff_t)kb * vs, vs, nk);
                    }
                }
            }
        }
    }
    for (size_t r = 0; r < R; r++) {
        w->m[r] = mw[r];
        w->l[r] = lw[r];
    }
}
