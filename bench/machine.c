/* machine.c -- the machine's limits, measured in the benchmark's own run: FMA peak per ISA and read
 * bandwidth */
/*
 * Compiled with baseline flags: it only decides (with cpu_features) which per-ISA kernel may
 * run and times them on the same thread pool the attention benchmarks use. Every thread
 * waits at a spin barrier before it starts its kernel, so that with n tasks on an n-thread
 * pool each thread gets exactly one task and they really run at the same time.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpu_features/cpuinfo_x86.h>
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef double (*fma_fn)(uint64_t iters, float *sink);
typedef float (*read_fn)(const float *p, size_t n);

typedef struct gang {
    size_t n;              /* threads taking part */
    atomic_size_t arrived; /* spin barrier */
    /* FMA run */
    fma_fn fma;
    uint64_t iters;
    /* read run */
    read_fn read;
    const float *buf;
    float *wbuf;
    size_t floats;
    /* results, per task */
    double t0[BENCH_MAX_THREADS], t1[BENCH_MAX_THREADS], work[BENCH_MAX_THREADS];
    float sink[BENCH_MAX_THREADS];
} gang;

static void gang_barrier(gang *g)
{
    atomic_fetch_add(&g->arrived, 1);
    while (atomic_load(&g->arrived) < g->n) {
    }
}

/* this task's slice [*b, *e) of the buffer, in whole cache lines */
static void gang_slice(const gang *g, size_t task, size_t *b, size_t *e)
{
    size_t lines = g->floats / 16;
    *b = lines * task / g->n * 16;
    *e = (task + 1 == g->n) ? g->floats : lines * (task + 1) / g->n * 16;
}

static void fma_task(void *arg, size_t task, size_t thread)
{
    (void)thread;
    gang *g = arg;
    gang_barrier(g);
    g->t0[task] = now_s();
    g->work[task] = g->fma(g->iters, &g->sink[task]);
    g->t1[task] = now_s();
}

static void read_task(void *arg, size_t task, size_t thread)
{
    (void)thread;
    gang *g = arg;
    size_t b, e;
    gang_slice(g, task, &b, &e);
    gang_barrier(g);
    g->t0[task] = now_s();
    g->sink[task] = g->read(g->buf + b, e - b);
    g->t1[task] = now_s();
    g->work[task] = (double)(e - b) * sizeof(float);
}

/* First touch from the threads that will read, with values that keep the sums finite and that
   differ from page to page (a hash of the index): pages of equal contents may be merged by the
   host of a virtual machine, and a read of merged pages comes from the cache, not memory. */
static void fill_task(void *arg, size_t task, size_t thread)
{
    (void)thread;
    gang *g = arg;
    size_t b, e;
    gang_slice(g, task, &b, &e);
    for (size_t i = b; i < e; i++)
        g->wbuf[i] = (float)((uint32_t)(i * 2654435761u) >> 24) * (1.0f / 256.0f);
}

/* Runs the gang once on a pool of g->n threads; returns work per second over the wall time
   from the first start to the last finish. */
static double gang_run(gang *g, bench_pool *pool, sdpa_task_fn task)
{
    atomic_store(&g->arrived, 0);
    bench_pool_parallel_for(pool, g->n, task, g);
    double t0 = g->t0[0], t1 = g->t1[0], work = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (g->t0[i] < t0) t0 = g->t0[i];
        if (g->t1[i] > t1) t1 = g->t1[i];
        work += g->work[i];
    }
    return t1 > t0 ? work / (t1 - t0) : 0.0;
}

/* Best of many short (~2 ms) runs spread over ~0.3 s: on a shared machine the best run is the
   one the scheduler left alone, and a run much shorter than a time slice has a fair chance of
   being one. */
