/* registry.c -- every compiled-in implementation, best first, each described by its row alone */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "sdpa_config.h"

/* The CPU features requirements are written in, as keys, each with how the CPU and OS report
   it and how sdpa_impl_requires names it: a feature's name joins the previous key's with "+"
   when both share a family ("AVX-512 F+BW"), else follows it after ", ". The report lists every
   feature here, in this order, whether a row requires it or not. */
#if defined(CPU_FEATURES_ARCH_X86)
/* cpu_features' bits: it clears AVX and AVX-512 when XCR0 says the OS does not save YMM/ZMM */
#define FEATURE(key, family, name, bit)                                                            \
    {                                                                                              \
        key, family, name, bit                                                                     \
    }
static const struct sdpa_feature {
    const char *key, *family, *name;
    X86FeaturesEnum bit;
} features[] = {
    FEATURE("sse4_2", NULL, "SSE4.2", X86_SSE4_2),
    FEATURE("avx", NULL, "AVX", X86_AVX),
    FEATURE("avx2", NULL, "AVX2", X86_AVX2),
    FEATURE("fma", NULL, "FMA", X86_FMA3),
    FEATURE("f16c", NULL, "F16C", X86_F16C),
    FEATURE("avx512f", "AVX-512", "F", X86_AVX512F),
    FEATURE("avx512bw", "AVX-512", "BW", X86_AVX512BW),
    FEATURE("avx512dq", "AVX-512", "DQ", X86_AVX512DQ),
    FEATURE("avx512vl", "AVX-512", "VL", X86_AVX512VL),
    FEATURE("avx512vnni", "AVX-512", "VNNI", X86_AVX512VNNI),
};
static bool has(const struct sdpa_feature *f, const sdpa_cpu *c)
{
    return GetX86FeaturesEnumValue(&c->x86, f->bit) != 0;
}
#elif defined(CPU_FEATURES_ARCH_AARCH64)
/* the kernel's hwcaps (word 1: AT_HWCAP, 2: AT_HWCAP2), set only for state it saves; word 0:
   mandatory in armv8-a Linux userspace, present everywhere */
#define FEATURE(key, family, name, word, mask)                                                     \
    {                                                                                              \
        key, family, name, word, mask                                                              \
    }
static const struct sdpa_feature {
    const char *key, *family, *name;
    int word;
    unsigned long mask;
} features[] = {
    FEATURE("asimd", NULL, "Advanced SIMD (armv8-a)", 0, 0),
    FEATURE("fphp", NULL, "FP16 arithmetic", 1, HWCAP_FPHP),
    FEATURE("asimdhp", NULL, "Advanced SIMD FP16", 1, HWCAP_ASIMDHP),
    FEATURE("asimddp", NULL, "Advanced SIMD dot product", 1, HWCAP_ASIMDDP),
    FEATURE("bf16", NULL, "BF16", 2, HWCAP2_BF16),
    FEATURE("i8mm", NULL, "Int8 matrix multiply", 2, HWCAP2_I8MM),
    FEATURE("sve", NULL, "SVE (any vector length)", 1, HWCAP_SVE),
    FEATURE("sve2", NULL, "SVE2", 2, HWCAP2_SVE2),
    FEATURE("svebf16", NULL, "SVE BF16", 2, HWCAP2_SVEBF16),
};
static bool has(const struct sdpa_feature *f, const sdpa_cpu *c)
{
    if (f->word == 0) return true;
    return ((f->word == 1 ? c->hwcap : c->hwcap2) & f->mask) != 0;
}
#else
static const struct sdpa_feature {
    const char *key, *family, *name;
} features[] = {{"none", NULL, "nothing"}}; /* no feature this report knows */
static bool has(const struct sdpa_feature *f, const sdpa_cpu *c)
{
    (void)f, (void)c;
    return false;
}
#endif
#undef FEATURE

size_t sdpa_feature_table_len(void) { return sizeof features / sizeof features[0]; }
const char *sdpa_feature_table_key(size_t i)
{
    return i < sdpa_feature_table_len() ? features[i].key : NULL;
}

static const struct sdpa_feature *feature(const char *key)
{
    for (size_t i = 0; key && i < sdpa_feature_table_len(); i++)
        if (strcmp(features[i].key, key) == 0) return &features[i];
    return NULL;
}

