/* test_concurrency.c -- many threads at once: first calls, sdpa_select mid-call, pooled calls */
#include "attn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "pool.h"

/* Every result computed on a worker thread is compared, after the threads are joined, with a
   serial run of the same call: bitwise, since the library promises the same bits for the same
   inputs. Worker threads never use CHECK (the TAP state is the main thread's); they count what
   they saw and keep the first problem's description. Built and run under ThreadSanitizer by
   tools/test.sh, where any data race fails the run. */

enum { MAX_IMPLS = 16 };

typedef struct shape {
    const char *name;
    size_t batch, qh, kvh, ql, kvl, d;
    bool causal;
    sdpa_dtype kt; /* K and V */
} shape;

/* Each kind of call the driver plans differently: query blocks of a prefill, GQA with more keys
   than queries, and a decode long enough to be split into KV chunks and merged (>= 2048 keys). */
static const shape shapes[] = {
    {"prefill f32 causal", 1, 4, 2, 40, 72, 32, true, SDPA_F32},
    {"prefill bf16 GQA, q_len < kv_len", 2, 4, 1, 24, 130, 64, true, SDPA_BF16},
    {"decode f16, split into KV chunks", 1, 8, 2, 1, 2200, 32, false, SDPA_F16},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* One shape's inputs (shared read-only by every thread) and each supported implementation's
   serial result, by registry index (NULL: not supported here). */
typedef struct problem {
    const shape *s;
    tview q, k, v;
    size_t o_elems, rows;
    float *ref_o[MAX_IMPLS], *ref_lse[MAX_IMPLS];
} problem;

static problem problems[N_SHAPES];

/* Builds the inputs without calling the library, so that the first-use test comes first. */
static void make_problem(problem *pb, const shape *s, uint64_t seed)
{
    tl_rng r = {seed};
    memset(pb, 0, sizeof *pb);
    pb->s = s;
    tview_layout(&pb->q, s->batch, s->qh, s->ql, s->d, SDPA_F32, L_DENSE, 0);
    tview_layout(&pb->k, s->batch, s->kvh, s->kvl, s->d, s->kt, L_DENSE, 0);
    tview_layout(&pb->v, s->batch, s->kvh, s->kvl, s->d, s->kt, L_DENSE, 0);
    tview_alloc(&pb->q);
    tview_alloc(&pb->k);
    tview_alloc(&pb->v);
    tview_fill(&pb->q, &r, -1.0f, 1.0f);
    tview_fill(&pb->k, &r, -1.0f, 1.0f);
    tview_fill(&pb->v, &r, -1.0f, 1.0f);
    pb->rows = s->batch * s->qh * s->ql;
    pb->o_elems = pb->rows * s->d;
}

static void free_problem(problem *pb)
{
    tview_free(&pb->q);
    tview_free(&pb->k);
    tview_free(&pb->v);
    for (size_t i = 0; i < MAX_IMPLS; i++) free(pb->ref_o[i]), free(pb->ref_lse[i]);
}

static sdpa_params params_of(const problem *pb, float *lse, sdpa_parallel_for_fn hook, void *pool,
                             size_t n_threads)
{
    const shape *s = pb->s;
    sdpa_params p = {0};
    p.batch = s->batch, p.q_heads = s->qh, p.kv_heads = s->kvh, p.q_len = s->ql;
    p.kv_len = s->kvl, p.head_dim = s->d, p.causal = s->causal, p.lse = lse;
    p.parallel_for = hook, p.pool = pool, p.n_threads = n_threads;
    return p;
}

static sdpa_tensor out_tensor(const problem *pb, float *o)
{
    const shape *s = pb->s;
    sdpa_tensor t = {o, SDPA_F32, (ptrdiff_t)(s->qh * s->ql * s->d), (ptrdiff_t)(s->ql * s->d),
                     (ptrdiff_t)s->d};
    return t;
}

/* One call on impl (NULL: sdpa_forward, the active one) into o (and p->lse). */
static sdpa_status forward_into(const sdpa_impl *impl, const problem *pb, float *o,
                                const sdpa_params *p)
{
    const sdpa_tensor tq = tview_tensor(&pb->q), tk = tview_tensor(&pb->k),
                      tv = tview_tensor(&pb->v);
    const sdpa_tensor to = out_tensor(pb, o);
    return impl ? sdpa_impl_forward(impl, p, &tq, &tk, &tv, &to)
                : sdpa_forward(p, &tq, &tk, &tv, &to);
}

static sdpa_status forward_serial(const sdpa_impl *impl, const problem *pb, float *o, float *lse)
{
    const sdpa_params p = params_of(pb, lse, NULL, NULL, 0);
    return forward_into(impl, pb, o, &p);
}

static bool same_as_ref(const problem *pb, size_t impl_index, const float *o, const float *lse)
{
    return pb->ref_o[impl_index] &&
           memcmp(o, pb->ref_o[impl_index], pb->o_elems * sizeof *o) == 0 &&
           memcmp(lse, pb->ref_lse[impl_index], pb->rows * sizeof *lse) == 0;
}

/* The registry index of the first implementation whose serial result this is, or -1. */
static int matching_impl(const problem *pb, const float *o, const float *lse)
{
    for (size_t i = 0; i < sdpa_impl_count(); i++)
        if (same_as_ref(pb, i, o, lse)) return (int)i;
    return -1;
}

static int impl_index(const sdpa_impl *impl)
{
    for (size_t i = 0; i < sdpa_impl_count(); i++)
        if (sdpa_impl_at(i) == impl) return (int)i;
    return -1;
}

/* Serial references of every supported implementation, and whether they tell each other apart
   (a call that mixed two implementations can only be recognised when their bits differ). */
static void make_references(void)
{
    for (size_t si = 0; si < N_SHAPES; si++) {
        problem *pb = &problems[si];
        for (size_t i = 0; i < sdpa_impl_count(); i++) {
            const sdpa_impl *impl = sdpa_impl_at(i);
            if (!sdpa_impl_supported(impl)) continue;
            pb->ref_o[i] = tl_xmalloc(pb->o_elems * sizeof(float));
            pb->ref_lse[i] = tl_xmalloc(pb->rows * sizeof(float));
            tl_fill_sentinel(pb->ref_o[i], pb->o_elems);
            const sdpa_status st = forward_serial(impl, pb, pb->ref_o[i], pb->ref_lse[i]);
            if (st != SDPA_OK) {
                printf("Bail out! %s, %s: the serial reference failed: %s\n", pb->s->name,
                       sdpa_impl_name(impl), sdpa_status_str(st));
                exit(1);
            }
        }
        for (size_t i = 0; i < sdpa_impl_count(); i++)
            for (size_t j = i + 1; j < sdpa_impl_count(); j++)
                if (pb->ref_o[i] && pb->ref_o[j])
                    printf("# %s: %s and %s give %s bits\n", pb->s->name,
                           sdpa_impl_name(sdpa_impl_at(i)), sdpa_impl_name(sdpa_impl_at(j)),
                           memcmp(pb->ref_o[i], pb->ref_o[j], pb->o_elems * sizeof(float))
                               ? "different"
                               : "the same");
    }
}

/* Iteration counts, thinned under emulation (SDPA_TEST_SAMPLE) like the other heavy loops. */
static size_t iterations(size_t n)
{
    const size_t k = n / tl_sample();
    return k < N_SHAPES ? N_SHAPES : k;
}

/* A worker's first problem, kept for the report. */
typedef struct problem_note {
    char text[200];
    bool set;
} problem_note;

static void note(problem_note *n, const char *fmt, ...)
{
    if (n->set) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->text, sizeof n->text, fmt, ap);
    va_end(ap);
    n->set = true;
}

