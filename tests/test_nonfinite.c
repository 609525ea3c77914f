/* test_nonfinite.c -- the NaN/inf contract of sdpa.h on every implementation, split or not, serial
 * or pooled */
#include "testlib.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "convert.h"
#include "pool.h"

/*
 * Each case states a small problem (batch 1, dense [head][token][dim] views) whose values put a
 * NaN, an inf, a huge or a tiny number where the contract says what must come out, and checks
 * every row against a float64 oracle that applies the contract's rules: a NaN (or +inf) in an
 * attended score makes the row's o and lse NaN; a non-finite attended V element makes that
 * output element non-finite; keys a row does not see never reach it; a row that sees nothing
 * gives zeros and lse -inf. Every case runs serially and through a pool that shuffles its
 * tasks; both must give the same bits. kv_len >= 2048 with one query block makes the driver
 * split the keys into chunks and merge them, so the long cases run the merge.
 */

typedef struct prob {
    const char *name;
    size_t hq, hkv, ql, kvl, d;
    float scale; /* 0: 1/sqrt(d) */
    bool causal;
    sdpa_dtype kt, vt;
    float *q, *k, *v; /* [h][t][d] values; k and v are stored as kt/vt (rounded) */
} prob;

static bench_pool *g_pool;

static void prob_init(prob *p, const char *name, size_t hq, size_t hkv, size_t ql, size_t kvl,
                      size_t d, float scale, bool causal, sdpa_dtype kt, sdpa_dtype vt,
                      uint64_t seed)
{
    *p = (prob){name, hq, hkv, ql, kvl, d, scale, causal, kt, vt, NULL, NULL, NULL};
    p->q = tl_xmalloc(hq * ql * d * sizeof(float));
    p->k = tl_xmalloc(hkv * kvl * d * sizeof(float));
    p->v = tl_xmalloc(hkv * kvl * d * sizeof(float));
    tl_rng r = {seed};
    tl_fill(&r, p->q, hq * ql * d, -1.0f, 1.0f);
    tl_fill(&r, p->k, hkv * kvl * d, -1.0f, 1.0f);
    tl_fill(&r, p->v, hkv * kvl * d, -1.0f, 1.0f);
}

static void prob_free(prob *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
}

static float *qe(prob *p, size_t h, size_t i, size_t c)
{
    return p->q + (h * p->ql + i) * p->d + c;
}
static float *ke(prob *p, size_t h, size_t j, size_t c)
{
    return p->k + (h * p->kvl + j) * p->d + c;
}
static float *ve(prob *p, size_t h, size_t j, size_t c)
{
    return p->v + (h * p->kvl + j) * p->d + c;
}

/* A K/V array in its storage type, and the values the library will read, as doubles. */
static void *store(const float *x, size_t n, sdpa_dtype t, double *back)
{
    void *buf = tl_xmalloc(n * sdpa_dtype_size(t));
    for (size_t e = 0; e < n; e++) {
        if (t == SDPA_F16) {
            ((uint16_t *)buf)[e] = sdpa_f32_to_f16(x[e]);
            back[e] = sdpa_f16_to_f32(((uint16_t *)buf)[e]);
        } else if (t == SDPA_BF16) {
            ((uint16_t *)buf)[e] = sdpa_f32_to_bf16(x[e]);
            back[e] = sdpa_bf16_to_f32(((uint16_t *)buf)[e]);
        } else {
            ((float *)buf)[e] = x[e];
            back[e] = x[e];
        }
    }
    return buf;
}

static bool same_bits(float a, float b)
{
    return (isnan(a) && isnan(b)) || tl_bits(a) == tl_bits(b);
}

static const char *dt_name(sdpa_dtype t)
{
    return t == SDPA_F16 ? "f16" : t == SDPA_BF16 ? "bf16" : "f32";
}

