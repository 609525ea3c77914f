/* test_tuning.c -- the values in force: cache sizes and their sources, planner and implementation
   tunables, peak classes */
#include "testlib.h"

#include <sys/stat.h>

/* white-box: the cache sources and the tuning table, tested directly */
#include "../dispatch/internal.h"

static const char *const sources[] = {"cpu_features", "sysconf", "sysfs", "default"};

static int index_of(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, list[i]) == 0) return (int)i;
    return -1;
}

/* Names non-empty and unique, values > 0, abouts non-empty, in out[0..n). */
static void check_list(const char *what, const sdpa_tunable *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        CHECK(t[i].name && t[i].name[0], "%s: entry %zu has no name", what, i);
        if (!t[i].name) continue;
        CHECK(t[i].about && t[i].about[0], "%s: %s has no description", what, t[i].name);
        CHECK(t[i].value > 0, "%s: %s is listed with value 0", what, t[i].name);
        for (size_t j = 0; j < i; j++)
            CHECK(!t[j].name || strcmp(t[i].name, t[j].name) != 0, "%s: %s listed twice (%zu, %zu)",
                  what, t[i].name, j, i);
    }
}

static const sdpa_tunable *find(const sdpa_tunable *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].name && strcmp(t[i].name, name) == 0) return &t[i];
    return NULL;
}

/* a string for printing, "(NULL)" for NULL */
static const char *str(const char *s) { return s ? s : "(NULL)"; }

static const sdpa_tunable untouched = {"untouched", 12345, "sentinel"};

static bool is_untouched(const sdpa_tunable *t)
{
    return t->name == untouched.name && t->value == untouched.value && t->about == untouched.about;
}

/* ---- cache sizes -------------------------------------------------------------------------- */

static void test_parse_size(void)
{
    tl_start("sysfs cache size strings", "all");
    static const struct {
        const char *s;
        size_t want;
    } cases[] = {
        {"48K", 48u << 10},
        {"1024K", 1u << 20},
        {"1M", 1u << 20},
        {"32M", 32u << 20},
        {"32768K\n", 32u << 20},
        {"512", 512},
        {"2G", (size_t)2 << 30},
        {"0K", 0},
        {"", 0},
        {"K", 0},
        {"garbage", 0},
        {"48KB", 0},
        {"4 8K", 0},
        {" 48K", 0},
        {"-4K", 0},
        {"48k", 0},
        {"48K\nx", 0},
        {"99999999999999999999999K", 0},
        {"18446744073709551615K", 0},
        {"17179869184G", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const size_t got = sdpa_cache_parse_size(cases[i].s);
        CHECK(got == cases[i].want, "\"%s\" parsed as %zu, want %zu", cases[i].s, got,
              cases[i].want);
    }
    CHECK(sdpa_cache_parse_size(NULL) == 0, "NULL is not 0");
    tl_end();
}

/* A fake sysfs cache directory: index<i>/{level,type,size} for each row (NULL size: no file). */
typedef struct fake_index {
    const char *level, *type, *size;
} fake_index;

static bool write_file(const char *dir, int index, const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/index%d/%s", dir, index, name);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(f, "%s\n", text);
    return fclose(f) == 0;
}

static bool make_tree(char *dir, size_t len, const fake_index *rows, int n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, len, "%s/sdpa-cache-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return false;
    for (int i = 0; i < n; i++) {
        char sub[600];
        snprintf(sub, sizeof sub, "%s/index%d", dir, i);
        if (mkdir(sub, 0700) != 0) return false;
        if (rows[i].level && !write_file(dir, i, "level", rows[i].level)) return false;
        if (rows[i].type && !write_file(dir, i, "type", rows[i].type)) return false;
        if (rows[i].size && !write_file(dir, i, "size", rows[i].size)) return false;
    }
    return true;
}

static void remove_tree(const char *dir, int n)
{
    static const char *const names[] = {"level", "type", "size"};
    char path[600];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 3; k++) {
            snprintf(path, sizeof path, "%s/index%d/%s", dir, i, names[k]);
            remove(path);
        }
        snprintf(path, sizeof path, "%s/index%d", dir, i);
        remove(path);
    }
    remove(dir);
}

