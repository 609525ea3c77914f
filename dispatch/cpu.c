/* cpu.c -- CPU feature and cache detection through cpu_features, baseline flags only */
#include "internal.h"

#include <string.h>

#include <cpu_features/cpu_features_macros.h>
#if defined(CPU_FEATURES_ARCH_X86)
#include <cpu_features/cpuinfo_x86.h>
#elif defined(CPU_FEATURES_ARCH_AARCH64)
#include <sys/auxv.h>
#ifndef HWCAP_SVE
#define HWCAP_SVE (1UL << 22) /* Linux arm64 ELF hwcap bit, arch/arm64/include/uapi/asm/hwcap.h */
#endif
#endif

void sdpa_cpu_detect(sdpa_cpu *c)
{
    memset(c, 0, sizeof *c);
#if defined(CPU_FEATURES_ARCH_X86)
    /* cpu_features clears the AVX and AVX-512 bits when XCR0 says the OS does not save YMM/ZMM
       state, so these already mean "usable". The fields are 1-bit signed: test as booleans. */
    const X86Info info = GetX86Info();
    const X86Features f = info.features;
    c->avx2 = f.avx2 ? true : false;
    c->fma = f.fma3 ? true : false;
    c->f16c = f.f16c ? true : false;
    c->avx512f = f.avx512f ? true : false;
    c->avx512bw = f.avx512bw ? true : false;
    c->avx512dq = f.avx512dq ? true : false;
    c->avx512vl = f.avx512vl ? true : false;
    const CacheInfo ci = GetX86CacheInfo();
    for (int i = 0; i < ci.size && i < CPU_FEATURES_MAX_CACHE_LEVEL; i++) {
        const CacheLevelInfo *lv = &ci.levels[i];
        if (lv->cache_size <= 0) continue;
        if (lv->level == 1 && lv->cache_type == CPU_FEATURE_CACHE_DATA)
            c->l1d_bytes = (size_t)lv->cache_size;
        if (lv->level == 2 && (lv->cache_type == CPU_FEATURE_CACHE_UNIFIED ||
                               lv->cache_type == CPU_FEATURE_CACHE_DATA))
            c->l2_bytes = (size_t)lv->cache_size;
    }
#elif defined(CPU_FEATURES_ARCH_AARCH64)
    /* The kernel's hwcaps say what the CPU has and the OS enables (SVE state included). We read
       the bit cpu_features would read ourselves: Debian's arm64 build of cpu_features 0.7.0 prints
       a debug line to stdout from GetAarch64Info when AT_HWCAP2 is 0 (any armv8.0 CPU), and the
       library must never print. The capability report still uses cpu_features for the details. */
    const unsigned long hwcap = getauxval(AT_HWCAP);
    c->neon = true; /* Advanced SIMD is mandatory in armv8-a Linux userspace */
    c->sve = (hwcap & HWCAP_SVE) != 0;
#endif
}
