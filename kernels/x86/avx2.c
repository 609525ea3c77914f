/* avx2.c -- the AVX2+FMA+F16C implementation: vectorized exp, the three primitives and the fused rows kernel */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "convert.h"
#include "kernel_table.h"

/* Micro-kernels are written once with their shape as a parameter and instantiated with
   constants; forcing the inline lets the compiler keep the accumulator arrays in registers. */
#define AVX2_INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* mask_src + 8 - n selects the first n lanes (n in 0..8) for maskload/maskstore. */
static const int32_t mask_src[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

AVX2_INLINE __m256i lanes_mask(size_t n)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)(mask_src + 8 - (n > 8 ? 8 : n)));
}

AVX2_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lanes hold no NaN here (the softmax keeps NaN out of its running max), so plain max works. */
AVX2_INLINE float hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Eight accumulators to one vector whose lane i is the sum of a[i]'s lanes. */
AVX2_INLINE __m256 reduce8x8(const __m256 a[8])
{
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* In-register 8x8 transpose: afterwards r[i] holds element i of every input row. */
AVX2_INLINE void transpose8(__m256 r[8])
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
AVX2_INLINE __m256 load8_any(const void *base, sdpa_dtype t, ptrdiff_t off)
{
    if (t == SDPA_F32) return _mm256_loadu_ps((const float *)base + off);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)base + off));
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
/* exp                                                                                        */
/* ------------------------------------------------------------------------------------------ */
/* exp(x) = 2^n * exp(r), n = round(x / ln2), r = x - n*ln2 in [-ln2/2, ln2/2].
   - r is formed with ln2 split in two (Cody-Waite): ln2_hi is ln2 rounded to float, so the FMA
     x - n*ln2_hi is exact (|n| <= 150 and the difference has at most 24 significant bits);
     ln2_lo carries the rest.
   - exp(r) = 1 + r + r^2 P(r), P of degree 4 fitted (weighted least squares on Chebyshev nodes,
     relative error of exp(r) below 4e-9, i.e. 0.06 ULP) to (exp(r) - 1 - r) / r^2.
   - 2^n is built in the exponent field in two halves, 2^n = 2^(n>>1) * 2^(n - (n>>1)): both are
     normal for every n in [-150, 128], the first product is exact, and the second rounds once,
     so results in the subnormal range (x in about [-103.97, -87.34]) are correctly rounded
     instead of flushed, and x <= -104 (clamped) gives exactly 0.
   The clamps are written as max(lo, x) / min(hi, x): the SSE min/max return their second
   operand when either is NaN, so a NaN x flows through and the result is NaN. */
#define EXP_LO -104.0f
#define EXP_HI 89.0f /* exp(89) overflows to +inf through the two-step scale */

AVX2_INLINE __m256 exp8_avx2(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(EXP_LO), x);
    x = _mm256_min_ps(_mm256_set1_ps(EXP_HI), x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e430p-1f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-0x1.05c610p-29f), r);
    __m256 p = _mm256_set1_ps(0x1.687c22p-10f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.123b8ep-7f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.555b58p-5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.55548ep-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.fffff8p-2f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(r, r), p, r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

static void exp_f32_avx2(const float *x, float *y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8_avx2(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i mk = lanes_mask(n - i);
        _mm256_maskstore_ps(y + i, mk, exp8_avx2(_mm256_maskload_ps(x + i, mk)));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Primitive: scores                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Dot products of q with nk <= 8 keys (k rows at stride ks), one accumulator per key; lane j
   of the result is key j's dot product (0 for j >= nk). */
AVX2_INLINE __m256 dot_keys_avx2(const float *q, const float *k, size_t ks, size_t d, size_t nk)
{
    __m256 a[8];
    for (size_t i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
    size_t c = 0;
    for (; c + 8 <= d; c += 8) {
        const __m256 qv = _mm256_loadu_ps(q + c);
        for (size_t i = 0; i < 8; i++)
            if (i < nk) a[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + i * ks + c), a[i]);
    }
    if (c < d) {
        const __m256i mk = lanes_mask(d - c);
        const __m256 qv = _mm256_maskload_ps(q + c, mk);
        for (size_t i = 0; i < 8; i++)
            if (i < nk) a[i] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + i * ks + c, mk), a[i]);
    }
    return reduce8x8(a);
}

static void score_f32_avx2(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                           float scale, float *s)
{
    const __m256 sc = _mm256_set1_ps(scale);
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(s + j, _mm256_mul_ps(sc, dot_keys_avx2(q, k + j * k_stride, k_stride, d, 8)));
    if (j < n) {
        const __m256 v = dot_keys_avx2(q, k + j * k_stride, k_stride, d, n - j);
        _mm256_maskstore_ps(s + j, lanes_mask(n - j), _mm256_mul_ps(sc, v));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Primitive: online softmax                                                                  */
/* ------------------------------------------------------------------------------------------ */
/* Two passes over the block: the max (NaN scores ignored, as a comparison ignores them: they
   propagate through p instead), then p = exp(s - m_new) and its sum. While everything seen is
   -inf the exponent is taken against 0, so p = exp(-inf) = 0 exactly and a NaN score still
   gives p = NaN and reaches l. */
AVX2_INLINE float softmax_online_avx2_inl(float *s, size_t n, float *m, float *l)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 vm0 = ninf, vm1 = ninf;
    size_t j = 0;
    /* max(x, acc) keeps acc when x is NaN (second operand wins on unordered) */
    for (; j + 16 <= n; j += 16) {
        vm0 = _mm256_max_ps(_mm256_loadu_ps(s + j), vm0);
        vm1 = _mm256_max_ps(_mm256_loadu_ps(s + j + 8), vm1);
    }
    for (; j + 8 <= n; j += 8) vm0 = _mm256_max_ps(_mm256_loadu_ps(s + j), vm0);
    if (j < n) {
        const __m256i mk = lanes_mask(n - j);
        const __m256 x = _mm256_blendv_ps(ninf, _mm256_maskload_ps(s + j, mk), _mm256_castsi256_ps(mk));
        vm0 = _mm256_max_ps(x, vm0);
    }
    const float bm = hmax8(_mm256_max_ps(vm0, vm1));
    const float m_old = *m;
    const float m_new = m_old > bm ? m_old : bm;
    float alpha = 1.0f, msub = 0.0f;
    if (m_new != -INFINITY) {
        msub = m_new;
        alpha = _mm256_cvtss_f32(exp8_avx2(_mm256_set1_ps(m_old - m_new)));
    }
    const __m256 vms = _mm256_set1_ps(msub);
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m256 p0 = exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), vms));
        const __m256 p1 = exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), vms));
        _mm256_storeu_ps(s + j, p0);
        _mm256_storeu_ps(s + j + 8, p1);
        sum0 = _mm256_add_ps(sum0, p0);
        sum1 = _mm256_add_ps(sum1, p1);
    }
    for (; j + 8 <= n; j += 8) {
        const __m256 p0 = exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), vms));
        _mm256_storeu_ps(s + j, p0);
        sum0 = _mm256_add_ps(sum0, p0);
    }
    if (j < n) {
        const __m256i mk = lanes_mask(n - j);
        __m256 p0 = exp8_avx2(_mm256_sub_ps(_mm256_maskload_ps(s + j, mk), vms));
        p0 = _mm256_and_ps(p0, _mm256_castsi256_ps(mk));
        _mm256_maskstore_ps(s + j, mk, p0);
        sum1 = _mm256_add_ps(sum1, p0);
    }
    *m = m_new;
    *l = alpha * *l + hsum8(_mm256_add_ps(sum0, sum1));
    return alpha;
}

