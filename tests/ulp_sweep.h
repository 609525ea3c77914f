/* ulp_sweep.h -- every implementation's float function over a range of floats, in ULPs */
#ifndef SDPA_ULP_SWEEP_H
#define SDPA_ULP_SWEEP_H

#include "testlib.h"

#include <pthread.h>
#include <stdatomic.h>

/*
 * Value i of the sweep is the float with bits first_bits + i * stride, i < ceil(span / stride).
 * The values go in chunks to US_THREADS threads; per chunk the double reference and 1/ulp are
 * computed once and every supported implementation is checked on them. Error measure:
 * |y - e| / ulp(e), e = ref((double)x), ulp(e) = 2^(floor(log2 e) - 23) but at least 2^-149
 * (the subnormal spacing; also for e = 0). A test adds its own checks per chunk with `more`.
 */
#define US_CHUNK       (1u << 16)
#define US_THREADS     2
#define US_MAX_IMPLS   16
#define US_MAX_SHOWN   4
#define US_MAX_SCRATCH 3

typedef struct us_result {
    double max_err;    /* largest error seen, ULPs */
    uint32_t max_bits; /* where */
    uint64_t n_bad;    /* values over the stated bound (or NaN) */
    uint32_t bad_bits[US_MAX_SHOWN];
    float bad_y[US_MAX_SHOWN];
} us_result;

/* One chunk as `more` sees it, after y = f(x) was checked against the bound. */
typedef struct us_chunk {
    size_t thread;  /* 0 .. US_THREADS - 1: the caller's own per-thread results */
    uint64_t index; /* chunk number */
    uint64_t cnt;   /* values in it, at most US_CHUNK */
    const float *x, *y;
    float *scratch[US_MAX_SCRATCH]; /* n_scratch buffers of US_CHUNK floats, kept per thread */
} us_chunk;

typedef struct us_sweep us_sweep;
struct us_sweep {
    /* the function under test, set by the test */
    const char *name; /* in the report: "exp" */
    uint32_t first_bits;
    uint64_t span; /* bit patterns in the range */
    double (*ref)(double);
    void (*run)(const sdpa_impl *impl, const float *x, float *y, size_t n);
    double (*bound)(const sdpa_impl *impl);                  /* stated max ULP */
    void (*more)(us_sweep *s, const us_chunk *ck, size_t m); /* optional, per chunk and impl m */
    unsigned n_scratch;
    /* set by us_set_stride and us_run */
    uint64_t stride, n_values, n_chunks;
    atomic_ulong next_chunk;
    size_t n_impls; /* supported ones, in registry order */
    const sdpa_impl *impls[US_MAX_IMPLS];
    double bounds[US_MAX_IMPLS];
    us_result results[US_THREADS][US_MAX_IMPLS];
};

/* The test's own bulk loops over its own arrays are left out of the sanitizers: checking them
   would only multiply the run time, while the implementations (the code under test) stay
   instrumented. */
#if defined(__GNUC__) || defined(__clang__)
#define US_NOT_SANITIZED                                                                           \
    __attribute__((no_sanitize("address"))) __attribute__((no_sanitize("undefined")))
#else
#define US_NOT_SANITIZED
#endif

/* Parses the positive integer in environment variable name into *out; false when it is unset or
   empty, and a bail-out when it is anything else. */
static inline bool us_parse_stride(const char *name, uint64_t *out)
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

static inline void us_set_stride(us_sweep *s, uint64_t stride)
{
    s->stride = stride;
    s->n_values = (s->span + stride - 1) / stride;
    s->n_chunks = (s->n_values + US_CHUNK - 1) / US_CHUNK;
}

/* 1 / ulp(e) as an exact power of two, from the exponent field of e >= 0 (0 and doubles below
   2^-126 get the subnormal spacing's). */
US_NOT_SANITIZED static inline double us_inv_ulp(double e)
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

/* x, ref(x) in double and 1/ulp for values first .. first + cnt - 1. Separate simple loops, so
   that all but the libm calls vectorize. */
