/* test_tanh.c -- every implementation's tanh over every finite float against the double tanh() */
#include "testlib.h"

#include <pthread.h>
#include <stdatomic.h>

/*
 * The domain is every finite non-negative float, as bit patterns 0x00000000 (+0) ...
 * 0x7f7fffff (FLT_MAX): 2,139,095,040 values, enumerated by index i -> bits i. It includes the
 * whole range where tanh does not round to 1 (below about 9.01) and everything beyond it. Each
 * value is checked against the stated bound, and its negation bit for bit against the negated
 * result (tanh(-x) = -tanh(x)), so together every finite float is covered; infinities and NaN
 * are the special-value test's.
 *
 * Error measure: |y - e| / ulp(e), e = tanh((double)x), ulp(e) = 2^(floor(log2 e) - 23) but at
 * least 2^-149 (the subnormal spacing; e = 0 for x = 0). The double tanh() is accurate to a few
 * double ULPs, 2^-28 float ULPs, negligible at the resolution of the bound being checked.
 *
 * The reference is computed once per chunk and every supported implementation is checked on it,
 * on its negation and, every IN_PLACE_EVERY-th chunk, in place (y == x); two threads share the
 * chunks. SDPA_TANH_STRIDE=N checks every Nth float instead. When it is unset and
 * SDPA_EXP_STRIDE=S is set (as the slow emulated runs do), the stride is 4S + 1: twice the exp
 * test's domain at twice its calls per value, and odd, so that the sample still meets every
 * pattern of low mantissa bits. The default 1 is exhaustive.
 */
#define LAST_BITS      0x7f7fffffu /* FLT_MAX */
#define CHUNK          (1u << 16)
#define IN_PLACE_EVERY 16
#define N_THREADS      2
#define MAX_IMPLS      16
#define MAX_SHOWN      4

typedef struct impl_result {
    double max_err;    /* largest error seen, ULPs */
    uint32_t max_bits; /* where */
    uint64_t n_bad;    /* values over the stated bound (or NaN) */
    uint32_t bad_bits[MAX_SHOWN];
    float bad_y[MAX_SHOWN];
    uint64_t n_odd_bad; /* x whose tanh(-x) is not -tanh(x) bit for bit */
    uint32_t odd_bits[MAX_SHOWN];
    float odd_yp[MAX_SHOWN], odd_yn[MAX_SHOWN];
    uint64_t n_in_place;     /* values also computed in place */
    uint64_t n_in_place_bad; /* ... with other bits than out of place */
    uint32_t in_place_bits;  /* the first of them */
} impl_result;

static const sdpa_impl *impls[MAX_IMPLS];
static double bounds[MAX_IMPLS];
static size_t n_impls;
static uint64_t stride = 1;
static uint64_t n_values; /* values checked per implementation */
static uint64_t n_chunks;
static atomic_ulong next_chunk;
static impl_result results[N_THREADS][MAX_IMPLS];

/* The test's own bulk loops over its own arrays are left out of the sanitizers: checking them
   would only multiply the run time, while the implementations' tanh (the code under test) stays
   instrumented. */
#if defined(__GNUC__) || defined(__clang__)
#define NOT_SANITIZED                                                                              \
    __attribute__((no_sanitize("address"))) __attribute__((no_sanitize("undefined")))
#else
#define NOT_SANITIZED
#endif

/* 1 / ulp(e) as an exact power of two, from the exponent field of e >= 0 (0 and doubles below
   2^-126 get the subnormal spacing's). */
NOT_SANITIZED static inline double inv_ulp(double e)
{
    uint64_t b;
    memcpy(&b, &e, sizeof b);
    int64_t k = (int64_t)((b >> 52) & 0x7ff) - 1023 - 23; /* ulp = 2^k */
    if (k < -149) k = -149;
    uint64_t ib = (uint64_t)(1023 - k) << 52;
    double inv;
    memcpy(&inv, &ib, sizeof inv);
    return inv;
}

/* x, -x, tanh(x) in double and 1/ulp for values first .. first + cnt - 1. Separate simple loops,
   so that all but the libm calls vectorize. */