/* Runs p on impl serially and pooled, checks both against the oracle row by row. */
static void run_prob(const sdpa_impl *impl, prob *p)
{
    const size_t d = p->d, nq = p->hq * p->ql, nkv = p->hkv * p->kvl, G = p->hq / p->hkv;
    double *kd = tl_xmalloc(nkv * d * sizeof(double)), *vd = tl_xmalloc(nkv * d * sizeof(double));
    void *kb = store(p->k, nkv * d, p->kt, kd), *vb = store(p->v, nkv * d, p->vt, vd);
    float *o[2], *lse[2];
    for (int m = 0; m < 2; m++) {
        o[m] = tl_xmalloc(nq * d * sizeof(float));
        lse[m] = tl_xmalloc(nq * sizeof(float));
        tl_fill_sentinel(o[m], nq * d);
        tl_fill_sentinel(lse[m], nq);
    }
    char what[200];
    snprintf(what, sizeof what, "%s [hq=%zu hkv=%zu q_len=%zu kv_len=%zu d=%zu%s K %s V %s]",
             p->name, p->hq, p->hkv, p->ql, p->kvl, d, p->causal ? " causal" : "", dt_name(p->kt),
             dt_name(p->vt));
    sdpa_tensor tq = {p->q, SDPA_F32, 0, (ptrdiff_t)(p->ql * d), (ptrdiff_t)d};
    sdpa_tensor tk = {kb, p->kt, 0, (ptrdiff_t)(p->kvl * d), (ptrdiff_t)d};
    sdpa_tensor tv = {vb, p->vt, 0, (ptrdiff_t)(p->kvl * d), (ptrdiff_t)d};
    for (int m = 0; m < 2; m++) {
        sdpa_params pr = tl_params(1, p->hq, p->hkv, p->ql, p->kvl, d);
        pr.scale = p->scale, pr.causal = p->causal, pr.lse = lse[m];
        if (m == 1) {
            pr.parallel_for = bench_pool_parallel_for;
            pr.pool = g_pool;
            pr.n_threads = bench_pool_threads(g_pool);
        }
        sdpa_tensor to = {o[m], SDPA_F32, 0, (ptrdiff_t)(p->ql * d), (ptrdiff_t)d};
        const sdpa_status st = sdpa_impl_forward(impl, &pr, &tq, &tk, &tv, &to);
        CHECK(st == SDPA_OK, "%s: status %s", what, sdpa_status_str(st));
    }
    for (size_t e = 0; e < nq * d; e++)
        if (!CHECK(same_bits(o[0][e], o[1][e]), "%s: element %zu serial %a pooled %a", what, e,
                   o[0][e], o[1][e]))
            break;
    for (size_t e = 0; e < nq; e++)
        if (!CHECK(same_bits(lse[0][e], lse[1][e]), "%s: lse %zu serial %a pooled %a", what, e,
                   lse[0][e], lse[1][e]))
            break;

    const double scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)d);
    double *s = tl_xmalloc(p->kvl * sizeof(double));
    for (size_t h = 0; h < p->hq && !tl_give_up(); h++) {
        const size_t kh = h / G;
        for (size_t i = 0; i < p->ql; i++) {
            const size_t row = h * p->ql + i;
            size_t lim = p->kvl;
            if (p->causal)
                lim = i + 1 + p->kvl <= p->ql ? 0 : i + 1 + p->kvl - p->ql; /* <= kv_len */
            bool nan = false, any = false;
            double mx = -INFINITY, A = 0.0;
            for (size_t j = 0; j < lim; j++) {
                double acc = 0.0, ab = 0.0;
                for (size_t c = 0; c < d; c++) {
                    const double x = (double)*qe(p, h, i, c) * kd[(kh * p->kvl + j) * d + c];
                    acc += x;
                    ab += fabs(x);
                }
                s[j] = scale * acc;
                A = fmax(A, fabs(scale) * ab);
                if (isnan(s[j]) || s[j] == INFINITY) nan = true;
                if (s[j] > mx) mx = s[j];
                any |= s[j] != -INFINITY;
            }
            const float *orow = o[0] + row * d;
            const float ls = lse[0][row];
            if (nan) {
                for (size_t c = 0; c < d; c++)
                    if (!CHECK(isnan(orow[c]),
                               "%s: row %zu (head %zu, query %zu) must be NaN: o[%zu] = %g", what,
                               row, h, i, c, orow[c]))
                        break;
                CHECK(isnan(ls), "%s: row %zu: lse must be NaN, is %g", what, row, ls);
                continue;
            }
            if (!any) {
                for (size_t c = 0; c < d; c++)
                    if (!CHECK(tl_bits(orow[c]) == 0, "%s: row %zu sees nothing: o[%zu] = %g", what,
                               row, c, orow[c]))
                        break;
                CHECK(ls == -INFINITY, "%s: row %zu sees nothing: lse %g", what, row, ls);
                continue;
            }
            double l = 0.0;
            for (size_t j = 0; j < lim; j++) l += exp(s[j] - mx);
            const double E =
                1e-5 * sqrt(1.0 + (double)lim / 256.0) + 8.0 * TL_U * sqrt((double)d) * A;
            for (size_t c = 0; c < d; c++) {
                double num = 0.0, wabs = 0.0, vmax = 0.0;
                for (size_t j = 0; j < lim; j++) {
                    const double w = exp(s[j] - mx), x = vd[(kh * p->kvl + j) * d + c];
                    num += w * x;
                    wabs += w * fabs(x);
                    vmax = fmax(vmax, fabs(x));
                }
                const double ref = num / l;
                if (!isfinite(ref)) {
                    CHECK(!isfinite(orow[c]),
                          "%s: row %zu o[%zu]: an attended V element is not finite, "
                          "the output must not be either: %g",
                          what, row, c, orow[c]);
                    continue;
                }
                /* E relative to the weighted |v|, plus the weights SIMD kernels flush below e^-54
                   of the row maximum (sdpa.h: at most n e^-54 max|v| / l) */
                const double tol = E * wabs / l + (double)lim * SDPA_TEST_FLUSH * vmax / l;
                CHECK(isfinite(orow[c]) && fabs(orow[c] - ref) <= tol,
                      "%s: row %zu o[%zu] = %.9g, float64 %.9g (tol %.3g)", what, row, c, orow[c],
                      ref, tol);
            }
            const double lref = mx + log(l);
            CHECK(fabs(ls - lref) <= 1e-5 * (1.0 + fabs(lref)) + 8.0 * TL_U * sqrt((double)d) * A,
                  "%s: row %zu lse %.9g, float64 %.9g", what, row, ls, lref);
        }
    }
    free(s);
    for (int m = 0; m < 2; m++) {
        free(o[m]);
        free(lse[m]);
    }
    free(kd);
    free(vd);
    free(kb);
    free(vb);
}

