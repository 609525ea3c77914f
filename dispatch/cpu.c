/* cpu.c -- CPU feature detection through cpu_features (hwcaps on aarch64), baseline flags only */
#include "internal.h"

#include <string.h>

void sdpa_cache_from_cpu_features(size_t sizes[SDPA_CACHE_LEVELS])
{
    memset(sizes, 0, SDPA_CACHE_LEVELS * sizeof *sizes);
#if defined(CPU_FEATURES_ARCH_X86)
    /* cpu_features walks the CPUID cache leaves it knows: on CPUs, or under hypervisors, that
       lack them it finds nothing, and the next source is asked */
    const CacheInfo ci = GetX86CacheInfo();
    for (int i = 0; i < ci.size && i < CPU_FEATURES_MAX_CACHE_LEVEL; i++) {
        const CacheLevelInfo *lv = &ci.levels[i];
        if (lv->cache_size <= 0) continue;
        const bool data = lv->cache_type == CPU_FEATURE_CACHE_DATA;
        const bool unified = lv->cache_type == CPU_FEATURE_CACHE_UNIFIED;
        int at = -1;
        if (lv->level == 1 && data) at = SDPA_CACHE_L1D;
        if (lv->level == 2 && (data || unified)) at = SDPA_CACHE_L2;
        if (lv->level == 3 && (data || unified)) at = SDPA_CACHE_L3;
        if (at >= 0 && sizes[at] == 0) sizes[at] = (size_t)lv->cache_size;
    }
#endif
}

void sdpa_cpu_detect(sdpa_cpu *c)
{
    memset(c, 0, sizeof *c);
#if defined(CPU_FEATURES_ARCH_X86)
    /* cpu_features clears the AVX and AVX-512 bits when XCR0 says the OS does not save YMM/ZMM
       state, so these already mean "usable". */
    c->x86 = GetX86Info().features;
#elif defined(CPU_FEATURES_ARCH_AARCH64)
    /* The kernel's hwcaps say what the CPU has and the OS enables (SVE state included). We read
       them ourselves rather than through cpu_features: Debian's arm64 build of cpu_features 0.7.0
       prints a debug line to stdout from GetAarch64Info when AT_HWCAP2 is 0 (any armv8.0 CPU),
       and the library must never print. The capability report still uses cpu_features. */
    c->hwcap = getauxval(AT_HWCAP);
#ifdef AT_HWCAP2
    c->hwcap2 = getauxval(AT_HWCAP2);
#endif
#endif
    sdpa_caches_detect(&c->caches);
}
