/* avx2.h -- what the AVX2 kernel files share: tuning, lane masks, K/V loads, exp, the fused softmax
 */
#ifndef SDPA_AVX2_H
#define SDPA_AVX2_H

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

#define DECODE_MAX_ROWS 8               /* more rows than this take the prefill path */
#define PAGED_ROWS      SIZE_MAX        /* paged units: every one (both paths run rows_loop.h) */
#define QUANT_ROWS      DECODE_MAX_ROWS /* K or V in a block format in place: decode_q.h */
#define DECODE_PF_KEYS                                                                             \
    32 /* prefetch distance: far enough to cover memory latency, near enough for L1 */
#define DECODE_PV_KB 32 /* keys per P·V sub-block: their V rows stay in L1 across column passes */
/* keys per turn of decode_values_ilv over contiguous rows (paged units turn a sub-block):
   shorter than a sub-block, so that K and V requests alternate in finer steps and the rows
   requested a turn ahead take less of L1 */
#define DECODE_ILV_TURN 16
/* most rows per KV head whose decode scores the next block among a block's P·V
   (decode_values_ilv): counts bound by memory, where K and V streaming together pays */
#define DECODE_ILV_ROWS 4
#define DECODE_BLOCK    512 /* keys per decode block (at most: the driver's hint rules) */
#define DECODE_BLOCK_FEW                                                                           \
    32                    /* keys per block of one-row work streaming from memory (see decode.c) */
#define PREFILL_BLOCK 512 /* keys per prefill block (at most: the driver's hint rules) */
#define PREFILL_PANEL 6   /* query rows packed together: the micro-kernels' rows */
#define SCORE_MR      6   /* score micro-kernel: 6 rows x 16 keys = 12 accumulators */
#define SCORE_NR      16
#define PV_MR         6 /* P·V micro-kernel: 6 rows x 16 columns = 12 accumulators */
#define PV_NR         16
/* the block-format decode path (shared/decode_q.h) */
#define DECODE_Q_BLOCK    256 /* keys per block (at most: the driver's hint rules) */
#define DECODE_Q_PF_KEYS  32  /* prefetch distance of its K and V rows */
#define DECODE_Q_PF_PAGED 32  /* ... on pages (qd_pf_keys) */
#define DECODE_Q_PV_KB    32  /* keys per P·V sub-block: their V rows stay in L1 */

/* Keys per block: the driver's hint, at most cap (the driver never hints 0; taken as 1). */
static inline size_t block_keys(size_t block, size_t cap)
{
    return sdpa_min(block ? block : 1, cap);
}

/* The two paths (decode.c, prefill.c) and their scratch sizes in floats. */
void sdpa_decode_avx2(const sdpa_rows *w);
/* the decode path for K or V in a block format, and fast scores (kernels/x86/shared/decode_q.h) */
void sdpa_decode_q_avx2(const sdpa_rows *w);
size_t sdpa_decode_q_ws_avx2(size_t rows, size_t d);
void sdpa_dequant_avx2(sdpa_dtype type, const void *src, float *dst, size_t n);
#define DEQUANT_FN sdpa_dequant_avx2
void sdpa_prefill_avx2(const sdpa_rows *w);
size_t sdpa_decode_ws_avx2(size_t rows, size_t d, size_t dv, size_t block);
size_t sdpa_prefill_ws_avx2(size_t rows, size_t d, size_t dv, size_t block);

/* The functions of the kernel table (prims.c; rows and ws_floats: SDPA_DEFINE_PATHS),
   exported. */
void sdpa_score_f32_avx2(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                         float scale, float *s);
float sdpa_softmax_online_f32_avx2(float *s, size_t n, float *m, float *l);
void sdpa_accumulate_f32_avx2(float *o, float alpha, const float *p, const float *v,
                              size_t v_stride, size_t n, size_t dv);
void sdpa_exp_f32_avx2(const float *x, float *y, size_t n);
void sdpa_rows_avx2(const sdpa_rows *w);
size_t sdpa_ws_floats_avx2(size_t rows, size_t d, size_t dv, size_t block);

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* mask_src + 8 - n selects the first n lanes (n in 0..8) for maskload/maskstore. */
static const int32_t mask_src[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

SDPA_INLINE __m256i lanes_mask(size_t n)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)(mask_src + 8 - (n > 8 ? 8 : n)));
}

SDPA_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lanes hold no NaN here (the softmax keeps NaN out of its running max), so plain max works. */
SDPA_INLINE float hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Eight accumulators to one vector whose lane i is the sum of a[i]'s lanes. */
SDPA_INLINE __m256 reduce8x8(const __m256 a[8])
{
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20),
                         _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* In-register 8x8 transpose: afterwards r[i] holds element i of every input row. */
SDPA_INLINE void transpose8(__m256 r[8])
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Eight K/V elements of storage type t at element offset off, exactly converted to f32:
   f16 through F16C, bf16 by zero-extending to 32 bits and shifting into the upper half. */
