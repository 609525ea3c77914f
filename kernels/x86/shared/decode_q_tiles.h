/* decode_q_tiles.h -- the score tiles and P·V panels of decode_q.h, for K or V in a block format */
/*
 * Exact scores convert each K block once, in registers, for every row; fast scores turn a tile of
 * keys so that each key's block lies in one lane, and take the exact int32 dot products of a
 * query block's quants with all the tile's keys at once, scaled by qd * d_k in f32, plus
 * qd * m_k * sum(query quants) for q4_1 and q5_1. P·V converts each V block once for every
 * row. DECODE_Q_PF_KEYS (keys ahead whose rows are requested), DECODE_Q_PV_KB (keys per P·V
 * sub-block) and SDPA_QD_VNNI must be defined.
 */
#ifndef SDPA_DECODE_Q_TILES_H
#define SDPA_DECODE_Q_TILES_H

#include "decode_q_format.h"

/* The scratch of decode_q.h for R rows, in floats (each part a multiple of 16): S
   [R][DECODE_Q_BLOCK], alpha [R], then the fast scores' qo and qm ([R][d / 32] each, made by
   loop_begin). */
#define QD_WS_FLOATS(R, d)                                                                         \
    ((R)*sdpa_round16(DECODE_Q_BLOCK) + sdpa_round16(R) + 2 * sdpa_round16((R) * ((d) / 32)))

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

/* Fast scores of R rows against NK keys of q8_0 or iq4_nl on AVX2, a block's elements in lanes:
   per block, |k| against the row's quants carrying k's sign (pmaddubsw, exact), converted and
   scaled by qd * d_k. With the keys in lanes (qd_scores_fast_y) these formats would pay the sign
   per row and key group, which measured slower. */
SDPA_INLINE __m256 qd_score_tile_i8(int R, int NK, sdpa_dtype kt, const int8_t *qq,
                                    const float *qdv, size_t d, const unsigned char *const *kr)
{
    __m256 a[8];
    SDPA_UNROLL for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
    const size_t bb = sdpa_block_bytes(kt), nbk = d / SDPA_QK;
    for (size_t b = 0; b < nbk; b++) {
        SDPA_UNROLL for (int i = 0; i < NK; i++)
        {
            const unsigned char *kb = kr[i] + b * bb;
            const __m256 dk = qd_f16x8(kb);
            const __m256i k8 = qd_quants32(kt, kb), ak = _mm256_sign_epi8(k8, k8);
            SDPA_UNROLL for (int r = 0; r < R; r++)
            {
                const __m256i q8 = _mm256_loadu_si256(
                    (const __m256i *)(const void *)(qq + (size_t)r * d + b * SDPA_QK));
                const __m256i p = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(ak, _mm256_sign_epi8(q8, k8)), _mm256_set1_epi16(1));
                const __m256 sc = _mm256_mul_ps(dk, _mm256_broadcast_ss(qdv + (size_t)r * nbk + b));
                a[r * NK + i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, a[r * NK + i]);
            }
        }
    }
    return qd_reduce8(a);
}

/* How many keys ahead the tiles request rows: DECODE_Q_PF_PAGED on a paged unit (short pages,
   a whole block through them) and on a long page's piece (each page a new stream, on which the
   core's own prefetcher starts late), DECODE_Q_PF_KEYS on contiguous rows. Two knobs, tuned
   apart (equal on the machines measured so far). */
static inline size_t qd_pf_keys(const sdpa_rows *w)
{
    return w->pages || w->piece_of ? DECODE_Q_PF_PAGED : DECODE_Q_PF_KEYS;
}

/* Requests the rows of keys [a, e) past a page's piece's end that lie in its rows ahead
   (sdpa_rows.ahead_row, keys ahead_first on, the array's stride sb apart): the rows a piece
   requests run on into the next page as on contiguous rows, rather than stop at its end. */
SDPA_INLINE void qd_request_ahead(const sdpa_rows *w, ptrdiff_t sb, size_t a, size_t e,
                                  size_t bytes)
{
    const size_t f = w->ahead_first, lo = a > f ? a : f, hi = sdpa_min(e, f + w->ahead_n);
    if (lo < hi)
        qd_request_rows((const unsigned char *)w->ahead_row + (ptrdiff_t)(lo - f) * sb, sb, hi - lo,
                        bytes);
}

/* Requests the rows of keys [a, a + m) of a paged unit's K (v = 0) or V, page by page (pages of a
   power of two keys, qd_key_row). */
