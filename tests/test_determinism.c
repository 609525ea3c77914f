/* test_determinism.c -- the same bits on every run and for every thread count, through a caller's
 * pthread pool */
#include "attn.h"

#include "pool.h"

#include <stdatomic.h>
#include <time.h>

/* The pools the library is run on (bench/pool.h, the benchmarks' own pool). Every one checks
   the hook's contract as it runs: each task exactly once per call, thread indices below the
   pool's n_threads, never two tasks at once under one index. */
typedef struct pool_case {
    const char *how;
    bench_pool_options opts; /* check is set for every one */
    size_t hook_threads;     /* sdpa_params.n_threads */
} pool_case;

static const pool_case pool_cases[] = {
    /* tasks claimed from one counter by whichever thread is free, so which thread runs which
       task changes from run to run, exactly what the library must not depend on */
    {"pthread pool, 1 threads", {.n_threads = 1}, 1},
    {"pthread pool, 2 threads", {.n_threads = 2}, 2},
    {"pthread pool, 3 threads", {.n_threads = 3}, 3},
    {"pthread pool, 4 threads", {.n_threads = 4}, 4},
    /* the hook with n_threads 0 means one thread */
    {"hook with n_threads 0", {.n_threads = 1}, 0},
    /* one thread, tasks in reverse order, thread indices rotating over n_threads, so that any
       dependence on order or on the index-to-task mapping shows */
    {"reverse-order executor, 2 thread indices",
     {.n_threads = 2, .order = BENCH_POOL_REVERSE, .serial = true},
     2},
    {"reverse-order executor, 5 thread indices",
     {.n_threads = 5, .order = BENCH_POOL_REVERSE, .serial = true},
     5},
    /* the same with a different permutation on every call, alone and on threads */
    {"shuffled-order executor, 3 thread indices",
     {.n_threads = 3, .order = BENCH_POOL_SHUFFLE, .serial = true, .seed = 1},
     3},
    {"pthread pool, 3 threads, shuffled order",
     {.n_threads = 3, .order = BENCH_POOL_SHUFFLE, .seed = 2},
     3},
    {"pthread pool, 2 threads, reverse order", {.n_threads = 2, .order = BENCH_POOL_REVERSE}, 2},
};

/* ------------------------------------------------------------------------------------------ */
/* The pools themselves: the determinism below is only shown for the orders they really use.  */
/* ------------------------------------------------------------------------------------------ */

/* What one call did: the k-th task to start, the thread index it ran under, runs per task. */
typedef struct record {
    size_t n;
    atomic_size_t started;
    size_t *task_at, *thread_at;
    atomic_uint *runs;
} record;

static void record_alloc(record *r, size_t max_n)
{
    r->task_at = tl_xmalloc(max_n * sizeof *r->task_at);
    r->thread_at = tl_xmalloc(max_n * sizeof *r->thread_at);
    r->runs = tl_xmalloc(max_n * sizeof *r->runs);
}

static void record_free(record *r)
{
    free(r->task_at);
    free(r->thread_at);
    free(r->runs);
}

static void record_task(void *arg, size_t task, size_t thread)
{
    record *r = arg;
    const size_t k = atomic_fetch_add(&r->started, 1);
    if (k < r->n) r->task_at[k] = task, r->thread_at[k] = thread;
    if (task < r->n) atomic_fetch_add(&r->runs[task], 1);
}

static void record_call(bench_pool *pl, record *r, size_t n)
{
    r->n = n;
    atomic_init(&r->started, 0);
    for (size_t i = 0; i < n; i++) atomic_init(&r->runs[i], 0);
    bench_pool_parallel_for(pl, n, record_task, r);
}

static bool same_order(const record *a, const record *b)
{
    return a->n == b->n && memcmp(a->task_at, b->task_at, a->n * sizeof *a->task_at) == 0;
}

/* n tasks that each wait until all n have started (up to 10 s in all, so that a broken pool
   fails rather than hangs): on n threads each must get its own. */
typedef struct gang {
    size_t n;
    atomic_size_t arrived, timed_out;
} gang;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void gang_task(void *arg, size_t task, size_t thread)
{
    (void)task, (void)thread;
    gang *g = arg;
    atomic_fetch_add(&g->arrived, 1);
    const double give_up = now_s() + 10.0;
    while (atomic_load(&g->arrived) < g->n && atomic_load(&g->timed_out) == 0)
        if (now_s() > give_up) {
            atomic_fetch_add(&g->timed_out, 1);
            return;
        }
}

