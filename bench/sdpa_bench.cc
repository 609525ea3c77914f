// sdpa_bench.cc -- sdpa-bench: google/benchmark shim over libsdpa's C API, every supported implementation side by side
//
// One run measures, in this order:
//   1. the machine: FMA peak per ISA and read bandwidth at 1 and 2 threads (machine.c), which
//      appear in the run's context (--benchmark_list_tests skips this: it runs nothing);
//   2. per supported implementation (looping over the registry, calling the sdpa_impl_* entry
//      points so that no global selection changes): the three primitives, prefill and decode
//      shapes through sdpa_impl_forward at 1 and 2 threads on a persistent pthread pool;
//   3. the unfused OpenBLAS baseline on the prefill shapes, 1 thread (when built with BLAS);
//   4. only when --benchmark_filter names them ('^variant/'): the attention variants (window,
//      mask, softcap, ALiBi, sinks), each timed in turn with the plain call (see below);
//   5. only when --benchmark_filter names them ('^layout/'): ragged, packed and paged decode
//      batches and a chunked-prefill mix, with the scattered pages' own read speed (see below).
//   6. only when --benchmark_filter names them ('^quant/'): decode and prefill on q8_0 and q4_0
//      K/V, exact and fast scores, each timed in turn with the f16 call (see below).
// Each prefill, decode and BLAS run measures its own limit (the FMA peak of its ISA, or the read
// bandwidth, at its thread count) before every timed iteration and once after the last, outside
// the timed part, and is judged against their mean (Probe below): on a shared machine the speed
// available changes from moment to moment, and the ratio is only honest when both sides were
// measured under the same conditions, interleaved.
//
// Benchmark names are <kind>/<impl>/<shape>[/threads:<n>] (kind: prim, prefill, decode, blas,
// pattern, variant, layout, quant),
// so a filter picks a subset, e.g. --benchmark_filter='^(prefill|decode|blas)/'.
// Counters: FLOP (rate), pct_peak (prefill, blas: % of the FMA peak measured between the
// iterations, in limit_flops; primitives: of the start-up peak), bytes_per_second and pct_bw
// (decode: % of the read bandwidth measured between the iterations, in limit_bytes_per_s;
// primitives: of reading a working set of their size from cache, in limit_bytes_per_s),
// ws_bytes (the library's heap use during one call), extra_bytes (BLAS scores). Percentages are
// plain numbers, from the mean call;
// best_call_ms, pct_peak_best and pct_bw_best (prefill, decode): the fastest single call of the
// run and its percentage against the same limit.
// tools/bench_table.py turns the JSON output into a table.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bench.h"
#include "sdpa.h"

namespace {

bench_machine g_machine;
bench_pool   *g_pools[BENCH_MAX_THREADS + 1];

struct Shape {
    std::string name;
    size_t      batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    bool        causal;
    sdpa_dtype  kv_type;
};

// The shapes of the brief: three prefill (compute-bound) and three decode (memory-bound).
const std::vector<Shape> &prefill_shapes()
{
    static const std::vector<Shape> s = {
        {"B1_H16_L2048_D128_causal", 1, 16, 16, 2048, 2048, 128, true, SDPA_F32},
        {"B1_H32_L512_D64_causal", 1, 32, 32, 512, 512, 64, true, SDPA_F32},
        {"B1_H8_L1024_D128", 1, 8, 8, 1024, 1024, 128, false, SDPA_F32},
    };
    return s;
}

const std::vector<Shape> &decode_shapes()
{
    static const std::vector<Shape> s = {
        {"B1_Hq32_Hkv8_kv32768_D128_f16", 1, 32, 8, 1, 32768, 128, false, SDPA_F16},
        {"B1_Hq32_Hkv8_kv32768_D128_bf16", 1, 32, 8, 1, 32768, 128, false, SDPA_BF16},
        {"B1_Hq32_Hkv32_kv16384_D128_f16", 1, 32, 32, 1, 16384, 128, false, SDPA_F16},
    };
    return s;
}

size_t dtype_bytes(sdpa_dtype t)
{
    return t == SDPA_F32 ? 4 : 2;
}

// (query, key) pairs a head attends to: query i sees keys j <= i + kv_len - q_len when causal.
double attended_pairs(const Shape &s)
{
    if (!s.causal) return (double)s.q_len * (double)s.kv_len;
    double pairs = 0;
    for (size_t i = 0; i < s.q_len; i++) {
        long long lim = (long long)i + (long long)s.kv_len - (long long)s.q_len + 1;
        if (lim > (long long)s.kv_len) lim = (long long)s.kv_len;
        if (lim > 0) pairs += (double)lim;
    }
    return pairs;
}

// 2 FLOPs per multiply-add, once for Q·Kᵀ and once for P·V.
double shape_flops(const Shape &s)
{
    return 4.0 * attended_pairs(s) * (double)s.head_dim * (double)(s.batch * s.q_heads);
}

// K and V read once: what decode moves from memory.
double shape_kv_bytes(const Shape &s)
{
    return 2.0 * (double)(s.batch * s.kv_heads * s.kv_len * s.head_dim) *
           (double)dtype_bytes(s.kv_type);
}

// Dense tensors for a shape, made once and kept: decode K/V are hundreds of MiB, and the
// framework calls a benchmark function several times while it sizes the iteration count.
struct Tensors {
    float *q = nullptr, *o = nullptr, *scores = nullptr;
    void  *k = nullptr, *v = nullptr;
};

Tensors *tensors_for(const Shape &s, bool with_scores)
{
    static std::map<std::string, Tensors> cache;
    Tensors &t = cache[s.name];
    const size_t hd = s.head_dim;
    if (!t.q) {
        t.q = (float *)bench_alloc_random(SDPA_F32, s.batch * s.q_heads * s.q_len * hd, 1);
        t.k = bench_alloc_random(s.kv_type, s.batch * s.kv_heads * s.kv_len * hd, 2);
        t.v = bench_alloc_random(s.kv_type, s.batch * s.kv_heads * s.kv_len * hd, 3);
        t.o = (float *)bench_alloc_zero(s.batch * s.q_heads * s.q_len * hd * sizeof(float));
    }
    if (with_scores && !t.scores) t.scores = (float *)bench_alloc_zero(s.q_len * s.kv_len * 4);
    if (!t.q || !t.k || !t.v || !t.o || (with_scores && !t.scores)) return nullptr;
    return &t;
}

sdpa_tensor dense_view(void *data, sdpa_dtype t, size_t heads, size_t len, size_t dim)
{
    sdpa_tensor v;
    std::memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = t;
    v.token_stride = (ptrdiff_t)dim;
    v.head_stride = (ptrdiff_t)(len * dim);
    v.batch_stride = (ptrdiff_t)(heads * len * dim);
    return v;
}

sdpa_params make_params(const Shape &s, size_t threads)
{
    sdpa_params p;
    std::memset(&p, 0, sizeof p);
    p.batch = s.batch;
    p.q_heads = s.q_heads;
    p.kv_heads = s.kv_heads;
    p.q_len = s.q_len;
    p.kv_len = s.kv_len;
    p.head_dim = s.head_dim;
    p.causal = s.causal;
    p.parallel_for = bench_pool_parallel_for;
    p.pool = g_pools[threads];
    p.n_threads = threads;
    return p;
}

// A counter that reads as "value per second", given the value of one iteration.
benchmark::Counter per_second(double per_iteration)
{
    return benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// The limit a run is judged against, sampled between its timed iterations (timing paused):
// once before each iteration and once after the last, averaged. An FMA sample is the best of
// 2 ms runs over 20 ms; a bandwidth sample the better of 2 reads of the start-up buffer.
struct Probe {
    const char *impl; // NULL: the best ISA (BLAS)
    size_t      threads;
    bool        bandwidth;
    double      sum = 0, best = 0;
    int         n = 0;
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
    double best = INFINITY, sum = 0;
    size_t n = 0;
    std::chrono::steady_clock::time_point t0;
    void start() { t0 = std::chrono::steady_clock::now(); }
    void stop()
    {
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (dt < best) best = dt;
        sum += dt;
        n++;
    }
    double mean() const { return n ? sum / (double)n : INFINITY; }
};

// What a benchmark learns on its first call and keeps across the framework's repeated calls.
struct Once {
    bool      done = false;
    long long ws_bytes = -1;
};

// ---- fused attention through sdpa_impl_forward ------------------------------------------
void register_forward(const char *kind, const sdpa_impl *impl, const Shape &s, size_t threads)
{
    const std::string name = std::string(kind) + "/" + sdpa_impl_name(impl) + "/" + s.name +
                             "/threads:" + std::to_string(threads);
    const bool decode = std::strcmp(kind, "decode") == 0;
    auto once = std::make_shared<Once>();
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State &st) {
        Tensors *t = tensors_for(s, false);
        if (!t) {
            st.SkipWithError("out of memory for the test tensors");
            return;
        }
        const sdpa_params p = make_params(s, threads);
        const sdpa_tensor q = dense_view(t->q, SDPA_F32, s.q_heads, s.q_len, s.head_dim);
        const sdpa_tensor k = dense_view(t->k, s.kv_type, s.kv_heads, s.kv_len, s.head_dim);
        const sdpa_tensor v = dense_view(t->v, s.kv_type, s.kv_heads, s.kv_len, s.head_dim);
        const sdpa_tensor o = dense_view(t->o, SDPA_F32, s.q_heads, s.q_len, s.head_dim);
        Probe probe{sdpa_impl_name(impl), threads, decode};
        BestCall call;
        for (auto _ : st) {
            probe.sample_paused(st);
            // the very first call also counts the library's heap workspace: no separate
            // warm-up, which would double the cost of the slow (scalar) shapes
            const bool track = !once->done;
            if (track) bench_heap_track_begin();
            call.start();
            sdpa_status r = sdpa_impl_forward(impl, &p, &q, &k, &v, &o);
            call.stop();
            if (track) {
                once->ws_bytes = bench_heap_track_end();
                once->done = true;
            }
            if (r != SDPA_OK) {
                st.SkipWithError(sdpa_status_str(r));
                break;
            }
            benchmark::ClobberMemory();
        }
        probe.sample();
        const double limit = probe.mean();
        const double flops = shape_flops(s);
        st.counters["FLOP"] = per_second(flops);
        if (decode) {
            const double bytes = shape_kv_bytes(s);
            st.SetBytesProcessed((int64_t)(bytes * (double)st.iterations()));
            if (limit > 0) {
                st.counters["pct_bw"] = bytes / call.mean() * 100.0 / limit;
                st.counters["pct_bw_best"] = bytes / call.best * 100.0 / limit;
                st.counters["limit_bytes_per_s"] = limit;
            }
        } else if (limit > 0) {
            st.counters["pct_peak"] = flops / call.mean() * 100.0 / limit;
            st.counters["pct_peak_best"] = flops / call.best * 100.0 / limit;
            st.counters["limit_flops"] = limit;
        }
        st.counters["best_call_ms"] = call.best * 1e3;
        st.counters["ws_bytes"] = (double)once->ws_bytes;
    })->UseRealTime()->Unit(benchmark::kMillisecond);
}