static float softmax_online_f32_avx2(float *s, size_t n, float *m, float *l)
{
    return softmax_online_avx2_inl(s, n, m, l);
}

/* ------------------------------------------------------------------------------------------ */
/* Primitive: accumulate                                                                      */
/* ------------------------------------------------------------------------------------------ */
/* One panel of up to 32 output columns: o = alpha*o + sum_j p_j v_j, keys alternating between
   two accumulator sets so that the FMA latency chain is halved. full: cols == 32, no masks. */
AVX2_INLINE void accumulate_panel_avx2(float *o, float alpha, const float *p, const float *v,
                                       size_t vs, size_t n, size_t cols, int full)
{
    __m256i mk[4];
    __m256 a[4], b[4];
    const __m256 al = _mm256_set1_ps(alpha);
    for (int i = 0; i < 4; i++) {
        const size_t rem = cols > 8u * i ? cols - 8u * i : 0;
        mk[i] = lanes_mask(rem);
        a[i] = _mm256_mul_ps(al, full ? _mm256_loadu_ps(o + 8 * i) : _mm256_maskload_ps(o + 8 * i, mk[i]));
        b[i] = _mm256_setzero_ps();
    }
    size_t j = 0;
    for (; j + 2 <= n; j += 2) {
        const __m256 p0 = _mm256_set1_ps(p[j]), p1 = _mm256_set1_ps(p[j + 1]);
        const float *v0 = v + j * vs, *v1 = v0 + vs;
        for (int i = 0; i < 4; i++) {
            if (full) {
                a[i] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v0 + 8 * i), a[i]);
                b[i] = _mm256_fmadd_ps(p1, _mm256_loadu_ps(v1 + 8 * i), b[i]);
            } else if (cols > 8u * i) {
                a[i] = _mm256_fmadd_ps(p0, _mm256_maskload_ps(v0 + 8 * i, mk[i]), a[i]);
                b[i] = _mm256_fmadd_ps(p1, _mm256_maskload_ps(v1 + 8 * i, mk[i]), b[i]);
            }
        }
    }
    if (j < n) {
        const __m256 p0 = _mm256_set1_ps(p[j]);
        const float *v0 = v + j * vs;
        for (int i = 0; i < 4; i++) {
            if (full)
                a[i] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v0 + 8 * i), a[i]);
            else if (cols > 8u * i)
                a[i] = _mm256_fmadd_ps(p0, _mm256_maskload_ps(v0 + 8 * i, mk[i]), a[i]);
        }
    }
    for (int i = 0; i < 4; i++) {
        const __m256 r = _mm256_add_ps(a[i], b[i]);
        if (full)
            _mm256_storeu_ps(o + 8 * i, r);
        else if (cols > 8u * i)
            _mm256_maskstore_ps(o + 8 * i, mk[i], r);
    }
}

