/* test_regressions.c -- one test per defect found from outside the suite, each failing on the code
 * before its fix */
/*
 * - q8-scores-slot: q8_scores = 1 with R*D/32 odd (head dims 32, 96, 160 and an odd number of
 *   query rows per item) once wrote the query's block scales past their scratch slot: a crash,
 *   outputs off by ~100 %, or thread counts disagreeing. Checked against a float64 oracle with
 *   sdpa.h's bound for fast scores, and 1 against 2 and 3 threads, bit for bit.
 * - window-wide: any window at least as wide as the sequences (SIZE_MAX, PTRDIFF_MAX, ...) is no
 *   window: the very bits of window = 0, causal or not, padded lengths or not.
 * - outputs-over-reads: o or lse placed over an array the call reads (block table, lengths,
 *   offsets, sinks, slopes, mask, workspace) is refused, and nothing is written.
 * - quant-subnormal: a q4_0/q8_0 block whose largest |x| is a subnormal float stores the scale
 *   f16 0 and quants 0 (q4_0 nibbles 0 where 1/d overflows, 8 where d is exactly 0), the bytes
 *   of ggml's reference quantizers on x86.
 * - quant-empty: n = 0 converts nothing and succeeds; NULL pointers are still refused.
 */
#include "testlib.h"

#include "test_pools.h"

static bench_pool *g_pool[2]; /* 2 threads, and 3 threads in shuffled order */

/* ------------------------------------------------------------------------------------------ */
/* q8_scores with an odd number of scale blocks per item                                       */
/* ------------------------------------------------------------------------------------------ */

/* q8_0 K made of int8 quants with the scale 2^-7 (f16 0x2000), so that every element's value,
   q / 128, is known exactly without any conversion. */
#define KSCALE (1.0 / 128.0)

typedef struct q8case {
    size_t D, Hq, Hkv, Lq, Lk;
} q8case;