// ---- attention variants (issue #14): each against the plain call, interleaved --------------
// A variant row times two calls in turn on the same tensors, in one process: the plain call
// (no window, mask, softcap, ALiBi or sinks) and the variant, in the order AB BA AB BA ... (an
// iteration is two pairs, AB BA) so that a drift of the machine's speed falls on both alike.
// Each pair gives the ratio variant rate / plain rate; the row's `ratio` is the median over its
// pairs (`ratio_mean`: of the mean calls, `ratio_best`: of the fastest calls; `ratio_cpu`: the
// median on the calling thread's CPU time, which leaves out the time it waited for a core on a
// busy machine, and `core_share` the CPU time / wall time of the calls). The framework's
// time is an iteration's four calls (manual time); FLOP (prefill) or bytes_per_second (decode)
// is the variant's rate from its median call, plain_FLOP or plain_bytes_per_second the plain
// call's, each per second (plain values). Rates count useful work: prefill 4 · head_dim
// FLOPs per visible (query, key) pair (the window row: the pairs its window leaves, against
// the plain causal L2048 row's), decode the K and V bytes of the keys it reads (the window
// row: its 4096 keys' K and V).
// Before every decode call (plain or variant) a buffer twice the L3 size is read, untimed, so
// that every call streams its K and V from memory: the window's 16 MiB would otherwise stay in
// a 32 MiB L3 from one call to the next. `applied` is 1 when the variant's output differs from
// the plain call's (0: the library ignored the field), -1 when they cannot be compared.
// The rows are registered only when --benchmark_filter names them (it contains "variant"):
// the scalar rows alone take minutes, far too long for the short main-job run.
struct VariantCase {
    std::string row;    // the shape part of the name: variant/<impl>/<row>/threads:1
    std::string label;  // for the summary table
    double      target; // the ratio it should reach; 0: none
    Shape       plain, shape;
    bool        decode;
    size_t      window;
    float       softcap;
    bool        alibi, mask, sinks;
};

// Keys query row i of s sees with this window: causal, window (|i' - j| < w) or both.
void visible_range(const Shape &s, size_t window, size_t i, long long *first, long long *limit)
{
    const long long ip = (long long)i + (long long)s.kv_len - (long long)s.q_len;
    long long lo = 0, hi = (long long)s.kv_len;
    if (s.causal && ip + 1 < hi) hi = ip + 1;
    if (window) {
        if (ip - (long long)window + 1 > lo) lo = ip - (long long)window + 1;
        if (ip + (long long)window < hi) hi = ip + (long long)window;
    }
    *first = lo;
    *limit = hi > lo ? hi : lo;
}

double visible_pairs(const Shape &s, size_t window)
{
    double pairs = 0;
    for (size_t i = 0; i < s.q_len; i++) {
        long long a, b;
        visible_range(s, window, i, &a, &b);
        pairs += (double)(b - a);
    }
    return pairs;
}

double variant_flops(const Shape &s, size_t window)
{
    return 4.0 * visible_pairs(s, window) * (double)s.head_dim * (double)(s.batch * s.q_heads);
}

// K and V bytes of the keys some query row of a head sees, each read once.
double variant_kv_bytes(const Shape &s, size_t window)
{
    long long lo = (long long)s.kv_len, hi = 0;
    for (size_t i = 0; i < s.q_len; i++) {
        long long a, b;
        visible_range(s, window, i, &a, &b);
        if (a < b) {
            if (a < lo) lo = a;
            if (b > hi) hi = b;
        }
    }
    const double keys = hi > lo ? (double)(hi - lo) : 0.0;
    return 2.0 * (double)(s.batch * s.kv_heads * s.head_dim) * keys * (double)dtype_bytes(s.kv_type);
}

std::vector<VariantCase> variant_cases()
{
    const Shape pre = {"B1_H16_L2048_D128_causal_f16", 1, 16, 16, 2048, 2048, 128, true, SDPA_F16};
    const Shape pre_long = {"B1_H16_L8192_D128_causal_f16", 1, 16, 16, 8192, 8192, 128, true, SDPA_F16};
    const Shape dec = decode_shapes()[0]; // B1_Hq32_Hkv8_kv32768_D128_f16
    const std::string p = "prefill_" + pre.name + "_", d = "decode_" + dec.name + "_";
    //       row, label, target, plain, shape, decode, window, softcap, alibi, mask, sinks
    return {
        {p + "plain", "prefill plain (A/A)", 0, pre, pre, false, 0, 0, false, false, false},
        {p + "softcap30", "prefill softcap 30", 0.85, pre, pre, false, 0, 30, false, false, false},
        {p + "alibi", "prefill ALiBi", 0.90, pre, pre, false, 0, 0, true, false, false},
        {p + "mask_f16_bcast", "prefill f16 mask, broadcast over heads", 0.85, pre, pre, false, 0,
         0, false, true, false},
        {p + "sinks", "prefill sinks", 0.97, pre, pre, false, 0, 0, false, false, true},
        {p + "all", "prefill softcap+ALiBi+mask+sinks", 0, pre, pre, false, 0, 30, true, true, true},
        {"prefill_" + pre_long.name + "_window1024", "prefill L8192 window 1024 (vs plain L2048)",
         0.85, pre, pre_long, false, 1024, 0, false, false, false},
        {d + "plain", "decode plain (A/A)", 0, dec, dec, true, 0, 0, false, false, false},
        {d + "softcap30", "decode softcap 30", 0.90, dec, dec, true, 0, 30, false, false, false},
        {d + "alibi", "decode ALiBi", 0.90, dec, dec, true, 0, 0, true, false, false},
        {d + "mask_f16", "decode f16 mask [1][32][1][32768]", 0.90, dec, dec, true, 0, 0, false,
         true, false},
        {d + "sinks", "decode sinks", 0.90, dec, dec, true, 0, 0, false, false, true},
        {d + "window4096", "decode window 4096", 0.90, dec, dec, true, 4096, 0, false, false, false},
    };
}

// What a variant row needs beyond the shape's tensors, made once per (row, impl) and kept.
struct VariantData {
    float      *o_variant = nullptr;
    std::vector<float> slopes, sinks;
    void       *mask = nullptr;
    sdpa_tensor mask_view;
};

VariantData *variant_data_for(const VariantCase &c)
{
    static std::map<std::string, VariantData> cache;
    const bool fresh = cache.find(c.row) == cache.end();
    VariantData &d = cache[c.row];
    if (!fresh) return d.o_variant ? &d : nullptr;
    const Shape &s = c.shape;
    d.o_variant = (float *)bench_alloc_zero(s.batch * s.q_heads * s.q_len * s.head_dim * 4);
    if (c.alibi) {
        d.slopes.resize(s.q_heads);
        sdpa_alibi_slopes(s.q_heads, 8.0f, d.slopes.data());
    }
    if (c.sinks) {
        float *r = (float *)bench_alloc_random(SDPA_F32, s.q_heads, 21); // logits in [-1, 1)
        if (r) d.sinks.assign(r, r + s.q_heads);
        bench_free(r);
        if (d.sinks.empty()) d.o_variant = nullptr;
    }
    std::memset(&d.mask_view, 0, sizeof d.mask_view);
    if (c.mask) {
        // random finite values in [-1, 1); prefill: one [q_len][kv_len] plane for every head
        // (head_stride 0), decode: a row per query head
        const size_t planes = c.decode ? s.q_heads : 1;
        d.mask = bench_alloc_random(SDPA_F16, s.batch * planes * s.q_len * s.kv_len, 22);
        if (!d.mask) d.o_variant = nullptr;
        d.mask_view.data = d.mask;
        d.mask_view.dtype = SDPA_F16;
        d.mask_view.token_stride = (ptrdiff_t)s.kv_len;
        d.mask_view.head_stride = c.decode ? (ptrdiff_t)(s.q_len * s.kv_len) : 0;
        d.mask_view.batch_stride = (ptrdiff_t)(planes * s.q_len * s.kv_len);
    }
    return d.o_variant ? &d : nullptr;
}

// Evicts the caches before a decode call: reads a buffer of twice the L3 size (32 to 256 MiB).
void evict_caches()
{
    static std::vector<uint64_t> buf;
    if (buf.empty()) {
        sdpa_cache_info ci;
        sdpa_cache_info_get(&ci);
        size_t bytes = 2 * ci.l3_bytes;
        if (bytes < ((size_t)32 << 20)) bytes = (size_t)32 << 20;
        if (bytes > ((size_t)256 << 20)) bytes = (size_t)256 << 20;
        buf.assign(bytes / 8, 1);
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < buf.size(); i += 8) sum += buf[i]; // a word per 64-byte line
    benchmark::DoNotOptimize(sum);
}

