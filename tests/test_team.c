/* test_team.c -- sdpa_forward_team: bitwise sdpa_forward for any team size, on pthreads and in
 * an OpenMP parallel region, one team state reused over many calls, refusals mid-stream */
#include "problem.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#ifdef SDPA_TEST_OPENMP
#include <omp.h>
#endif

/*
 * Each call is a random problem (problem.h: every layout, K/V type, modifier and GQA shape;
 * long decodes, whose keys are split into chunks and merged after the team's second barrier),
 * run once by sdpa_impl_forward on the calling thread, which is the reference, and once by a
 * team of nth = 1..8 threads (more than this machine has cores, so that teammates are
 * descheduled inside the barriers). The team's o and lse, margins included, must equal the
 * reference bit for bit. One team state serves every call of a run, of every shape and team
 * size; some calls come with the workspace sdpa_workspace_size gives for n_threads = nth, some
 * with one too small and some with none (thread 0 then allocates). Every ninth call is broken
 * on purpose: every thread must return sdpa_validate's status, and o and lse stay untouched.
 */

enum { MAX_TEAM = 8 };

/* One call for a team: the problem, the implementation, and each thread's status. */
typedef struct job {
    const sdpa_impl *impl;
    qprob *pr;
    void *team;
    size_t nth;
    sdpa_status st[MAX_TEAM];
} job;

static void team_member(job *j, size_t ith)
{
    qprob *pr = j->pr;
    j->st[ith] = sdpa_impl_forward_team(j->impl, &pr->p, &pr->tq, &pr->tk, &pr->tv, &pr->to,
                                        j->team, ith, j->nth);
}

/* ------------------------------------------------------------------------------------------ */
/* A pthread team: MAX_TEAM threads started once, each call run by the first nth of them      */
/* ------------------------------------------------------------------------------------------ */
typedef struct pteam {
    pthread_t th[MAX_TEAM];
    pthread_barrier_t go, done;
    job *j; /* NULL: the threads exit */
} pteam;

typedef struct member {
    pteam *t;
    size_t ith;
} member;

static void *pteam_thread(void *arg)
{
    const member *m = arg;
    for (;;) {
        pthread_barrier_wait(&m->t->go);
        job *j = m->t->j;
        if (!j) return NULL;
        if (m->ith < j->nth) team_member(j, m->ith);
        pthread_barrier_wait(&m->t->done);
    }
}

static member members[MAX_TEAM];

static bool pteam_start(pteam *t)
{
    if (pthread_barrier_init(&t->go, NULL, MAX_TEAM + 1) ||
        pthread_barrier_init(&t->done, NULL, MAX_TEAM + 1))
        return false;
    for (size_t i = 0; i < MAX_TEAM; i++) {
        members[i] = (member){t, i};
        if (pthread_create(&t->th[i], NULL, pteam_thread, &members[i])) return false;
    }
    return true;
}

static void pteam_run(pteam *t, job *j)
{
    t->j = j;
    pthread_barrier_wait(&t->go);
    pthread_barrier_wait(&t->done);
}

static void pteam_stop(pteam *t)
{
    t->j = NULL;
    pthread_barrier_wait(&t->go);
    for (size_t i = 0; i < MAX_TEAM; i++) pthread_join(t->th[i], NULL);
    pthread_barrier_destroy(&t->go);
    pthread_barrier_destroy(&t->done);
}

/* ------------------------------------------------------------------------------------------ */
/* An OpenMP team: the threads of a parallel region                                            */
/* ------------------------------------------------------------------------------------------ */
#ifdef SDPA_TEST_OPENMP
/* The hand-over into and out of the region also goes through these atomics: ThreadSanitizer
   does not see the OpenMP runtime's own synchronisation (libgomp is not instrumented), and
   would otherwise report the job's set-up and the results as races. The library's own
   synchronisation inside the region is what the run checks. */
static atomic_uintptr_t omp_job;
static atomic_size_t omp_done;

static bool omp_run(job *j)
{
    atomic_store_explicit(&omp_done, 0, memory_order_relaxed);
    atomic_store_explicit(&omp_job, (uintptr_t)j, memory_order_release);
#pragma omp parallel num_threads((int)j->nth)
    {
        job *jj = (job *)atomic_load_explicit(&omp_job, memory_order_acquire);
        /* a smaller team than asked for runs nothing, and is counted as not formed */
        if ((size_t)omp_get_num_threads() == jj->nth) team_member(jj, (size_t)omp_get_thread_num());
        atomic_fetch_add_explicit(&omp_done, 1, memory_order_release);
    }
    return atomic_load_explicit(&omp_done, memory_order_acquire) == j->nth;
}
#endif

