/* decode_q_tiles.h -- the score tiles and P·V panels of decode_q.h, for K or V in a block format */
/*
 * Exact scores convert each K block once, in registers, for every row; fast scores take the
 * exact int32 dot product of a query block's quants with the key block's, scaled by qd * d_k in
 * f32, plus qd * m_k * sum(query quants) for q4_1 and q5_1. P·V converts each V block once
 * for every row. DECODE_Q_PF_KEYS (keys ahead whose rows are requested), DECODE_Q_PV_KB
 * (keys per P·V sub-block) and SDPA_QD_VNNI must be defined.
 */
#ifndef SDPA_DECODE_Q_TILES_H
#define SDPA_DECODE_Q_TILES_H

#include "decode_q_format.h"

/* The scratch of decode_q.h for R rows, in floats (each part a multiple of 16): S
   [R][DECODE_Q_BLOCK], alpha [R], the VNNI query bytes, the fast scores' block scales (qz),
   then for q4_1 and q5_1 the fast scores' qd * sum(q) of each row's blocks (qm: qz's layout,
   only lane 0 of each block's 8 set, so that the sum enters once per block). */
#define QD_WS_QM(R, d)                                                                             \
    ((R)*sdpa_round16(DECODE_Q_BLOCK) + sdpa_round16(R) + sdpa_round16((R) * (d) / 4 + 1) +        \
     sdpa_round16((R) * ((d) / 4 + 16)))
#define QD_WS_FLOATS(R, d) (QD_WS_QM(R, d) + sdpa_round16((R) * ((d) / 4 + 16)))

/* Scores of R rows (q packed, row r at q + r d) against NK keys (rows kr[i]), R * NK <= 8,
   lane r * NK + i. Exact: K converted per block, once for all rows, then f32 FMAs. */
SDPA_INLINE __m256 qd_score_tile(int R, int NK, sdpa_dtype kt, const float *q, size_t d,
                                 const unsigned char *const *kr)
{
    __m256 a[8];
    SDPA_UNROLL for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
    if (sdpa_dtype_quantized(kt)) {
        const size_t bb = sdpa_block_bytes(kt);
        for (size_t b = 0; b < d / SDPA_QK; b++) {
            __m256 dk[8], ck[8];
            qd_src src[8];
            SDPA_UNROLL for (int i = 0; i < NK; i++)
            {
                qd_scales8(kt, kr[i] + b * bb, &dk[i], &ck[i]);
                src[i] = qd_prepare(kt, kr[i] + b * bb);
            }
            SDPA_UNROLL for (int t = 0; t < 4; t++)
            {
                __m256 kv[8];
                SDPA_UNROLL for (int i = 0; i < NK; i++) kv[i] =
                    qd_x8(kt, &src[i], t, dk[i], ck[i]);
                SDPA_UNROLL for (int r = 0; r < R; r++)
                {
                    __m256 qv = _mm256_loadu_ps(q + (size_t)r * d + b * SDPA_QK + 8 * (size_t)t);
                    if (NK > 1) __asm__("" : "+x"(qv)); /* one load per query vector */
                    SDPA_UNROLL for (int i = 0; i < NK; i++) a[r * NK + i] =
                        _mm256_fmadd_ps(qv, kv[i], a[r * NK + i]);
                }
            }
        }
    } else {
        for (size_t c = 0; c < d; c += 8) {
            const size_t n = d - c < 8 ? d - c : 8;
            __m256 kv[8];
            SDPA_UNROLL for (int i = 0; i < NK; i++) kv[i] = qd_load_float(kt, kr[i], c, n);
            SDPA_UNROLL for (int r = 0; r < R; r++)
            {
                const __m256 qv = qd_load_float(SDPA_F32, q + (size_t)r * d, c, n);
                SDPA_UNROLL for (int i = 0; i < NK; i++) a[r * NK + i] =
                    _mm256_fmadd_ps(qv, kv[i], a[r * NK + i]);
            }
        }
    }
    return qd_reduce8(a);
}

