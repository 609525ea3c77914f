/* cache.c -- cache sizes from cpu_features, sysconf and sysfs, and the fallback chain over them */
#define _POSIX_C_SOURCE 200809L
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cpu_features/cpu_features_macros.h>
#if defined(CPU_FEATURES_ARCH_X86)
#include <cpu_features/cpuinfo_x86.h>
#endif

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

size_t sdpa_cache_parse_size(const char *s)
{
    if (!s) return 0;
    const char *p = s;
    size_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (SIZE_MAX - 9) / 10) return 0;
        v = v * 10 + (size_t)(*p - '0');
    }
    if (p == s) return 0;
    unsigned shift = 0;
    if (*p == 'K')
        shift = 10;
    else if (*p == 'M')
        shift = 20;
    else if (*p == 'G')
        shift = 30;
    if (shift) p++;
    if (*p == '\n') p++;
    if (*p != '\0' || v > SIZE_MAX >> shift) return 0;
    return v << shift;
}

void sdpa_cache_from_sysconf(size_t sizes[SDPA_CACHE_LEVELS])
{
    memset(sizes, 0, SDPA_CACHE_LEVELS * sizeof *sizes);
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE) &&                           \
    defined(_SC_LEVEL3_CACHE_SIZE)
    /* glibc's names (absent from other C libraries); a value <= 0 means unknown, which is what
       many aarch64 systems answer */
    static const int names[SDPA_CACHE_LEVELS] = {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL2_CACHE_SIZE,
                                                 _SC_LEVEL3_CACHE_SIZE};
    for (int i = 0; i < SDPA_CACHE_LEVELS; i++) {
        const long v = sysconf(names[i]);
        sizes[i] = v > 0 ? (size_t)v : 0;
    }
#endif
}

/* The first line of a small file, NUL-terminated; false when it cannot be read. No stdio: the
   library never needs a FILE, and open/read are async-signal-safe should a loader call us. */
static bool read_small(const char *dir, int index, const char *name, char *buf, size_t len)
{
    char path[512];
    const int n = snprintf(path, sizeof path, "%s/index%d/%s", dir, index, name);
    if (n < 0 || (size_t)n >= sizeof path) return false;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t got;
    do {
        got = read(fd, buf, len - 1);
    } while (got < 0 && errno == EINTR);
    close(fd);
    if (got <= 0) return false;
    buf[got] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return true;
}

bool sdpa_cache_from_sysfs(const char *dir, size_t sizes[SDPA_CACHE_LEVELS])
{
    memset(sizes, 0, SDPA_CACHE_LEVELS * sizeof *sizes);
    if (!dir) return false;
    int index = 0;
    for (; index < 64; index++) { /* index<n> directories are numbered without gaps */
        char level[16], type[32], size[32];
        if (!read_small(dir, index, "level", level, sizeof level)) break;
        if (!read_small(dir, index, "type", type, sizeof type)) continue;
        if (!read_small(dir, index, "size", size, sizeof size)) continue;
        const bool data = strcmp(type, "Data") == 0, unified = strcmp(type, "Unified") == 0;
        int at = -1;
        if (strcmp(level, "1") == 0 && data) at = SDPA_CACHE_L1D;
        if (strcmp(level, "2") == 0 && (data || unified)) at = SDPA_CACHE_L2;
        if (strcmp(level, "3") == 0 && (data || unified)) at = SDPA_CACHE_L3;
        if (at >= 0 && sizes[at] == 0) sizes[at] = sdpa_cache_parse_size(size);
    }
    return index > 0;
}

void sdpa_caches_fill(sdpa_caches *c, const size_t sizes[SDPA_CACHE_LEVELS], const char *source)
{
    for (int i = 0; i < SDPA_CACHE_LEVELS; i++)
        if (c->bytes[i] == 0 && sizes[i] > 0) {
            c->bytes[i] = sizes[i];
            c->source[i] = source;
        }
}

static bool complete(const sdpa_caches *c)
{
    for (int i = 0; i < SDPA_CACHE_LEVELS; i++)
        if (c->bytes[i] == 0) return false;
    return true;
}

void sdpa_caches_detect(sdpa_caches *c)
{
    memset(c, 0, sizeof *c);
    size_t sizes[SDPA_CACHE_LEVELS];
    sdpa_cache_from_cpu_features(sizes);
    sdpa_caches_fill(c, sizes, SDPA_CACHE_SRC_CPUF);
    if (!complete(c)) {
        sdpa_cache_from_sysconf(sizes);
        sdpa_caches_fill(c, sizes, SDPA_CACHE_SRC_SYSCONF);
    }
    if (!complete(c)) {
        sdpa_cache_from_sysfs(SDPA_CACHE_SYSFS_DIR, sizes);
        sdpa_caches_fill(c, sizes, SDPA_CACHE_SRC_SYSFS);
    }
    /* sizes common to current cores; the L2 one is what the planner assumed before any source */
    static const size_t fallback[SDPA_CACHE_LEVELS] = {
        SDPA_CACHE_DEFAULT_L1D, SDPA_CACHE_DEFAULT_L2, SDPA_CACHE_DEFAULT_L3};
    sdpa_caches_fill(c, fallback, SDPA_CACHE_SRC_DEFAULT);
}