/* 1. A NaN query element, keys split into chunks or not (kv_len 2047 is one chunk, 2048 two). */
static void t_nan_query(const sdpa_impl *impl)
{
    static const size_t lens[] = {1, 100, 2047, 2048, 4096};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (size_t hq = 1; hq <= 4; hq *= 4) {
            prob p;
            prob_init(&p, "NaN in q", hq, 1, 1, lens[li], 64, 0, false, SDPA_F16, SDPA_F16,
                      11 + li);
            *qe(&p, 0, 0, 0) = NAN;
            run_prob(impl, &p);
            prob_free(&p);
        }
}

/* 2. One NaN score in each 1024-key chunk; 3. every score of one chunk NaN (first or last). */
static void t_nan_scores(const sdpa_impl *impl)
{
    static const sdpa_dtype dts[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    for (size_t ti = 0; ti < 3; ti++)
        for (int variant = 0; variant < 4; variant++) {
            prob p;
            const size_t kvl = variant == 3 ? 700 : 2048;
            prob_init(&p,
                      variant == 0   ? "a NaN score per chunk"
                      : variant == 1 ? "first chunk all NaN"
                      : variant == 2 ? "last chunk all NaN"
                                     : "all NaN, unsplit",
                      2, 1, 1, kvl, 32, 0, false, dts[ti], dts[ti], 21 + (uint64_t)variant);
            for (size_t j = 0; j < kvl; j++) {
                const bool nan = variant == 0   ? j == 5 || j == 1029
                                 : variant == 1 ? j < 1024
                                 : variant == 2 ? j >= 1024
                                                : true;
                if (nan) *ke(&p, 0, j, 3) = NAN;
            }
            run_prob(impl, &p);
            prob_free(&p);
        }
}

/* 4. Keys a row does not see never reach it: the last key's V (or K) is inf or NaN, and only
   the rows that see it (causal) may show it; lengths reach both the few-row and many-row paths. */
static void t_masked_keys(const sdpa_impl *impl)
{
    static const size_t lens[] = {2, 3, 5, 9, 16, 17, 40, 100};
    static const sdpa_dtype dts[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int what = 0; what < 3; what++)
            for (size_t g = 1; g <= 4; g *= 4) {
                const size_t n = lens[li];
                const sdpa_dtype t = dts[(li + (size_t)what) % 3];
                prob p;
                prob_init(&p,
                          what == 0   ? "V past the limit +inf"
                          : what == 1 ? "V past the limit NaN"
                                      : "K past the limit NaN",
                          g, 1, n, n, 24, 0, true, t, t, 31 + li);
                for (size_t c = 0; c < p.d; c++) {
                    if (what == 2)
                        *ke(&p, 0, n - 1, c) = NAN;
                    else if (c == 0 || c == 9)
                        *ve(&p, 0, n - 1, c) = what == 0 ? INFINITY : NAN;
                }
                /* a second non-finite key in the middle: seen by the later half of the rows */
                *ve(&p, 0, n / 2, 1) = -INFINITY;
                run_prob(impl, &p);
                prob_free(&p);
            }
}

/* 5. scale * q overflows or underflows float although the scores fit. */
static void t_scale_range(const sdpa_impl *impl)
{
    static const size_t dims[] = {1, 4, 33, 64};
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
        const size_t d = dims[di];
        for (int kvl_i = 0; kvl_i < 2; kvl_i++) {
            const size_t kvl = kvl_i ? 2048 : 3;
            prob p;
            /* scale * q = 1e40: the scores are s_j / d * d, about 1 */
            prob_init(&p, "scale*q overflows", 1, 1, 1, kvl, d, 1e35f, false, SDPA_F32, SDPA_F32,
                      41 + di);
            for (size_t c = 0; c < d; c++) *qe(&p, 0, 0, c) = 1e5f;
            for (size_t j = 0; j < kvl; j++)
                for (size_t c = 0; c < d; c++)
                    *ke(&p, 0, j, c) = (float)((double)((j * 7) % 5) * 0.6e-40 / (double)d);
            run_prob(impl, &p);
            prob_free(&p);
            /* the example, d elements: q = 1e10, k = {1e-20, 2e-20}, scale 1e30 */
            prob_init(&p, "scores 1e20 and 2e20", 1, 1, 1, 2, d, 1e30f, false, SDPA_F32, SDPA_F32,
                      43);
            for (size_t c = 0; c < d; c++) {
                *qe(&p, 0, 0, c) = c == 0 ? 1e10f : 0.0f;
                *ke(&p, 0, 0, c) = 1e-20f, *ke(&p, 0, 1, c) = 2e-20f;
                *ve(&p, 0, 0, c) = 1.0f, *ve(&p, 0, 1, c) = 3.0f;
            }
            run_prob(impl, &p);
            prob_free(&p);
            /* scale * q = 1e-60 underflows against keys of -inf: the row sees only -inf */
            prob_init(&p, "tiny scale*q against -inf keys", 2, 1, 1, kvl, d, 1e-30f, false,
                      SDPA_F32, SDPA_F32, 47);
            for (size_t c = 0; c < d; c++) *qe(&p, 0, 0, c) = *qe(&p, 1, 0, c) = 1e-30f;
            for (size_t j = 0; j < kvl; j++)
                for (size_t c = 0; c < d; c++) *ke(&p, 0, j, c) = -INFINITY;
            run_prob(impl, &p);
            prob_free(&p);
            /* scale * q = 4e-45 (subnormal as a product) against large keys: scores about 1 */
            prob_init(&p, "scale*q underflows", 1, 1, 1, kvl, d, 2e-25f, false, SDPA_F32, SDPA_F32,
                      53);
            for (size_t c = 0; c < d; c++) *qe(&p, 0, 0, c) = 2e-20f;
            for (size_t j = 0; j < kvl; j++)
                for (size_t c = 0; c < d; c++)
                    *ke(&p, 0, j, c) = (float)((double)((j * 3) % 4) * 1e38 / (double)d);
            run_prob(impl, &p);
            prob_free(&p);
        }
    }
}