/* Fast scores of R rows against NK keys: per block, the exact int32 dot product of the row's
   quants with the key's, converted and scaled by qd * d_k. The byte products take one operand
   unsigned: with VNNI the row's quants plus 128 (qu, packed by loop_begin) against k, less
   128 sum(k) (the accumulator's start, once per key block); without, |k| against the row's
   quants carrying k's sign. q4_1 and q5_1 add m_k times qm (qd * sum(q), lane 0 of each
   block's 8, by loop_begin). */
SDPA_INLINE __m256 qd_score_tile_i8(int R, int NK, sdpa_dtype kt, const int8_t *qq,
                                    const uint8_t *qu, const float *qdv, const float *qm, size_t d,
                                    const unsigned char *const *kr)
{
    __m256 a[8];
    SDPA_UNROLL for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
    const size_t bb = sdpa_block_bytes(kt), nbk = d / SDPA_QK, zr = (nbk + 1) / 2 * 16;
    (void)qq, (void)qu, (void)qm, (void)zr;
    for (size_t b = 0; b < nbk; b++) {
        SDPA_UNROLL for (int i = 0; i < NK; i++)
        {
            const unsigned char *kb = kr[i] + b * bb;
            __m256 dk, mk;
            qd_scales8(kt, kb, &dk, &mk);
            const __m256i k8 = qd_quants32(kt, kb);
#if SDPA_QD_VNNI
            const __m256i c0 = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), k8));
#else
            const __m256i ak = _mm256_sign_epi8(k8, k8);
#endif
            SDPA_UNROLL for (int r = 0; r < R; r++)
            {
#if SDPA_QD_VNNI
                const __m256i u8 = _mm256_loadu_si256(
                    (const __m256i *)(const void *)(qu + (size_t)r * d + b * SDPA_QK));
                const __m256i p = _mm256_dpbusd_epi32(c0, u8, k8);
#else
                const __m256i q8 = _mm256_loadu_si256(
                    (const __m256i *)(const void *)(qq + (size_t)r * d + b * SDPA_QK));
                const __m256i p = qd_dot(ak, _mm256_sign_epi8(q8, k8));
#endif
                const __m256 s = _mm256_mul_ps(dk, _mm256_broadcast_ss(qdv + (size_t)r * nbk + b));
                a[r * NK + i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, a[r * NK + i]);
                if (sdpa_dtype_has_min(kt))
                    a[r * NK + i] = _mm256_fmadd_ps(
                        mk, _mm256_loadu_ps(qm + (size_t)r * zr + b * 8), a[r * NK + i]);
            }
        }
    }
    return qd_reduce8(a);
}

/* The rows of a score tile's keys j0 + j + i, i < NK, of the nb from j0 (a tail tile of n < NK
   keys repeats its last, in bounds), and the rows DECODE_Q_PF_KEYS keys ahead of its real ones
   requested (none at or past the keys any row sees). Returns n, the tile's real keys. */
SDPA_INLINE size_t qd_tile_keys(int NK, sdpa_dtype kt, const sdpa_rows *w, size_t j0, size_t j,
                                size_t nb, const unsigned char **kr)
{
    const size_t n = nb - j < (size_t)NK ? nb - j : (size_t)NK;
    const size_t kend = sdpa_min(w->kv_end, w->kv_limit[w->rows - 1]);
    SDPA_UNROLL for (int i = 0; i < NK; i++) kr[i] =
        qd_key_row(w, 0, kt, j0 + j + ((size_t)i < n ? (size_t)i : n - 1));
    const size_t pf = w->pages ? DECODE_Q_PF_PAGED : DECODE_Q_PF_KEYS;
    for (size_t i = 0; i < n; i++)
        if (j0 + j + i + pf < kend) qd_request_row(qd_key_row(w, 0, kt, j0 + j + i + pf), kt, w->d);
    return n;
}

/* A tile's scores, lane r NK + i of v for row r and key i (R NK <= 8), to S[r][j + i] for the R
   real rows and n real keys: with AVX-512 store_tile16's stores; on AVX2 a full tile's rows as
   pieces of the vector, a tail tile's lane by lane. */