SDPA_INLINE void qd_request_paged(const sdpa_rows *w, int v, sdpa_dtype t, size_t a, size_t m,
                                  size_t bytes)
{
    const size_t mask = w->pages->size - 1;
    const ptrdiff_t sb = qd_stride_bytes(w, v, t);
    for (size_t x = a, e = a + m, n; x < e; x += n) {
        n = sdpa_min(e, (x | mask) + 1) - x; /* to x's page end */
        qd_request_rows(qd_key_row(w, v, t, x), sb, n, bytes);
    }
}

/* The rows of a score tile's keys j0 + j + i, i < NK, of the nb from j0 (a tail tile of n < NK
   keys repeats its last, in bounds), and the rows qd_pf_keys keys ahead of its real ones
   requested (none at or past the keys any row sees; past a page's piece's end, its rows ahead).
   With rq (not NULL), rows laid end to end are left in *rq for the tile to take a share at a
   time, the others requested here. Returns n, the tile's real keys. */
SDPA_INLINE size_t qd_tile_keys(int NK, sdpa_dtype kt, const sdpa_rows *w, size_t j0, size_t j,
                                size_t nb, const unsigned char **kr, qd_req *rq)
{
    const size_t n = nb - j < (size_t)NK ? nb - j : (size_t)NK;
    const size_t kend = sdpa_min(w->kv_end, w->kv_limit[w->rows - 1]);
    SDPA_UNROLL for (int i = 0; i < NK; i++) kr[i] =
        qd_key_row(w, 0, kt, j0 + j + ((size_t)i < n ? (size_t)i : n - 1));
    const size_t pf = qd_pf_keys(w);
    const size_t a = j0 + j + pf, m = kend > a ? sdpa_min(n, kend - a) : 0;
    const size_t bytes = (size_t)sdpa_off_bytes(kt, (ptrdiff_t)w->d);
    if (!w->pages && m) { /* requests walked (qd_stride_bytes) */
        const ptrdiff_t sb = qd_stride_bytes(w, 0, kt);
        if (rq && sb == (ptrdiff_t)bytes)
            *rq = qd_req_span((const unsigned char *)w->k + (ptrdiff_t)a * sb, m * bytes);
        else
            qd_request_rows((const unsigned char *)w->k + (ptrdiff_t)a * sb, sb, m, bytes);
    } else if (w->pages)
        qd_request_paged(w, 0, kt, a, m, bytes);
    if (m < n && w->ahead_n) /* a page's piece near its end */
        qd_request_ahead(w, qd_stride_bytes(w, 0, kt), a + m, a + n, bytes);
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

/* Fast scores with the keys in lanes: K is turned once per tile of keys (16 on AVX-512, 8 on
   AVX2) so that byte group c (elements 4c..4c+3) of key l's block sits in lane l of vector c,
   and each row's four query bytes of a group, broadcast, meet all the tile's keys in one int8
   dot product. A block then costs a row 8 dot products and one scaling for the tile, where the
   layout with a block's elements in lanes paid a conversion and scaling per key. The key bytes
   are unsigned, k + qd_fast_off (or |k| for q8_0 and iq4_nl without VNNI, whose pair sums would
   overflow pmaddubsw's int16); the row's -qd_fast_off sum(q) of the block (qo, made by
   loop_begin) starts each int32 sum, so the dot product is exact. */

/* The offset that makes a format's key bytes unsigned: q8_0 and iq4_nl 128 (with VNNI; without,
   0 and |k|), q4_0 8 and q5_0 16 (their n), q4_1 and q5_1 0 (n already). */
SDPA_INLINE int qd_fast_off(sdpa_dtype kt)
{
    if (kt == SDPA_Q8_0 || kt == SDPA_IQ4_NL) return SDPA_QD_VNNI ? 128 : 0;
    return kt == SDPA_Q4_0 ? 8 : kt == SDPA_Q5_0 ? 16 : 0;
}

/* A 4x4 transpose of dwords within each 128-bit lane of four vectors (P the intrinsics' prefix,
   _mm256 or _mm512; V their type): dword c of zi goes to dword i of o[c]. */
#define QD_T4X4(P, V, z0, z1, z2, z3, o)                                                           \
    do {                                                                                           \
        const V t0_ = P##_unpacklo_epi32(z0, z1), t1_ = P##_unpackhi_epi32(z0, z1);                \
        const V t2_ = P##_unpacklo_epi32(z2, z3), t3_ = P##_unpackhi_epi32(z2, z3);                \
        (o)[0] = P##_unpacklo_epi64(t0_, t2_);                                                     \
        (o)[1] = P##_unpackhi_epi64(t0_, t2_);                                                     \
        (o)[2] = P##_unpacklo_epi64(t1_, t3_);                                                     \
        (o)[3] = P##_unpackhi_epi64(t1_, t3_);                                                     \
    } while (0)

/* Byte group c (c < 8) of the 8 rows y[l] in lane l of t[c]: a 4x4 transpose of dwords within
   128-bit lanes, then the lanes exchanged. */
SDPA_INLINE void qd_transpose8x8(const __m256i *y, __m256i *t)
{
    __m256i a[8];
    SDPA_UNROLL for (int g = 0; g < 8; g += 4)
        QD_T4X4(_mm256, __m256i, y[g], y[g + 1], y[g + 2], y[g + 3], a + g);
    /* a[k]: keys 0-3 group k, keys 0-3 group 4+k; a[4+k] the same for keys 4-7 */
    SDPA_UNROLL for (int k = 0; k < 4; k++)
    {
        t[k] = _mm256_permute2x128_si256(a[k], a[4 + k], 0x20);
        t[4 + k] = _mm256_permute2x128_si256(a[k], a[4 + k], 0x31);
    }
}

/* The 16 bytes at x[l] + o of 8 keys in lane l of t[c], byte group c (c < 4). */
SDPA_INLINE void qd_transpose8x4(const unsigned char *const *x, size_t o, __m256i *t)
{
    __m256i z[4];
    SDPA_UNROLL for (int i = 0; i < 4; i++) z[i] = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(x[i] + o))),
        _mm_loadu_si128((const __m128i *)(const void *)(x[4 + i] + o)), 1);
    QD_T4X4(_mm256, __m256i, z[0], z[1], z[2], z[3], t);
}

