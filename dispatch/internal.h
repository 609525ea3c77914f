/* internal.h -- what the dispatch layer's files share: the registry entry, CPU facts, the active state */
#ifndef SDPA_DISPATCH_INTERNAL_H
#define SDPA_DISPATCH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "kernel_table.h"
#include "sdpa.h"

/* What dispatch needs to know about the running CPU (compiled with baseline flags only). */
typedef struct sdpa_cpu {
    bool   avx2, fma, f16c, avx512f, avx512bw, avx512dq, avx512vl; /* as usable by the OS */
    bool   neon, sve;
    size_t l1d_bytes, l2_bytes;                                     /* 0 when unknown */
} sdpa_cpu;

/* Reads the CPU with cpu_features (cpuid / hwcaps); cheap enough for selection, not for a hot path. */
void sdpa_cpu_detect(sdpa_cpu *c);

struct sdpa_impl {
    const char         *name;
    const char         *requires;
    bool              (*runs_on)(const sdpa_cpu *c);
    const sdpa_kernels *k;
};

/* The registry, best first (registry.c). */
extern const struct sdpa_impl sdpa_registry[];
extern const size_t           sdpa_registry_len;

/* Cache sizes detected once at load, used to size blocks (api.c). */
size_t sdpa_cached_l2_bytes(void);

#endif /* SDPA_DISPATCH_INTERNAL_H */