SDPA_INLINE void qd_tile_store(int R, int NK, __m256 v, size_t n, float *S, size_t lds, size_t j)
{
#ifdef __AVX512F__
    store_tile16(R, NK, _mm512_castps256_ps512(v), n, S, lds, j); /* lanes 8-15 never stored */
#else
    const __m128 h[2] = {_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)};
    if (n == (size_t)NK && NK > 1) {
        SDPA_UNROLL for (int r = 0; r < R; r++)
        {
            float *p = S + (size_t)r * lds + j;
            if (NK == 8)
                _mm256_storeu_ps(p, v);
            else if (NK == 4)
                _mm_storeu_ps(p, h[r]);
            else if (r & 1)
                _mm_storeh_pi((__m64 *)(void *)p, h[r / 2]);
            else
                _mm_storel_pi((__m64 *)(void *)p, h[r / 2]);
        }
        return;
    }
    float out[8];
    _mm256_storeu_ps(out, v);
    for (int r = 0; r < R; r++)
        for (size_t i = 0; i < n; i++) S[(size_t)r * lds + j + i] = out[r * NK + (int)i];
#endif
}

#ifdef __AVX512F__
/* --- 512-bit forms (the avx512 files): a block is two vectors ----------------------------- */

/* Exact scores of R rows (the tile shaped for RP in {1, 2, 4, 8} rows; the padding rows' lanes
   take no arithmetic and stay 0, never stored) against keys [j0, j0 + nb) of a quantized K,
   tiles of NK = 16 / RP keys: 16 accumulators that one shuffle tree (reduce16, PERM16) reduces
   to row r's score of key i in lane r NK + i, a sum of accumulator r NK + i's lanes alone. */
SDPA_INLINE void qd_scores_z(int R, sdpa_dtype kt, const sdpa_rows *w, size_t j0, size_t nb,
                             float *S, size_t lds)
{
    const int RP = R == 1 ? 1 : R == 2 ? 2 : R <= 4 ? 4 : 8, NK = 16 / RP;
    const size_t d = w->d, bb = sdpa_block_bytes(kt);
    const float *qr[8];
    for (int r = 0; r < R; r++) qr[r] = w->q + (size_t)r * d;
    for (size_t j = 0; j < nb; j += (size_t)NK) {
        const unsigned char *kr[16];
        const size_t n = qd_tile_keys(NK, kt, w, j0, j, nb, kr);
        __m512 a[16];
        SDPA_UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
        for (size_t b = 0; b < d / SDPA_QK; b++) {
            SDPA_UNROLL for (int i = 0; i < NK; i++)
            {
                const qd_blk16 kb = qd_block16(kt, kr[i] + b * bb);
                SDPA_UNROLL for (int h = 0; h < 2; h++)
                {
                    const __m512 kv = qd_get16(kt, &kb, h);
                    SDPA_UNROLL for (int r = 0; r < R; r++)
                    {
                        const __m512 qv = _mm512_loadu_ps(qr[r] + b * SDPA_QK + 16 * (size_t)h);
                        a[PERM16(r * NK + i)] = _mm512_fmadd_ps(qv, kv, a[PERM16(r * NK + i)]);
                    }
                }
            }
        }
        store_tile16(R, NK, reduce16(a), n, S, lds, j);
    }
}

/* Fast scores of R rows (in an RP-row tile, padding lanes 0) against keys [j0, j0 + nb), tiles of
   NK = 16 / RP keys, two blocks per vector: the int32 dot products of blocks b and b + 1 in lanes
   0-7 and 8-15, scaled by qz (the rows' block scales, each repeated over its 8 lanes, made by
   loop_begin) times the key's. VNNI: vpdpbusd on the rows' quants plus 128 (qu) from -128 sum(k);
   without: pmaddubsw on |k| and the quants negated where k < 0. An odd last block takes 256 bits.
   q4_1 and q5_1 add m_k times qm (qd_score_tile_i8). */
