/* sdpa-cpuinfo.c -- capability report: what this CPU and OS can run, and which libsdpa kernels it
 * will use */
/*
 * Usage: sdpa-cpuinfo [--json | --short]
 *
 * Prints the library (version, compiler and flags), the system (cores the OS offers, the
 * transparent-huge-page mode, AMX permission where the CPU has AMX), the CPU (vendor, model), the
 * instruction-set features that matter to attention kernels, whether the OS saves the vector
 * registers those features need, the caches, the values libsdpa plans with (the cache sizes in
 * force and where each came from, the planner's parameters), every implementation compiled into
 * libsdpa (supported on this machine or not, and why; its peak class and tunables), and the active
 * one with the reason it is active.
 * --json prints the same as one JSON object; --short one line of the essentials, for an
 * engine to print at start-up.
 *
 * The features libsdpa writes its implementations' requirements in, and the implementations
 * themselves, come from libsdpa (sdpa_feature_*, sdpa_impl_*): this report names none of them.
 * The other x86 features come from cpu_features; those an older cpu_features lacks (the build
 * probes them, see tools/meson.build) are read here from CPUID directly.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include "sdpa.h"

#if defined(__x86_64__) || defined(__i386__)
#define CPUINFO_X86 1
#include <cpu_features/cpuinfo_x86.h>
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__aarch64__)
#define CPUINFO_AARCH64 1
#include <cpu_features/cpuinfo_aarch64.h>
#include <fcntl.h>
#include <sys/prctl.h>
#endif

/* ------------------------------------------------------------------------------------------ */
/* A tiny emitter that writes either indented text or JSON from the same calls, so the two     */
/* outputs can never disagree.                                                                 */
/* ------------------------------------------------------------------------------------------ */
#define OUT_MAX_DEPTH 8

typedef struct out {
    bool json;
    int depth;
    bool first[OUT_MAX_DEPTH];    /* no member written yet at this depth (JSON commas) */
    bool in_array[OUT_MAX_DEPTH]; /* the container at this depth is an array */
    bool item_start;              /* text: next key is the first of an array item ("- ") */
} out;

static void json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* Starts a member: the comma and key in JSON, the indented key in text. */
static void out_key(out *o, const char *key)
{
    if (o->json) {
        if (!o->first[o->depth]) putchar(',');
        o->first[o->depth] = false;
        if (key && !o->in_array[o->depth]) {
            json_string(key);
            putchar(':');
        }
        return;
    }
    int indent = 2 * (o->depth - 1);
    if (indent < 0) indent = 0;
    if (o->item_start) {
        printf("%*s- ", indent - 2 > 0 ? indent - 2 : 0, "");
        o->item_start = false;
    } else {
        printf("%*s", indent, "");
    }
    if (key) {
        const int width = 22 - (indent > 20 ? 20 : indent);
        printf("%-*s", width, key);
        if ((int)strlen(key) >= width) putchar(' '); /* a long key still ends before its value */
    }
}

static void out_open(out *o, const char *key, bool array)
{
    if (o->json) {
        if (o->depth > 0) out_key(o, key);
        putchar(array ? '[' : '{');
    } else if (o->depth > 0) {
        if (o->in_array[o->depth]) {
            o->item_start = true; /* an object inside an array: its first key gets the dash */
        } else {
            int indent = 2 * (o->depth - 1);
            printf("%*s%s\n", indent, "", key ? key : "");
        }
    }
    if (o->depth + 1 < OUT_MAX_DEPTH) o->depth++;
    o->first[o->depth] = true;
    o->in_array[o->depth] = array;
}

static void out_close(out *o)
{
    if (o->json) putchar(o->in_array[o->depth] ? ']' : '}');
    if (o->depth > 0) o->depth--;
    if (o->json && o->depth == 0) putchar('\n');
}

static void out_str(out *o, const char *key, const char *v)
{
    out_key(o, key);
    if (o->json) {
        if (v)
            json_string(v);
        else
            fputs("null", stdout);
    } else {
        printf("%s\n", v ? v : "(none)");
    }
}

/* A feature: v < 0 means unknown (the cpu_features this was built with cannot tell). */
static void out_flag(out *o, const char *key, int v)
{
    out_key(o, key);
    if (o->json)
        fputs(v < 0 ? "null" : v ? "true" : "false", stdout);
    else
        puts(v < 0 ? "unknown" : v ? "yes" : "no");
}