NOT_SANITIZED static void make_reference(float *x, float *xn, double *ref, double *inv,
                                         uint64_t first, uint64_t cnt)
{
    for (uint64_t i = 0; i < cnt; i++) {
        const uint32_t b = (uint32_t)((first + i) * stride), bn = b | 0x80000000u;
        memcpy(&x[i], &b, sizeof b);
        memcpy(&xn[i], &bn, sizeof bn);
    }
    for (uint64_t i = 0; i < cnt; i++) ref[i] = tanh((double)x[i]);
    for (uint64_t i = 0; i < cnt; i++) inv[i] = inv_ulp(ref[i]);
}

/* The largest error of a chunk, as the bits of a non-negative float (whose integer order is the
   numeric order, a NaN ranking above everything): one vectorizable pass. */
NOT_SANITIZED static int32_t max_error_bits(const float *y, const double *ref, const double *inv,
                                            uint64_t cnt)
{
    int32_t mx_bits = 0;
    for (uint64_t i = 0; i < cnt; i++) {
        const float e = (float)(fabs((double)y[i] - ref[i]) * inv[i]);
        int32_t b;
        memcpy(&b, &e, sizeof b);
        mx_bits = b > mx_bits ? b : mx_bits;
    }
    return mx_bits;
}

/* How many of a[i], b[i] differ in their bits by other than flip (0: equal bits). */
NOT_SANITIZED static uint64_t count_unlike(const float *a, const float *b, uint32_t flip,
                                           uint64_t cnt)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < cnt; i++) {
        uint32_t ua, ub;
        memcpy(&ua, &a[i], sizeof ua);
        memcpy(&ub, &b[i], sizeof ub);
        bad += (ua ^ ub) != flip;
    }
    return bad;
}

/* The rare path of a chunk with a value over the bound or a new maximum: find where. */
static void scan_errors(impl_result *res, double bound, const float *x, const float *y,
                        const double *ref, const double *inv, uint64_t cnt)
{
    for (uint64_t i = 0; i < cnt; i++) {
        const double err = fabs((double)y[i] - ref[i]) * inv[i];
        if (err > res->max_err) {
            res->max_err = err;
            res->max_bits = tl_bits(x[i]);
        }
        if (!(err <= bound)) {
            if (res->n_bad < MAX_SHOWN) {
                res->bad_bits[res->n_bad] = tl_bits(x[i]);
                res->bad_y[res->n_bad] = y[i];
            }
            res->n_bad++;
        }
    }
}