SDPA_INLINE void qd_scores_fast_z(int R, sdpa_dtype kt, const sdpa_rows *w, const uint8_t *qu,
                                  const float *qz, const float *qm, size_t j0, size_t nb, float *S,
                                  size_t lds)
{
    const int RP = R == 1 ? 1 : R == 2 ? 2 : R <= 4 ? 4 : 8, NK = 16 / RP;
    const size_t d = w->d, bb = sdpa_block_bytes(kt), nbk = d / SDPA_QK, zr = (nbk + 1) / 2 * 16;
    (void)qm;
    (void)qu;
    for (size_t j = 0; j < nb; j += (size_t)NK) {
        const unsigned char *kr[16];
        const size_t n = qd_tile_keys(NK, kt, w, j0, j, nb, kr);
        __m512 a[16];
        SDPA_UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
        size_t b = 0;
        for (; b + 2 <= nbk; b += 2) {
            SDPA_UNROLL for (int i = 0; i < NK; i++)
            {
                const unsigned char *k0 = kr[i] + b * bb, *k1 = k0 + bb;
                const __m512i k = _mm512_inserti64x4(_mm512_castsi256_si512(qd_quants32(kt, k0)),
                                                     qd_quants32(kt, k1), 1);
                __m256 d0, m0, d1, m1;
                qd_scales8(kt, k0, &d0, &m0);
                qd_scales8(kt, k1, &d1, &m1);
                const __m512 dk = _mm512_insertf32x8(_mm512_castps256_ps512(d0), d1, 1);
                const __m512 mk = _mm512_insertf32x8(_mm512_castps256_ps512(m0), m1, 1);
                (void)mk;
#if SDPA_QD_VNNI
                const __m512i c0 = _mm512_sub_epi32(
                    _mm512_setzero_si512(),
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), k));
#else
                const __m512i ak = _mm512_abs_epi8(k);
                const __mmask64 neg = _mm512_movepi8_mask(k);
#endif
                SDPA_UNROLL for (int r = 0; r < R; r++)
                {
#if SDPA_QD_VNNI
                    const __m512i u =
                        _mm512_loadu_si512((const void *)(qu + (size_t)r * d + b * SDPA_QK));
                    const __m512i p = _mm512_dpbusd_epi32(c0, u, k);
#else
                    const __m512i q =
                        _mm512_loadu_si512((const void *)(w->qq + (size_t)r * d + b * SDPA_QK));
                    const __m512i sq = _mm512_mask_sub_epi8(q, neg, _mm512_setzero_si512(), q);
                    const __m512i p =
                        _mm512_madd_epi16(_mm512_maddubs_epi16(ak, sq), _mm512_set1_epi16(1));
#endif
                    const __m512 sc =
                        _mm512_mul_ps(dk, _mm512_loadu_ps(qz + (size_t)r * zr + b / 2 * 16));
                    a[PERM16(r * NK + i)] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, a[PERM16(r * NK + i)]);
                    if (sdpa_dtype_has_min(kt))
                        a[PERM16(r * NK + i)] =
                            _mm512_fmadd_ps(mk, _mm512_loadu_ps(qm + (size_t)r * zr + b / 2 * 16),
                                            a[PERM16(r * NK + i)]);
                }
            }
        }
        if (b < nbk) SDPA_UNROLL for (int i = 0; i < NK; i++)
            {
                const unsigned char *kb = kr[i] + b * bb;
                const __m256i k8 = qd_quants32(kt, kb);
                __m256 dk, mk;
                qd_scales8(kt, kb, &dk, &mk);
                const __m256i ak = _mm256_sign_epi8(k8, k8);
                SDPA_UNROLL for (int r = 0; r < R; r++)
                {
                    const __m256i q8 = _mm256_loadu_si256(
                        (const __m256i *)(const void *)(w->qq + (size_t)r * d + b * SDPA_QK));
                    const __m256i p = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(ak, _mm256_sign_epi8(q8, k8)), _mm256_set1_epi16(1));
                    __m256 t = _mm256_mul_ps(
                        _mm256_cvtepi32_ps(p),
                        _mm256_mul_ps(dk, _mm256_loadu_ps(qz + (size_t)r * zr + b / 2 * 16)));
                    if (sdpa_dtype_has_min(kt))
                        t = _mm256_fmadd_ps(mk, _mm256_loadu_ps(qm + (size_t)r * zr + b / 2 * 16),
                                            t);
                    a[PERM16(r * NK + i)] =
                        _mm512_add_ps(a[PERM16(r * NK + i)], _mm512_zextps256_ps512(t));
                }
            }
        store_tile16(R, NK, reduce16(a), n, S, lds, j);
    }
}