/* ------------------------------------------------------------------------------------------ */
/* 1. The first library calls of the process, from 8 threads released by one barrier, each     */
/*    starting with a different entry point. The library initialises in a constructor and      */
/*    again under pthread_once on every entry, so this races every entry point's first use.     */
/* ------------------------------------------------------------------------------------------ */
enum { FIRST_THREADS = 8, FIRST_OPS = 8 };

typedef struct first_seen {
    size_t id;
    const sdpa_impl *active, *active_after, *found;
    size_t count, n_planner, ws_bytes;
    unsigned supported_mask;
    sdpa_selection reason;
    sdpa_cache_info ci;
    sdpa_status fwd_st, ws_st, val_st;
    float score[8];
    float *o, *lse;
} first_seen;

static pthread_barrier_t first_go;

static void first_op(first_seen *f, size_t op)
{
    const problem *pb = &problems[0];
    switch (op) {
    case 0:
        f->active = sdpa_active();
        break;
    case 1:
        f->fwd_st = forward_serial(NULL, pb, f->o, f->lse);
        break;
    case 2:
        f->count = sdpa_impl_count();
        for (size_t i = 0; i < f->count && i < MAX_IMPLS; i++)
            if (sdpa_impl_supported(sdpa_impl_at(i))) f->supported_mask |= 1u << i;
        break;
    case 3:
        f->reason = sdpa_selection_reason();
        break;
    case 4:
        f->found = sdpa_impl_find("scalar");
        break;
    case 5: {
        const sdpa_params p = params_of(pb, NULL, NULL, NULL, 0);
        const sdpa_tensor tq = tview_tensor(&pb->q), tk = tview_tensor(&pb->k),
                          tv = tview_tensor(&pb->v);
        const sdpa_tensor to = out_tensor(pb, f->o);
        f->ws_st = sdpa_workspace_size(&p, &tq, &tk, &tv, &to, &f->ws_bytes);
        char msg[160];
        f->val_st = sdpa_validate(&p, &tq, &tk, &tv, &to, msg, sizeof msg);
        break;
    }
    case 6:
        sdpa_cache_info_get(&f->ci);
        f->n_planner = sdpa_planner_tunables(pb->s->d, NULL, 0);
        break;
    default: /* the plain primitive, on the active implementation: 8 keys of head 0 */
        sdpa_score_f32((const float *)pb->q.buf, (const float *)pb->k.buf, pb->s->d, 8, pb->s->d,
                       0.125f, f->score);
        break;
    }
}