static void *worker(void *argp)
{
    const size_t t = (size_t)(uintptr_t)argp;
    float *x = tl_xmalloc(CHUNK * sizeof(float));
    float *xn = tl_xmalloc(CHUNK * sizeof(float));
    float *y = tl_xmalloc(CHUNK * sizeof(float));
    float *yn = tl_xmalloc(CHUNK * sizeof(float));
    float *w = tl_xmalloc(CHUNK * sizeof(float));
    double *ref = tl_xmalloc(CHUNK * sizeof(double));
    double *inv = tl_xmalloc(CHUNK * sizeof(double));
    impl_result *res = results[t];
    for (;;) {
        const uint64_t c = atomic_fetch_add(&next_chunk, 1);
        if (c >= n_chunks) break;
        const uint64_t first = c * CHUNK, cnt = n_values - first < CHUNK ? n_values - first : CHUNK;
        make_reference(x, xn, ref, inv, first, cnt);
        for (size_t m = 0; m < n_impls; m++) {
            impl_result *r = &res[m];
            sdpa_impl_tanh_f32(impls[m], x, y, cnt);
            /* Only a chunk whose maximum reaches the bound, or beats the maximum so far (at float
               resolution, ample for reporting it), is scanned again exactly in double: rare. */
            const float mx = tl_from_bits((uint32_t)max_error_bits(y, ref, inv, cnt));
            if (mx > (float)r->max_err || !(mx < (float)bounds[m]))
                scan_errors(r, bounds[m], x, y, ref, inv, cnt);

            sdpa_impl_tanh_f32(impls[m], xn, yn, cnt);
            if (count_unlike(y, yn, 0x80000000u, cnt) != 0)
                for (uint64_t i = 0; i < cnt; i++) {
                    if ((tl_bits(y[i]) ^ tl_bits(yn[i])) == 0x80000000u) continue;
                    if (r->n_odd_bad < MAX_SHOWN) {
                        r->odd_bits[r->n_odd_bad] = tl_bits(x[i]);
                        r->odd_yp[r->n_odd_bad] = y[i];
                        r->odd_yn[r->n_odd_bad] = yn[i];
                    }
                    r->n_odd_bad++;
                }

            if (c % IN_PLACE_EVERY == 0) {
                memcpy(w, x, cnt * sizeof(float));
                sdpa_impl_tanh_f32(impls[m], w, w, cnt);
                const uint64_t bad = count_unlike(y, w, 0, cnt);
                if (bad != 0 && r->n_in_place_bad == 0)
                    for (uint64_t i = 0; i < cnt; i++)
                        if (tl_bits(y[i]) != tl_bits(w[i])) {
                            r->in_place_bits = tl_bits(x[i]);
                            break;
                        }
                r->n_in_place_bad += bad;
                r->n_in_place += cnt;
            }
        }
    }
    free(x);
    free(xn);
    free(y);
    free(yn);
    free(w);
    free(ref);
    free(inv);
    return NULL;
}

/* +-0 -> +-0, +-inf -> +-1, NaN -> NaN, the extremes of the finite and subnormal ranges, alone and
   in every lane of a vector whose other lanes must be what they are alone. */
static void test_special(const sdpa_impl *impl)
{
    const float specials[] = {0.0f,     -0.0f,   INFINITY, -INFINITY,    NAN,
                              -NAN,     FLT_MAX, -FLT_MAX, FLT_TRUE_MIN, -FLT_TRUE_MIN,
                              -FLT_MIN, 9.5f,    -20.0f};
    const float want[] = {0.0f,  -0.0f,        1.0f,          -1.0f,    NAN,  NAN,  1.0f,
                          -1.0f, FLT_TRUE_MIN, -FLT_TRUE_MIN, -FLT_MIN, 1.0f, -1.0f};
    const size_t n_sp = sizeof specials / sizeof specials[0];
    float x[37], y[37], alone[37];
    for (size_t i = 0; i < 37; i++) {
        x[i] = (i % 2 ? -0.3f : 0.3f) * (float)i;
        sdpa_impl_tanh_f32(impl, &x[i], &alone[i], 1);
    }
    for (size_t si = 0; si < n_sp && !tl_give_up(); si++) {
        for (size_t n = 1; n <= 37; n += 6) {
            for (size_t pos = 0; pos < n; pos++) {
                float xs[37];
                memcpy(xs, x, sizeof xs);
                xs[pos] = specials[si];
                sdpa_impl_tanh_f32(impl, xs, y, n);
                const bool ok =
                    isnan(want[si]) ? isnan(y[pos]) : tl_bits(y[pos]) == tl_bits(want[si]);
                if (!CHECK(ok, "tanh(%g) = %.9g (0x%08x) at lane %zu of %zu, want %g", specials[si],
                           y[pos], tl_bits(y[pos]), pos, n, want[si]))
                    break;
                for (size_t i = 0; i < n; i++)
                    if (i != pos)
                        CHECK(tl_bits(y[i]) == tl_bits(alone[i]),
                              "lane %zu of %zu: tanh(%g) = %.9g next to tanh(%g), %.9g alone", i, n,
                              x[i], y[i], specials[si], alone[i]);
            }
        }
    }
}

/* Every length up to 70 and 1000, out of place and in place, with the arrays ending at a guard
   page: in place gives the same bits, nothing outside [0, n) is read past or written, x is
   left as it was. */