/* acc[r][c0, c0 + 32 NB) = al[r] acc + sum_j P[r][j] v_j over keys [0, n) (rows rv[j], every
   row sees them): NB blocks of a quantized V (R NB <= 8), two vectors per row and block, each
   key's weights broadcast once for its NB blocks. */
SDPA_INLINE void qd_pv_block_z(int R, int NB, sdpa_dtype vt, float *acc, size_t dv, const float *al,
                               const float *P, size_t lds, const unsigned char *const *rv, size_t n,
                               size_t c0)
{
    __m512 a[16];
    SDPA_UNROLL for (int r = 0; r < R; r++)
    {
        const __m512 s = _mm512_set1_ps(al[r]);
        SDPA_UNROLL for (int h = 0; h < 2 * NB; h++) a[2 * NB * r + h] =
            _mm512_mul_ps(s, _mm512_loadu_ps(acc + (size_t)r * dv + c0 + 16 * (size_t)h));
    }
    const size_t bo = (size_t)sdpa_off_bytes(vt, (ptrdiff_t)c0), bb = sdpa_block_bytes(vt);
    for (size_t j = 0; j < n; j++) {
        __m512 x[4];
        SDPA_UNROLL for (int e = 0; e < NB; e++)
        {
            const qd_blk16 vb = qd_block16(vt, rv[j] + bo + (size_t)e * bb);
            x[2 * e] = qd_get16(vt, &vb, 0);
            x[2 * e + 1] = qd_get16(vt, &vb, 1);
        }
        SDPA_UNROLL for (int r = 0; r < R; r++)
        {
            const __m512 p = _mm512_set1_ps(P[(size_t)r * lds + j]);
            SDPA_UNROLL for (int h = 0; h < 2 * NB; h++) a[2 * NB * r + h] =
                _mm512_fmadd_ps(p, x[h], a[2 * NB * r + h]);
        }
    }
    SDPA_UNROLL for (int r = 0; r < R; r++) SDPA_UNROLL for (int h = 0; h < 2 * NB; h++)
        _mm512_storeu_ps(acc + (size_t)r * dv + c0 + 16 * (size_t)h, a[2 * NB * r + h]);
}
#endif

/* Keys [j0, j0 + nb) for all R rows, tiles of NK = 8 / R keys (R * NK <= 8: one reduction). */
SDPA_INLINE void qd_scores_r(int R, sdpa_dtype kt, const sdpa_rows *w, const uint8_t *qu,
                             const float *qz, const float *qm, size_t j0, size_t nb, float *S,
                             size_t lds)
{
    const int NK = R == 1 ? 8 : R == 2 ? 4 : R <= 4 ? 2 : 1;
#ifdef __AVX512F__
    if (sdpa_dtype_quantized(kt)) {
        if (w->qq)
            qd_scores_fast_z(R, kt, w, qu, qz, qm, j0, nb, S, lds);
        else
            qd_scores_z(R, kt, w, j0, nb, S, lds);
        return;
    }
#else
    (void)qz;
#endif
    for (size_t j = 0; j < nb; j += (size_t)NK) {
        const unsigned char *kr[8];
        const size_t n = qd_tile_keys(NK, kt, w, j0, j, nb, kr);
        const __m256 v = w->qq && sdpa_dtype_quantized(kt) /* fast scores: K in a block format */
                             ? qd_score_tile_i8(R, NK, kt, w->qq, qu, w->qd, qm, w->d, kr)
                             : qd_score_tile(R, NK, kt, w->q, w->d, kr);
        qd_tile_store(R, NK, v, n, S, lds, j);
    }
}

/* acc[r][c0, c0 + 8 NC) = al[r] acc + sum_j P[r][j] v_j over keys [0, n) of rows rv[j] (all R
   rows see them), NC 8-column vectors of an element-type V (f32, f16, bf16; cut at dv). */