/* Block b of 8 keys (rows x[l], the block at o) of q4_0, q4_1, q5_0 or q5_1 as the fast scores'
   key bytes, n, byte group c in t[c]. */
SDPA_INLINE void qd_keys_fast_y(sdpa_dtype kt, const unsigned char *const *x, size_t o, __m256i *t)
{
    const __m256i m = _mm256_set1_epi8(15);
    if (kt == SDPA_Q4_0 || kt == SDPA_Q4_1) {
        __m256i n[4];
        qd_transpose8x4(x, o + (kt == SDPA_Q4_1 ? 4 : 2), n);
        SDPA_UNROLL for (int c = 0; c < 4; c++)
        { /* byte i holds element i (low nibble) and 16 + i (high) */
            t[c] = _mm256_and_si256(n[c], m);
            t[4 + c] = _mm256_and_si256(_mm256_srli_epi16(n[c], 4), m);
        }
        return;
    }
    __m256i y[8];
    SDPA_UNROLL for (int l = 0; l < 8; l++) y[l] = qd_quants32_n5(kt, x[l] + o);
    qd_transpose8x8(y, t);
}

/* Fast scores of R rows against keys [j0, j0 + nb) of q4_0, q4_1, q5_0 or q5_1, tiles of 8 keys,
   row r's scores of a tile in one vector (qd_scores_fast_z's arithmetic without VNNI over 8
   lanes, pmaddubsw's int16 sums as there). */
