/* test_exp.c -- every implementation's exp over every float in [-104, 0] against the double exp() */
#include "testlib.h"

#include <pthread.h>
#include <stdatomic.h>

/*
 * The softmax only ever takes exp of x <= 0, and below about -103.97 the exact result is under
 * half the least subnormal, so [-104, 0] is the whole domain where the result is not 0 by
 * rounding. As bit patterns that is +0 and then 0x80000000 (-0) ... 0xc2d00000 (-104):
 * 1,120,927,745 floats, enumerated by index i -> bits 0x80000000 + i (index 0 being -0), plus +0
 * checked separately.
 *
 * Error measure: |y - e| / ulp(e), e = exp((double)x), ulp(e) = 2^(floor(log2 e) - 23) but at
 * least 2^-149 (the subnormal spacing). The double exp() is accurate to well under one double
 * ULP, 2^-29 float ULPs, which is negligible at the resolution of the bound being checked.
 *
 * The reference is computed once per chunk and every supported implementation is checked on it;
 * two threads share the chunks. SDPA_EXP_STRIDE=N checks every Nth float instead (for slow
 * emulated runs); the default 1 is exhaustive.
 */
#define FIRST_BITS 0x80000000u
#define LAST_BITS  0xc2d00000u /* -104.0f */
#define CHUNK      (1u << 16)
#define N_THREADS  2
#define MAX_IMPLS  16
#define MAX_SHOWN  4

typedef struct impl_result {
    double   max_err;   /* largest error seen, ULPs */
    uint32_t max_bits;  /* where */
    uint64_t n_bad;     /* values over the stated bound (or NaN) */
    uint32_t bad_bits[MAX_SHOWN];
    float    bad_y[MAX_SHOWN];
} impl_result;

static const sdpa_impl *impls[MAX_IMPLS];
static double           bounds[MAX_IMPLS];
static size_t           n_impls;
static uint64_t         stride = 1;
static uint64_t         n_values; /* values checked per implementation */
static uint64_t         n_chunks;
static atomic_ulong     next_chunk;
static impl_result      results[N_THREADS][MAX_IMPLS];

/* The test's own bulk loops over its own arrays are left out of the sanitizers: checking them
   would only triple the run time, while the implementations' exp (the code under test) stays
   instrumented. */
#if defined(__GNUC__) || defined(__clang__)
#define NOT_SANITIZED __attribute__((no_sanitize("address"))) __attribute__((no_sanitize("undefined")))
#else
#define NOT_SANITIZED
#endif

/* 1 / ulp(e) as an exact power of two, from e's exponent field (e is a normal double here: the
   smallest reference, exp(-104), is about 6.8e-46). */
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

/* x, exp(x) in double, and 1/ulp for values first .. first + cnt - 1. Separate simple loops, so
   that all but the libm calls vectorize. */
NOT_SANITIZED static void make_reference(float *x, double *ref, double *inv, uint64_t first, uint64_t cnt)
{
    for (uint64_t i = 0; i < cnt; i++) {
        const uint32_t b = (uint32_t)(FIRST_BITS + (first + i) * stride);
        memcpy(&x[i], &b, sizeof b);
    }
    for (uint64_t i = 0; i < cnt; i++) ref[i] = exp((double)x[i]);
    for (uint64_t i = 0; i < cnt; i++) inv[i] = inv_ulp(ref[i]);
}

/* The largest error of a chunk, as the bits of a non-negative float (whose integer order is the
   numeric order, a NaN ranking above everything): one vectorizable pass. */
NOT_SANITIZED static int32_t max_error_bits(const float *y, const double *ref, const double *inv, uint64_t cnt)
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

static void *worker(void *argp)
{
    const size_t t = (size_t)(uintptr_t)argp;
    float *x = tl_xmalloc(CHUNK * sizeof(float));
    float *y = tl_xmalloc(CHUNK * sizeof(float));
    double *ref = tl_xmalloc(CHUNK * sizeof(double));
    double *inv = tl_xmalloc(CHUNK * sizeof(double));
    impl_result *res = results[t];
    for (;;) {
        uint64_t c = atomic_fetch_add(&next_chunk, 1);
        if (c >= n_chunks) break;
        uint64_t first = c * CHUNK, cnt = n_values - first < CHUNK ? n_values - first : CHUNK;
        make_reference(x, ref, inv, first, cnt);
        for (size_t m = 0; m < n_impls; m++) {
            sdpa_impl_exp_f32(impls[m], x, y, cnt);
            const double bound = bounds[m];
            /* Only a chunk whose maximum reaches the bound, or beats the maximum so far (at float
               resolution, ample for reporting it), is scanned again exactly in double: rare. */
            const int32_t mx_bits = max_error_bits(y, ref, inv, cnt);
            const float mx_f = tl_from_bits((uint32_t)mx_bits);
            const bool bad = !(mx_f < (float)bound);
            if (mx_f > (float)res[m].max_err || bad) {
                /* rare: find where, for the report */
                for (uint64_t i = 0; i < cnt; i++) {
                    double err = fabs((double)y[i] - ref[i]) * inv[i];
                    if (err > res[m].max_err) {
                        res[m].max_err = err;
                        res[m].max_bits = tl_bits(x[i]);
                    }
                    if (!(err <= bound)) {
                        if (res[m].n_bad < MAX_SHOWN) {
                            res[m].bad_bits[res[m].n_bad] = tl_bits(x[i]);
                            res[m].bad_y[res[m].n_bad] = y[i];
                        }
                        res[m].n_bad++;
                    }
                }
            }
        }
    }
    free(x);
    free(y);
    free(ref);
    free(inv);
    return NULL;
}

