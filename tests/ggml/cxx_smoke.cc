// cxx_smoke.cc -- sdpa_ggml.h compiled as C++ (as llama.cpp would): one small graph through it
#include <cmath>
#include <cstring>

#include "ggml-cpu.h"
#include "ggml.h"
#include "sdpa_ggml.h"

// Builds a decode step with a mask, ALiBi and sinks through the adapter and through ggml's own
// op, runs both on 2 threads and returns the largest difference (a negative value: refused).
extern "C" double sdpa_ggml_cxx_smoke(void)
{
    ggml_init_params ip = {size_t(64) << 20, nullptr, false};
    ggml_context *ctx = ggml_init(ip);
    const int D = 64, N = 2, H = 4, Hk = 2, KV = 50;
    ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, N, H, 1);
    ggml_tensor *k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, D, KV, Hk, 1);
    ggml_tensor *v = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, D, KV, Hk, 1);
    ggml_tensor *m = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, KV, 16, 1, 1);
    ggml_tensor *s = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, H);
    for (int i = 0; i < D * N * H; i++) static_cast<float *>(q->data)[i] = std::sin(0.1f * i);
    for (int i = 0; i < D * KV * Hk; i++) {
        static_cast<ggml_fp16_t *>(k->data)[i] = ggml_fp32_to_fp16(std::cos(0.07f * i));
        static_cast<ggml_fp16_t *>(v->data)[i] = ggml_fp32_to_fp16(std::sin(0.03f * i));
    }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < KV; j++)
            static_cast<ggml_fp16_t *>(m->data)[i * KV + j] =
                ggml_fp32_to_fp16(j <= i + KV - N ? -float(i + KV - N - j) : -INFINITY);
    for (int h = 0; h < H; h++) static_cast<float *>(s->data)[h] = 0.5f * h;
    ggml_tensor *ad = sdpa_ggml_flash_attn_ext_sinks(ctx, q, k, v, m, s, 0.125f, 8.0f, 0.0f);
    double worst = -1;
    if (ad) {
        ggml_tensor *ref = ggml_flash_attn_ext(ctx, q, k, v, m, 0.125f, 8.0f, 0.0f);
        ggml_flash_attn_ext_add_sinks(ref, s);
        ggml_cgraph *g = ggml_new_graph(ctx);
        ggml_build_forward_expand(g, ref);
        ggml_build_forward_expand(g, ad);
        ggml_graph_compute_with_ctx(ctx, g, 2);
        worst = 0;
        for (int64_t e = 0; e < ggml_nelements(ad); e++) {
            const double d = std::fabs(double(static_cast<float *>(ad->data)[e]) -
                                       static_cast<float *>(ref->data)[e]);
            if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
        }
    }
    ggml_free(ctx);
    return worst;
}
