/* ab.c -- the harness of tools/ab/ab.sh: two libsdpa builds timed in turn in one process, on the
   same buffers */
/*
 * ab.sh renames every global symbol of build A's libsdpa.a to a_<name> and of build B's to
 * b_<name>, then compiles this file three times: with AB_SIDE_PREFIX=a_ against A's own sdpa.h,
 * with AB_SIDE_PREFIX=b_ against B's, and plainly for the harness. A side turns the public API
 * into plain calls (struct ab_call in, a status out), so the harness calls no function of sdpa.h
 * (convert.h brings this tree's, for its inline conversions alone) and each build is called
 * through the header it was built from (the two may differ, e.g. by a new field in sdpa_params).
 *
 * Why one process: on a shared machine two processes differ by where their pages landed and by
 * what else ran at the time, which moves the speed of a memory-bound call by more than most
 * kernel changes do. Here both builds read the same K/V pages, call by call in turn, so what
 * the machine does to one it does to the other.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stddef.h>

typedef enum ab_dtype {
    AB_F32 = 0,
    AB_F16,
    AB_BF16,
    AB_Q8_0,
    AB_Q4_0,
    AB_Q4_1,
    AB_IQ4_NL,
    AB_Q5_0,
    AB_Q5_1
} ab_dtype;

/* One attention call: tensors [batch][head][token][dim], f32 Q and O, K/V in kv_type; with
   page != 0 (batch 1), K and V are pages [kv_len / page][kv_heads][page][dim] of the same
   buffers, key j in page table[j / page]. The score modifiers off where 0 or NULL. mask: an
   f16 [batch][q_len][kv_len], one plane for every head; mask_scales needs it. */
typedef struct ab_call {
    size_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    bool causal;
    ab_dtype kv_type;
    size_t page;
    const int *table;
    const float *q;
    const void *k, *v;
    float *o;
    float softcap;
    int q8_scores;
    const float *alibi_slopes, *mask_scales;
    const void *mask;
    /* threads > 1: the call runs on a pool of that many threads (the harness's) */
    size_t threads;
    void (*parallel_for)(void *pool, size_t n_tasks, void (*task)(void *, size_t, size_t),
                         void *arg);
    void *pool;
} ab_call;

/* One build, as the harness sees it: its registry by index, and sdpa_impl_forward. */
typedef struct ab_side {
    size_t (*count)(void);
    const char *(*name)(size_t impl);
    bool (*supported)(size_t impl);
    /* 0 when the call succeeded; otherwise the status, with the build's explanation in msg */
    int (*forward)(size_t impl, const ab_call *c, char *msg, size_t msg_len);
} ab_side;

#define AB_CAT2(x, y) x##y
#define AB_CAT(x, y)  AB_CAT2(x, y)

#ifdef AB_SIDE_PREFIX
/* ---- one side: the build's header, with the names it declares renamed as its archive was ---- */
#include <stdio.h>
#include <string.h>

#define sdpa_impl_count     AB_CAT(AB_SIDE_PREFIX, sdpa_impl_count)
#define sdpa_impl_at        AB_CAT(AB_SIDE_PREFIX, sdpa_impl_at)
#define sdpa_impl_name      AB_CAT(AB_SIDE_PREFIX, sdpa_impl_name)
#define sdpa_impl_supported AB_CAT(AB_SIDE_PREFIX, sdpa_impl_supported)
#define sdpa_impl_forward   AB_CAT(AB_SIDE_PREFIX, sdpa_impl_forward)
#define sdpa_validate       AB_CAT(AB_SIDE_PREFIX, sdpa_validate)
#define sdpa_status_str     AB_CAT(AB_SIDE_PREFIX, sdpa_status_str)
#include "sdpa.h"

static size_t side_count(void) { return sdpa_impl_count(); }
static const char *side_name(size_t i) { return sdpa_impl_name(sdpa_impl_at(i)); }
static bool side_supported(size_t i) { return sdpa_impl_supported(sdpa_impl_at(i)); }

static sdpa_tensor side_view(const void *data, sdpa_dtype t, size_t heads, size_t len, size_t dim)
{
    sdpa_tensor v;
    memset(&v, 0, sizeof v);
    v.data = (void *)data; /* the library only reads q, k and v */
    v.dtype = t;
    v.token_stride = (ptrdiff_t)dim;
    v.head_stride = (ptrdiff_t)(len * dim);
    v.batch_stride = (ptrdiff_t)(heads * len * dim);
    return v;
}

static int side_forward(size_t i, const ab_call *c, char *msg, size_t msg_len)
{
    sdpa_params p;
    memset(&p, 0, sizeof p); /* no parallel_for: the call runs on this thread alone */
    if (c->threads > 1) {
        p.parallel_for = c->parallel_for;
        p.pool = c->pool;
        p.n_threads = c->threads;
    }
    p.batch = c->batch;
    p.q_heads = c->q_heads;
    p.kv_heads = c->kv_heads;
    p.q_len = c->q_len;
    p.kv_len = c->kv_len;
    p.head_dim = c->head_dim;
    p.causal = c->causal;
    const sdpa_dtype kt = c->kv_type == AB_F16      ? SDPA_F16
                          : c->kv_type == AB_BF16   ? SDPA_BF16
                          : c->kv_type == AB_Q8_0   ? SDPA_Q8_0
                          : c->kv_type == AB_Q4_0   ? SDPA_Q4_0
                          : c->kv_type == AB_Q4_1   ? SDPA_Q4_1
                          : c->kv_type == AB_IQ4_NL ? SDPA_IQ4_NL
                          : c->kv_type == AB_Q5_0   ? SDPA_Q5_0
                          : c->kv_type == AB_Q5_1   ? SDPA_Q5_1
                                                    : SDPA_F32;
    const sdpa_tensor q = side_view(c->q, SDPA_F32, c->q_heads, c->q_len, c->head_dim);
    const size_t kl = c->page ? c->page : c->kv_len; /* keys per [head] view */
    sdpa_tensor k = side_view(c->k, kt, c->kv_heads, kl, c->head_dim);
    sdpa_tensor v = side_view(c->v, kt, c->kv_heads, kl, c->head_dim);
    if (c->page) {
        p.block_table = c->table;
        p.page_size = c->page;
        p.max_pages = p.n_pages = c->kv_len / c->page;
    }
    const sdpa_tensor o = side_view(c->o, SDPA_F32, c->q_heads, c->q_len, c->head_dim);
    sdpa_tensor mask = side_view(c->mask, SDPA_F16, 1, c->q_len, c->kv_len);
    mask.head_stride = 0; /* broadcast over the heads */
    p.softcap = c->softcap;
    p.q8_scores = c->q8_scores;
    p.alibi_slopes = c->alibi_slopes;
    p.mask = c->mask ? &mask : NULL;
    p.mask_scales = c->mask_scales;
    const sdpa_status s = sdpa_impl_forward(sdpa_impl_at(i), &p, &q, &k, &v, &o);
    if (s != SDPA_OK && msg_len) {
        /* the validator's words when it objects, else the status (e.g. out of memory) */
        if (sdpa_validate(&p, &q, &k, &v, &o, msg, msg_len) == SDPA_OK)
            snprintf(msg, msg_len, "%s", sdpa_status_str(s));
    }
    return (int)s;
}

