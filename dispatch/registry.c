/* registry.c -- every compiled-in implementation, best first, with the CPU predicate that admits it */
#include "internal.h"
#include "sdpa_config.h"

/* Adding an ISA: its kernel file(s), one row in kernels/<arch>/meson.build, and here its kernel
   table's declaration and predicate under SDPA_HAVE_<ISA> plus one line in the table below:
   name, requirements, predicate, kernels, peak class (the FMA peak sdpa-bench judges it against:
   "scalar", "avx2", "avx512" or "neon"). A predicate reads any feature from sdpa_cpu. */

#ifdef SDPA_HAVE_AVX512_VNNI
extern const sdpa_kernels sdpa_kernels_avx512_vnni;
static bool runs_avx512(const sdpa_cpu *c);
static bool runs_avx512_vnni(const sdpa_cpu *c) { return runs_avx512(c) && c->x86.avx512vnni; }
#endif
#ifdef SDPA_HAVE_AVX512
extern const sdpa_kernels sdpa_kernels_avx512;
static bool runs_avx512(const sdpa_cpu *c)
{
    const X86Features *f = &c->x86;
    return f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->fma3 && f->f16c;
}
#endif
#ifdef SDPA_HAVE_AVX2
extern const sdpa_kernels sdpa_kernels_avx2;
static bool runs_avx2(const sdpa_cpu *c) { return c->x86.avx2 && c->x86.fma3 && c->x86.f16c; }
#endif
#ifdef SDPA_HAVE_SVE
extern const sdpa_kernels sdpa_kernels_sve;
static bool runs_sve(const sdpa_cpu *c) { return (c->hwcap & HWCAP_SVE) != 0; }
#endif
#ifdef SDPA_HAVE_NEON
extern const sdpa_kernels sdpa_kernels_neon;
static bool runs_neon(const sdpa_cpu *c)
{
    (void)c; /* Advanced SIMD is mandatory in armv8-a Linux userspace */
    return true;
}
#endif
static bool runs_anywhere(const sdpa_cpu *c)
{
    (void)c;
    return true;
}

const struct sdpa_impl sdpa_registry[] = {
#ifdef SDPA_HAVE_AVX512_VNNI
    {"avx512-vnni", "AVX-512 F+BW+DQ+VL+VNNI, FMA, F16C", runs_avx512_vnni,
     &sdpa_kernels_avx512_vnni, "avx512"},
#endif
#ifdef SDPA_HAVE_AVX512
    {"avx512", "AVX-512 F+BW+DQ+VL, FMA, F16C", runs_avx512, &sdpa_kernels_avx512, "avx512"},
#endif
#ifdef SDPA_HAVE_AVX2
    {"avx2", "AVX2, FMA, F16C", runs_avx2, &sdpa_kernels_avx2, "avx2"},
#endif
#ifdef SDPA_HAVE_SVE
    {"sve", "SVE (any vector length)", runs_sve, &sdpa_kernels_sve, "neon"},
#endif
#ifdef SDPA_HAVE_NEON
    {"neon", "Advanced SIMD (armv8-a)", runs_neon, &sdpa_kernels_neon, "neon"},
#endif
    {"scalar", "nothing (portable C)", runs_anywhere, &sdpa_kernels_scalar, "scalar"},
};
const size_t sdpa_registry_len = sizeof sdpa_registry / sizeof sdpa_registry[0];