bool sdpa_feature_table_has(size_t i, const sdpa_cpu *c)
{
    return i < sdpa_feature_table_len() && has(&features[i], c);
}

bool sdpa_impl_runs_on(const struct sdpa_impl *impl, const sdpa_cpu *c)
{
    for (const char *const *k = impl->requires; *k; k++) {
        const struct sdpa_feature *f = feature(*k);
        if (!f || !has(f, c)) return false; /* a key this table does not know is never met */
    }
    return true;
}

void sdpa_impl_requires_text(const struct sdpa_impl *impl, char *buf, size_t len)
{
    const char *family = NULL;
    buf[0] = '\0';
    if (!impl->requires[0]) {
        snprintf(buf, len, "nothing (portable C)");
        return;
    }
    for (const char *const *k = impl->requires; *k; k++) {
        const struct sdpa_feature *f = feature(*k);
        const char *g = f ? f->family : NULL, *name = f ? f->name : *k;
        const size_t at = strlen(buf);
        if (g && family && strcmp(g, family) == 0)
            snprintf(buf + at, len - at, "+%s", name);
        else
            snprintf(buf + at, len - at, "%s%s%s%s", at ? ", " : "", g ? g : "", g ? " " : "",
                     name);
        family = g;
    }
}

/* A row (internal.h): name (what SDPA_ISA and sdpa_select take), requires (feature keys of the
   table above, all needed; none: runs anywhere), kernels, peak class (the FMA peak sdpa-bench
   judges it against). A derived implementation is its parent's row with fields overridden,
   later initializers winning as C11 6.7.9 says; the compiler's warning about exactly that is
   off here for that reason. */
#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_KEYS   ((const char *const[]){NULL})
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

#if defined(SDPA_HAVE_AVX512) || defined(SDPA_HAVE_AVX512_VNNI)
#define AVX512_KEYS "avx512f", "avx512bw", "avx512dq", "avx512vl"
#define AVX512_ROW                                                                                 \
    .name = "avx512", .requires = KEYS(AVX512_KEYS, "fma", "f16c"), .k = &sdpa_kernels_avx512,     \
    .peak_class = "avx512"
extern const sdpa_kernels sdpa_kernels_avx512;
#endif
#ifdef SDPA_HAVE_AVX512_VNNI
extern const sdpa_kernels sdpa_kernels_avx512_vnni;
#endif
#ifdef SDPA_HAVE_AVX2
extern const sdpa_kernels sdpa_kernels_avx2;
#endif
#ifdef SDPA_HAVE_SVE
extern const sdpa_kernels sdpa_kernels_sve;
#endif
#ifdef SDPA_HAVE_NEON
extern const sdpa_kernels sdpa_kernels_neon;
#endif

const struct sdpa_impl sdpa_registry[] = {
#ifdef SDPA_HAVE_AVX512_VNNI
    {AVX512_ROW, .name = "avx512-vnni", .requires = KEYS(AVX512_KEYS, "avx512vnni", "fma", "f16c"),
     .k = &sdpa_kernels_avx512_vnni},
#endif
#ifdef SDPA_HAVE_AVX512
    {AVX512_ROW},
#endif
#ifdef SDPA_HAVE_AVX2
    {.name = "avx2",
     .requires = KEYS("avx2", "fma", "f16c"),
     .k = &sdpa_kernels_avx2,
     .peak_class = "avx2"},
#endif
#ifdef SDPA_HAVE_SVE
    {.name = "sve", .requires = KEYS("sve"), .k = &sdpa_kernels_sve, .peak_class = "neon"},
#endif
#ifdef SDPA_HAVE_NEON
    {.name = "neon", .requires = KEYS("asimd"), .k = &sdpa_kernels_neon, .peak_class = "neon"},
#endif
    {.name = "scalar", .requires = NO_KEYS, .k = &sdpa_kernels_scalar, .peak_class = "scalar"},
};
const size_t sdpa_registry_len = sizeof sdpa_registry / sizeof sdpa_registry[0];
_Static_assert(sizeof sdpa_registry / sizeof sdpa_registry[0] <= SDPA_REGISTRY_MAX,
               "raise SDPA_REGISTRY_MAX (internal.h)");