static void accumulate_f32_avx2(float *o, float alpha, const float *p, const float *v,
                                size_t v_stride, size_t n, size_t dv)
{
    size_t c = 0;
    for (; c + 32 <= dv; c += 32) accumulate_panel_avx2(o + c, alpha, p, v + c, v_stride, n, 32, 1);
    if (c < dv) accumulate_panel_avx2(o + c, alpha, p, v + c, v_stride, n, dv - c, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Fused kernel                                                                               */
/* ------------------------------------------------------------------------------------------ */
/* Two strategies, chosen by the number of rows R of the unit of work:
   - R > DIRECT_MAX_ROWS (prefill): per key block, K is converted and packed transposed in
     panels of 16 keys ([d][16] each) and V in panels of 16 columns ([nb][16] each), so that
     both products are register-blocked GEMMs: score_avx2_<mr>x16 broadcasts q[r][c] and FMAs
     it with two K^T vectors, pv_avx2_<mr>x16 broadcasts p[r][j] and FMAs it with two V vectors,
     mr <= 6 rows in 12 accumulators. Packing costs O(nb * d) per block and is shared by all R.
   - R <= DIRECT_MAX_ROWS (decode): packing would be a second pass over data used only a few
     times, so K and V are read in place, converted in registers, and every load is shared by
     all rows: scores as dot products along d (rows x keys accumulators, reduced at the end),
     values as rows x columns accumulators over the block's keys. */
#define MR 6
#define NR 16
#ifndef DIRECT_MAX_ROWS
#define DIRECT_MAX_ROWS 8
#endif
#define BLOCK_CAP 512

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

static size_t eff_block(size_t block)
{
    if (block == 0) return 256;
    return block > BLOCK_CAP ? BLOCK_CAP : block;
}

/* Scratch: S [R][lds] | alpha [R] | (GEMM path) K^T panels [lds * d] | V panels [lds * dv16] |
   packed queries [R rounded up to MR][d] | lane-wise row maxima [R][8]. */
static size_t ws_floats_avx2(size_t rows, size_t d, size_t dv, size_t block)
{
    const size_t lds = round16(eff_block(block));
    size_t n = rows * lds + round16(rows);
    if (rows > DIRECT_MAX_ROWS)
        n += lds * d + lds * round16(dv) + round16((rows + MR - 1) / MR * MR * d) + 8 * rows;
    return n;
}

/* --- GEMM path: packing ------------------------------------------------------------------ */

/* Keys [j0, j0 + nb) into panels of 16: key j0 + 16p + i, element c at kp[16pd + 16c + i];
   a last partial panel is padded with zero keys. */
AVX2_INLINE void pack_k_avx2_t(const void *k, sdpa_dtype t, ptrdiff_t ks, size_t j0, size_t nb,
                               size_t d, float *kp)
{
    for (size_t p0 = 0; p0 < nb; p0 += NR) {
        float *panel = kp + p0 * d;
        for (size_t h = 0; h < 2; h++) {
            const size_t jb = p0 + 8 * h;
            const size_t nk = jb < nb ? (nb - jb < 8 ? nb - jb : 8) : 0;
            for (size_t c = 0; c < d; c += 8) {
                const size_t cnt = d - c < 8 ? d - c : 8;
                __m256 r[8];
                for (size_t i = 0; i < 8; i++) {
                    const ptrdiff_t off = (ptrdiff_t)(j0 + jb + i) * ks + (ptrdiff_t)c;
                    if (i >= nk)
                        r[i] = _mm256_setzero_ps();
                    else if (cnt == 8)
                        r[i] = load8_any(k, t, off);
                    else
                        r[i] = loadn_any(k, t, off, cnt);
                }
                transpose8(r);
                for (size_t i = 0; i < cnt; i++) _mm256_store_ps(panel + (c + i) * NR + 8 * h, r[i]);
            }
        }
    }
}

static void pack_k_avx2(const sdpa_rows *w, size_t j0, size_t nb, float *kp)
{
    switch (w->k_type) {
    case SDPA_F16: pack_k_avx2_t(w->k, SDPA_F16, w->k_stride, j0, nb, w->d, kp); break;
    case SDPA_BF16: pack_k_avx2_t(w->k, SDPA_BF16, w->k_stride, j0, nb, w->d, kp); break;
    default: pack_k_avx2_t(w->k, SDPA_F32, w->k_stride, j0, nb, w->d, kp); break;
    }
}

/* Columns [c0, dv) of values [j0, j0 + nb) into panels of 16 columns: column c0 + 16p + i of
   key j at vp[16p nb + 16j + i]; columns past dv are zero. c0 is a multiple of 16. */
AVX2_INLINE void pack_v_avx2_t(const void *v, sdpa_dtype t, ptrdiff_t vs, size_t j0, size_t nb,
                               size_t c0, size_t dv, float *vp)
{
    for (size_t j = 0; j < nb; j++) {
        const ptrdiff_t row = (ptrdiff_t)(j0 + j) * vs;
        size_t c = c0;
        for (; c + 8 <= dv; c += 8)
            _mm256_store_ps(vp + ((c - c0) / NR) * NR * nb + j * NR + c % NR,
                            load8_any(v, t, row + (ptrdiff_t)c));
        if (c < dv) {
            _mm256_store_ps(vp + ((c - c0) / NR) * NR * nb + j * NR + c % NR,
                            loadn_any(v, t, row + (ptrdiff_t)c, dv - c));
            c += 8;
        }
        if (c % NR) _mm256_store_ps(vp + ((c - c0) / NR) * NR * nb + j * NR + 8, _mm256_setzero_ps());
    }
}

/* f32 values need no conversion: only a partial last panel (dv not a multiple of 16) is
   packed, so that the micro-kernel never reads past a row; returns the first packed column. */
static size_t pack_v_avx2(const sdpa_rows *w, size_t j0, size_t nb, float *vp)
{
    switch (w->v_type) {
    case SDPA_F16: pack_v_avx2_t(w->v, SDPA_F16, w->v_stride, j0, nb, 0, w->dv, vp); return 0;
    case SDPA_BF16: pack_v_avx2_t(w->v, SDPA_BF16, w->v_stride, j0, nb, 0, w->dv, vp); return 0;
    default: {
        const size_t c0 = w->dv / NR * NR;
        if (c0 < w->dv) pack_v_avx2_t(w->v, SDPA_F32, w->v_stride, j0, nb, c0, w->dv, vp);
        return c0;
    }
    }
}

/* --- GEMM path: micro-kernels --------------------------------------------------------------- */

/* The accumulators are named variables, not arrays: GCC otherwise keeps a copy of an array
   tile in memory and stores it on every iteration. ACC_ROWS(X) expands X(r) for r < 6; the
   "if (mr > r)" guards fold away since mr is a constant in every instantiation. */
#define ACC_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

/* Queries packed once per call in groups of MR rows, k-major: row 6g + i, element k at
   qp[6gd + 6k + i] (a last partial group keeps the stride 6). Every broadcast of the score
   micro-kernel then comes from one pointer at constant offsets, so the unrolled loop needs no
   index arithmetic. */
static void pack_q_avx2(const float *q, size_t R, size_t d, float *qp)
{
    for (size_t g = 0; g < R; g += MR) {
        const size_t mr = R - g < MR ? R - g : MR;
        float *dst = qp + g * d;
        for (size_t i = 0; i < mr; i++)
            for (size_t k = 0; k < d; k++) dst[k * MR + i] = q[(g + i) * d + k];
    }
}

/* S[r][0..16) = q_r . K^T panel for r < mr, q packed (pack_q_avx2); also folds the 16 scores
   into the row's running lane-wise max rm[8r..8r+8), so that the softmax needs no max pass.
   NaN scores are left out of it, as the softmax's own max pass leaves them out: max(x, m)
   returns m when x is NaN. */
AVX2_INLINE void score_avx2_mk(size_t mr, const float *qp, size_t d, const float *b, float *S,
                               size_t lds, float *rm)
{
#define DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
    ACC_ROWS(DECL)
#undef DECL
#pragma GCC unroll 4
    for (size_t k = 0; k < d; k++) {
        const __m256 b0 = _mm256_load_ps(b + k * NR), b1 = _mm256_load_ps(b + k * NR + 8);
#define STEP(r)                                                                                  \
    if (mr > r) {                                                                                \
        const __m256 a = _mm256_broadcast_ss(qp + k * MR + r);                                   \
        c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);                                               \
        c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);                                               \
    }
        ACC_ROWS(STEP)
#undef STEP
    }
#define STORE(r)                                                                                 \
    if (mr > r) {                                                                                \
        _mm256_store_ps(S + r * lds, c##r##0);                                                   \
        _mm256_store_ps(S + r * lds + 8, c##r##1);                                               \
        const __m256 mx = _mm256_max_ps(c##r##0, _mm256_load_ps(rm + 8 * r));                    \
        _mm256_store_ps(rm + 8 * r, _mm256_max_ps(c##r##1, mx));                                 \
    }
    ACC_ROWS(STORE)
#undef STORE
}

#define SCORE_KERNEL(m)                                                                          \
    static void score_avx2_##m##x16(const float *qp, size_t d, const float *b, float *S,         \
                                    size_t lds, float *rm)                                       \
    {                                                                                            \
        score_avx2_mk(m, qp, d, b, S, lds, rm);                                                  \
    }
SCORE_KERNEL(1)
SCORE_KERNEL(2)
SCORE_KERNEL(3)
SCORE_KERNEL(4)
SCORE_KERNEL(5)
SCORE_KERNEL(6)

typedef void (*score_mk_fn)(const float *, size_t, const float *, float *, size_t, float *);
static const score_mk_fn score_mks[MR + 1] = {NULL,           score_avx2_1x16, score_avx2_2x16,
                                              score_avx2_3x16, score_avx2_4x16, score_avx2_5x16,
                                              score_avx2_6x16};

/* S[r][j] = q_r . key j for g0 <= r < R, j < round16(nb) and j < the group's last limit, g0 a
   multiple of MR, and rm[r] the
   lane-wise max of row r's scores (padding keys of a last partial panel included): panels
   outer, so each K^T panel (16 d floats) is reused from L1 by all row groups. */
static void score_tile_avx2(const float *qp, size_t g0, size_t R, size_t d, const float *kp,
                            size_t nb, float *S, size_t lds, float *rm, const size_t *lim, size_t j0)
{
    for (size_t r = g0; r < R; r++) _mm256_store_ps(rm + 8 * r, _mm256_set1_ps(-INFINITY));
    for (size_t p0 = 0; p0 < nb; p0 += NR) {
        const float *b = kp + p0 * d;
        size_t r = g0;
        /* groups whose last row sees none of this panel are skipped (the diagonal of causal
           attention): the softmax reads no score past a row's limit, and their rm is unused */
        while (r < R && lim[(r + MR < R ? r + MR : R) - 1] <= j0 + p0) r += MR;
        for (; r + MR <= R; r += MR)
            score_avx2_6x16(qp + r * d, d, b, S + r * lds + p0, lds, rm + 8 * r);
        if (r < R) score_mks[R - r](qp + r * d, d, b, S + r * lds + p0, lds, rm + 8 * r);
    }
}

/* acc[r][0..cols) = alpha_r acc[r] + sum_j P[r][j] V panel[j], r < mr, cols <= 16. */
AVX2_INLINE void pv_avx2_mk(size_t mr, float *acc, size_t dv, const float *alpha, const float *P,
                            size_t lds, const float *b, ptrdiff_t bs, size_t nb, size_t cols)
{
    const int full = cols == NR;
    const __m256i m0 = lanes_mask(cols), m1 = lanes_mask(cols > 8 ? cols - 8 : 0);
#define LOAD(r)                                                                                  \
    __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();                         \
    if (mr > r) {                                                                                \
        const __m256 al = _mm256_broadcast_ss(alpha + r);                                        \
        const float *o = acc + r * dv;                                                           \
        c##r##0 = _mm256_mul_ps(al, full ? _mm256_loadu_ps(o) : _mm256_maskload_ps(o, m0));      \
        c##r##1 = _mm256_mul_ps(al, full ? _mm256_loadu_ps(o + 8) : _mm256_maskload_ps(o + 8, m1)); \
    }
    ACC_ROWS(LOAD)
#undef LOAD
    const float *P3 = P + 3 * lds;
#pragma GCC unroll 4
    for (size_t j = 0; j < nb; j++) {
        const float *bj = b + (ptrdiff_t)j * bs;
        const __m256 b0 = _mm256_loadu_ps(bj), b1 = _mm256_loadu_ps(bj + 8);
#define STEP(r)                                                                                  \
    if (mr > r) {                                                                                \
        const __m256 a = _mm256_broadcast_ss((r < 3 ? P : P3) + (r % 3) * lds + j);              \
        c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);                                               \
        c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);                                               \
    }
        ACC_ROWS(STEP)
#undef STEP
    }
#define STORE(r)                                                                                 \
    if (mr > r) {                                                                                \
        float *o = acc + r * dv;                                                                 \
        if (full) {                                                                              \
            _mm256_storeu_ps(o, c##r##0);                                                        \
            _mm256_storeu_ps(o + 8, c##r##1);                                                    \
        } else {                                                                                 \
            _mm256_maskstore_ps(o, m0, c##r##0);                                                 \
            _mm256_maskstore_ps(o + 8, m1, c##r##1);                                             \
        }                                                                                        \
    }
    ACC_ROWS(STORE)
#undef STORE
}

#define PV_KERNEL(m)                                                                             \
    static void pv_avx2_##m##x16(float *acc, size_t dv, const float *alpha, const float *P,      \
                                 size_t lds, const float *b, ptrdiff_t bs, size_t nb, size_t cols) \
    {                                                                                            \
        pv_avx2_mk(m, acc, dv, alpha, P, lds, b, bs, nb, cols);                                  \
    }
PV_KERNEL(1)
PV_KERNEL(2)
PV_KERNEL(3)
PV_KERNEL(4)
PV_KERNEL(5)
PV_KERNEL(6)

typedef void (*pv_mk_fn)(float *, size_t, const float *, const float *, size_t, const float *,
                         ptrdiff_t, size_t, size_t);
static const pv_mk_fn pv_mks[MR + 1] = {NULL,        pv_avx2_1x16, pv_avx2_2x16, pv_avx2_3x16,
                                        pv_avx2_4x16, pv_avx2_5x16, pv_avx2_6x16};

/* Column panels outer, so each V panel (nb x 16 floats) is reused from L1/L2 by all row groups.
   Panels before c_pack are read in place from f32 V rows (vd, stride vs); the rest come packed
   from vp (stride 16). */
static void pv_tile_avx2(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
                         size_t ra, const float *vd, ptrdiff_t vs, size_t c_pack, const float *vp,
                         size_t nb, const size_t *lim, size_t j0)
{
    for (size_t c = 0; c < dv; c += NR) {
        const int packed = c >= c_pack;
        const float *b = packed ? vp + (c - c_pack) * nb : vd + c;
        const ptrdiff_t bs = packed ? NR : vs;
        const size_t cols = dv - c < NR ? dv - c : NR;
        for (size_t r = 0; r < ra; r += MR) {
            const size_t mr = ra - r < MR ? ra - r : MR;
            /* keys past the group's last (largest) limit have p = 0 for every row of it */
            const size_t last = lim[r + mr - 1] - j0, n = last < nb ? last : nb;
            if (mr == MR)
                pv_avx2_6x16(acc + r * dv + c, dv, alpha + r, P + r * lds, lds, b, bs, n, cols);
            else
                pv_mks[mr](acc + r * dv + c, dv, alpha + r, P + r * lds, lds, b, bs, n, cols);
        }
    }
}

/* --- direct path (few rows): micro-kernels reading K/V in place --------------------------- */

/* Scores of mr rows against nk keys (mr * nk <= 12), S[r][i] for keys j..j+nk. */
AVX2_INLINE void score_direct_mk(size_t mr, size_t nk, sdpa_dtype t, const float *q, size_t d,
                                 const void *k, ptrdiff_t ks, size_t j, float *S, size_t lds,
                                 ptrdiff_t pfo, const char *oth, const char *oend, size_t oper)
{
    /* pfo != 0: the rows pfo elements past this tile's keys exist, and each step that starts
       a cache line of them requests it: the requests spread over the arithmetic. oth != NULL:
       the lines [oth, oend) (the tile's V rows, end to end) are requested the same way, oper
       at each such step (callers without them pass a constant NULL, and the code goes) */
    const ptrdiff_t es = t == SDPA_F32 ? 4 : 2;
    /* mr * nk <= 12 accumulators (12: four rows by three keys, whose 12 FMA chains leave the
       FMA units slack that 8 chains of 4-cycle latency would not) */
    __m256 a[16];
    for (size_t i = 0; i < 16; i++) a[i] = _mm256_setzero_ps();
    size_t c = 0;
    for (; c + 8 <= d; c += 8) {
        if (pfo && (((ptrdiff_t)c * es) & 63) == 0)
            for (size_t i = 0; i < nk; i++)
                _mm_prefetch((const char *)k + ((ptrdiff_t)(j + i) * ks + (ptrdiff_t)c + pfo) * es,
                             _MM_HINT_T0);
        if (oth && (((ptrdiff_t)c * es) & 63) == 0)
            for (size_t i = 0; i < oper && oth < oend; i++, oth += 64) _mm_prefetch(oth, _MM_HINT_T0);
        __m256 kv[8];
        for (size_t i = 0; i < nk; i++) kv[i] = load8_any(k, t, (ptrdiff_t)(j + i) * ks + (ptrdiff_t)c);
        for (size_t r = 0; r < mr; r++) {
            __m256 qv = _mm256_loadu_ps(q + r * d + c);
            /* one load per query vector: left alone, the compiler folds it into every FMA that
               uses it, and the loads (not the FMAs) become the limit */
            if (nk > 1) __asm__("" : "+x"(qv));
            for (size_t i = 0; i < nk; i++) a[r * nk + i] = _mm256_fmadd_ps(qv, kv[i], a[r * nk + i]);
        }
    }
    if (c < d) {
        const __m256i mk = lanes_mask(d - c);
        __m256 kv[8];
        for (size_t i = 0; i < nk; i++)
            kv[i] = loadn_any(k, t, (ptrdiff_t)(j + i) * ks + (ptrdiff_t)c, d - c);
        for (size_t r = 0; r < mr; r++) {
            const __m256 qv = _mm256_maskload_ps(q + r * d + c, mk);
            for (size_t i = 0; i < nk; i++) a[r * nk + i] = _mm256_fmadd_ps(qv, kv[i], a[r * nk + i]);
        }
    }
    float out[16];
    _mm256_storeu_ps(out, reduce8x8(a));
    if (mr * nk > 8) _mm256_storeu_ps(out + 8, reduce8x8(a + 8)); /* a[12..16) stay zero */
    for (size_t r = 0; r < mr; r++)
        for (size_t i = 0; i < nk; i++) S[r * lds + i] = out[r * nk + i];
}

/* Software prefetch for the streaming (decode) path. The kernel alternates a score pass over K
   and a value pass over V per block; left to the hardware prefetchers, memory would sit idle
   during whichever pass is compute-bound. So each pass requests the row PF_KEYS keys ahead of
   the one it works on, in the same array, a few lines per key spread among the arithmetic: the
   score pass whole K rows, each value pass the lines of its own columns of the V row. The
   requests run past the block's end into the next block, so only a call's first keys need
   requesting up front (K at the call's start, V during the first score pass). Never at or past
   kv_end. (An earlier scheme requested a whole block ahead, rows in step with the work;
   measured on 32/8-head decode it streamed at about half the rate of this one.) The requests
   are prefetcht0, into L1 (see SDPA_PF_STREAM_LOCALITY): against prefetcht1, builds timed in
   turn in one process, each call after a 512 MiB read, medians of 16-20 calls, 32/32 f16 D128
   47 against 43-44 % of the read bandwidth, 32/8 f16 40-42 against 38-40 %, bf16 44 against 40
   %; in cache 32/32 8.9 against 10.1 ns per key. */
#define PF_KEYS 32
/* With one row the arithmetic per key is short, and a block's score pass and value passes
   would each stream one array while the other sits idle. So when the call streams K and V from
   memory (sdpa_rows.stream) one-row work goes in blocks of ONE_BLOCK keys, and each pass also
   requests the other array one pass ahead: the score pass the block's V rows (inside its
   tiles, in address order, when they lie end to end), the first column pass of the values the
   next block's K rows; both arrays are then in flight almost all the time, as on the AVX-512
   path (dec_pf). Measured from memory, 32/32 heads f16 D128, one thread, builds timed in turn
   in one process, each call after a 512 MiB read (medians of 16 calls): blocks of 32 keys with
   the second stream 62-84 % of the read bandwidth against 50-74 % before; blocks of 64 63-64 %;
   blocks of 64 without the second stream 54 %. With two rows (32/16) it measured from 10
   points worse to 2 points better, so two rows keep the plain loop. In cache the scheme is
   slower (8 MiB of K/V in L3: 12.2 against 8.9 ns per key), hence the flag. */
#define ONE_BLOCK 32
/* Whether this work takes the one-row streaming scheme above. */
static inline int stream_one_row(const sdpa_rows *w) { return w->rows == 1 && w->stream; }
AVX2_INLINE void prefetch_row(const void *base, size_t es, ptrdiff_t stride, size_t j, size_t n)
{
    const char *p = (const char *)base + (ptrdiff_t)j * stride * (ptrdiff_t)es;
    for (size_t b = 0; b < n * es; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
}

/* Keys [j0, j0 + nb) for all R <= 8 rows, in tiles of nk keys (8 / R, or 3 for R = 4), so each
   loaded K vector feeds R FMAs. */
AVX2_INLINE void score_direct_t(sdpa_dtype t, size_t R, const float *q, size_t d, const void *k,
                                ptrdiff_t ks, size_t j0, size_t nb, float *S, size_t lds,
                                const sdpa_rows *w, int other)
{
    const size_t nk = R == 4 ? 3 : 8 / R; /* keys per tile: see score_direct_mk */
    const size_t ke = t == SDPA_F32 ? 4 : 2, ve = w->v_type == SDPA_F32 ? 4 : 2;
    const int first = j0 == w->kv_begin; /* nothing requested this block's first V rows */
    /* other (a constant at each call, so that the loop without it is as lean as before): the
       block's V rows too (see ONE_BLOCK), inside the tiles when they lie end to end in whole
       lines, else here */
    const size_t vrow = w->dv * ve;
    const int vplain = (ptrdiff_t)vrow == w->v_stride * (ptrdiff_t)ve && vrow % 64 == 0 &&
                       ((uintptr_t)w->v & 63) == 0;
    /* the tile's nk V rows over its steps that start a line of K, an equal share each */
    const size_t starts = ((d & ~(size_t)7) * ke + 63) / 64;
    const size_t oper = starts ? (nk * vrow / 64 + starts - 1) / starts : 0;
    size_t j = 0;
    if (first)
        for (size_t i = 0; i < PF_KEYS && j0 + i < w->kv_end; i++) prefetch_row(k, ke, ks, j0 + i, d);
    for (; j < nb; j += nk) {
        const size_t n = nb - j < nk ? nb - j : nk; /* only R <= 4 has nk > 1, hence a tail */
        /* the rows PF_KEYS ahead: requested inside the tile when they all exist, else here */
        const ptrdiff_t pfo = j0 + j + n - 1 + PF_KEYS < w->kv_end ? PF_KEYS * ks : 0;
        const int oin = other && vplain && n == nk;
        const char *oth = oin ? (const char *)w->v + (j0 + j) * vrow : NULL;
        for (size_t i = 0; i < n; i++) {
            if (!pfo && j0 + j + i + PF_KEYS < w->kv_end) prefetch_row(k, ke, ks, j0 + j + i + PF_KEYS, d);
            if ((other && !oin) || (first && j + i < PF_KEYS))
                prefetch_row(w->v, ve, w->v_stride, j0 + j + i, w->dv);
        }
        if (n == nk) {
            switch (R) { /* constant shapes, so the accumulators live in registers */
            case 1:
                if (oth)
                    score_direct_mk(1, 8, t, q, d, k, ks, j0 + j, S + j, lds, pfo, oth, oth + 8 * vrow, oper);
                else
                    score_direct_mk(1, 8, t, q, d, k, ks, j0 + j, S + j, lds, pfo, NULL, NULL, 0);
                break;
            case 2: score_direct_mk(2, 4, t, q, d, k, ks, j0 + j, S + j, lds, pfo, NULL, NULL, 0); break;
            case 3: score_direct_mk(3, 2, t, q, d, k, ks, j0 + j, S + j, lds, pfo, NULL, NULL, 0); break;
            case 4: score_direct_mk(4, 3, t, q, d, k, ks, j0 + j, S + j, lds, pfo, NULL, NULL, 0); break;
            case 5: score_direct_mk(5, 1, t, q, d, k, ks, j0 + j, S + j, lds, pfo, NULL, NULL, 0); break;
            case 6: score_direct_mk(6, 1, t, q, d, k, ks, j0 + j, S + j, lds, pfo, NULL, NULL, 0); break;
            case 7: score_direct_mk(7, 1, t, q, d, k, ks, j0 + j, S + j, lds, pfo, NULL, NULL, 0); break;
            default: score_direct_mk(8, 1, t, q, d, k, ks, j0 + j, S + j, lds, pfo, NULL, NULL, 0); break;
            }
        } else {
            for (size_t i = 0; i < n; i++) {
                switch (R) {
                case 1: score_direct_mk(1, 1, t, q, d, k, ks, j0 + j + i, S + j + i, lds, pfo, NULL, NULL, 0); break;
                case 2: score_direct_mk(2, 1, t, q, d, k, ks, j0 + j + i, S + j + i, lds, pfo, NULL, NULL, 0); break;
                case 3: score_direct_mk(3, 1, t, q, d, k, ks, j0 + j + i, S + j + i, lds, pfo, NULL, NULL, 0); break;
                default: score_direct_mk(4, 1, t, q, d, k, ks, j0 + j + i, S + j + i, lds, pfo, NULL, NULL, 0); break;
                }
            }
        }
    }
}

static void score_direct_avx2(const sdpa_rows *w, size_t r0, size_t j0, size_t nb, float *S,
                              size_t lds)
{
    const size_t R = w->rows - r0, d = w->d;
    const float *q = w->q + r0 * d;
    S += r0 * lds;
#define SCORE_DIRECT_T(T)                                                                      \
    if (stream_one_row(w))                                                                     \
        score_direct_t(T, R, q, d, w->k, w->k_stride, j0, nb, S, lds, w, 1);                   \
    else                                                                                       \
        score_direct_t(T, R, q, d, w->k, w->k_stride, j0, nb, S, lds, w, 0);
    switch (w->k_type) {
    case SDPA_F16: SCORE_DIRECT_T(SDPA_F16) break;
    case SDPA_BF16: SCORE_DIRECT_T(SDPA_BF16) break;
    default: SCORE_DIRECT_T(SDPA_F32) break;
    }
#undef SCORE_DIRECT_T
}

/* acc[r][c0..c0+8nv) = alpha_r acc + sum_j P[r][j] v_j for r < mr; cnt < 8 * nv means a tail
   panel (nv == 1), read element-safely. */
typedef struct pv_prefetch {
    size_t      end;    /* kv_end: no row at or past it is requested */
    size_t      es;     /* bytes per V element */
    const char *k;      /* K, whose rows `ahead` keys on the first pass requests (with other) */
    ptrdiff_t   kstep;  /* bytes from a K row to the next */
    size_t      kbytes; /* bytes of a K row */
    size_t      ahead;  /* keys: the block's size, so the next block's rows */
} pv_prefetch;

AVX2_INLINE void pv_direct_mk(size_t mr, size_t nv, sdpa_dtype t, float *acc, size_t dv,
                              const float *alpha, const float *P, size_t lds, const void *v,
                              ptrdiff_t vs, size_t j0, size_t nb, size_t c0, size_t cnt,
                              pv_prefetch *pf, int other)
{
    __m256 a[12];
    const int full = cnt == 8 * nv;
    const __m256i mk = lanes_mask(cnt);
    for (size_t r = 0; r < mr; r++) {
        const __m256 al = _mm256_broadcast_ss(alpha + r);
        for (size_t i = 0; i < nv; i++) {
            const float *o = acc + r * dv + c0 + 8 * i;
            a[r * nv + i] = _mm256_mul_ps(al, full ? _mm256_loadu_ps(o) : _mm256_maskload_ps(o, mk));
        }
    }
    /* V and P are stepped by pointer, with no index arithmetic, which on a 16-FMA body would
       compete with the FMAs for issue slots. Keys whose row PF_KEYS ahead exists request this
       pass's columns of it (rows past kv_end are not requested: the last ones already were) */
    const char *vb = (const char *)v + ((ptrdiff_t)j0 * vs + (ptrdiff_t)c0) * (ptrdiff_t)pf->es;
    const ptrdiff_t vstep = vs * (ptrdiff_t)pf->es;
    const ptrdiff_t ahead = PF_KEYS * vstep;
    const size_t pbytes = cnt * pf->es;
    const float *pj = P;
    size_t j = 0;
    const size_t jp = j0 + PF_KEYS < pf->end ? (pf->end - j0 - PF_KEYS < nb ? pf->end - j0 - PF_KEYS : nb) : 0;
    /* the first column pass requests the K rows pf->ahead keys on, when all of this group's
       exist, with `other` (a constant at each call: the loop without it stays as it was) */
    const size_t ka = j0 + pf->ahead;
    const int kreq = other && c0 == 0 && ka < pf->end && pf->end - ka >= nb;
    const char *kr = kreq ? pf->k + (ptrdiff_t)ka * pf->kstep : NULL;
    for (int with_pf = 1; with_pf >= 0; with_pf--) {
        const size_t run_end = with_pf ? jp : nb;
        for (; j < run_end; j++, vb += vstep, pj++) {
            if (with_pf)
                for (size_t off = 0; off < pbytes; off += 64) _mm_prefetch(vb + ahead + off, _MM_HINT_T0);
            if (kreq) {
                for (size_t off = 0; off < pf->kbytes; off += 64) _mm_prefetch(kr + off, _MM_HINT_T0);
                kr += pf->kstep;
            }
            __m256 b[8];
            for (size_t i = 0; i < nv; i++)
                b[i] = full ? load8_any(vb, t, 8 * (ptrdiff_t)i) : loadn_any(vb, t, 0, cnt);
            for (size_t r = 0; r < mr; r++) {
                const __m256 p = _mm256_broadcast_ss(pj + r * lds);
                for (size_t i = 0; i < nv; i++) a[r * nv + i] = _mm256_fmadd_ps(p, b[i], a[r * nv + i]);
            }
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

/* Keys in groups of PV_GROUP, every column pass over one group before the next: the group's V
   rows stay in L1 across the passes, and the rows a pass requests PF_KEYS keys ahead arrive
   in the time of whole groups, not of one fast pass. alpha is applied by the first group
   only. Columns in panels of 8 * NV(R) (NV chosen so R * NV accumulators fill the registers),
   then 8-column panels, then one element-safe tail panel. */
#define PV_GROUP 32
#define PV_DIRECT_CASE(m, nv)                                                                  \
    case m:                                                                                    \
        for (size_t g = 0; g < nb; g += PV_GROUP) {                                            \
            const size_t ng = nb - g < PV_GROUP ? nb - g : PV_GROUP;                           \
            const float *al = g == 0 ? alpha : ones;                                           \
            size_t c = 0;                                                                      \
            for (; c + 8 * (nv) <= dv; c += 8 * (nv))                                          \
                pv_direct_mk(m, nv, t, acc, dv, al, P + g, lds, v, vs, j0 + g, ng, c, 8 * (nv), &pf, other); \
            for (; c + 8 <= dv; c += 8)                                                        \
                pv_direct_mk(m, 1, t, acc, dv, al, P + g, lds, v, vs, j0 + g, ng, c, 8, &pf, other);  \
            if (c < dv) pv_direct_mk(m, 1, t, acc, dv, al, P + g, lds, v, vs, j0 + g, ng, c, dv - c, &pf, other); \
        }                                                                                      \
        break;

AVX2_INLINE void pv_direct_t(sdpa_dtype t, size_t R, float *acc, size_t dv, const float *alpha,
                             const float *P, size_t lds, const void *v, ptrdiff_t vs, size_t j0,
                             size_t nb, pv_prefetch pf, int other)
{
    static const float ones[DIRECT_MAX_ROWS] = {1, 1, 1, 1, 1, 1, 1, 1};
    switch (R) {
        PV_DIRECT_CASE(1, 8)
        PV_DIRECT_CASE(2, 4)
        PV_DIRECT_CASE(3, 4)
        PV_DIRECT_CASE(4, 3)
        PV_DIRECT_CASE(5, 2)
        PV_DIRECT_CASE(6, 2)
        PV_DIRECT_CASE(7, 1)
    default:
        PV_DIRECT_CASE(8, 1)
    }
}

static void pv_direct_avx2(const sdpa_rows *w, size_t r0, size_t j0, size_t nb, const float *alpha,
                           const float *S, size_t lds)
{
    const size_t R = w->rows - r0, dv = w->dv;
    float *acc = w->acc + r0 * dv;
    S += r0 * lds;
    alpha += r0;
    const size_t ke = w->k_type == SDPA_F32 ? 4 : 2;
    const pv_prefetch pf = {w->kv_end, w->v_type == SDPA_F32 ? 4 : 2,
                            (const char *)w->k, w->k_stride * (ptrdiff_t)ke,
                            w->d * ke, nb};
#define PV_DIRECT_T(T)                                                                         \
    if (stream_one_row(w))                                                                     \
        pv_direct_t(T, R, acc, dv, alpha, S, lds, w->v, w->v_stride, j0, nb, pf, 1);           \
    else                                                                                       \
        pv_direct_t(T, R, acc, dv, alpha, S, lds, w->v, w->v_stride, j0, nb, pf, 0);
    switch (w->v_type) {
    case SDPA_F16: PV_DIRECT_T(SDPA_F16) break;
    case SDPA_BF16: PV_DIRECT_T(SDPA_BF16) break;
    default: PV_DIRECT_T(SDPA_F32) break;
    }
#undef PV_DIRECT_T
}

/* --- the fused online softmax ---------------------------------------------------------------- */

/* exp for the fused softmax, x = s - m <= 0 (or -inf, or NaN): the reduction and polynomial of
   exp8_avx2, so the same bits wherever exp(x) is a normal float, but lanes with x < EXP_CUT give
   0 without being computed. Why: on Intel cores an operation with a subnormal or underflowing
   result takes a microcode assist (measured here: 133 against 9 cycles per vector), and every
   masked key (-inf) and every key far below the row max would take it. The weight dropped is
   below exp(-87) = 1.6e-38 against the max key's weight 1 in l, far under the rounding of l.
   With x >= -87, n >= -126, so 2^n is one normal scale and p * 2^n is exact (as the two-step
   scale of exp8_avx2 is for normal results). NaN: the compare is false and max(lo, x) returns
   x, so NaN reaches p. */
#define EXP_CUT -87.0f

AVX2_INLINE __m256 exp8_cut_avx2(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(EXP_CUT);
    const __m256 dead = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(lo, x);
    /* round(x log2 e) by adding 1.5 * 2^23: the sum rounds to an integer (to nearest even, as
       _mm256_round_ps would, in the default rounding mode every operation here assumes) whose
       two's complement sits in the low mantissa bits, so the
       exponent field of 2^n is one integer add and shift away; shorter than round + convert,
       and the exp's dependency chain is what limits this loop */
    const __m256 magic = _mm256_set1_ps(0x1.8p23f);
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), magic);
    const __m256 n = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e430p-1f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-0x1.05c610p-29f), r);
    __m256 p = _mm256_set1_ps(0x1.687c22p-10f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.123b8ep-7f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.555b58p-5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.55548ep-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.fffff8p-2f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(r, r), p, r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(dead, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* One row of one block: keys [0, nv) of the block are visible, [nv, nb) masked (1 <= nv <= nb).
   The sdpa.h online-softmax contract over the visible keys, p = 0 written for the masked ones
   (never computed: see exp8_cut_avx2); returns alpha. Whole vectors are written up to nb rounded
   up to 8, inside the row's lds floats. */
AVX2_INLINE float softmax_fused_avx2(float *s, size_t nv, size_t nb, float *m, float *l,
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
        const __m256 x = _mm256_blendv_ps(ninf, _mm256_maskload_ps(s + j, mk), _mm256_castsi256_ps(mk));
        vm1 = _mm256_max_ps(x, vm1);
    }
    const float bm = hmax8(_mm256_max_ps(vm0, vm1));
    const float m_old = *m;
    const float m_new = m_old > bm ? m_old : bm;
    float alpha = 1.0f, msub = 0.0f;
    if (m_new != -INFINITY) {
        msub = m_new;
        alpha = _mm256_cvtss_f32(exp8_avx2(_mm256_set1_ps(m_old - m_new)));
    }
    const __m256 vms = _mm256_set1_ps(msub);
    __m256 sum = _mm256_setzero_ps();
    for (j = 0; j + 8 <= nv; j += 8) {
        const __m256 p0 = exp8_cut_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), vms));
        _mm256_storeu_ps(s + j, p0);
        sum = _mm256_add_ps(sum, p0);
    }
    if (tail) {
        __m256 p0 = exp8_cut_avx2(_mm256_sub_ps(_mm256_maskload_ps(s + j, mk), vms));
        p0 = _mm256_and_ps(p0, _mm256_castsi256_ps(mk));
        _mm256_storeu_ps(s + j, p0);
        sum = _mm256_add_ps(sum, p0);
        j += 8;
    }
    for (; j < nb; j += 8) _mm256_storeu_ps(s + j, _mm256_setzero_ps());
    *m = m_new;
    *l = alpha * *l + hsum8(sum);
    return alpha;
}

/* --- the loop --------------------------------------------------------------------------------- */

/* The same bookkeeping as the generic rows loop: rows before r0 see none of the current block
   (limits are non-decreasing in r), keys past a row's limit inside the block get weight exactly
   0 (written by the softmax, never exponentiated); nothing at or past kv_end is read. */
static void rows_avx2(const sdpa_rows *w)
{
    const size_t R = w->rows, d = w->d, dv = w->dv;
    const size_t B = stream_one_row(w) && eff_block(w->block) > ONE_BLOCK ? ONE_BLOCK
                                                                          : eff_block(w->block);
    const size_t lds = round16(B);
    const int gemm = R > DIRECT_MAX_ROWS;
    float *S = w->ws;
    float *alpha = S + R * lds;
    float *kp = alpha + round16(R);
    float *vp = kp + lds * d;
    float *qp = vp + lds * round16(dv);
    float *rm = qp + round16((R + MR - 1) / MR * MR * d);
    size_t r0 = 0;
    if (gemm) pack_q_avx2(w->q, R, d, qp);

    for (size_t j0 = w->kv_begin; j0 < w->kv_end; j0 += B) {
        const size_t nb = (w->kv_end - j0 < B) ? w->kv_end - j0 : B;
        while (r0 < R && w->kv_limit[r0] <= j0) r0++;
        if (r0 == R) break;
        if (gemm) {
            pack_k_avx2(w, j0, nb, kp);
            /* from r0's group: rows before r0 in it get scores that are never used */
            score_tile_avx2(qp, r0 / MR * MR, R, d, kp, nb, S, lds, rm, w->kv_limit, j0);
        } else {
            score_direct_avx2(w, r0, j0, nb, S, lds);
        }
        for (size_t r = r0; r < R; r++) {
            float *s = S + r * lds;
            const size_t lim = w->kv_limit[r];
            const size_t nv = lim < j0 + nb ? lim - j0 : nb;
            /* the score kernel's max is exact when the row sees every key of the block and
               the block has no zero padding keys */
            const float *rmax = gemm && nv == nb && nb % NR == 0 ? rm + 8 * r : NULL;
            alpha[r] = softmax_fused_avx2(s, nv, nb, &w->m[r], &w->l[r], rmax);
        }
        if (gemm) {
            const size_t c_pack = pack_v_avx2(w, j0, nb, vp);
            const float *vd = (const float *)w->v + (ptrdiff_t)j0 * w->v_stride;
            pv_tile_avx2(w->acc + r0 * dv, dv, alpha + r0, S + r0 * lds, lds, R - r0, vd,
                         w->v_stride, c_pack, vp, nb, w->kv_limit + r0, j0);
        } else {
            pv_direct_avx2(w, r0, j0, nb, alpha, S, lds);
        }
    }
}

const sdpa_kernels sdpa_kernels_avx2 = {
    .score_f32 = score_f32_avx2,
    .softmax_online_f32 = softmax_online_f32_avx2,
    .accumulate_f32 = accumulate_f32_avx2,
    .exp_f32 = exp_f32_avx2,
    /* stated bound over every float x <= 0 (ULP of the exact result, at least 2^-149); the
       exhaustive check against double exp over [-104, 0] measures 1.012 */
    .exp_max_ulp = 1.5,
    .rows = rows_avx2,
    .ws_floats = ws_floats_avx2,
};