SDPA_INLINE void qd_pv_panel(int R, int NC, sdpa_dtype vt, float *acc, size_t dv, const float *al,
                             const float *P, size_t lds, const unsigned char *const *rv, size_t n,
                             size_t c0)
{
    __m256 a[16];
    const size_t left = dv - c0;
    SDPA_UNROLL for (int r = 0; r < R; r++)
    {
        const __m256 s = _mm256_broadcast_ss(al + r);
        SDPA_UNROLL for (int t = 0; t < NC; t++)
        {
            const size_t cnt = left - 8 * (size_t)t < 8 ? left - 8 * (size_t)t : 8;
            const __m256 o = qd_load_float(SDPA_F32, acc + (size_t)r * dv, c0 + 8 * (size_t)t, cnt);
            a[r * NC + t] = _mm256_mul_ps(s, o);
        }
    }
    for (size_t j = 0; j < n; j++) {
        __m256 x[4];
        SDPA_UNROLL for (int t = 0; t < NC; t++)
        {
            const size_t cnt = left - 8 * (size_t)t < 8 ? left - 8 * (size_t)t : 8;
            x[t] = qd_load_float(vt, rv[j], c0 + 8 * (size_t)t, cnt);
        }
        SDPA_UNROLL for (int r = 0; r < R; r++)
        {
            const __m256 p = _mm256_broadcast_ss(P + (size_t)r * lds + j);
            SDPA_UNROLL for (int t = 0; t < NC; t++) a[r * NC + t] =
                _mm256_fmadd_ps(p, x[t], a[r * NC + t]);
        }
    }
    SDPA_UNROLL for (int r = 0; r < R; r++) SDPA_UNROLL for (int t = 0; t < NC; t++)
    {
        const size_t c = c0 + 8 * (size_t)t;
        if (left >= 8 * (size_t)t + 8) {
            _mm256_storeu_ps(acc + (size_t)r * dv + c, a[r * NC + t]);
        } else {
            float tmp[8];
            _mm256_storeu_ps(tmp, a[r * NC + t]);
            memcpy(acc + (size_t)r * dv + c, tmp, (left - 8 * (size_t)t) * sizeof *tmp);
        }
    }
}

/* A V block's scale, minimum and quants as the first panel over it made them (qd_scales8,
   qd_prepare), for the block's later panels to reuse rather than redo. */
typedef struct qd_stash {
    __m256 d, c;
    __m128i lo, hi;
} qd_stash;

/* The same for a quantized V whose dv is a multiple of 32: whole vectors, no element type. The
   panels over one 32-column block share each key's decoded block through st[j]: ST 1 writes it
   (the first panel), ST 2 reads it (the others), ST 0 neither (a panel over the whole block). */
SDPA_INLINE void qd_pv_panel_q(int R, int NC, int T0, int ST, sdpa_dtype vt, float *acc, size_t dv,
                               const float *al, const float *P, size_t lds,
                               const unsigned char *const *rv, size_t n, size_t c0, qd_stash *st)
{
    __m256 a[16];
    SDPA_UNROLL for (int r = 0; r < R; r++)
    {
        const __m256 s = _mm256_broadcast_ss(al + r);
        SDPA_UNROLL for (int t = 0; t < NC; t++) a[r * NC + t] =
            _mm256_mul_ps(s, _mm256_loadu_ps(acc + (size_t)r * dv + c0 + 8 * (size_t)t));
    }
    const size_t bo = (size_t)sdpa_off_bytes(vt, (ptrdiff_t)(c0 / SDPA_QK * SDPA_QK));
    for (size_t j = 0; j < n; j++) {
        const unsigned char *b = rv[j] + bo;
        __m256 dv8, cv8;
        qd_src src;
        if (ST == 2) {
            dv8 = st[j].d, cv8 = st[j].c;
            src.b = b, src.lo = st[j].lo, src.hi = st[j].hi;
        } else {
            qd_scales8(vt, b, &dv8, &cv8);
            src = qd_prepare(vt, b);
            if (ST == 1) st[j].d = dv8, st[j].c = cv8, st[j].lo = src.lo, st[j].hi = src.hi;
        }
        __m256 x[4];
        SDPA_UNROLL for (int t = 0; t < NC; t++) x[t] = qd_x8(vt, &src, T0 + t, dv8, cv8);
        SDPA_UNROLL for (int r = 0; r < R; r++)
        {
            const __m256 p = _mm256_broadcast_ss(P + (size_t)r * lds + j);
            SDPA_UNROLL for (int t = 0; t < NC; t++) a[r * NC + t] =
                _mm256_fmadd_ps(p, x[t], a[r * NC + t]);
        }
    }
    SDPA_UNROLL for (int r = 0; r < R; r++) SDPA_UNROLL for (int t = 0; t < NC; t++)
        _mm256_storeu_ps(acc + (size_t)r * dv + c0 + 8 * (size_t)t, a[r * NC + t]);
}