static void out_int(out *o, const char *key, long long v)
{
    out_key(o, key);
    if (o->json)
        printf("%lld", v);
    else
        printf("%lld\n", v);
}

static void out_bytes(out *o, const char *key, long long v)
{
    out_key(o, key);
    if (o->json)
        printf("%lld", v);
    else if (v >= (1 << 20) && v % (1 << 20) == 0)
        printf("%lld MiB\n", v >> 20);
    else if (v >= 1024 && v % 1024 == 0)
        printf("%lld KiB\n", v >> 10);
    else
        printf("%lld B\n", v);
}

/* A named parameter: its value and what it is ("name  value  about" in text). */
static void out_tunable(out *o, const sdpa_tunable *t)
{
    out_key(o, t->name);
    if (o->json) {
        printf("{\"value\":%zu,\"about\":", t->value);
        json_string(t->about);
        putchar('}');
    } else {
        printf("%-8zu %s\n", t->value, t->about);
    }
}

/* An object of named parameters ("(none)" in text when there are none). */
static void out_tunables(out *o, const char *key, const sdpa_tunable *t, size_t n)
{
    if (n == 0 && !o->json) {
        out_str(o, key, NULL);
        return;
    }
    out_open(o, key, false);
    for (size_t i = 0; i < n; i++) out_tunable(o, &t[i]);
    out_close(o);
}

/* ------------------------------------------------------------------------------------------ */
/* Caches, from the first source that knows them: cpu_features' CPUID walk (x86; 0.7.0 decodes */
/* only Intel's leaf 4), the C library (sysconf), then sysfs (Linux).                          */
/* ------------------------------------------------------------------------------------------ */
static bool read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (ok) buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

/* "48K" / "2048K" / "1M" as sysfs writes them, in bytes; -1 when unreadable. */
static long long parse_size(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s) return -1;
    if (*end == 'K')
        v <<= 10;
    else if (*end == 'M')
        v <<= 20;
    else if (*end == 'G')
        v <<= 30;
    return v;
}

/* Caches from the C library (glibc reads CPUID itself, AMD's leaves included): L1d, L1i, L2,
   L3, each only when sysconf knows its size. */
static int sysconf_caches(out *o)
{
#if defined(_SC_LEVEL1_DCACHE_SIZE)
    static const struct {
        int level;
        const char *type;
        int size, ways, line;
    } lv[] = {
        {1, "data", _SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL1_DCACHE_ASSOC, _SC_LEVEL1_DCACHE_LINESIZE},
        {1, "instruction", _SC_LEVEL1_ICACHE_SIZE, _SC_LEVEL1_ICACHE_ASSOC,
         _SC_LEVEL1_ICACHE_LINESIZE},
        {2, "unified", _SC_LEVEL2_CACHE_SIZE, _SC_LEVEL2_CACHE_ASSOC, _SC_LEVEL2_CACHE_LINESIZE},
        {3, "unified", _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL3_CACHE_ASSOC, _SC_LEVEL3_CACHE_LINESIZE},
    };
    int found = 0;
    for (size_t i = 0; i < sizeof lv / sizeof lv[0]; i++) {
        const long size = sysconf(lv[i].size);
        if (size <= 0) continue;
        out_open(o, NULL, false);
        out_int(o, "level", lv[i].level);
        out_str(o, "type", lv[i].type);
        out_bytes(o, "size_bytes", size);
        out_int(o, "ways", sysconf(lv[i].ways) > 0 ? sysconf(lv[i].ways) : 0);
        out_int(o, "line_bytes", sysconf(lv[i].line) > 0 ? sysconf(lv[i].line) : 0);
        out_str(o, "source", "sysconf");
        out_close(o);
        found++;
    }
    return found;
#else
    (void)o;
    return 0;
#endif
}