const ab_side AB_CAT(ab_side_, AB_SIDE_PREFIX) = {side_count, side_name, side_supported,
                                                  side_forward};

#else
/* ---- the harness ----------------------------------------------------------------------- */
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "convert.h" /* the project's exact f16/bf16 rounding */

#if defined(__x86_64__) || defined(__i386__)
#include <cpu_features/cpuinfo_x86.h>
#define AB_X86 1
#endif

extern const ab_side ab_side_a_, ab_side_b_;
static const ab_side *const sides[2] = {&ab_side_a_, &ab_side_b_};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- a pool of threads for --threads: they sleep between calls, and within a call every
   thread, the caller too, takes tasks from one counter until none is left ---- */
#define AB_MAX_THREADS 64
typedef void (*ab_task_fn)(void *arg, size_t task, size_t thread);
typedef struct ab_pool {
    size_t n; /* threads, the caller included */
    pthread_t th[AB_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t go;
    unsigned long gen; /* calls handed out */
    bool quit;
    ab_task_fn fn;
    void *arg;
    size_t n_tasks;
    atomic_size_t next, busy; /* the next task; the workers still in the call */
} ab_pool;

typedef struct ab_worker {
    ab_pool *pool;
    size_t id;
} ab_worker;

static void pool_take(ab_pool *p, size_t id)
{
    for (size_t t; (t = atomic_fetch_add(&p->next, 1)) < p->n_tasks;) p->fn(p->arg, t, id);
}

static void *pool_worker(void *arg)
{
    const ab_worker *w = arg;
    ab_pool *p = w->pool;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
        seen = p->gen;
        const bool quit = p->quit;
        pthread_mutex_unlock(&p->mu);
        if (quit) return NULL;
        pool_take(p, w->id);
        atomic_fetch_sub(&p->busy, 1);
    }
}

static void pool_parallel_for(void *pool, size_t n_tasks, void (*task)(void *, size_t, size_t),
                              void *arg)
{
    ab_pool *p = pool;
    pthread_mutex_lock(&p->mu);
    p->fn = task, p->arg = arg, p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->busy, p->n - 1);
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    pool_take(p, 0);
    while (atomic_load(&p->busy) != 0) {
    }
}

static ab_worker pool_workers[AB_MAX_THREADS];

static int pool_start(ab_pool *p, size_t n)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    for (size_t i = 1; i < n; i++) {
        pool_workers[i] = (ab_worker){p, i};
        if (pthread_create(&p->th[i], NULL, pool_worker, &pool_workers[i]) != 0) {
            p->n = i;
            return -1;
        }
    }
    return 0;
}

static void pool_stop(ab_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
}

/* ---- shapes: those of bench/sdpa_bench.cc and bench/bench_variants.cc, with their names ---- */
/* the score modifiers of a variant row: an f16 mask broadcast over the heads holds values in
   [-1, 1) (mask_f16_bcast) or -|i' - j| (mask_scales, with the ALiBi slopes as its factors),
   and -inf at a few entries in both; AB_FAST, a decode row's q8_scores 1 */
typedef enum ab_variant {
    AB_PLAIN = 0,
    AB_SOFTCAP,
    AB_ALIBI,
    AB_MASK,
    AB_MASK_SCALES,
    AB_FAST
} ab_variant;

typedef struct shape {
    const char *kind, *name;
    size_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    bool causal;
    ab_dtype kv_type;
    ab_variant variant;
    size_t page; /* keys per page of a paged K/V, 0: contiguous */
} shape;