SDPA_INLINE void qd_scores_fast_y(int R, sdpa_dtype kt, const sdpa_rows *w, const int32_t *qo,
                                  const float *qm, size_t j0, size_t nb, float *S, size_t lds)
{
    const size_t d = w->d, bb = sdpa_block_bytes(kt), nbk = d / SDPA_QK;
    const int off = qd_fast_off(kt), G = kt == SDPA_Q5_0 || kt == SDPA_Q5_1 ? 4 : 8;
    for (size_t j = 0; j < nb; j += 8) {
        const unsigned char *kr[8];
        const size_t n = qd_tile_keys(8, kt, w, j0, j, nb, kr, NULL);
        __m256 a[8];
        SDPA_UNROLL for (int r = 0; r < R; r++) a[r] = _mm256_setzero_ps();
        for (size_t b = 0; b < nbk; b++) {
            __m256i t[8];
            qd_keys_fast_y(kt, kr, b * bb, t);
            const size_t o = b * bb;
#define QD_H(l) qd_f16_bits(kr[l] + o)
            const __m256 dk = _mm256_cvtph_ps(_mm_setr_epi16(QD_H(0), QD_H(1), QD_H(2), QD_H(3),
                                                             QD_H(4), QD_H(5), QD_H(6), QD_H(7)));
#undef QD_H
#define QD_M(l) qd_f16_bits(kr[l] + o + 2)
            const __m256 mk =
                sdpa_dtype_has_min(kt)
                    ? _mm256_cvtph_ps(_mm_setr_epi16(QD_M(0), QD_M(1), QD_M(2), QD_M(3), QD_M(4),
                                                     QD_M(5), QD_M(6), QD_M(7)))
                    : dk;
#undef QD_M
            SDPA_UNROLL for (int r = 0; r < R; r++)
            {
                const int8_t *q = w->qq + (size_t)r * d + b * SDPA_QK;
                __m256i s0 =
                    off ? _mm256_set1_epi32(qo[(size_t)r * nbk + b]) : _mm256_setzero_si256();
                SDPA_UNROLL for (int c0 = 0; c0 < 8; c0 += G)
                {
                    __m256i h = _mm256_setzero_si256();
                    SDPA_UNROLL for (int c = c0; c < c0 + G; c++)
                    {
                        int32_t qc;
                        memcpy(&qc, q + 4 * c, 4);
                        h = _mm256_add_epi16(h, _mm256_maddubs_epi16(t[c], _mm256_set1_epi32(qc)));
                    }
                    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(h, _mm256_set1_epi16(1)));
                }
                const __m256 sc = _mm256_mul_ps(dk, _mm256_set1_ps(w->qd[(size_t)r * nbk + b]));
                a[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), sc, a[r]);
                if (sdpa_dtype_has_min(kt))
                    a[r] = _mm256_fmadd_ps(mk, _mm256_set1_ps(qm[(size_t)r * nbk + b]), a[r]);
            }
        }
        SDPA_UNROLL for (int r = 0; r < R; r++)
        {
            float *p = S + (size_t)r * lds + j;
            if (n == 8) {
                _mm256_storeu_ps(p, a[r]);
            } else {
                float out[8];
                _mm256_storeu_ps(out, a[r]);
                memcpy(p, out, n * sizeof *out);
            }
        }
    }
}

#ifdef __AVX512F__
/* --- 512-bit forms (the avx512 files): a block is two vectors ----------------------------- */

/* Exact scores of R rows (the tile shaped for RP in {1, 2, 4, 8} rows; the padding rows' lanes
   take no arithmetic and stay 0, never stored) against keys [j0, j0 + nb) of a quantized K of
   head dim d, tiles of NK = 16 / RP keys: 16 accumulators that one shuffle tree (reduce16,
   PERM16) reduces to row r's score of key i in lane r NK + i, a sum of accumulator r NK + i's
   lanes alone. */