// One row's result; the framework calls a row's function several times (sizing runs, then the
// measured one, per repetition): the summary keeps the runs with the most pairs.
struct VariantResult {
    size_t pairs;
    double rate, plain_rate, ratio, ratio_mean, ratio_best, ratio_cpu, core_share;
    int    applied;
};
std::vector<std::pair<std::string, const VariantCase *>> g_variant_rows; // registration order
std::map<std::string, std::vector<VariantResult>>      g_variant_results;

// The calling thread's CPU time, which leaves out the time it waited for a core: a 1-thread
// call runs on the calling thread (a 1-thread pool runs its tasks on the caller).
double thread_cpu_seconds()
{
    timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double median_of(std::vector<double> v)
{
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void register_variant(const sdpa_impl *impl, const VariantCase &c)
{
    const std::string name = std::string("variant/") + sdpa_impl_name(impl) + "/" + c.row +
                             "/threads:1";
    const VariantCase *cp = new VariantCase(c); // lives as long as the program
    g_variant_rows.emplace_back(name, cp);
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State &st) {
        const VariantCase &c = *cp;
        Tensors *tp = tensors_for(c.plain, false);
        Tensors *tv = tensors_for(c.shape, false);
        VariantData *vd = tp && tv ? variant_data_for(c) : nullptr;
        if (!vd) {
            st.SkipWithError("out of memory for the test tensors");
            return;
        }
        auto views = [](const Shape &s, Tensors *t, float *o, sdpa_tensor *v) {
            v[0] = dense_view(t->q, SDPA_F32, s.q_heads, s.q_len, s.head_dim);
            v[1] = dense_view(t->k, s.kv_type, s.kv_heads, s.kv_len, s.head_dim);
            v[2] = dense_view(t->v, s.kv_type, s.kv_heads, s.kv_len, s.head_dim);
            v[3] = dense_view(o, SDPA_F32, s.q_heads, s.q_len, s.head_dim);
        };
        sdpa_tensor xp[4], xv[4];
        views(c.plain, tp, tp->o, xp);
        views(c.shape, tv, vd->o_variant, xv);
        const sdpa_params pp = make_params(c.plain, 1);
        sdpa_params pv = make_params(c.shape, 1);
        pv.window = c.window;
        pv.softcap = c.softcap;
        pv.alibi_slopes = c.alibi ? vd->slopes.data() : nullptr;
        pv.sinks = c.sinks ? vd->sinks.data() : nullptr;
        pv.mask = c.mask ? &vd->mask_view : nullptr;
        const double work_p = c.decode ? variant_kv_bytes(c.plain, 0) : variant_flops(c.plain, 0);
        const double work_v = c.decode ? variant_kv_bytes(c.shape, c.window)
                                       : variant_flops(c.shape, c.window);

        std::vector<double> times_p, times_v, ratios, ratios_cpu;
        double cpu_sum = 0, wall_sum = 0;
        bool failed = false;
        for (auto _ : st) {
            // one iteration: two pairs, AB then BA; its time, the four calls
            double iteration_time = 0;
            for (int pair = 0; pair < 2 && !failed; pair++) {
                double t[2] = {0, 0}, tc[2] = {0, 0}; // [0]: plain, [1]: variant
                for (int w = 0; w < 2; w++) {
                    const int which = w ^ pair;
                    if (c.decode) evict_caches();
                    const double c0 = thread_cpu_seconds();
                    const auto t0 = std::chrono::steady_clock::now();
                    const sdpa_status r =
                        which ? sdpa_impl_forward(impl, &pv, &xv[0], &xv[1], &xv[2], &xv[3])
                              : sdpa_impl_forward(impl, &pp, &xp[0], &xp[1], &xp[2], &xp[3]);
                    t[which] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                    tc[which] = thread_cpu_seconds() - c0;
                    if (r != SDPA_OK) {
                        st.SkipWithError(sdpa_status_str(r));
                        failed = true;
                        break;
                    }
                    benchmark::ClobberMemory();
                }
                if (failed) break;
                iteration_time += t[0] + t[1];
                times_p.push_back(t[0]);
                times_v.push_back(t[1]);
                ratios.push_back((work_v / t[1]) / (work_p / t[0]));
                if (tc[0] > 0 && tc[1] > 0) ratios_cpu.push_back((work_v / tc[1]) / (work_p / tc[0]));
                cpu_sum += tc[0] + tc[1];
                wall_sum += t[0] + t[1];
            }
            if (failed) break;
            st.SetIterationTime(iteration_time);
        }
        if (failed || times_p.empty()) return;
        double sum_p = 0, sum_v = 0;
        for (size_t i = 0; i < times_p.size(); i++) {
            sum_p += times_p[i];
            sum_v += times_v[i];
        }
        VariantResult res;
        res.pairs = times_p.size();
        res.rate = work_v / median_of(times_v);
        res.plain_rate = work_p / median_of(times_p);
        res.ratio = median_of(ratios);
        res.ratio_mean = (work_v / sum_v) / (work_p / sum_p);
        res.ratio_cpu = median_of(ratios_cpu);
        res.core_share = cpu_sum / wall_sum;
        res.ratio_best = (work_v / *std::min_element(times_v.begin(), times_v.end())) /
                         (work_p / *std::min_element(times_p.begin(), times_p.end()));
        res.applied = -1;
        if (c.plain.name == c.shape.name && (c.window || c.softcap > 0 || c.alibi || c.mask || c.sinks)) {
            const size_t bytes = c.shape.batch * c.shape.q_heads * c.shape.q_len * c.shape.head_dim * 4;
            res.applied = std::memcmp(tp->o, vd->o_variant, bytes) != 0;
        }
        g_variant_results[name].push_back(res);

        // rates of the median calls, as plain values: the framework's time mixes both calls
        if (c.decode) {
            st.counters["bytes_per_second"] = res.rate;
            st.counters["plain_bytes_per_second"] = res.plain_rate;
            st.counters["kv_bytes"] = work_v;
        } else {
            st.counters["FLOP"] = res.rate;
            st.counters["plain_FLOP"] = res.plain_rate;
        }
        st.counters["ratio"] = res.ratio;
        st.counters["ratio_mean"] = res.ratio_mean;
        st.counters["ratio_best"] = res.ratio_best;
        st.counters["ratio_cpu"] = res.ratio_cpu;
        st.counters["core_share"] = res.core_share;
        if (c.target > 0) st.counters["target"] = c.target;
        st.counters["applied"] = res.applied;
    })->UseManualTime()->Unit(benchmark::kMillisecond);
}

// The summary of the variant rows that ran, as a Markdown table: per row the variant's and
// the plain call's rates (from their median calls) and the ratio (the median over the pairs);
// with repetitions, the median over those of the measured runs.
void print_variant_summary(FILE *f)
{
    std::vector<std::string> lines;
    double share_cpu = 0, share_pairs = 0;
    for (const auto &row : g_variant_rows) {
        auto it = g_variant_results.find(row.first);
        if (it == g_variant_results.end() || it->second.empty()) continue;
        size_t most = 0;
        for (const VariantResult &r : it->second) most = std::max(most, r.pairs);
        std::vector<double> ratios, ratios_cpu, rates, plain_rates;
        int applied = 1;
        for (const VariantResult &r : it->second)
            if (r.pairs == most) {
                ratios.push_back(r.ratio);
                ratios_cpu.push_back(r.ratio_cpu);
                share_cpu += r.core_share * (double)r.pairs;
                share_pairs += (double)r.pairs;
                rates.push_back(r.rate);
                plain_rates.push_back(r.plain_rate);
                applied = std::min(applied, r.applied);
            }
        const VariantCase &c = *row.second;
        const double ratio = median_of(ratios), ratio_cpu = median_of(ratios_cpu);
        const std::string impl = row.first.substr(8, row.first.find('/', 8) - 8);
        const char *unit = c.decode ? "GB/s" : "GFLOP/s";
        char target[64] = "-", b[512];
        if (c.target > 0)
            std::snprintf(target, sizeof target, ">= %.2f %s", c.target,
                          ratio_cpu >= c.target ? "met" : "**missed**");
        std::snprintf(b, sizeof b, "| %s%s | %s | %.2f %s | %.2f %s | %.3f | %.3f | %s | %zu |",
                      c.label.c_str(), applied == 0 ? " (ignored: output = plain)" : "",
                      impl.c_str(), median_of(rates) / 1e9, unit, median_of(plain_rates) / 1e9,
                      unit, ratio, ratio_cpu, target, most);
        lines.push_back(b);
    }
    if (lines.empty()) return;
    std::fprintf(f, "\nAttention variants against the plain call, 1 thread, timed in turn in one "
                    "process. Rates: the median call's, wall clock. ratio: the median over the "
                    "pairs of variant rate / plain rate, on the wall clock; ratio (CPU): the same on "
                    "the thread's CPU time, which leaves out waits for a core (the calls had %.0f %% "
                    "of a core), and the target is judged on it.\n\n", share_pairs > 0 ? 100.0 * share_cpu / share_pairs : 0.0);
    std::fprintf(f, "| variant | impl | GFLOP/s or GB/s | plain | ratio | ratio (CPU) | target | pairs |\n");
    std::fprintf(f, "|---|---|---:|---:|---:|---:|---|---:|\n");
    for (const std::string &l : lines) std::fprintf(f, "%s\n", l.c_str());
    std::fflush(f);
}