static int sysfs_caches(out *o)
{
    int found = 0;
    for (int i = 0; i < 16; i++) {
        char path[128], level[32], type[32], size[32], ways[32], line[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (!read_line(path, level, sizeof level)) break;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (!read_line(path, type, sizeof type)) strcpy(type, "unknown");
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!read_line(path, size, sizeof size)) strcpy(size, "");
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu0/cache/index%d/ways_of_associativity", i);
        if (!read_line(path, ways, sizeof ways)) strcpy(ways, "0");
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu0/cache/index%d/coherency_line_size", i);
        if (!read_line(path, line, sizeof line)) strcpy(line, "0");
        for (char *c = type; *c; c++)
            if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
        out_open(o, NULL, false);
        out_int(o, "level", atoll(level));
        out_str(o, "type", type);
        out_bytes(o, "size_bytes", parse_size(size));
        out_int(o, "ways", atoll(ways));
        out_int(o, "line_bytes", atoll(line));
        out_str(o, "source", "sysfs");
        out_close(o);
        found++;
    }
    return found;
}

#ifdef CPUINFO_X86
/* s without leading and trailing blanks (CPUID pads the brand string), into buf. */
static const char *trimmed(const char *s, char *buf, size_t len)
{
    while (*s == ' ') s++;
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == ' ') n--;
    if (n >= len) n = len - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return buf;
}
#endif

/* The word in brackets of a sysfs choice list ("always [madvise] never"), or NULL. */
static const char *sysfs_choice(const char *path, char *buf, size_t len)
{
    char line[256];
    if (!read_line(path, line, sizeof line)) return NULL;
    const char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
    if (!a || !b || (size_t)(b - a - 1) >= len) return NULL;
    memcpy(buf, a + 1, (size_t)(b - a - 1));
    buf[b - a - 1] = '\0';
    return buf;
}

/* impl's required feature keys joined by spaces into buf ("" for none) */
static const char *join_keys(const sdpa_impl *impl, char *buf, size_t len)
{
    buf[0] = '\0';
    const char *k;
    for (size_t i = 0; (k = sdpa_impl_requires_key(impl, i)) != NULL; i++) {
        if (buf[0]) strncat(buf, " ", len - strlen(buf) - 1);
        strncat(buf, k, len - strlen(buf) - 1);
    }
    return buf;
}

/* The features libsdpa writes its requirements in, as it sees them on this CPU and OS. */
static void report_library_features(out *o)
{
    for (size_t i = 0; i < sdpa_feature_count(); i++)
        out_flag(o, sdpa_feature_key(i), sdpa_feature_present(i));
}

/* Processors the OS offers, and those this process may run on (its affinity mask). */
static long cores_online(void) { return sysconf(_SC_NPROCESSORS_ONLN); }
static long cores_usable(void)
{
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
    return -1;
}

/* AMX tile data (XCR0 bit 18) granted to this process by Linux (arch_prctl ARCH_GET_XCOMP_PERM,
   Linux 5.16): 1 yes, 0 no, -1 unknown. A process must ask (ARCH_REQ_XCOMP_PERM) before use. */
static int amx_permitted(void)
{
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
    unsigned long mask = 0;
    if (syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &mask) != 0) return -1;
    return (mask >> 18) & 1u;
#else
    return -1;
#endif
}

#ifndef SDPA_BUILD_COMPILER
#define SDPA_BUILD_COMPILER "unknown"
#endif
#ifndef SDPA_BUILD_FLAGS
#define SDPA_BUILD_FLAGS "unknown"
#endif

static void report_library(out *o)
{
    out_open(o, "library", false);
    out_str(o, "version", sdpa_version());
    out_str(o, "compiler", SDPA_BUILD_COMPILER);
    out_str(o, "build", SDPA_BUILD_FLAGS);
    out_close(o);
}

static bool cpu_has_amx(void);

static void report_system(out *o)
{
    char thp[32];
    out_open(o, "system", false);
    out_int(o, "cores_online", cores_online());
    out_int(o, "cores_usable", cores_usable());
    out_str(o, "transparent_hugepages",
            sysfs_choice("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp));
    if (cpu_has_amx()) out_flag(o, "amx_permitted", amx_permitted());
    out_close(o);
}

/* ------------------------------------------------------------------------------------------ */
/* x86                                                                                          */
/* ------------------------------------------------------------------------------------------ */
#ifdef CPUINFO_X86
/* xgetbv is only legal once CPUID says the OS enabled XSAVE (OSXSAVE); compiled for the xsave
   target on its own so that nothing else in this file needs the flag. */
__attribute__((target("xsave"))) static uint64_t read_xcr0(void) { return _xgetbv(0); }

static bool cpuid_osxsave(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c >> 27) & 1u;
}

/* CPUID leaf 7 sub-leaf `sub`, or zeros when the leaf does not exist. */
static void cpuid7(unsigned sub, unsigned r[4])
{
    r[0] = r[1] = r[2] = r[3] = 0;
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, sub, r[0], r[1], r[2], r[3]);
}