SDPA_INLINE void qd_scores_z(int R, sdpa_dtype kt, size_t d, const sdpa_rows *w, size_t j0,
                             size_t nb, float *S, size_t lds)
{
    const int RP = R == 1 ? 1 : R == 2 ? 2 : R <= 4 ? 4 : 8, NK = 16 / RP;
    const size_t bb = sdpa_block_bytes(kt);
    const float *qr[8];
    for (int r = 0; r < R; r++) qr[r] = w->q + (size_t)r * d;
    for (size_t j = 0; j < nb; j += (size_t)NK) {
        const unsigned char *kr[16];
        qd_req rq = qd_req_empty();
        const size_t n = qd_tile_keys(NK, kt, w, j0, j, nb, kr, &rq);
        const size_t steps = (size_t)NK * (d / SDPA_QK);
        const int rate = (int)((qd_req_left(&rq) + steps - 1) / steps);
        __m512 a[16];
        SDPA_UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
        for (size_t b = 0; b < d / SDPA_QK; b++) {
            SDPA_UNROLL for (int i = 0; i < NK; i++)
            {
                qd_req_take(&rq, rate);
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
        qd_req_take(&rq, (int)qd_req_left(&rq));
        store_tile16(R, NK, reduce16(a), n, S, lds, j);
    }
}

/* Byte group c (c < 8) of the 16 rows y[l] in lane l of t[c]: two 4x4 transposes of dwords
   within 128-bit lanes, then the lanes gathered in key order. */
SDPA_INLINE void qd_transpose16x8(const __m256i *y, __m512i *t)
{
    __m512i z[8], a[8];
    SDPA_UNROLL for (int i = 0; i < 4; i++)
    {
        z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(y[i]), y[4 + i], 1);
        z[4 + i] = _mm512_inserti64x4(_mm512_castsi256_si512(y[8 + i]), y[12 + i], 1);
    }
    SDPA_UNROLL for (int g = 0; g < 8; g += 4)
        QD_T4X4(_mm512, __m512i, z[g], z[g + 1], z[g + 2], z[g + 3], a + g);
    /* a[k] lanes: keys 0-3 group k, keys 0-3 group 4+k, keys 4-7 group k, keys 4-7 group 4+k;
       a[4+k] the same for keys 8-15 */
    SDPA_UNROLL for (int k = 0; k < 4; k++)
    {
        t[k] = _mm512_shuffle_i32x4(a[k], a[4 + k], 0x88);
        t[4 + k] = _mm512_shuffle_i32x4(a[k], a[4 + k], 0xDD);
    }
}

/* The 16 bytes at x[l] + o in lane l of t[c], byte group c (c < 4). */
SDPA_INLINE void qd_transpose16x4(const unsigned char *const *x, size_t o, __m512i *t)
{
    __m512i z[4];
    SDPA_UNROLL for (int i = 0; i < 4; i++)
    {
#define QD_X128(l) _mm_loadu_si128((const __m128i *)(const void *)(x[l] + o))
        const __m256i lo =
            _mm256_inserti128_si256(_mm256_castsi128_si256(QD_X128(i)), QD_X128(4 + i), 1);
        const __m256i hi =
            _mm256_inserti128_si256(_mm256_castsi128_si256(QD_X128(8 + i)), QD_X128(12 + i), 1);
#undef QD_X128
        z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    QD_T4X4(_mm512, __m512i, z[0], z[1], z[2], z[3], t);
}

/* The dword at x[l] + o of 16 keys, lane l (a block's d, and m at o + 2 for q4_1 and q5_1). */
SDPA_INLINE __m512i qd_dword_keys(const unsigned char *const *x, size_t o)
{
#define QD_W(l) (int)qd_u32(x[l] + o)
    return _mm512_setr_epi32(QD_W(0), QD_W(1), QD_W(2), QD_W(3), QD_W(4), QD_W(5), QD_W(6), QD_W(7),
                             QD_W(8), QD_W(9), QD_W(10), QD_W(11), QD_W(12), QD_W(13), QD_W(14),
                             QD_W(15));
#undef QD_W
}

/* Signed key bytes k of q8_0 or iq4_nl as the fast scores' unsigned ones: k + 128 with VNNI;
   without, |k|, and k's signs in *neg. */
SDPA_INLINE __m512i qd_keys_unsigned(__m512i k, __mmask64 *neg)
{
#if SDPA_QD_VNNI
    (void)neg;
    return _mm512_xor_si512(k, _mm512_set1_epi8((char)0x80));
#else
    *neg = _mm512_movepi8_mask(k);
    return _mm512_abs_epi8(k);
#endif
}

/* Block b of 16 keys (rows x[l]) as the fast scores' key bytes, byte group c in t[c]; neg[c] the
   signs of k where the bytes are |k| (q8_0 and iq4_nl without VNNI). */
SDPA_INLINE void qd_keys_fast(sdpa_dtype kt, const unsigned char *const *x, size_t o, __m512i *t,
                              __mmask64 *neg)
{
    const __m512i m = _mm512_set1_epi8(15);
    if (kt == SDPA_Q4_0 || kt == SDPA_Q4_1 || kt == SDPA_IQ4_NL) {
        __m512i n[4];
        qd_transpose16x4(x, o + (kt == SDPA_Q4_1 ? 4 : 2), n);
        SDPA_UNROLL for (int c = 0; c < 4; c++)
        { /* byte i holds element i (low nibble) and 16 + i (high) */
            t[c] = _mm512_and_si512(n[c], m);
            t[4 + c] = _mm512_and_si512(_mm512_srli_epi16(n[c], 4), m);
        }
        if (kt == SDPA_IQ4_NL) {
            const __m512i v = _mm512_broadcast_i32x4(
                _mm_loadu_si128((const __m128i *)(const void *)sdpa_iq4nl_values));
            SDPA_UNROLL for (int c = 0; c < 8; c++) t[c] =
                qd_keys_unsigned(_mm512_shuffle_epi8(v, t[c]), &neg[c]);
        }
        return;
    }
    __m256i y[16];
    if (kt == SDPA_Q8_0) {
        SDPA_UNROLL for (int l = 0; l < 16; l++) y[l] =
            _mm256_loadu_si256((const __m256i *)(const void *)(x[l] + o + 2));
    } else {
        SDPA_UNROLL for (int l = 0; l < 16; l++) y[l] = qd_quants32_n5(kt, x[l] + o);
    }
    qd_transpose16x8(y, t);
    if (kt == SDPA_Q8_0)
        SDPA_UNROLL for (int c = 0; c < 8; c++) t[c] = qd_keys_unsigned(t[c], &neg[c]);
}

/* Fast scores of R rows against keys [j0, j0 + nb), tiles of 16 keys, row r's scores of a tile
   in one vector: per block, the exact int32 dot products of the row's quants (w->qq) with the
   16 keys' from qo[r][b] (-qd_fast_off sum(q)), scaled by the key's d times the row's qd, plus for
   q4_1 and q5_1 the key's m times qm[r][b] (qd sum(q)). Without VNNI, pmaddubsw's int16 pair
   sums are added in int16 over 8 groups for 4-bit keys (8 x 2 x 15 x 128 < 2^15), 4 for 5-bit
   ones, 1 for |k|. */
SDPA_INLINE void qd_scores_fast_z(int R, sdpa_dtype kt, const sdpa_rows *w, const int32_t *qo,
                                  const float *qm, size_t j0, size_t nb, float *S, size_t lds)
{
    const size_t d = w->d, bb = sdpa_block_bytes(kt), nbk = d / SDPA_QK;
    const int off = qd_fast_off(kt);
#if !SDPA_QD_VNNI
    const int G = off == 0 && (kt == SDPA_Q8_0 || kt == SDPA_IQ4_NL) ? 1
                  : kt == SDPA_Q5_0 || kt == SDPA_Q5_1               ? 4
                                                                     : 8;
#endif
    for (size_t j = 0; j < nb; j += 16) {
        const unsigned char *kr[16];
        qd_req rq = qd_req_empty();
        const size_t n = qd_tile_keys(16, kt, w, j0, j, nb, kr, &rq);
        const int rate = (int)((qd_req_left(&rq) + (size_t)R * nbk - 1) / ((size_t)R * nbk));
        __m512 a[8];
        SDPA_UNROLL for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
        for (size_t b = 0; b < nbk; b++) {
            __m512i t[8];
            __mmask64 neg[8];
            qd_keys_fast(kt, kr, b * bb, t, neg);
            const __m512i dm = qd_dword_keys(kr, b * bb);
            const __m512 dk = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
            const __m512 mk =
                sdpa_dtype_has_min(kt)
                    ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)))
                    : dk;
            SDPA_UNROLL for (int r = 0; r < R; r++)
            {
                qd_req_take(&rq, rate);
                const int8_t *q = w->qq + (size_t)r * d + b * SDPA_QK;
                __m512i s0 =
                    off ? _mm512_set1_epi32(qo[(size_t)r * nbk + b]) : _mm512_setzero_si512();
#if SDPA_QD_VNNI
                /* two chains of 4 dot products: half the latency */
                __m512i s1 = _mm512_setzero_si512();
                SDPA_UNROLL for (int c = 0; c < 8; c += 2)
                {
                    int32_t q0, q1;
                    memcpy(&q0, q + 4 * c, 4);
                    memcpy(&q1, q + 4 * c + 4, 4);
                    s0 = _mm512_dpbusd_epi32(s0, t[c], _mm512_set1_epi32(q0));
                    s1 = _mm512_dpbusd_epi32(s1, t[c + 1], _mm512_set1_epi32(q1));
                }
                s0 = _mm512_add_epi32(s0, s1);
#else
                const __m512i one = _mm512_set1_epi16(1);
                SDPA_UNROLL for (int c0 = 0; c0 < 8; c0 += G)
                {
                    __m512i h = _mm512_setzero_si512();
                    SDPA_UNROLL for (int c = c0; c < c0 + G; c++)
                    {
                        int32_t qc;
                        memcpy(&qc, q + 4 * c, 4);
                        __m512i qv = _mm512_set1_epi32(qc);
                        if (G == 1)
                            qv = _mm512_mask_sub_epi8(qv, neg[c], _mm512_setzero_si512(), qv);
                        h = _mm512_add_epi16(h, _mm512_maddubs_epi16(t[c], qv));
                    }
                    s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(h, one));
                }
#endif
                const __m512 sc = _mm512_mul_ps(dk, _mm512_set1_ps(w->qd[(size_t)r * nbk + b]));
                a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), sc, a[r]);
                if (sdpa_dtype_has_min(kt))
                    a[r] = _mm512_fmadd_ps(mk, _mm512_set1_ps(qm[(size_t)r * nbk + b]), a[r]);
            }
        }
        qd_req_take(&rq, (int)qd_req_left(&rq));
        const __mmask16 live = (__mmask16)((1u << n) - 1);
        SDPA_UNROLL for (int r = 0; r < R; r++)
            _mm512_mask_storeu_ps(S + (size_t)r * lds + j, live, a[r]);
    }
}