static const shape shapes[] = {
    {"prefill", "B1_H16_L2048_D128_causal", 1, 16, 16, 2048, 2048, 128, true, AB_F32, AB_PLAIN, 0},
    {"prefill", "B1_H32_L512_D64_causal", 1, 32, 32, 512, 512, 64, true, AB_F32, AB_PLAIN, 0},
    {"prefill", "B1_H8_L1024_D128", 1, 8, 8, 1024, 1024, 128, false, AB_F32, AB_PLAIN, 0},
/* a chunk of 512 queries over 2048 cached keys (GQA 16/4, f16), contiguous and paged */
#define AB_CHUNK(name, page)                                                                       \
    {                                                                                              \
        "prefill", "B1_Hq16_Hkv4_q512_kv2048_D128_causal_f16" name, 1, 16, 4, 512, 2048, 128,      \
            true, AB_F16, AB_PLAIN, page                                                           \
    }
    AB_CHUNK("", 0),
    AB_CHUNK("_paged16", 16),
    AB_CHUNK("_paged128", 128),
#undef AB_CHUNK
/* a decode row: one query, D 128, no modifier */
#define AB_DECODE(name, hq, hkv, kv, type, page)                                                   \
    {                                                                                              \
        "decode", name, 1, hq, hkv, 1, kv, 128, false, type, AB_PLAIN, page                        \
    }
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_f16", 32, 8, 32768, AB_F16, 0),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_bf16", 32, 8, 32768, AB_BF16, 0),
    AB_DECODE("B1_Hq32_Hkv32_kv16384_D128_f16", 32, 32, 16384, AB_F16, 0),
    AB_DECODE("B1_Hq16_Hkv8_kv32768_D128_f16", 16, 8, 32768, AB_F16, 0),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_q8_0", 32, 8, 32768, AB_Q8_0, 0),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_q4_0", 32, 8, 32768, AB_Q4_0, 0),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_q4_1", 32, 8, 32768, AB_Q4_1, 0),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_iq4_nl", 32, 8, 32768, AB_IQ4_NL, 0),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_q5_0", 32, 8, 32768, AB_Q5_0, 0),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_q5_1", 32, 8, 32768, AB_Q5_1, 0),
    /* 7 rows per KV head (Qwen2's grouping): a score tile shaped for 8 rows */
    AB_DECODE("B1_Hq28_Hkv4_kv32768_D128_bf16", 28, 4, 32768, AB_BF16, 0),
    AB_DECODE("B1_Hq28_Hkv4_kv32768_D128_q8_0", 28, 4, 32768, AB_Q8_0, 0),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_f16_paged16", 32, 8, 32768, AB_F16, 16),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_f16_paged128", 32, 8, 32768, AB_F16, 128),
    /* pages on the other paths: 7 rows (no interleaved turns), one row (MHA), a block format */
    AB_DECODE("B1_Hq28_Hkv4_kv32768_D128_f16_paged16", 28, 4, 32768, AB_F16, 16),
    AB_DECODE("B1_Hq28_Hkv4_kv32768_D128_f16_paged128", 28, 4, 32768, AB_F16, 128),
    AB_DECODE("B1_Hq32_Hkv32_kv16384_D128_f16_paged16", 32, 32, 16384, AB_F16, 16),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_q8_0_paged16", 32, 8, 32768, AB_Q8_0, 16),
    AB_DECODE("B1_Hq32_Hkv8_kv32768_D128_q8_0_paged128", 32, 8, 32768, AB_Q8_0, 128),
/* fast scores (q8_scores 1): sdpa-bench's quant/<impl>/decode_..._fast rows */
#define AB_DECODE_FAST(name, hq, hkv, type)                                                        \
    {                                                                                              \
        "decode", name "_fast", 1, hq, hkv, 1, 32768, 128, false, type, AB_FAST, 0                 \
    }
    AB_DECODE_FAST("B1_Hq32_Hkv8_kv32768_D128_q8_0", 32, 8, AB_Q8_0),
    AB_DECODE_FAST("B1_Hq32_Hkv8_kv32768_D128_q4_0", 32, 8, AB_Q4_0),
    AB_DECODE_FAST("B1_Hq32_Hkv8_kv32768_D128_q4_1", 32, 8, AB_Q4_1),
    AB_DECODE_FAST("B1_Hq32_Hkv8_kv32768_D128_q5_0", 32, 8, AB_Q5_0),
    AB_DECODE_FAST("B1_Hq32_Hkv8_kv32768_D128_q5_1", 32, 8, AB_Q5_1),
    AB_DECODE_FAST("B1_Hq32_Hkv8_kv32768_D128_iq4_nl", 32, 8, AB_IQ4_NL),
    AB_DECODE_FAST("B1_Hq28_Hkv4_kv32768_D128_q8_0", 28, 4, AB_Q8_0),
#undef AB_DECODE_FAST
#define AB_VARIANT(name, v)                                                                        \
    {                                                                                              \
        "variant", "prefill_B1_H16_L2048_D128_causal_f16_" name, 1, 16, 16, 2048, 2048, 128, true, \
            AB_F16, v, 0                                                                           \
    }
    AB_VARIANT("softcap30", AB_SOFTCAP),
    AB_VARIANT("alibi", AB_ALIBI),
    AB_VARIANT("mask_f16_bcast", AB_MASK),
    AB_VARIANT("mask_f16_scales", AB_MASK_SCALES),
#undef AB_VARIANT
#undef AB_DECODE
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

static bool is_decode(const shape *s) { return strcmp(s->kind, "decode") == 0; }
static bool is_variant(const shape *s) { return s->variant != AB_PLAIN && s->variant != AB_FAST; }
static bool is_block(ab_dtype t) { return t >= AB_Q8_0; }
/* bytes of n elements (n a multiple of 32 for ggml's block formats) */
static size_t kv_bytes(ab_dtype t, size_t n)
{
    return t == AB_Q8_0                     ? n / 32 * 34
           : t == AB_Q4_0 || t == AB_IQ4_NL ? n / 32 * 18
           : t == AB_Q4_1                   ? n / 32 * 20
           : t == AB_Q5_0                   ? n / 32 * 22
           : t == AB_Q5_1                   ? n / 32 * 24
                                            : n * (t == AB_F32 ? 4 : 2);
}

/* 4 flops (a multiply-add in Q·Kᵀ and one in P·V) per visible (query, key) pair and dimension;
   with the causal mask query i sees keys j <= i + kv_len - q_len, counted row by row */
static double shape_flops(const shape *s)
{
    double pairs = 0;
    for (size_t i = 0; i < s->q_len; i++) {
        long long lim = (long long)s->kv_len;
        if (s->causal) {
            lim = (long long)i + (long long)s->kv_len - (long long)s->q_len + 1;
            if (lim > (long long)s->kv_len) lim = (long long)s->kv_len;
            if (lim < 0) lim = 0;
        }
        pairs += (double)lim;
    }
    return 4.0 * pairs * (double)s->head_dim * (double)(s->batch * s->q_heads);
}

/* what a decode call must bring from memory: K and V, once */
static double shape_kv_bytes(const shape *s)
{
    return 2.0 * (double)kv_bytes(s->kv_type, s->batch * s->kv_heads * s->kv_len * s->head_dim);
}

/* ---- buffers ------------------------------------------------------------------------------ */
/* As bench/bench_data.c and an engine's KV cache: buffers of 2 MiB and more on 2 MiB boundaries
   with transparent huge pages requested, since with 4 KiB pages a stream through hundreds of MiB
   walks the page tables every 4 KiB and that cost would be part of what is measured. */