/* ------------------------------------------------------------------------------------------ */
/* The calls                                                                                   */
/* ------------------------------------------------------------------------------------------ */
static size_t below(tl_rng *r, size_t n) { return (size_t)tl_uniform(r, 0.0f, (float)n) % n; }

/* A random problem: 1-3 sequences, GQA 1/2/4, decode or prefill, every layout and K/V type,
   modifiers at random; a long decode now and then, which is split into KV chunks. */
static qcase random_case(tl_rng *r)
{
    static const sdpa_dtype types[] = {F32, F16, BF16, Q8, Q4, Q41, Q50, Q51, IQ4};
    static const size_t dims[] = {32, 64, 128};
    static const size_t pages[] = {16, 32, 128};
    qcase c = {.name = "team"};
    c.B = 1 + below(r, 3);
    c.kvh = 1 + below(r, 2);
    c.qh = c.kvh << below(r, 3);
    c.d = dims[below(r, 3)];
    c.dv = below(r, 4) == 0 ? 32 : c.d;
    const bool decode = below(r, 2) == 0, longer = below(r, 4) == 0;
    for (size_t b = 0; b < c.B; b++) {
        c.lq[b] = decode ? 1 : 1 + below(r, 96);
        c.lk[b] = longer && c.B == 1 ? 2000 + below(r, 3000) : 1 + below(r, 200);
    }
    c.qf = (int)below(r, 3);
    c.kf = (int)below(r, 6);
    c.page = pages[below(r, 3)];
    c.inorder = below(r, 2) == 0;
    c.kt = types[below(r, 9)];
    c.vt = types[below(r, 9)];
    c.causal = below(r, 3) == 0;
    c.window = below(r, 6) == 0 ? 1 + below(r, 50) : 0;
    c.softcap = below(r, 5) == 0 ? 15.0f : 0.0f;
    c.alibi = below(r, 5) == 0;
    c.mask = below(r, 4) == 0;
    c.mt = below(r, 2) ? F16 : F32;
    c.sinks = below(r, 4) == 0;
    c.fast = quantized(c.kt) && below(r, 4) == 0;
    return c;
}

typedef enum { ON_PTHREADS, ON_OPENMP } team_kind;

static pteam g_pteam;
static void *g_team; /* the one team state of the run */

/* Runs job j on the chosen team; false when the team could not be formed. */
static bool run_team(team_kind kind, job *j)
{
#ifdef SDPA_TEST_OPENMP
    if (kind == ON_OPENMP) return omp_run(j);
#endif
    (void)kind;
    pteam_run(&g_pteam, j);
    return true;
}

static void t_calls(const sdpa_impl *impl, team_kind kind)
{
    const size_t n_calls = tl_sample() > 1 ? 100 : 1000; /* sanitizers and emulation: 100 */
    tl_rng r = {kind == ON_PTHREADS ? 101u : 202u};
    float *ref_o = NULL, *ref_lse = NULL;
    size_t formed = 0;
    for (size_t call = 0; call < n_calls && !tl_give_up(); call++) {
        qcase c = random_case(&r);
        qprob pr;
        qprob_init(&pr, &c, 1000 + call);
        const size_t nth = 1 + call % MAX_TEAM;
        const bool broken = call % 9 == 4;
        if (broken) pr.p.softcap = call % 2 ? NAN : -1.0f;

        /* the reference: sdpa_forward's bits, or its status */
        const sdpa_status want = qprob_run(&pr, impl, NULL);
        ref_o = realloc(ref_o, (pr.on + 2 * MARGIN) * sizeof(float));
        ref_lse = realloc(ref_lse, (pr.lsen + 2 * MARGIN) * sizeof(float));
        if (!ref_o || !ref_lse) abort();
        memcpy(ref_o, pr.obuf, (pr.on + 2 * MARGIN) * sizeof(float));
        memcpy(ref_lse, pr.lse, (pr.lsen + 2 * MARGIN) * sizeof(float));
        CHECK(broken == (want != SDPA_OK), "call %zu %s: sdpa_forward says %s", call, pr.what,
              sdpa_status_str(want));

        /* the workspace: sized for nth, too small, or none */
        void *ws = NULL;
        if (!broken && call % 3 != 2) {
            sdpa_params q = pr.p;
            q.n_threads = nth;
            size_t bytes = 0;
            CHECK(sdpa_impl_workspace_size(impl, &q, &pr.tq, &pr.tk, &pr.tv, &pr.to, &bytes) ==
                      SDPA_OK,
                  "call %zu: sdpa_workspace_size refused a valid call", call);
            if (call % 3 == 1) bytes /= 2;
            ws = tl_xmalloc(bytes + 1);
            pr.p.workspace = ws, pr.p.workspace_bytes = bytes;
        }

        tl_fill_sentinel(pr.obuf, pr.on + 2 * MARGIN);
        tl_fill_sentinel(pr.lse, pr.lsen + 2 * MARGIN);
        job j = {.impl = impl, .pr = &pr, .team = g_team, .nth = nth};
        if (run_team(kind, &j)) {
            formed++;
            for (size_t t = 0; t < nth; t++)
                CHECK(j.st[t] == want, "call %zu %s, thread %zu of %zu: status %s, want %s", call,
                      pr.what, t, nth, sdpa_status_str(j.st[t]), sdpa_status_str(want));
            CHECK(memcmp(pr.obuf, ref_o, (pr.on + 2 * MARGIN) * sizeof(float)) == 0 &&
                      memcmp(pr.lse, ref_lse, (pr.lsen + 2 * MARGIN) * sizeof(float)) == 0,
                  "call %zu %s, %zu threads: o or lse differs from sdpa_forward's bits%s", call,
                  pr.what, nth, broken ? " (a refused call wrote)" : "");
        }
        free(ws);
        qprob_free(&pr);
    }
    CHECK(formed * 2 > n_calls, "only %zu of %zu teams formed at the size asked for", formed,
          n_calls);
    free(ref_o), free(ref_lse);
}

