/* bench.h -- the C side of sdpa-bench: thread pool, machine peaks, test data, OpenBLAS baseline,
 * heap tracking */
#ifndef SDPA_BENCH_H
#define SDPA_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "pool.h" /* bench_pool, the thread pool the benchmarks run on */
#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Thread counts the benchmarks run at (index 1..BENCH_MAX_THREADS of the arrays below). */
#define BENCH_MAX_THREADS 2

/* ---- machine limits, measured at start-up (machine.c) ------------------------------------ */
#define BENCH_MAX_ISAS 4
typedef struct bench_machine {
    size_t n_isa;
    const char *isa[BENCH_MAX_ISAS]; /* peak classes (sdpa_impl_peak_class) */
    double fma_flops[BENCH_MAX_ISAS][BENCH_MAX_THREADS + 1]; /* FLOP/s, [isa][threads] */
    const char *read_isa;                                    /* the loads the read test used */
    int read_streams;                                        /* 1 or 2: the faster read kernel */
    size_t read_bytes;                                       /* size of the buffer read */
    double read_bw[BENCH_MAX_THREADS + 1];                   /* bytes/s, [threads] */
    /* kept for the paired measurements below */
    void *fma_fns[BENCH_MAX_ISAS];
    void *read_fn;
    uint64_t (*xor_fn)(const void *p, size_t bytes); /* bench_xor_<widest ISA> */
    float *read_buf;
} bench_machine;

/* Measures the FMA peak of every ISA this CPU and OS support (best of a few repeats) and the
   read bandwidth over a buffer of read_bytes, at 1..BENCH_MAX_THREADS threads (pools[t] runs
   t threads). Returns 0, or -1 when the bandwidth buffer could not be allocated (then read_bw
   is 0). */
int bench_measure_machine(bench_machine *m, bench_pool *const *pools, size_t read_bytes);
/* The FMA peak that an implementation is judged against: the ISA of its peak class in the
   library's registry (sdpa_impl_peak_class), else the best measured. *isa receives the ISA
   used ("none" when nothing was measured). */
double bench_fma_peak_for(const bench_machine *m, const char *impl, size_t threads,
                          const char **isa);
/* The best FMA peak of any ISA at this thread count (for the BLAS baseline). */
double bench_fma_peak_best(const bench_machine *m, size_t threads, const char **isa);

/* Paired measurements: on a shared machine the speed available changes from one moment to the
   next (by half and more, measured here), so a ratio against a limit measured at start-up can
   mislead either way. sdpa-bench takes one of these before every timed iteration and once after
   the last, and judges the run against their mean. The FMA peak of the ISA that
   bench_fma_peak_for would pick (or of the best ISA when impl is NULL): the best of 2 ms runs
   over `seconds` (at least 10 runs); the read bandwidth: the best of `reps` reads of the
   start-up buffer (0 when there is none). */
double bench_fma_peak_now(const bench_machine *m, bench_pool *const *pools, const char *impl,
                          size_t threads, double seconds);
double bench_read_bw_now(const bench_machine *m, bench_pool *const *pools, size_t threads,
                         int reps);
/* The read bandwidth of a working set of `bytes` (at most the start-up buffer) that stays in
   cache: its first `bytes` read again and again on the calling thread, the best of 5 trials of
   about 64 MiB each; what a primitive whose data fits a cache level is judged against. */
double bench_read_bw_cached(const bench_machine *m, size_t bytes);
void bench_machine_release(bench_machine *m);

/* The per-ISA kernels (peak_<isa>.c, each compiled with only its own ISA flags). Each FMA
   kernel runs iters rounds of independent multiply-add chains and returns the FLOPs done; the
   chains' result goes to *sink so that nothing is optimised away. Each read kernel returns the
   sum of p[0..n), read as one stream (bench_read_*) or as two side by side (bench_read2_*).
   Only called when the CPU supports the ISA. */