/* The output of one row over 2 keys of d = 1: q 1, scores 0 and s1 (scale 1), V 0 and 1e38, so
   that the second key's weight e^s1 shows as e^s1 1e38; computed serially (status in *st). */
static float two_keys_o(const sdpa_impl *impl, float s1, sdpa_status *st)
{
    float q = 1.0f, k[2] = {0.0f, s1}, v[2] = {0.0f, 1e38f}, o = -1.0f, lse;
    sdpa_params pr = tl_params(1, 1, 1, 1, 2, 1);
    pr.scale = 1.0f, pr.lse = &lse;
    sdpa_tensor tq = {&q, SDPA_F32, 1, 1, 1}, tk = {k, SDPA_F32, 2, 2, 1},
                tv = {v, SDPA_F32, 2, 2, 1}, to = {&o, SDPA_F32, 1, 1, 1};
    *st = sdpa_impl_forward(impl, &pr, &tq, &tk, &tv, &to);
    return o;
}

/* 6. Weights below e^-54 of the row maximum: kept by the reference, flushed by SIMD kernels
   within the stated bound; weights just above the cut are kept by every implementation. */
static void t_tiny_weights(const sdpa_impl *impl)
{
    for (int above = 0; above < 2; above++) {
        prob p;
        prob_init(&p, above ? "weight e^-53" : "weight e^-55", 1, 1, 1, 2, 1, 1.0f, false, SDPA_F32,
                  SDPA_F32, 61);
        *qe(&p, 0, 0, 0) = 1.0f;
        *ke(&p, 0, 0, 0) = 0.0f, *ke(&p, 0, 1, 0) = above ? -53.0f : -55.0f;
        *ve(&p, 0, 0, 0) = 0.0f, *ve(&p, 0, 1, 0) = 1e38f;
        run_prob(impl, &p);
        const double want = exp(above ? -53.0 : -55.0) * 1e38;
        sdpa_status st;
        const float o = two_keys_o(impl, above ? -53.0f : -55.0f, &st);
        CHECK(st == SDPA_OK, "%s", p.name);
        if (above || strcmp(sdpa_impl_name(impl), "scalar") == 0)
            CHECK(fabs(o - want) <= 1e-5 * want, "%s: o = %.9g, float64 %.9g", p.name, o, want);
        else /* the documented flush: exactly 0 */
            CHECK(o == 0.0f || fabs(o - want) <= 1e-5 * want, "%s: o = %.9g, neither 0 nor %.9g",
                  p.name, o, want);
        prob_free(&p);
    }
}

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_DE_FLAG 1
/* MXCSR's denormal-operand flag (DE), set by an SSE/AVX operation that reads a subnormal: what
   takes the microcode assist. (Underflow, a tiny result, also comes of an exp that rounds to
   0, as exp(-inf) for a row's first rescale, which costs nothing later.) */