static void *ab_alloc(size_t bytes)
{
    void *p = NULL;
    const size_t huge = (size_t)2 << 20;
    if (bytes >= huge) {
        const size_t rounded = (bytes + huge - 1) / huge * huge;
        if (posix_memalign(&p, huge, rounded) != 0) return NULL;
#ifdef MADV_HUGEPAGE
        (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    } else if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        return NULL;
    }
    return p;
}

/* splitmix64: the same data on every run */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n values in [-1, 1) of the given type from seed (block formats: scales in [1/128, 1/64),
   q4_1's minimum -8 times its scale, q5_1's -16 times, quants and 5th bits random); NULL when out
   of memory */
static void *alloc_random(ab_dtype t, size_t n, uint64_t seed)
{
    void *p = ab_alloc(kv_bytes(t, n));
    if (!p) return NULL;
    uint64_t s = seed;
    if (is_block(t)) {
        const bool has_m = t == AB_Q4_1 || t == AB_Q5_1;
        const size_t bb = kv_bytes(t, 32), q0 = has_m ? 4 : 2;
        unsigned char *b = p;
        for (size_t i = 0; i < n / 32; i++, b += bb) {
            const float d = (1.0f + (float)(next_u64(&s) >> 40) / 16777216.0f) / 128.0f;
            const uint16_t h = sdpa_f32_to_f16(d);
            const uint16_t m = sdpa_f32_to_f16((t == AB_Q5_1 ? -16.0f : -8.0f) * d);
            memcpy(b, &h, 2);
            if (has_m) memcpy(b + 2, &m, 2);
            for (size_t j = q0; j < bb; j++) b[j] = (unsigned char)next_u64(&s);
        }
        return p;
    }
    for (size_t i = 0; i < n; i++) {
        const float x = (float)(next_u64(&s) >> 40) * (2.0f / 16777216.0f) - 1.0f;
        if (t == AB_F32)
            ((float *)p)[i] = x;
        else
            ((uint16_t *)p)[i] = t == AB_F16 ? sdpa_f32_to_f16(x) : sdpa_f32_to_bf16(x);
    }
    return p;
}

/* The modifiers of a variant row into c, its buffers in *slopes and *mask (NULL for a plain
   row): 0, or -1 when out of memory. */
static int variant_init(const shape *s, ab_call *c, float **slopes, uint16_t **mask)
{
    *slopes = NULL, *mask = NULL;
    if (s->variant == AB_SOFTCAP) c->softcap = 30.0f;
    if (s->variant == AB_FAST) c->q8_scores = 1;
    if (s->variant == AB_ALIBI || s->variant == AB_MASK_SCALES) {
        /* the standard slopes 2^(-8 (h + 1) / H) */
        *slopes = malloc(s->q_heads * sizeof(float));
        if (!*slopes) return -1;
        for (size_t h = 0; h < s->q_heads; h++)
            (*slopes)[h] = exp2f(-8.0f * (float)(h + 1) / (float)s->q_heads);
        if (s->variant == AB_ALIBI)
            c->alibi_slopes = *slopes;
        else
            c->mask_scales = *slopes;
    }
    if (s->variant == AB_MASK || s->variant == AB_MASK_SCALES) {
        const size_t n = s->batch * s->q_len * s->kv_len;
        *mask = s->variant == AB_MASK ? alloc_random(AB_F16, n, 4) : ab_alloc(n * 2);
        if (!*mask) return -1;
        for (size_t b = 0; b < s->batch; b++)
            for (size_t i = 0; i < s->q_len; i++)
                for (size_t j = 0; j < s->kv_len; j++) {
                    uint16_t *e = *mask + (b * s->q_len + i) * s->kv_len + j;
                    const double ip = (double)i + (double)s->kv_len - (double)s->q_len;
                    if (s->variant == AB_MASK_SCALES) *e = sdpa_f32_to_f16(-(float)fabs(ip - j));
                    if ((i * 31 + j * 17) % 97 == 0) *e = 0xfc00u; /* -inf */
                }
        c->mask = *mask;
    }
    return 0;
}

/* ---- the read that precedes every decode call ----------------------------------------------- */
/* It evicts the previous call's K/V from every cache level, so each decode call streams from
   memory as in an engine (a layer's KV cache is long gone from the caches by its next token),
   and timed, it is the read bandwidth available at that moment: the reference of the call
   that follows it. The buffer's pages all differ (a hash of the index), since the host of a
   virtual machine may merge pages of equal contents, and a read of merged pages is served from
   the cache. One stream or two side by side, whichever reads faster, in the widest loads the
   CPU has, as bench/machine.c measures the bandwidth the benchmark judges decode against. */
typedef float ab_v16 __attribute__((vector_size(64)));
typedef float (*read_fn)(const float *p, size_t n);

#define AB_READ_KERNELS(kind, attr)                                                                \
    attr static float read1_##kind(const float *p, size_t n)                                       \
    {                                                                                              \
        const ab_v16 *a = (const ab_v16 *)p;                                                       \
        ab_v16 s0 = {0}, s1 = {0};                                                                 \
        for (size_t i = 0; i + 2 <= n / 16; i += 2) {                                              \
            s0 += a[i];                                                                            \
            s1 += a[i + 1];                                                                        \
        }                                                                                          \
        s0 += s1;                                                                                  \
        float r = 0;                                                                               \
        for (int k = 0; k < 16; k++) r += s0[k];                                                   \
        return r;                                                                                  \
    }                                                                                              \
    attr static float read2_##kind(const float *p, size_t n)                                       \
    {                                                                                              \
        const size_t h = n / 64 * 2; /* vectors in each half, whole steps */                       \
        const ab_v16 *a = (const ab_v16 *)p, *b = a + h;                                           \
        ab_v16 s0 = {0}, s1 = {0}, t0 = {0}, t1 = {0};                                             \
        for (size_t i = 0; i < h; i += 2) {                                                        \
            s0 += a[i];                                                                            \
            s1 += a[i + 1];                                                                        \
            t0 += b[i];                                                                            \
            t1 += b[i + 1];                                                                        \
        }                                                                                          \
        s0 += s1 + t0 + t1;                                                                        \
        float r = 0;                                                                               \
        for (int k = 0; k < 16; k++) r += s0[k];                                                   \
        return r;                                                                                  \
    }