static void test_in_place(const sdpa_impl *impl)
{
    enum { MAX_N = 1000, PAD = 16 };
    tl_guard gx = tl_guard_alloc(MAX_N * sizeof(float)),
             gy = tl_guard_alloc((MAX_N + PAD) * sizeof(float)),
             gz = tl_guard_alloc(MAX_N * sizeof(float));
    float *keep = tl_xmalloc(MAX_N * sizeof(float));
    tl_rng rng = {7};
    for (size_t li = 0; li <= 70 && !tl_give_up(); li++) {
        const size_t n = li < 70 ? li + 1 : MAX_N;
        float *x = tl_guard_end(&gx, n * sizeof(float));
        float *yb = tl_guard_end(&gy, (n + PAD) * sizeof(float)), *y = yb + PAD;
        float *z = tl_guard_end(&gz, n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            const uint64_t k = tl_next(&rng);
            /* mostly [-12, 12], then tiny values, and any bit pattern */
            x[i] = k % 8 < 6    ? tl_uniform(&rng, -12.0f, 12.0f)
                   : k % 8 == 6 ? tl_uniform(&rng, -1e-20f, 1e-20f)
                                : tl_from_bits((uint32_t)(k >> 32));
        }
        memcpy(keep, x, n * sizeof(float));
        memcpy(z, x, n * sizeof(float));
        tl_fill_sentinel(yb, n + PAD);
        sdpa_impl_tanh_f32(impl, x, y, n);
        sdpa_impl_tanh_f32(impl, z, z, n);
        for (size_t i = 0; i < PAD; i++)
            CHECK(tl_is_sentinel(yb[i]), "n=%zu: y[%td] was written", n, (ptrdiff_t)i - PAD);
        for (size_t i = 0; i < n; i++) {
            if (!CHECK(tl_bits(x[i]) == tl_bits(keep[i]), "n=%zu: x[%zu] changed", n, i)) break;
            if (!CHECK(
                    tl_bits(z[i]) == tl_bits(y[i]),
                    "n=%zu: tanh(%.9g) in place %.9g (0x%08x), out of place %.9g (0x%08x) at %zu",
                    n, x[i], z[i], tl_bits(z[i]), y[i], tl_bits(y[i]), i))
                break;
        }
    }
    free(keep);
    tl_guard_free(&gx);
    tl_guard_free(&gy);
    tl_guard_free(&gz);
}

static bool parse_stride(const char *name, uint64_t *out)
{
    const char *env = getenv(name);
    if (!env || !*env) return false;
    char *end;
    const unsigned long long v = strtoull(env, &end, 10);
    if (*end != '\0' || v == 0) {
        printf("Bail out! %s=%s is not a positive integer\n", name, env);
        exit(1);
    }
    *out = v;
    return true;
}

