/* cache.h -- the cache sizes dispatch plans with, each level from the first source that knows it */
#ifndef SDPA_DISPATCH_CACHE_H
#define SDPA_DISPATCH_CACHE_H

#include <stdbool.h>
#include <stddef.h>

/* Levels, in the order of every size array below. */
enum { SDPA_CACHE_L1D, SDPA_CACHE_L2, SDPA_CACHE_L3, SDPA_CACHE_LEVELS };

/* Sizes in bytes, used when no source knows a level. */
#define SDPA_CACHE_DEFAULT_L1D ((size_t)32 << 10)
#define SDPA_CACHE_DEFAULT_L2  ((size_t)1 << 20)
#define SDPA_CACHE_DEFAULT_L3  ((size_t)8 << 20)

/* Source names, in order of preference. */
#define SDPA_CACHE_SRC_CPUF    "cpu_features"
#define SDPA_CACHE_SRC_SYSCONF "sysconf"
#define SDPA_CACHE_SRC_SYSFS   "sysfs"
#define SDPA_CACHE_SRC_DEFAULT "default"

/* The sizes in force: bytes[i] > 0 once filled, source[i] a static name from the list above. */
typedef struct sdpa_caches {
    size_t bytes[SDPA_CACHE_LEVELS];
    const char *source[SDPA_CACHE_LEVELS];
} sdpa_caches;

/* Each source writes sizes[L1D..L3] with 0 for what it does not know, never prints, aborts or
   allocates, and is cheap enough to run once at load. */
void sdpa_cache_from_cpu_features(size_t sizes[SDPA_CACHE_LEVELS]); /* zeros off x86 */
void sdpa_cache_from_sysconf(size_t sizes[SDPA_CACHE_LEVELS]);
/* dir holds index0, index1, ... each with level, type and size files (Linux's
   /sys/devices/system/cpu/cpu0/cache); instruction caches are skipped. False when dir has none. */
bool sdpa_cache_from_sysfs(const char *dir, size_t sizes[SDPA_CACHE_LEVELS]);
#define SDPA_CACHE_SYSFS_DIR "/sys/devices/system/cpu/cpu0/cache"

/* A sysfs size ("48K", "1024K", "32M", a plain byte count; a trailing newline allowed) in bytes;
   0 for anything else, or on overflow. */
size_t sdpa_cache_parse_size(const char *s);

/* Gives every level of c still at 0 bytes the size from sizes, when that is > 0, and source. */
void sdpa_caches_fill(sdpa_caches *c, const size_t sizes[SDPA_CACHE_LEVELS], const char *source);

/* The whole chain: cpu_features, sysconf, sysfs, default, each asked only while a level is
   still unknown. Every level ends with bytes > 0 and a source. */
void sdpa_caches_detect(sdpa_caches *c);

#endif /* SDPA_DISPATCH_CACHE_H */