static void *first_thread(void *arg)
{
    first_seen *f = arg;
    pthread_barrier_wait(&first_go);
    for (size_t j = 0; j < FIRST_OPS; j++) first_op(f, (f->id + j) % FIRST_OPS);
    f->active_after = sdpa_active();
    return NULL;
}

static first_seen first[FIRST_THREADS];

/* Runs before any other library call of the process; checked by check_first_use. */
static void run_first_use(void)
{
    const problem *pb = &problems[0];
    pthread_t th[FIRST_THREADS];
    pthread_barrier_init(&first_go, NULL, FIRST_THREADS);
    size_t started = 0;
    for (size_t t = 0; t < FIRST_THREADS; t++) {
        first[t].id = t;
        first[t].o = tl_xmalloc(pb->o_elems * sizeof(float));
        first[t].lse = tl_xmalloc(pb->rows * sizeof(float));
        tl_fill_sentinel(first[t].o, pb->o_elems);
    }
    for (; started < FIRST_THREADS; started++)
        if (pthread_create(&th[started], NULL, first_thread, &first[started]) != 0) break;
    if (started < FIRST_THREADS) {
        printf("Bail out! could not start %d threads\n", FIRST_THREADS);
        exit(1);
    }
    for (size_t t = 0; t < FIRST_THREADS; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&first_go);
}

