/* prims.c -- AVX2 primitives (score, online softmax, accumulate, exp) and the kernel table */
#include "avx2.h"

void sdpa_exp_f32_avx2(const float *x, float *y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp_avx2(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i mk = lanes_mask(n - i);
        _mm256_maskstore_ps(y + i, mk, exp_avx2(_mm256_maskload_ps(x + i, mk)));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Primitive: scores                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Dot products of q with nk <= 8 keys (k rows at stride ks), one accumulator per key; lane j
   of the result is key j's dot product (0 for j >= nk). */
SDPA_INLINE __m256 dot_keys_avx2(const float *q, const float *k, size_t ks, size_t d, size_t nk)
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

void sdpa_score_f32_avx2(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                         float scale, float *s)
{
    const __m256 sc = _mm256_set1_ps(scale);
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(s + j,
                         _mm256_mul_ps(sc, dot_keys_avx2(q, k + j * k_stride, k_stride, d, 8)));
    if (j < n) {
        const __m256 v = dot_keys_avx2(q, k + j * k_stride, k_stride, d, n - j);
        _mm256_maskstore_ps(s + j, lanes_mask(n - j), _mm256_mul_ps(sc, v));
    }
}

float sdpa_softmax_online_f32_avx2(float *s, size_t n, float *m, float *l)
{
    return softmax_avx2(0, s, n, n, m, l, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Primitive: accumulate                                                                      */
/* ------------------------------------------------------------------------------------------ */
/* One panel of up to 32 output columns: o = alpha*o + sum_j p_j v_j, keys alternating between
   two accumulator sets so that the FMA latency chain is halved. full: cols == 32, no masks. */
SDPA_INLINE void accumulate_panel_avx2(float *o, float alpha, const float *p, const float *v,
                                       size_t vs, size_t n, size_t cols, int full)
{
    __m256i mk[4];
    __m256 a[4], b[4];
    const __m256 al = _mm256_set1_ps(alpha);
    for (int i = 0; i < 4; i++) {
        const size_t rem = cols > 8u * i ? cols - 8u * i : 0;
        mk[i] = lanes_mask(rem);
        a[i] = _mm256_mul_ps(al, full ? _mm256_loadu_ps(o + 8 * i)
                                      : _mm256_maskload_ps(o + 8 * i, mk[i]));
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

void sdpa_accumulate_f32_avx2(float *o, float alpha, const float *p, const float *v,
                              size_t v_stride, size_t n, size_t dv)
{
    size_t c = 0;
    for (; c + 32 <= dv; c += 32) accumulate_panel_avx2(o + c, alpha, p, v + c, v_stride, n, 32, 1);
    if (c < dv) accumulate_panel_avx2(o + c, alpha, p, v + c, v_stride, n, dv - c, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* The fused kernel's entry and table                                                          */
/* ------------------------------------------------------------------------------------------ */

#include "kernel_def.h"

SDPA_DEFINE_PATHS(avx2)
SDPA_DEFINE_KERNELS_EXPORTED(avx2, EXP_MAX_ULP);
