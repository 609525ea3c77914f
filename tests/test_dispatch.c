/* test_dispatch.c -- the registry, sdpa_select and the active implementation under concurrent use
 */
#include "testlib.h"

#include <pthread.h>
#include <stdatomic.h>

static const sdpa_impl *first_supported(void)
{
    for (size_t i = 0; i < sdpa_impl_count(); i++)
        if (sdpa_impl_supported(sdpa_impl_at(i))) return sdpa_impl_at(i);
    return NULL;
}

static bool in_registry(const sdpa_impl *impl)
{
    for (size_t i = 0; i < sdpa_impl_count(); i++)
        if (sdpa_impl_at(i) == impl) return true;
    return false;
}

static void test_registry(void)
{
    tl_start("registry", "all");
    const size_t n = sdpa_impl_count();
    CHECK(n >= 1, "the registry is empty");
    CHECK(sdpa_impl_at(n) == NULL, "sdpa_impl_at(count) is not NULL");
    bool have_scalar = false;
    for (size_t i = 0; i < n; i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        const char *name = sdpa_impl_name(impl);
        CHECK(impl != NULL && name && name[0], "entry %zu has no name", i);
        CHECK(sdpa_impl_requires(impl) != NULL, "%s: sdpa_impl_requires is NULL", name);
        CHECK(sdpa_impl_find(name) == impl, "%s: sdpa_impl_find does not return entry %zu", name,
              i);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(name, sdpa_impl_name(sdpa_impl_at(j))) != 0,
                  "%s: listed twice (%zu and %zu)", name, j, i);
        double e = sdpa_impl_exp_max_ulp(impl);
        CHECK(e >= 0.5 && e < 1e9, "%s: stated exp bound %g ULP is not a plausible bound", name, e);
        if (strcmp(name, "scalar") == 0) {
            have_scalar = true;
            CHECK(sdpa_impl_supported(impl), "scalar is not supported: it must run anywhere");
            CHECK(i == n - 1, "scalar is entry %zu, not the last (the registry lists best first)",
                  i);
        }
        /* the requirement is feature keys of the feature table, and support is exactly their
           presence */
        bool all_present = true;
        const char *key;
        for (size_t r = 0; (key = sdpa_impl_requires_key(impl, r)) != NULL; r++) {
            size_t f = 0;
            while (f < sdpa_feature_count() && strcmp(sdpa_feature_key(f), key) != 0) f++;
            CHECK(f < sdpa_feature_count(), "%s: requires \"%s\", not a feature key", name, key);
            all_present &= f < sdpa_feature_count() && sdpa_feature_present(f);
        }
        CHECK(sdpa_impl_supported(impl) == all_present,
              "%s: supported is %d, but its required features present is %d", name,
              sdpa_impl_supported(impl), all_present);
        CHECK(sdpa_impl_requires(impl)[0], "%s: empty requirement text", name);
        printf("# %zu: %-10s requires %-30s %s\n", i, name, sdpa_impl_requires(impl),
               sdpa_impl_supported(impl) ? "supported" : "NOT supported here");
    }
    CHECK(have_scalar, "no \"scalar\" implementation in the registry");
    CHECK(sdpa_impl_find("no-such-isa") == NULL && sdpa_impl_find(NULL) == NULL &&
              sdpa_impl_find("") == NULL,
          "sdpa_impl_find of an unknown name is not NULL");
    CHECK(strcmp(sdpa_impl_name(NULL), "") == 0, "sdpa_impl_name(NULL) is not \"\"");
    CHECK(!sdpa_impl_supported(NULL), "sdpa_impl_supported(NULL) is true");
    CHECK(sdpa_impl_requires_key(NULL, 0) == NULL, "sdpa_impl_requires_key(NULL, 0) is not NULL");
    CHECK(sdpa_feature_key(sdpa_feature_count()) == NULL &&
              !sdpa_feature_present(sdpa_feature_count()),
          "a feature past the table's end");
    const sdpa_impl *a = sdpa_active();
    CHECK(a && in_registry(a) && sdpa_impl_supported(a),
          "sdpa_active() is not a supported registry entry");
    printf("# active: %s (%s)\n", sdpa_impl_name(a), sdpa_selection_str(sdpa_selection_reason()));
    tl_end();
}