static void run_q8case(const sdpa_impl *impl, const q8case *c, tl_rng *rng)
{
    const size_t D = c->D, Hq = c->Hq, Hkv = c->Hkv, Lq = c->Lq, Lk = c->Lk, nb = D / 32;
    const size_t krow = nb * 34;
    float *q = tl_xmalloc(Hq * Lq * D * sizeof(float));
    unsigned char *k = tl_xmalloc(Hkv * Lk * krow);
    int8_t *kq = tl_xmalloc(Hkv * Lk * D);
    float *v = tl_xmalloc(Hkv * Lk * D * sizeof(float));
    const size_t on = Hq * Lq * D;
    float *o[3];
    for (int t = 0; t < 3; t++) o[t] = tl_xmalloc(on * sizeof(float));
    tl_fill(rng, q, Hq * Lq * D, -2.0f, 2.0f);
    tl_fill(rng, v, Hkv * Lk * D, -1.0f, 1.0f);
    for (size_t r = 0; r < Hkv * Lk; r++)
        for (size_t b = 0; b < nb; b++) {
            unsigned char *blk = k + r * krow + b * 34;
            blk[0] = 0x00, blk[1] = 0x20; /* f16 2^-7, little-endian */
            for (size_t i = 0; i < 32; i++) {
                const int8_t x = (int8_t)((int)tl_below(rng, 255) - 127);
                kq[r * D + b * 32 + i] = x;
                blk[2 + i] = (unsigned char)x;
            }
        }
    sdpa_params p = tl_params(1, Hq, Hkv, Lq, Lk, D);
    p.q8_scores = 1;
    sdpa_tensor tq = {q, SDPA_F32, 0, (ptrdiff_t)(Lq * D), (ptrdiff_t)D};
    sdpa_tensor tk = {k, SDPA_Q8_0, 0, (ptrdiff_t)(Lk * D), (ptrdiff_t)D};
    sdpa_tensor tv = {v, SDPA_F32, 0, (ptrdiff_t)(Lk * D), (ptrdiff_t)D};
    for (int t = 0; t < 3; t++) {
        sdpa_tensor to = {o[t], SDPA_F32, 0, (ptrdiff_t)(Lq * D), (ptrdiff_t)D};
        const sdpa_status st =
            tl_forward_on(impl, &p, t ? g_pool[t - 1] : NULL, &tq, &tk, &tv, &to);
        CHECK(st == SDPA_OK, "D %zu heads %zu/%zu, %zu x %zu: status %s", D, Hq, Hkv, Lq, Lk,
              sdpa_status_str(st));
    }
    for (int t = 1; t < 3; t++)
        CHECK(memcmp(o[0], o[t], on * sizeof(float)) == 0,
              "D %zu heads %zu/%zu, %zu x %zu: %zu threads give other bits than one", D, Hq, Hkv,
              Lq, Lk, bench_pool_threads(g_pool[t - 1]));
    /* float64 oracle on the exact K values; sdpa.h's bound for fast scores: a bound E on every
       score of a row moves its output by at most (e^(2E) - 1) max |v| */
    const double scale = 1.0 / sqrt((double)D);
    double *s = tl_xmalloc(Lk * sizeof(double));
    for (size_t h = 0; h < Hq; h++)
        for (size_t i = 0; i < Lq; i++) {
            const size_t hk = h / (Hq / Hkv);
            const float *x = q + (h * Lq + i) * D;
            double mx = -INFINITY, E = 0, vmax = 0;
            for (size_t j = 0; j < Lk; j++) {
                const int8_t *kr = kq + (hk * Lk + j) * D;
                double acc = 0, bound = 0;
                for (size_t b = 0; b < nb; b++) {
                    double xm = 0, ks = 0;
                    for (size_t cc = b * 32; cc < b * 32 + 32; cc++) {
                        acc += (double)x[cc] * scale * kr[cc] * KSCALE;
                        if (fabs(x[cc] * scale) > xm) xm = fabs(x[cc] * scale);
                        ks += fabs(kr[cc] * KSCALE);
                    }
                    bound += xm / 254.0 * ks;
                }
                s[j] = acc;
                if (acc > mx) mx = acc;
                if (bound > E) E = bound;
            }
            double l = 0;
            for (size_t j = 0; j < Lk; j++) l += (s[j] = exp(s[j] - mx));
            for (size_t j = 0; j < Lk; j++)
                for (size_t cc = 0; cc < D; cc++)
                    if (fabs(v[(hk * Lk + j) * D + cc]) > vmax)
                        vmax = fabs(v[(hk * Lk + j) * D + cc]);
            const double tol = (exp(2 * E) - 1) * vmax * 1.01 + 1e-4 * vmax;
            for (size_t cc = 0; cc < D && !tl_give_up(); cc++) {
                double ref = 0;
                for (size_t j = 0; j < Lk; j++) ref += s[j] * v[(hk * Lk + j) * D + cc];
                ref /= l;
                const float got = o[0][(h * Lq + i) * D + cc];
                CHECK(fabs(got - ref) <= tol,
                      "D %zu heads %zu/%zu, %zu x %zu: o[h %zu][i %zu][%zu] = %.7g, float64 %.7g, "
                      "bound %.3g",
                      D, Hq, Hkv, Lq, Lk, h, i, cc, got, ref, tol);
            }
        }
    free(s);
    free(q), free(k), free(kq), free(v);
    for (int t = 0; t < 3; t++) free(o[t]);
}

