/* blas_attn.c -- the unfused baseline: attention as sgemm + row softmax + sgemm with OpenBLAS */
/*
 * The textbook way to run attention with a BLAS: materialise the whole q_len x kv_len score
 * matrix per (batch, head), softmax it row by row, multiply by V. It is what libsdpa's fused,
 * streamed kernels are measured against: the score matrix costs q_len * kv_len * 4 bytes of
 * extra memory and two passes over it, where libsdpa keeps one tile.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>

#include "bench.h"

void bench_blas_set_threads(int n) { openblas_set_num_threads(n); }

const char *bench_blas_corename(void) { return openblas_get_corename(); }

const char *bench_blas_config(void) { return openblas_get_config(); }

void bench_blas_attention(const sdpa_params *p, const float *q, const float *k, const float *v,
                          float *o, float *scores)
{
    const size_t n = p->q_len, m = p->kv_len, d = p->head_dim;
    const size_t dv = p->v_dim ? p->v_dim : d;
    const size_t group = p->q_heads / p->kv_heads;
    const float scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)d);
    for (size_t b = 0; b < p->batch; b++)
        for (size_t h = 0; h < p->q_heads; h++) {
            const size_t kvh = h / group;
            const float *qh = q + (b * p->q_heads + h) * n * d;
            const float *kh = k + (b * p->kv_heads + kvh) * m * d;
            const float *vh = v + (b * p->kv_heads + kvh) * m * dv;
            float *oh = o + (b * p->q_heads + h) * n * dv;
            /* S = scale * Q K^T, all n x m scores */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)m, (int)d, scale, qh,
                        (int)d, kh, (int)d, 0.0f, scores, (int)m);
            /* P = softmax(S) per row; query i sees key j iff j <= i + m - n */
            for (size_t i = 0; i < n; i++) {
                float *s = scores + i * m;
                size_t vis = m;
                if (p->causal) {
                    long long lim = (long long)i + (long long)m - (long long)n + 1;
                    vis = lim <= 0 ? 0 : (size_t)lim < m ? (size_t)lim : m;
                }
                float mx = -INFINITY, sum = 0.0f;
                for (size_t j = 0; j < vis; j++) mx = s[j] > mx ? s[j] : mx;
                for (size_t j = 0; j < vis; j++) {
                    s[j] = expf(s[j] - mx);
                    sum += s[j];
                }
                const float inv = vis ? 1.0f / sum : 0.0f;
                for (size_t j = 0; j < vis; j++) s[j] *= inv;
                for (size_t j = vis; j < m; j++) s[j] = 0.0f;
            }
            /* O = P V */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)dv, (int)m, 1.0f,
                        scores, (int)m, vh, (int)dv, 0.0f, oh, (int)dv);
        }
}
