/* testlib.h -- the test suite's small TAP framework, registry loop, RNG, guard-page and sentinel
 * buffers */
#ifndef SDPA_TESTLIB_H
#define SDPA_TESTLIB_H

/* Every test file includes this first, so the POSIX feature macro precedes every system header
   (mmap, mprotect, sysconf, pthreads). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sdpa.h"
#include "test_select.h"

/* ------------------------------------------------------------------------------------------ */
/* TAP output. One TAP test point per (test, implementation), so that meson shows every        */
/* implementation's result on its own line and an implementation this CPU cannot run is a      */
/* SKIP, never a pass. Checks do not stop the case (loops keep going to show the extent of a   */
/* problem), but only the first few failures of a case are printed.                            */
/* ------------------------------------------------------------------------------------------ */
#define TL_MAX_PRINTED 12

static int tl_points, tl_npass, tl_nfail, tl_nskip;
static long tl_case_failures;
static char tl_label[200];

/* SDPA_TEST_SAMPLE=N (default 1: everything) makes the heaviest loops run every Nth case, for
   emulated CPUs (qemu) where vector code is tens of times slower; tests print when it is on. */
static inline size_t tl_sample(void)
{
    static size_t n;
    if (n == 0) {
        const char *e = getenv("SDPA_TEST_SAMPLE");
        const long v = e ? strtol(e, NULL, 10) : 1;
        n = v > 1 ? (size_t)v : 1;
    }
    return n;
}

/* True when case number i is left out by the sampling above. */
static inline bool tl_sampled_out(size_t i) { return i % tl_sample() != 0; }

static inline void tl_header(const char *what)
{
    printf("TAP version 13\n# %s\n", what);
    if (tl_sample() > 1)
        printf("# SDPA_TEST_SAMPLE=%zu: the heaviest loops run every %zuth case\n", tl_sample(),
               tl_sample());
    fflush(stdout);
}

/* Starts a test point; the label (test name and implementation name) prefixes every failure. */
static inline void tl_start(const char *test, const char *impl_name)
{
    snprintf(tl_label, sizeof tl_label, "%s [%s]", test, impl_name);
    tl_case_failures = 0;
}

static inline void tl_failv(const char *file, int line, const char *cond, const char *fmt,
                            va_list ap)
{
    tl_case_failures++;
    if (tl_case_failures > TL_MAX_PRINTED) return;
    printf("# FAIL %s %s:%d: %s: ", tl_label, file, line, cond);
    vprintf(fmt, ap);
    printf("\n");
    if (tl_case_failures == TL_MAX_PRINTED)
        printf("# (%s: further failures not printed)\n", tl_label);
    fflush(stdout);
}

static inline void tl_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tl_failv(file, line, cond, fmt, ap);
    va_end(ap);
}

/* CHECK(condition, printf-format, args...): records a failure of the current test point with the
   condition's text, the location and the message; evaluates to the condition. */
#define CHECK(cond, ...) ((cond) ? true : (tl_fail(__FILE__, __LINE__, #cond, __VA_ARGS__), false))

/* True once the current point failed so often that going on would only flood the log. */
static inline bool tl_give_up(void) { return tl_case_failures > 200; }

static inline void tl_end(void)
{
    tl_points++;
    if (tl_case_failures == 0) {
        tl_npass++;
        printf("ok %d - %s\n", tl_points, tl_label);
    } else {
        tl_nfail++;
        printf("not ok %d - %s (%ld failed checks)\n", tl_points, tl_label, tl_case_failures);
    }
    fflush(stdout);
}

static inline void tl_skip(const char *test, const char *impl_name, const char *why)
{
    tl_points++;
    tl_nskip++;
    printf("ok %d - %s [%s] # SKIP %s\n", tl_points, test, impl_name, why);
    fflush(stdout);
}

/* Prints the plan and a summary; the exit status is 0 when nothing failed. */
static inline int tl_finish(void)
{
    printf("1..%d\n# passed %d, failed %d, skipped %d\n", tl_points, tl_npass, tl_nfail, tl_nskip);
    fflush(stdout);
    return tl_nfail ? 1 : 0;
}

/* Runs fn once per registered implementation as its own test point; an implementation this CPU
   cannot run is reported as skipped. Adding an implementation to the registry adds no test code. */
typedef void (*tl_impl_fn)(const sdpa_impl *impl);
/* A reason to skip an implementation the CPU runs (a kernel hook it does not have), or NULL. */
typedef const char *(*tl_impl_why_not)(const sdpa_impl *impl);

