// bench_common.cc -- sdpa-bench's shared pieces: the prefill and decode shapes, their test tensors
// and views, timing helpers
#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>

#include "sdpa_bench.h"

namespace sdpa_bench
{

// The shapes of the brief: three prefill (compute-bound) and three decode (memory-bound).
static const std::vector<Shape> g_prefill_shapes = {
    {"B1_H16_L2048_D128_causal", 1, 16, 16, 2048, 2048, 128, true, SDPA_F32},
    {"B1_H32_L512_D64_causal", 1, 32, 32, 512, 512, 64, true, SDPA_F32},
    {"B1_H8_L1024_D128", 1, 8, 8, 1024, 1024, 128, false, SDPA_F32},
};
static const std::vector<Shape> g_decode_shapes = {
    {"B1_Hq32_Hkv8_kv32768_D128_f16", 1, 32, 8, 1, 32768, 128, false, SDPA_F16},
    {"B1_Hq32_Hkv8_kv32768_D128_bf16", 1, 32, 8, 1, 32768, 128, false, SDPA_BF16},
    {"B1_Hq32_Hkv32_kv16384_D128_f16", 1, 32, 32, 1, 16384, 128, false, SDPA_F16},
};
const std::vector<Shape> &prefill_shapes() { return g_prefill_shapes; }
const std::vector<Shape> &decode_shapes() { return g_decode_shapes; }

size_t dtype_bytes(sdpa_dtype t) { return t == SDPA_F32 ? 4 : 2; }

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

bool timed_forward(benchmark::State &st, const sdpa_impl *impl, const sdpa_params *p,
                   const sdpa_tensor *q, const sdpa_tensor *k, const sdpa_tensor *v,
                   const sdpa_tensor *o, double *seconds)
{
    const auto t0 = std::chrono::steady_clock::now();
    const sdpa_status r = sdpa_impl_forward(impl, p, q, k, v, o);
    *seconds = seconds_since(t0);
    if (r != SDPA_OK) {
        st.SkipWithError(sdpa_status_str(r));
        return false;
    }
    benchmark::ClobberMemory();
    return true;
}

bool requires_feature(const sdpa_impl *impl, const char *key)
{
    const char *k;
    for (size_t i = 0; (k = sdpa_impl_requires_key(impl, i)) != nullptr; i++)
        if (std::strcmp(k, key) == 0) return true;
    return false;
}

bool is_reference(const sdpa_impl *impl)
{
    return impl && sdpa_impl_requires_key(impl, 0) == nullptr;
}

std::vector<const sdpa_impl *> runnable_impls(bool simd_only)
{
    std::vector<const sdpa_impl *> out;
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (sdpa_impl_supported(impl) && !(simd_only && is_reference(impl))) out.push_back(impl);
    }
    return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace sdpa_bench