US_NOT_SANITIZED static inline void us_make_reference(float *x, double *ref, double *inv,
                                                      double (*f)(double), uint32_t first_bits,
                                                      uint64_t stride, uint64_t first, uint64_t cnt)
{
    for (uint64_t i = 0; i < cnt; i++) {
        const uint32_t b = (uint32_t)(first_bits + (first + i) * stride);
        memcpy(&x[i], &b, sizeof b);
    }
    for (uint64_t i = 0; i < cnt; i++) ref[i] = f((double)x[i]);
    for (uint64_t i = 0; i < cnt; i++) inv[i] = us_inv_ulp(ref[i]);
}

/* The largest error of a chunk, as the bits of a non-negative float (whose integer order is the
   numeric order, a NaN ranking above everything): one vectorizable pass. */
US_NOT_SANITIZED static inline int32_t us_max_error_bits(const float *y, const double *ref,
                                                         const double *inv, uint64_t cnt)
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

/* The rare path of a chunk with a value over the bound or a new maximum: find where, exactly. */
static inline void us_scan_errors(us_result *res, double bound, const float *x, const float *y,
                                  const double *ref, const double *inv, uint64_t cnt)
{
    for (uint64_t i = 0; i < cnt; i++) {
        const double err = fabs((double)y[i] - ref[i]) * inv[i];
        if (err > res->max_err) {
            res->max_err = err;
            res->max_bits = tl_bits(x[i]);
        }
        if (!(err <= bound)) {
            if (res->n_bad < US_MAX_SHOWN) {
                res->bad_bits[res->n_bad] = tl_bits(x[i]);
                res->bad_y[res->n_bad] = y[i];
            }
            res->n_bad++;
        }
    }
}

typedef struct us_worker_arg {
    us_sweep *s;
    size_t t;
} us_worker_arg;

static inline void *us_worker(void *argp)
{
    const us_worker_arg *a = argp;
    us_sweep *s = a->s;
    us_chunk ck = {.thread = a->t};
    float *x = tl_xmalloc(US_CHUNK * sizeof(float));
    float *y = tl_xmalloc(US_CHUNK * sizeof(float));
    double *ref = tl_xmalloc(US_CHUNK * sizeof(double));
    double *inv = tl_xmalloc(US_CHUNK * sizeof(double));
    for (unsigned k = 0; k < s->n_scratch; k++)
        ck.scratch[k] = tl_xmalloc(US_CHUNK * sizeof(float));
    ck.x = x, ck.y = y;
    us_result *res = s->results[a->t];
    for (;;) {
        const uint64_t c = atomic_fetch_add(&s->next_chunk, 1);
        if (c >= s->n_chunks) break;
        const uint64_t first = c * US_CHUNK,
                       cnt = s->n_values - first < US_CHUNK ? s->n_values - first : US_CHUNK;
        us_make_reference(x, ref, inv, s->ref, s->first_bits, s->stride, first, cnt);
        ck.index = c, ck.cnt = cnt;
        for (size_t m = 0; m < s->n_impls; m++) {
            s->run(s->impls[m], x, y, cnt);
            /* Only a chunk whose maximum reaches the bound, or beats the maximum so far (at float
               resolution, ample for reporting it), is scanned again exactly in double: rare. */
            const float mx = tl_from_bits((uint32_t)us_max_error_bits(y, ref, inv, cnt));
            if (mx > (float)res[m].max_err || !(mx < (float)s->bounds[m]))
                us_scan_errors(&res[m], s->bounds[m], x, y, ref, inv, cnt);
            if (s->more) s->more(s, &ck, m);
        }
    }
    for (unsigned k = 0; k < s->n_scratch; k++) free(ck.scratch[k]);
    free(x);
    free(y);
    free(ref);
    free(inv);
    return NULL;
}

/* Collects the supported implementations and their bounds and sweeps them all; false (after a
   bail-out) when a thread cannot be started. */
static inline bool us_run(us_sweep *s)
{
    for (size_t i = 0; i < sdpa_impl_count() && s->n_impls < US_MAX_IMPLS; i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (!sdpa_impl_supported(impl)) continue;
        s->impls[s->n_impls] = impl;
        s->bounds[s->n_impls] = s->bound(impl);
        s->n_impls++;
    }
    pthread_t th[US_THREADS];
    us_worker_arg args[US_THREADS];
    for (size_t t = 0; t < US_THREADS; t++) {
        args[t] = (us_worker_arg){s, t};
        if (pthread_create(&th[t], NULL, us_worker, &args[t]) != 0) {
            printf("Bail out! pthread_create failed\n");
            return false;
        }
    }
    for (size_t t = 0; t < US_THREADS; t++) pthread_join(th[t], NULL);
    return true;
}