AB_READ_KERNELS(base, )
#ifdef AB_X86
/* per-function targets, named by the width of their loads: the harness itself is built for the
   baseline and runs these only after cpu_features has confirmed the CPU and OS support them.
   Float loads and adds are all they use, which AVX has at 256 bits and AVX-512F at 512. */
AB_READ_KERNELS(w256, __attribute__((target("avx"))))
AB_READ_KERNELS(w512, __attribute__((target("avx512f"))))
#endif

typedef struct reader {
    float *buf;
    size_t floats;
    read_fn fn;
    const char *desc;
} reader;

static volatile float ab_sink; /* keeps every read and its sum */

/* bytes per second of one read of the whole buffer */
static double read_once(const reader *r)
{
    const double t0 = now_s();
    const float s = r->fn(r->buf, r->floats);
    const double dt = now_s() - t0;
    ab_sink += s;
    return dt > 0 ? (double)r->floats * sizeof(float) / dt : 0;
}

static int reader_init(reader *r, size_t bytes)
{
    r->floats = bytes / sizeof(float) / 64 * 64;
    r->buf = ab_alloc(r->floats * sizeof(float));
    if (!r->buf) return -1;
    for (size_t i = 0; i < r->floats; i++)
        r->buf[i] = (float)((uint32_t)(i * 2654435761u) >> 24) * (1.0f / 256.0f);
    read_fn one = read1_base, two = read2_base;
    const char *loads = "baseline";
#ifdef AB_X86
    /* cleared when the OS does not save the registers */
    const X86Features f = GetX86Info().features;
    if (f.avx512f) {
        one = read1_w512, two = read2_w512, loads = "512-bit";
    } else if (f.avx) {
        one = read1_w256, two = read2_w256, loads = "256-bit";
    }
#endif
    /* in turns, best of four each: the faster kernel is the most one core can pull */
    double bw1 = 0, bw2 = 0;
    for (int rep = 0; rep < 4; rep++) {
        r->fn = one;
        const double a = read_once(r);
        r->fn = two;
        const double b = read_once(r);
        if (a > bw1) bw1 = a;
        if (b > bw2) bw2 = b;
    }
    r->fn = bw2 > bw1 ? two : one;
    static char desc[96];
    snprintf(desc, sizeof desc, "%s loads, %d stream%s, %zu MiB", loads, bw2 > bw1 ? 2 : 1,
             bw2 > bw1 ? "s" : "", r->floats * sizeof(float) >> 20);
    r->desc = desc;
    return 0;
}

/* ---- statistics --------------------------------------------------------------------------- */
static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the q-quantile of v[0..n) (linear between order statistics); sorts v */
static double quantile(double *v, size_t n, double q)
{
    if (n == 0) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    const double pos = q * (double)(n - 1);
    const size_t lo = (size_t)pos;
    const size_t hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (pos - (double)lo) * (v[hi] - v[lo]);
}

/* the largest |a - b|; infinity when either side holds a NaN or an infinity (a build that left
   its output unwritten leaves the NaN poison) */
static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d > m) m = d;
    }
    return m;
}

/* ---- options ------------------------------------------------------------------------------ */
typedef struct options {
    int calls;
    double row_seconds; /* 0: no cap */
    FILE *csv;
    bool abba, list;
    const char *impls; /* comma-separated, or NULL: every implementation both builds run */
    regex_t filter;
    bool has_filter;
    size_t read_mib;
    size_t threads;
    double tolerance;
    const char *label[2];
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ab [options]   (normally run through tools/ab/ab.sh REV_A REV_B [options])\n"
            "  --calls N          timed calls per build and row (default 15)\n"
            "  --quick            5 calls per build and row\n"
            "  --row-seconds S    fewer calls (not below 5) where N pairs would take longer than\n"
            "                     S seconds, judged by the untimed first calls\n"
            "                     (default 60; 0: off)\n"
            "  --csv FILE         every timed call: row, pair, build, wall and CPU ms, and the\n"
            "                     read bandwidth before it (GB/s, decode)\n"
            "  --order abba|abab  the order of each pair of calls (default abba: AB BA AB ...)\n"
            "  --filter REGEX     rows whose kind/impl/shape matches, e.g. '^decode/.*_f16$'\n"
            "  --impl LIST        implementations, comma-separated (default: all both builds run)\n"
            "  --read-mib N       the read before each decode call (default 512)\n"
            "  --threads N        run every call on N threads (default 1; the read stays one\n"
            "                     thread's, cpu B/A counts the calling thread's time alone)\n"
            "  --tolerance X      largest |B - A| of an output taken as agreement (default 1e-5)\n"
            "  --list             print the rows that would run, and exit\n"
            "  --label-a S, --label-b S   how to name the builds in the report\n");
}

