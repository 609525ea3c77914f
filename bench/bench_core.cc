// bench_core.cc -- sdpa-bench's core rows: the three primitives, prefill and decode per
// implementation, the OpenBLAS baseline, the decode's read pattern
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "sdpa_bench.h"

namespace sdpa_bench
{

// The test tensors of s, or nullptr with the row skipped for want of memory.
static Tensors *tensors_or_skip(benchmark::State &st, const Shape &s, bool with_scores)
{
    Tensors *t = tensors_for(s, with_scores);
    if (!t) st.SkipWithError("out of memory for the test tensors");
    return t;
}

// A read-bound row's share of the read bandwidth `limit` (none where it was not measured), for
// its mean and fastest call.
static void bw_counters(benchmark::State &st, double bytes, const BestCall &call, double limit)
{
    if (limit <= 0) return;
    st.counters["pct_bw"] = bytes / call.mean() * 100.0 / limit;
    st.counters["pct_bw_best"] = bytes / call.best * 100.0 / limit;
    st.counters["limit_bytes_per_s"] = limit;
}

// ---- fused attention through sdpa_impl_forward ------------------------------------------
void register_forward(const char *kind, const sdpa_impl *impl, const Shape &s, size_t threads)
{
    const std::string name = std::string(kind) + "/" + sdpa_impl_name(impl) + "/" + s.name +
                             "/threads:" + std::to_string(threads);
    const bool decode = std::strcmp(kind, "decode") == 0;
    auto once = std::make_shared<Once>();
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State &st) {
            Tensors *t = tensors_or_skip(st, s, false);
            if (!t) return;
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
                bw_counters(st, bytes, call, limit);
            } else if (limit > 0) {
                st.counters["pct_peak"] = flops / call.mean() * 100.0 / limit;
                st.counters["pct_peak_best"] = flops / call.best * 100.0 / limit;
                st.counters["limit_flops"] = limit;
            }
            st.counters["best_call_ms"] = call.best * 1e3;
            st.counters["ws_bytes"] = (double)once->ws_bytes;
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

// ---- 2 threads over 1, paired -----------------------------------------------------------
// The same work on 1 and on BENCH_MAX_THREADS threads, timed in turn within each iteration (the
// order alternating), so that both see the machine of the same moment: on a shared machine the
// speed available drifts between separate rows by more than the scaling being judged.
// Counters: ratio_median (the median over iterations of t1 / tN), ratio_mean (mean call over
// mean call), ratio_best (fastest over fastest); the N-thread call's FLOP and bytes_per_second
// and the N-thread read bandwidth sampled between iterations (limit_bytes_per_s), from which
// tools/bench_table.py takes its roofline; bytes_per_second_1 the 1-thread call's, for the room
// the roofline leaves. `call` runs the work once on a thread count (false: it failed).
using ScalingCall = std::function<bool(Tensors *, size_t)>;
static void register_scaling_row(const std::string &name, const char *probe_impl, const Shape &s,
                                 ScalingCall call)
{
    const size_t tn = BENCH_MAX_THREADS;
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State &st) {
            Tensors *t = tensors_or_skip(st, s, false);
            if (!t) return;
            Probe probe{probe_impl, tn, true};
            BestCall c1, cn;
            std::vector<double> ratios;
            size_t it = 0;
            for (auto _ : st) {
                probe.sample_paused(st);
                double dt[2];
                bool ok = true;
                for (int i = 0; i < 2 && ok; i++) {
                    const int many = (int)((it + (size_t)i) % 2); // 1 thread first, then N first
                    BestCall &c = many ? cn : c1;
                    c.start();
                    ok = call(t, many ? tn : 1);
                    c.stop();
                    dt[many] = c.last;
                    benchmark::ClobberMemory();
                }
                if (!ok) {
                    st.SkipWithError("the call failed");
                    break;
                }
                ratios.push_back(dt[0] / dt[1]);
                it++;
            }
            probe.sample();
            if (ratios.empty()) return;
            const double bytes = shape_kv_bytes(s);
            st.counters["ratio_median"] = median_of(ratios);
            st.counters["ratio_mean"] = c1.mean() / cn.mean();
            st.counters["ratio_best"] = c1.best / cn.best;
            st.counters["FLOP"] = shape_flops(s) / cn.mean();
            st.counters["bytes_per_second"] = bytes / cn.mean();
            st.counters["bytes_per_second_1"] = bytes / c1.mean();
            st.counters["limit_bytes_per_s"] = probe.mean();
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

// The decode call of s through impl. Name: scaling/<impl>/<shape>/threads:N.
void register_scaling(const sdpa_impl *impl, const Shape &s)
{
    const std::string name = std::string("scaling/") + sdpa_impl_name(impl) + "/" + s.name +
                             "/threads:" + std::to_string(BENCH_MAX_THREADS);
    register_scaling_row(name, sdpa_impl_name(impl), s, [impl, s](Tensors *t, size_t threads) {
        const sdpa_params p = make_params(s, threads);
        const sdpa_tensor q = dense_view(t->q, SDPA_F32, s.q_heads, s.q_len, s.head_dim);
        const sdpa_tensor k = dense_view(t->k, s.kv_type, s.kv_heads, s.kv_len, s.head_dim);
        const sdpa_tensor v = dense_view(t->v, s.kv_type, s.kv_heads, s.kv_len, s.head_dim);
        const sdpa_tensor o = dense_view(t->o, SDPA_F32, s.q_heads, s.q_len, s.head_dim);
        return sdpa_impl_forward(impl, &p, &q, &k, &v, &o) == SDPA_OK;
    });
}

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

void register_primitives(const sdpa_impl *impl)
{
    const std::string in = sdpa_impl_name(impl);
    benchmark::RegisterBenchmark(("prim/" + in + "/score_n4096_d128").c_str(), [=](benchmark::State
                                                                                       &st) {
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

    benchmark::RegisterBenchmark(("prim/" + in + "/softmax_n4096").c_str(), [=](benchmark::State
                                                                                    &st) {
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

    benchmark::RegisterBenchmark(
        ("prim/" + in + "/accumulate_n4096_dv128").c_str(),
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
        })
        ->UseRealTime();
}

#ifdef BENCH_HAVE_BLAS
// ---- the unfused OpenBLAS baseline -----------------------------------------------------
void register_blas(const Shape &s)
{
    const std::string name = "blas/openblas/" + s.name + "/threads:1";
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State &st) {
            Tensors *t = tensors_or_skip(st, s, true);
            if (!t) return;
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
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}
#endif

// ---- the decode's reads alone (AVX-512 hosts) --------------------------------------------
// K and V of the first decode shape (16-bit) walked in the decode kernel's block order with
// nothing but the conversion and a sum (bench_kv_walk_avx512), judged against the same read
// bandwidth as decode: how much of the gap between a decode row and 100 % the order and the
// prefetching of its reads alone would cost. Names: pattern/avx512/<shape>_<order>_pf<rows>.
#ifdef BENCH_HAVE_AVX512
void register_pattern(const Shape &s, int order, size_t pf)
{
    const std::string name = std::string("pattern/avx512/") + s.name +
                             (order ? "_tiles" : "_rows") + "_pf" + std::to_string(pf) +
                             "/threads:1";
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State &st) {
            Tensors *t = tensors_or_skip(st, s, false);
            if (!t) return;
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
            bw_counters(st, bytes, call, limit);
            st.counters["best_call_ms"] = call.best * 1e3;
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

// ---- the decode's arithmetic alone, from memory (x86 hosts) ---------------------------------
// A decode shape's K and V read from memory with only the arithmetic every decode with the
// library's numerics does per key, in a plain loop: each element converted once to f32 and
// multiplied into each of the R = q_heads / kv_heads query rows, lines requested a fixed
// distance ahead (bench_floor_<isa>), the KV heads shared among the threads. No reductions,
// softmax or bookkeeping. Judged as the decode rows are (tools/bench_table.py puts it beside
// them): how far that arithmetic and the read overlap on this core without the decode's own
// scheduling of its requests. Names: floor/<isa>/<shape>/threads:<n>.
struct FloorArg {
    bench_floor_fn *fn;
    const Shape *s;
    const char *k, *v;
    float sum[BENCH_MAX_THREADS + 1];
};
static void floor_task(void *arg, size_t task, size_t thread)
{
    FloorArg *a = (FloorArg *)arg;
    const Shape &s = *a->s;
    const size_t head = s.kv_len * s.head_dim * dtype_bytes(s.kv_type); // one KV head's K (or V)
    const uint16_t *k = (const uint16_t *)(a->k + task * head),
                   *v = (const uint16_t *)(a->v + task * head);
    a->sum[thread] += a->fn(&k, &v, s.kv_len, s.kv_len, s.head_dim, s.kv_type == SDPA_BF16,
                            (int)(s.q_heads / s.kv_heads));
}

void register_floor(const char *isa, bench_floor_fn *fn, const Shape &s, size_t threads)
{
    const std::string name =
        std::string("floor/") + isa + "/" + s.name + "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State &st) {
            Tensors *t = tensors_or_skip(st, s, false);
            if (!t) return;
            Probe probe{isa, threads, true};
            BestCall call;
            FloorArg fa{fn, &s, (const char *)t->k, (const char *)t->v, {0}};
            for (auto _ : st) {
                probe.sample_paused(st);
                call.start();
                bench_pool_parallel_for(g_pools[threads], s.batch * s.kv_heads, floor_task, &fa);
                call.stop();
            }
            benchmark::DoNotOptimize(fa.sum[0] + fa.sum[1]);
            probe.sample();
            const double bytes = shape_kv_bytes(s);
            st.counters["FLOP"] = per_second(shape_flops(s));
            st.SetBytesProcessed((int64_t)(bytes * (double)st.iterations()));
            bw_counters(st, bytes, call, probe.mean());
            st.counters["best_call_ms"] = call.best * 1e3;
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

// The floor loop of s (its arithmetic alone). Name: scaling-floor/<isa>/<shape>/threads:N.
void register_scaling_floor(const char *isa, bench_floor_fn *fn, const Shape &s)
{
    const std::string name = std::string("scaling-floor/") + isa + "/" + s.name +
                             "/threads:" + std::to_string(BENCH_MAX_THREADS);
    register_scaling_row(name, isa, s, [fn, s](Tensors *t, size_t threads) {
        FloorArg fa{fn, &s, (const char *)t->k, (const char *)t->v, {0}};
        bench_pool_parallel_for(g_pools[threads], s.batch * s.kv_heads, floor_task, &fa);
        benchmark::DoNotOptimize(fa.sum[0] + fa.sum[1]);
        return true;
    });
}

// ---- the conversion's ceiling (x86 hosts) --------------------------------------------------
// A decode score tile's inner loop at 4 query rows per KV head with nothing else: K in L1, one
// conversion per vector of K feeding 4 FMAs (bench_mix_<isa>), judged against that ISA's FMA
// peak measured with it: the most a decode in that K/V format can reach of the roofline's
// compute term on this core, whatever else the kernel does. Names: mix/<isa>/<format>_rows4
// (AVX-512: f16, bf16, q8_0, q4_0, f16_tree, and q4_0_pv: a 4-bit V's P·V loop with its
// per-block tables; AVX2: f16, bf16).
void register_mix(const char *isa, double (*fn)(int, uint64_t, float *), int fmt)
{
    static const char *const names[] = {"f16", "bf16", "q8_0", "q4_0", "f16_tree", "q4_0_pv"};
    const std::string name = std::string("mix/") + isa + "/" + names[fmt] + "_rows4" + "/threads:1";
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State &st) {
            Probe probe{isa, 1, false};
            BestCall call;
            double flops = 0;
            float sink = 0;
            for (auto _ : st) {
                probe.sample_paused(st);
                call.start();
                flops = fn(fmt, 12000, &sink);
                call.stop();
                benchmark::DoNotOptimize(sink);
            }
            probe.sample();
            const double peak = probe.mean();
            st.counters["FLOP"] =
                benchmark::Counter(flops * (double)st.iterations(), benchmark::Counter::kIsRate);
            if (peak > 0) {
                st.counters["pct_peak"] = flops / call.mean() * 100.0 / peak;
                st.counters["pct_peak_best"] = flops / call.best * 100.0 / peak;
            }
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}
#endif

} // namespace sdpa_bench
