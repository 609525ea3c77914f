/* prims.c -- NEON primitives (score, online softmax, accumulate, exp) and the kernel table */
#include "neon.h"

static void exp_f32_neon(const float *x, float *y, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, exp_neon(vld1q_f32(x + i)));
    if (i < n) { /* the tail through a padded copy: never touches memory past x[n-1] / y[n-1] */
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        memcpy(t, x + i, (n - i) * sizeof *t);
        vst1q_f32(t, exp_neon(vld1q_f32(t)));
        memcpy(y + i, t, (n - i) * sizeof *t);
    }
}

static void score_f32_neon(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                           float scale, float *s)
{
    score_neon_1xn(q, k, k_stride, n, d, scale, s);
}

static float softmax_online_f32_neon(float *s, size_t n, float *m, float *l)
{
    return softmax_neon(s, n, m, l);
}

static void accumulate_f32_neon(float *o, float alpha, const float *p, const float *v,
                                size_t v_stride, size_t n, size_t dv)
{
    size_t c = 0;
    /* 16 columns at a time stay in four registers across all n value rows */
    for (; c + 16 <= dv; c += 16) {
        float32x4_t a0 = vmulq_n_f32(vld1q_f32(o + c), alpha);
        float32x4_t a1 = vmulq_n_f32(vld1q_f32(o + c + 4), alpha);
        float32x4_t a2 = vmulq_n_f32(vld1q_f32(o + c + 8), alpha);
        float32x4_t a3 = vmulq_n_f32(vld1q_f32(o + c + 12), alpha);
        for (size_t j = 0; j < n; j++) {
            const float *vj = v + j * v_stride + c;
            a0 = vfmaq_n_f32(a0, vld1q_f32(vj), p[j]);
            a1 = vfmaq_n_f32(a1, vld1q_f32(vj + 4), p[j]);
            a2 = vfmaq_n_f32(a2, vld1q_f32(vj + 8), p[j]);
            a3 = vfmaq_n_f32(a3, vld1q_f32(vj + 12), p[j]);
        }
        vst1q_f32(o + c, a0);
        vst1q_f32(o + c + 4, a1);
        vst1q_f32(o + c + 8, a2);
        vst1q_f32(o + c + 12, a3);
    }
    for (; c + 4 <= dv; c += 4) {
        float32x4_t a0 = vmulq_n_f32(vld1q_f32(o + c), alpha);
        for (size_t j = 0; j < n; j++) a0 = vfmaq_n_f32(a0, vld1q_f32(v + j * v_stride + c), p[j]);
        vst1q_f32(o + c, a0);
    }
    if (c < dv) {
        const size_t r = dv - c;
        float32x4_t a0 = vmulq_n_f32(load_partial_neon(o + c, r, 0.0f), alpha);
        for (size_t j = 0; j < n; j++)
            a0 = vfmaq_n_f32(a0, load_partial_neon(v + j * v_stride + c, r, 0.0f), p[j]);
        store_partial_neon(o + c, r, a0);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The fused kernel's entry and table                                                          */
/* ------------------------------------------------------------------------------------------ */

/* one path for every unit: the packed one */
static void rows_neon(const sdpa_rows *w) { sdpa_packed_neon(w); }
static size_t ws_floats_neon(size_t rows, size_t d, size_t dv, size_t block)
{
    return sdpa_packed_ws_neon(rows, d, dv, block);
}

#include "kernel_def.h"

SDPA_DEFINE_KERNELS(neon, EXP_MAX_ULP);