static bool impl_wanted(const options *o, const char *name)
{
    if (!o->impls) return true;
    const size_t n = strlen(name);
    for (const char *p = o->impls; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}

/* ---- one row: a shape on an implementation, A and B in turn ---------------------------------- */
typedef struct row_result {
    int calls;            /* timed calls per build */
    double ms[2];         /* median call, wall time */
    double ratio, q1, q3; /* median and quartiles over the pairs of B's wall time over A's */
    double cpu_ratio;     /* median over the pairs of B's thread CPU time over A's */
    double on_cpu;        /* the timed calls' CPU time over their wall time */
    double perf[2];       /* GFLOP/s (prefill) or % of the read bandwidth (decode) */
    double read_bw;       /* median read, bytes/s (decode) */
    double diff;          /* largest |B - A| over the checked calls */
    bool identical;
} row_result;

/* the implementation's index in each build, or false when either lacks it or cannot run it */
static bool impl_index(const char *name, size_t idx[2])
{
    for (int s = 0; s < 2; s++) {
        size_t i = 0;
        while (i < sides[s]->count() && strcmp(sides[s]->name(i), name) != 0) i++;
        if (i == sides[s]->count() || !sides[s]->supported(i)) return false;
        idx[s] = i;
    }
    return true;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One call of one build, its output poisoned first (NaN: a build that writes nothing cannot
   agree), for a decode call after the read; wall and thread CPU time of the call alone. */
static int timed_call(const shape *s, const size_t idx[2], int side, const ab_call *c, size_t n_out,
                      const reader *rd, double *wall, double *cpu, double *bw)
{
    char msg[256] = "";
    memset(c->o, 0xff, n_out * sizeof(float));
    *bw = is_decode(s) ? read_once(rd) : 0;
    const double c0 = thread_cpu_s(), t0 = now_s();
    const int st = sides[side]->forward(idx[side], c, msg, sizeof msg);
    *wall = now_s() - t0;
    *cpu = thread_cpu_s() - c0;
    if (st != 0) {
        fprintf(stderr, "ab: %s/%s/%s: build %c: %s\n", s->kind, sides[side]->name(idx[side]),
                s->name, 'A' + side, msg);
        return -1;
    }
    return 0;
}

static int run_row(const options *opt, const shape *s, const size_t idx[2], const ab_call *base,
                   float *const out[2], float *const first[2], const reader *rd, row_result *r)
{
    const size_t n_out = s->batch * s->q_heads * s->q_len * s->head_dim;
    const size_t cap = (size_t)opt->calls;
    double *t[2], *cpu[2], *bw, *pair, *pair_cpu;
    t[0] = malloc(sizeof(double) * cap);
    t[1] = malloc(sizeof(double) * cap);
    cpu[0] = malloc(sizeof(double) * cap);
    cpu[1] = malloc(sizeof(double) * cap);
    bw = malloc(sizeof(double) * 2 * cap);
    pair = malloc(sizeof(double) * cap);
    pair_cpu = malloc(sizeof(double) * cap);
    memset(r, 0, sizeof *r);
    int rc = -1;
    if (!t[0] || !t[1] || !cpu[0] || !cpu[1] || !bw || !pair || !pair_cpu) {
        fprintf(stderr, "ab: out of memory\n");
        goto done;
    }
    ab_call c[2] = {*base, *base};
    c[0].o = out[0];
    c[1].o = out[1];

    /* the first call of each build, untimed (it warms the code and the allocator), checked */
    double est = 0;
    for (int side = 0; side < 2; side++) {
        double wall, cpu_s, bw_s;
        if (timed_call(s, idx, side, &c[side], n_out, rd, &wall, &cpu_s, &bw_s) != 0) goto done;
        memcpy(first[side], out[side], n_out * sizeof(float));
        est += wall;
    }
    /* the slowest rows (the portable reference on the large prefill) would take most of a
       default run: fewer pairs there, never fewer than 5 */
    int calls = opt->calls;
    if (opt->row_seconds > 0 && est * calls > opt->row_seconds && calls > 5) {
        calls = (int)(opt->row_seconds / est);
        if (calls < 5) calls = 5;
    }

    double sum_wall = 0, sum_cpu = 0;
    for (int i = 0; i < calls; i++) {
        const int lead = opt->abba && (i & 1) ? 1 : 0;
        for (int j = 0; j < 2; j++) {
            const int side = j ? 1 - lead : lead;
            if (timed_call(s, idx, side, &c[side], n_out, rd, &t[side][i], &cpu[side][i],
                           &bw[2 * i + j]) != 0)
                goto done;
            sum_wall += t[side][i];
            sum_cpu += cpu[side][i];
            if (opt->csv)
                fprintf(opt->csv, "%s/%s/%s,%d,%c,%.6f,%.6f,%.3f\n", s->kind,
                        sides[0]->name(idx[0]), s->name, i, 'A' + side, t[side][i] * 1e3,
                        cpu[side][i] * 1e3, bw[2 * i + j] * 1e-9);
        }
        pair[i] = t[1][i] / t[0][i];
        pair_cpu[i] = cpu[0][i] > 0 ? cpu[1][i] / cpu[0][i] : NAN;
    }

    const double d_first = max_abs_diff(first[0], first[1], n_out);
    const double d_last = max_abs_diff(out[0], out[1], n_out);
    r->diff = d_first > d_last ? d_first : d_last;
    r->identical = memcmp(first[0], first[1], n_out * sizeof(float)) == 0 &&
                   memcmp(out[0], out[1], n_out * sizeof(float)) == 0;
    /* B/A per pair: the two calls of a pair ran moments apart, so a change in what else the
       machine does moves both; the ratio of the medians would carry such changes over */
    r->calls = calls;
    r->ratio = quantile(pair, (size_t)calls, 0.5);
    r->q1 = quantile(pair, (size_t)calls, 0.25);
    r->q3 = quantile(pair, (size_t)calls, 0.75);
    r->cpu_ratio = quantile(pair_cpu, (size_t)calls, 0.5);
    r->on_cpu = sum_wall > 0 ? sum_cpu / sum_wall : 0;
    for (int side = 0; side < 2; side++) r->ms[side] = quantile(t[side], (size_t)calls, 0.5) * 1e3;
    const bool dec = is_decode(s);
    r->read_bw = dec ? quantile(bw, 2 * (size_t)calls, 0.5) : 0;
    for (int side = 0; side < 2; side++)
        r->perf[side] = dec ? shape_kv_bytes(s) / (r->ms[side] * 1e-3) / r->read_bw * 100.0
                            : shape_flops(s) / (r->ms[side] * 1e-3) * 1e-9;
    rc = 0;
done:
    for (int side = 0; side < 2; side++) free(t[side]), free(cpu[side]);
    free(bw);
    free(pair);
    free(pair_cpu);
    return rc;
}

/* ---- main --------------------------------------------------------------------------------- */
static int parse(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->calls = 15;
    o->row_seconds = 60;
    o->abba = true;
    o->read_mib = 512;
    o->threads = 1;
    o->tolerance = 1e-5;
    o->label[0] = "A";
    o->label[1] = "B";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            o->calls = 5;
        } else if (strcmp(a, "--list") == 0) {
            o->list = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (v && strcmp(a, "--calls") == 0) {
            o->calls = atoi(v), i++;
            if (o->calls < 1) o->calls = 1;
        } else if (v && strcmp(a, "--row-seconds") == 0) {
            o->row_seconds = strtod(v, NULL), i++;
        } else if (v && strcmp(a, "--csv") == 0) {
            o->csv = fopen(v, "w"), i++;
            if (!o->csv) {
                perror(v);
                return -1;
            }
            fprintf(o->csv, "row,pair,build,ms,cpu_ms,read_gb_s\n");
        } else if (v && strcmp(a, "--order") == 0) {
            if (strcmp(v, "abba") != 0 && strcmp(v, "abab") != 0) return -1;
            o->abba = strcmp(v, "abba") == 0, i++;
        } else if (v && strcmp(a, "--filter") == 0) {
            if (regcomp(&o->filter, v, REG_EXTENDED | REG_NOSUB) != 0) {
                fprintf(stderr, "ab: bad regular expression '%s'\n", v);
                return -1;
            }
            o->has_filter = true, i++;
        } else if (v && strcmp(a, "--impl") == 0) {
            o->impls = v, i++;
        } else if (v && strcmp(a, "--read-mib") == 0) {
            o->read_mib = (size_t)strtoull(v, NULL, 10), i++;
            if (o->read_mib < 1) o->read_mib = 1;
        } else if (v && strcmp(a, "--threads") == 0) {
            o->threads = (size_t)strtoull(v, NULL, 10), i++;
            if (o->threads < 1 || o->threads > AB_MAX_THREADS) {
                fprintf(stderr, "ab: --threads takes 1 to %d\n", AB_MAX_THREADS);
                return -1;
            }
        } else if (v && strcmp(a, "--tolerance") == 0) {
            o->tolerance = strtod(v, NULL), i++;
        } else if (v && strcmp(a, "--label-a") == 0) {
            o->label[0] = v, i++;
        } else if (v && strcmp(a, "--label-b") == 0) {
            o->label[1] = v, i++;
        } else {
            fprintf(stderr, "ab: unknown option or missing value: %s\n", a);
            return -1;
        }
    }
    return 0;
}

/* the kernel's count of this process's anonymous memory in transparent huge pages, MiB */
static long huge_mib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb >> 10;
}

