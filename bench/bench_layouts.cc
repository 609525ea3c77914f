// bench_layouts.cc -- sdpa-bench's serving-layout rows: ragged, packed and paged decode batches, a
// chunked-prefill mix, scattered page reads
#include <algorithm>
#include <cstring>
#include <map>

#include "sdpa_bench.h"

namespace sdpa_bench
{
namespace
{

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
    size_t B = 8, Hq = 32, Hkv = 8, D = 128, Lk = 32768, mean = 0;
    std::vector<size_t> lens, q_lens, cu_kv;
    void *k = nullptr, *v = nullptr, *kp = nullptr, *vp = nullptr; // padded, packed
    void *pk[2] = {nullptr, nullptr}, *pv[2] = {nullptr, nullptr}; // pages 16, 128
    std::vector<int32_t> table[2];
    size_t n_pages[2] = {0, 0}, max_pages[2] = {0, 0};
    float *q = nullptr, *o = nullptr;
    double bytes = 0; // K/V bytes of the ragged batch
    // the mix
    size_t mB = 16, mLq = 512, mLk = 8192;
    std::vector<size_t> m_cu_q, m_cu_kv;
    void *mk = nullptr, *mv = nullptr;
    float *mq = nullptr, *mo = nullptr;
    double m_flops = 0, m_bytes = 0; // the prefill's FLOPs, the decodes' bytes
    bool ok = false;
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
            std::memcpy((char *)d.kp + (h * total + d.cu_kv[b]) * row, src(d.k, b, h, 0),
                        d.lens[b] * row);
            std::memcpy((char *)d.vp + (h * total + d.cu_kv[b]) * row, src(d.v, b, h, 0),
                        d.lens[b] * row);
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
    for (size_t i = 0; i < d.mLq; i++)
        d.m_flops += (double)(i + mlen[0] - d.mLq + 1); // causal pairs
    d.m_flops *= 4.0 * (double)d.D * (double)d.Hq;
    const size_t mt = d.m_cu_kv[d.mB], qt = d.m_cu_q[d.mB];
    d.mk = bench_alloc_random(SDPA_F16, d.Hkv * mt * d.D, 34);
    d.mv = bench_alloc_random(SDPA_F16, d.Hkv * mt * d.D, 35);
    d.mq = (float *)bench_alloc_random(SDPA_F32, qt * d.Hq * d.D, 36);
    d.mo = (float *)bench_alloc_zero(qt * d.Hq * d.D * sizeof(float));
    d.ok = d.mk && d.mv && d.mq && d.mo;
    return d.ok ? &d : nullptr;
}

// Reads the K and V pages of sequence b, KV head h, in the decode's order (a page's K rows, then
// its V rows): the fastest scattered read found for these pages. Each page's rows are read in
// the widest loads the CPU has (bench_machine.xor_fn; 16-byte loads, four to a line, read these
// pages at less than half the speed). At the start of a page it requests the first line of the
// next page's K and V rows, and nothing more: that one early miss starts the core's own stream
// prefetcher on that page a page ahead. Requesting every line of the next page instead (a burst,
// or spread over the page's loads) holds the core's few miss buffers and reads slower.
struct ScatterArg {
    const LayoutData *d;
    int s;
    uint64_t sum[BENCH_MAX_THREADS + 1];
};
void scatter_task(void *arg, size_t task, size_t thread)
{
    ScatterArg *a = (ScatterArg *)arg;
    const LayoutData &d = *a->d;
    const size_t ps = g_layout_pages[a->s], b = task / d.Hkv, h = task % d.Hkv, row = d.D * 2;
    const size_t page_bytes = d.Hkv * ps * row, np = (d.lens[b] + ps - 1) / ps;
    const int32_t *tab = d.table[a->s].data() + b * d.max_pages[a->s];
    auto rows = [&](const void *base, size_t pg) {
        return (const char *)base + (size_t)tab[pg] * page_bytes + h * ps * row;
    };
    uint64_t acc = 0;
    for (size_t pg = 0; pg < np; pg++) {
        const size_t n = std::min(ps, d.lens[b] - pg * ps) * row;
        if (pg + 1 < np) {
            __builtin_prefetch(rows(d.pk[a->s], pg + 1));
            __builtin_prefetch(rows(d.pv[a->s], pg + 1));
        }
        acc ^= g_machine.xor_fn(rows(d.pk[a->s], pg), n);
        acc ^= g_machine.xor_fn(rows(d.pv[a->s], pg), n);
    }
    a->sum[thread] += acc;
}

enum LayoutKind {
    LK_UNIFORM,
    LK_PADDED,
    LK_PACKED,
    LK_PAGED16,
    LK_PAGED128,
    LK_SCATTER16,
    LK_SCATTER128,
    LK_MIX
};
const char *const g_layout_names[] = {"uniform",  "padded",    "packed",     "paged16",
                                      "paged128", "scatter16", "scatter128", "mix"};
struct LayoutResult {
    double bytes_per_s, pct; // pct: of the read bandwidth (the mix: of its roofline)
};
std::map<std::string, LayoutResult> g_layout_results; // "<impl>/<kind>/<threads>"

void register_layout(const sdpa_impl *impl, LayoutKind kind, size_t threads)
{
    const bool scatter = kind == LK_SCATTER16 || kind == LK_SCATTER128;
    const std::string iname = scatter ? "read" : sdpa_impl_name(impl);
    const std::string name = std::string("layout/") + iname + "/" + g_layout_names[kind] +
                             "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State &st) {
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
            p.parallel_for = bench_pool_parallel_for, p.pool = g_pools[threads],
            p.n_threads = threads;
            sdpa_tensor q = dense_view(d->q, SDPA_F32, d->Hq, 1, d->D),
                        o = dense_view(d->o, SDPA_F32, d->Hq, 1, d->D);
            sdpa_tensor k = dense_view(d->k, SDPA_F16, d->Hkv, d->Lk, d->D),
                        v = dense_view(d->v, SDPA_F16, d->Hkv, d->Lk, d->D);
            double bytes = d->bytes;
            const int s = kind == LK_PAGED128 || kind == LK_SCATTER128;
            switch (kind) {
            case LK_UNIFORM: // the mean length for all, in the padded buffers
                p.kv_len = d->mean;
                bytes = 2.0 * (double)(d->B * d->Hkv * d->mean) * (double)row;
                break;
            case LK_PADDED:
                p.kv_lens = d->lens.data();
                break;
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
                k = {d->pk[s], SDPA_F16, (ptrdiff_t)(d->Hkv * ps * d->D), (ptrdiff_t)(ps * d->D),
                     (ptrdiff_t)d->D};
                v = {d->pv[s], SDPA_F16, (ptrdiff_t)(d->Hkv * ps * d->D), (ptrdiff_t)(ps * d->D),
                     (ptrdiff_t)d->D};
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
            default:
                break;
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
            g_layout_results[iname + "/" + g_layout_names[kind] + "/" + std::to_string(threads)] =
                res;
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

} // namespace

// A decode batch of 1.5 GiB of K/V in four layouts, per SIMD implementation (none for the
// reference: it would take minutes); the scattered reads once, by the active implementation.
void register_layout_rows()
{
    for (const sdpa_impl *impl : runnable_impls(true))
        for (size_t t = 1; t <= BENCH_MAX_THREADS; t++)
            for (LayoutKind k : {LK_UNIFORM, LK_PADDED, LK_PACKED, LK_PAGED16, LK_PAGED128, LK_MIX})
                register_layout(impl, k, t);
    for (size_t t = 1; t <= BENCH_MAX_THREADS; t++)
        for (LayoutKind k : {LK_SCATTER16, LK_SCATTER128}) register_layout(sdpa_active(), k, t);
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
    std::fprintf(f,
                 "\nServing layouts, decode batch 8 (32/8 heads, D128 f16, kv 512..32768), fastest "
                 "calls of one run. GB/s: K/V bytes read once per call; %%: of the read bandwidth "
                 "measured between calls (mix: of its roofline).\n\n");
    std::fprintf(f, "| impl | threads | row | GB/s | %% | ratio | against | target "
                    "|\n|---|---:|---|---:|---:|---:|---|---|\n");
    for (size_t i = 0; i < sdpa_impl_count(); i++)
        for (size_t t = 1; t <= BENCH_MAX_THREADS; t++) {
            const char *impl = sdpa_impl_name(sdpa_impl_at(i));
            const std::string base = std::string(impl) + "/";
            const std::string ts = "/" + std::to_string(t);
            double ub = 0, up = 0, pb = 0, pp = 0;
            if (!get(base + "uniform" + ts, &ub, &up) || !get(base + "padded" + ts, &pb, &pp))
                continue;
            std::fprintf(f, "| %s | %zu | uniform | %.2f | %.1f | | | |\n", impl, t, ub / 1e9, up);
            for (const char *r : {"padded", "packed"}) {
                double b = 0, pc = 0;
                if (!get(base + r + ts, &b, &pc)) continue;
                std::fprintf(
                    f, "| %s | %zu | %s | %.2f | %.1f | %.3f | %% of uniform's %% | >= 0.90 %s |\n",
                    impl, t, r, b / 1e9, pc, pc / up, pc / up >= 0.90 ? "met" : "**missed**");
                double b1 = 0, p1 = 0;
                if (t > 1 && get(base + r + "/1", &b1, &p1))
                    std::fprintf(f,
                                 "| %s | %zu | %s, speed-up | | | %.3f | 1 thread | >= 1.7 %s |\n",
                                 impl, t, r, b / b1, b / b1 >= 1.7 ? "met" : "**missed**");
            }
            for (int s = 0; s < 2; s++) {
                double b = 0, pc = 0, sb = 0, sp = 0;
                const std::string pr = s ? "paged128" : "paged16";
                if (!get(base + pr + ts, &b, &pc)) continue;
                const double target = s ? 0.97 : 0.90;
                std::fprintf(f,
                             "| %s | %zu | %s | %.2f | %.1f | %.3f | padded GB/s | >= %.2f %s |\n",
                             impl, t, pr.c_str(), b / 1e9, pc, b / pb, target,
                             b / pb >= target ? "met" : "**missed**");
                if (get(std::string("read/") + (s ? "scatter128" : "scatter16") + ts, &sb, &sp))
                    std::fprintf(
                        f,
                        "| %s | %zu | %s | | | %.3f | the same pages read alone (%.2f GB/s) | |\n",
                        impl, t, pr.c_str(), b / sb, sb / 1e9);
            }
            double mb = 0, mp = 0;
            if (get(base + "mix" + ts, &mb, &mp))
                std::fprintf(
                    f, "| %s | %zu | mix (512-query prefill + 15 decodes) | %.2f | %.1f | | | |\n",
                    impl, t, mb / 1e9, mp);
        }
    std::fflush(f);
}

} // namespace sdpa_bench