static void check_first_use(void)
{
    const first_seen *f0 = &first[0];
    tl_start("first library calls from 8 threads at once", sdpa_impl_name(f0->active));
    const problem *pb = &problems[0];
    const sdpa_impl *active = sdpa_active();
    const int ai = impl_index(active);
    CHECK(f0->active == active && sdpa_impl_supported(active), "thread 0 saw %s active, now %s",
          sdpa_impl_name(f0->active), sdpa_impl_name(active));
    float score[8];
    sdpa_impl_score_f32(active, (const float *)pb->q.buf, (const float *)pb->k.buf, pb->s->d, 8,
                        pb->s->d, 0.125f, score);
    for (size_t t = 0; t < FIRST_THREADS; t++) {
        const first_seen *f = &first[t];
        CHECK(f->active == active && f->active_after == active,
              "thread %zu saw %s, then %s, not %s", t, sdpa_impl_name(f->active),
              sdpa_impl_name(f->active_after), sdpa_impl_name(active));
        CHECK(f->count == sdpa_impl_count(), "thread %zu: %zu implementations, not %zu", t,
              f->count, sdpa_impl_count());
        CHECK(f->supported_mask == f0->supported_mask,
              "thread %zu: supported set %#x, thread 0 %#x", t, f->supported_mask,
              f0->supported_mask);
        CHECK(f->reason == sdpa_selection_reason(), "thread %zu: reason %s", t,
              sdpa_selection_str(f->reason));
        CHECK(f->found && f->found == sdpa_impl_find("scalar") &&
                  strcmp(sdpa_impl_name(f->found), "scalar") == 0,
              "thread %zu: sdpa_impl_find(\"scalar\") gave %s", t, sdpa_impl_name(f->found));
        CHECK(f->ws_st == SDPA_OK && f->ws_bytes == f0->ws_bytes && f->ws_bytes > 0,
              "thread %zu: workspace size %s, %zu bytes (thread 0: %zu)", t,
              sdpa_status_str(f->ws_st), f->ws_bytes, f0->ws_bytes);
        CHECK(f->val_st == SDPA_OK, "thread %zu: sdpa_validate: %s", t, sdpa_status_str(f->val_st));
        CHECK(memcmp(&f->ci, &f0->ci, sizeof f->ci) == 0 && f->ci.l2_bytes > 0,
              "thread %zu: cache info differs from thread 0's", t);
        CHECK(f->n_planner == f0->n_planner && f->n_planner > 0, "thread %zu: %zu planner tunables",
              t, f->n_planner);
        CHECK(memcmp(f->score, score, sizeof score) == 0,
              "thread %zu: sdpa_score_f32 differs from %s's", t, sdpa_impl_name(active));
        CHECK(f->fwd_st == SDPA_OK, "thread %zu: sdpa_forward: %s", t, sdpa_status_str(f->fwd_st));
        if (f->fwd_st == SDPA_OK)
            CHECK(ai >= 0 && same_as_ref(pb, (size_t)ai, f->o, f->lse),
                  "thread %zu: sdpa_forward's result is not %s's serial one (matches %s)", t,
                  sdpa_impl_name(active),
                  matching_impl(pb, f->o, f->lse) >= 0
                      ? sdpa_impl_name(sdpa_impl_at((size_t)matching_impl(pb, f->o, f->lse)))
                      : "none");
    }
    for (size_t i = 0; i < sdpa_impl_count() && i < MAX_IMPLS; i++)
        CHECK(((f0->supported_mask >> i) & 1u) == sdpa_impl_supported(sdpa_impl_at(i)),
              "%s: supported differs from the first calls' answer",
              sdpa_impl_name(sdpa_impl_at(i)));
    for (size_t t = 0; t < FIRST_THREADS; t++) free(first[t].o), free(first[t].lse);
    tl_end();
}

/* ------------------------------------------------------------------------------------------ */
/* 2. sdpa_select flipping between every implementation (supported or not), automatic and an    */
/*    unknown name, from one thread, while others run sdpa_forward. A call runs exactly one      */
/*    implementation: its result is bitwise one supported implementation's serial result, and   */
/*    the active one's when the selection did not change during the call.                        */
/* ------------------------------------------------------------------------------------------ */
enum { FLIP_WORKERS = 3, FLIP_CALLS = 200 };

static atomic_bool flip_done;
static atomic_ulong flip_epoch; /* selections made so far; incremented after each one */
static pthread_barrier_t flip_go;

typedef struct flip_stats {
    size_t id;
    size_t calls, bad_status, no_match, wrong_impl, changed_during;
    size_t matched[MAX_IMPLS];
    problem_note first;
    float *o, *lse;
} flip_stats;

typedef struct selector_stats {
    size_t rounds, selects, failures;
    problem_note first;
} selector_stats;

static const sdpa_impl *first_supported(void)
{
    for (size_t i = 0; i < sdpa_impl_count(); i++)
        if (sdpa_impl_supported(sdpa_impl_at(i))) return sdpa_impl_at(i);
    return NULL;
}

/* One selection; a refused one must leave the active implementation as it was (this thread is
   the only one that selects, so "as it was" is well defined). */