static void test_q8_scores_slot(const sdpa_impl *impl)
{
    static const q8case cases[] = {
        {96, 2, 2, 1, 64},   /* one row per item: 3 scale blocks */
        {32, 3, 1, 1, 4096}, /* 3 rows per KV head: 3 scale blocks */
        {32, 3, 1, 5, 700},  /* a few query rows */
        {160, 1, 1, 1, 300}, /* 5 scale blocks */
        {96, 6, 2, 2, 513},  {224, 7, 1, 1, 129},
    };
    tl_rng rng = {42};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (tl_sampled_out(i)) continue;
        run_q8case(impl, &cases[i], &rng);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* windows wider than every sequence                                                           */
/* ------------------------------------------------------------------------------------------ */

static void test_window_wide(const sdpa_impl *impl)
{
    const size_t B = 2, H = 2, Lq = 5, Lk = 37, D = 16;
    static const size_t kvl[2] = {37, 3}, ql[2] = {5, 4};
    tl_rng rng = {7};
    float *q = tl_xmalloc(B * H * Lq * D * sizeof(float));
    float *k = tl_xmalloc(B * H * Lk * D * sizeof(float));
    float *v = tl_xmalloc(B * H * Lk * D * sizeof(float));
    float *o0 = tl_xmalloc(B * H * Lq * D * sizeof(float)),
          *o1 = tl_xmalloc(B * H * Lq * D * sizeof(float));
    float lse0[B * H * Lq], lse1[B * H * Lq];
    tl_fill(&rng, q, B * H * Lq * D, -1, 1);
    tl_fill(&rng, k, B * H * Lk * D, -1, 1);
    tl_fill(&rng, v, B * H * Lk * D, -1, 1);
    sdpa_tensor tq = {q, SDPA_F32, (ptrdiff_t)(H * Lq * D), (ptrdiff_t)(Lq * D), (ptrdiff_t)D};
    sdpa_tensor tk = {k, SDPA_F32, (ptrdiff_t)(H * Lk * D), (ptrdiff_t)(Lk * D), (ptrdiff_t)D};
    sdpa_tensor tv = {v, SDPA_F32, (ptrdiff_t)(H * Lk * D), (ptrdiff_t)(Lk * D), (ptrdiff_t)D};
    sdpa_tensor to0 = {o0, SDPA_F32, (ptrdiff_t)(H * Lq * D), (ptrdiff_t)(Lq * D), (ptrdiff_t)D};
    sdpa_tensor to1 = to0;
    to1.data = o1;
    static const size_t wides[] = {SIZE_MAX,
                                   SIZE_MAX - 1,
                                   (size_t)PTRDIFF_MAX,
                                   (size_t)PTRDIFF_MAX + 1,
                                   (size_t)PTRDIFF_MAX - 3,
                                   1u << 31,
                                   Lq + Lk,
                                   Lk + 1};
    for (int ragged = 0; ragged < 2; ragged++)
        for (int causal = 0; causal < 2; causal++) {
            sdpa_params p = tl_params(B, H, H, Lq, Lk, D);
            p.causal = causal, p.lse = lse0;
            if (ragged) p.q_lens = ql, p.kv_lens = kvl;
            memset(o0, 0, B * H * Lq * D * sizeof(float));
            sdpa_status st = sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to0);
            CHECK(st == SDPA_OK, "no window: %s", sdpa_status_str(st));
            for (size_t w = 0; w < sizeof wides / sizeof wides[0]; w++) {
                sdpa_params pw = p;
                pw.window = wides[w];
                pw.lse = lse1;
                memset(o1, 0, B * H * Lq * D * sizeof(float));
                char msg[200];
                st = sdpa_validate(&pw, &tq, &tk, &tv, &to1, msg, sizeof msg);
                CHECK(st == SDPA_OK, "window %zu (causal %d, ragged %d) refused: %s", wides[w],
                      causal, ragged, msg);
                st = sdpa_impl_forward(impl, &pw, &tq, &tk, &tv, &to1);
                CHECK(st == SDPA_OK && memcmp(o0, o1, B * H * Lq * D * sizeof(float)) == 0 &&
                          memcmp(lse0, lse1, sizeof lse0) == 0,
                      "window %zu (causal %d, ragged %d): not the bits of no window (status %s, "
                      "o[0] %g against %g)",
                      wides[w], causal, ragged, sdpa_status_str(st), o1[0], o0[0]);
            }
        }
    free(q), free(k), free(v), free(o0), free(o1);
}

/* ------------------------------------------------------------------------------------------ */
/* outputs over arrays the call reads                                                          */
/* ------------------------------------------------------------------------------------------ */