static double measure_fma_for(fma_fn fn, bench_pool *pool, size_t threads, double seconds)
{
    gang g;
    memset(&g, 0, sizeof g);
    g.n = threads;
    g.fma = fn;
    g.iters = 1 << 12;
    /* calibrate on one thread: grow until a run takes >= 0.5 ms, then aim at 2 ms */
    for (;;) {
        float sink;
        double t0 = now_s();
        fn(g.iters, &sink);
        double dt = now_s() - t0;
        if (dt >= 5e-4 || g.iters > (1ull << 40)) {
            g.iters = (uint64_t)((double)g.iters * 2e-3 / (dt > 0 ? dt : 1e-9)) + 1;
            break;
        }
        g.iters *= 4;
    }
    double best = 0;
    const double until = now_s() + seconds;
    for (int rep = 0; rep < 200 && (rep < 10 || now_s() < until); rep++) {
        double r = gang_run(&g, pool, fma_task);
        if (r > best) best = r;
    }
    return best;
}

static double measure_fma(fma_fn fn, bench_pool *pool, size_t threads)
{
    return measure_fma_for(fn, pool, threads, 0.3);
}

static double measure_read(read_fn fn, float *buf, size_t floats, bench_pool *pool, size_t threads,
                           int reps)
{
    gang g;
    memset(&g, 0, sizeof g);
    g.floats = floats;
    g.buf = buf;
    g.wbuf = buf;
    g.read = fn;
    g.n = threads;
    double best = 0;
    for (int rep = 0; rep < reps; rep++) {
        double r = gang_run(&g, pool, read_task);
        if (r > best) best = r;
    }
    return best;
}

static int add_isa(bench_machine *m, const char *name)
{
    if (m->n_isa >= BENCH_MAX_ISAS) return -1;
    m->isa[m->n_isa] = name;
    return (int)m->n_isa++;
}

int bench_measure_machine(bench_machine *m, bench_pool *const *pools, size_t read_bytes)
{
    memset(m, 0, sizeof *m);
    fma_fn fmas[BENCH_MAX_ISAS] = {0};
    read_fn widest = bench_read_base, widest2 = bench_read2_base;
    m->read_isa = bench_read_base_name();
    m->xor_fn = bench_xor_base;

    fmas[add_isa(m, "scalar")] = bench_fma_scalar;
#if defined(__aarch64__)
    fmas[add_isa(m, BENCH_HAVE_NEON)] = bench_fma_neon;
#endif
#if defined(__x86_64__) || defined(__i386__)
    /* cpu_features clears AVX/AVX-512 when the OS does not save their registers (XCR0) */
    const X86Features f = GetX86Info().features;
#ifdef BENCH_HAVE_AVX2
    if (f.avx2 && f.fma3) {
        fmas[add_isa(m, BENCH_HAVE_AVX2)] = bench_fma_avx2;
        widest = bench_read_avx2;
        widest2 = bench_read2_avx2;
        m->xor_fn = bench_xor_avx2;
        m->read_isa = BENCH_HAVE_AVX2;
    }
#endif
#ifdef BENCH_HAVE_AVX512
    if (f.avx512f) {
        fmas[add_isa(m, BENCH_HAVE_AVX512)] = bench_fma_avx512;
        widest = bench_read_avx512;
        widest2 = bench_read2_avx512;
        m->xor_fn = bench_xor_avx512;
        m->read_isa = BENCH_HAVE_AVX512;
    }
#endif
    (void)f;
#endif

    for (size_t i = 0; i < m->n_isa; i++) {
        m->fma_fns[i] = (void *)fmas[i];
        for (size_t t = 1; t <= BENCH_MAX_THREADS; t++)
            m->fma_flops[i][t] = measure_fma(fmas[i], pools[t], t);
    }

    /* read bandwidth: a buffer far larger than the last-level cache, read whole each run */
    gang g;
    memset(&g, 0, sizeof g);
    g.floats = read_bytes / sizeof(float) / 16 * 16;
    m->read_bytes = g.floats * sizeof(float);
    float *buf = bench_alloc_zero(m->read_bytes);
    if (!buf) return -1;
    g.wbuf = buf;
    g.buf = buf;
    g.read = widest;
    g.n = BENCH_MAX_THREADS;
    bench_pool_parallel_for(pools[BENCH_MAX_THREADS], BENCH_MAX_THREADS, fill_task, &g);
    /* one stream or two, whichever reads faster on one thread (in turns, best of 4 each),
       for every measurement of this run: the limit is the most a core can pull */
    double bw1 = 0, bw2 = 0;
    for (int rep = 0; rep < 4; rep++) {
        const double a = measure_read(widest, buf, g.floats, pools[1], 1, 1);
        const double b = measure_read(widest2, buf, g.floats, pools[1], 1, 1);
        if (a > bw1) bw1 = a;
        if (b > bw2) bw2 = b;
    }
    m->read_streams = bw2 > bw1 ? 2 : 1;
    if (bw2 > bw1) widest = widest2;
    for (size_t t = 1; t <= BENCH_MAX_THREADS; t++)
        m->read_bw[t] = measure_read(widest, buf, g.floats, pools[t], t, 8);
    m->read_buf = buf; /* kept for bench_read_bw_now */
    m->read_fn = (void *)widest;
    return 0;
}