static void t_pthreads(const sdpa_impl *impl) { t_calls(impl, ON_PTHREADS); }

#ifdef SDPA_TEST_OPENMP
static void t_openmp(const sdpa_impl *impl) { t_calls(impl, ON_OPENMP); }
#endif

/* Arguments no team can run with: refused on the calling thread, which returns at once. */
static void t_refusals(const sdpa_impl *impl)
{
    tl_rng r = {303};
    qcase c = random_case(&r);
    qprob pr;
    qprob_init(&pr, &c, 9);
    alignas(16) unsigned char buf[4096 + 16] = {0};
    CHECK(sdpa_team_bytes() > 0 && sdpa_team_bytes() <= 4096, "sdpa_team_bytes() is %zu",
          sdpa_team_bytes());
    const struct {
        const char *what;
        void *team;
        size_t ith, nth;
        bool hook;
    } bad[] = {
        {"a NULL team state", NULL, 0, 1, false},
        {"a team state not 8-byte aligned", buf + 4, 0, 1, false},
        {"nth 0", buf, 0, 0, false},
        {"ith == nth", buf, 2, 2, false},
        {"ith > nth", buf, 7, 3, false},
        {"a parallel_for hook", buf, 0, 1, true},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sdpa_params p = pr.p;
        if (bad[i].hook) p.parallel_for = bench_pool_parallel_for, p.pool = g_pool[0];
        tl_fill_sentinel(pr.obuf, pr.on + 2 * MARGIN);
        const sdpa_status s = sdpa_impl_forward_team(impl, &p, &pr.tq, &pr.tk, &pr.tv, &pr.to,
                                                     bad[i].team, bad[i].ith, bad[i].nth);
        bool untouched = true;
        for (size_t e = 0; e < pr.on + 2 * MARGIN; e++) untouched &= tl_is_sentinel(pr.obuf[e]);
        CHECK(s == SDPA_ERR_INVALID_ARGUMENT && untouched, "%s: status %s%s", bad[i].what,
              sdpa_status_str(s), untouched ? "" : ", and o was written");
    }
    /* a lone thread with a fresh state runs the call like sdpa_forward */
    CHECK(sdpa_impl_forward_team(impl, &pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, buf, 0, 1) == SDPA_OK,
          "a team of one refused a valid call");
    qprob_free(&pr);
}

int main(void)
{
    tl_header("sdpa_forward_team: bitwise sdpa_forward for teams of 1-8 threads, one team state");
    if (!tl_pools_create(g_pool, 1, 2, 1)) return 1;
    g_team = aligned_alloc(64, (sdpa_team_bytes() + 63) / 64 * 64);
    if (!g_team || !pteam_start(&g_pteam)) {
        printf("Bail out! no team\n");
        return 1;
    }
    memset(g_team, 0, sdpa_team_bytes());
    tl_for_each_impl("team: refusals", t_refusals);
    tl_for_each_impl("team: pthreads, 1-8 threads, one state over many calls", t_pthreads);
#ifdef SDPA_TEST_OPENMP
    tl_for_each_impl("team: OpenMP parallel region, 1-8 threads", t_openmp);
#else
    tl_skip("team: OpenMP parallel region, 1-8 threads", "every implementation",
            "built without OpenMP");
#endif
    pteam_stop(&g_pteam);
    free(g_team);
    bench_pool_destroy(g_pool[0]);
    return tl_finish();
}