/* tl_for_each_impl, also skipping the implementations why_not gives a reason for. */
static inline void tl_for_each_impl_unless(const char *test, tl_impl_fn fn, tl_impl_why_not why_not)
{
    size_t n = sdpa_impl_count();
    for (size_t i = 0; i < n; i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (!sdpa_impl_supported(impl)) {
            char why[160];
            snprintf(why, sizeof why, "%s needs %s, which this CPU or OS lacks",
                     sdpa_impl_name(impl), sdpa_impl_requires(impl));
            tl_skip(test, sdpa_impl_name(impl), why);
            continue;
        }
        if (!sdpa_test_selected(sdpa_impl_name(impl))) {
            tl_skip(test, sdpa_impl_name(impl), "not in SDPA_TEST_IMPLS");
            continue;
        }
        const char *why = why_not ? why_not(impl) : NULL;
        if (why) {
            tl_skip(test, sdpa_impl_name(impl), why);
            continue;
        }
        tl_start(test, sdpa_impl_name(impl));
        fn(impl);
        tl_end();
    }
}

static inline void tl_for_each_impl(const char *test, tl_impl_fn fn)
{
    tl_for_each_impl_unless(test, fn, NULL);
}

/* tl_for_each_impl for tests that track how close their errors come to the tolerance: *worst
   (the test's own variable, which its checks raise) is reset before each implementation and
   printed after it, so that a tolerance far looser than the errors met shows. */
static tl_impl_fn tl_worst_fn;
static double *tl_worst_of;

static inline void tl_worst_run(const sdpa_impl *impl)
{
    *tl_worst_of = 0;
    tl_worst_fn(impl);
    printf("# %s: worst |error| / tolerance %.3f\n", tl_label, *tl_worst_of);
}

static inline void tl_for_each_impl_worst(const char *test, tl_impl_fn fn, double *worst)
{
    tl_worst_fn = fn, tl_worst_of = worst;
    tl_for_each_impl(test, tl_worst_run);
}

/* ------------------------------------------------------------------------------------------ */
/* Deterministic random numbers (splitmix64): every run sees the same data, so a failure        */
/* reproduces exactly.                                                                          */
/* ------------------------------------------------------------------------------------------ */
typedef struct tl_rng {
    uint64_t s;
} tl_rng;

static inline uint64_t tl_next(tl_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi) */
static inline float tl_uniform(tl_rng *r, float lo, float hi)
{
    double u = (double)(tl_next(r) >> 11) * 0x1p-53;
    return (float)(lo + (hi - lo) * u);
}

static inline size_t tl_below(tl_rng *r, size_t n) { return (size_t)(tl_next(r) % n); }

static inline void tl_fill(tl_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = tl_uniform(r, lo, hi);
}

/* The params of a call of these sizes, every other field 0. */
static inline sdpa_params tl_params(size_t batch, size_t q_heads, size_t kv_heads, size_t q_len,
                                    size_t kv_len, size_t head_dim)
{
    return (sdpa_params){.batch = batch,
                         .q_heads = q_heads,
                         .kv_heads = kv_heads,
                         .q_len = q_len,
                         .kv_len = kv_len,
                         .head_dim = head_dim};
}

/* ------------------------------------------------------------------------------------------ */
/* Float helpers                                                                                */
/* ------------------------------------------------------------------------------------------ */
static inline uint32_t tl_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A NaN payload no computation produces: output cells still holding it were never written. */
#define TL_SENTINEL 0x7fc5a5a5u

static inline bool tl_is_sentinel(float f) { return tl_bits(f) == TL_SENTINEL; }

static inline float tl_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void tl_fill_sentinel(float *x, size_t n)
{
    float s = tl_from_bits(TL_SENTINEL);
    for (size_t i = 0; i < n; i++) x[i] = s;
}

/* unit roundoff of binary32 */
#define TL_U 0x1p-24
/* a bound of the weight below which SIMD kernels may flush to 0 (sdpa.h: e^-54 = 2^-77.9) */
#define SDPA_TEST_FLUSH 0x1p-77

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                       */
/* ------------------------------------------------------------------------------------------ */
static inline void *tl_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("Bail out! out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* A read-write region with a PROT_NONE page right before and right after it. A buffer placed
   with tl_guard_end() ends exactly where the trailing guard page begins, so any access past its
   last element faults; tl_guard_begin() likewise catches accesses before the first element. */
typedef struct tl_guard {
    unsigned char *map;
    size_t map_len;
    unsigned char *lo, *hi; /* usable [lo, hi) */
} tl_guard;

static inline tl_guard tl_guard_alloc(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t body = (bytes + page - 1) / page * page;
    if (body == 0) body = page;
    tl_guard g;
    g.map_len = body + 2 * page;
    void *m = mmap(NULL, g.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        printf("Bail out! mmap of %zu bytes failed\n", g.map_len);
        exit(1);
    }
    g.map = m;
    if (mprotect(g.map, page, PROT_NONE) != 0 ||
        mprotect(g.map + page + body, page, PROT_NONE) != 0) {
        printf("Bail out! mprotect failed\n");
        exit(1);
    }
    g.lo = g.map + page;
    g.hi = g.map + page + body;
    return g;
}

static inline void tl_guard_free(tl_guard *g) { munmap(g->map, g->map_len); }

static inline void *tl_guard_end(const tl_guard *g, size_t bytes) { return g->hi - bytes; }
static inline void *tl_guard_begin(const tl_guard *g) { return g->lo; }

#endif /* SDPA_TESTLIB_H */