/* XCR0 state components (Intel SDM vol. 1, 13.1). */
#define XCR0_SSE       (1ull << 1)
#define XCR0_AVX       (1ull << 2)
#define XCR0_OPMASK    (1ull << 5)
#define XCR0_ZMM_HI256 (1ull << 6)
#define XCR0_HI16_ZMM  (1ull << 7)
#define XCR0_TILECFG   (1ull << 17)
#define XCR0_TILEDATA  (1ull << 18)
#define XCR0_AVX512    (XCR0_OPMASK | XCR0_ZMM_HI256 | XCR0_HI16_ZMM)

static bool cpu_has_amx(void)
{
    unsigned r[4];
    cpuid7(0, r);
    return (r[3] >> 24) & 1u; /* CPUID.(7,0):EDX[24] AMX-TILE */
}

static const char *cpu_brand(char *buf, size_t len)
{
    const X86Info info = GetX86Info();
    return trimmed(info.brand_string, buf, len);
}

static const char *cache_type_name(CacheType t)
{
    switch (t) {
    case CPU_FEATURE_CACHE_DATA:
        return "data";
    case CPU_FEATURE_CACHE_INSTRUCTION:
        return "instruction";
    case CPU_FEATURE_CACHE_UNIFIED:
        return "unified";
    default:
        return NULL;
    }
}