/* Rows [0, R) over keys [0, n) from key j0 (every row sees them), in sub-blocks of
   DECODE_Q_PV_KB keys whose V rows stay in L1 over the column passes; alpha applied by the
   first sub-block only. */
SDPA_INLINE void qd_values_r(int R, sdpa_dtype vt, const sdpa_rows *w, float *acc,
                             const float *alpha, const float *P, size_t lds, size_t j0, size_t n,
                             size_t kend)
{
    static const float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    const size_t dv = w->dv;
    const unsigned char *rv[DECODE_Q_PV_KB];
    const size_t pf = w->pages ? DECODE_Q_PF_PAGED : DECODE_Q_PF_KEYS;
    for (size_t g = 0; g < n; g += DECODE_Q_PV_KB) {
        const size_t ng = n - g < DECODE_Q_PV_KB ? n - g : DECODE_Q_PV_KB;
        for (size_t j = 0; j < ng; j++) {
            rv[j] = qd_key_row(w, 1, vt, j0 + g + j);
            if (j0 + g + j + pf < kend)
                qd_request_row(qd_key_row(w, 1, vt, j0 + g + j + pf), vt, dv);
        }
        const float *al = g == 0 ? alpha : ones;
        if (sdpa_dtype_quantized(vt)) {
#ifdef __AVX512F__
            /* two blocks a pass with at most 4 rows (16 accumulators), else one */
            size_t c = 0;
            if (R <= 4)
                for (; c + 64 <= dv; c += 64)
                    qd_pv_block_z(R, 2, vt, acc, dv, al, P + g, lds, rv, ng, c);
            for (; c < dv; c += 32) qd_pv_block_z(R, 1, vt, acc, dv, al, P + g, lds, rv, ng, c);
            continue;
#endif
            qd_stash st[DECODE_Q_PV_KB];
            if (R <= 2)
                for (size_t c = 0; c < dv; c += 32)
                    qd_pv_panel_q(R, 4, 0, 0, vt, acc, dv, al, P + g, lds, rv, ng, c, st);
            else if (R <= 4)
                for (size_t c = 0; c < dv; c += 32) {
                    qd_pv_panel_q(R, 2, 0, 1, vt, acc, dv, al, P + g, lds, rv, ng, c, st);
                    qd_pv_panel_q(R, 2, 2, 2, vt, acc, dv, al, P + g, lds, rv, ng, c + 16, st);
                }
            else
                for (size_t c = 0; c < dv; c += 32) {
                    qd_pv_panel_q(R, 1, 0, 1, vt, acc, dv, al, P + g, lds, rv, ng, c, st);
                    qd_pv_panel_q(R, 1, 1, 2, vt, acc, dv, al, P + g, lds, rv, ng, c + 8, st);
                    qd_pv_panel_q(R, 1, 2, 2, vt, acc, dv, al, P + g, lds, rv, ng, c + 16, st);
                    qd_pv_panel_q(R, 1, 3, 2, vt, acc, dv, al, P + g, lds, rv, ng, c + 24, st);
                }
            continue;
        }
        /* an element-type V beside a quantized K: 16 columns per pass with at most 4 rows, 8
           beyond, so that the accumulators stay in registers */
        size_t c = 0;
        if (R <= 4)
            for (; c + 16 <= dv; c += 16) qd_pv_panel(R, 2, vt, acc, dv, al, P + g, lds, rv, ng, c);
        for (; c < dv; c += 8) qd_pv_panel(R, 1, vt, acc, dv, al, P + g, lds, rv, ng, c);
    }
}

#endif /* SDPA_DECODE_Q_TILES_H */