static void test_pools(void)
{
    tl_start("the test pools: each task once, in the order each claims", "bench_pool");
    static const size_t sizes[] = {1, 2, 3, 7, 64, 1000};
    record a, b;
    record_alloc(&a, 1000);
    record_alloc(&b, 1000);
    for (size_t pi = 0; pi < sizeof pool_cases / sizeof pool_cases[0]; pi++) {
        const pool_case *pc = &pool_cases[pi];
        bench_pool_options opts = pc->opts;
        opts.check = true;
        const size_t nt = opts.n_threads;
        bench_pool *pl = bench_pool_create_opts(&opts), *twin = bench_pool_create_opts(&opts);
        if (!CHECK(pl && twin, "%s: the pool could not be started", pc->how)) {
            bench_pool_destroy(pl);
            bench_pool_destroy(twin);
            continue;
        }
        uint64_t tasks = 0;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const size_t n = sizes[si];
            record_call(pl, &a, n);
            tasks += n;
            CHECK(atomic_load(&a.started) == n, "%s, %zu tasks: %zu ran", pc->how, n,
                  atomic_load(&a.started));
            for (size_t i = 0; i < n; i++)
                CHECK(atomic_load(&a.runs[i]) == 1, "%s, %zu tasks: task %zu ran %u times", pc->how,
                      n, i, atomic_load(&a.runs[i]));
            for (size_t k = 0; k < n; k++) {
                CHECK(a.thread_at[k] < nt, "%s, %zu tasks: thread index %zu", pc->how, n,
                      a.thread_at[k]);
                if (!opts.serial) continue; /* threads start claimed tasks in no fixed order */
                CHECK(a.thread_at[k] == k % nt,
                      "%s, %zu tasks: the task at position %zu ran as thread %zu", pc->how, n, k,
                      a.thread_at[k]);
                const size_t want = pc->opts.order == BENCH_POOL_REVERSE ? n - 1 - k : k;
                if (pc->opts.order != BENCH_POOL_SHUFFLE)
                    CHECK(a.task_at[k] == want,
                          "%s, %zu tasks: task %zu ran at position %zu, not task %zu", pc->how, n,
                          a.task_at[k], k, want);
            }
            if (pc->opts.order == BENCH_POOL_SHUFFLE && opts.serial) {
                /* a pool of the same seed runs the same orders, call by call; the next call of
                   a pool another one */
                bool identity = true;
                for (size_t k = 0; k < n; k++) identity &= a.task_at[k] == k;
                record_call(twin, &b, n);
                CHECK(same_order(&a, &b),
                      "%s, %zu tasks: two pools of one seed ran different orders", pc->how, n);
                record_call(pl, &b, n);
                tasks += n;
                if (n >= 64) {
                    CHECK(!identity, "%s, %zu tasks: the shuffled order is the identity", pc->how,
                          n);
                    CHECK(!same_order(&a, &b), "%s, %zu tasks: two calls ran the same order",
                          pc->how, n);
                }
                record_call(twin, &a, n);
                CHECK(same_order(&a, &b),
                      "%s, %zu tasks: two pools of one seed ran different orders", pc->how, n);
            }
        }
        if (!opts.serial && nt > 1) { /* the gang machine.c's peak measurements rely on */
            gang g = {.n = nt};
            atomic_init(&g.arrived, 0);
            atomic_init(&g.timed_out, 0);
            bench_pool_parallel_for(pl, nt, gang_task, &g);
            tasks += nt;
            CHECK(atomic_load(&g.timed_out) == 0,
                  "%s: %zu tasks that wait for each other did not all start", pc->how, nt);
        }
        const bench_pool_stats st = bench_pool_get_stats(pl);
        CHECK(st.tasks == tasks, "%s: the pool counted %llu tasks, not %llu", pc->how,
              (unsigned long long)st.tasks, (unsigned long long)tasks);
        CHECK(st.bad_thread == 0 && st.overlaps == 0 && st.miscounts == 0,
              "%s: the pool's own checks: %llu bad indices, %llu overlaps, %llu miscounts", pc->how,
              (unsigned long long)st.bad_thread, (unsigned long long)st.overlaps,
              (unsigned long long)st.miscounts);
        bench_pool_destroy(twin);
        bench_pool_destroy(pl);
    }
    record_free(&a);
    record_free(&b);
    tl_end();
}