SDPA_INLINE __m256 load8_any(const void *base, sdpa_dtype t, ptrdiff_t off)
{
    if (t == SDPA_F32) return _mm256_loadu_ps((const float *)base + off);
    const __m128i h =
        _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)base + off));
    if (t == SDPA_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The same for the first n < 8 elements (the rest 0), never touching memory past them: a row's
   tail may end right before an unmapped page. AVX2 has no 16-bit masked load, hence the copy. */
static inline __m256 loadn_any(const void *base, sdpa_dtype t, ptrdiff_t off, size_t n)
{
    if (t == SDPA_F32) return _mm256_maskload_ps((const float *)base + off, lanes_mask(n));
    uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    memcpy(tmp, (const uint16_t *)base + off, n * sizeof *tmp);
    return load8_any(tmp, t, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* exp (the shared sequence and bound: exp_coeffs.h)                                           */
/* ------------------------------------------------------------------------------------------ */

/* The reduction and polynomial; *t receives x * log2(e) + 1.5 * 2^23, whose low mantissa bits
   hold nf (the add rounds the product to an integer, to nearest even, as a round would, in the
   default rounding mode every operation here assumes). */
SDPA_INLINE __m256 exp_avx2_poly(__m256 x, __m256 *t)
{
    const __m256 magic = _mm256_set1_ps(0x1.8p23f);
    *t = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)), magic);
    const __m256 nf = _mm256_sub_ps(*t, magic);
    __m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 q = _mm256_fmadd_ps(r, _mm256_set1_ps(EXP_C6), _mm256_set1_ps(EXP_C5));
    q = _mm256_fmadd_ps(r, q, _mm256_set1_ps(EXP_C4));
    q = _mm256_fmadd_ps(r, q, _mm256_set1_ps(EXP_C3));
    q = _mm256_fmadd_ps(r, q, _mm256_set1_ps(0.5f));
    q = _mm256_fmadd_ps(r, q, _mm256_set1_ps(1.0f));
    return _mm256_fmadd_ps(r, q, _mm256_set1_ps(1.0f));
}

/* e^x on 8 lanes. The SSE/AVX min/max return their second operand when either is NaN, so x goes
   second and a NaN input propagates. */
SDPA_INLINE __m256 exp_avx2(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(EXP_LO), x);
    x = _mm256_min_ps(_mm256_set1_ps(EXP_HI), x);
    __m256 t;
    const __m256 p = exp_avx2_poly(x, &t);
    const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4b400000));
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* e^x of one scalar through the same vector code, so alpha matches the p values bit for bit. */
static inline float exp_avx2_1(float x) { return _mm256_cvtss_f32(exp_avx2(_mm256_set1_ps(x))); }

/* The fused kernels' exp (exp_coeffs.h, EXP_FTZ_CUT): 0 below the cut, else the bits of
   exp_avx2. A NaN x fails the compare and passes the clamp, so it reaches the result. */
SDPA_INLINE __m256 exp_avx2_ftz(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(EXP_FTZ_CUT);
    const __m256 dead = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 t;
    const __m256 p = exp_avx2_poly(_mm256_max_ps(lo, x), &t);
    /* t's low mantissa bits hold nf in [-126, 0]; the magic constant's bits all shift out */
    const __m256i e = _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(t), 23),
                                       _mm256_set1_epi32(127 << 23));
    return _mm256_andnot_ps(dead, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* ------------------------------------------------------------------------------------------ */
/* The fused online softmax (both paths)                                                       */
/* ------------------------------------------------------------------------------------------ */

/* The one online-softmax step of this ISA (the sdpa.h contract), over keys [0, nv) of a block,
   [nv, nb) masked (1 <= nv <= nb): p = 0 is written for the masked ones, never computed;
   returns alpha. fused (a constant at each call): the fused kernels' row, p by exp_avx2_ftz and
   whole vectors written up to nb rounded up to 8, inside the row's lds floats; else the public
   primitive (nv = nb = n), p by exp_avx2 and nothing written past s[n). */
SDPA_INLINE float softmax_avx2(int fused, float *s, size_t nv, size_t nb, float *m, float *l,
                               const float *rm)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 vm0 = ninf, vm1 = ninf;
    size_t j = 0;
    if (rm) { /* the score kernel's lane-wise max over exactly these nv keys */
        vm0 = _mm256_load_ps(rm);
        j = nv;
    }
    for (; j + 16 <= nv; j += 16) {
        vm0 = _mm256_max_ps(_mm256_loadu_ps(s + j), vm0);
        vm1 = _mm256_max_ps(_mm256_loadu_ps(s + j + 8), vm1);
    }
    for (; j + 8 <= nv; j += 8) vm0 = _mm256_max_ps(_mm256_loadu_ps(s + j), vm0);
    const size_t tail = nv % 8;
    const __m256i mk = lanes_mask(tail);
    if (tail && !rm) {
        const __m256 x =
            _mm256_blendv_ps(ninf, _mm256_maskload_ps(s + j, mk), _mm256_castsi256_ps(mk));
        vm1 = _mm256_max_ps(x, vm1);
    }
    const float bm = hmax8(_mm256_max_ps(vm0, vm1));
    const float m_old = *m;
    const float m_new = m_old > bm ? m_old : bm;
    float alpha = 1.0f, msub = 0.0f;
    if (m_new != -INFINITY) {
        msub = m_new;
        alpha = exp_avx2_1(m_old - m_new);
    }
    const __m256 vms = _mm256_set1_ps(msub);
    __m256 sum = _mm256_setzero_ps();
    for (j = 0; j + 8 <= nv; j += 8) {
        const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + j), vms);
        const __m256 p0 = fused ? exp_avx2_ftz(x) : exp_avx2(x);
        _mm256_storeu_ps(s + j, p0);
        sum = _mm256_add_ps(sum, p0);
    }
    if (tail) {
        const __m256 x = _mm256_sub_ps(_mm256_maskload_ps(s + j, mk), vms);
        const __m256 p0 =
            _mm256_and_ps(fused ? exp_avx2_ftz(x) : exp_avx2(x), _mm256_castsi256_ps(mk));
        if (fused)
            _mm256_storeu_ps(s + j, p0);
        else
            _mm256_maskstore_ps(s + j, mk, p0);
        sum = _mm256_add_ps(sum, p0);
        j += 8;
    }
    for (; j < nb; j += 8) _mm256_storeu_ps(s + j, _mm256_setzero_ps());
    *m = m_new;
    *l = alpha * *l + hsum8(sum);
    return alpha;
}

#endif /* SDPA_AVX2_H */
