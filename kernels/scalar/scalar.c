/* scalar.c -- the reference implementation in portable C (no intrinsics): the oracle SIMD paths are
 * held to */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "convert.h"
#include "kernel_table.h"
#include "kernel_util.h"
#include "variants.h"

/* exp for the reference: Cody-Waite reduction x = n ln2 + r carried out in double, a degree-8
   Taylor polynomial for e^r on |r| <= ln2/2 (truncation error below 2^-34 relative), times 2^n
   built as a double (n >= -151 here, a normal double, so the product is exact). The double
   result is rounded once to float -- to a correct subnormal where it is one -- so the error is
   at most 0.5 ULP plus the double error: stated bound 1 ULP over x <= 0 (measured: 0.503). */
static float exp_scalar_one(float xf)
{
    if (xf != xf) return xf;       /* NaN */
    if (xf < -104.0f) return 0.0f; /* below half the least subnormal, and -inf */
    if (xf > 88.8f) return INFINITY;
    const double x = xf;
    const double shifter = 6755399441055744.0; /* 1.5 * 2^52: adding it rounds to an integer */
    const double n = (x * 1.4426950408889634 + shifter) - shifter;
    const double r = (x - n * 0.693145751953125) - n * 1.4286068203094173e-06;
    double p = 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    const uint64_t bits = (uint64_t)((int64_t)n + 1023) << 52;
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return (float)(p * scale);
}

static void exp_f32_scalar(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = exp_scalar_one(x[i]);
}

static void score_f32_scalar(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                             float scale, float *s)
{
    for (size_t j = 0; j < n; j++) {
        const float *kj = k + j * k_stride;
        float acc = 0.0f;
        for (size_t c = 0; c < d; c++) acc += q[c] * kj[c];
        s[j] = scale * acc;
    }
}

static float softmax_online_f32_scalar(float *s, size_t n, float *m, float *l)
{
    float mx = *m;
    /* A NaN score makes the max NaN, and a NaN max stays (no comparison with it is true), so
       p, l and alpha are NaN from then on: a NaN in an attended input propagates. */
    for (size_t j = 0; j < n; j++)
        if (s[j] > mx || s[j] != s[j]) mx = s[j];
    if (mx == -INFINITY) { /* nothing but -inf so far: weights 0, state unchanged */
        for (size_t j = 0; j < n; j++) s[j] = 0.0f;
        return 1.0f;
    }
    const float alpha = exp_scalar_one(*m - mx); /* exp(-inf) = 0 for a fresh state */
    float sum = 0.0f;
    for (size_t j = 0; j < n; j++) {
        s[j] = exp_scalar_one(s[j] - mx);
        sum += s[j];
    }
    *m = mx;
    *l = alpha * *l + sum;
    return alpha;
}

static void accumulate_f32_scalar(float *o, float alpha, const float *p, const float *v,
                                  size_t v_stride, size_t n, size_t dv)
{
    for (size_t c = 0; c < dv; c++) o[c] *= alpha;
    for (size_t j = 0; j < n; j++) {
        const float *vj = v + j * v_stride;
        const float pj = p[j];
        for (size_t c = 0; c < dv; c++) o[c] += pj * vj[c];
    }
}

/* Fast scores (sdpa_rows.qq): s[j] = sum over blocks of qd_b (d_b dot_b + m_b sum_b q), the
   dot product of row r's quants with key j's integer quants and the sum of row r's quants
   exact in int32, K in any block format (the reference for that mode, see sdpa.h). */
static void score_q8_scalar(const sdpa_rows *w, size_t r, size_t j0, size_t n, float *s)
{
    const size_t d = w->d, nb = d / SDPA_QK, bb = sdpa_block_bytes(w->k_type);
    const int8_t *q = w->qq + r * d;
    const float *qd = w->qd + r * nb;
    const bool has_min = sdpa_dtype_has_min(w->k_type);
    for (size_t j = 0; j < n; j++) {
        const unsigned char *k = (const unsigned char *)w->k +
                                 sdpa_off_bytes(w->k_type, (ptrdiff_t)(j0 + j) * w->k_stride);
        float acc = 0.0f;
        for (size_t b = 0; b < nb; b++, k += bb) {
            const int8_t *qb = q + b * SDPA_QK;
            int8_t kq[SDPA_QK];
            float dk, mk;
            sdpa_block_quants(w->k_type, k, kq, &dk, &mk);
            int32_t dot = 0, sum = 0;
            for (int i = 0; i < SDPA_QK; i++) dot += qb[i] * kq[i], sum += qb[i];
            acc += qd[b] * dk * (float)dot;
            if (has_min) acc += qd[b] * mk * (float)sum;
        }
        s[j] = acc;
    }
}

/* Scratch: K block [block][d], V block [block][dv], one score row [block]. */
static size_t ws_floats_scalar(size_t rows, size_t d, size_t dv, size_t block)
{
    (void)rows;
    return block * (d + dv + 1);
}

/* The fused kernel, plainly: per block of keys, convert K and V exactly to f32 once, then
   for every row that sees part of the block, score, modifiers, online softmax and accumulate. */
static void rows_scalar(const sdpa_rows *w)
{
    const size_t d = w->d, dv = w->dv, B = w->block;
    const bool var = sdpa_is_variant(w);
    float *kb = w->ws, *vb = kb + B * d, *s = vb + B * dv;
    for (size_t j0 = w->kv_begin; j0 < w->kv_end; j0 += B) {
        const size_t nb = w->kv_end - j0 < B ? w->kv_end - j0 : B;
        if (var && sdpa_block_hidden(w, 0, w->rows, j0, nb)) continue;
        for (size_t j = 0; j < nb; j++) {
            sdpa_row_to_f32(w->k, w->k_type, w->k_stride, j0 + j, d, kb + j * d);
            sdpa_row_to_f32(w->v, w->v_type, w->v_stride, j0 + j, dv, vb + j * dv);
        }
        for (size_t r = 0; r < w->rows; r++) {
            const size_t lim = w->kv_limit[r];
            if (lim <= j0) continue;
            const size_t n = lim - j0 < nb ? lim - j0 : nb;
            if (w->qq)
                score_q8_scalar(w, r, j0, n, s);
            else
                score_f32_scalar(w->q + r * d, kb, d, n, d, 1.0f, s);
            if (w->score_mul) sdpa_scale_scores(s, n, w->score_mul[r]);
            const bool hidden = var && sdpa_modify_scores(w, r, j0, s, n);
            const float alpha = softmax_online_f32_scalar(s, n, &w->m[r], &w->l[r]);
            if (hidden) /* hidden keys are skipped, not weighted by 0 */
                sdpa_pv_row_exact(w, r, j0, n, alpha, s, 1);
            else
                accumulate_f32_scalar(w->acc + r * dv, alpha, s, vb, dv, n, dv);
        }
    }
}

/* every unit: K and V of any storage type are converted exactly, block by block */
#define QUANT_ROWS SIZE_MAX
#include "kernel_def.h"

SDPA_DEFINE_KERNELS(scalar, 1.0);
