/* vnni.c -- avx512-vnni: the avx512 implementation, with fast int8 scores by vpdpbusd (AVX512-VNNI) */
#define SDPA_QD_VNNI 1
#include "decode_q.c"

/* Everything but fast scores is the avx512 implementation's own code. */
extern const sdpa_kernels sdpa_kernels_avx512;

static void score_f32_avx512_vnni(const float *q, const float *k, size_t k_stride, size_t n,
                                  size_t d, float scale, float *s)
{
    sdpa_kernels_avx512.score_f32(q, k, k_stride, n, d, scale, s);
}
static float softmax_online_f32_avx512_vnni(float *s, size_t n, float *m, float *l)
{
    return sdpa_kernels_avx512.softmax_online_f32(s, n, m, l);
}
static void accumulate_f32_avx512_vnni(float *o, float alpha, const float *p, const float *v,
                                       size_t v_stride, size_t n, size_t dv)
{
    sdpa_kernels_avx512.accumulate_f32(o, alpha, p, v, v_stride, n, dv);
}
static void exp_f32_avx512_vnni(const float *x, float *y, size_t n)
{
    sdpa_kernels_avx512.exp_f32(x, y, n);
}
static void rows_avx512_vnni(const sdpa_rows *w)
{
    if (w->qq && w->rows <= DECODE_MAX_ROWS)
        sdpa_decode_q_avx512_vnni(w);
    else
        sdpa_kernels_avx512.rows(w);
}
static size_t ws_floats_avx512_vnni(size_t rows, size_t d, size_t dv, size_t block)
{
    return sdpa_kernels_avx512.ws_floats(rows, d, dv, block);
}

#include "kernel_def.h"

SDPA_DEFINE_KERNELS(avx512_vnni, EXP_MAX_ULP);