static void report_cpu(out *o)
{
    const X86Info info = GetX86Info();
    const X86Features *f = &info.features;
    const bool osxsave = cpuid_osxsave();
    const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    unsigned l70[4], l71[4];
    char brand[64];
    cpuid7(0, l70);
    cpuid7(1, l71);
    const bool os_avx = (xcr0 & (XCR0_SSE | XCR0_AVX)) == (XCR0_SSE | XCR0_AVX);
    const bool os_avx512 = os_avx && (xcr0 & XCR0_AVX512) == XCR0_AVX512;
    (void)os_avx512, (void)f; /* unused when cpu_features knows (or lacks) every field below */

    out_open(o, "cpu", false);
#ifdef __x86_64__
    out_str(o, "arch", "x86_64");
#else
    out_str(o, "arch", "x86");
#endif
    out_str(o, "vendor", info.vendor);
    out_str(o, "brand", trimmed(info.brand_string, brand, sizeof brand));
    out_int(o, "family", info.family);
    out_int(o, "model", info.model);
    out_int(o, "stepping", info.stepping);
    out_close(o);

    /* cpu_features already clears AVX and AVX-512 when XCR0 shows the OS does not save that
       state; the CPUID fallbacks below apply the same rule themselves. */
    out_open(o, "features", false);
    report_library_features(o);
#ifdef SDPA_CPUF_HAS_AVX512_BF16
    out_flag(o, "avx512_bf16", !!f->avx512_bf16);
#else
    out_flag(o, "avx512_bf16", os_avx512 && ((l71[0] >> 5) & 1u));  /* CPUID.(7,1):EAX[5] */
#endif
#ifdef SDPA_CPUF_HAS_AVX512_FP16
    out_flag(o, "avx512_fp16", !!f->avx512_fp16);
#else
    out_flag(o, "avx512_fp16", os_avx512 && ((l70[3] >> 23) & 1u)); /* CPUID.(7,0):EDX[23] */
#endif
#ifdef SDPA_CPUF_HAS_AVX_VNNI
    out_flag(o, "avx_vnni", !!f->avx_vnni);
#else
    out_flag(o, "avx_vnni", os_avx && ((l71[0] >> 4) & 1u));        /* CPUID.(7,1):EAX[4] */
#endif
    /* AMX: CPUID only, the OS side is the tile state below (and, on Linux, a per-process
       permission request before first use). */
#ifdef SDPA_CPUF_HAS_AMX_TILE
    out_flag(o, "amx_tile", !!f->amx_tile);
#else
    out_flag(o, "amx_tile", (l70[3] >> 24) & 1u);
#endif
#ifdef SDPA_CPUF_HAS_AMX_BF16
    out_flag(o, "amx_bf16", !!f->amx_bf16);
#else
    out_flag(o, "amx_bf16", (l70[3] >> 22) & 1u);
#endif
#ifdef SDPA_CPUF_HAS_AMX_INT8
    out_flag(o, "amx_int8", !!f->amx_int8);
#else
    out_flag(o, "amx_int8", (l70[3] >> 25) & 1u);
#endif
    /* say which answers bypassed cpu_features, so a reader can weigh them */
    const char *from_cpuid = ""
#ifndef SDPA_CPUF_HAS_AVX512_BF16
                             " avx512_bf16"
#endif
#ifndef SDPA_CPUF_HAS_AVX512_FP16
                             " avx512_fp16"
#endif
#ifndef SDPA_CPUF_HAS_AVX_VNNI
                             " avx_vnni"
#endif
#ifndef SDPA_CPUF_HAS_AMX_TILE
                             " amx_tile amx_bf16 amx_int8"
#endif
        ;
    out_str(o, "read_from_cpuid", *from_cpuid ? from_cpuid + 1 : NULL);
    out_close(o);

    out_open(o, "os_vector_state", false);
    out_flag(o, "osxsave", osxsave);
    char hex[32];
    snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)xcr0);
    out_str(o, "xcr0", osxsave ? hex : NULL);
    out_flag(o, "sse_xmm", (xcr0 & XCR0_SSE) != 0);
    out_flag(o, "avx_ymm", (xcr0 & XCR0_AVX) != 0);
    out_flag(o, "avx512_opmask_zmm", (xcr0 & XCR0_AVX512) == XCR0_AVX512);
    out_flag(o, "amx_tiles",
             (xcr0 & (XCR0_TILECFG | XCR0_TILEDATA)) == (XCR0_TILECFG | XCR0_TILEDATA));
    out_close(o);

    out_open(o, "caches", true);
    const CacheInfo ci = GetX86CacheInfo();
    int found = 0;
    for (int i = 0; i < ci.size && i < CPU_FEATURES_MAX_CACHE_LEVEL; i++) {
        const CacheLevelInfo *c = &ci.levels[i];
        const char *type = cache_type_name(c->cache_type);
        if (!type) continue; /* TLBs and prefetch descriptors are not caches */
        out_open(o, NULL, false);
        out_int(o, "level", c->level);
        out_str(o, "type", type);
        out_bytes(o, "size_bytes", c->cache_size);
        out_int(o, "ways", c->ways);
        out_int(o, "line_bytes", c->line_size);
        out_str(o, "source", "cpuid");
        out_close(o);
        found++;
    }
    if (!found) found = sysconf_caches(o);
    if (!found) sysfs_caches(o);
    out_close(o);
}
#endif /* CPUINFO_X86 */

/* ------------------------------------------------------------------------------------------ */
/* AArch64                                                                                      */
/* ------------------------------------------------------------------------------------------ */
#ifdef CPUINFO_AARCH64
/* The SVE vector length in bytes. prctl answers without executing SVE code; the cntb fallback
   is compiled for +sve on its own and only ever called once the CPU has reported SVE. */
__attribute__((target("+sve"))) static long sve_cntb(void)
{
    long vl;
    __asm__ volatile("cntb %0" : "=r"(vl));
    return vl;
}

static long sve_vector_bytes(void)
{
#ifdef PR_SVE_GET_VL
    int r = prctl(PR_SVE_GET_VL, 0, 0, 0, 0);
    if (r >= 0) return r & PR_SVE_VL_LEN_MASK;
#endif
    return sve_cntb();
}

/* Debian's arm64 cpu_features 0.7.0 prints a debug line to stdout when AT_HWCAP2 is 0 (any
   armv8.0 CPU); keep it out of the report (and out of --json) by pointing fd 1 elsewhere. */
static Aarch64Info quiet_aarch64_info(void)
{
    fflush(stdout);
    const int saved = dup(STDOUT_FILENO), null_fd = open("/dev/null", O_WRONLY);
    if (saved >= 0 && null_fd >= 0) dup2(null_fd, STDOUT_FILENO);
    const Aarch64Info info = GetAarch64Info();
    fflush(stdout);
    if (saved >= 0) {
        dup2(saved, STDOUT_FILENO);
        close(saved);
    }
    if (null_fd >= 0) close(null_fd);
    return info;
}

