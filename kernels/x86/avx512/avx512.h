/* avx512.h -- what the AVX-512 kernel files share: tuning, lane masks, K/V loads, exp, reductions
 */
#ifndef SDPA_AVX512_H
#define SDPA_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exp_coeffs.h"
#include "kernel_table.h"
#include "kernel_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Tuning (reported through sdpa_kernels.tuning)                                               */
/* ------------------------------------------------------------------------------------------ */

#define DECODE_MAX_ROWS 8        /* more rows than this take the prefill path */
#define PAGED_ROWS      SIZE_MAX /* paged units: all (decode rows_loop.h, prefill block_rows) */
#define QUANT_ROWS      DECODE_MAX_ROWS /* K or V in a block format in place: decode_q.h */
#define DECODE_PF_KEYS                                                                             \
    32 /* prefetch distance: far enough to cover memory latency, near enough for L1 */
#define DECODE_PV_KB 32 /* keys per P·V sub-block: their V rows (a few KB) stay in L1 */
/* keys per turn of decode_values_ilv over contiguous f32 or f16 V (bf16 V and paged units turn
   a sub-block): K and V requests alternate in finer steps, and the rows requested a turn ahead
   take less of L1 */
#define DECODE_ILV_TURN 16
/* most rows per KV head whose decode scores the next block among a block's P·V
   (decode_values_ilv): memory-bound counts, where K and V streaming together pays; with more
   rows the FMAs bind and the turns cost more than they give */
#define DECODE_ILV_ROWS 4
#define DECODE_BLOCK    256 /* keys per decode block */
#define DECODE_BLOCK_FEW                                                                           \
    64 /* keys per block with one or two rows: short phases, both arrays streaming */
#define PREFILL_BLOCK 512 /* keys per prefill block */
#define PREFILL_PANEL 64  /* query rows per Qᵀ panel: 4 vectors, the score tile's rows */
/* the score micro-kernel, transposed (score_avx512_64x6): a panel's query rows, 4 vectors, x 6
   keys each broadcast against them = 24 accumulators */
#define SCORE_MR         PREFILL_PANEL
#define SCORE_NR         6
#define PV_MR            6  /* rows per P·V micro-tile: 6 rows x 4 vectors */
#define PV_NR            64 /* columns per P·V micro-tile */
#define PV_KB            64 /* keys per P·V sub-block: 64 keys x 64 columns of V stay in L1 */
#define PREFILL_PF_LINES 8  /* lines of the hint (sdpa_rows.pf) requested per score tile */
/* the block-format decode path (shared/decode_q.h) */
#define DECODE_Q_BLOCK    256 /* keys per block (at most: the driver's hint rules) */
#define DECODE_Q_PF_KEYS  32  /* prefetch distance of its K and V rows */
#define DECODE_Q_PF_PAGED 32  /* ... on pages (qd_pf_keys) */
#define DECODE_Q_PV_KB    32  /* keys per P·V sub-block: their V rows stay in L1 */

/* Scores of decode row r at S + r * DECODE_LDS: a constant stride, so that the P·V loop reaches
   every row's p through one pointer and constant offsets; 16 floats more than a block, so that
   the rows do not share 4 KiB offsets. */
#define DECODE_LDS (DECODE_BLOCK + 16)

/* Per-call row state: m, l, alpha and the per-block key limit, padded to a multiple of 16. */
static inline size_t state_floats(size_t rows) { return 4 * sdpa_round16(rows); }

/* The two paths (decode.c, prefill.c) and their scratch sizes in floats. */
void sdpa_decode_avx512(const sdpa_rows *w);
/* the decode path for K or V in a block format, and fast scores (kernels/x86/shared/decode_q.h):
   int8 dot products by pmaddubsw, and (vnni.c) by vpdpbusd */