// ---- quantized K/V: q8_0 and q4_0 against f16, interleaved -------------------------------
// A quant row times the f16 call and the same call on K and V quantized to q8_0 or q4_0 (the
// f16 values, quantized by sdpa_quantize_*), in one process on the same Q: exact (q8_scores 0)
// in the order AB BA, fast (q8_scores 1) with the exact call between, ABC CBA, so that a drift
// of the machine's speed falls on every call alike (an iteration is the two passes). Each pass
// gives `ratio` = f16 time / quantized time (the speed-up; for prefill also the GFLOP/s ratio),
// and for fast rows `ratio_exact` = exact time / fast time; the counters are the medians over
// the passes (`ratio_mean`, `ratio_exact_mean`: of the summed times; `ratio_best`: of the
// fastest calls; call_ms, f16_call_ms: the median calls, best_call_ms, f16_best_call_ms: the
// fastest; pairs: the passes). The f16_exact row is the f16 call against itself: the noise of the ratio.
// FLOP and bytes_per_second are the quantized call's rates from its median call (f16_FLOP,
// f16_bytes_per_second: the f16 call's), plain values; decode bytes are each format's own K and
// V bytes (sdpa_dtype_bytes: 34 per 32 elements for q8_0, 18 for q4_0). % of roofline
// (pct_roofline; f16_pct_roofline, exact_pct_roofline for the other calls of the row): the
// shortest time the limits allow over the median call, with the limits sampled before each
// iteration and after the last (Probe), averaged: decode max(bytes / read bandwidth,
// FLOPs / FMA peak of the implementation's ISA), prefill FLOPs / FMA peak (limit_bytes_per_s,
// limit_flops). Every decode call follows an untimed read of twice the L3 size, as the variant
// rows do: q4_0's 36 MiB would otherwise partly stay in cache. max_abs_diff: the largest
// difference of the row's output from the f16 call's. `target`: the speed-up over f16
// at 1 thread (exact rows), `target_exact`: fast over exact where the CPU has VNNI for the
// implementation's ISA. The library refuses fast scores on a K that is not quantized, so f16
// has no fast row. Registered only when --benchmark_filter names them (it contains "quant");
// no scalar rows (a scalar prefill call takes seconds).
struct QuantCase {
    std::string row;  // the shape part of the name: quant/<impl>/<row>/threads:<n>
    Shape       base; // the f16 shape: the baseline, and the values quantized
    sdpa_dtype  fmt;  // SDPA_F16 (the baseline against itself), SDPA_Q8_0 or SDPA_Q4_0
    bool        fast, decode;
};

const char *quant_fmt_name(sdpa_dtype t)
{
    return t == SDPA_Q8_0 ? "q8_0" : t == SDPA_Q4_0 ? "q4_0" : "f16";
}

std::vector<QuantCase> quant_cases()
{
    const Shape dec = decode_shapes()[0]; // B1_Hq32_Hkv8_kv32768_D128_f16
    const Shape pre = {"B1_H16_L2048_D128_causal_f16", 1, 16, 16, 2048, 2048, 128, true, SDPA_F16};
    std::vector<QuantCase> v;
    for (const auto &sh : {std::make_pair(dec, std::string("decode_B1_Hq32_Hkv8_kv32768_D128_")),
                           std::make_pair(pre, std::string("prefill_B1_H16_L2048_D128_causal_"))})
        for (sdpa_dtype t : {SDPA_F16, SDPA_Q8_0, SDPA_Q4_0})
            for (bool fast : {false, true}) {
                if (fast && t == SDPA_F16) continue; // refused by the library
                v.push_back({sh.second + quant_fmt_name(t) + (fast ? "_fast" : "_exact"), sh.first,
                             t, fast, sh.first.q_len == 1});
            }
    return v;
}

// The quantized K and V of a shape (its f16 tensors' values), made once per (shape, format) and
// kept, and the outputs of a row's calls other than the f16 one: one pair per shape, as rows run
// one at a time and each compares its outputs right after its own calls.
struct QuantData {
    void  *k = nullptr, *v = nullptr;
    float *o = nullptr, *o_exact = nullptr;
};

QuantData *quant_data_for(const QuantCase &c, Tensors *base)
{
    static std::map<std::string, QuantData> kv;    // by shape and format
    static std::map<std::string, QuantData> outs;  // by shape
    const Shape &s = c.base;
    const size_t n = s.batch * s.kv_heads * s.kv_len * s.head_dim;
    QuantData &d = kv[s.name + "/" + quant_fmt_name(c.fmt)];
    if (c.fmt == SDPA_F16) {
        d.k = base->k, d.v = base->v;
    } else if (!d.k) {
        d.k = bench_alloc_quantized(c.fmt, base->k, s.kv_type, n);
        d.v = bench_alloc_quantized(c.fmt, base->v, s.kv_type, n);
    }
    if (!d.k || !d.v) return nullptr;
    QuantData &r = outs[s.name];
    const size_t ob = s.batch * s.q_heads * s.q_len * s.head_dim * sizeof(float);
    r.k = d.k, r.v = d.v;
    if (!r.o) r.o = (float *)bench_alloc_zero(ob);
    if (c.fast && !r.o_exact) r.o_exact = (float *)bench_alloc_zero(ob);
    return r.o && (!c.fast || r.o_exact) ? &r : nullptr;
}

// Whether the implementation named impl requires the CPU feature key (its registry row says).
bool requires_feature(const char *impl, const char *key)
{
    const char *k;
    for (size_t i = 0; (k = sdpa_impl_requires_key(sdpa_impl_find(impl), i)) != nullptr; i++)
        if (std::strcmp(k, key) == 0) return true;
    return false;
}

// Whether an implementation's fast scores take int8 dot products of VNNI (vpdpbusd): one that
// requires AVX-512 VNNI (the others use pmaddubsw).
bool has_vnni(const char *impl) { return requires_feature(impl, "avx512vnni"); }

// The speed-up over f16 of an exact row, 1 thread; 0: none.
double quant_target(const QuantCase &c, const char *impl)
{
    // the targets are for the AVX-512 implementations and the AVX2+FMA one
    const bool a512 = requires_feature(impl, "avx512f"),
               a2 = !a512 && requires_feature(impl, "fma");
    if (c.fast || c.fmt == SDPA_F16 || !(a512 || a2)) return 0;
    if (!c.decode) return 0.85;
    if (c.fmt == SDPA_Q8_0) return a512 ? 1.6 : 1.3;
    return a512 ? 2.2 : 1.6;
}

void register_quant(const sdpa_impl *impl, const QuantCase &c, size_t threads)
{
    const std::string name = std::string("quant/") + sdpa_impl_name(impl) + "/" + c.row +
                             "/threads:" + std::to_string(threads);
    const QuantCase *cp = new QuantCase(c); // lives as long as the program
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State &st) {
        const QuantCase &c = *cp;
        const Shape &s = c.base;
        Tensors *tb = tensors_for(s, false);
        QuantData *qd = tb ? quant_data_for(c, tb) : nullptr;
        if (!qd) {
            st.SkipWithError("out of memory for the test tensors");
            return;
        }
        const sdpa_tensor q = dense_view(tb->q, SDPA_F32, s.q_heads, s.q_len, s.head_dim);
        const sdpa_tensor kb = dense_view(tb->k, s.kv_type, s.kv_heads, s.kv_len, s.head_dim);
        const sdpa_tensor vb = dense_view(tb->v, s.kv_type, s.kv_heads, s.kv_len, s.head_dim);
        const sdpa_tensor kq = dense_view(qd->k, c.fmt, s.kv_heads, s.kv_len, s.head_dim);
        const sdpa_tensor vq = dense_view(qd->v, c.fmt, s.kv_heads, s.kv_len, s.head_dim);
        // calls: [0] f16, then (fast rows) [1] exact on the quantized K/V, last the row's own
        struct Call {
            sdpa_params        p;
            const sdpa_tensor *k, *v;
            sdpa_tensor        o;
            double             bytes;
        };
        const double elems = (double)(s.batch * s.kv_heads * s.kv_len * s.head_dim);
        const double bytes_b = 2.0 * (double)sdpa_dtype_bytes(s.kv_type, (size_t)elems);
        const double bytes_q = 2.0 * (double)sdpa_dtype_bytes(c.fmt, (size_t)elems);
        std::vector<Call> calls;
        calls.push_back({make_params(s, threads), &kb, &vb,
                         dense_view(tb->o, SDPA_F32, s.q_heads, s.q_len, s.head_dim), bytes_b});
        if (c.fast)
            calls.push_back({make_params(s, threads), &kq, &vq,
                             dense_view(qd->o_exact, SDPA_F32, s.q_heads, s.q_len, s.head_dim), bytes_q});
        calls.push_back({make_params(s, threads), &kq, &vq,
                         dense_view(qd->o, SDPA_F32, s.q_heads, s.q_len, s.head_dim), bytes_q});
        calls.back().p.q8_scores = c.fast ? 1 : 0;
        const size_t nc = calls.size(), last = nc - 1;
        const double flops = shape_flops(s);

        Probe bw{sdpa_impl_name(impl), threads, true}, peak{sdpa_impl_name(impl), threads, false};
        std::vector<std::vector<double>> times(nc);
        std::vector<double> ratios, ratios_exact;
        bool failed = false;
        for (auto _ : st) {
            // manual time: the probes and cache evictions stay outside it
            peak.sample();
            if (c.decode) bw.sample();
            double iteration_time = 0;
            for (int pass = 0; pass < 2 && !failed; pass++) {
                std::vector<double> t(nc, 0);
                for (size_t w = 0; w < nc; w++) {
                    const size_t i = pass ? nc - 1 - w : w;
                    if (c.decode) evict_caches();
                    const auto t0 = std::chrono::steady_clock::now();
                    const sdpa_status r = sdpa_impl_forward(impl, &calls[i].p, &q, calls[i].k,
                                                            calls[i].v, &calls[i].o);
                    t[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                    if (r != SDPA_OK) {
                        st.SkipWithError(sdpa_status_str(r));
                        failed = true;
                        break;
                    }
                    benchmark::ClobberMemory();
                }
                if (failed) break;
                for (size_t i = 0; i < nc; i++) {
                    times[i].push_back(t[i]);
                    iteration_time += t[i];
                }
                ratios.push_back(t[0] / t[last]);
                if (c.fast) ratios_exact.push_back(t[1] / t[last]);
            }
            if (failed) break;
            st.SetIterationTime(iteration_time);
        }
        if (failed || times[0].empty()) return;
        peak.sample();
        if (c.decode) bw.sample();
        std::vector<double> tmed(nc), tsum(nc, 0), tmin(nc);
        for (size_t i = 0; i < nc; i++) {
            tmed[i] = median_of(times[i]);
            tmin[i] = *std::min_element(times[i].begin(), times[i].end());
            for (double x : times[i]) tsum[i] += x;
        }
        const double lim_flops = peak.mean(), lim_bw = bw.mean();
        // the shortest time the limits allow for call i, 0 when a limit is missing
        auto t_roof = [&](size_t i) {
            if (lim_flops <= 0 || (c.decode && lim_bw <= 0)) return 0.0;
            return std::max(c.decode ? calls[i].bytes / lim_bw : 0.0, flops / lim_flops);
        };
        st.counters["FLOP"] = flops / tmed[last];
        st.counters["f16_FLOP"] = flops / tmed[0];
        if (c.decode) {
            st.counters["bytes_per_second"] = bytes_q / tmed[last];
            st.counters["f16_bytes_per_second"] = bytes_b / tmed[0];
            st.counters["kv_bytes"] = bytes_q;
            if (lim_bw > 0) st.counters["limit_bytes_per_s"] = lim_bw;
        }
        if (lim_flops > 0) st.counters["limit_flops"] = lim_flops;
        if (t_roof(last) > 0) {
            st.counters["pct_roofline"] = t_roof(last) / tmed[last] * 100.0;
            st.counters["f16_pct_roofline"] = t_roof(0) / tmed[0] * 100.0;
            if (c.fast) st.counters["exact_pct_roofline"] = t_roof(1) / tmed[1] * 100.0;
        }
        st.counters["ratio"] = median_of(ratios);
        st.counters["ratio_mean"] = tsum[0] / tsum[last];
        st.counters["ratio_best"] = tmin[0] / tmin[last];
        if (c.fast) {
            st.counters["ratio_exact"] = median_of(ratios_exact);
            st.counters["ratio_exact_mean"] = tsum[1] / tsum[last];
        }
        st.counters["call_ms"] = tmed[last] * 1e3;
        st.counters["f16_call_ms"] = tmed[0] * 1e3;
        st.counters["best_call_ms"] = tmin[last] * 1e3;
        st.counters["f16_best_call_ms"] = tmin[0] * 1e3;
        st.counters["pairs"] = (double)ratios.size();
        const double target = threads == 1 ? quant_target(c, sdpa_impl_name(impl)) : 0;
        if (target > 0) st.counters["target"] = target;
        if (c.fast && threads == 1 && has_vnni(sdpa_impl_name(impl))) st.counters["target_exact"] = 1.3;
        double diff = 0;
        const size_t no = s.batch * s.q_heads * s.q_len * s.head_dim;
        const float *ob = (const float *)calls[0].o.data, *oq = (const float *)calls[last].o.data;
        for (size_t i = 0; i < no; i++) diff = std::max(diff, (double)std::fabs(oq[i] - ob[i]));
        st.counters["max_abs_diff"] = diff;
    })->UseManualTime()->Unit(benchmark::kMillisecond);
}