int main(int argc, char **argv)
{
    options opt;
    if (parse(argc, argv, &opt) != 0) {
        usage(stderr);
        return 2;
    }

    /* the rows: every shape on every implementation both builds can run (and the user named) */
    typedef struct row {
        const shape *s;
        const char *impl;
        size_t idx[2];
    } row;
    row rows[N_SHAPES * 16];
    size_t n_rows = 0;
    for (size_t i = 0; i < sides[0]->count(); i++) {
        const char *name = sides[0]->name(i);
        size_t idx[2];
        if (!impl_wanted(&opt, name)) continue;
        if (!impl_index(name, idx)) {
            if (opt.impls)
                fprintf(stderr, "ab: %s: not run by both builds on this CPU, left out\n", name);
            continue;
        }
        for (size_t k = 0; k < N_SHAPES && n_rows < sizeof rows / sizeof rows[0]; k++) {
            char full[160];
            snprintf(full, sizeof full, "%s/%s/%s", shapes[k].kind, name, shapes[k].name);
            if (opt.has_filter && regexec(&opt.filter, full, 0, NULL, 0) != 0) continue;
            rows[n_rows++] = (row){&shapes[k], name, {idx[0], idx[1]}};
        }
    }
    for (const char *p = opt.impls; p && *p;) {
        const size_t len = strcspn(p, ",");
        bool known = false;
        for (size_t i = 0; i < sides[0]->count(); i++)
            known |= strlen(sides[0]->name(i)) == len && strncmp(sides[0]->name(i), p, len) == 0;
        if (!known) fprintf(stderr, "ab: %.*s: no such implementation in build A\n", (int)len, p);
        p += len + (p[len] == ',');
    }
    if (opt.list) {
        for (size_t r = 0; r < n_rows; r++)
            printf("%s/%s/%s\n", rows[r].s->kind, rows[r].impl, rows[r].s->name);
        return 0;
    }
    if (n_rows == 0) {
        fprintf(stderr, "ab: no row to run (see --list)\n");
        return 2;
    }

    const double start = now_s();
    reader rd;
    memset(&rd, 0, sizeof rd);
    bool any_decode = false;
    for (size_t r = 0; r < n_rows; r++) any_decode |= is_decode(rows[r].s);
    if (any_decode && reader_init(&rd, opt.read_mib << 20) != 0) {
        fprintf(stderr, "ab: no memory for the %zu MiB read buffer\n", opt.read_mib);
        return 1;
    }

    ab_pool pool;
    if (opt.threads > 1 && pool_start(&pool, opt.threads) != 0) {
        fprintf(stderr, "ab: cannot start %zu threads\n", opt.threads);
        return 1;
    }
    printf("A: %s\nB: %s\n", opt.label[0], opt.label[1]);
    printf("%d timed calls per build and row (fewer where they would take over %.0f s), in pairs "
           "%s, %zu thread%s, the same buffers for both\n",
           opt.calls, opt.row_seconds, opt.abba ? "AB BA AB ..." : "AB AB ...", opt.threads,
           opt.threads == 1 ? "" : "s");
    if (any_decode) {
        printf("decode: each call after a read of %s", rd.desc);
        const long hp = huge_mib();
        if (hp >= 0) printf(" (%ld MiB of the process in huge pages)", hp);
        printf("; %% bw: K and V bytes over the median call, against the row's median read\n");
    }
    bool any_prefill = false;
    for (size_t r = 0; r < n_rows; r++) any_prefill |= !is_decode(rows[r].s);
    if (any_prefill)
        printf("prefill: GF/s: 4 x visible (query, key) pairs x head_dim per head over the median "
               "call\n");
    bool any_variant = false;
    for (size_t r = 0; r < n_rows; r++) any_variant |= is_variant(rows[r].s);
    if (any_variant)
        printf("variant: a prefill shape with score modifiers, its GF/s counted as the plain "
               "shape's\n");
    printf("B/A: median over the pairs of calls of B's time over A's (below 1: B faster), q1-q3 "
           "its quartiles; cpu B/A: the same in thread CPU time,\n"
           "which leaves out waits for a CPU; on-cpu: CPU over wall time of the calls (well below "
           "100 %%: other work held the CPUs)\n\n");
    int sw = 31, iw = 7; /* the shape and impl columns: as wide as their longest entry */
    for (size_t r = 0; r < n_rows; r++) {
        if ((int)strlen(rows[r].s->name) > sw) sw = (int)strlen(rows[r].s->name);
        if ((int)strlen(rows[r].impl) > iw) iw = (int)strlen(rows[r].impl);
    }
    printf("%-7s %-*s %-*s %5s %9s %9s %6s %11s %7s %8s %8s %-5s %9s %6s  %s\n", "kind", iw, "impl",
           sw, "shape", "calls", "A ms", "B ms", "B/A", "q1-q3", "cpu B/A", "A", "B", "",
           "read GB/s", "on-cpu", "max|B-A|");
    fflush(stdout);

    int failed = 0, differ = 0;
    /* rows grouped by shape, so that each shape's tensors are made once */
    for (size_t k = 0; k < N_SHAPES; k++) {
        const shape *s = &shapes[k];
        bool used = false;
        for (size_t r = 0; r < n_rows; r++) used |= rows[r].s == s;
        if (!used) continue;
        const size_t hd = s->head_dim;
        const size_t n_q = s->batch * s->q_heads * s->q_len * hd;
        const size_t n_kv = s->batch * s->kv_heads * s->kv_len * hd;
        ab_call base;
        memset(&base, 0, sizeof base); /* no modifier unless variant_init sets one */
        base.batch = s->batch, base.q_heads = s->q_heads, base.kv_heads = s->kv_heads;
        base.q_len = s->q_len, base.kv_len = s->kv_len, base.head_dim = hd;
        base.causal = s->causal, base.kv_type = s->kv_type, base.page = s->page;
        if (opt.threads > 1)
            base.threads = opt.threads, base.parallel_for = pool_parallel_for, base.pool = &pool;
        int *table = NULL; /* a paged shape's pages, in a fixed shuffled order */
        if (s->page) {
            const size_t np = s->kv_len / s->page;
            table = malloc(np * sizeof *table);
            if (!table) return 1;
            uint64_t seed = 4;
            for (size_t i = 0; i < np; i++) table[i] = (int)i;
            for (size_t i = np - 1; i > 0; i--) {
                const size_t j = (size_t)(next_u64(&seed) % (i + 1));
                const int t = table[i];
                table[i] = table[j], table[j] = t;
            }
            base.table = table;
        }
        float *slopes;
        uint16_t *mask;
        if (variant_init(s, &base, &slopes, &mask) != 0) {
            fprintf(stderr, "ab: out of memory for the modifiers of %s\n", s->name);
            return 1;
        }
        float *q = alloc_random(AB_F32, n_q, 1);
        void *kk = alloc_random(s->kv_type, n_kv, 2), *vv = alloc_random(s->kv_type, n_kv, 3);
        float *out[2] = {ab_alloc(n_q * sizeof(float)), ab_alloc(n_q * sizeof(float))};
        float *first[2] = {ab_alloc(n_q * sizeof(float)), ab_alloc(n_q * sizeof(float))};
        base.q = q, base.k = kk, base.v = vv;
        if (!q || !kk || !vv || !out[0] || !out[1] || !first[0] || !first[1]) {
            fprintf(stderr, "ab: out of memory for the tensors of %s\n", s->name);
            return 1;
        }
        for (size_t r = 0; r < n_rows; r++) {
            if (rows[r].s != s) continue;
            row_result res;
            if (run_row(&opt, s, rows[r].idx, &base, out, first, &rd, &res) != 0) {
                failed++;
                printf("%-7s %-*s %-*s  FAILED (see above)\n", s->kind, iw, rows[r].impl, sw,
                       s->name);
                fflush(stdout);
                continue;
            }
            char diff[48], rbw[16] = "-";
            const bool agree = res.diff <= opt.tolerance;
            if (isinf(res.diff)) /* first: two builds that both write nothing leave equal NaNs */
                snprintf(diff, sizeof diff, "NOT FINITE (outputs unwritten?)");
            else if (res.identical)
                snprintf(diff, sizeof diff, "identical");
            else
                snprintf(diff, sizeof diff, "%.2e%s", res.diff, agree ? "" : " DIFFERS");
            differ += !agree;
            if (is_decode(s)) snprintf(rbw, sizeof rbw, "%.2f", res.read_bw * 1e-9);
            printf("%-7s %-*s %-*s %5d %9.3f %9.3f %6.3f %5.3f-%5.3f %7.3f %8.1f %8.1f %-5s %9s "
                   "%5.0f%%  %s\n",
                   s->kind, iw, rows[r].impl, sw, s->name, res.calls, res.ms[0], res.ms[1],
                   res.ratio, res.q1, res.q3, res.cpu_ratio, res.perf[0], res.perf[1],
                   is_decode(s) ? "% bw" : "GF/s", rbw, res.on_cpu * 100.0, diff);
            fflush(stdout);
        }
        free(slopes);
        free(mask);
        free(q);
        free(kk);
        free(vv);
        free(table);
        for (int side = 0; side < 2; side++) free(out[side]), free(first[side]);
    }
    printf("\n%zu row%s in %.0f s; %s\n", n_rows, n_rows == 1 ? "" : "s", now_s() - start,
           failed   ? "some rows FAILED"
           : differ ? "some outputs DIFFER"
                    : "all outputs agree");
    free(rd.buf);
    if (opt.csv) fclose(opt.csv);
    if (opt.threads > 1) pool_stop(&pool);
    return failed || differ ? 1 : 0;
}
#endif