static void select_one(selector_stats *ss, const char *name)
{
    const sdpa_impl *before = sdpa_active(), *want = name ? sdpa_impl_find(name) : NULL;
    const bool automatic = !name || strcmp(name, "auto") == 0;
    const sdpa_status st = sdpa_select(name);
    const sdpa_impl *after = sdpa_active();
    ss->selects++;
    if (automatic) {
        if (st != SDPA_OK || after != first_supported())
            ss->failures++, note(&ss->first, "select(%s): %s, active %s", name ? name : "NULL",
                                 sdpa_status_str(st), sdpa_impl_name(after));
    } else if (!want) {
        if (st != SDPA_ERR_UNKNOWN_IMPL || after != before)
            ss->failures++, note(&ss->first, "select(%s): %s, active %s", name, sdpa_status_str(st),
                                 sdpa_impl_name(after));
    } else if (!sdpa_impl_supported(want)) {
        if (st != SDPA_ERR_UNSUPPORTED || after != before)
            ss->failures++, note(&ss->first, "select(unsupported %s): %s, active %s", name,
                                 sdpa_status_str(st), sdpa_impl_name(after));
    } else if (st != SDPA_OK || after != want) {
        ss->failures++, note(&ss->first, "select(%s): %s, active %s", name, sdpa_status_str(st),
                             sdpa_impl_name(after));
    }
    atomic_fetch_add(&flip_epoch, 1);
    /* a pause shorter than a call, so that selections land inside calls rather than in bursts
       between the workers' time slices */
    nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
}

static void *selector_thread(void *arg)
{
    selector_stats *ss = arg;
    pthread_barrier_wait(&flip_go);
    do { /* at least one whole round, however quickly the workers finish */
        for (size_t i = 0; i < sdpa_impl_count(); i++) {
            select_one(ss, sdpa_impl_name(sdpa_impl_at(i)));
            if (i == 0) select_one(ss, NULL);
        }
        select_one(ss, "no-such-isa");
        select_one(ss, "auto");
        ss->rounds++;
    } while (!atomic_load(&flip_done));
    return NULL;
}

static void *flip_worker(void *arg)
{
    flip_stats *fs = arg;
    pthread_barrier_wait(&flip_go);
    const size_t n = iterations(FLIP_CALLS);
    for (size_t i = 0; i < n; i++) {
        const problem *pb = &problems[(fs->id + i) % N_SHAPES];
        const unsigned long e0 = atomic_load(&flip_epoch);
        const sdpa_impl *a0 = sdpa_active();
        const sdpa_status st = forward_serial(NULL, pb, fs->o, fs->lse);
        const sdpa_impl *a1 = sdpa_active();
        const unsigned long e1 = atomic_load(&flip_epoch);
        fs->calls++;
        if (st != SDPA_OK) {
            fs->bad_status++, note(&fs->first, "%s: %s", pb->s->name, sdpa_status_str(st));
            continue;
        }
        const int m = matching_impl(pb, fs->o, fs->lse);
        if (m < 0) {
            fs->no_match++,
                note(&fs->first, "%s, call %zu: the result is no implementation's serial one",
                     pb->s->name, i);
            continue;
        }
        fs->matched[m]++;
        /* Between the two epoch reads at most one selection took effect (each is followed by an
           increment); if the active one read before and after is the same, the call ran it. */
        if (e0 == e1 && a0 == a1) {
            if (!same_as_ref(pb, (size_t)impl_index(a0), fs->o, fs->lse))
                fs->wrong_impl++,
                    note(&fs->first, "%s, call %zu: %s was active throughout, the result is %s's",
                         pb->s->name, i, sdpa_impl_name(a0),
                         sdpa_impl_name(sdpa_impl_at((size_t)m)));
        } else {
            fs->changed_during++;
        }
    }
    return NULL;
}

/* The largest output and row count over the shapes, for buffers any of them fits in. */
static void largest_problem(size_t *max_o, size_t *max_rows)
{
    *max_o = *max_rows = 0;
    for (size_t si = 0; si < N_SHAPES; si++) {
        if (problems[si].o_elems > *max_o) *max_o = problems[si].o_elems;
        if (problems[si].rows > *max_rows) *max_rows = problems[si].rows;
    }
}