void sdpa_decode_q_avx512(const sdpa_rows *w);
void sdpa_decode_q_avx512_vnni(const sdpa_rows *w);
size_t sdpa_decode_q_ws_avx512(size_t rows, size_t d);
void sdpa_dequant_avx512(sdpa_dtype type, const void *src, float *dst, size_t n);
#define DEQUANT_FN sdpa_dequant_avx512
void sdpa_prefill_avx512(const sdpa_rows *w);
size_t sdpa_decode_ws_avx512(size_t rows, size_t d, size_t dv, size_t block);
size_t sdpa_prefill_ws_avx512(size_t rows, size_t d, size_t dv, size_t block);

/* The functions of the kernel table (prims.c; rows and ws_floats: SDPA_DEFINE_PATHS),
   exported (avx512-vnni derives its table from them, vnni.c). */
void sdpa_score_f32_avx512(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                           float scale, float *s);
float sdpa_softmax_online_f32_avx512(float *s, size_t n, float *m, float *l);
void sdpa_accumulate_f32_avx512(float *o, float alpha, const float *p, const float *v,
                                size_t v_stride, size_t n, size_t dv);
void sdpa_exp_f32_avx512(const float *x, float *y, size_t n);
void sdpa_rows_avx512(const sdpa_rows *w);
size_t sdpa_ws_floats_avx512(size_t rows, size_t d, size_t dv, size_t block);

/* ------------------------------------------------------------------------------------------ */
/* Lanes and loads                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* Lanes [0, n) of a 16-lane vector (n may be >= 16 or 0). Every tail is handled by masked loads
   and stores, which neither read nor write (nor fault on) masked-off lanes. */
SDPA_INLINE __mmask16 lanes(size_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* 16 (or fewer, by mask) elements of a K/V row converted exactly to f32. f16 goes through the
   hardware converter (exact: every binary16 is a binary32); bf16 is the upper half of an f32. */
SDPA_INLINE __m512 load_f16(const uint16_t *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

SDPA_INLINE __m512 load_bf16(const uint16_t *p, __mmask16 m)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* 16 (or fewer, by mask) elements at element offset off of a K/V view of type t. Every caller
   passes t as a compile-time constant, so each instance is a single load-and-convert. */
SDPA_INLINE __m512 load_kv(const void *base, sdpa_dtype t, ptrdiff_t off, __mmask16 m)
{
    /* a full chunk as a plain load, which the conversion can take as its memory operand */
    if (__builtin_constant_p(m) && m == 0xFFFF) {
        if (t == SDPA_F32) return _mm512_loadu_ps((const float *)base + off);
        const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)base + off));
        if (t == SDPA_F16) return _mm512_cvtph_ps(h);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    if (t == SDPA_F32) return _mm512_maskz_loadu_ps(m, (const float *)base + off);
    if (t == SDPA_F16) return load_f16((const uint16_t *)base + off, m);
    return load_bf16((const uint16_t *)base + off, m);
}

/* ------------------------------------------------------------------------------------------ */
/* exp (the shared sequence and bound: exp_coeffs.h)                                           */
/* ------------------------------------------------------------------------------------------ */

/* The reduction and polynomial; *t receives x * log2(e) + 1.5 * 2^23, whose low mantissa bits
   hold nf (the add rounds the product to an integer, to nearest even, as a round would). */
SDPA_INLINE __m512 exp_avx512_poly(__m512 x, __m512 *t)
{
    const __m512 magic = _mm512_set1_ps(0x1.8p23f);
    *t = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)), magic);
    const __m512 nf = _mm512_sub_ps(*t, magic);
    __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 q = _mm512_fmadd_ps(r, _mm512_set1_ps(EXP_C6), _mm512_set1_ps(EXP_C5));
    q = _mm512_fmadd_ps(r, q, _mm512_set1_ps(EXP_C4));
    q = _mm512_fmadd_ps(r, q, _mm512_set1_ps(EXP_C3));
    q = _mm512_fmadd_ps(r, q, _mm512_set1_ps(0.5f));
    q = _mm512_fmadd_ps(r, q, _mm512_set1_ps(1.0f));
    return _mm512_fmadd_ps(r, q, _mm512_set1_ps(1.0f));
}