int main(void)
{
    tl_header("tanh of every implementation, every finite float");
    const char *stride_from = "SDPA_TANH_STRIDE";
    if (!parse_stride("SDPA_TANH_STRIDE", &stride) && parse_stride("SDPA_EXP_STRIDE", &stride)) {
        stride = 4 * stride + 1;
        stride_from = "4 SDPA_EXP_STRIDE + 1";
    }
    const uint64_t span = (uint64_t)LAST_BITS + 1;
    n_values = (span + stride - 1) / stride;
    n_chunks = (n_values + CHUNK - 1) / CHUNK;
    if (stride == 1)
        printf("# exhaustive: %llu floats in [+0, FLT_MAX] and their negations\n",
               (unsigned long long)n_values);
    else
        printf("# stride %llu (%s): sampling every %lluth float, %llu of %llu in [+0, FLT_MAX] "
               "and their negations\n",
               (unsigned long long)stride, stride_from, (unsigned long long)stride,
               (unsigned long long)n_values, (unsigned long long)span);

    tl_for_each_impl("tanh special values", test_special);

    for (size_t i = 0; i < sdpa_impl_count() && n_impls < MAX_IMPLS; i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (!sdpa_impl_supported(impl)) continue;
        impls[n_impls] = impl;
        bounds[n_impls] = sdpa_impl_tanh_max_ulp(impl);
        n_impls++;
    }
    pthread_t th[N_THREADS];
    for (size_t t = 0; t < N_THREADS; t++)
        if (pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t) != 0) {
            printf("Bail out! pthread_create failed\n");
            return 1;
        }
    for (size_t t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);

    /* three test points per registered implementation, skips included */
    size_t m = 0;
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        const char *name = sdpa_impl_name(impl);
        if (!sdpa_impl_supported(impl)) {
            tl_skip("tanh over [+0, FLT_MAX]", name, "not supported by this CPU or OS");
            tl_skip("tanh odd over every finite float", name, "not supported by this CPU or OS");
            tl_skip("tanh in place", name, "not supported by this CPU or OS");
            continue;
        }
        impl_result all = {0};
        for (size_t t = 0; t < N_THREADS; t++) {
            const impl_result *r = &results[t][m];
            if (r->max_err > all.max_err || t == 0) {
                all.max_err = r->max_err;
                all.max_bits = r->max_bits;
            }
            for (uint64_t b = 0; b < r->n_bad && b < MAX_SHOWN && all.n_bad + b < MAX_SHOWN; b++) {
                all.bad_bits[all.n_bad + b] = r->bad_bits[b];
                all.bad_y[all.n_bad + b] = r->bad_y[b];
            }
            all.n_bad += r->n_bad;
            for (uint64_t b = 0; b < r->n_odd_bad && b < MAX_SHOWN && all.n_odd_bad + b < MAX_SHOWN;
                 b++) {
                all.odd_bits[all.n_odd_bad + b] = r->odd_bits[b];
                all.odd_yp[all.n_odd_bad + b] = r->odd_yp[b];
                all.odd_yn[all.n_odd_bad + b] = r->odd_yn[b];
            }
            all.n_odd_bad += r->n_odd_bad;
            if (all.n_in_place_bad == 0) all.in_place_bits = r->in_place_bits;
            all.n_in_place_bad += r->n_in_place_bad;
            all.n_in_place += r->n_in_place;
        }

        tl_start("tanh over [+0, FLT_MAX]", name);
        printf("# tanh [%s]: max error %.4f ULP at x=%.9g (0x%08x), stated bound %.4f ULP, %llu "
               "values\n",
               name, all.max_err, tl_from_bits(all.max_bits), all.max_bits, bounds[m],
               (unsigned long long)n_values);
        CHECK(all.n_bad == 0,
              "%llu values exceed the stated bound %.4f ULP (max %.4f ULP at x=%.9g)",
              (unsigned long long)all.n_bad, bounds[m], all.max_err, tl_from_bits(all.max_bits));
        for (uint64_t b = 0; b < all.n_bad && b < MAX_SHOWN; b++) {
            const float xb = tl_from_bits(all.bad_bits[b]);
            printf("#   x=%.9g (0x%08x): got %.9g, tanh() %.17g\n", xb, all.bad_bits[b],
                   all.bad_y[b], tanh((double)xb));
        }
        tl_end();

        tl_start("tanh odd over every finite float", name);
        CHECK(all.n_odd_bad == 0,
              "%llu values x >= 0 with tanh(-x) other than -tanh(x) bit for bit",
              (unsigned long long)all.n_odd_bad);
        for (uint64_t b = 0; b < all.n_odd_bad && b < MAX_SHOWN; b++)
            printf("#   x=%.9g (0x%08x): tanh(x) %.9g, tanh(-x) %.9g\n",
                   tl_from_bits(all.odd_bits[b]), all.odd_bits[b], all.odd_yp[b], all.odd_yn[b]);
        tl_end();

        tl_start("tanh in place", name);
        CHECK(all.n_in_place_bad == 0,
              "%llu of %llu values differ in place from out of place, the first at x=%.9g (0x%08x)",
              (unsigned long long)all.n_in_place_bad, (unsigned long long)all.n_in_place,
              tl_from_bits(all.in_place_bits), all.in_place_bits);
        test_in_place(impl);
        tl_end();
        m++;
    }
    return tl_finish();
}