// ---- serving layouts (issue #15): ragged, packed and paged decode batches --------------------
// A decode batch of 8 sequences, 32/8 heads, D128, f16 K/V, kv lengths spread from 512 to
// 32768, in each layout the library takes: `uniform` (8 sequences of the mean length, the
// plain call: the reference for % of roofline), `padded` (kv_lens over dense [8][8][32768][128]
// views), `packed` (cu_kv over head-major [8][tokens][128]) and `paged16` / `paged128` (a
// shuffled block table over pages [n_pages][8][page][128]). `scatter16` / `scatter128` read the
// paged rows' K and V pages in the order the decode does, with nothing but a sum: what this
// machine's memory gives for scattered pages, the ceiling of the paged rows. `mix` is vLLM's
// chunked prefill: one sequence prefilling 512 queries (causal, 2048 keys) beside 15 decodes
// (512..8192 keys), queries packed; its roofline is the prefill's FLOPs at the measured FMA
// peak plus the decodes' K/V bytes at the measured read bandwidth. Rows report the K/V bytes
// the calls read (each sequence's keys once) and pct_bw_best, the fastest call against the
// highest read bandwidth sampled between iterations (pct_roofline_best for the mix), and the
// summary the ratios, in one run.
// Registered only when --benchmark_filter names them (it contains "layout").
struct LayoutData {
    size_t                 B = 8, Hq = 32, Hkv = 8, D = 128, Lk = 32768, mean = 0;
    std::vector<size_t>    lens, q_lens, cu_kv;
    void                  *k = nullptr, *v = nullptr, *kp = nullptr, *vp = nullptr; // padded, packed
    void                  *pk[2] = {nullptr, nullptr}, *pv[2] = {nullptr, nullptr}; // pages 16, 128
    std::vector<int32_t>   table[2];
    size_t                 n_pages[2] = {0, 0}, max_pages[2] = {0, 0};
    float                 *q = nullptr, *o = nullptr;
    double                 bytes = 0; // K/V bytes of the ragged batch
    // the mix
    size_t                 mB = 16, mLq = 512, mLk = 8192;
    std::vector<size_t>    m_cu_q, m_cu_kv;
    void                  *mk = nullptr, *mv = nullptr;
    float                 *mq = nullptr, *mo = nullptr;
    double                 m_flops = 0, m_bytes = 0; // the prefill's FLOPs, the decodes' bytes
    bool                   ok = false;
};
const size_t g_layout_pages[2] = {16, 128};

