// bench_variants.cc -- sdpa-bench's variant rows: window, mask, softcap, ALiBi and sinks, each
// timed in turn with the plain call
#include <algorithm>
#include <cstring>
#include <map>

#include "sdpa_bench.h"

namespace sdpa_bench
{
namespace
{

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
    std::string row;   // the shape part of the name: variant/<impl>/<row>/threads:1
    std::string label; // for the summary table
    double target;     // the ratio it should reach; 0: none
    Shape plain, shape;
    bool decode;
    size_t window;
    float softcap;
    bool alibi, mask, sinks;
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
    return 2.0 * (double)(s.batch * s.kv_heads * s.head_dim) * keys *
           (double)dtype_bytes(s.kv_type);
}

std::vector<VariantCase> variant_cases()
{
    const Shape pre = {"B1_H16_L2048_D128_causal_f16", 1, 16, 16, 2048, 2048, 128, true, SDPA_F16};
    const Shape pre_long = {
        "B1_H16_L8192_D128_causal_f16", 1, 16, 16, 8192, 8192, 128, true, SDPA_F16};
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
        {p + "all", "prefill softcap+ALiBi+mask+sinks", 0, pre, pre, false, 0, 30, true, true,
         true},
        {"prefill_" + pre_long.name + "_window1024", "prefill L8192 window 1024 (vs plain L2048)",
         0.85, pre, pre_long, false, 1024, 0, false, false, false},
        {d + "plain", "decode plain (A/A)", 0, dec, dec, true, 0, 0, false, false, false},
        {d + "softcap30", "decode softcap 30", 0.90, dec, dec, true, 0, 30, false, false, false},
        {d + "alibi", "decode ALiBi", 0.90, dec, dec, true, 0, 0, true, false, false},
        {d + "mask_f16", "decode f16 mask [1][32][1][32768]", 0.90, dec, dec, true, 0, 0, false,
         true, false},
        {d + "sinks", "decode sinks", 0.90, dec, dec, true, 0, 0, false, false, true},
        {d + "window4096", "decode window 4096", 0.90, dec, dec, true, 4096, 0, false, false,
         false},
    };
}

// What a variant row needs beyond the shape's tensors, made once per (row, impl) and kept.
struct VariantData {
    float *o_variant = nullptr;
    std::vector<float> slopes, sinks;
    void *mask = nullptr;
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

// measured one, per repetition): the summary keeps the runs with the most pairs.
struct VariantResult {
    size_t pairs;
    double rate, plain_rate, ratio, ratio_mean, ratio_best, ratio_cpu, core_share;
    int applied;
};
std::vector<std::pair<std::string, const VariantCase *>> g_variant_rows; // registration order
std::map<std::string, std::vector<VariantResult>> g_variant_results;

void register_variant(const sdpa_impl *impl, const VariantCase &c)
{
    const std::string name =
        std::string("variant/") + sdpa_impl_name(impl) + "/" + c.row + "/threads:1";
    const VariantCase *cp = new VariantCase(c); // lives as long as the program
    g_variant_rows.emplace_back(name, cp);
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State &st) {
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
            const double work_p =
                c.decode ? variant_kv_bytes(c.plain, 0) : variant_flops(c.plain, 0);
            const double work_v =
                c.decode ? variant_kv_bytes(c.shape, c.window) : variant_flops(c.shape, c.window);

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
                        const sdpa_tensor *x = which ? xv : xp;
                        const bool ok = timed_forward(st, impl, which ? &pv : &pp, &x[0], &x[1],
                                                      &x[2], &x[3], &t[which]);
                        tc[which] = thread_cpu_seconds() - c0;
                        if (!ok) {
                            failed = true;
                            break;
                        }
                    }
                    if (failed) break;
                    iteration_time += t[0] + t[1];
                    times_p.push_back(t[0]);
                    times_v.push_back(t[1]);
                    ratios.push_back((work_v / t[1]) / (work_p / t[0]));
                    if (tc[0] > 0 && tc[1] > 0)
                        ratios_cpu.push_back((work_v / tc[1]) / (work_p / tc[0]));
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
            if (c.plain.name == c.shape.name &&
                (c.window || c.softcap > 0 || c.alibi || c.mask || c.sinks)) {
                const size_t bytes =
                    c.shape.batch * c.shape.q_heads * c.shape.q_len * c.shape.head_dim * 4;
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
        })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
}

} // namespace

void register_variant_rows()
{
    for (const sdpa_impl *impl : runnable_impls(false))
        for (const VariantCase &c : variant_cases()) register_variant(impl, c);
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
    std::fprintf(f,
                 "\nAttention variants against the plain call, 1 thread, timed in turn in one "
                 "process. Rates: the median call's, wall clock. ratio: the median over the "
                 "pairs of variant rate / plain rate, on the wall clock; ratio (CPU): the same on "
                 "the thread's CPU time, which leaves out waits for a core (the calls had %.0f %% "
                 "of a core), and the target is judged on it.\n\n",
                 share_pairs > 0 ? 100.0 * share_cpu / share_pairs : 0.0);
    std::fprintf(
        f, "| variant | impl | GFLOP/s or GB/s | plain | ratio | ratio (CPU) | target | pairs |\n");
    std::fprintf(f, "|---|---|---:|---:|---:|---:|---|---:|\n");
    for (const std::string &l : lines) std::fprintf(f, "%s\n", l.c_str());
    std::fflush(f);
}

} // namespace sdpa_bench
