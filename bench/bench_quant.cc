// bench_quant.cc -- sdpa-bench's quantized K/V rows: decode and prefill on every block format,
// exact and fast scores, against f16
#include <algorithm>
#include <cstring>
#include <map>

#include "sdpa_bench.h"

namespace sdpa_bench
{
namespace
{

// ---- quantized K/V: the block formats against f16, interleaved ----------------------------
// A quant row times the f16 call and the same call on K and V quantized to a block format (the
// f16 values, quantized by sdpa_quantize_*), in one process on the same Q: exact (q8_scores 0)
// in the order AB BA, fast (q8_scores 1) with the exact call between, ABC CBA, so that a drift
// of the machine's speed falls on every call alike (an iteration is the two passes). Each pass
// gives `ratio` = f16 time / quantized time (the speed-up; for prefill also the GFLOP/s ratio),
// and for fast rows `ratio_exact` = exact time / fast time; the counters are the medians over
// the passes (`ratio_mean`, `ratio_exact_mean`: of the summed times; `ratio_best`: of the
// fastest calls; call_ms, f16_call_ms: the median calls, best_call_ms, f16_best_call_ms: the
// fastest; pairs: the passes). The f16_exact row is the f16 call against itself: the noise of the
// ratio. FLOP and bytes_per_second are the quantized call's rates from its median call (f16_FLOP,
// f16_bytes_per_second: the f16 call's), plain values; decode bytes are each format's own K and
// V bytes (sdpa_dtype_bytes: 34 per 32 elements for q8_0, 18 for q4_0; bytes_per_key, K and V
// of one key of one KV head). % of roofline
// (pct_roofline; f16_pct_roofline, exact_pct_roofline for the other calls of the row): the
// shortest time the limits allow over the median call, with the limits sampled before each
// iteration and after the last (Probe), averaged: decode max(bytes / read bandwidth,
// FLOPs / FMA peak of the implementation's ISA), prefill FLOPs / FMA peak (limit_bytes_per_s,
// limit_flops). Every decode call follows an untimed read of twice the L3 size, as the variant
// rows do: a 4-bit format's 36 MiB would otherwise partly stay in cache. max_abs_diff: the largest
// difference of the row's output from the f16 call's. `target`: the speed-up over f16
// at 1 thread (exact rows), `target_exact`: fast over exact where the CPU has VNNI for the
// implementation's ISA. The library refuses fast scores on a K that is not quantized, so f16
// has no fast row. Registered only when --benchmark_filter names them (it contains "quant");
// no rows of the reference implementation (one of its prefill calls takes seconds).
struct QuantCase {
    std::string row; // the shape part of the name: quant/<impl>/<row>/threads:<n>
    Shape base;      // the f16 shape: the baseline, and the values quantized
    sdpa_dtype fmt;  // SDPA_F16 (the baseline against itself) or a block format
    bool fast, decode;
};

const char *quant_fmt_name(sdpa_dtype t) { return sdpa_dtype_name(t); }

// Every storage type sdpa.h names that is a block format, in its order.
std::vector<sdpa_dtype> block_formats()
{
    std::vector<sdpa_dtype> v;
    for (int t = 0; sdpa_dtype_size((sdpa_dtype)t) != 0; t++)
        if (sdpa_dtype_block((sdpa_dtype)t) == 32) v.push_back((sdpa_dtype)t);
    return v;
}

std::vector<QuantCase> quant_cases()
{
    const Shape dec = decode_shapes()[0]; // B1_Hq32_Hkv8_kv32768_D128_f16
    const Shape pre = {"B1_H16_L2048_D128_causal_f16", 1, 16, 16, 2048, 2048, 128, true, SDPA_F16};
    std::vector<QuantCase> v;
    for (const auto &sh : {std::make_pair(dec, std::string("decode_B1_Hq32_Hkv8_kv32768_D128_")),
                           std::make_pair(pre, std::string("prefill_B1_H16_L2048_D128_causal_"))})
        for (sdpa_dtype t : [] {
                 std::vector<sdpa_dtype> f = block_formats();
                 f.insert(f.begin(), SDPA_F16);
                 return f;
             }())
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
    void *k = nullptr, *v = nullptr;
    float *o = nullptr, *o_exact = nullptr;
};

QuantData *quant_data_for(const QuantCase &c, Tensors *base)
{
    static std::map<std::string, QuantData> kv;   // by shape and format
    static std::map<std::string, QuantData> outs; // by shape
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

// Whether an implementation's fast scores take int8 dot products of VNNI (vpdpbusd): one that
// requires AVX-512 VNNI (the others use pmaddubsw).
bool has_vnni(const sdpa_impl *impl) { return requires_feature(impl, "avx512vnni"); }

// The speed-up over f16 of an exact row, 1 thread; 0: none.
double quant_target(const QuantCase &c, const sdpa_impl *impl)
{
    // the targets are for the AVX-512 implementations and the AVX2+FMA one
    const bool a512 = requires_feature(impl, "avx512f"),
               a2 = !a512 && requires_feature(impl, "fma");
    if (c.fast || c.fmt == SDPA_F16 || !(a512 || a2)) return 0;
    if (!c.decode) return 0.85;
    if (c.fmt == SDPA_Q8_0) return a512 ? 1.6 : 1.3;
    if (c.fmt == SDPA_Q4_0) return a512 ? 2.2 : 1.6;
    return 0; // the other formats' targets are the decode-roofline work's
}

void register_quant(const sdpa_impl *impl, const QuantCase &c, size_t threads)
{
    const std::string name = std::string("quant/") + sdpa_impl_name(impl) + "/" + c.row +
                             "/threads:" + std::to_string(threads);
    const QuantCase *cp = new QuantCase(c); // lives as long as the program
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State &st) {
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
                sdpa_params p;
                const sdpa_tensor *k, *v;
                sdpa_tensor o;
                double bytes;
            };
            const double elems = (double)(s.batch * s.kv_heads * s.kv_len * s.head_dim);
            const double bytes_b = 2.0 * (double)sdpa_dtype_bytes(s.kv_type, (size_t)elems);
            const double bytes_q = 2.0 * (double)sdpa_dtype_bytes(c.fmt, (size_t)elems);
            std::vector<Call> calls;
            calls.push_back({make_params(s, threads), &kb, &vb,
                             dense_view(tb->o, SDPA_F32, s.q_heads, s.q_len, s.head_dim), bytes_b});
            if (c.fast)
                calls.push_back({make_params(s, threads), &kq, &vq,
                                 dense_view(qd->o_exact, SDPA_F32, s.q_heads, s.q_len, s.head_dim),
                                 bytes_q});
            calls.push_back({make_params(s, threads), &kq, &vq,
                             dense_view(qd->o, SDPA_F32, s.q_heads, s.q_len, s.head_dim), bytes_q});
            calls.back().p.q8_scores = c.fast ? 1 : 0;
            const size_t nc = calls.size(), last = nc - 1;
            const double flops = shape_flops(s);

            Probe bw{sdpa_impl_name(impl), threads, true},
                peak{sdpa_impl_name(impl), threads, false};
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
                        if (!timed_forward(st, impl, &calls[i].p, &q, calls[i].k, calls[i].v,
                                           &calls[i].o, &t[i])) {
                            failed = true;
                            break;
                        }
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
                // K and V bytes of one key of one KV head: the format's density
                st.counters["bytes_per_key"] = (double)(sdpa_dtype_bytes(c.fmt, s.head_dim) * 2);
                if (lim_bw > 0) st.counters["limit_bytes_per_s"] = lim_bw;
            }
            if (lim_flops > 0) st.counters["limit_flops"] = lim_flops;
            if (t_roof(last) > 0) {
                st.counters["pct_roofline"] = t_roof(last) / tmed[last] * 100.0;
                st.counters["f16_pct_roofline"] = t_roof(0) / tmed[0] * 100.0;
                if (c.fast) st.counters["exact_pct_roofline"] = t_roof(1) / tmed[1] * 100.0;
            }
            // fast scores' own roofline: the score half of the FLOPs at the int8 dot rate
            // (int8_rate times the f32 FMA rate: 4 with VNNI's vpdpbusd, 2 with pmaddubsw)
            const double rate = has_vnni(impl) ? 4.0 : 2.0;
            if (c.fast && c.decode && lim_flops > 0 && lim_bw > 0) {
                const double t_own =
                    std::max(bytes_q / lim_bw, 0.5 * flops / lim_flops * (1.0 + 1.0 / rate));
                st.counters["int8_rate"] = rate;
                st.counters["own_pct_roofline"] = t_own / tmed[last] * 100.0;
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
            const double target = threads == 1 ? quant_target(c, impl) : 0;
            if (target > 0) st.counters["target"] = target;
            if (c.fast && threads == 1 && has_vnni(impl)) st.counters["target_exact"] = 1.3;
            double diff = 0;
            const size_t no = s.batch * s.q_heads * s.q_len * s.head_dim;
            const float *ob = (const float *)calls[0].o.data,
                        *oq = (const float *)calls[last].o.data;
            for (size_t i = 0; i < no; i++) diff = std::max(diff, (double)std::fabs(oq[i] - ob[i]));
            st.counters["max_abs_diff"] = diff;
        })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
}

} // namespace

// Every SIMD implementation x 10 rows x 2 thread counts (no reference rows: a reference
// prefill call takes seconds).
void register_quant_rows()
{
    for (const sdpa_impl *impl : runnable_impls(true))
        for (const QuantCase &c : quant_cases())
            for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) register_quant(impl, c, t);
}

} // namespace sdpa_bench