static void report_cpu(out *o)
{
    const Aarch64Info info = quiet_aarch64_info();
    const Aarch64Features *f = &info.features;
    char hex[32];

    out_open(o, "cpu", false);
    out_str(o, "arch", "aarch64");
    snprintf(hex, sizeof hex, "0x%02x", info.implementer);
    out_str(o, "implementer", hex);
    snprintf(hex, sizeof hex, "0x%03x", info.part);
    out_str(o, "part", hex);
    out_int(o, "variant", info.variant);
    out_int(o, "revision", info.revision);
    out_close(o);

    out_open(o, "features", false);
    report_library_features(o);
    if (f->sve)
        out_bytes(o, "sve_vector_bytes", sve_vector_bytes());
    else
        out_str(o, "sve_vector_bytes", NULL);
    out_close(o);

    /* Linux advertises a HWCAP only for state it saves on context switch, so the features
       above are already the ones the OS supports. */
    out_open(o, "os_vector_state", false);
    out_str(o, "source", "hwcaps (the kernel reports only state it saves)");
    out_close(o);

    out_open(o, "caches", true);
    if (!sysconf_caches(o)) sysfs_caches(o);
    out_close(o);
}
#endif /* CPUINFO_AARCH64 */

#ifndef CPUINFO_X86
static bool cpu_has_amx(void) { return false; }
static const char *cpu_brand(char *buf, size_t len)
{
    (void)len;
    buf[0] = '\0';
    return buf;
}
#endif

#if !defined(CPUINFO_X86) && !defined(CPUINFO_AARCH64)
static void report_cpu(out *o)
{
    out_open(o, "cpu", false);
    out_str(o, "arch", "unknown to this report");
    out_close(o);
    out_open(o, "caches", true);
    if (!sysconf_caches(o)) sysfs_caches(o);
    out_close(o);
}
#endif

/* ------------------------------------------------------------------------------------------ */
/* libsdpa: the values it plans with, the registry and the active choice                       */
/* ------------------------------------------------------------------------------------------ */
#define MAX_TUNABLES 64

static void report_planning(out *o)
{
    sdpa_cache_info ci;
    sdpa_cache_info_get(&ci);
    out_open(o, "caches_in_force", false);
    out_bytes(o, "l1d_bytes", (long long)ci.l1d_bytes);
    out_str(o, "l1d_source", ci.l1d_source);
    out_bytes(o, "l2_bytes", (long long)ci.l2_bytes);
    out_str(o, "l2_source", ci.l2_source);
    out_bytes(o, "l3_bytes", (long long)ci.l3_bytes);
    out_str(o, "l3_source", ci.l3_source);
    out_close(o);

    sdpa_tunable t[MAX_TUNABLES];
    size_t n = sdpa_planner_tunables(0, t, MAX_TUNABLES);
    out_open(o, "planner", false);
    for (size_t i = 0; i < n && i < MAX_TUNABLES; i++) out_tunable(o, &t[i]);
    /* the key block it derives from L2, for common head dims */
    out_open(o, "block_keys", false);
    static const size_t dims[] = {64, 128, 256};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        const size_t m = sdpa_planner_tunables(dims[d], t, MAX_TUNABLES);
        for (size_t i = 0; i < m && i < MAX_TUNABLES; i++)
            if (strcmp(t[i].name, "block") == 0) {
                char key[32];
                snprintf(key, sizeof key, "head_dim_%zu", dims[d]);
                out_int(o, key, (long long)t[i].value);
            }
    }
    out_close(o);
    out_close(o);
}