static void de_flag_clear(void) { _mm_setcsr(_mm_getcsr() & ~0x2u); }
static bool de_flag(void) { return (_mm_getcsr() & 0x2u) != 0; }
#else
#define HAVE_DE_FLAG 0
static void de_flag_clear(void) {}
static bool de_flag(void) { return false; }
#endif

/* A reason to skip impl in t_no_subnormals: it keeps tiny weights (sdpa.h allows a flush below
   e^-54; a weight of e^-88 tells), or the architecture has no denormal-operand flag. */
static const char *keeps_tiny_weights(const sdpa_impl *impl)
{
    if (!HAVE_DE_FLAG) return "no denormal-operand flag on this architecture";
    sdpa_status st;
    const float o = two_keys_o(impl, -88.0f, &st);
    return st == SDPA_OK && o == 0.0f ? NULL : "keeps tiny weights: its P·V may build subnormals";
}

/* 7. An implementation that flushes tiny weights reads no subnormal anywhere in a call over f16
   K and V whose weights fill the band [e^-90, 1] (the scores of every block spread over
   [-90, 0], as ALiBi's steep heads and distance masks make them), and over q8_0 V: decode (4
   and 1 rows per KV head) and prefill (causal), serially, the thread's denormal-operand flag
   read around the call; the f16 result also against float64 (run_prob). With the cut at e^-87 the
   P·V's sums cancelled into subnormals, and every FMA that read one took a microcode assist. */
