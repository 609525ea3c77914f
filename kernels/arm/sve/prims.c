/* prims.c -- SVE primitives (score, online softmax, accumulate, exp) and the kernel table */
#include "sve.h"

static void exp_f32_sve(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i += svcntw()) {
        const svbool_t pg = svwhilelt_b32_u64(i, n);
        svst1_f32(pg, y + i, exp_sve(svld1_f32(pg, x + i)));
    }
}

/* Four keys at a time, four independent FMA chains over d; the d tail is a predicated step
   (inactive lanes load as 0 and leave the merging FMA's accumulator as it was). */
static void score_f32_sve(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                          float scale, float *s)
{
    const svbool_t all = svptrue_b32();
    const uint64_t vl = svcntw();
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *k0 = k + j * k_stride, *k1 = k0 + k_stride, *k2 = k1 + k_stride,
                    *k3 = k2 + k_stride;
        svfloat32_t a0 = svdup_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
        for (size_t c = 0; c < d; c += vl) {
            const svbool_t pg = svwhilelt_b32_u64(c, d);
            const svfloat32_t qv = svld1_f32(pg, q + c);
            a0 = svmla_f32_m(pg, a0, qv, svld1_f32(pg, k0 + c));
            a1 = svmla_f32_m(pg, a1, qv, svld1_f32(pg, k1 + c));
            a2 = svmla_f32_m(pg, a2, qv, svld1_f32(pg, k2 + c));
            a3 = svmla_f32_m(pg, a3, qv, svld1_f32(pg, k3 + c));
        }
        s[j] = scale * svaddv_f32(all, a0);
        s[j + 1] = scale * svaddv_f32(all, a1);
        s[j + 2] = scale * svaddv_f32(all, a2);
        s[j + 3] = scale * svaddv_f32(all, a3);
    }
    for (; j < n; j++) {
        const float *kj = k + j * k_stride;
        svfloat32_t a0 = svdup_n_f32(0.0f);
        for (size_t c = 0; c < d; c += vl) {
            const svbool_t pg = svwhilelt_b32_u64(c, d);
            a0 = svmla_f32_m(pg, a0, svld1_f32(pg, q + c), svld1_f32(pg, kj + c));
        }
        s[j] = scale * svaddv_f32(all, a0);
    }
}

static float softmax_online_f32_sve(float *s, size_t n, float *m, float *l)
{
    return softmax_sve(s, n, m, l);
}

static void accumulate_f32_sve(float *o, float alpha, const float *p, const float *v,
                               size_t v_stride, size_t n, size_t dv)
{
    const svbool_t all = svptrue_b32();
    const uint64_t vl = svcntw();
    /* two vectors of columns stay in registers across all n value rows */
    for (size_t c = 0; c < dv; c += 2 * vl) {
        const svbool_t p0 = svwhilelt_b32_u64(c, dv), p1 = svwhilelt_b32_u64(c + vl, dv);
        svfloat32_t a0 = svmul_n_f32_x(all, svld1_f32(p0, o + c), alpha);
        svfloat32_t a1 = svmul_n_f32_x(all, svld1_f32(p1, o + c + vl), alpha);
        for (size_t j = 0; j < n; j++) {
            const float *vj = v + j * v_stride + c;
            a0 = svmla_n_f32_x(all, a0, svld1_f32(p0, vj), p[j]);
            a1 = svmla_n_f32_x(all, a1, svld1_f32(p1, vj + vl), p[j]);
        }
        svst1_f32(p0, o + c, a0);
        svst1_f32(p1, o + c + vl, a1);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The fused kernel's entry and table                                                          */
/* ------------------------------------------------------------------------------------------ */

/* one path for every unit: the packed one */
static void rows_sve(const sdpa_rows *w) { sdpa_packed_sve(w); }
static size_t ws_floats_sve(size_t rows, size_t d, size_t dv, size_t block)
{
    return sdpa_packed_ws_sve(rows, d, dv, block);
}

#include "kernel_def.h"

SDPA_DEFINE_KERNELS(sve, EXP_MAX_ULP);
