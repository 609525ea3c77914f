// sdpa_bench.h -- what sdpa-bench's benchmark families share: shapes, test tensors, limits probed
// between iterations, registration entry points
#ifndef SDPA_BENCH_SHARED_H
#define SDPA_BENCH_SHARED_H

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench.h"
#include "sdpa.h"

namespace sdpa_bench
{

// Measured once at start-up (sdpa_bench.cc); the pools run 1..BENCH_MAX_THREADS threads.
extern bench_machine g_machine;
extern bench_pool *g_pools[BENCH_MAX_THREADS + 1];

struct Shape {
    std::string name;
    size_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    bool causal;
    sdpa_dtype kv_type;
};

// ---- shapes and their work (bench_common.cc) --------------------------------------------
const std::vector<Shape> &prefill_shapes();
const std::vector<Shape> &decode_shapes();
size_t dtype_bytes(sdpa_dtype t);
double attended_pairs(const Shape &s);
double shape_flops(const Shape &s);
double shape_kv_bytes(const Shape &s);

// Dense tensors for a shape, made once and kept: decode K/V are hundreds of MiB, and the
// framework calls a benchmark function several times while it sizes the iteration count.
struct Tensors {
    float *q = nullptr, *o = nullptr, *scores = nullptr;
    void *k = nullptr, *v = nullptr;
};

Tensors *tensors_for(const Shape &s, bool with_scores);
sdpa_tensor dense_view(void *data, sdpa_dtype t, size_t heads, size_t len, size_t dim);
sdpa_params make_params(const Shape &s, size_t threads);
benchmark::Counter per_second(double per_iteration);
void evict_caches();
double thread_cpu_seconds();
double median_of(std::vector<double> v);
double seconds_since(std::chrono::steady_clock::time_point t0);
// One call of impl, its wall time in *seconds; on a failed status the row is skipped with it
// (false), else the memory is clobbered so that the call is not optimised away (true).
bool timed_forward(benchmark::State &st, const sdpa_impl *impl, const sdpa_params *p,
                   const sdpa_tensor *q, const sdpa_tensor *k, const sdpa_tensor *v,
                   const sdpa_tensor *o, double *seconds);
// Whether impl's registry row requires the CPU feature key (sdpa_feature_key).
bool requires_feature(const sdpa_impl *impl, const char *key);
// The portable reference implementation: it requires no CPU feature.
bool is_reference(const sdpa_impl *impl);
// The implementations this CPU runs, in registry order; with simd_only, not the reference.
std::vector<const sdpa_impl *> runnable_impls(bool simd_only);

// The limit a run is judged against, sampled between its timed iterations (timing paused):
// once before each iteration and once after the last, averaged. An FMA sample is the best of
// 2 ms runs over 20 ms; a bandwidth sample the better of 2 reads of the start-up buffer.
struct Probe {
    const char *impl; // NULL: the best ISA (BLAS)
    size_t threads;
    bool bandwidth;
    double sum = 0, best = 0;
    int n = 0;
    void sample()
    {
        const double x = bandwidth ? bench_read_bw_now(&g_machine, g_pools, threads, 2)
                                   : bench_fma_peak_now(&g_machine, g_pools, impl, threads, 0.02);
        sum += x;
        best = std::max(best, x);
        n++;
    }
    void sample_paused(benchmark::State &st)
    {
        st.PauseTiming();
        sample();
        st.ResumeTiming();
    }
    double mean() const { return n ? sum / n : 0; }
};

// The fastest single call of a run (its wall time, inside the timed part). Load from other
// processes only ever slows a call down, so the fastest call is the best estimate of what the
// code itself costs; and the limits it is set against are best-of measurements too.
// It also sums the calls, for the mean call the percentages are computed from (plain numbers,
// not rates: a rate counter would print them per second).
struct BestCall {
    double best = INFINITY, sum = 0, last = 0;
    size_t n = 0;
    std::chrono::steady_clock::time_point t0;
    void start() { t0 = std::chrono::steady_clock::now(); }
    void stop()
    {
        const double dt =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (dt < best) best = dt;
        sum += dt;
        last = dt;
        n++;
    }
    double mean() const { return n ? sum / (double)n : INFINITY; }
};

// What a benchmark learns on its first call and keeps across the framework's repeated calls.
struct Once {
    bool done = false;
    long long ws_bytes = -1;
};

// ---- the families' registrations, called by main in this order -----------------------------
// bench_core.cc: the primitives, prefill and decode of one implementation; the BLAS baseline;
// the decode's read pattern alone (needs the AVX-512 peak kernels)
void register_primitives(const sdpa_impl *impl);
void register_forward(const char *kind, const sdpa_impl *impl, const Shape &s, size_t threads);
void register_scaling(const sdpa_impl *impl, const Shape &s);
#ifdef BENCH_HAVE_BLAS
void register_blas(const Shape &s);
#endif
#ifdef BENCH_HAVE_AVX512
void register_pattern(const Shape &s, int order, size_t pf);
// a decode score tile's conversion and FMAs alone, K in L1, on an ISA's kernel (format: 0 f16
// ... 3 q4_0)
void register_mix(const char *isa, double (*fn)(int, uint64_t, float *), int fmt);
// the decode's arithmetic floor of a 16-bit decode shape, on an ISA's kernel (x86 hosts)
void register_floor(const char *isa, bench_floor_fn *fn, const Shape &s, size_t threads);
void register_scaling_floor(const char *isa, bench_floor_fn *fn, const Shape &s);
#endif
// bench_variants.cc, bench_quant.cc, bench_layouts.cc: every supported implementation's rows
// of the family (the filter decides whether main calls them); the summaries print the rows
// that ran, nothing when none did.
void register_variant_rows();
void register_quant_rows();
void register_layout_rows();
void print_variant_summary(FILE *f);
void print_layout_summary(FILE *f);

} // namespace sdpa_bench

#endif // SDPA_BENCH_SHARED_H