static void test_select(void)
{
    tl_start("sdpa_select", "all");
    const sdpa_impl *before = sdpa_active();
    const sdpa_selection why = sdpa_selection_reason();
    sdpa_status st = sdpa_select("no-such-isa");
    CHECK(st == SDPA_ERR_UNKNOWN_IMPL, "select(unknown): %s, want SDPA_ERR_UNKNOWN_IMPL",
          sdpa_status_str(st));
    CHECK(sdpa_active() == before && sdpa_selection_reason() == why,
          "select(unknown) changed the active implementation to %s", sdpa_impl_name(sdpa_active()));
    st = sdpa_select("");
    CHECK(st == SDPA_ERR_UNKNOWN_IMPL && sdpa_active() == before, "select(\"\"): %s",
          sdpa_status_str(st));

    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        const char *name = sdpa_impl_name(impl);
        const sdpa_impl *was = sdpa_active();
        st = sdpa_select(name);
        if (sdpa_impl_supported(impl)) {
            CHECK(st == SDPA_OK, "select(%s): %s, want OK", name, sdpa_status_str(st));
            CHECK(sdpa_active() == impl, "select(%s): active is %s", name,
                  sdpa_impl_name(sdpa_active()));
            CHECK(sdpa_selection_reason() == SDPA_SELECTED_FORCED,
                  "select(%s): reason %s, want forced", name,
                  sdpa_selection_str(sdpa_selection_reason()));
        } else {
            CHECK(st == SDPA_ERR_UNSUPPORTED,
                  "select(unsupported %s): %s, want SDPA_ERR_UNSUPPORTED", name,
                  sdpa_status_str(st));
            CHECK(sdpa_active() == was, "select(unsupported %s) changed the active implementation",
                  name);
            printf("# select(%s): refused, unsupported here\n", name);
        }
    }
    st = sdpa_select(NULL);
    CHECK(st == SDPA_OK && sdpa_active() == first_supported(),
          "select(NULL): %s, active %s, want the first supported %s", sdpa_status_str(st),
          sdpa_impl_name(sdpa_active()), sdpa_impl_name(first_supported()));
    CHECK(sdpa_selection_reason() == SDPA_SELECTED_AUTO, "select(NULL): reason %s, want automatic",
          sdpa_selection_str(sdpa_selection_reason()));
    sdpa_select(sdpa_impl_name(sdpa_impl_at(sdpa_impl_count() - 1)));
    st = sdpa_select("auto");
    CHECK(st == SDPA_OK && sdpa_active() == first_supported() &&
              sdpa_selection_reason() == SDPA_SELECTED_AUTO,
          "select(\"auto\"): %s, active %s", sdpa_status_str(st), sdpa_impl_name(sdpa_active()));
    tl_end();
}

/* The plain primitives run on the active implementation: after select(x), sdpa_score_f32 gives
   exactly what sdpa_impl_score_f32(x) gives. */