typedef struct dcase {
    const char *name;
    size_t batch, qh, kvh, ql, kvl, d;
    bool causal;
    sdpa_dtype kt;
} dcase;

static const dcase dcases[] = {
    {"prefill", 1, 4, 2, 193, 193, 64, true, SDPA_F32},
    {"prefill f16, q_len < kv_len", 2, 2, 1, 50, 301, 32, true, SDPA_F16},
    {"decode (q_len 1, long kv)", 1, 8, 2, 1, 20000, 128, false, SDPA_F32},
    {"decode bf16", 2, 4, 4, 1, 9000, 64, false, SDPA_BF16},
    {"decode, 2048-key chunks", 1, 32, 8, 1, 6148, 32, false, SDPA_F16},
    {"decode, 4096-key chunks", 1, 32, 32, 1, 4100, 32, false, SDPA_F16},
};

typedef struct run_out {
    float *o, *lse;
} run_out;

/* The inputs of the case being run, built once and shared by every run of it. */
static tview in_q, in_k, in_v;

static void make_inputs(const dcase *c)
{
    tl_rng r = {77};
    tview_layout(&in_q, c->batch, c->qh, c->ql, c->d, SDPA_F32, L_DENSE, 0);
    tview_layout(&in_k, c->batch, c->kvh, c->kvl, c->d, c->kt, L_DENSE, 0);
    tview_layout(&in_v, c->batch, c->kvh, c->kvl, c->d, c->kt, L_DENSE, 0);
    tview_alloc(&in_q);
    tview_alloc(&in_k);
    tview_alloc(&in_v);
    tview_fill(&in_q, &r, -1.0f, 1.0f);
    tview_fill(&in_k, &r, -1.0f, 1.0f);
    tview_fill(&in_v, &r, -1.0f, 1.0f);
}

static void free_inputs(void)
{
    tview_free(&in_q);
    tview_free(&in_k);
    tview_free(&in_v);
}

/* Runs the case on the shared inputs with the given hook (impl NULL: through sdpa_forward) into
   fresh sentinel-filled o and lse buffers, which the caller frees. */
static bool run(const sdpa_impl *impl, const dcase *c, sdpa_parallel_for_fn hook, void *pool_ptr,
                size_t n_threads, run_out *out, const char *how)
{
    const size_t rows = c->batch * c->qh * c->ql;
    out->o = tl_xmalloc(rows * c->d * sizeof(float));
    out->lse = tl_xmalloc(rows * sizeof(float));
    tl_fill_sentinel(out->o, rows * c->d);
    tl_fill_sentinel(out->lse, rows);
    sdpa_params p = {0};
    p.batch = c->batch, p.q_heads = c->qh, p.kv_heads = c->kvh, p.q_len = c->ql, p.kv_len = c->kvl;
    p.head_dim = c->d, p.causal = c->causal, p.lse = out->lse;
    p.parallel_for = hook, p.pool = pool_ptr, p.n_threads = n_threads;
    sdpa_tensor tq = tview_tensor(&in_q), tk = tview_tensor(&in_k), tv = tview_tensor(&in_v);
    sdpa_tensor to = {out->o, SDPA_F32, (ptrdiff_t)(c->qh * c->ql * c->d),
                      (ptrdiff_t)(c->ql * c->d), (ptrdiff_t)c->d};
    sdpa_status st = impl ? sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to)
                          : sdpa_forward(&p, &tq, &tk, &tv, &to);
    if (st != SDPA_OK) {
        free(out->o);
        free(out->lse);
    }
    return CHECK(st == SDPA_OK, "%s, %s: status %s", c->name, how, sdpa_status_str(st));
}

static void same_bits(const dcase *c, const run_out *a, const run_out *b, const char *how)
{
    const size_t rows = c->batch * c->qh * c->ql, n = rows * c->d;
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (tl_bits(a->o[i]) != tl_bits(b->o[i]) && diff++ == 0) first = i;
    CHECK(diff == 0,
          "%s, %s: %zu of %zu output elements differ from the serial run (first at %zu: %.9g vs "
          "%.9g)",
          c->name, how, diff, n, first, diff ? b->o[first] : 0.0, diff ? a->o[first] : 0.0);
    diff = 0;
    for (size_t i = 0; i < rows; i++) diff += tl_bits(a->lse[i]) != tl_bits(b->lse[i]);
    CHECK(diff == 0, "%s, %s: %zu lse values differ from the serial run", c->name, how, diff);
    for (size_t i = 0; i < n; i++)
        if (!CHECK(!tl_is_sentinel(b->o[i]), "%s, %s: output element %zu never written", c->name,
                   how, i))
            break;
}

