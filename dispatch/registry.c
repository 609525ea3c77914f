/* registry.c -- every compiled-in implementation, best first, with the CPU predicate that admits it */
#include "internal.h"
#include "sdpa_config.h"

#ifdef SDPA_HAVE_AVX512
static bool runs_avx512(const sdpa_cpu *c)
{
    return c->avx512f && c->avx512bw && c->avx512dq && c->avx512vl && c->fma && c->f16c;
}
#endif
#ifdef SDPA_HAVE_AVX2
static bool runs_avx2(const sdpa_cpu *c) { return c->avx2 && c->fma && c->f16c; }
#endif
#ifdef SDPA_HAVE_SVE
static bool runs_sve(const sdpa_cpu *c) { return c->sve; }
#endif
#ifdef SDPA_HAVE_NEON
static bool runs_neon(const sdpa_cpu *c) { return c->neon; }
#endif
static bool runs_anywhere(const sdpa_cpu *c)
{
    (void)c;
    return true;
}

/* Adding an ISA: its kernel file(s), one row in kernels/<arch>/meson.build, one line here. */
const struct sdpa_impl sdpa_registry[] = {
#ifdef SDPA_HAVE_AVX512
    {"avx512", "AVX-512 F+BW+DQ+VL, FMA, F16C", runs_avx512, &sdpa_kernels_avx512},
#endif
#ifdef SDPA_HAVE_AVX2
    {"avx2", "AVX2, FMA, F16C", runs_avx2, &sdpa_kernels_avx2},
#endif
#ifdef SDPA_HAVE_SVE
    {"sve", "SVE (any vector length)", runs_sve, &sdpa_kernels_sve},
#endif
#ifdef SDPA_HAVE_NEON
    {"neon", "Advanced SIMD (armv8-a)", runs_neon, &sdpa_kernels_neon},
#endif
    {"scalar", "nothing (portable C)", runs_anywhere, &sdpa_kernels_scalar},
};
const size_t sdpa_registry_len = sizeof sdpa_registry / sizeof sdpa_registry[0];
