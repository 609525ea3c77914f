/* api.c -- load-time selection of the active implementation, overrides, and the primitive entry
 * points */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The selection state. The active implementation (with the reason it is active) is the one
   mutable thing; the CPU facts are read once, under pthread_once, and never change after. */
static pthread_once_t sdpa_once = PTHREAD_ONCE_INIT;
static sdpa_cpu cpu_facts;
static char requires_text[SDPA_REGISTRY_MAX]
                         [SDPA_REQUIRES_TEXT_MAX]; /* each row's, from its keys */
static _Atomic(const struct sdpa_impl *) sdpa_active_impl;
static atomic_int sdpa_active_reason;

static const struct sdpa_impl *best_supported(void)
{
    for (size_t i = 0; i < sdpa_registry_len; i++)
        if (sdpa_impl_runs_on(&sdpa_registry[i], &cpu_facts)) return &sdpa_registry[i];
    return &sdpa_registry[sdpa_registry_len - 1]; /* scalar runs anywhere */
}

static void sdpa_init(void)
{
    sdpa_cpu_detect(&cpu_facts);
    for (size_t i = 0; i < sdpa_registry_len; i++)
        sdpa_impl_requires_text(&sdpa_registry[i], requires_text[i], sizeof requires_text[i]);
    const struct sdpa_impl *pick = best_supported();
    sdpa_selection reason = SDPA_SELECTED_AUTO;
    const char *env = getenv("SDPA_ISA");
    if (env && *env && strcmp(env, "auto") != 0) {
        const sdpa_impl *want = sdpa_impl_find(env);
        if (want && sdpa_impl_runs_on(want, &cpu_facts)) {
            pick = want;
            reason = SDPA_SELECTED_ENV;
        } else {
            reason = SDPA_SELECTED_ENV_REFUSED; /* never run what the CPU cannot: stay automatic */
        }
    }
    atomic_store(&sdpa_active_reason, (int)reason);
    atomic_store(&sdpa_active_impl, pick);
}

/* Load time, so the first call pays nothing; sdpa_ensure() covers use before constructors ran
   (another constructor calling in) and many threads arriving at once. */
__attribute__((constructor)) static void sdpa_load(void) { pthread_once(&sdpa_once, sdpa_init); }
static void sdpa_ensure(void) { pthread_once(&sdpa_once, sdpa_init); }

#define SDPA_STR2(x) #x
#define SDPA_STR(x)  SDPA_STR2(x)
#define SDPA_VERSION_STRING                                                                        \
    SDPA_STR(SDPA_VERSION_MAJOR) "." SDPA_STR(SDPA_VERSION_MINOR) "." SDPA_STR(SDPA_VERSION_PATCH)

const char *sdpa_version(void) { return SDPA_VERSION_STRING; }

const char *sdpa_status_str(sdpa_status s)
{
    switch (s) {
    case SDPA_OK:
        return "ok";
    case SDPA_ERR_INVALID_ARGUMENT:
        return "invalid argument";
    case SDPA_ERR_UNSUPPORTED:
        return "unsupported by this build or CPU";
    case SDPA_ERR_OVERFLOW:
        return "size or offset overflows";
    case SDPA_ERR_NO_MEMORY:
        return "out of memory";
    case SDPA_ERR_UNKNOWN_IMPL:
        return "no implementation of that name is compiled in";
    }
    return "unknown status";
}

size_t sdpa_impl_count(void) { return sdpa_registry_len; }

const sdpa_impl *sdpa_impl_at(size_t i) { return i < sdpa_registry_len ? &sdpa_registry[i] : NULL; }

const char *sdpa_impl_name(const sdpa_impl *impl) { return impl ? impl->name : ""; }

const char *sdpa_impl_requires(const sdpa_impl *impl)
{
    sdpa_ensure();
    return impl ? requires_text[impl - sdpa_registry] : "";
}

const char *sdpa_impl_requires_key(const sdpa_impl *impl, size_t i)
{
    if (!impl) return NULL;
    for (size_t n = 0; impl->requires[n]; n++)
        if (n == i) return impl->requires[n];
    return NULL;
}

size_t sdpa_feature_count(void) { return sdpa_feature_table_len(); }

const char *sdpa_feature_key(size_t i) { return sdpa_feature_table_key(i); }

bool sdpa_feature_present(size_t i) { return sdpa_feature_table_has(i, sdpa_cpu_facts()); }

bool sdpa_impl_supported(const sdpa_impl *impl)
{
    sdpa_ensure();
    return impl && sdpa_impl_runs_on(impl, &cpu_facts);
}

const sdpa_impl *sdpa_impl_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < sdpa_registry_len; i++)
        if (strcmp(sdpa_registry[i].name, name) == 0) return &sdpa_registry[i];
    return NULL;
}

const sdpa_impl *sdpa_active(void)
{
    sdpa_ensure();
    return atomic_load(&sdpa_active_impl);
}