LayoutData *layout_data()
{
    static LayoutData d;
    static bool made = false;
    if (made) return d.ok ? &d : nullptr;
    made = true;
    d.lens = {512, 32768, 1024, 16384, 2048, 24576, 4096, 8192};
    d.q_lens.assign(d.B, 1);
    d.cu_kv.assign(d.B + 1, 0);
    size_t total = 0;
    for (size_t b = 0; b < d.B; b++) d.cu_kv[b + 1] = d.cu_kv[b] + d.lens[b], total += d.lens[b];
    d.mean = total / d.B;
    const size_t row = d.D * 2; // f16 bytes per K or V row
    d.bytes = 2.0 * (double)total * (double)d.Hkv * (double)row;
    d.k = bench_alloc_random(SDPA_F16, d.B * d.Hkv * d.Lk * d.D, 31);
    d.v = bench_alloc_random(SDPA_F16, d.B * d.Hkv * d.Lk * d.D, 32);
    d.kp = bench_alloc_zero(d.Hkv * total * row);
    d.vp = bench_alloc_zero(d.Hkv * total * row);
    d.q = (float *)bench_alloc_random(SDPA_F32, d.B * d.Hq * d.D, 33);
    d.o = (float *)bench_alloc_zero(d.B * d.Hq * d.D * sizeof(float));
    if (!d.k || !d.v || !d.kp || !d.vp || !d.q || !d.o) return nullptr;
    auto src = [&](void *base, size_t b, size_t h, size_t j) {
        return (const char *)base + ((b * d.Hkv + h) * d.Lk + j) * row;
    };
    for (size_t b = 0; b < d.B; b++)
        for (size_t h = 0; h < d.Hkv; h++) {
            std::memcpy((char *)d.kp + (h * total + d.cu_kv[b]) * row, src(d.k, b, h, 0), d.lens[b] * row);
            std::memcpy((char *)d.vp + (h * total + d.cu_kv[b]) * row, src(d.v, b, h, 0), d.lens[b] * row);
        }
    for (int s = 0; s < 2; s++) {
        const size_t ps = g_layout_pages[s];
        d.max_pages[s] = d.Lk / ps;
        size_t used = 0;
        for (size_t b = 0; b < d.B; b++) used += (d.lens[b] + ps - 1) / ps;
        d.n_pages[s] = used;
        std::vector<size_t> perm(used);
        for (size_t i = 0; i < used; i++) perm[i] = i;
        uint64_t x = 77 + (uint64_t)s; // a fixed shuffle (splitmix64)
        for (size_t i = used - 1; i > 0; i--) {
            uint64_t z = (x += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            std::swap(perm[i], perm[(z ^ (z >> 31)) % (i + 1)]);
        }
        const size_t page_bytes = d.Hkv * ps * row;
        d.pk[s] = bench_alloc_zero(used * page_bytes);
        d.pv[s] = bench_alloc_zero(used * page_bytes);
        if (!d.pk[s] || !d.pv[s]) return nullptr;
        d.table[s].assign(d.B * d.max_pages[s], -1);
        size_t next = 0;
        for (size_t b = 0; b < d.B; b++)
            for (size_t pg = 0; pg * ps < d.lens[b]; pg++) {
                const size_t P = perm[next++];
                d.table[s][b * d.max_pages[s] + pg] = (int32_t)P;
                for (size_t h = 0; h < d.Hkv; h++) {
                    char *dk = (char *)d.pk[s] + P * page_bytes + h * ps * row;
                    char *dv = (char *)d.pv[s] + P * page_bytes + h * ps * row;
                    std::memcpy(dk, src(d.k, b, h, pg * ps), ps * row);
                    std::memcpy(dv, src(d.v, b, h, pg * ps), ps * row);
                }
            }
    }
    // the mix: 512 queries over 2048 keys, then 15 decodes of 512..8192 keys, all packed
    std::vector<size_t> mlen = {2048};
    for (size_t i = 1; i < d.mB; i++) mlen.push_back(512 + (i - 1) * (8192 - 512) / 14);
    d.m_cu_q.assign(d.mB + 1, 0);
    d.m_cu_kv.assign(d.mB + 1, 0);
    for (size_t b = 0; b < d.mB; b++) {
        d.m_cu_q[b + 1] = d.m_cu_q[b] + (b ? 1 : d.mLq);
        d.m_cu_kv[b + 1] = d.m_cu_kv[b] + mlen[b];
        if (b) d.m_bytes += 2.0 * (double)mlen[b] * (double)d.Hkv * (double)row;
    }
    for (size_t i = 0; i < d.mLq; i++) d.m_flops += (double)(i + mlen[0] - d.mLq + 1); // causal pairs
    d.m_flops *= 4.0 * (double)d.D * (double)d.Hq;
    const size_t mt = d.m_cu_kv[d.mB], qt = d.m_cu_q[d.mB];
    d.mk = bench_alloc_random(SDPA_F16, d.Hkv * mt * d.D, 34);
    d.mv = bench_alloc_random(SDPA_F16, d.Hkv * mt * d.D, 35);
    d.mq = (float *)bench_alloc_random(SDPA_F32, qt * d.Hq * d.D, 36);
    d.mo = (float *)bench_alloc_zero(qt * d.Hq * d.D * sizeof(float));
    d.ok = d.mk && d.mv && d.mq && d.mo;
    return d.ok ? &d : nullptr;
}

// Sums the K and V pages of sequence b, KV head h, in the decode's order (a page's K rows, then
// its V rows), requesting the next page's lines one page ahead.
struct ScatterArg {
    const LayoutData *d;
    int               s;
    uint64_t          sum[BENCH_MAX_THREADS + 1];
};
void scatter_task(void *arg, size_t task, size_t thread)
{
    ScatterArg *a = (ScatterArg *)arg;
    const LayoutData &d = *a->d;
    const size_t ps = g_layout_pages[a->s], b = task / d.Hkv, h = task % d.Hkv, row = d.D * 2;
    const size_t page_bytes = d.Hkv * ps * row, np = (d.lens[b] + ps - 1) / ps;
    uint64_t sum = 0;
    for (size_t pg = 0; pg < np; pg++) {
        const size_t P = (size_t)d.table[a->s][b * d.max_pages[a->s] + pg];
        const size_t n = std::min(ps, d.lens[b] - pg * ps) * row;
        const char *kr = (const char *)d.pk[a->s] + P * page_bytes + h * ps * row;
        const char *vr = (const char *)d.pv[a->s] + P * page_bytes + h * ps * row;
        if (pg + 1 < np) {
            const size_t Pn = (size_t)d.table[a->s][b * d.max_pages[a->s] + pg + 1];
            const char *kn = (const char *)d.pk[a->s] + Pn * page_bytes + h * ps * row;
            const char *vn = (const char *)d.pv[a->s] + Pn * page_bytes + h * ps * row;
            for (size_t o = 0; o < n; o += 64) __builtin_prefetch(kn + o), __builtin_prefetch(vn + o);
        }
        for (const char *p : {kr, vr}) {
            const uint64_t *w = (const uint64_t *)(const void *)p;
            for (size_t i = 0; i < n / 8; i++) sum += w[i];
        }
    }
    a->sum[thread] += sum;
}

enum LayoutKind { LK_UNIFORM, LK_PADDED, LK_PACKED, LK_PAGED16, LK_PAGED128, LK_SCATTER16, LK_SCATTER128, LK_MIX };
const char *const g_layout_names[] = {"uniform", "padded", "packed", "paged16", "paged128",
                                      "scatter16", "scatter128", "mix"};
struct LayoutResult {
    double bytes_per_s, pct; // pct: of the read bandwidth (the mix: of its roofline)
};
std::map<std::string, LayoutResult> g_layout_results; // "<impl>/<kind>/<threads>"

void register_layout(const sdpa_impl *impl, LayoutKind kind, size_t threads)
{
    const bool scatter = kind == LK_SCATTER16 || kind == LK_SCATTER128;
    const std::string iname = scatter ? "read" : sdpa_impl_name(impl);
    const std::string name = std::string("layout/") + iname + "/" + g_layout_names[kind] + "/threads:" +
                             std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State &st) {
        LayoutData *d = layout_data();
        if (!d) {
            st.SkipWithError("out of memory for the layout tensors");
            return;
        }
        const size_t row = d->D * 2;
        sdpa_params p;
        std::memset(&p, 0, sizeof p);
        p.batch = d->B, p.q_heads = d->Hq, p.kv_heads = d->Hkv, p.q_len = 1, p.kv_len = d->Lk;
        p.head_dim = d->D;
        p.parallel_for = bench_pool_parallel_for, p.pool = g_pools[threads], p.n_threads = threads;
        sdpa_tensor q = dense_view(d->q, SDPA_F32, d->Hq, 1, d->D), o = dense_view(d->o, SDPA_F32, d->Hq, 1, d->D);
        sdpa_tensor k = dense_view(d->k, SDPA_F16, d->Hkv, d->Lk, d->D), v = dense_view(d->v, SDPA_F16, d->Hkv, d->Lk, d->D);
        double bytes = d->bytes;
        const int s = kind == LK_PAGED128 || kind == LK_SCATTER128;
        switch (kind) {
        case LK_UNIFORM: // the mean length for all, in the padded buffers
            p.kv_len = d->mean;
            bytes = 2.0 * (double)(d->B * d->Hkv * d->mean) * (double)row;
            break;
        case LK_PADDED: p.kv_lens = d->lens.data(); break;
        case LK_PACKED: {
            const size_t total = d->cu_kv[d->B];
            p.cu_kv = d->cu_kv.data();
            k = {d->kp, SDPA_F16, 0, (ptrdiff_t)(total * d->D), (ptrdiff_t)d->D};
            v = {d->vp, SDPA_F16, 0, (ptrdiff_t)(total * d->D), (ptrdiff_t)d->D};
            break;
        }
        case LK_PAGED16:
        case LK_PAGED128: {
            const size_t ps = g_layout_pages[s];
            p.kv_lens = d->lens.data();
            p.block_table = d->table[s].data(), p.page_size = ps, p.max_pages = d->max_pages[s];
            p.n_pages = d->n_pages[s];
            k = {d->pk[s], SDPA_F16, (ptrdiff_t)(d->Hkv * ps * d->D), (ptrdiff_t)(ps * d->D), (ptrdiff_t)d->D};
            v = {d->pv[s], SDPA_F16, (ptrdiff_t)(d->Hkv * ps * d->D), (ptrdiff_t)(ps * d->D), (ptrdiff_t)d->D};
            break;
        }
        case LK_MIX: {
            const size_t kt = d->m_cu_kv[d->mB];
            p.batch = d->mB, p.q_len = d->mLq, p.kv_len = d->mLk, p.causal = true;
            p.cu_q = d->m_cu_q.data(), p.cu_kv = d->m_cu_kv.data();
            q = {d->mq, SDPA_F32, 0, (ptrdiff_t)d->D, (ptrdiff_t)(d->Hq * d->D)};
            o = {d->mo, SDPA_F32, 0, (ptrdiff_t)d->D, (ptrdiff_t)(d->Hq * d->D)};
            k = {d->mk, SDPA_F16, 0, (ptrdiff_t)(kt * d->D), (ptrdiff_t)d->D};
            v = {d->mv, SDPA_F16, 0, (ptrdiff_t)(kt * d->D), (ptrdiff_t)d->D};
            bytes = d->m_bytes + 2.0 * 2048.0 * (double)(d->Hkv * row);
            break;
        }
        default: break;
        }
        Probe bw{nullptr, threads, true}, peak{sdpa_impl_name(impl), threads, false};
        BestCall call;
        ScatterArg sa{d, s, {0}};
        for (auto _ : st) {
            st.PauseTiming();
            bw.sample();
            if (kind == LK_MIX) peak.sample();
            st.ResumeTiming();
            call.start();
            sdpa_status r = SDPA_OK;
            if (scatter)
                bench_pool_parallel_for(g_pools[threads], d->B * d->Hkv, scatter_task, &sa);
            else
                r = sdpa_impl_forward(impl, &p, &q, &k, &v, &o);
            call.stop();
            if (r != SDPA_OK) {
                st.SkipWithError(sdpa_status_str(r));
                break;
            }
            benchmark::ClobberMemory();
        }
        benchmark::DoNotOptimize(sa.sum[0] + sa.sum[1]);
        bw.sample();
        if (kind == LK_MIX) peak.sample();
        // the fastest call against the highest limit sampled: both best-of measurements, as
        // load from other processes only ever lowers either
        const double limit = bw.best;
        st.SetBytesProcessed((int64_t)(bytes * (double)st.iterations()));
        LayoutResult res{bytes / call.best, 0};
        if (kind == LK_MIX && limit > 0 && peak.best > 0) {
            const double roof = d->m_flops / peak.best + d->m_bytes / limit; // seconds
            res.pct = roof / call.best * 100.0;
            st.counters["pct_roofline_best"] = res.pct;
        } else if (limit > 0) {
            res.pct = bytes / call.best * 100.0 / limit;
            st.counters["pct_bw_best"] = res.pct;
            st.counters["limit_bytes_per_s"] = limit;
        }
        st.counters["best_call_ms"] = call.best * 1e3;
        st.counters["bytes_per_second_best"] = res.bytes_per_s;
        g_layout_results[iname + "/" + g_layout_names[kind] + "/" + std::to_string(threads)] = res;
    })->UseRealTime()->Unit(benchmark::kMillisecond);
}