static void check_tree(const char *what, const fake_index *rows, int n, bool want_found,
                       const size_t want[SDPA_CACHE_LEVELS])
{
    char dir[512];
    if (!CHECK(make_tree(dir, sizeof dir, rows, n), "%s: cannot build the fake tree", what)) return;
    size_t got[SDPA_CACHE_LEVELS] = {1, 1, 1};
    const bool found = sdpa_cache_from_sysfs(dir, got);
    CHECK(found == want_found, "%s: found %d, want %d", what, found, want_found);
    for (int l = 0; l < SDPA_CACHE_LEVELS; l++)
        CHECK(got[l] == want[l], "%s: level %d is %zu bytes, want %zu", what, l, got[l], want[l]);
    remove_tree(dir, n);
}

static void test_sysfs(void)
{
    tl_start("sysfs cache directory", "all");
    /* instruction cache first (skipped), sizes in K and M, a level 4 ignored */
    const fake_index full[] = {{"1", "Instruction", "64K"},
                               {"1", "Data", "48K"},
                               {"2", "Unified", "2048K"},
                               {"3", "Unified", "32M"},
                               {"4", "Unified", "128M"}};
    const size_t want_full[SDPA_CACHE_LEVELS] = {48u << 10, 2u << 20, 32u << 20};
    check_tree("full", full, 5, true, want_full);
    /* a garbage size, a missing type, no L3: those levels stay unknown */
    const fake_index partial[] = {{"1", "Data", "lots"}, {"2", NULL, "1M"}, {"2", "Data", "512K"}};
    const size_t want_partial[SDPA_CACHE_LEVELS] = {0, 512u << 10, 0};
    check_tree("partial", partial, 3, true, want_partial);
    /* the first entry of a level wins */
    const fake_index twice[] = {{"2", "Unified", "1M"}, {"2", "Unified", "4M"}};
    const size_t want_twice[SDPA_CACHE_LEVELS] = {0, 1u << 20, 0};
    check_tree("twice", twice, 2, true, want_twice);
    const size_t zeros[SDPA_CACHE_LEVELS] = {0, 0, 0};
    check_tree("empty", NULL, 0, false, zeros);
    size_t got[SDPA_CACHE_LEVELS] = {1, 1, 1};
    CHECK(!sdpa_cache_from_sysfs("no/such/directory", got) && got[0] == 0 && got[1] == 0 &&
              got[2] == 0,
          "a missing directory: found, or sizes not zero");
    CHECK(!sdpa_cache_from_sysfs(NULL, got), "a NULL directory was found");
    tl_end();
}

static void test_fallback_order(void)
{
    tl_start("cache sources, per level, in order", "all");
    sdpa_caches c;
    memset(&c, 0, sizeof c);
    const size_t cpuf[SDPA_CACHE_LEVELS] = {0, 0, 0};
    const size_t sysc[SDPA_CACHE_LEVELS] = {32u << 10, 0, 0};
    const size_t sysfs[SDPA_CACHE_LEVELS] = {48u << 10, 2u << 20, 0};
    const size_t dflt[SDPA_CACHE_LEVELS] = {SDPA_CACHE_DEFAULT_L1D, SDPA_CACHE_DEFAULT_L2,
                                            SDPA_CACHE_DEFAULT_L3};
    sdpa_caches_fill(&c, cpuf, SDPA_CACHE_SRC_CPUF);
    CHECK(c.bytes[0] == 0 && c.bytes[1] == 0 && c.bytes[2] == 0 && !c.source[0],
          "zeros from a source filled a level");
    sdpa_caches_fill(&c, sysc, SDPA_CACHE_SRC_SYSCONF);
    sdpa_caches_fill(&c, sysfs, SDPA_CACHE_SRC_SYSFS);
    sdpa_caches_fill(&c, dflt, SDPA_CACHE_SRC_DEFAULT);
    CHECK(c.bytes[0] == (32u << 10) && c.source[0] && strcmp(c.source[0], "sysconf") == 0,
          "L1d: %zu from %s, want 32768 from sysconf", c.bytes[0], str(c.source[0]));
    CHECK(c.bytes[1] == (2u << 20) && c.source[1] && strcmp(c.source[1], "sysfs") == 0,
          "L2: %zu from %s, want 2 MiB from sysfs", c.bytes[1], str(c.source[1]));
    CHECK(c.bytes[2] == SDPA_CACHE_DEFAULT_L3 && c.source[2] && strcmp(c.source[2], "default") == 0,
          "L3: %zu from %s, want the default", c.bytes[2], str(c.source[2]));
    tl_end();
}