/* acc[r][c0, c0 + 32 NB) = al[r] acc + sum_j P[r][j] v_j over keys [0, n) (rows rv[j], every
   row sees them): NB blocks of a quantized V (R NB <= 8), two vectors per row and block, each
   key's weights broadcast once for its NB blocks; rate lines of rq requested per key. */
SDPA_INLINE void qd_pv_block_z(int R, int NB, sdpa_dtype vt, float *acc, size_t dv, const float *al,
                               const float *P, size_t lds, const unsigned char *const *rv, size_t n,
                               size_t c0, qd_req *rq, int rate)
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
        qd_req_take(rq, rate);
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

/* Keys [j0, j0 + nb) for all R rows: fast scores by qd_scores_fast_*; the rest in tiles of NK =
   8 / R keys (R * NK <= 8: one reduction), or qd_scores_z's on AVX-512. */
SDPA_INLINE void qd_scores_r(int R, sdpa_dtype kt, const sdpa_rows *w, const int32_t *qo,
                             const float *qm, size_t j0, size_t nb, float *S, size_t lds)
{
    const int NK = R == 1 ? 8 : R == 2 ? 4 : R <= 4 ? 2 : 1;
    if (w->qq && sdpa_dtype_quantized(kt)) {
#ifdef __AVX512F__
        qd_scores_fast_z(R, kt, w, qo, qm, j0, nb, S, lds);
        return;
#else
        if (kt != SDPA_Q8_0 && kt != SDPA_IQ4_NL) {
            qd_scores_fast_y(R, kt, w, qo, qm, j0, nb, S, lds);
            return;
        }
#endif
    }
#ifdef __AVX512F__
    if (sdpa_dtype_quantized(kt)) {
        /* a head dim of 128, the most common, as a constant: a key row's four blocks unroll and
           the query rows' vectors sit at constant offsets, so the loop no longer holds a trip
           count and a pointer per row in registers its accumulators need (only this tile was
           short of them) */
        if (w->d == 128)
            qd_scores_z(R, kt, 128, w, j0, nb, S, lds);
        else
            qd_scores_z(R, kt, w->d, w, j0, nb, S, lds);
        return;
    }
#endif
    for (size_t j = 0; j < nb; j += (size_t)NK) {
        const unsigned char *kr[8];
        const size_t n = qd_tile_keys(NK, kt, w, j0, j, nb, kr, NULL);
        const __m256 v = w->qq && sdpa_dtype_quantized(kt) /* q8_0, iq4_nl on AVX2 */
                             ? qd_score_tile_i8(R, NK, kt, w->qq, w->qd, w->d, kr)
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
   (the first panel), ST 2 reads it (the others), ST 0 neither (a panel over the whole block).
   rate lines of rq are requested per key. */
SDPA_INLINE void qd_pv_panel_q(int R, int NC, int T0, int ST, sdpa_dtype vt, float *acc, size_t dv,
                               const float *al, const float *P, size_t lds,
                               const unsigned char *const *rv, size_t n, size_t c0, qd_stash *st,
                               qd_req *rq, int rate)
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
        qd_req_take(rq, rate);
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
    const size_t pf = qd_pf_keys(w);
    const size_t bytes = (size_t)sdpa_off_bytes(vt, (ptrdiff_t)dv);
    for (size_t g = 0; g < n; g += DECODE_Q_PV_KB) {
        const size_t ng = n - g < DECODE_Q_PV_KB ? n - g : DECODE_Q_PV_KB;
        const size_t a = j0 + g + pf, m = kend > a ? sdpa_min(ng, kend - a) : 0;
        /* the next rows laid end to end, requested a share a key by the P·V loops */
        qd_req rq = qd_req_empty();
        if (!w->pages) { /* rows and requests walked (qd_stride_bytes) */
            const ptrdiff_t sb = qd_stride_bytes(w, 1, vt);
            const unsigned char *r = (const unsigned char *)w->v + (ptrdiff_t)(j0 + g) * sb;
            for (size_t j = 0; j < ng; j++) rv[j] = r + (ptrdiff_t)j * sb;
            if (m && sb == (ptrdiff_t)bytes && sdpa_dtype_quantized(vt))
                rq = qd_req_span(r + (ptrdiff_t)pf * sb, m * bytes);
            else if (m)
                qd_request_rows(r + (ptrdiff_t)pf * sb, sb, m, bytes);
            if (m < ng && w->ahead_n) qd_request_ahead(w, sb, a + m, a + ng, bytes);
        } else {
            for (size_t j = 0; j < ng; j++) rv[j] = qd_key_row(w, 1, vt, j0 + g + j);
#ifdef __AVX512F__
            /* rows on at most two pages, each laid end to end: a span each, the first taken by
               the passes over the first half of the columns, the second by the rest */
            const size_t mask = w->pages->size - 1, m1 = sdpa_min(m, mask + 1 - (a & mask));
            if (m && sdpa_dtype_quantized(vt) && qd_stride_bytes(w, 1, vt) == (ptrdiff_t)bytes &&
                m - m1 <= mask + 1) {
                const float *al = g == 0 ? alpha : ones;
                qd_req rh[2] = {qd_req_span(qd_key_row(w, 1, vt, a), m1 * bytes), qd_req_empty()};
                if (m > m1) rh[1] = qd_req_span(qd_key_row(w, 1, vt, a + m1), (m - m1) * bytes);
                const size_t hs = ng * (R <= 4 ? (dv + 127) / 128 : (dv + 63) / 64);
                const int rate[2] = {(int)((qd_req_left(&rh[0]) + hs - 1) / hs),
                                     (int)((qd_req_left(&rh[1]) + hs - 1) / hs)};
                size_t c = 0;
                if (R <= 4)
                    for (; c + 64 <= dv; c += 64)
                        qd_pv_block_z(R, 2, vt, acc, dv, al, P + g, lds, rv, ng, c,
                                      &rh[2 * c >= dv], rate[2 * c >= dv]);
                for (; c < dv; c += 32)
                    qd_pv_block_z(R, 1, vt, acc, dv, al, P + g, lds, rv, ng, c, &rh[2 * c >= dv],
                                  rate[2 * c >= dv]);
                qd_req_take(&rh[0], (int)qd_req_left(&rh[0]));
                qd_req_take(&rh[1], (int)qd_req_left(&rh[1]));
                continue;
            }
#endif
            qd_request_paged(w, 1, vt, a, m, bytes);
        }
        const float *al = g == 0 ? alpha : ones;
        if (sdpa_dtype_quantized(vt)) {
#ifdef __AVX512F__
            /* two blocks a pass with at most 4 rows (16 accumulators), else one */
            size_t c = 0;
            const size_t steps = ng * (R <= 4 ? dv / 64 + (dv % 64 ? 1 : 0) : dv / 32);
            const int rate = (int)((qd_req_left(&rq) + steps - 1) / steps);
            if (R <= 4)
                for (; c + 64 <= dv; c += 64)
                    qd_pv_block_z(R, 2, vt, acc, dv, al, P + g, lds, rv, ng, c, &rq, rate);
            for (; c < dv; c += 32)
                qd_pv_block_z(R, 1, vt, acc, dv, al, P + g, lds, rv, ng, c, &rq, rate);
            qd_req_take(&rq, (int)qd_req_left(&rq));
            continue;
#endif
            qd_stash st[DECODE_Q_PV_KB];
            const size_t psteps = ng * (dv / 32) * (R <= 2 ? 1 : R <= 4 ? 2 : 4);
            const int prate = (int)((qd_req_left(&rq) + psteps - 1) / psteps);
            if (R <= 2)
                for (size_t c = 0; c < dv; c += 32)
                    qd_pv_panel_q(R, 4, 0, 0, vt, acc, dv, al, P + g, lds, rv, ng, c, st, &rq,
                                  prate);
            else if (R <= 4)
                for (size_t c = 0; c < dv; c += 32) {
                    qd_pv_panel_q(R, 2, 0, 1, vt, acc, dv, al, P + g, lds, rv, ng, c, st, &rq,
                                  prate);
                    qd_pv_panel_q(R, 2, 2, 2, vt, acc, dv, al, P + g, lds, rv, ng, c + 16, st, &rq,
                                  prate);
                }
            else
                for (size_t c = 0; c < dv; c += 32) {
                    qd_pv_panel_q(R, 1, 0, 1, vt, acc, dv, al, P + g, lds, rv, ng, c, st, &rq,
                                  prate);
                    qd_pv_panel_q(R, 1, 1, 2, vt, acc, dv, al, P + g, lds, rv, ng, c + 8, st, &rq,
                                  prate);
                    qd_pv_panel_q(R, 1, 2, 2, vt, acc, dv, al, P + g, lds, rv, ng, c + 16, st, &rq,
                                  prate);
                    qd_pv_panel_q(R, 1, 3, 2, vt, acc, dv, al, P + g, lds, rv, ng, c + 24, st, &rq,
                                  prate);
                }
            qd_req_take(&rq, (int)qd_req_left(&rq));
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