// The ratios from the layout rows that ran, one table (fastest calls, one run).
void print_layout_summary(FILE *f)
{
    if (g_layout_results.empty()) return;
    auto get = [](const std::string &key, double *bps, double *pct) {
        auto it = g_layout_results.find(key);
        if (it == g_layout_results.end()) return false;
        *bps = it->second.bytes_per_s, *pct = it->second.pct;
        return true;
    };
    std::fprintf(f, "\nServing layouts, decode batch 8 (32/8 heads, D128 f16, kv 512..32768), fastest "
                    "calls of one run. GB/s: K/V bytes read once per call; %%: of the read bandwidth "
                    "measured between calls (mix: of its roofline).\n\n");
    std::fprintf(f, "| impl | threads | row | GB/s | %% | ratio | against | target |\n|---|---:|---|---:|---:|---:|---|---|\n");
    for (size_t i = 0; i < sdpa_impl_count(); i++)
        for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) {
            const char *impl = sdpa_impl_name(sdpa_impl_at(i)); // rows only where it was run
            const std::string base = std::string(impl) + "/";
            const std::string ts = "/" + std::to_string(t);
            double ub = 0, up = 0, pb = 0, pp = 0;
            if (!get(base + "uniform" + ts, &ub, &up) || !get(base + "padded" + ts, &pb, &pp)) continue;
            std::fprintf(f, "| %s | %zu | uniform | %.2f | %.1f | | | |\n", impl, t, ub / 1e9, up);
            for (const char *r : {"padded", "packed"}) {
                double b = 0, pc = 0;
                if (!get(base + r + ts, &b, &pc)) continue;
                std::fprintf(f, "| %s | %zu | %s | %.2f | %.1f | %.3f | %% of uniform's %% | >= 0.90 %s |\n", impl, t, r,
                             b / 1e9, pc, pc / up, pc / up >= 0.90 ? "met" : "**missed**");
                double b1 = 0, p1 = 0;
                if (t > 1 && get(base + r + "/1", &b1, &p1))
                    std::fprintf(f, "| %s | %zu | %s, speed-up | | | %.3f | 1 thread | >= 1.7 %s |\n", impl, t, r,
                                 b / b1, b / b1 >= 1.7 ? "met" : "**missed**");
            }
            for (int s = 0; s < 2; s++) {
                double b = 0, pc = 0, sb = 0, sp = 0;
                const std::string pr = s ? "paged128" : "paged16";
                if (!get(base + pr + ts, &b, &pc)) continue;
                const double target = s ? 0.97 : 0.90;
                std::fprintf(f, "| %s | %zu | %s | %.2f | %.1f | %.3f | padded GB/s | >= %.2f %s |\n", impl, t, pr.c_str(),
                             b / 1e9, pc, b / pb, target, b / pb >= target ? "met" : "**missed**");
                if (get(std::string("read/") + (s ? "scatter128" : "scatter16") + ts, &sb, &sp))
                    std::fprintf(f, "| %s | %zu | %s | | | %.3f | the same pages read alone (%.2f GB/s) | |\n", impl, t,
                                 pr.c_str(), b / sb, sb / 1e9);
            }
            double mb = 0, mp = 0;
            if (get(base + "mix" + ts, &mb, &mp))
                std::fprintf(f, "| %s | %zu | mix (512-query prefill + 15 decodes) | %.2f | %.1f | | | |\n", impl, t,
                             mb / 1e9, mp);
        }
    std::fflush(f);
}

// ---- the decode's reads alone (AVX-512 hosts) --------------------------------------------
// K and V of the first decode shape (16-bit) walked in the decode kernel's block order with
// nothing but the conversion and a sum (bench_kv_walk_avx512), judged against the same read
// bandwidth as decode: how much of the gap between a decode row and 100 % the order and the
// prefetching of its reads alone would cost. Names: pattern/avx512/<shape>_<order>_pf<rows>.
#ifdef BENCH_HAVE_AVX512
void register_pattern(const Shape &s, int order, size_t pf)
{
    const std::string name = std::string("pattern/avx512/") + s.name + (order ? "_tiles" : "_rows") +
                             "_pf" + std::to_string(pf) + "/threads:1";
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State &st) {
        Tensors *t = tensors_for(s, false);
        if (!t) {
            st.SkipWithError("out of memory for the test tensors");
            return;
        }
        Probe probe{BENCH_HAVE_AVX512, 1, true};
        BestCall call;
        const size_t rows = s.batch * s.kv_heads * s.kv_len;
        float sink = 0;
        for (auto _ : st) {
            probe.sample_paused(st);
            call.start();
            sink += bench_kv_walk_avx512((const uint16_t *)t->k, (const uint16_t *)t->v, rows,
                                         s.head_dim, 256, order, pf);
            call.stop();
            benchmark::DoNotOptimize(sink);
        }
        probe.sample();
        const double limit = probe.mean(), bytes = shape_kv_bytes(s);
        st.SetBytesProcessed((int64_t)(bytes * (double)st.iterations()));
        if (limit > 0) {
            st.counters["pct_bw"] = bytes / call.mean() * 100.0 / limit;
            st.counters["pct_bw_best"] = bytes / call.best * 100.0 / limit;
            st.counters["limit_bytes_per_s"] = limit;
        }
        st.counters["best_call_ms"] = call.best * 1e3;
    })->UseRealTime()->Unit(benchmark::kMillisecond);
}
#endif

// ---- the three primitives, single-threaded ---------------------------------------------
constexpr size_t kPrimN = 4096, kPrimD = 128;

// A primitive's data fits in cache (score and accumulate: 2 MiB of K or V, softmax: 16 KiB), so
// it is judged against the FMA peak of its implementation (pct_peak, when it does arithmetic)
// and against reading a working set of its size from cache (pct_bw, limit_bytes_per_s), never
// against memory bandwidth. `seconds`: the loop's wall time over st.iterations() calls.
void prim_counters(benchmark::State &st, const sdpa_impl *impl, double items, double bytes,
                   double flops, double seconds)
{
    st.SetItemsProcessed((int64_t)(items * (double)st.iterations()));
    st.SetBytesProcessed((int64_t)(bytes * (double)st.iterations()));
    if (flops > 0) st.counters["FLOP"] = per_second(flops);
    const double call = st.iterations() ? seconds / (double)st.iterations() : 0;
    if (call <= 0) return;
    const char *isa;
    const double peak = bench_fma_peak_for(&g_machine, sdpa_impl_name(impl), 1, &isa);
    if (flops > 0 && peak > 0) st.counters["pct_peak"] = flops / call * 100.0 / peak;
    static std::map<size_t, double> cached; // by working-set size, measured once
    const size_t ws = (size_t)bytes;
    if (!cached.count(ws)) cached[ws] = bench_read_bw_cached(&g_machine, ws);
    if (cached[ws] > 0) {
        st.counters["pct_bw"] = bytes / call * 100.0 / cached[ws];
        st.counters["limit_bytes_per_s"] = cached[ws];
    }
}

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void register_primitives(const sdpa_impl *impl)
{
    const std::string in = sdpa_impl_name(impl);
    benchmark::RegisterBenchmark(("prim/" + in + "/score_n4096_d128").c_str(),
                                 [=](benchmark::State &st) {
        const size_t n = kPrimN, d = kPrimD;
        float *q = (float *)bench_alloc_random(SDPA_F32, d, 11);
        float *k = (float *)bench_alloc_random(SDPA_F32, n * d, 12);
        float *s = (float *)bench_alloc_zero(n * sizeof(float));
        if (!q || !k || !s) {
            st.SkipWithError("out of memory");
        } else {
            const auto t0 = std::chrono::steady_clock::now();
            for (auto _ : st) {
                sdpa_impl_score_f32(impl, q, k, d, n, d, 0.088f, s);
                benchmark::ClobberMemory();
            }
            prim_counters(st, impl, (double)n, (double)(n * d + d + n) * 4.0, 2.0 * (double)(n * d),
                          seconds_since(t0));
        }
        bench_free(q);
        bench_free(k);
        bench_free(s);
    })->UseRealTime();

    benchmark::RegisterBenchmark(("prim/" + in + "/softmax_n4096").c_str(),
                                 [=](benchmark::State &st) {
        const size_t n = kPrimN;
        float *s = (float *)bench_alloc_random(SDPA_F32, n, 13);
        if (!s) {
            st.SkipWithError("out of memory");
            return;
        }
        const auto t0 = std::chrono::steady_clock::now();
        for (auto _ : st) {
            // a fresh row state each time; the block's values stay in (0, 1] after the first
            // pass (p = exp(s - max)), so no pass ever sees denormals or infinities
            float m = -INFINITY, l = 0.0f;
            float alpha = sdpa_impl_softmax_online_f32(impl, s, n, &m, &l);
            benchmark::DoNotOptimize(alpha);
            benchmark::ClobberMemory();
        }
        prim_counters(st, impl, (double)n, 2.0 * (double)n * 4.0, 0.0, seconds_since(t0));
        bench_free(s);
    })->UseRealTime();

    benchmark::RegisterBenchmark(("prim/" + in + "/accumulate_n4096_dv128").c_str(),
                                 [=](benchmark::State &st) {
        const size_t n = kPrimN, dv = kPrimD;
        float *o = (float *)bench_alloc_zero(dv * sizeof(float));
        float *p = (float *)bench_alloc_random(SDPA_F32, n, 14);
        float *v = (float *)bench_alloc_random(SDPA_F32, n * dv, 15);
        if (!o || !p || !v) {
            st.SkipWithError("out of memory");
        } else {
            const auto t0 = std::chrono::steady_clock::now();
            for (auto _ : st) {
                // alpha < 1 keeps o bounded however many iterations run
                sdpa_impl_accumulate_f32(impl, o, 0.5f, p, v, dv, n, dv);
                benchmark::ClobberMemory();
            }
            prim_counters(st, impl, (double)n, (double)(n * dv + n + 2 * dv) * 4.0,
                          2.0 * (double)(n * dv) + (double)dv, seconds_since(t0));
        }
        bench_free(o);
        bench_free(p);
        bench_free(v);
    })->UseRealTime();
}

#ifdef BENCH_HAVE_BLAS
// ---- the unfused OpenBLAS baseline -----------------------------------------------------
void register_blas(const Shape &s)
{
    const std::string name = "blas/openblas/" + s.name + "/threads:1";
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State &st) {
        Tensors *t = tensors_for(s, true);
        if (!t) {
            st.SkipWithError("out of memory for the test tensors");
            return;
        }
        sdpa_params p = make_params(s, 1);
        p.parallel_for = nullptr;
        Probe probe{nullptr, 1, false};
        BestCall call;
        for (auto _ : st) {
            probe.sample_paused(st);
            call.start();
            bench_blas_attention(&p, t->q, (const float *)t->k, (const float *)t->v, t->o,
                                 t->scores);
            call.stop();
            benchmark::ClobberMemory();
        }
        probe.sample();
        const double peak = probe.mean();
        const double flops = shape_flops(s); // the same useful FLOPs as libsdpa's count
        st.counters["FLOP"] = per_second(flops);
        if (peak > 0) {
            st.counters["pct_peak"] = flops / call.mean() * 100.0 / peak;
            st.counters["limit_flops"] = peak;
        }
        st.counters["extra_bytes"] = (double)(s.q_len * s.kv_len * sizeof(float));
    })->UseRealTime()->Unit(benchmark::kMillisecond);
}
#endif