/* e^x on 16 lanes. MAXPS/MINPS return their second operand when either is NaN, so x goes
   second and a NaN input propagates. */
SDPA_INLINE __m512 exp_avx512(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(EXP_LO), x);
    x = _mm512_min_ps(_mm512_set1_ps(EXP_HI), x);
    __m512 t;
    const __m512 p = exp_avx512_poly(x, &t);
    const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4b400000));
    const __m512i n1 = _mm512_srai_epi32(ni, 1);
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

/* e^x of one scalar through the same vector code, so alpha matches the p values bit for bit. */
static inline float exp_avx512_1(float x)
{
    return _mm512_cvtss_f32(exp_avx512(_mm512_set1_ps(x)));
}

/* The fused kernels' exp (exp_coeffs.h, EXP_FTZ_CUT): 0 below the cut, else the bits of
   exp_avx512. A NaN x fails the compare and passes the clamp, so it reaches the result. */
SDPA_INLINE __m512 exp_avx512_ftz(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(EXP_FTZ_CUT);
    const __mmask16 live = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
    __m512 t;
    const __m512 p = exp_avx512_poly(_mm512_max_ps(lo, x), &t);
    /* t's low mantissa bits hold nf in [-126, 0]; the magic constant's bits all shift out */
    const __m512i e = _mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(t), 23),
                                       _mm512_set1_epi32(127 << 23));
    return _mm512_maskz_mul_ps(live, p, _mm512_castsi512_ps(e));
}

/* ------------------------------------------------------------------------------------------ */
/* Reductions                                                                                  */
/* ------------------------------------------------------------------------------------------ */
/* Folds a[0..16) (16-lane partial sums) into one vector whose lane i is the full sum of a[i'],
   with a 4-level tree of lane shuffles and adds (45 ops for 16 sums, instead of 16 separate
   horizontal reductions). The tree leaves sum i in output lane 4*(i%4) + i/4; callers pass
   the inputs in the transposed order perm16(i) so that the result comes out in natural order. */
SDPA_INLINE __m512 fold2_512(__m512 x,
                             __m512 y) /* 256-bit halves: x's sums in lanes 0-7, y's in 8-15 */
{
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
}
SDPA_INLINE __m512 fold2_256(__m512 x, __m512 y) /* 128-bit quarters */
{
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}
SDPA_INLINE __m512 fold2_128(__m512 x, __m512 y) /* pairs within 128-bit lanes */
{
    return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE));
}
SDPA_INLINE __m512 fold2_64(__m512 x, __m512 y) /* single floats within 128-bit lanes */
{
    return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xDD));
}
SDPA_INLINE __m512 reduce16(const __m512 *a)
{
    __m512 t[8], u[4], w[2];
    SDPA_UNROLL for (int i = 0; i < 8; i++) t[i] = fold2_512(a[2 * i], a[2 * i + 1]);
    SDPA_UNROLL for (int i = 0; i < 4; i++) u[i] = fold2_256(t[2 * i], t[2 * i + 1]);
    SDPA_UNROLL for (int i = 0; i < 2; i++) w[i] = fold2_128(u[2 * i], u[2 * i + 1]);
    return fold2_64(w[0], w[1]);
}
#define PERM16(i) ((((i)&3) << 2) | ((i) >> 2))

/* 128-bit lane i (0..3) of v: the extract takes an immediate, which an unoptimised build only
   sees as one in a case of its own */
SDPA_INLINE __m128 lane128(__m512 v, int i)
{
    switch (i & 3) {
    case 0:
        return _mm512_castps512_ps128(v);
    case 1:
        return _mm512_extractf32x4_ps(v, 1);
    case 2:
        return _mm512_extractf32x4_ps(v, 2);
    default:
        return _mm512_extractf32x4_ps(v, 3);
    }
}

