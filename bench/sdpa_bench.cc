// sdpa_bench.cc -- sdpa-bench: google/benchmark shim over libsdpa's C API, every supported
// implementation side by side
//
// One run measures, in this order:
//   1. the machine: FMA peak per ISA and read bandwidth at 1 and 2 threads (machine.c), which
//      appear in the run's context (--benchmark_list_tests skips this: it runs nothing);
//   2. per supported implementation (looping over the registry, calling the sdpa_impl_* entry
//      points so that no global selection changes): the three primitives, prefill and decode
//      shapes through sdpa_impl_forward at 1 and 2 threads on a persistent pthread pool;
//   3. the unfused OpenBLAS baseline on the prefill shapes, 1 thread (when built with BLAS); on
//      x86, the decode's reads alone and its conversion's ceiling in cache; only when
//      --benchmark_filter names them ('^floor/'), its arithmetic alone from memory
//      (floor/<isa>/<decode shape>, see bench_core.cc);
//   4. only when --benchmark_filter names them ('^variant/'): the attention variants (window,
//      mask, softcap, ALiBi, sinks), each timed in turn with the plain call (see below);
//   5. only when --benchmark_filter names them ('^layout/'): ragged, packed and paged decode
//      batches and a chunked-prefill mix, with the scattered pages' own read speed (see below).
//   6. only when --benchmark_filter names them ('^quant/'): decode and prefill on every block
//      format K/V, exact and fast scores, each timed in turn with the f16 call (see below);
//   7. only when --benchmark_filter names them ('^scaling'): each decode shape on 1 and 2
//      threads, timed in turn (scaling/), and on x86 its floor loop likewise (scaling-floor/;
//      see register_scaling in bench_core.cc).
// Each prefill, decode and BLAS run measures its own limit (the FMA peak of its ISA, or the read
// bandwidth, at its thread count) before every timed iteration and once after the last, outside
// the timed part, and is judged against their mean (Probe below): on a shared machine the speed
// available changes from moment to moment, and the ratio is only honest when both sides were
// measured under the same conditions, interleaved.
//
// Benchmark names are <kind>/<impl>/<shape>[/threads:<n>] (kind: prim, prefill, decode, blas,
// pattern, mix, floor, variant, layout, quant, scaling, scaling-floor),
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
#include <cstdlib>
#include <cstring>
#include <set>

#include "bench_commit.h"
#include "sdpa_bench.h"

namespace sdpa_bench
{

bench_machine g_machine;
bench_pool *g_pools[BENCH_MAX_THREADS + 1];

namespace
{

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
        size_t bytes;
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
            benchmark::AddCustomContext("fma_peak_flops/" + std::string(m.isa[i]) +
                                            "/threads:" + std::to_string(t),
                                        fmt(m.fma_flops[i][t]));
    for (size_t t = 1; t <= BENCH_MAX_THREADS; t++)
        benchmark::AddCustomContext("read_bw_bytes_per_s/threads:" + std::to_string(t),
                                    fmt(m.read_bw[t]));
    benchmark::AddCustomContext("libsdpa_commit", BENCH_COMMIT);
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
} // namespace sdpa_bench

using namespace sdpa_bench;

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
    // our own flags, after google/benchmark removed its own ones: the read bandwidth probe's
    // buffer, and how long the pools' idle threads poll before sleeping (bench/pool.h)
    size_t bw_mib = 512;
    uint32_t spin_us = BENCH_POOL_SPIN_US;
    int kept = 1;
    for (int i = 1; i < argc; i++) {
        if (std::strncmp(argv[i], "--sdpa_bw_mib=", 14) == 0)
            bw_mib = (size_t)std::strtoull(argv[i] + 14, nullptr, 10);
        else if (std::strncmp(argv[i], "--sdpa_pool_spin_us=", 20) == 0)
            spin_us = (uint32_t)std::strtoul(argv[i] + 20, nullptr, 10);
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    if (bw_mib < 1) bw_mib = 1;

    for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) {
        bench_pool_options opts = {};
        opts.n_threads = t;
        opts.spin_us = spin_us;
        g_pools[t] = bench_pool_create_opts(&opts);
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
            std::fprintf(stderr,
                         "sdpa-bench: no memory for the bandwidth buffer; pct_bw omitted\n");
    }
#ifdef BENCH_HAVE_BLAS
    bench_blas_set_threads(1); // the baseline is single-threaded; the core choice is OpenBLAS's own
#endif
    if (!listing) add_machine_context();