/* A paged, ragged call with sinks, slopes and a mask, all its small arrays in one arena, so
   that o or lse can be placed over any of them. */
enum { AR_TABLE, AR_QLENS, AR_KVLENS, AR_CUQ, AR_SINKS, AR_SLOPES, AR_MASK, AR_WS, AR_N };
static const char *const ar_names[AR_N] = {"block_table", "q_lens",       "kv_lens", "cu_q",
                                           "sinks",       "alibi_slopes", "mask",    "workspace"};

static void test_outputs_over_reads(const sdpa_impl *impl)
{
    enum { B = 2, H = 2, LQ = 2, LK = 32, D = 16, PS = 16, MP = 2, NP = 4 };
    tl_rng rng = {3};
    float k[NP * H * PS * D], v[NP * H * PS * D], q[B * H * LQ * D], o[B * H * LQ * D];
    tl_fill(&rng, k, sizeof k / sizeof k[0], -1, 1);
    tl_fill(&rng, v, sizeof v / sizeof v[0], -1, 1);
    tl_fill(&rng, q, sizeof q / sizeof q[0], -1, 1);
    /* the arena: each array at its own 4 KiB-aligned offset, large enough for o or lse on top */
    const size_t slot = 4096, ws_bytes = 1 << 20;
    unsigned char *arena = tl_xmalloc(slot * AR_N + ws_bytes);
    for (int variant = 0; variant < 2; variant++) /* lens padded, or packed queries */
        for (int a = 0; a < AR_N; a++)
            for (int which = 0; which < 2; which++) { /* o, then lse, over array a */
                if (variant == 1 && a == AR_QLENS) continue;
                if (variant == 0 && a == AR_CUQ) continue;
                memset(arena, 0, slot * AR_N + ws_bytes);
                int32_t *tab = (int32_t *)(void *)(arena + slot * AR_TABLE);
                size_t *qlens = (size_t *)(void *)(arena + slot * AR_QLENS);
                size_t *kvlens = (size_t *)(void *)(arena + slot * AR_KVLENS);
                size_t *cuq = (size_t *)(void *)(arena + slot * AR_CUQ);
                float *sinks = (float *)(void *)(arena + slot * AR_SINKS);
                float *slopes = (float *)(void *)(arena + slot * AR_SLOPES);
                float *mask = (float *)(void *)(arena + slot * AR_MASK);
                void *ws = arena + slot * AR_WS;
                tab[0] = 3, tab[1] = 1, tab[2] = 0, tab[3] = 2;
                qlens[0] = 2, qlens[1] = 1, kvlens[0] = 32, kvlens[1] = 20;
                cuq[0] = 0, cuq[1] = 2, cuq[2] = 3;
                sinks[0] = 0.5f, sinks[1] = -1.0f, slopes[0] = 0.25f, slopes[1] = 0.125f;
                for (size_t e = 0; e < B * H * LQ * LK; e++) mask[e] = (float)(e % 3) - 1.0f;
                sdpa_tensor tm = {mask, SDPA_F32, H * LQ * LK, LQ * LK, LK};
                sdpa_params p = tl_params(B, H, H, LQ, LK, D);
                p.sinks = sinks, p.alibi_slopes = slopes, p.mask = &tm, p.kv_lens = kvlens;
                p.block_table = tab, p.page_size = PS, p.max_pages = MP, p.n_pages = NP;
                p.workspace = ws, p.workspace_bytes = ws_bytes;
                if (variant == 0)
                    p.q_lens = qlens;
                else
                    p.cu_q = cuq;
                float *lse_own = tl_xmalloc(B * H * LQ * sizeof(float));
                p.lse = lse_own;
                sdpa_tensor tq = {q, SDPA_F32, H * LQ * D, LQ * D, D};
                sdpa_tensor tk = {k, SDPA_F32, H * PS * D, PS * D, D};
                sdpa_tensor tv = {v, SDPA_F32, H * PS * D, PS * D, D};
                sdpa_tensor to = {o, SDPA_F32, H * LQ * D, LQ * D, D};
                if (variant == 1) /* packed queries: 3 tokens of batch 0 */
                    tq.batch_stride = to.batch_stride = 0, tq.head_stride = to.head_stride = 3 * D;
                char msg[200];
                sdpa_status st = sdpa_validate(&p, &tq, &tk, &tv, &to, msg, sizeof msg);
                CHECK(st == SDPA_OK, "the base call (variant %d) is refused: %s", variant, msg);
                /* the output lands at the start of array a (a one-element lse or o row) */
                unsigned char *target = arena + slot * a;
                if (which == 0)
                    to.data = target;
                else
                    p.lse = (float *)(void *)target;
                unsigned char *before = tl_xmalloc(slot * AR_N + ws_bytes);
                memcpy(before, arena, slot * AR_N + ws_bytes);
                st = sdpa_validate(&p, &tq, &tk, &tv, &to, msg, sizeof msg);
                CHECK(st == SDPA_ERR_INVALID_ARGUMENT && strstr(msg, ar_names[a]),
                      "%s over %s (variant %d): sdpa_validate gives %s, \"%s\"",
                      which ? "lse" : "o", ar_names[a], variant, sdpa_status_str(st), msg);
                st = sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to);
                CHECK(st == SDPA_ERR_INVALID_ARGUMENT, "%s over %s (variant %d): forward gives %s",
                      which ? "lse" : "o", ar_names[a], variant, sdpa_status_str(st));
                /* the workspace is scratch: only the other arrays must be untouched */
                CHECK(memcmp(before, arena, slot * AR_WS) == 0,
                      "%s over %s (variant %d): a refused call wrote", which ? "lse" : "o",
                      ar_names[a], variant);
                free(before);
                free(lse_own);
            }
    free(arena);
}

