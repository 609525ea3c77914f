/* prims.c -- AVX-512 primitives (score, online softmax, accumulate, exp) and the kernel table */
#include "avx512.h"

/* ------------------------------------------------------------------------------------------ */
/* Dot products of one query with 16 keys                                                     */
/* ------------------------------------------------------------------------------------------ */

/* a[perm(i)] += dot(q[0..16*NC), k row i) over NC chunks of 16, the last masked by mlast: the
   query chunks stay in registers and one pointer walks the 16 key rows. */
SDPA_INLINE void dot16_acc(int NC, __m512 *a, const float *q, const float *k, ptrdiff_t ks,
                           __mmask16 mlast)
{
    __m512 qv[8];
    SDPA_UNROLL for (int t = 0; t < NC; t++) qv[t] =
        t < NC - 1 ? _mm512_loadu_ps(q + 16 * t) : _mm512_maskz_loadu_ps(mlast, q + 16 * t);
    SDPA_UNROLL for (int i = 0; i < 16; i++)
    {
        const float *kr = k + i * ks;
        __m512 s0 = a[PERM16(i)], s1 = _mm512_setzero_ps();
        /* two chains per key: latency over the chunks halves, the 16 keys overlap the rest */
        SDPA_UNROLL for (int t = 0; t < NC; t++)
        {
            const __m512 kv = t < NC - 1 ? _mm512_loadu_ps(kr + 16 * t)
                                         : _mm512_maskz_loadu_ps(mlast, kr + 16 * t);
            if (t & 1)
                s1 = _mm512_fmadd_ps(qv[t], kv, s1);
            else
                s0 = _mm512_fmadd_ps(qv[t], kv, s0);
        }
        a[PERM16(i)] = _mm512_add_ps(s0, s1);
    }
}

/* out lane i = dot(q[0..d), k row i) for the 16 f32 key rows at k + i * ks. */
static __m512 score_avx512_1x16(const float *q, const float *k, ptrdiff_t ks, size_t d)
{
    __m512 a[16];
    SDPA_UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
    size_t c = 0;
    for (; d - c > 128; c += 128) dot16_acc(8, a, q + c, k + c, ks, 0xFFFF);
    const size_t rem = d - c, nc = (rem + 15) / 16;
    const __mmask16 ml = lanes(rem - 16 * (nc - 1));
#define DOT16(n) dot16_acc(n, a, q + c, k + c, ks, ml)
    switch (nc) {
        SDPA_CASES7(DOT16)
    default:
        DOT16(8);
        break;
    }
#undef DOT16
    return reduce16(a);
}

/* One dot product (for key counts that do not fill a tile of 16). */
static inline float dot1_f32(const float *q, const float *k, size_t d)
{
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    size_t c = 0;
    for (; c + 32 <= d; c += 32) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(k + c), a);
        b = _mm512_fmadd_ps(_mm512_loadu_ps(q + c + 16), _mm512_loadu_ps(k + c + 16), b);
    }
    for (; c < d; c += 16) {
        const __mmask16 m = lanes(d - c);
        a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + c), _mm512_maskz_loadu_ps(m, k + c), a);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}

/* ------------------------------------------------------------------------------------------ */
/* The three primitives                                                                        */
/* ------------------------------------------------------------------------------------------ */

void sdpa_score_f32_avx512(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                           float scale, float *s)
{
    const __m512 sc = _mm512_set1_ps(scale);
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(
            s + j,
            _mm512_mul_ps(score_avx512_1x16(q, k + j * k_stride, (ptrdiff_t)k_stride, d), sc));
    for (; j < n; j++) s[j] = dot1_f32(q, k + j * k_stride, d) * scale;
}

float sdpa_softmax_online_f32_avx512(float *s, size_t n, float *m, float *l)
{
    return softmax_avx512(0, s, n, m, l);
}

void sdpa_accumulate_f32_avx512(float *o, float alpha, const float *p, const float *v,
                                size_t v_stride, size_t n, size_t dv)
{
    const __m512 al = _mm512_set1_ps(alpha);
    for (size_t c = 0; c < dv; c += 64) {
        __mmask16 mk[4];
        __m512 a[4];
        SDPA_UNROLL for (int t = 0; t < 4; t++)
        {
            mk[t] = c + 16 * t < dv ? lanes(dv - c - 16 * t) : 0;
            a[t] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[t], o + c + 16 * t), al);
        }
        for (size_t j = 0; j < n; j++) {
            const __m512 pj = _mm512_set1_ps(p[j]);
            const float *vr = v + j * v_stride + c;
            SDPA_UNROLL for (int t = 0; t < 4; t++) a[t] =
                _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(mk[t], vr + 16 * t), a[t]);
        }
        SDPA_UNROLL for (int t = 0; t < 4; t++) _mm512_mask_storeu_ps(o + c + 16 * t, mk[t], a[t]);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* exp over an array, and the fused kernel's entry                                             */
/* ------------------------------------------------------------------------------------------ */

void sdpa_exp_f32_avx512(const float *x, float *y, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp_avx512(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = lanes(n - i);
        _mm512_mask_storeu_ps(y + i, m, exp_avx512(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

#include "kernel_def.h"

SDPA_DEFINE_PATHS(avx512)
SDPA_DEFINE_KERNELS_EXPORTED(avx512, EXP_MAX_ULP);