/* The sizes in force: each level's source is one of the four, its size > 0 and what that
   source says now, and every source before it knows nothing of that level. */
static void test_in_force(void)
{
    tl_start("cache sizes in force", "all");
    sdpa_cache_info ci;
    memset(&ci, 0, sizeof ci);
    sdpa_cache_info_get(&ci);
    sdpa_cache_info_get(NULL); /* does nothing */
    const size_t bytes[SDPA_CACHE_LEVELS] = {ci.l1d_bytes, ci.l2_bytes, ci.l3_bytes};
    const char *const src[SDPA_CACHE_LEVELS] = {ci.l1d_source, ci.l2_source, ci.l3_source};
    static const char *const level[SDPA_CACHE_LEVELS] = {"l1d", "l2", "l3"};
    size_t now[4][SDPA_CACHE_LEVELS];
    sdpa_cache_from_cpu_features(now[0]);
    sdpa_cache_from_sysconf(now[1]);
    sdpa_cache_from_sysfs(SDPA_CACHE_SYSFS_DIR, now[2]);
    now[3][0] = SDPA_CACHE_DEFAULT_L1D, now[3][1] = SDPA_CACHE_DEFAULT_L2;
    now[3][2] = SDPA_CACHE_DEFAULT_L3;
    for (int l = 0; l < SDPA_CACHE_LEVELS; l++) {
        const int s = index_of(src[l], sources, 4);
        printf("# %s: %zu bytes from %s\n", level[l], bytes[l], str(src[l]));
        if (!CHECK(s >= 0, "%s: source \"%s\" is none of the four", level[l], str(src[l])))
            continue;
        CHECK(bytes[l] > 0, "%s: 0 bytes from %s", level[l], src[l]);
        CHECK(bytes[l] == now[s][l], "%s: %zu bytes from %s, which says %zu", level[l], bytes[l],
              src[l], now[s][l]);
        for (int e = 0; e < s; e++)
            CHECK(now[e][l] == 0, "%s: taken from %s although %s knows it (%zu bytes)", level[l],
                  src[l], sources[e], now[e][l]);
    }
    CHECK(ci.l2_bytes == sdpa_cached_l2_bytes(),
          "the planner's L2 (%zu) is not the one reported (%zu)", sdpa_cached_l2_bytes(),
          ci.l2_bytes);
    tl_end();
}

/* ---- tunables ------------------------------------------------------------------------------ */

/* The dispatch table names every field of sdpa_tuning (all size_t), at the right offset. */
static void test_tuning_table(void)
{
    tl_start("sdpa_tuning table", "all");
    enum { SLOTS = sizeof(sdpa_tuning) / sizeof(size_t), CAP = SLOTS + 4 };
    CHECK(sdpa_tuning_fields() == SLOTS,
          "sdpa_tuning has %d size_t fields, the table in dispatch/tuning.c lists %zu", (int)SLOTS,
          sdpa_tuning_fields());
    size_t slot[SLOTS];
    for (size_t i = 0; i < SLOTS; i++) slot[i] = 100 + i;
    sdpa_tuning t;
    memcpy(&t, slot, sizeof t);
    sdpa_tunable out[CAP];
    for (size_t i = 0; i < CAP; i++) out[i] = untouched;
    const size_t n = sdpa_tuning_list(&t, out, CAP);
    CHECK(n == SLOTS, "all fields non-zero: %zu listed, want %d", n, (int)SLOTS);
    for (size_t i = 0; i < n && i < SLOTS; i++)
        CHECK(out[i].value == 100 + i, "%s (entry %zu) reads %zu, want field %zu's value %zu",
              str(out[i].name), i, out[i].value, i, 100 + i);
    check_list("all fields", out, n < CAP ? n : CAP);
    if (n < CAP) CHECK(is_untouched(&out[n]), "entry %zu written past the count", n);

    /* zero fields are left out; the rest keep their order */
    memset(&t, 0, sizeof t);
    CHECK(sdpa_tuning_list(&t, out, CAP) == 0, "an all-zero sdpa_tuning lists something");
    if (SLOTS >= 3) {
        slot[0] = 0, slot[2] = 0;
        memcpy(&t, slot, sizeof t);
        CHECK(sdpa_tuning_list(&t, out, CAP) == SLOTS - 2 && out[0].value == 101,
              "two zero fields: not left out (first value %zu)", out[0].value);
    }
    CHECK(sdpa_tuning_list(NULL, out, CAP) == 0, "NULL tuning lists something");
    tl_end();
}