/* A reduced tile's scores, lane r NK + i of v for row r and key i, to S[r][j + i] for the R real
   rows and the nv real keys (R NK <= 16). A full tile of 4 or 2 keys stores each row's lanes as a
   piece of the vector, which Zen 5 runs faster than masked stores there; the rest take one
   masked store per row, whose pointer S + r lds + j - r NK stays inside S, as lds >= NK. */
SDPA_INLINE void store_tile16(int R, int NK, __m512 v, size_t nv, float *S, size_t lds, size_t j)
{
    if (nv == (size_t)NK && (NK == 4 || NK == 2)) {
        SDPA_UNROLL for (int r = 0; r < R; r++)
        {
            float *p = S + (size_t)r * lds + j;
            if (NK == 4)
                _mm_storeu_ps(p, lane128(v, r));
            else if (r & 1)
                _mm_storeh_pi((__m64 *)(void *)p, lane128(v, r / 2));
            else
                _mm_storel_pi((__m64 *)(void *)p, lane128(v, r / 2));
        }
        return;
    }
    const unsigned keys = (1u << nv) - 1u;
    SDPA_UNROLL for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(
        S + (size_t)r * lds + j - (size_t)r * NK, (__mmask16)(keys << (r * NK)), v);
}

/* ------------------------------------------------------------------------------------------ */
/* The online-softmax step of a row                                                            */
/* ------------------------------------------------------------------------------------------ */

SDPA_INLINE __m512 softmax_exp_avx512(int fused, __m512 x)
{
    return fused ? exp_avx512_ftz(x) : exp_avx512(x);
}

/* The sdpa.h online-softmax step over s[0..n) (n >= 1), p written in place; returns alpha.
   fused (a constant at each call): p by the fused kernels' exp (exp_avx512_ftz), else by
   exp_avx512, as the public primitive states. */
SDPA_INLINE float softmax_avx512(int fused, float *s, size_t n, float *m, float *l)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx0 = ninf, mx1 = ninf;
    size_t i = 0;
    /* MAXPS returns its second operand when either is NaN: NaN scores are skipped here */
    for (; i + 32 <= n; i += 32) {
        mx0 = _mm512_max_ps(_mm512_loadu_ps(s + i), mx0);
        mx1 = _mm512_max_ps(_mm512_loadu_ps(s + i + 16), mx1);
    }
    for (; i < n; i += 16)
        mx0 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, lanes(n - i), s + i), mx0);
    const float bm = _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1));
    const float mo = *m;
    const float mn = bm > mo ? bm : mo;
    const __m512 msub = _mm512_set1_ps(mn == -INFINITY ? 0.0f : mn);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 p0 = softmax_exp_avx512(fused, _mm512_sub_ps(_mm512_loadu_ps(s + i), msub));
        const __m512 p1 =
            softmax_exp_avx512(fused, _mm512_sub_ps(_mm512_loadu_ps(s + i + 16), msub));
        _mm512_storeu_ps(s + i, p0);
        _mm512_storeu_ps(s + i + 16, p1);
        s0 = _mm512_add_ps(s0, p0);
        s1 = _mm512_add_ps(s1, p1);
    }
    for (; i < n; i += 16) {
        const __mmask16 mv = lanes(n - i);
        const __m512 p = _mm512_maskz_mov_ps(
            mv, softmax_exp_avx512(fused, _mm512_sub_ps(_mm512_maskz_loadu_ps(mv, s + i), msub)));
        _mm512_mask_storeu_ps(s + i, mv, p);
        s0 = _mm512_add_ps(s0, p);
    }
    const float alpha = mn == -INFINITY ? 1.0f : exp_avx512_1(mo - mn);
    *l = alpha * *l + _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    *m = mn;
    return alpha;
}

#endif /* SDPA_AVX512_H */
