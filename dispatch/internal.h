/* internal.h -- what the dispatch layer's files share: the registry entry, CPU facts, the active
   state */
#ifndef SDPA_DISPATCH_INTERNAL_H
#define SDPA_DISPATCH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <cpu_features/cpu_features_macros.h>
#if defined(CPU_FEATURES_ARCH_X86)
#include <cpu_features/cpuinfo_x86.h>
#elif defined(CPU_FEATURES_ARCH_AARCH64)
#include <sys/auxv.h>
/* Linux arm64 ELF hwcap bits (arch/arm64/include/uapi/asm/hwcap.h), for older C libraries */
#ifndef HWCAP_FPHP
#define HWCAP_FPHP (1UL << 9)
#endif
#ifndef HWCAP_ASIMDHP
#define HWCAP_ASIMDHP (1UL << 10)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP_SVE
#define HWCAP_SVE (1UL << 22)
#endif
#ifndef HWCAP2_SVE2
#define HWCAP2_SVE2 (1UL << 1)
#endif
#ifndef HWCAP2_SVEBF16
#define HWCAP2_SVEBF16 (1UL << 12)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1UL << 14)
#endif
#endif

#include "cache.h"
#include "kernel_table.h"
#include "sdpa.h"

/* What dispatch knows about the running CPU (compiled with baseline flags only): the whole
   feature set, so that a new feature key in registry.c needs no change here. */
typedef struct sdpa_cpu {
#if defined(CPU_FEATURES_ARCH_X86)
    /* cpu_features' bits, AVX and AVX-512 already cleared when the OS does not save their
       state; 1-bit signed bitfields: test them as booleans */
    X86Features x86;
#elif defined(CPU_FEATURES_ARCH_AARCH64)
    /* the kernel's hwcaps (getauxval AT_HWCAP, AT_HWCAP2: HWCAP_*, HWCAP2_* bits), which it
       sets only for state it saves */
    unsigned long hwcap, hwcap2;
#endif
    sdpa_caches caches; /* every level > 0 bytes, with its source */
} sdpa_cpu;

/* Reads the CPU once (cpuid / hwcaps, then the cache chain of cache.h); cheap enough for
   selection, not for a hot path. Never prints, aborts or exits. */
void sdpa_cpu_detect(sdpa_cpu *c);

/* One registry row: the only description of an implementation (registry.c). Everything else
   dispatch and the reports say of it is derived from the row: whether it runs here, its
   requirement text, the report's feature keys, tunables and peak class. */
struct sdpa_impl {
    const char *name;            /* what SDPA_ISA and sdpa_select take */
    const char *const *requires; /* feature keys of registry.c's table, NULL-terminated */
    const sdpa_kernels *k;       /* its kernels and the tuning they were compiled with */
    const char *peak_class;      /* sdpa_impl_peak_class: the bench's FMA peak it is judged by */
};

/* Rows at most, and requirement text bytes at most (api.c keeps each row's text). */
#define SDPA_REGISTRY_MAX      16
#define SDPA_REQUIRES_TEXT_MAX 160

/* Whether every feature impl requires is present on c (an unknown key never is). */
bool sdpa_impl_runs_on(const struct sdpa_impl *impl, const sdpa_cpu *c);
/* impl's requirement in words, as sdpa_impl_requires returns it, into buf. */
void sdpa_impl_requires_text(const struct sdpa_impl *impl, char *buf, size_t len);
/* The feature table requirements are written in: its length, key i, and whether c has it. */
size_t sdpa_feature_table_len(void);
const char *sdpa_feature_table_key(size_t i);
bool sdpa_feature_table_has(size_t i, const sdpa_cpu *c);

/* The registry, best first (registry.c). */
extern const struct sdpa_impl sdpa_registry[];
extern const size_t sdpa_registry_len;

/* The CPU facts read once at load (api.c): never NULL, never changes after. */
const sdpa_cpu *sdpa_cpu_facts(void);
/* The L2 size in force, used to size blocks (api.c). */
size_t sdpa_cached_l2_bytes(void);

/* The planner's and driver's parameters (driver/plan.c plans with them, driver/keys.c runs paged
   units the kernel does not page itself with the last four, sdpa_planner_tunables reports them
   all): X(constant, reported name, value, what it is). Fixed values, so that the same problem
   always takes the same path whatever the thread count. */
#define SDPA_PLANNER_PARAMS(X)                                                                     \
    X(ROWS_TARGET, "rows_target", 64, "query rows (heads of a group x queries) per work item")     \
    X(SPLIT_MIN_KV, "split_min_kv", 2048,                                                          \
      "keys from which a problem of one query block is split into KV chunks")                      \
    X(SPLIT_CHUNK_MIN, "split_chunk_min", 1024, "keys per KV chunk of a split problem, at least")  \
    X(SPLIT_CHUNK_MAX, "split_chunk_max", 16384,                                                   \
      "keys per KV chunk, at most: each chunk starts its K/V streams cold")                        \
    X(SPLIT_ITEMS, "split_items", 16,                                                              \
      "work items a split keeps: a chunk doubles while twice it still leaves this many")           \
    X(BLOCK_MIN, "block_min", 64, "keys per block handed to the kernels, at least")                \
    X(BLOCK_MAX, "block_max", 512, "keys per block handed to the kernels, at most")                \
    X(STREAM_BYTES, "stream_bytes", 32 << 20,                                                      \
      "bytes of K+V above which a call sets sdpa_rows.stream (more than a last-level cache)")      \
    X(PAGE_PF_KEYS, "page_pf_keys", 16,                                                            \
      "keys of the next page run requested before a run of paged units starts")                    \
    X(STAGE_MAX_PAGE, "stage_max_page", 64,                                                        \
      "keys per page below which pages a kernel does not page itself are gathered densely")        \
    X(STAGE_KEYS, "stage_keys", 256, "keys per gathered (or dequantized) copy")                    \
    X(STAGE_PF_KEYS, "stage_pf_keys", 32,                                                          \
      "keys requested ahead of the gather (the pages are scattered)")

#define SDPA_PLANNER_ENUM(c, name, value, about) c = value,
enum { SDPA_PLANNER_PARAMS(SDPA_PLANNER_ENUM) };
#undef SDPA_PLANNER_ENUM

/* Keys per block for head dims d and dv, from the L2 size in force (tuning.c). */
size_t sdpa_plan_block(size_t d, size_t dv);

/* An sdpa_tuning as a list of its non-zero fields, as sdpa_impl_tunables reports it, and the
   number of fields the list knows (tuning.c; a test holds it to the struct's size). */
size_t sdpa_tuning_list(const sdpa_tuning *t, sdpa_tunable *out, size_t cap);
size_t sdpa_tuning_fields(void);

#endif /* SDPA_DISPATCH_INTERNAL_H */