/* A sweep test's main up to its reports: sets the stride and prints the plan (exhaustive, or
   the stride, where it came from and how many of the span's values it samples; range names the
   values swept), runs the special-value test on every implementation, then the sweep. */
static inline bool us_plan_and_run(us_sweep *s, uint64_t stride, const char *stride_from,
                                   const char *range, const char *special_name, tl_impl_fn special)
{
    us_set_stride(s, stride);
    if (stride == 1)
        printf("# exhaustive (%s): %llu floats in %s\n", stride_from,
               (unsigned long long)s->n_values, range);
    else
        printf("# stride %llu (%s): sampling every %lluth float, %llu of %llu in %s\n",
               (unsigned long long)stride, stride_from, (unsigned long long)stride,
               (unsigned long long)s->n_values, (unsigned long long)s->span, range);
    tl_for_each_impl(special_name, special);
    return us_run(s);
}

/* The reports, in registry order: report(impl, m) for a supported implementation, m its index
   among them (into the sweep's results); every test point of points a SKIP for the others. */
static inline void us_report_each(const char *const *points, size_t n_points,
                                  void (*report)(const sdpa_impl *impl, size_t m))
{
    size_t m = 0;
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (sdpa_impl_supported(impl))
            report(impl, m++);
        else
            for (size_t t = 0; t < n_points; t++)
                tl_skip(points[t], sdpa_impl_name(impl), "not supported by this CPU or OS");
    }
}

/* Appends to a list of shown entries (dst, counting have so far) what fits of the n entries of
   src, each size bytes; the counts go on past US_MAX_SHOWN, the stored entries do not. */
static inline void us_keep_shown(void *dst, uint64_t have, const void *src, uint64_t n, size_t size)
{
    if (have >= US_MAX_SHOWN) return;
    const uint64_t k = n < US_MAX_SHOWN - have ? n : US_MAX_SHOWN - have;
    memcpy((char *)dst + have * size, src, k * size);
}

/* Implementation m's results merged across the threads. */
static inline us_result us_merge(const us_sweep *s, size_t m)
{
    us_result all = {0};
    for (size_t t = 0; t < US_THREADS; t++) {
        const us_result *r = &s->results[t][m];
        if (r->max_err > all.max_err || t == 0) {
            all.max_err = r->max_err;
            all.max_bits = r->max_bits;
        }
        us_keep_shown(all.bad_bits, all.n_bad, r->bad_bits, r->n_bad, sizeof r->bad_bits[0]);
        us_keep_shown(all.bad_y, all.n_bad, r->bad_y, r->n_bad, sizeof r->bad_y[0]);
        all.n_bad += r->n_bad;
    }
    return all;
}

/* The bound check of implementation m (merged result all), inside the caller's test point:
   n_checked is the number of values in the report, the sweep's and any checked separately. */
static inline void us_report(const us_sweep *s, size_t m, const us_result *all, uint64_t n_checked)
{
    printf("# %s [%s]: max error %.4f ULP at x=%.9g (0x%08x), stated bound %.4f ULP, %llu values\n",
           s->name, sdpa_impl_name(s->impls[m]), all->max_err, tl_from_bits(all->max_bits),
           all->max_bits, s->bounds[m], (unsigned long long)n_checked);
    CHECK(all->n_bad == 0, "%llu values exceed the stated bound %.4f ULP (max %.4f ULP at x=%.9g)",
          (unsigned long long)all->n_bad, s->bounds[m], all->max_err, tl_from_bits(all->max_bits));
    for (uint64_t b = 0; b < all->n_bad && b < US_MAX_SHOWN; b++) {
        const float xb = tl_from_bits(all->bad_bits[b]);
        printf("#   x=%.9g (0x%08x): got %.9g, %s() %.17g\n", xb, all->bad_bits[b], all->bad_y[b],
               s->name, s->ref((double)xb));
    }
}

#endif
