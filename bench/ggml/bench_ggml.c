/* bench_ggml.c -- sdpa-ggml-bench: ggml's own flash attention against the libsdpa adapter in the
 * same ggml graph */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "sdpa.h"
#include "sdpa_ggml.h"

/*
 * One process, one ggml build (GGML_NATIVE=ON: ggml's best code for this CPU), the same
 * tensors: a graph with ggml_flash_attn_ext and a graph with sdpa_ggml_flash_attn_ext, run on
 * a persistent ggml thread pool of 1 and 2 threads. Shapes as a llama-style model has them
 * (32 query heads, 8 KV heads, head dim 128): decode (one query) over 4K and 32K keys with an
 * all-visible mask, and a 2K-token causal prefill, with K/V in f16 and in q8_0. Each round
 * times one call of each graph back to back, so both see the same machine state; the table
 * gives the median and best ms per call of each and their ratios, stock / adapter (above 1,
 * the adapter is faster); on a shared machine the best is the one less disturbed by others.
 *
 * usage: sdpa-ggml-bench [--quick]     (--quick: the 4K decode only, a few rounds)
 */

typedef struct shape {
    const char *name;
    int N, KV, rounds;
} shape;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double run(struct ggml_cgraph *g, struct ggml_cplan *plan)
{
    const double t0 = now_ms();
    if (ggml_graph_compute(g, plan) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "ggml_graph_compute failed\n");
        exit(1);
    }
    return now_ms() - t0;
}

static void fill(struct ggml_tensor *t, unsigned *seed)
{
    const size_t n0 = (size_t)t->ne[0], rows = (size_t)ggml_nrows(t);
    float *x = malloc(n0 * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < n0; i++) {
            *seed = *seed * 1103515245u + 12345u;
            x[i] = (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
        }
        char *row = (char *)t->data + r * t->nb[1]; /* contiguous tensors: rows in order */
        if (t->type == GGML_TYPE_F32)
            memcpy(row, x, n0 * sizeof(float));
        else if (t->type == GGML_TYPE_F16)
            for (size_t i = 0; i < n0; i++) ((ggml_fp16_t *)row)[i] = ggml_fp32_to_fp16(x[i]);
        else
            ggml_quantize_chunk(t->type, x, row, 0, 1, (int64_t)n0, NULL);
    }
    free(x);
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int H = 32, Hk = 8, D = 128;
    const shape shapes[] = {
        {"decode 4K", 1, 4096, 40}, {"decode 32K", 1, 32768, 12}, {"prefill 2K", 2048, 2048, 3}};
    const enum ggml_type types[] = {GGML_TYPE_F16, GGML_TYPE_Q8_0};
    const int n_shapes = quick ? 1 : 3;
    ggml_cpu_init();
    printf("# sdpa-ggml-bench: ggml_flash_attn_ext vs sdpa_ggml_flash_attn_ext, Hq %d, Hkv %d, "
           "D %d; libsdpa %s on %s\n",
           H, Hk, D, sdpa_version(), sdpa_impl_name(sdpa_active()));
    printf("| shape | K/V | threads | ggml ms (median / best) | adapter ms (median / best) | "
           "ggml / adapter (median, best) |\n|---|---|---|---|---|---|\n");
    for (int s = 0; s < n_shapes; s++)
        for (int t = 0; t < 2; t++) {
            const shape *sh = &shapes[s];
            const int N = sh->N, KV = sh->KV, Npad = (N + 63) / 64 * 64;
            const size_t kv_bytes = ggml_row_size(types[t], D) * (size_t)KV * (size_t)Hk * 2;
            struct ggml_init_params ip = {kv_bytes + (size_t)N * H * D * 8 + (size_t)Npad * KV * 2 +
                                              ((size_t)64 << 20),
                                          NULL, false};
            struct ggml_context *ctx = ggml_init(ip);
            unsigned seed = 12345;
            struct ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, N, H, 1);
            struct ggml_tensor *k = ggml_new_tensor_4d(ctx, types[t], D, KV, Hk, 1);
            struct ggml_tensor *v = ggml_new_tensor_4d(ctx, types[t], D, KV, Hk, 1);
            struct ggml_tensor *m = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, KV, Npad, 1, 1);
            fill(q, &seed), fill(k, &seed), fill(v, &seed);
            for (int i = 0; i < Npad; i++) /* causal, bottom-right aligned; decode sees all */
                for (int j = 0; j < KV; j++)
                    ((ggml_fp16_t *)m->data)[(size_t)i * KV + j] =
                        ggml_fp32_to_fp16(j <= i + KV - N ? 0.0f : -INFINITY);
            const float scale = 1.0f / sqrtf((float)D);
            struct ggml_tensor *o_ref = ggml_flash_attn_ext(ctx, q, k, v, m, scale, 0.0f, 0.0f);
            struct ggml_tensor *o_ad = sdpa_ggml_flash_attn_ext(ctx, q, k, v, m, scale, 0.0f, 0.0f);
            if (!o_ad) {
                fprintf(stderr, "refused: %s\n", sdpa_ggml_last_error());
                return 1;
            }
            struct ggml_cgraph *g_ref = ggml_new_graph(ctx), *g_ad = ggml_new_graph(ctx);
            ggml_build_forward_expand(g_ref, o_ref);
            ggml_build_forward_expand(g_ad, o_ad);
            for (int nth = 1; nth <= 2; nth++) {
                struct ggml_threadpool_params tpp = ggml_threadpool_params_default(nth);
                struct ggml_threadpool *tp = ggml_threadpool_new(&tpp);
                struct ggml_cplan p_ref = ggml_graph_plan(g_ref, nth, tp);
                struct ggml_cplan p_ad = ggml_graph_plan(g_ad, nth, tp);
                p_ref.work_data = p_ref.work_size ? malloc(p_ref.work_size) : NULL;
                p_ad.work_data = p_ad.work_size ? malloc(p_ad.work_size) : NULL;
                const int rounds = quick ? 5 : sh->rounds;
                double *tr = malloc(sizeof(double) * rounds), *ta = malloc(sizeof(double) * rounds);
                run(g_ref, &p_ref), run(g_ad, &p_ad); /* warm-up: pages, caches, threads */
                for (int r = 0; r < rounds; r++)
                    tr[r] = run(g_ref, &p_ref), ta[r] = run(g_ad, &p_ad);
                /* a sanity check that both computed the same attention: V in [-1, 1), so
                   1e-2 is far above ggml's f16 rounding and far below a wrong result */
                double maxdiff = 0;
                for (size_t e = 0; e < (size_t)ggml_nelements(o_ref); e++) {
                    const double a = ((float *)o_ref->data)[e], b = ((float *)o_ad->data)[e];
                    if (!(fabs(a - b) <= maxdiff)) maxdiff = isnan(b) ? INFINITY : fabs(a - b);
                }
                qsort(tr, rounds, sizeof(double), cmp_double);
                qsort(ta, rounds, sizeof(double), cmp_double);
                const double mr = tr[rounds / 2], ma = ta[rounds / 2];
                printf("| %s | %s | %d | %.3f / %.3f | %.3f / %.3f | %.2f, %.2f |%s\n", sh->name,
                       ggml_type_name(types[t]), nth, mr, tr[0], ma, ta[0], mr / ma, tr[0] / ta[0],
                       maxdiff <= 1e-2 ? "" : " OUTPUTS DIFFER");
                fflush(stdout);
                free(tr), free(ta), free(p_ref.work_data), free(p_ad.work_data);
                ggml_threadpool_free(tp);
            }
            ggml_free(ctx);
        }
    return 0;
}