double bench_fma_scalar(uint64_t iters, float *sink);
float bench_read_base(const float *p, size_t n);
float bench_read2_base(const float *p, size_t n);
const char *bench_read_base_name(void);
#if defined(__aarch64__)
double bench_fma_neon(uint64_t iters, float *sink);
#endif
double bench_fma_avx2(uint64_t iters, float *sink);
float bench_read_avx2(const float *p, size_t n);
float bench_read2_avx2(const float *p, size_t n);
double bench_fma_avx512(uint64_t iters, float *sink);
float bench_read_avx512(const float *p, size_t n);
float bench_read2_avx512(const float *p, size_t n);
/* The xor of the 64-byte lines of p[0..bytes) (bytes a multiple of 64, p 64-byte aligned), in
   each ISA's widest loads: a read of any bits (bench_machine.xor_fn: the widest this CPU runs) */
uint64_t bench_xor_base(const void *p, size_t bytes);
uint64_t bench_xor_avx2(const void *p, size_t bytes);
uint64_t bench_xor_avx512(const void *p, size_t bytes);
float bench_kv_walk_avx512(const uint16_t *k, const uint16_t *v, size_t rows, size_t row_elems,
                           size_t block, int order, size_t pf);
/* A decode score tile's inner loop alone, K in L1 converted from fmt (0 f16, 1 bf16, 2 q8_0,
   3 q4_0) feeding 4 rows' FMAs; 4: f16 with each tile's reduction tree and score stores (every
   128 elements a key): returns the FMA flops of iters passes (peak_avx512.c) */
double bench_mix_avx512(int fmt, uint64_t iters, float *sink);
/* The same in 256-bit vectors for fmt 0 (f16) and 1 (bf16) (peak_avx2.c) */
double bench_mix_avx2(int fmt, uint64_t iters, float *sink);
/* The decode's arithmetic floor over the 16-bit K/V rows of one KV head (f16, or bf16 when
   bf16), d = 128 elements a row: every element converted once and multiplied into each of
   `rows` (1, 2, 4 or 7) query rows, nothing else; kp[i], vp[i] the first row of page i of
   `page` keys, n keys in all (contiguous rows: one page of n). Returns a sum (0 for another d). */
typedef float bench_floor_fn(const uint16_t *const *kp, const uint16_t *const *vp, size_t page,
                             size_t n, size_t d, int bf16, int rows);
bench_floor_fn bench_floor_avx2, bench_floor_avx512;

/* ---- test data (bench_data.c) ------------------------------------------------------------ */
/* n elements of dtype, deterministic pseudo-random values in [-1, 1) from seed; 64-byte
   aligned; free with bench_free. NULL on failure. */
void *bench_alloc_random(sdpa_dtype dtype, size_t n, uint64_t seed);
void *bench_alloc_zero(size_t bytes);
void bench_free(void *p);
/* The n elements of src (f32, f16 or bf16; n a multiple of 32) quantized to dst (a block
   format) by the library's sdpa_quantize: the same values a 16-bit tensor holds, in the
   block format. Allocated as bench_alloc_zero does; NULL on failure. */
void *bench_alloc_quantized(sdpa_dtype dst, const void *src, sdpa_dtype src_type, size_t n);

/* ---- unfused OpenBLAS attention (blas_attn.c, only with BENCH_HAVE_BLAS) ------------------ */
/* Dense f32 tensors [batch][heads][len][dim]; per (batch, head): S = Q Kᵀ scale (sgemm), row
   softmax with the causal mask, O = P V (sgemm). scores: q_len * kv_len floats of scratch. */
void bench_blas_attention(const sdpa_params *p, const float *q, const float *k, const float *v,
                          float *o, float *scores);
void bench_blas_set_threads(int n);
const char *bench_blas_corename(void);
const char *bench_blas_config(void);

/* ---- heap use of the library during a call (alloc_track.c, link-time --wrap) ------------- */
/* Starts counting bytes allocated minus freed by anything linked with the wrap (the library's
   objects, the bench's own C code); returns the peak since begin, or -1 when the build could
   not wrap the allocator. */
void bench_heap_track_begin(void);
long long bench_heap_track_end(void);

#ifdef __cplusplus
}
#endif
#endif /* SDPA_BENCH_H */
