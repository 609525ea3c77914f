/* test_ggml.c -- the ggml adapter (sdpa_ggml.h) against ggml_flash_attn_ext and a float64
 * oracle, on every implementation */
#include "testlib.h"

#ifndef SDPA_TEST_HAVE_GGML
/* cxx_smoke.cc: the header compiled as C++, one small graph against ggml's op */
double sdpa_ggml_cxx_smoke(void);

int main(void)
{
    printf("ggml adapter: no ggml source tree (configure with -Dggml_src=PATH): skipped\n");
    return 77;
}
#else

#include "attn.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "sdpa_ggml.h"

/*
 * Each case builds ggml tensors (q, k, v, mask, sinks) in one of ggml's layouts and runs the
 * same tensors through ggml_flash_attn_ext (ggml's CPU backend) and through
 * sdpa_ggml_flash_attn_ext, then checks both against the float64 oracle of attn.h
 * (attn_oracle64), fed with the values ggml's own to_float reads back from the tensors (f16,
 * bf16 and the block formats) and with ggml's semantics turned into the oracle's: ggml's ALiBi
 * slope_h * mask becomes a per-head mask, |softcap| the cap.
 *
 *   - the adapter, per implementation of the registry (sdpa_select), must be within libsdpa's
 *     own tolerance (test_variants.c's, from attn_oracle64's sums) and give the same bits for
 *     ggml thread counts 1 to 4;
 *   - ggml's own op is only reported (its worst |error| / that tolerance; it rounds q to f16
 *     or 8 bits and may accumulate in f16) and checked for sanity: finite where the oracle is,
 *     within 2% of the row's largest |v|;
 *   - every refusal (a case ggml's op accepts and libsdpa cannot express, or that ggml would
 *     assert on) returns NULL with a message naming the reason.
 */

enum { LAY_DENSE = 0, LAY_PERM, LAY_VIEW, LAY_MLA };
static const char *const lay_names[] = {"dense", "permuted", "cache view", "v a view of k"};

typedef struct gcase {
    const char *name;
    int D, Dv, N, H, Hk, KV, B; /* Dv 0: D */
    enum ggml_type kt, vt;
    int mask;   /* 0 none; 1 causal with random biases; 2 ALiBi's -|i' - j| and causal */
    int m2, m3; /* the mask's planes (0: 1) */
    float max_bias, softcap, scale; /* scale 0: 1/sqrt(D) */
    int sinks;
    int layout;
} gcase;

#define F16  GGML_TYPE_F16
#define BF16 GGML_TYPE_BF16
#define F32  GGML_TYPE_F32
#define Q8   GGML_TYPE_Q8_0
#define Q4   GGML_TYPE_Q4_0
#define Q41  GGML_TYPE_Q4_1
#define Q50  GGML_TYPE_Q5_0
#define Q51  GGML_TYPE_Q5_1
#define IQ4  GGML_TYPE_IQ4_NL