static void test_select_flipping(void)
{
    tl_start("sdpa_select flipping while sdpa_forward runs", "all");
    pthread_t sel, th[FLIP_WORKERS];
    selector_stats ss = {0};
    flip_stats fs[FLIP_WORKERS];
    memset(fs, 0, sizeof fs);
    size_t max_o, max_rows;
    largest_problem(&max_o, &max_rows);
    atomic_store(&flip_done, false);
    atomic_store(&flip_epoch, 0);
    pthread_barrier_init(&flip_go, NULL, FLIP_WORKERS + 1);
    if (pthread_create(&sel, NULL, selector_thread, &ss) != 0) {
        printf("Bail out! could not start the selector thread\n");
        exit(1);
    }
    for (size_t w = 0; w < FLIP_WORKERS; w++) {
        fs[w].id = w;
        fs[w].o = tl_xmalloc(max_o * sizeof(float));
        fs[w].lse = tl_xmalloc(max_rows * sizeof(float));
        if (pthread_create(&th[w], NULL, flip_worker, &fs[w]) != 0) {
            printf("Bail out! could not start a worker thread\n");
            exit(1);
        }
    }
    for (size_t w = 0; w < FLIP_WORKERS; w++) pthread_join(th[w], NULL);
    atomic_store(&flip_done, true);
    pthread_join(sel, NULL);
    pthread_barrier_destroy(&flip_go);

    size_t calls = 0, changed = 0, matched[MAX_IMPLS] = {0};
    for (size_t w = 0; w < FLIP_WORKERS; w++) {
        const flip_stats *f = &fs[w];
        calls += f->calls, changed += f->changed_during;
        for (size_t i = 0; i < MAX_IMPLS; i++) matched[i] += f->matched[i];
        CHECK(f->bad_status == 0 && f->no_match == 0 && f->wrong_impl == 0,
              "worker %zu: %zu failed calls, %zu results of no implementation, %zu of another than "
              "the "
              "active one; first: %s",
              w, f->bad_status, f->no_match, f->wrong_impl, f->first.text);
        free(fs[w].o), free(fs[w].lse);
    }
    CHECK(calls == FLIP_WORKERS * iterations(FLIP_CALLS), "%zu calls made", calls);
    CHECK(ss.failures == 0, "%zu of %zu selections misbehaved; first: %s", ss.failures, ss.selects,
          ss.first.text);
    CHECK(ss.rounds >= 1, "the selector never finished a round");
    printf("# %zu calls during %zu selections (%zu rounds), %zu of them saw the selection change;",
           calls, ss.selects, ss.rounds, changed);
    for (size_t i = 0; i < sdpa_impl_count(); i++)
        if (problems[0].ref_o[i])
            printf(" %s's bits %zu", sdpa_impl_name(sdpa_impl_at(i)), matched[i]);
    printf("\n");
    sdpa_select(NULL);
    tl_end();
}

/* ------------------------------------------------------------------------------------------ */
/* 3. Several callers at once, each with its own pool claiming tasks in a shuffled order (and a */
/*    caller-owned workspace on every other call; half the pools poll between calls, half      */
/*    sleep): every result is the serial one, from one pool call per forward call.              */
/* ------------------------------------------------------------------------------------------ */
enum { POOL_CALLERS = 4, POOL_CALLS = 24 };

static pthread_barrier_t pool_go;

typedef struct pool_caller {
    size_t id;
    const sdpa_impl *impl;
    bench_pool *pool;
    size_t calls, bad_status, differ;
    problem_note first;
    float *o, *lse;
    void *ws;
    size_t ws_bytes;
} pool_caller;

static void *pool_caller_thread(void *arg)
{
    pool_caller *pc = arg;
    const size_t nt = bench_pool_threads(pc->pool);
    pthread_barrier_wait(&pool_go);
    const size_t n = iterations(POOL_CALLS);
    for (size_t i = 0; i < n; i++) {
        const problem *pb = &problems[(pc->id + i) % N_SHAPES];
        sdpa_params p = params_of(pb, pc->lse, bench_pool_parallel_for, pc->pool, nt);
        if (i % 2) p.workspace = pc->ws, p.workspace_bytes = pc->ws_bytes;
        tl_fill_sentinel(pc->o, pb->o_elems);
        const sdpa_status st = forward_into(pc->impl, pb, pc->o, &p);
        pc->calls++;
        if (st != SDPA_OK) {
            pc->bad_status++, note(&pc->first, "%s: %s", pb->s->name, sdpa_status_str(st));
            continue;
        }
        if (!same_as_ref(pb, (size_t)impl_index(pc->impl), pc->o, pc->lse)) {
            const int m = matching_impl(pb, pc->o, pc->lse);
            pc->differ++, note(&pc->first, "%s, call %zu%s: not the serial result (matches %s)",
                               pb->s->name, i, i % 2 ? " with a workspace" : "",
                               m >= 0 ? sdpa_impl_name(sdpa_impl_at((size_t)m)) : "none");
        }
    }
    return NULL;
}