static void report_impls(out *o)
{
    const sdpa_impl *active = sdpa_active();

    out_open(o, "implementations", true);
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        const bool ok = sdpa_impl_supported(impl);
        out_open(o, NULL, false);
        out_str(o, "name", sdpa_impl_name(impl));
        /* JSON: the feature keys of the features section, a list; text: the same,
           space-separated */
        if (o->json) {
            out_key(o, "requires");
            putchar('[');
            const char *k;
            for (size_t r = 0; (k = sdpa_impl_requires_key(impl, r)) != NULL; r++) {
                if (r) putchar(',');
                json_string(k);
            }
            putchar(']');
        } else {
            char buf[160];
            out_str(o, "requires",
                    sdpa_impl_requires_key(impl, 0) ? join_keys(impl, buf, sizeof buf) : "nothing");
        }
        out_str(o, "requires_text", sdpa_impl_requires(impl));
        out_flag(o, "supported", ok);
        out_flag(o, "active", impl == active);
        if (!ok) {
            char why[256];
            snprintf(why, sizeof why, "needs %s: not supported by this CPU/OS",
                     sdpa_impl_requires(impl));
            out_str(o, "why_not", why);
        }
        out_str(o, "peak_class", sdpa_impl_peak_class(impl));
        sdpa_tunable t[MAX_TUNABLES];
        const size_t n = sdpa_impl_tunables(impl, t, MAX_TUNABLES);
        out_tunables(o, "tunables", t, n < MAX_TUNABLES ? n : MAX_TUNABLES);
        out_close(o);
    }
    out_close(o);

    const char *env = getenv("SDPA_ISA");
    out_open(o, "active", false);
    out_str(o, "name", sdpa_impl_name(active));
    out_str(o, "selection", sdpa_selection_str(sdpa_selection_reason()));
    out_str(o, "SDPA_ISA", env);
    out_close(o);
}

/* A size as "48K", "1M" or "1.5M" (the largest unit that leaves at most one decimal). */
static const char *short_size(size_t b, char *buf, size_t len)
{
    if (b >= (1u << 20))
        snprintf(buf, len, b % (1u << 20) ? "%.1fM" : "%.0fM", (double)b / (1u << 20));
    else
        snprintf(buf, len, "%zuK", b >> 10);
    return buf;
}

/* One line of the essentials, as an engine prints its system information at start-up. */
static void report_short(void)
{
    char brand[64], feat[160], thp[32];
    const sdpa_impl *a = sdpa_active();
    sdpa_cache_info ci;
    sdpa_cache_info_get(&ci);
    const char *arch =
#if defined(__x86_64__)
        "x86_64";
#elif defined(__aarch64__)
        "aarch64";
#else
        "cpu";
#endif
    cpu_brand(brand, sizeof brand);
    char l1[16], l2[16], l3[16];
    printf("libsdpa %s | %s%s%s | %s (%s)%s%s | L1d %s L2 %s L3 %s | %ld cores | THP %s\n",
           sdpa_version(), arch, brand[0] ? " " : "", brand, sdpa_impl_name(a),
           sdpa_selection_reason() == SDPA_SELECTED_AUTO ? "auto" : "forced",
           sdpa_impl_requires_key(a, 0) ? ": " : "", join_keys(a, feat, sizeof feat),
           short_size(ci.l1d_bytes, l1, sizeof l1), short_size(ci.l2_bytes, l2, sizeof l2),
           short_size(ci.l3_bytes, l3, sizeof l3),
           cores_usable() > 0 ? cores_usable() : cores_online(),
           sysfs_choice("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp)
               ? thp
               : "unknown");
}

int main(int argc, char **argv)
{
    out o;
    memset(&o, 0, sizeof o);
    bool brief = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            o.json = true;
        } else if (strcmp(argv[i], "--short") == 0) {
            brief = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: %s [--json | --short]\n"
                   "Reports libsdpa's version and build, the system, this CPU's features, the OS\n"
                   "vector state, caches, the values libsdpa plans with, and which libsdpa\n"
                   "implementations can run here with their parameters (SDPA_ISA=<name> forces\n"
                   "one). --json: the same as JSON; --short: one line.\n",
                   argv[0]);
            return 0;
        } else {
            fprintf(stderr, "%s: unknown argument '%s' (try --help)\n", argv[0], argv[i]);
            return 2;
        }
    }
    if (brief) {
        if (o.json) {
            fprintf(stderr, "%s: --short and --json exclude each other\n", argv[0]);
            return 2;
        }
        report_short();
        return 0;
    }
    if (!o.json) printf("libsdpa capability report\n");
    out_open(&o, NULL, false);
    report_library(&o);
    report_system(&o);
    report_cpu(&o);
    report_planning(&o);
    report_impls(&o);
    out_close(&o);
    return 0;
}