static void free_out(run_out *o)
{
    free(o->o);
    free(o->lse);
}

static void test_determinism(const sdpa_impl *impl)
{
    for (size_t ci = 0; ci < sizeof dcases / sizeof dcases[0] && !tl_give_up(); ci++) {
        dcase sampled = dcases[ci];
        /* emulated runs: shorter KV, still long enough (> 2048 keys) to be split into chunks */
        if (tl_sample() > 1 && sampled.kvl / tl_sample() > 2100)
            sampled.kvl /= tl_sample();
        else if (tl_sample() > 1 && sampled.kvl > 2100)
            sampled.kvl = 2100;
        const dcase *c = &sampled;
        run_out ref, again;
        make_inputs(c);
        if (!run(impl, c, NULL, NULL, 0, &ref, "serial")) {
            free_inputs();
            continue;
        }
        if (run(impl, c, NULL, NULL, 0, &again, "serial, second run")) {
            same_bits(c, &ref, &again, "serial, second run");
            free_out(&again);
        }
        for (size_t pi = 0; pi < sizeof pool_cases / sizeof pool_cases[0]; pi++) {
            const pool_case *pc = &pool_cases[pi];
            bench_pool_options opts = pc->opts;
            opts.check = true;
            bench_pool *pl = bench_pool_create_opts(&opts);
            if (!CHECK(pl != NULL, "%s: the pool could not be started", pc->how)) continue;
            run_out got;
            if (run(impl, c, bench_pool_parallel_for, pl, pc->hook_threads, &got, pc->how)) {
                same_bits(c, &ref, &got, pc->how);
                free_out(&got);
            }
            const bench_pool_stats st = bench_pool_get_stats(pl);
            CHECK(st.bad_thread == 0, "%s, %s: the test pool handed out a thread index >= %zu",
                  c->name, pc->how, opts.n_threads);
            CHECK(st.overlaps == 0,
                  "%s, %s: the test pool ran two tasks at once under one thread index", c->name,
                  pc->how);
            CHECK(st.miscounts == 0, "%s, %s: the test pool ran some task other than once", c->name,
                  pc->how);
            CHECK(st.calls >= 1, "%s, %s: the library never called the thread-pool hook", c->name,
                  pc->how);
            bench_pool_destroy(pl);
        }
        free_out(&ref);
        free_inputs();
    }
}

/* sdpa_forward runs the active implementation: the same bits as sdpa_impl_forward(sdpa_active()).
 */
static void test_active_forward(void)
{
    tl_start("sdpa_forward is sdpa_impl_forward(active)", sdpa_impl_name(sdpa_active()));
    /* when the suite is rerun with SDPA_ISA forcing a supported implementation, that one runs */
    const char *forced = getenv("SDPA_ISA");
    const sdpa_impl *want = forced ? sdpa_impl_find(forced) : NULL;
    if (want && sdpa_impl_supported(want))
        CHECK(sdpa_active() == want && sdpa_selection_reason() == SDPA_SELECTED_ENV,
              "SDPA_ISA=%s but %s is active (%s)", forced, sdpa_impl_name(sdpa_active()),
              sdpa_selection_str(sdpa_selection_reason()));
    const dcase *c = &dcases[1];
    run_out a, b;
    make_inputs(c);
    if (run(sdpa_active(), c, NULL, NULL, 0, &a, "sdpa_impl_forward(active)")) {
        if (run(NULL, c, NULL, NULL, 0, &b, "sdpa_forward")) {
            same_bits(c, &a, &b, "sdpa_forward vs sdpa_impl_forward(active)");
            free_out(&b);
        }
        free_out(&a);
    }
    free_inputs();
    tl_end();
}

int main(void)
{
    tl_header("determinism over runs and thread counts");
    test_pools();
    tl_for_each_impl("determinism", test_determinism);
    test_active_forward();
    return tl_finish();
}