void bench_machine_release(bench_machine *m)
{
    bench_free(m->read_buf);
    m->read_buf = NULL;
}

double bench_read_bw_now(const bench_machine *m, bench_pool *const *pools, size_t threads, int reps)
{
    if (!m->read_buf || threads < 1 || threads > BENCH_MAX_THREADS || reps < 1) return 0;
    return measure_read((read_fn)m->read_fn, m->read_buf, m->read_bytes / sizeof(float),
                        pools[threads], threads, reps);
}

double bench_read_bw_cached(const bench_machine *m, size_t bytes)
{
    if (!m->read_buf || bytes < 64 || bytes > m->read_bytes) return 0;
    const read_fn fn = (read_fn)m->read_fn;
    const size_t n = bytes / sizeof(float);
    const size_t reps = ((size_t)64 << 20) / bytes + 1; /* about 64 MiB of reads per trial */
    volatile float sink = fn(m->read_buf, n);           /* the slice, now in cache */
    double best = 0;
    for (int t = 0; t < 5; t++) {
        const double t0 = now_s();
        for (size_t r = 0; r < reps; r++) sink += fn(m->read_buf, n);
        const double dt = now_s() - t0;
        if (dt > 0 && (double)reps * (double)bytes / dt > best)
            best = (double)reps * (double)bytes / dt;
    }
    (void)sink;
    return best;
}

static int isa_index(const bench_machine *m, const char *name)
{
    for (size_t i = 0; i < m->n_isa; i++)
        if (strcmp(m->isa[i], name) == 0) return (int)i;
    return -1;
}

double bench_fma_peak_best(const bench_machine *m, size_t threads, const char **isa)
{
    double best = 0;
    *isa = "none";
    if (threads < 1 || threads > BENCH_MAX_THREADS) return 0;
    for (size_t i = 0; i < m->n_isa; i++)
        if (m->fma_flops[i][threads] > best) {
            best = m->fma_flops[i][threads];
            *isa = m->isa[i];
        }
    return best;
}

static int peak_index(const bench_machine *m, const char *impl, size_t threads);

double bench_fma_peak_now(const bench_machine *m, bench_pool *const *pools, const char *impl,
                          size_t threads, double seconds)
{
    if (threads < 1 || threads > BENCH_MAX_THREADS) return 0;
    const int i = peak_index(m, impl, threads);
    if (i < 0 || !m->fma_fns[i]) return 0;
    return measure_fma_for((fma_fn)m->fma_fns[i], pools[threads], threads, seconds);
}

/* The ISA impl is judged against: its peak class from the library's registry; for NULL, an
   implementation not compiled in, or a class this CPU cannot run, the best at start-up; -1
   when nothing was measured. */
static int peak_index(const bench_machine *m, const char *impl, size_t threads)
{
    int i = impl ? isa_index(m, sdpa_impl_peak_class(sdpa_impl_find(impl))) : -1;
    if (i < 0) {
        double best = 0;
        for (size_t k = 0; k < m->n_isa; k++)
            if (m->fma_flops[k][threads] > best) {
                best = m->fma_flops[k][threads];
                i = (int)k;
            }
    }
    return i;
}

double bench_fma_peak_for(const bench_machine *m, const char *impl, size_t threads,
                          const char **isa)
{
    *isa = "none";
    if (threads < 1 || threads > BENCH_MAX_THREADS) return 0;
    const int i = peak_index(m, impl, threads);
    if (i < 0) return 0;
    *isa = m->isa[i];
    return m->fma_flops[i][threads];
}