static void test_plain_follow_active(void)
{
    tl_start("plain primitives follow the selection", "all");
    float q[37], k[5 * 37], s1[5], s2[5], p1[29], p2[29], o1[19], o2[19], v[29 * 19];
    tl_rng r = {9};
    tl_fill(&r, q, 37, -1, 1);
    tl_fill(&r, k, 5 * 37, -1, 1);
    tl_fill(&r, v, 29 * 19, -1, 1);
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (!sdpa_impl_supported(impl)) continue;
        sdpa_select(sdpa_impl_name(impl));
        sdpa_score_f32(q, k, 37, 5, 37, 0.25f, s1);
        sdpa_impl_score_f32(impl, q, k, 37, 5, 37, 0.25f, s2);
        CHECK(memcmp(s1, s2, sizeof s1) == 0,
              "%s: sdpa_score_f32 differs from the implementation's", sdpa_impl_name(impl));
        tl_fill(&r, p1, 29, -9, 3);
        memcpy(p2, p1, sizeof p1);
        float m1 = -INFINITY, l1 = 0, m2 = -INFINITY, l2 = 0;
        float a1 = sdpa_softmax_online_f32(p1, 29, &m1, &l1),
              a2 = sdpa_impl_softmax_online_f32(impl, p2, 29, &m2, &l2);
        CHECK(memcmp(p1, p2, sizeof p1) == 0 && a1 == a2 && m1 == m2 && l1 == l2,
              "%s: sdpa_softmax_online_f32 differs from the implementation's",
              sdpa_impl_name(impl));
        memset(o1, 0, sizeof o1);
        memset(o2, 0, sizeof o2);
        sdpa_accumulate_f32(o1, 0.5f, p1, v, 19, 29, 19);
        sdpa_impl_accumulate_f32(impl, o2, 0.5f, p1, v, 19, 29, 19);
        CHECK(memcmp(o1, o2, sizeof o1) == 0,
              "%s: sdpa_accumulate_f32 differs from the implementation's", sdpa_impl_name(impl));
    }
    sdpa_select(NULL);
    tl_end();
}

/* Readers and writers at once: sdpa_select from some threads while others read sdpa_active();
   every value read must be a supported registry entry (no torn or transient state). */
enum { READERS = 6, WRITERS = 2, ROUNDS = 20000 };
static atomic_int bad_reads, failed_selects;
static pthread_barrier_t go;

static void *reader(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&go);
    for (int i = 0; i < ROUNDS; i++) {
        const sdpa_impl *a = sdpa_active();
        if (!a || !in_registry(a) || !sdpa_impl_supported(a)) atomic_fetch_add(&bad_reads, 1);
    }
    return NULL;
}

static void *writer(void *arg)
{
    size_t w = (size_t)(uintptr_t)arg;
    pthread_barrier_wait(&go);
    for (int i = 0; i < ROUNDS / 10; i++) {
        const sdpa_impl *impl = sdpa_impl_at((w + (size_t)i) % sdpa_impl_count());
        sdpa_status st = sdpa_select(i % 7 == 0 ? NULL : sdpa_impl_name(impl));
        if (st != SDPA_OK && (i % 7 == 0 || sdpa_impl_supported(impl)))
            atomic_fetch_add(&failed_selects, 1);
    }
    return NULL;
}

static void test_concurrent_select(void)
{
    tl_start("sdpa_select while other threads read sdpa_active", "all");
    pthread_t th[READERS + WRITERS];
    pthread_barrier_init(&go, NULL, READERS + WRITERS);
    for (size_t i = 0; i < READERS; i++) pthread_create(&th[i], NULL, reader, NULL);
    for (size_t i = 0; i < WRITERS; i++)
        pthread_create(&th[READERS + i], NULL, writer, (void *)(uintptr_t)i);
    for (size_t i = 0; i < READERS + WRITERS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    CHECK(atomic_load(&bad_reads) == 0,
          "%d reads of sdpa_active() saw something not a supported entry", atomic_load(&bad_reads));
    CHECK(atomic_load(&failed_selects) == 0, "%d selects of a supported implementation failed",
          atomic_load(&failed_selects));
    sdpa_select(NULL);
    CHECK(sdpa_active() == first_supported(), "after select(NULL): %s",
          sdpa_impl_name(sdpa_active()));
    tl_end();
}

int main(void)
{
    tl_header("registry and selection");
    test_registry();
    test_select();
    test_plain_follow_active();
    test_concurrent_select();
    return tl_finish();
}