static void test_pooled_calls(const sdpa_impl *impl)
{
    pool_caller pc[POOL_CALLERS];
    pthread_t th[POOL_CALLERS];
    memset(pc, 0, sizeof pc);
    size_t max_o, max_rows;
    largest_problem(&max_o, &max_rows);
    pthread_barrier_init(&pool_go, NULL, POOL_CALLERS);
    for (size_t c = 0; c < POOL_CALLERS; c++) {
        const bench_pool_options opts = {.n_threads = 2 + c % 2,
                                         .order = BENCH_POOL_SHUFFLE,
                                         .check = true,
                                         .seed = 101 + c,
                                         .spin_us = c / 2 ? 200 : 0};
        pc[c].id = c;
        pc[c].impl = impl;
        pc[c].pool = bench_pool_create_opts(&opts);
        if (!pc[c].pool) {
            printf("Bail out! a %zu-thread pool could not be started\n", opts.n_threads);
            exit(1);
        }
        pc[c].o = tl_xmalloc(max_o * sizeof(float));
        pc[c].lse = tl_xmalloc(max_rows * sizeof(float));
        /* one workspace big enough for every shape at this pool's thread count */
        for (size_t si = 0; si < N_SHAPES; si++) {
            const problem *pb = &problems[si];
            const sdpa_params p =
                params_of(pb, pc[c].lse, bench_pool_parallel_for, pc[c].pool, opts.n_threads);
            const sdpa_tensor tq = tview_tensor(&pb->q), tk = tview_tensor(&pb->k),
                              tv = tview_tensor(&pb->v);
            const sdpa_tensor to = out_tensor(pb, pc[c].o);
            size_t bytes = 0;
            CHECK(sdpa_impl_workspace_size(impl, &p, &tq, &tk, &tv, &to, &bytes) == SDPA_OK,
                  "%s: no workspace size", pb->s->name);
            if (bytes > pc[c].ws_bytes) pc[c].ws_bytes = bytes;
        }
        pc[c].ws = tl_xmalloc(pc[c].ws_bytes);
    }
    for (size_t c = 0; c < POOL_CALLERS; c++)
        if (pthread_create(&th[c], NULL, pool_caller_thread, &pc[c]) != 0) {
            printf("Bail out! could not start a caller thread\n");
            exit(1);
        }
    for (size_t c = 0; c < POOL_CALLERS; c++) pthread_join(th[c], NULL);
    pthread_barrier_destroy(&pool_go);
    for (size_t c = 0; c < POOL_CALLERS; c++) {
        const bench_pool_stats st = bench_pool_get_stats(pc[c].pool);
        CHECK(pc[c].calls == iterations(POOL_CALLS), "caller %zu made %zu calls", c, pc[c].calls);
        CHECK(pc[c].bad_status == 0 && pc[c].differ == 0,
              "caller %zu (%zu threads): %zu failed calls, %zu results not the serial ones; first: "
              "%s",
              c, bench_pool_threads(pc[c].pool), pc[c].bad_status, pc[c].differ, pc[c].first.text);
        CHECK(st.calls == pc[c].calls,
              "caller %zu: the library called the pool %llu times for %zu calls (not once each)", c,
              (unsigned long long)st.calls, pc[c].calls);
        CHECK(st.bad_thread == 0 && st.overlaps == 0 && st.miscounts == 0,
              "caller %zu: the pool's checks: %llu bad indices, %llu overlaps, %llu miscounts", c,
              (unsigned long long)st.bad_thread, (unsigned long long)st.overlaps,
              (unsigned long long)st.miscounts);
        bench_pool_destroy(pc[c].pool);
        free(pc[c].o), free(pc[c].lse), free(pc[c].ws);
    }
}

int main(void)
{
    tl_header("the library from many threads at once");
    for (size_t si = 0; si < N_SHAPES; si++) make_problem(&problems[si], &shapes[si], 1000 + si);
    run_first_use(); /* the process's first library calls */
    if (sdpa_impl_count() > MAX_IMPLS) {
        printf("Bail out! more than %d implementations: raise MAX_IMPLS\n", MAX_IMPLS);
        return 1;
    }
    make_references();
    check_first_use();
    test_select_flipping();
    tl_for_each_impl("concurrent calls, each on its own shuffled pool", test_pooled_calls);
    for (size_t si = 0; si < N_SHAPES; si++) free_problem(&problems[si]);
    return tl_finish();
}