sdpa_status sdpa_select(const char *name)
{
    sdpa_ensure();
    if (!name || strcmp(name, "auto") == 0) {
        atomic_store(&sdpa_active_reason, (int)SDPA_SELECTED_AUTO);
        atomic_store(&sdpa_active_impl, best_supported());
        return SDPA_OK;
    }
    const sdpa_impl *want = sdpa_impl_find(name);
    if (!want) return SDPA_ERR_UNKNOWN_IMPL;
    if (!sdpa_impl_runs_on(want, &cpu_facts)) return SDPA_ERR_UNSUPPORTED;
    atomic_store(&sdpa_active_reason, (int)SDPA_SELECTED_FORCED);
    atomic_store(&sdpa_active_impl, want);
    return SDPA_OK;
}

sdpa_selection sdpa_selection_reason(void)
{
    sdpa_ensure();
    return (sdpa_selection)atomic_load(&sdpa_active_reason);
}

const char *sdpa_selection_str(sdpa_selection r)
{
    switch (r) {
    case SDPA_SELECTED_AUTO:
        return "automatic: the best implementation this CPU supports";
    case SDPA_SELECTED_ENV:
        return "forced by the SDPA_ISA environment variable";
    case SDPA_SELECTED_ENV_REFUSED:
        return "automatic: SDPA_ISA named an unknown or unsupported implementation, refused";
    case SDPA_SELECTED_FORCED:
        return "forced by sdpa_select()";
    }
    return "unknown";
}

const sdpa_cpu *sdpa_cpu_facts(void)
{
    sdpa_ensure();
    return &cpu_facts;
}

size_t sdpa_cached_l2_bytes(void) { return sdpa_cpu_facts()->caches.bytes[SDPA_CACHE_L2]; }

/* ---- primitives: a NULL or unsupported implementation, or an empty size, does nothing ---- */

static const sdpa_kernels *usable(const sdpa_impl *impl)
{
    return sdpa_impl_supported(impl) ? impl->k : NULL;
}

void sdpa_impl_score_f32(const sdpa_impl *impl, const float *q, const float *k, size_t k_stride,
                         size_t n, size_t d, float scale, float *s)
{
    const sdpa_kernels *kt = usable(impl);
    if (!kt || !q || !k || !s || n == 0 || d == 0) return;
    kt->score_f32(q, k, k_stride, n, d, scale, s);
}

float sdpa_impl_softmax_online_f32(const sdpa_impl *impl, float *s, size_t n, float *m, float *l)
{
    const sdpa_kernels *kt = usable(impl);
    if (!kt || !s || !m || !l || n == 0) return 1.0f;
    return kt->softmax_online_f32(s, n, m, l);
}

void sdpa_impl_accumulate_f32(const sdpa_impl *impl, float *o, float alpha, const float *p,
                              const float *v, size_t v_stride, size_t n, size_t dv)
{
    const sdpa_kernels *kt = usable(impl);
    if (!kt || !o || dv == 0) return;
    if (n == 0 || !p || !v) {
        /* no values: the contract still asks for o = alpha * o */
        if (n == 0)
            for (size_t i = 0; i < dv; i++) o[i] *= alpha;
        return;
    }
    kt->accumulate_f32(o, alpha, p, v, v_stride, n, dv);
}

void sdpa_impl_exp_f32(const sdpa_impl *impl, const float *x, float *y, size_t n)
{
    const sdpa_kernels *kt = usable(impl);
    if (!kt || !x || !y || n == 0) return;
    kt->exp_f32(x, y, n);
}

double sdpa_impl_exp_max_ulp(const sdpa_impl *impl) { return impl ? impl->k->exp_max_ulp : NAN; }

void sdpa_impl_tanh_f32(const sdpa_impl *impl, const float *x, float *y, size_t n)
{
    const sdpa_kernels *kt = usable(impl);
    if (!kt || !x || !y || n == 0) return;
    kt->tanh_f32(x, y, n);
}

double sdpa_impl_tanh_max_ulp(const sdpa_impl *impl) { return impl ? impl->k->tanh_max_ulp : NAN; }

void sdpa_score_f32(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                    float scale, float *s)
{
    sdpa_impl_score_f32(sdpa_active(), q, k, k_stride, n, d, scale, s);
}

float sdpa_softmax_online_f32(float *s, size_t n, float *m, float *l)
{
    return sdpa_impl_softmax_online_f32(sdpa_active(), s, n, m, l);
}

void sdpa_accumulate_f32(float *o, float alpha, const float *p, const float *v, size_t v_stride,
                         size_t n, size_t dv)
{
    sdpa_impl_accumulate_f32(sdpa_active(), o, alpha, p, v, v_stride, n, dv);
}

void sdpa_alibi_slopes(size_t n_heads, float max_bias, float *slopes)
{
    if (!slopes || n_heads == 0) return;
    size_t n = 1; /* the largest power of two <= n_heads */
    while (n <= n_heads / 2) n *= 2;
    /* in double, rounded once: exact powers of two where the exponent is an integer */
    const double b = (double)max_bias;
    for (size_t h = 0; h < n_heads; h++) {
        const double e = h < n ? -b * (double)(h + 1) / (double)n
                               : -b * (double)(2 * (h - n) + 1) / (double)(2 * n);
        slopes[h] = (float)exp2(e);
    }
}