/* ------------------------------------------------------------------------------------------ */
/* the conversions                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* ggml's reference quantizers on a block whose largest |x| is subnormal: d = amax/127 (q8_0) or
   m/-8 (q4_0) rounds to the f16 0 and 1/d overflows to inf, so x/d is inf or NaN (0 inf), which
   the float-to-int8 conversion of x86 turns into 0x80000000, whose low byte is 0: every quant
   0, every q4_0 nibble 0 (the 8.5 offset is lost with it). Where 1/d is finite, the ordinary
   formula holds (checked by the quant test's table). */
static void test_quant_subnormal(void)
{
    tl_start("quant-subnormal", "api");
    static const float tops[] = {0x1p-127f, 0x1p-149f, 0x1.fffffcp-127f, 0x1p-130f};
    for (size_t t = 0; t < sizeof tops / sizeof tops[0]; t++)
        for (int sign = 0; sign < 2; sign++) {
            float x[32];
            for (int i = 0; i < 32; i++) x[i] = tops[t] * (float)(i % 5) / 4.0f * (i % 2 ? -1 : 1);
            x[7] = sign ? -tops[t] : tops[t];
            unsigned char b8[34], b4[18];
            memset(b8, 0xee, sizeof b8), memset(b4, 0xee, sizeof b4);
            CHECK(sdpa_quantize_q8_0(x, 32, b8) == SDPA_OK, "q8_0 top %a refused", (double)tops[t]);
            CHECK(sdpa_quantize_q4_0(x, 32, b4) == SDPA_OK, "q4_0 top %a refused", (double)tops[t]);
            for (int i = 0; i < 34; i++)
                CHECK(b8[i] == 0, "q8_0 top %a sign %d: byte %d is 0x%02x, ggml writes 0",
                      (double)tops[t], sign, i, b8[i]);
            /* q4_0: m the first element of largest magnitude, d = m / -8 (signed, and -0 for
               a positive m whose d underflows); where d is exactly 0, ggml's id is 0 and every
               nibble is trunc(8.5) = 8; otherwise 1 / d overflows here and every nibble is 0 */
            float m = 0;
            for (int i = 0; i < 32; i++)
                if (fabsf(x[i]) > fabsf(m)) m = x[i];
            volatile float dv = m / -8.0f;
            const float d = dv;
            CHECK(d == 0.0f || isinf(1.0f / d), "q4_0 top %a: 1 / d is finite", (double)tops[t]);
            const unsigned nib = d == 0.0f ? 8 : 0;
            CHECK(b4[0] == 0 && b4[1] == (signbit(d) ? 0x80 : 0),
                  "q4_0 top %a sign %d: scale bytes %02x %02x", (double)tops[t], sign, b4[0],
                  b4[1]);
            for (int i = 2; i < 18; i++)
                CHECK(b4[i] == (nib | nib << 4),
                      "q4_0 top %a sign %d: byte %d is 0x%02x, ggml writes 0x%02x", (double)tops[t],
                      sign, i, b4[i], nib | nib << 4);
        }
    /* a tiny normal top whose d is an f16 0 but whose 1 / d is finite: the ordinary formula,
       d = 2^-120 / -8 = -2^-123 (stored as f16 -0), x / d + 8.5 truncated */
    float x[32] = {0};
    x[0] = 0x1p-120f, x[1] = -0x1p-121f;
    unsigned char b4[18];
    CHECK(sdpa_quantize_q4_0(x, 32, b4) == SDPA_OK, "q4_0 top 2^-120 refused");
    /* x0 / d = -8 -> nibble 0; x1 / d = 4 -> 12; zeros -> 8 */
    CHECK(b4[0] == 0 && b4[1] == 0x80, "q4_0 top 2^-120: scale bytes %02x %02x, want f16 -0", b4[0],
          b4[1]);
    CHECK(b4[2] == (0 | 8 << 4) && b4[3] == (12 | 8 << 4) && b4[4] == (8 | 8 << 4),
          "q4_0 top 2^-120: quant bytes %02x %02x %02x, want 80 8c 88", b4[2], b4[3], b4[4]);
    tl_end();
}