/* count, cap and NULL handling of one list function f(arg, out, cap) */
typedef size_t (*list_fn)(const void *arg, sdpa_tunable *out, size_t cap);

static void check_caps(const char *what, list_fn f, const void *arg)
{
    const size_t n = f(arg, NULL, 0);
    CHECK(f(arg, NULL, 7) == n, "%s: NULL out with cap 7 does not return the count %zu", what, n);
    enum { CAP = 64 };
    sdpa_tunable out[CAP + 1];
    for (size_t i = 0; i <= CAP; i++) out[i] = untouched;
    CHECK(f(arg, out, 0) == n && is_untouched(&out[0]), "%s: cap 0 wrote or miscounted", what);
    if (!CHECK(n < CAP, "%s: %zu entries, more than the test's %d", what, n, CAP)) return;
    CHECK(f(arg, out, CAP) == n, "%s: count changed with cap", what);
    CHECK(is_untouched(&out[n]), "%s: entry %zu written past the count", what, n);
    check_list(what, out, n);
    if (n > 1) {
        sdpa_tunable part[CAP + 1];
        for (size_t i = 0; i <= CAP; i++) part[i] = untouched;
        CHECK(f(arg, part, n - 1) == n, "%s: cap n-1 does not return n", what);
        CHECK(is_untouched(&part[n - 1]), "%s: cap n-1 wrote entry n-1", what);
        for (size_t i = 0; i + 1 < n; i++)
            CHECK(part[i].name == out[i].name && part[i].value == out[i].value,
                  "%s: entry %zu differs under a smaller cap", what, i);
    }
}

static size_t impl_list(const void *arg, sdpa_tunable *out, size_t cap)
{
    return sdpa_impl_tunables(arg, out, cap);
}

static size_t planner_list(const void *arg, sdpa_tunable *out, size_t cap)
{
    return sdpa_planner_tunables(*(const size_t *)arg, out, cap);
}

/* Every registered implementation, supported here or not (nothing runs): its tunables and its
   peak class. */
static void test_impls(void)
{
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        const char *name = sdpa_impl_name(impl);
        tl_start("tunables and peak class", name);
        check_caps(name, impl_list, impl);
        sdpa_tunable t[64];
        const size_t n = sdpa_impl_tunables(impl, t, 64);
        CHECK(n <= sdpa_tuning_fields(), "%s: %zu tunables, more than sdpa_tuning has", name, n);
        CHECK(n == sdpa_tuning_list(&impl->k->tuning, NULL, 0),
              "%s: %zu tunables, its kernel table has %zu non-zero", name, n,
              sdpa_tuning_list(&impl->k->tuning, NULL, 0));
        const char *pc = sdpa_impl_peak_class(impl);
        /* a peak class is the name of the implementation whose peak kernel it is */
        CHECK(pc && sdpa_impl_find(pc), "%s: peak class \"%s\" names no implementation", name,
              str(pc));
        bool is_class = false;
        for (size_t j = 0; j < sdpa_impl_count(); j++)
            is_class |= strcmp(sdpa_impl_peak_class(sdpa_impl_at(j)), name) == 0;
        if (is_class)
            CHECK(pc && strcmp(pc, name) == 0,
                  "%s has a peak kernel of its own but is judged against %s", name, str(pc));
        printf("# %s: peak class %s, %zu tunables\n", name, str(pc), n);
        for (size_t k = 0; k < n && k < 64; k++) printf("#   %s = %zu\n", t[k].name, t[k].value);
        tl_end();
    }
    tl_start("tunables and peak class", "NULL");
    sdpa_tunable t[2] = {untouched, untouched};
    CHECK(sdpa_impl_tunables(NULL, t, 2) == 0 && is_untouched(&t[0]),
          "a NULL impl lists something");
    CHECK(sdpa_impl_peak_class(NULL) && strcmp(sdpa_impl_peak_class(NULL), "") == 0,
          "sdpa_impl_peak_class(NULL) is not \"\"");
    tl_end();
}