static const gcase cases[] = {
    /* name                      D    Dv  N   H   Hk KV   B  kt   vt   mask m2 m3 bias soft sc sk
       lay */
    {"decode f16 GQA1", 128, 0, 1, 8, 8, 300, 1, F16, F16, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"decode q8_0 GQA4", 128, 0, 1, 16, 4, 512, 1, Q8, Q8, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"decode f16 GQA8 no mask", 64, 0, 1, 16, 2, 200, 1, F16, F16, 0, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"prefill f16 GQA8", 64, 0, 48, 16, 2, 96, 1, F16, F16, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"prefill q4_0 GQA4", 128, 0, 32, 8, 2, 160, 1, Q4, Q4, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"prefill bf16 D256", 256, 0, 8, 4, 4, 100, 1, BF16, BF16, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"prefill f32", 64, 0, 12, 4, 2, 70, 1, F32, F32, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"decode q4_1", 128, 0, 2, 8, 2, 96, 1, Q41, Q41, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"decode q5_0", 128, 0, 2, 8, 2, 96, 1, Q50, Q50, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"decode q5_1", 64, 0, 3, 4, 4, 96, 1, Q51, Q51, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"decode iq4_nl", 128, 0, 3, 8, 1, 96, 1, IQ4, IQ4, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"mixed q8_0 K, f16 V", 128, 0, 4, 8, 2, 128, 1, Q8, F16, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"Dk 576 Dv 512 (MLA)", 576, 512, 4, 16, 1, 128, 1, F16, F16, 1, 0, 0, 0, 0, 0, 0, LAY_MLA},
    {"Dk 576 Dv 512 q8_0", 576, 512, 1, 8, 1, 64, 1, Q8, Q8, 1, 0, 0, 0, 0, 0, 0, LAY_DENSE},
    {"ALiBi 12 heads", 64, 0, 16, 12, 4, 80, 1, F16, F16, 2, 0, 0, 8.0f, 0, 0, 0, LAY_DENSE},
    {"ALiBi max_bias 4 decode", 128, 0, 1, 8, 8, 150, 1, F16, F16, 2, 0, 0, 4.0f, 0, 0, 0,
     LAY_DENSE},
    {"softcap 30", 128, 0, 16, 8, 4, 64, 1, F16, F16, 1, 0, 0, 0, 30.0f, 0, 0, LAY_DENSE},
    {"softcap -20, scale 0.3", 64, 0, 6, 4, 2, 50, 1, F32, F32, 1, 0, 0, 0, -20.0f, 0.3f, 0,
     LAY_DENSE},
    {"sinks", 64, 0, 10, 8, 2, 64, 1, F16, F16, 1, 0, 0, 0, 0, 0, 1, LAY_DENSE},
    {"sinks, no mask, q8_0", 64, 0, 1, 8, 2, 128, 1, Q8, Q8, 0, 0, 0, 0, 0, 0, 1, LAY_DENSE},
    {"permuted q, token-major K/V", 128, 0, 8, 8, 2, 100, 1, F16, F16, 1, 0, 0, 0, 0, 0, 0,
     LAY_PERM},
    {"permuted, q4_0", 64, 0, 5, 4, 4, 64, 2, Q4, Q4, 1, 0, 2, 0, 0, 0, 0, LAY_PERM},
    {"cache view", 128, 0, 6, 8, 4, 90, 1, F16, F16, 1, 0, 0, 0, 0, 0, 0, LAY_VIEW},
    {"cache view q8_0 ne3 2", 64, 0, 3, 4, 2, 70, 2, Q8, Q8, 1, 0, 1, 0, 0, 0, 0, LAY_VIEW},
    {"ne3 3, a mask per batch", 64, 0, 4, 4, 2, 40, 3, F16, F16, 1, 0, 3, 0, 0, 0, 0, LAY_DENSE},
    {"ne3 4, mask planes b % 2", 64, 0, 4, 4, 2, 40, 4, F16, F16, 1, 0, 2, 0, 0, 0, 0, LAY_DENSE},
    {"mask per head", 64, 0, 5, 8, 2, 48, 1, F16, F16, 1, 8, 0, 0, 0, 0, 0, LAY_DENSE},
    {"mask planes h % 4, GQA2, ALiBi, sinks", 64, 0, 5, 8, 4, 48, 1, F16, F16, 2, 4, 0, 8.0f, 0, 0,
     1, LAY_DENSE},
    {"mask planes h % 2, GQA4, ALiBi, sinks", 64, 0, 5, 8, 2, 48, 1, F16, F16, 2, 2, 0, 8.0f, 0, 0,
     1, LAY_DENSE},
    {"mask planes h % 2 and b % 2, sinks", 64, 0, 3, 8, 2, 40, 4, F16, F16, 1, 2, 2, 0, 0, 0, 1,
     LAY_DENSE},
    {"mask planes h % 6, GQA4", 64, 0, 3, 12, 3, 48, 2, F16, F16, 1, 6, 2, 8.0f, 0, 0, 1,
     LAY_DENSE},
    {"everything, q8_0", 128, 0, 7, 12, 4, 130, 2, Q8, Q8, 2, 0, 2, 8.0f, 50.0f, 0, 1, LAY_PERM},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

typedef struct prepared {
    const gcase *c;
    struct ggml_context *ctx;
    struct ggml_tensor *q, *k, *v, *mask, *sinks, *ref, *ad;
    struct ggml_cgraph *g_ad;
    attn_ref r;
    double worst_ggml;
    float *first; /* the adapter's output at 1 thread, for the bitwise comparison */
} prepared;

static prepared g_prep[N_CASES];
static double g_worst; /* the adapter's worst |error| / tolerance, per implementation */

/* the values stored in a row of n elements of type t, as ggml reads them */
static void row_values(enum ggml_type t, const void *row, float *out, size_t n)
{
    if (t == GGML_TYPE_F32)
        memcpy(out, row, n * sizeof(float));
    else
        ggml_get_type_traits(t)->to_float(row, out, (int64_t)n);
}

/* stores x[0..n) as a row of type t */
static void row_store(enum ggml_type t, const float *x, void *row, size_t n)
{
    if (t == GGML_TYPE_F32)
        memcpy(row, x, n * sizeof(float));
    else if (t == GGML_TYPE_F16)
        for (size_t i = 0; i < n; i++) ((ggml_fp16_t *)row)[i] = ggml_fp32_to_fp16(x[i]);
    else if (t == GGML_TYPE_BF16)
        for (size_t i = 0; i < n; i++) ((ggml_bf16_t *)row)[i] = ggml_fp32_to_bf16(x[i]);
    else
        ggml_quantize_chunk(t, x, row, 0, 1, (int64_t)n, NULL);
}

static char *at(const struct ggml_tensor *t, size_t i1, size_t i2, size_t i3)
{
    return (char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

/* Fills every row of t with uniform values in [lo, hi) and returns the stored values, dense
   [i3][i2][i1][ne0]. */
static float *fill_rows(struct ggml_tensor *t, tl_rng *rng, float lo, float hi)
{
    const size_t n0 = (size_t)t->ne[0], n1 = (size_t)t->ne[1], n2 = (size_t)t->ne[2],
                 n3 = (size_t)t->ne[3];
    float *vals = tl_xmalloc(n0 * n1 * n2 * n3 * sizeof(float)), *x = tl_xmalloc(n0 * 4);
    for (size_t i3 = 0; i3 < n3; i3++)
        for (size_t i2 = 0; i2 < n2; i2++)
            for (size_t i1 = 0; i1 < n1; i1++) {
                tl_fill(rng, x, n0, lo, hi);
                row_store(t->type, x, at(t, i1, i2, i3), n0);
                row_values(t->type, at(t, i1, i2, i3), vals + ((i3 * n2 + i2) * n1 + i1) * n0, n0);
            }
    free(x);
    return vals;
}

/* Reads back the rows of a (view) tensor, dense [i3][i2][i1][ne0]. */
static float *read_rows(const struct ggml_tensor *t)
{
    const size_t n0 = (size_t)t->ne[0], n1 = (size_t)t->ne[1], n2 = (size_t)t->ne[2],
                 n3 = (size_t)t->ne[3];
    float *vals = tl_xmalloc(n0 * n1 * n2 * n3 * sizeof(float));
    for (size_t i3 = 0; i3 < n3; i3++)
        for (size_t i2 = 0; i2 < n2; i2++)
            for (size_t i1 = 0; i1 < n1; i1++)
                row_values(t->type, at(t, i1, i2, i3), vals + ((i3 * n2 + i2) * n1 + i1) * n0, n0);
    return vals;
}

static void compute(struct ggml_cgraph *g, int nth)
{
    struct ggml_cplan plan = ggml_graph_plan(g, nth, NULL);
    void *work = plan.work_size ? tl_xmalloc(plan.work_size) : NULL;
    plan.work_data = work;
    if (ggml_graph_compute(g, &plan) != GGML_STATUS_SUCCESS) {
        printf("Bail out! ggml_graph_compute failed\n");
        exit(1);
    }
    free(work);
}

/* The tolerance of output element x of row `row` (test_variants.c's, for this implementation). */
static double tol_of(const attn_ref *r, size_t row, size_t x, double ref, double cap,
                     double exp_ulp, double tanh_ulp)
{
    const double u = TL_U, cap_err = cap > 0 ? (2 * tanh_ulp + 2) * u * cap : 0.0;
    const double E = r->tol[row] + 4.0 * exp_ulp * u, S1 = r->s1[row] + cap_err * r->wk[row];
    return E * r->wabs[x] + 2.0 * (r->m1[x] + cap_err * r->wabs[x] + S1 * fabs(ref)) + r->flush[x] +
           FLT_TRUE_MIN;
}

/* Builds a case's tensors, graphs and oracle; runs ggml's own op and reports its error. */
static void prepare(prepared *P, const gcase *c, tl_rng *rng)
{
    const size_t D = (size_t)c->D, Dv = c->Dv ? (size_t)c->Dv : D, N = (size_t)c->N,
                 H = (size_t)c->H, Hk = (size_t)c->Hk, KV = (size_t)c->KV, B = (size_t)c->B;
    const size_t m2 = c->m2 ? (size_t)c->m2 : 1, m3 = c->m3 ? (size_t)c->m3 : 1;
    const size_t Npad = (N + 15) / 16 * 16, KVcap = KV + 40, koff = 17;
    const float scale = c->scale != 0 ? c->scale : 1.0f / sqrtf((float)D);
    P->c = c;
    /* the data this case holds, plus room for the adapter's state and the graphs: no more,
       since meson's MALLOC_PERTURB_ makes every byte of the context cost a write */
    const size_t data = D * N * H * B * 4 + 2 * Dv * N * H * B * 4 + KV * Npad * m2 * m3 * 2 +
                        (ggml_row_size(c->kt, D) + ggml_row_size(c->vt, Dv)) * KVcap * Hk * B;
    struct ggml_init_params ip = {data + ((size_t)16 << 20), NULL, false};
    P->ctx = ggml_init(ip);
    struct ggml_context *ctx = P->ctx;
    /* q [D, N, H, B]: dense, or [D, H, N, B] permuted (heads interleaved per token) */
    if (c->layout == LAY_PERM)
        P->q = ggml_permute(ctx, ggml_new_tensor_4d(ctx, F32, D, H, N, B), 0, 2, 1, 3);
    else
        P->q = ggml_new_tensor_4d(ctx, F32, D, N, H, B);
    float *qv = fill_rows(P->q, rng, -1.0f, 1.0f);
    float *kv = NULL, *vv = NULL;
    if (c->layout == LAY_PERM) { /* K/V token-major: [D, Hk, KV, B] permuted */
        P->k = ggml_permute(ctx, ggml_new_tensor_4d(ctx, c->kt, D, Hk, KV, B), 0, 2, 1, 3);
        P->v = ggml_permute(ctx, ggml_new_tensor_4d(ctx, c->vt, Dv, Hk, KV, B), 0, 2, 1, 3);
    } else if (c->layout == LAY_VIEW) { /* rows [koff, koff + KV) of caches of KVcap rows */
        struct ggml_tensor *kc = ggml_new_tensor_4d(ctx, c->kt, D, KVcap, Hk, B);
        struct ggml_tensor *vc = ggml_new_tensor_4d(ctx, c->vt, Dv, KVcap, Hk, B);
        memset(kc->data, 0xff, ggml_nbytes(kc)); /* NaN (or a NaN block scale) outside */
        memset(vc->data, 0xff, ggml_nbytes(vc));
        P->k =
            ggml_view_4d(ctx, kc, D, KV, Hk, B, kc->nb[1], kc->nb[2], kc->nb[3], koff * kc->nb[1]);
        P->v =
            ggml_view_4d(ctx, vc, Dv, KV, Hk, B, vc->nb[1], vc->nb[2], vc->nb[3], koff * vc->nb[1]);
    } else {
        P->k = ggml_new_tensor_4d(ctx, c->kt, D, KV, Hk, B);
        P->v = c->layout == LAY_MLA ? NULL : ggml_new_tensor_4d(ctx, c->vt, Dv, KV, Hk, B);
    }
    kv = fill_rows(P->k, rng, -1.0f, 1.0f);
    if (c->layout == LAY_MLA) { /* v: the first Dv elements of each row of k */
        P->v = ggml_view_4d(ctx, P->k, Dv, KV, Hk, B, P->k->nb[1], P->k->nb[2], P->k->nb[3], 0);
        vv = read_rows(P->v);
    } else {
        vv = fill_rows(P->v, rng, -2.0f, 2.0f);
    }
    /* the mask: [KV, Npad, m2, m3] f16, padded rows NaN; the oracle's per-head copy, times the
       slope: ggml's slope_h * mask, rounded to float as both compute it */
    float *meff = NULL;
    if (c->mask) {
        P->mask = ggml_new_tensor_4d(ctx, F16, KV, Npad, m2, m3);
        memset(P->mask->data, 0xff, ggml_nbytes(P->mask));
        for (size_t i3 = 0; i3 < m3; i3++)
            for (size_t i2 = 0; i2 < m2; i2++)
                for (size_t i = 0; i < N; i++) {
                    ggml_fp16_t *row = (ggml_fp16_t *)at(P->mask, i, i2, i3);
                    const size_t ip = i + KV - N;
                    for (size_t j = 0; j < KV; j++) {
                        float m = j > ip                  ? -INFINITY
                                  : c->mask == 2          ? -(float)(ip - j)
                                  : tl_below(rng, 8) == 0 ? -INFINITY
                                                          : tl_uniform(rng, -3.0f, 1.0f);
                        row[j] = ggml_fp32_to_fp16(m);
                    }
                }
        meff = tl_xmalloc(B * H * N * KV * sizeof(float));
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < H; h++) {
                const float slope = c->max_bias > 0 ? sdpa_ggml_slope_(h, H, c->max_bias) : 1.0f;
                for (size_t i = 0; i < N; i++) {
                    const ggml_fp16_t *row = (const ggml_fp16_t *)at(P->mask, i, h % m2, b % m3);
                    for (size_t j = 0; j < KV; j++)
                        meff[((b * H + h) * N + i) * KV + j] = slope * ggml_fp16_to_fp32(row[j]);
                }
            }
    }
    float *sk = NULL;
    if (c->sinks) {
        P->sinks = ggml_new_tensor_1d(ctx, F32, H);
        sk = (float *)P->sinks->data;
        for (size_t h = 0; h < H; h++)
            sk[h] = h % 3 == 1 ? -INFINITY : tl_uniform(rng, -1.0f, 3.0f);
    }
    /* the oracle: fill_rows and read_rows give the values as stored in the views' own order,
       dense [b][h][token][dim] whatever the layout */
    attn_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.B = B, pr.Hq = H, pr.Hk = Hk, pr.Lq = N, pr.Lk = KV, pr.D = D, pr.Dv = Dv;
    pr.q = qv, pr.k = kv, pr.v = vv, pr.scale = (double)scale;
    pr.softcap = fabs((double)c->softcap), pr.sinks = sk, pr.mask = meff;
    pr.mbs = H * N * KV, pr.mhs = N * KV, pr.mis = KV;
    pr.tanh_ulp = 0; /* the tolerance adds each implementation's own */
    attn_oracle64(&pr, &P->r);
    free(qv), free(kv), free(vv), free(meff);

    /* ggml's own op */
    P->ref = ggml_flash_attn_ext(ctx, P->q, P->k, P->v, P->mask, scale, c->max_bias, c->softcap);
    if (P->sinks) ggml_flash_attn_ext_add_sinks(P->ref, P->sinks);
    struct ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, P->ref);
    compute(g, 2);
    /* the adapter */
    /* the workspace sized for the 4 threads the test runs at most (the context's room) */
    sdpa_ggml_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.sinks = P->sinks, opts.max_threads = 4;
    P->ad = sdpa_ggml_flash_attn_ext_opts(ctx, P->q, P->k, P->v, P->mask, scale, c->max_bias,
                                          c->softcap, &opts);
    if (P->ad) {
        P->g_ad = ggml_new_graph(ctx);
        ggml_build_forward_expand(P->g_ad, P->ad);
    }
    P->first = tl_xmalloc(B * H * N * Dv * sizeof(float));
}

/* ggml's own op against the oracle: reported, and checked for sanity only. */
static void check_ggml_sanity(const sdpa_impl *impl)
{
    (void)impl;
    /* the adapter's ALiBi slopes (ggml's float formula) against the closed form in double:
       2^(-max_bias (h + 1) / n) below n, the largest power of two <= n_head, and
       2^(-max_bias (2 (h - n) + 1) / (2 n)) from n on */
    for (size_t H = 1; H <= 80; H += 7)
        for (float mb = 0.5f; mb <= 16.0f; mb *= 2.0f) {
            size_t n2 = 1;
            while (n2 * 2 <= H) n2 *= 2;
            for (size_t h = 0; h < H; h++) {
                const double want =
                    h < n2 ? exp2(-(double)mb * (double)(h + 1) / (double)n2)
                           : exp2(-(double)mb * (double)(2 * (h - n2) + 1) / (2.0 * (double)n2));
                const double got = sdpa_ggml_slope_(h, H, mb);
                CHECK(fabs(got - want) <= 256 * TL_U * want,
                      "slope of head %zu of %zu, max_bias %g: %.9g, want %.9g", h, H, mb, got,
                      want);
            }
        }
    for (size_t n = 0; n < N_CASES; n++) {
        prepared *P = &g_prep[n];
        const gcase *c = P->c;
        if (!c) continue; /* sampled out */
        const size_t Dv = (size_t)P->ref->ne[0], H = (size_t)c->H, N = (size_t)c->N;
        const float *o = (const float *)P->ref->data;
        double worst = 0;
        long bad = 0;
        for (size_t b = 0; b < (size_t)c->B; b++)
            for (size_t h = 0; h < H; h++)
                for (size_t i = 0; i < N; i++) {
                    const size_t row = (b * H + h) * N + i;
                    const float *got = o + ((b * N + i) * H + h) * Dv;
                    for (size_t e = 0; e < Dv; e++) {
                        const double ref = P->r.o[row * Dv + e];
                        const double err = fabs(got[e] - ref);
                        const double tol =
                            tol_of(&P->r, row, row * Dv + e, ref, fabs((double)c->softcap), 4, 4);
                        if (P->r.seen[row] && err / tol > worst) worst = err / tol;
                        if (bad < 3 && !CHECK(err <= 0.02 * P->r.vmax[row] + 1e-6,
                                              "%s: ggml b=%zu h=%zu i=%zu o[%zu]=%g, float64 %g",
                                              c->name, b, h, i, e, got[e], ref))
                            bad++;
                    }
                }
        P->worst_ggml = worst;
        printf("# %-32s ggml's own op: worst |error| / libsdpa's tolerance %.3g\n", c->name, worst);
    }
}

/* The adapter on the active implementation: every case, ggml thread counts 1 to 4. */
static void check_adapter(const sdpa_impl *impl)
{
    if (!CHECK(sdpa_select(sdpa_impl_name(impl)) == SDPA_OK, "sdpa_select(%s) failed",
               sdpa_impl_name(impl)))
        return;
    const double exp_ulp = sdpa_impl_exp_max_ulp(impl), tanh_ulp = sdpa_impl_tanh_max_ulp(impl);
    for (size_t n = 0; n < N_CASES && !tl_give_up(); n++) {
        prepared *P = &g_prep[n];
        const gcase *c = P->c;
        if (!c) continue; /* sampled out */
        if (!CHECK(P->ad != NULL, "%s: refused: %s", c->name, sdpa_ggml_last_error())) continue;
        const size_t Dv = (size_t)P->ad->ne[0], H = (size_t)c->H, N = (size_t)c->N,
                     B = (size_t)c->B;
        CHECK(P->ad->ne[0] == P->ref->ne[0] && P->ad->ne[1] == P->ref->ne[1] &&
                  P->ad->ne[2] == P->ref->ne[2] && P->ad->ne[3] == P->ref->ne[3] &&
                  P->ad->type == GGML_TYPE_F32,
              "%s: the output's shape is not ggml's", c->name);
        const size_t bytes = B * H * N * Dv * sizeof(float);
        for (int nth = 1; nth <= 4; nth++) {
            memset(P->ad->data, 0xa5, bytes);
            compute(P->g_ad, nth);
            if (nth > 1) {
                CHECK(memcmp(P->first, P->ad->data, bytes) == 0,
                      "%s (%s): %d ggml threads give other bits than 1", c->name,
                      lay_names[c->layout], nth);
                continue;
            }
            memcpy(P->first, P->ad->data, bytes);
            const float *o = (const float *)P->ad->data;
            bool stop = false;
            for (size_t b = 0; b < B && !stop; b++)
                for (size_t h = 0; h < H && !stop; h++)
                    for (size_t i = 0; i < N && !stop; i++) {
                        const size_t row = (b * H + h) * N + i;
                        const float *got = o + ((b * N + i) * H + h) * Dv;
                        for (size_t e = 0; e < Dv && !stop; e++) {
                            const double ref = P->r.o[row * Dv + e];
                            if (P->r.seen[row] == 0) {
                                stop = !CHECK(got[e] == 0.0f,
                                              "%s: b=%zu h=%zu i=%zu sees no key: o[%zu]=%g",
                                              c->name, b, h, i, e, got[e]);
                                continue;
                            }
                            const double tol = tol_of(&P->r, row, row * Dv + e, ref,
                                                      fabs((double)c->softcap), exp_ulp, tanh_ulp);
                            const double err = fabs(got[e] - ref);
                            if (err / tol > g_worst) g_worst = err / tol;
                            stop = !CHECK(err <= tol,
                                          "%s (%s): b=%zu h=%zu i=%zu o[%zu]=%.9g, float64 "
                                          "%.9g, |err| %.3g > tol %.3g",
                                          c->name, lay_names[c->layout], b, h, i, e, got[e], ref,
                                          err, tol);
                        }
                    }
        }
    }
    sdpa_select(NULL);
}

/* One refusal: the adapter returns NULL and its message contains `want`. */
static void refused(struct ggml_context *ctx, const char *what, struct ggml_tensor *q,
                    struct ggml_tensor *k, struct ggml_tensor *v, struct ggml_tensor *mask,
                    struct ggml_tensor *sinks, float scale, float max_bias, float softcap, int q8,
                    const char *want)
{
    char msg[256] = "";
    sdpa_ggml_opts o;
    memset(&o, 0, sizeof o);
    o.sinks = sinks, o.q8_scores = q8, o.msg = msg, o.msg_len = sizeof msg;
    struct ggml_tensor *t =
        sdpa_ggml_flash_attn_ext_opts(ctx, q, k, v, mask, scale, max_bias, softcap, &o);
    CHECK(t == NULL, "%s: not refused", what);
    CHECK(strstr(msg, want) != NULL, "%s: message \"%s\" does not say \"%s\"", what, msg, want);
    CHECK(strcmp(msg, sdpa_ggml_last_error()) == 0, "%s: sdpa_ggml_last_error() is \"%s\"", what,
          sdpa_ggml_last_error());
    printf("# refused, %s: %s\n", what, msg);
}

static void check_refusals(const sdpa_impl *impl)
{
    (void)impl;
    struct ggml_init_params ip = {(size_t)16 << 20, NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    const float sc = 0.125f;
    struct ggml_tensor *q = ggml_new_tensor_4d(ctx, F32, 64, 4, 8, 1);
    struct ggml_tensor *k = ggml_new_tensor_4d(ctx, F16, 64, 32, 2, 1);
    struct ggml_tensor *v = ggml_new_tensor_4d(ctx, F16, 64, 32, 2, 1);
    struct ggml_tensor *m = ggml_new_tensor_4d(ctx, F16, 32, 16, 1, 1);
    struct ggml_tensor *s = ggml_new_tensor_1d(ctx, F32, 8);
    /* the baseline is accepted */
    struct ggml_tensor *ok = sdpa_ggml_flash_attn_ext_sinks(ctx, q, k, v, m, s, sc, 8.0f, 30.0f);
    CHECK(ok != NULL, "the baseline is refused: %s", sdpa_ggml_last_error());
    CHECK(strcmp(sdpa_ggml_last_error(), "ok") == 0, "after a success: \"%s\"",
          sdpa_ggml_last_error());
    refused(ctx, "f16 q", ggml_new_tensor_4d(ctx, F16, 64, 4, 8, 1), k, v, m, NULL, sc, 0, 0, 0,
            "q is f16");
    refused(ctx, "q4_K k", q, ggml_new_tensor_4d(ctx, GGML_TYPE_Q4_K, 256, 32, 2, 1),
            ggml_new_tensor_4d(ctx, GGML_TYPE_Q4_K, 256, 32, 2, 1), m, NULL, sc, 0, 0, 0,
            "libsdpa reads");
    refused(ctx, "i32 v", q, k, ggml_new_tensor_4d(ctx, GGML_TYPE_I32, 64, 32, 2, 1), m, NULL, sc,
            0, 0, 0, "libsdpa reads");
    refused(ctx, "v heads != k heads", q, k, ggml_new_tensor_4d(ctx, F16, 64, 32, 4, 1), m, NULL,
            sc, 0, 0, 0, "head count differs");
    refused(ctx, "v shorter than k", q, k, ggml_new_tensor_4d(ctx, F16, 64, 31, 2, 1), m, NULL, sc,
            0, 0, 0, "fewer rows");
    refused(ctx, "Dk mismatch", q, ggml_new_tensor_4d(ctx, F16, 32, 32, 2, 1), v, m, NULL, sc, 0, 0,
            0, "ne[0]");
    refused(ctx, "heads not a multiple", q, ggml_new_tensor_4d(ctx, F16, 64, 32, 3, 1),
            ggml_new_tensor_4d(ctx, F16, 64, 32, 3, 1), m, NULL, sc, 0, 0, 0, "multiple");
    refused(ctx, "ne3 mismatch", q, ggml_new_tensor_4d(ctx, F16, 64, 32, 2, 2),
            ggml_new_tensor_4d(ctx, F16, 64, 32, 2, 2), m, NULL, sc, 0, 0, 0, "ne[3]");
    refused(ctx, "f32 mask", q, k, v, ggml_new_tensor_4d(ctx, F32, 32, 16, 1, 1), NULL, sc, 0, 0, 0,
            "F16");
    refused(ctx, "mask with too few rows", q, k, v, ggml_new_tensor_4d(ctx, F16, 32, 3, 1, 1), NULL,
            sc, 0, 0, 0, "fewer");
    refused(ctx, "mask planes not dividing heads", q, k, v,
            ggml_new_tensor_4d(ctx, F16, 32, 16, 3, 1), NULL, sc, 0, 0, 0, "divide");
    refused(ctx, "ALiBi without a mask", q, k, v, NULL, NULL, sc, 8.0f, 0, 0, "needs a mask");
    refused(ctx, "scale 0", q, k, v, m, NULL, 0.0f, 0, 0, 0, "scale 0");
    refused(ctx, "NaN scale", q, k, v, m, NULL, NAN, 0, 0, 0, "libsdpa refuses");
    refused(ctx, "NaN softcap", q, k, v, m, NULL, sc, 0, NAN, 0, "libsdpa refuses");
    refused(ctx, "infinite softcap", q, k, v, m, NULL, sc, 0, INFINITY, 0, "libsdpa refuses");
    refused(ctx, "sinks of the wrong length", q, k, v, m, ggml_new_tensor_1d(ctx, F32, 4), sc, 0, 0,
            0, "sinks");
    refused(ctx, "f16 sinks", q, k, v, m, ggml_new_tensor_1d(ctx, F16, 8), sc, 0, 0, 0, "sinks");
    refused(ctx, "q8_scores on f16 K", q, k, v, m, NULL, sc, 0, 0, 1, "libsdpa refuses");
    refused(ctx, "transposed k (rows not contiguous)", q,
            ggml_permute(ctx, ggml_new_tensor_4d(ctx, F16, 32, 64, 2, 1), 1, 0, 2, 3), v, m, NULL,
            sc, 0, 0, 0, "contiguous rows");
    {
        /* a q8_0 view whose rows do not start on a block: nb[1] of 34 * 2 + 2 bytes */
        struct ggml_tensor *raw = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, 70 * 32 * 2);
        struct ggml_tensor *kq = ggml_view_4d(ctx, raw, 64, 32, 2, 1, 70, 70 * 32, 70 * 64, 0);
        kq->type = GGML_TYPE_Q8_0; /* a view of raw bytes as q8_0 rows */
        kq->nb[0] = ggml_type_size(GGML_TYPE_Q8_0);
        refused(ctx, "q8_0 rows not on a block", q, kq, v, m, NULL, sc, 0, 0, 0, "fall on");
    }
    refused(ctx, "no k", q, NULL, v, m, NULL, sc, 0, 0, 0, "must not be NULL");
    ggml_free(ctx);

    /* refused only when the graph runs (a +inf sink: the data is not known before): every
       output element NaN, on any thread count */
    struct ggml_init_params ipa = {(size_t)16 << 20, NULL, false};
    ctx = ggml_init(ipa);
    q = ggml_new_tensor_4d(ctx, F32, 64, 3, 4, 1);
    k = ggml_new_tensor_4d(ctx, F16, 64, 20, 2, 1);
    s = ggml_new_tensor_1d(ctx, F32, 4);
    memset(q->data, 0, ggml_nbytes(q));
    memset(k->data, 0, ggml_nbytes(k));
    for (int h = 0; h < 4; h++) ((float *)s->data)[h] = h == 2 ? INFINITY : 0.0f;
    struct ggml_tensor *o = sdpa_ggml_flash_attn_ext_sinks(ctx, q, k, k, NULL, s, sc, 0, 0);
    if (CHECK(o != NULL, "+inf sink: refused at build time: %s", sdpa_ggml_last_error())) {
        struct ggml_cgraph *g = ggml_new_graph(ctx);
        ggml_build_forward_expand(g, o);
        for (int nth = 1; nth <= 3; nth++) {
            memset(o->data, 0, ggml_nbytes(o));
            compute(g, nth);
            size_t nan = 0;
            for (int64_t e = 0; e < ggml_nelements(o); e++) nan += isnan(((float *)o->data)[e]);
            CHECK(nan == (size_t)ggml_nelements(o), "+inf sink, %d threads: %zu of %zu NaN", nth,
                  nan, (size_t)ggml_nelements(o));
        }
    }
    ggml_free(ctx);
}

/* cxx_smoke.cc: the header compiled as C++, one small graph against ggml's op */
double sdpa_ggml_cxx_smoke(void);

int main(void)
{
    tl_header("the ggml adapter against ggml_flash_attn_ext and float64");
    ggml_cpu_init();
    tl_rng rng = {0x9a7e5d};
    /* SDPA_TEST_SAMPLE (emulated runs): every Nth case only */
    for (size_t n = 0; n < N_CASES; n++)
        if (!tl_sampled_out(n)) prepare(&g_prep[n], &cases[n], &rng);
    tl_start("ggml's own op (sanity, errors reported)", "-");
    check_ggml_sanity(NULL);
    tl_end();
    tl_start("refusals", "-");
    check_refusals(NULL);
    tl_end();
    tl_start("the header as C++", "-");
    const double cxx = sdpa_ggml_cxx_smoke();
    CHECK(cxx >= 0 && cxx <= 1e-2, "the C++ build: %s, |adapter - ggml| %g",
          cxx < 0 ? "refused" : "computed", cxx);
    tl_end();
    tl_for_each_impl_worst("ggml adapter", check_adapter, &g_worst);
    for (size_t n = 0; n < N_CASES; n++)
        if (g_prep[n].c) {
            attn_ref_free(&g_prep[n].r);
            free(g_prep[n].first);
            ggml_free(g_prep[n].ctx);
        }
    return tl_finish();
}
#endif