static void t_no_subnormals(const sdpa_impl *impl)
{
    static const struct {
        size_t hq, hkv, ql, kvl;
        bool causal;
    } shapes[] = {{4, 1, 1, 700, false}, {2, 2, 1, 600, false}, {2, 1, 80, 300, true}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        prob p;
        const size_t d = 64;
        prob_init(&p, "scores spread over [-90, 0]", shapes[si].hq, shapes[si].hkv, shapes[si].ql,
                  shapes[si].kvl, d, 1.0f, shapes[si].causal, SDPA_F16, SDPA_F16, 97 + si);
        /* q = e_0 for every row, k_j = (c_j, 0, ...): score c_j, uniform in [-90, 0] */
        tl_rng r = {131 + si};
        for (size_t i = 0; i < p.hq * p.ql * d; i++) p.q[i] = i % d == 0 ? 1.0f : 0.0f;
        for (size_t i = 0; i < p.hkv * p.kvl * d; i++)
            p.k[i] = i % d == 0 ? tl_uniform(&r, -90.0f, 0.0f) : 0.0f;
        run_prob(impl, &p);
        const size_t nkv = p.hkv * p.kvl * d;
        double *back = tl_xmalloc(nkv * sizeof(double));
        void *kh = store(p.k, nkv, SDPA_F16, back), *vh = store(p.v, nkv, SDPA_F16, back);
        void *vq = tl_xmalloc(sdpa_dtype_bytes(SDPA_Q8_0, nkv));
        CHECK(sdpa_quantize(SDPA_Q8_0, p.v, nkv, vq) == SDPA_OK, "quantize V");
        float *o = tl_xmalloc(p.hq * p.ql * d * sizeof(float));
        sdpa_params pr = tl_params(1, p.hq, p.hkv, p.ql, p.kvl, d);
        pr.scale = 1.0f, pr.causal = p.causal;
        sdpa_tensor tq = {p.q, SDPA_F32, 0, (ptrdiff_t)(p.ql * d), (ptrdiff_t)d};
        sdpa_tensor tk = {kh, SDPA_F16, 0, (ptrdiff_t)(p.kvl * d), (ptrdiff_t)d};
        sdpa_tensor to = {o, SDPA_F32, 0, (ptrdiff_t)(p.ql * d), (ptrdiff_t)d};
        for (int q8 = 0; q8 < 2; q8++) { /* V in f16, then in q8_0 (the block-format path) */
            sdpa_tensor tv = {q8 ? vq : vh, q8 ? SDPA_Q8_0 : SDPA_F16, 0, (ptrdiff_t)(p.kvl * d),
                              (ptrdiff_t)d};
            de_flag_clear();
            const sdpa_status st = sdpa_impl_forward(impl, &pr, &tq, &tk, &tv, &to);
            const bool sub = de_flag();
            CHECK(st == SDPA_OK, "status %s", sdpa_status_str(st));
            CHECK(!sub, "hq %zu hkv %zu q_len %zu kv_len %zu V %s: an operation read a subnormal",
                  p.hq, p.hkv, p.ql, p.kvl, q8 ? "q8_0" : "f16");
        }
        free(back), free(kh), free(vh), free(vq), free(o);
        prob_free(&p);
    }
}

/* Rows that see nothing (causal, q_len > kv_len) and rows whose keys are all -inf, split or not. */
static void t_empty_rows(const sdpa_impl *impl)
{
    prob p;
    prob_init(&p, "causal rows before the keys", 2, 1, 5, 2, 16, 0, true, SDPA_F16, SDPA_F16, 71);
    run_prob(impl, &p);
    prob_free(&p);
    for (int split = 0; split < 2; split++) {
        prob_init(&p, "keys all -inf, V NaN", 1, 1, 1, split ? 3000 : 30, 8, 0, false, SDPA_F32,
                  SDPA_F32, 73);
        for (size_t j = 0; j < p.kvl; j++) {
            for (size_t c = 0; c < p.d; c++)
                *ke(&p, 0, j, c) = *qe(&p, 0, 0, c) > 0 ? -INFINITY : INFINITY;
            *ve(&p, 0, j, 0) = NAN;
        }
        run_prob(impl, &p);
        prob_free(&p);
        /* one chunk all -inf, the other ordinary: the -inf chunk must not count */
        prob_init(&p, "one chunk all -inf", 1, 1, 1, split ? 3000 : 30, 8, 0, false, SDPA_F32,
                  SDPA_F32, 79);
        for (size_t j = 0; j < p.kvl / 2; j++)
            for (size_t c = 0; c < p.d; c++)
                *ke(&p, 0, j, c) = *qe(&p, 0, 0, c) > 0 ? -INFINITY : INFINITY;
        run_prob(impl, &p);
        prob_free(&p);
    }
}

int main(void)
{
    tl_header("the NaN/inf contract (sdpa.h) on every implementation, serial and pooled");
    g_pool = bench_pool_create_opts(
        &(bench_pool_options){.n_threads = 2, .order = BENCH_POOL_SHUFFLE, .seed = 7});
    if (!g_pool) {
        printf("Bail out! no thread pool\n");
        return 1;
    }
    tl_for_each_impl("NaN query, split or not", t_nan_query);
    tl_for_each_impl("NaN scores in chunks", t_nan_scores);
    tl_for_each_impl("keys past a row's limit never reach it", t_masked_keys);
    tl_for_each_impl("scale*q out of float range", t_scale_range);
    tl_for_each_impl("weights near the flush cut", t_tiny_weights);
    tl_for_each_impl_unless("no subnormals below the flush cut", t_no_subnormals,
                            keeps_tiny_weights);
    tl_for_each_impl("rows that see nothing", t_empty_rows);
    bench_pool_destroy(g_pool);
    return tl_finish();
}