/* exp(0) = 1, exp(-0) = 1, exp(-inf) = 0, NaN -> NaN, exactly, alone and in every lane of a vector */
static void test_special(const sdpa_impl *impl)
{
    const float specials[] = {0.0f, -0.0f, -INFINITY, NAN};
    const float want[] = {1.0f, 1.0f, 0.0f, NAN};
    float x[37], y[37];
    for (size_t si = 0; si < 4; si++) {
        for (size_t n = 1; n <= 37; n += 6) {
            for (size_t pos = 0; pos < n; pos++) {
                for (size_t i = 0; i < n; i++) x[i] = -0.5f * (float)i;
                x[pos] = specials[si];
                sdpa_impl_exp_f32(impl, x, y, n);
                bool ok = isnan(want[si]) ? isnan(y[pos]) : y[pos] == want[si];
                if (!CHECK(ok, "exp(%g) = %.9g at lane %zu of %zu, want %g", specials[si], y[pos], pos, n,
                           want[si]))
                    break;
            }
        }
    }
}

int main(void)
{
    tl_header("exp of every implementation, every float in [-104, 0]");
    const char *env = getenv("SDPA_EXP_STRIDE");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end != '\0' || v == 0) {
            printf("Bail out! SDPA_EXP_STRIDE=%s is not a positive integer\n", env);
            return 1;
        }
        stride = v;
    }
    const uint64_t span = (uint64_t)(LAST_BITS - FIRST_BITS) + 1;
    n_values = (span + stride - 1) / stride;
    n_chunks = (n_values + CHUNK - 1) / CHUNK;
    if (stride == 1)
        printf("# SDPA_EXP_STRIDE=1: exhaustive, %llu floats in [-104, -0] plus +0\n",
               (unsigned long long)n_values);
    else
        printf("# SDPA_EXP_STRIDE=%llu: sampling every %lluth float, %llu of %llu in [-104, -0] plus +0\n",
               (unsigned long long)stride, (unsigned long long)stride, (unsigned long long)n_values,
               (unsigned long long)span);

    tl_for_each_impl("exp special values", test_special);

    for (size_t i = 0; i < sdpa_impl_count() && n_impls < MAX_IMPLS; i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (!sdpa_impl_supported(impl)) continue;
        impls[n_impls] = impl;
        bounds[n_impls] = sdpa_impl_exp_max_ulp(impl);
        n_impls++;
    }
    pthread_t th[N_THREADS];
    for (size_t t = 0; t < N_THREADS; t++)
        if (pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t) != 0) {
            printf("Bail out! pthread_create failed\n");
            return 1;
        }
    for (size_t t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);

    /* one test point per registered implementation, skips included */
    size_t m = 0;
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (!sdpa_impl_supported(impl)) {
            tl_skip("exp over [-104, 0]", sdpa_impl_name(impl), "not supported by this CPU or OS");
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
        }
        /* +0, which the enumeration (all negative) does not include */
        float zero = 0.0f, y0;
        sdpa_impl_exp_f32(impl, &zero, &y0, 1);

        tl_start("exp over [-104, 0]", sdpa_impl_name(impl));
        printf("# exp [%s]: max error %.4f ULP at x=%.9g (0x%08x), stated bound %.4f ULP, %llu values\n",
               sdpa_impl_name(impl), all.max_err, tl_from_bits(all.max_bits), all.max_bits, bounds[m],
               (unsigned long long)n_values + 1);
        CHECK(all.n_bad == 0, "%llu values exceed the stated bound %.4f ULP (max %.4f ULP at x=%.9g)",
              (unsigned long long)all.n_bad, bounds[m], all.max_err, tl_from_bits(all.max_bits));
        for (uint64_t b = 0; b < all.n_bad && b < MAX_SHOWN; b++) {
            float xb = tl_from_bits(all.bad_bits[b]);
            printf("#   x=%.9g (0x%08x): got %.9g, exp() %.17g\n", xb, all.bad_bits[b], all.bad_y[b],
                   exp((double)xb));
        }
        CHECK(y0 == 1.0f, "exp(+0) = %.9g, want 1", y0);
        tl_end();
        m++;
    }
    return tl_finish();
}