    for (const sdpa_impl *impl : runnable_impls(false)) { // never run what this CPU cannot
        register_primitives(impl);
        for (const Shape &s : prefill_shapes())
            for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) register_forward("prefill", impl, s, t);
        for (const Shape &s : decode_shapes())
            for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) register_forward("decode", impl, s, t);
    }
    // the first decode shape's kernel with K and V in cache (1024 keys, 4 MiB of f16, no read
    // between calls), judged as prefill is, against the FMA peak: the kernel's own ceiling,
    // which from memory bounds its share of the roofline's compute term
    for (const sdpa_impl *impl : runnable_impls(true)) {
        Shape c = decode_shapes()[0];
        c.name = "B1_Hq32_Hkv8_kv1024_D128_f16";
        c.kv_len = 1024;
        register_forward("cached", impl, c, 1);
    }
#ifdef BENCH_HAVE_BLAS
    for (const Shape &s : prefill_shapes()) register_blas(s);
#endif
#ifdef BENCH_HAVE_AVX512
    const sdpa_impl *a512 = sdpa_impl_find(BENCH_HAVE_AVX512); // its peak class is its name
    if (a512 && sdpa_impl_supported(a512))
        for (int order = 0; order < 2; order++)
            for (size_t pf : {size_t(0), size_t(32)})
                register_pattern(decode_shapes()[0], order, pf);
    if (a512 && sdpa_impl_supported(a512))
        for (int fmt = 0; fmt < 6; fmt++) register_mix(BENCH_HAVE_AVX512, bench_mix_avx512, fmt);
    const sdpa_impl *a2 = sdpa_impl_find(BENCH_HAVE_AVX2);
    if (a2 && sdpa_impl_supported(a2))
        for (int fmt = 0; fmt < 2; fmt++) register_mix(BENCH_HAVE_AVX2, bench_mix_avx2, fmt);
    // the decode's arithmetic floor of each decode shape, on each x86 ISA this CPU runs, when
    // the filter names it
    if (benchmark::GetBenchmarkFilter().find("floor") != std::string::npos)
        for (const Shape &s : decode_shapes())
            for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) {
                if (a512 && sdpa_impl_supported(a512))
                    register_floor(BENCH_HAVE_AVX512, bench_floor_avx512, s, t);
                if (a2 && sdpa_impl_supported(a2))
                    register_floor(BENCH_HAVE_AVX2, bench_floor_avx2, s, t);
            }
    // ... and its 2 threads over 1, paired, when the filter names scaling
    if (benchmark::GetBenchmarkFilter().find("scaling") != std::string::npos)
        for (const Shape &s : decode_shapes()) {
            if (a512 && sdpa_impl_supported(a512))
                register_scaling_floor(BENCH_HAVE_AVX512, bench_floor_avx512, s);
            if (a2 && sdpa_impl_supported(a2))
                register_scaling_floor(BENCH_HAVE_AVX2, bench_floor_avx2, s);
        }
#endif

    // the variant, quantized K/V and layout rows run only when the filter names them (they
    // take minutes)
    const std::string &chosen = benchmark::GetBenchmarkFilter();
    if (chosen.find("variant") != std::string::npos) register_variant_rows();
    if (chosen.find("quant") != std::string::npos) register_quant_rows();
    if (chosen.find("layout") != std::string::npos) register_layout_rows();
    if (chosen.find("scaling") != std::string::npos)
        for (const sdpa_impl *impl : runnable_impls(true))
            for (const Shape &s : decode_shapes()) register_scaling(impl, s);

    benchmark::RunSpecifiedBenchmarks();
    print_variant_summary(console ? stdout : stderr);
    print_layout_summary(console ? stdout : stderr);
    benchmark::Shutdown();
    bench_machine_release(&g_machine);
    for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) bench_pool_destroy(g_pools[t]);
    return 0;
}