std::string fmt(double v)
{
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    return b;
}

std::vector<sdpa_tunable> tunables_of(const sdpa_impl *impl, size_t head_dim)
{
    std::vector<sdpa_tunable> t(impl ? sdpa_impl_tunables(impl, nullptr, 0)
                                     : sdpa_planner_tunables(head_dim, nullptr, 0));
    const size_t n = impl ? sdpa_impl_tunables(impl, t.data(), t.size())
                          : sdpa_planner_tunables(head_dim, t.data(), t.size());
    t.resize(n < t.size() ? n : t.size());
    return t;
}

// The values the library plans with, so that a run's results can be read against them: the
// cache sizes in force and their sources, the planner's parameters (and the key block it
// derives for the head dims benchmarked), each implementation's peak class and tunables.
void add_tuning_context()
{
    sdpa_cache_info ci;
    sdpa_cache_info_get(&ci);
    const struct {
        const char *level;
        size_t      bytes;
        const char *source;
    } levels[] = {{"l1d", ci.l1d_bytes, ci.l1d_source},
                  {"l2", ci.l2_bytes, ci.l2_source},
                  {"l3", ci.l3_bytes, ci.l3_source}};
    for (const auto &l : levels) {
        benchmark::AddCustomContext(std::string("sdpa_cache/") + l.level + "_bytes",
                                    std::to_string(l.bytes));
        benchmark::AddCustomContext(std::string("sdpa_cache/") + l.level + "_source", l.source);
    }
    for (const sdpa_tunable &t : tunables_of(nullptr, 0))
        benchmark::AddCustomContext(std::string("sdpa_planner/") + t.name, std::to_string(t.value));
    std::set<size_t> dims;
    for (const Shape &s : prefill_shapes()) dims.insert(s.head_dim);
    for (const Shape &s : decode_shapes()) dims.insert(s.head_dim);
    for (size_t d : dims)
        for (const sdpa_tunable &t : tunables_of(nullptr, d))
            if (std::strcmp(t.name, "block") == 0)
                benchmark::AddCustomContext("sdpa_planner/block/head_dim:" + std::to_string(d),
                                            std::to_string(t.value));
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        const std::string name = sdpa_impl_name(impl);
        benchmark::AddCustomContext("sdpa_peak_class/" + name, sdpa_impl_peak_class(impl));
        for (const sdpa_tunable &t : tunables_of(impl, 0))
            benchmark::AddCustomContext("sdpa_tunables/" + name + "/" + t.name,
                                        std::to_string(t.value));
    }
}

void add_machine_context()
{
    const bench_machine &m = g_machine;
    for (size_t i = 0; i < m.n_isa; i++)
        for (size_t t = 1; t <= BENCH_MAX_THREADS; t++)
            benchmark::AddCustomContext(
                "fma_peak_flops/" + std::string(m.isa[i]) + "/threads:" + std::to_string(t),
                fmt(m.fma_flops[i][t]));
    for (size_t t = 1; t <= BENCH_MAX_THREADS; t++)
        benchmark::AddCustomContext("read_bw_bytes_per_s/threads:" + std::to_string(t),
                                    fmt(m.read_bw[t]));
    benchmark::AddCustomContext("read_bw_loads", m.read_isa);
    benchmark::AddCustomContext("read_bw_streams", std::to_string(m.read_streams));
    benchmark::AddCustomContext("read_bw_buffer_bytes", std::to_string(m.read_bytes));
    std::string impls;
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        impls += std::string(i ? "," : "") + sdpa_impl_name(impl) +
                 (sdpa_impl_supported(impl) ? "" : "(unsupported)");
    }
    benchmark::AddCustomContext("sdpa_implementations", impls);
    benchmark::AddCustomContext("sdpa_active", sdpa_impl_name(sdpa_active()));
    add_tuning_context();
#ifdef BENCH_HAVE_BLAS
    benchmark::AddCustomContext("openblas_core", bench_blas_corename());
    benchmark::AddCustomContext("openblas_config", bench_blas_config());
#endif
}

} // namespace

int main(int argc, char **argv)
{
    // google/benchmark's flags, read before Initialize removes them. When the filter names the
    // variant or quant rows and no --benchmark_min_time is given, the default becomes 4 s (of
    // calls, both sides, so several pairs; the framework's 0.5 s would time two prefill pairs).
    // The variant summary goes to stdout with the console format, else to stderr.
    bool console = true, min_time = false, listing = false;
    const char *env_filter = std::getenv("BENCHMARK_FILTER");
    std::string filter = env_filter ? env_filter : "";
    for (int i = 1; i < argc; i++) {
        if (std::strncmp(argv[i], "--benchmark_min_time", 20) == 0) min_time = true;
        if (std::strcmp(argv[i], "--benchmark_list_tests") == 0 ||
            std::strcmp(argv[i], "--benchmark_list_tests=true") == 0)
            listing = true;
        if (std::strncmp(argv[i], "--benchmark_filter=", 19) == 0) filter = argv[i] + 19;
        if (std::strncmp(argv[i], "--benchmark_format=", 19) == 0)
            console = std::strcmp(argv[i] + 19, "console") == 0;
    }
    std::vector<char *> args(argv, argv + argc);
    static char variant_min_time[] = "--benchmark_min_time=4";
    if (!min_time && !std::getenv("BENCHMARK_MIN_TIME") &&
        (filter.find("variant") != std::string::npos || filter.find("quant") != std::string::npos))
        args.insert(args.begin() + 1, variant_min_time);
    args.push_back(nullptr);
    argc = (int)args.size() - 1;
    argv = args.data();
    benchmark::Initialize(&argc, argv);
    // our own flag, after google/benchmark removed its own ones
    size_t bw_mib = 512;
    int kept = 1;
    for (int i = 1; i < argc; i++) {
        if (std::strncmp(argv[i], "--sdpa_bw_mib=", 14) == 0)
            bw_mib = (size_t)std::strtoull(argv[i] + 14, nullptr, 10);
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    if (bw_mib < 1) bw_mib = 1;

    for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) {
        g_pools[t] = bench_pool_create(t);
        if (!g_pools[t]) {
            std::fprintf(stderr, "sdpa-bench: cannot start a %zu-thread pool\n", t);
            return 1;
        }
    }
    // listing the benchmarks runs none of them: nothing to measure them against
    if (!listing) {
        std::fprintf(stderr, "sdpa-bench: measuring FMA peaks and read bandwidth (%zu MiB)...\n",
                     bw_mib);
        if (bench_measure_machine(&g_machine, g_pools, bw_mib << 20) != 0)
            std::fprintf(stderr, "sdpa-bench: no memory for the bandwidth buffer; pct_bw omitted\n");
    }
#ifdef BENCH_HAVE_BLAS
    bench_blas_set_threads(1); // the baseline is single-threaded; the core choice is OpenBLAS's own
#endif
    if (!listing) add_machine_context();

    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (!sdpa_impl_supported(impl)) continue; // never run what this CPU cannot
        register_primitives(impl);
        for (const Shape &s : prefill_shapes())
            for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) register_forward("prefill", impl, s, t);
        for (const Shape &s : decode_shapes())
            for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) register_forward("decode", impl, s, t);
    }
#ifdef BENCH_HAVE_BLAS
    for (const Shape &s : prefill_shapes()) register_blas(s);
#endif
#ifdef BENCH_HAVE_AVX512
    const sdpa_impl *a512 = sdpa_impl_find(BENCH_HAVE_AVX512); // its peak class is its name
    if (a512 && sdpa_impl_supported(a512))
        for (int order = 0; order < 2; order++)
            for (size_t pf : {size_t(0), size_t(32)}) register_pattern(decode_shapes()[0], order, pf);
#endif

    // the variant rows run only when the filter names them (they take minutes)
    if (benchmark::GetBenchmarkFilter().find("variant") != std::string::npos)
        for (size_t i = 0; i < sdpa_impl_count(); i++) {
            const sdpa_impl *impl = sdpa_impl_at(i);
            if (!sdpa_impl_supported(impl)) continue;
            for (const VariantCase &c : variant_cases()) register_variant(impl, c);
        }

    // the quantized K/V rows likewise (every SIMD implementation x 10 rows x 2 thread counts)
    if (benchmark::GetBenchmarkFilter().find("quant") != std::string::npos)
        for (size_t i = 0; i < sdpa_impl_count(); i++) {
            const sdpa_impl *impl = sdpa_impl_at(i);
            if (!sdpa_impl_supported(impl) || std::strcmp(sdpa_impl_name(impl), "scalar") == 0) continue;
            for (const QuantCase &c : quant_cases())
                for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) register_quant(impl, c, t);
        }

    // the layout rows likewise (a decode batch of 1.5 GiB of K/V in four layouts)
    if (benchmark::GetBenchmarkFilter().find("layout") != std::string::npos) {
        for (size_t i = 0; i < sdpa_impl_count(); i++) {
            const sdpa_impl *impl = sdpa_impl_at(i);
            if (!sdpa_impl_supported(impl) || std::strcmp(sdpa_impl_name(impl), "scalar") == 0) continue;
            for (size_t t = 1; t <= BENCH_MAX_THREADS; t++)
                for (LayoutKind k : {LK_UNIFORM, LK_PADDED, LK_PACKED, LK_PAGED16, LK_PAGED128, LK_MIX})
                    register_layout(impl, k, t);
        }
        for (size_t t = 1; t <= BENCH_MAX_THREADS; t++)
            for (LayoutKind k : {LK_SCATTER16, LK_SCATTER128}) register_layout(sdpa_active(), k, t);
    }

    benchmark::RunSpecifiedBenchmarks();
    print_variant_summary(console ? stdout : stderr);
    print_layout_summary(console ? stdout : stderr);
    benchmark::Shutdown();
    bench_machine_release(&g_machine);
    for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) bench_pool_destroy(g_pools[t]);
    return 0;
}