static void test_planner(void)
{
    tl_start("planner tunables", "all");
    static const size_t dims[] = {0, 1, 64, 128, 256, 576};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "planner, head_dim %zu", dims[i]);
        check_caps(what, planner_list, &dims[i]);
    }
    sdpa_tunable t[64];
    const size_t n0 = sdpa_planner_tunables(0, t, 64);
    CHECK(find(t, n0, "block") == NULL, "head_dim 0 lists a block");
    static const struct {
        const char *name;
        size_t value;
    } want[] = {{"rows_target", ROWS_TARGET},
                {"split_min_kv", SPLIT_MIN_KV},
                {"split_chunk_min", SPLIT_CHUNK_MIN},
                {"split_chunk_max", SPLIT_CHUNK_MAX},
                {"split_items", SPLIT_ITEMS},
                {"block_min", BLOCK_MIN},
                {"block_max", BLOCK_MAX},
                {"stream_bytes", STREAM_BYTES},
                {"page_pf_keys", PAGE_PF_KEYS},
                {"stage_max_page", STAGE_MAX_PAGE},
                {"stage_keys", STAGE_KEYS},
                {"stage_pf_keys", STAGE_PF_KEYS}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const sdpa_tunable *e = find(t, n0, want[i].name);
        CHECK(e && e->value == want[i].value, "%s: %zu, the planner uses %zu", want[i].name,
              e ? e->value : 0, want[i].value);
    }
    CHECK(n0 == sizeof want / sizeof want[0], "%zu parameters listed, want %zu", n0,
          sizeof want / sizeof want[0]);

    /* the block: from the L2 in force, within its bounds, smaller for wider heads */
    sdpa_cache_info ci;
    sdpa_cache_info_get(&ci);
    size_t prev = SIZE_MAX;
    static const size_t bdims[] = {1, 32, 64, 96, 128, 192, 256, 576, 4096, SIZE_MAX / 2, SIZE_MAX};
    for (size_t i = 0; i < sizeof bdims / sizeof bdims[0]; i++) {
        const size_t d = bdims[i];
        const size_t n = sdpa_planner_tunables(d, t, 64);
        const sdpa_tunable *b = find(t, n < 64 ? n : 64, "block");
        if (!CHECK(n == n0 + 1 && b && b == &t[n - 1], "head_dim %zu: no block, or not last", d))
            continue;
        CHECK(b->value >= BLOCK_MIN && b->value <= BLOCK_MAX && b->value % 16 == 0,
              "head_dim %zu: block %zu outside [%d, %d] or not a multiple of 16", d, b->value,
              BLOCK_MIN, BLOCK_MAX);
        CHECK(b->value <= prev, "head_dim %zu: block %zu larger than for a narrower head (%zu)", d,
              b->value, prev);
        CHECK(b->value == sdpa_plan_block(d, d), "head_dim %zu: block %zu, the planner uses %zu", d,
              b->value, sdpa_plan_block(d, d));
        if (d <= 4096) {
            size_t e = ci.l2_bytes / 2 / (sizeof(float) * (2 * d + ROWS_TARGET)) / 16 * 16;
            e = e < BLOCK_MIN ? BLOCK_MIN : e > BLOCK_MAX ? BLOCK_MAX : e;
            CHECK(b->value == e, "head_dim %zu: block %zu, want %zu from an L2 of %zu bytes", d,
                  b->value, e, ci.l2_bytes);
        }
        prev = b->value;
    }
    tl_end();
}

int main(void)
{
    tl_header("introspection: cache sizes, tunables, peak classes");
    test_parse_size();
    test_sysfs();
    test_fallback_order();
    test_in_force();
    test_tuning_table();
    test_impls();
    test_planner();
    return tl_finish();
}