static void test_quant_empty(void)
{
    tl_start("quant-empty", "api");
    float x = 1.0f, y = 2.0f;
    unsigned char b = 0xab;
    CHECK(sdpa_quantize_q8_0(&x, 0, &b) == SDPA_OK && b == 0xab,
          "q8_0 n = 0: not an empty success");
    CHECK(sdpa_quantize_q4_0(&x, 0, &b) == SDPA_OK && b == 0xab,
          "q4_0 n = 0: not an empty success");
    CHECK(sdpa_dequantize_q8_0(&b, 0, &y) == SDPA_OK && y == 2.0f, "q8_0 dequantize n = 0");
    CHECK(sdpa_dequantize_q4_0(&b, 0, &y) == SDPA_OK && y == 2.0f, "q4_0 dequantize n = 0");
    CHECK(sdpa_quantize_q8_0(NULL, 0, &b) == SDPA_ERR_INVALID_ARGUMENT,
          "q8_0 NULL x, n = 0 accepted");
    CHECK(sdpa_quantize_q4_0(&x, 0, NULL) == SDPA_ERR_INVALID_ARGUMENT,
          "q4_0 NULL dst, n = 0 accepted");
    CHECK(sdpa_dequantize_q8_0(NULL, 0, &y) == SDPA_ERR_INVALID_ARGUMENT,
          "dequantize NULL src accepted");
    CHECK(sdpa_dequantize_q4_0(&b, 0, NULL) == SDPA_ERR_INVALID_ARGUMENT,
          "dequantize NULL y accepted");
    tl_end();
}

int main(void)
{
    tl_header("regressions: defects found from outside the suite");
    if (!tl_pools_create(g_pool, 2, 2, 29)) return 1;
    tl_for_each_impl("q8-scores-slot", test_q8_scores_slot);
    tl_for_each_impl("window-wide", test_window_wide);
    tl_for_each_impl("outputs-over-reads", test_outputs_over_reads);
    test_quant_subnormal();
    test_quant_empty();
    return tl_pools_finish(g_pool, 2);
}
