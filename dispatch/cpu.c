/* cpu.c -- CPU feature detection through cpu_features (hwcaps on aarch64), baseline flags only */
#include "internal.h"

#include <string.h>

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
