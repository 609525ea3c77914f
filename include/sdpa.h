/* sdpa.h -- libsdpa public API: scaled dot-product attention on CPUs, one header for C and C++ */
#ifndef SDPA_H
#define SDPA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The library's version (semantic versioning): the header's; sdpa_version() gives the built
   library's, "MAJOR.MINOR.PATCH", so a program can check that the two agree. */
#define SDPA_VERSION_MAJOR 0
#define SDPA_VERSION_MINOR 1
#define SDPA_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

/* The built library's version, "MAJOR.MINOR.PATCH" (static, never NULL). */
const char *sdpa_version(void);

/* ------------------------------------------------------------------------------------------ */
/* Status codes. No function of the library aborts, prints or exits: errors come back here.    */
/* ------------------------------------------------------------------------------------------ */
typedef enum sdpa_status {
    SDPA_OK = 0,
    SDPA_ERR_INVALID_ARGUMENT, /* NULL pointer, zero size, bad stride, NaN scale, ... */
    SDPA_ERR_UNSUPPORTED,      /* valid request this build or CPU cannot serve */
    SDPA_ERR_OVERFLOW,         /* a size or offset product does not fit in size_t/ptrdiff_t */
    SDPA_ERR_NO_MEMORY,        /* workspace allocation failed; nothing was written */
    SDPA_ERR_UNKNOWN_IMPL      /* sdpa_select / SDPA_ISA named no compiled-in implementation */
} sdpa_status;

/* A short, static, non-empty English description of a status. Never NULL. */
const char *sdpa_status_str(sdpa_status s);

/* ------------------------------------------------------------------------------------------ */
/* Implementations (scalar, avx2, avx512, neon, sve, ...), listed best first.                  */
/* The first one this CPU and OS can run is chosen at load time; SDPA_ISA=<name> in the        */
/* environment or sdpa_select(name) forces one (refused, never run, if the CPU cannot run it). */
/* ------------------------------------------------------------------------------------------ */
typedef struct sdpa_impl sdpa_impl;

size_t sdpa_impl_count(void);
const sdpa_impl *sdpa_impl_at(size_t i);           /* NULL when i >= sdpa_impl_count() */
const char *sdpa_impl_name(const sdpa_impl *impl); /* "scalar", ...; "" for NULL */
/* The CPU features the implementation needs, in words ("nothing (portable C)" for the scalar
   reference), derived from its feature keys; "" for NULL. */
const char *sdpa_impl_requires(const sdpa_impl *impl);
/* Its i-th required feature, as a key of sdpa_feature_key; NULL past the last (at once for an
   implementation that runs anywhere) and for a NULL impl. */
const char *sdpa_impl_requires_key(const sdpa_impl *impl, size_t i);
/* The CPU features requirements are written in on this architecture, in a fixed order:
   their count, the i-th key (NULL when i >= count), and whether this CPU has it with the OS
   saving its state (false when i >= count). An implementation is supported when every feature
   it requires is present. */
size_t sdpa_feature_count(void);
const char *sdpa_feature_key(size_t i);
bool sdpa_feature_present(size_t i);
bool sdpa_impl_supported(const sdpa_impl *impl);   /* runnable on this CPU and OS */
const sdpa_impl *sdpa_impl_find(const char *name); /* NULL when no such implementation */

const sdpa_impl *sdpa_active(void); /* never NULL */
/* Force an implementation by name; NULL (or "auto") goes back to automatic selection.
   SDPA_ERR_UNKNOWN_IMPL for a name not compiled in, SDPA_ERR_UNSUPPORTED for one this CPU cannot
   run; in both cases the active implementation is left as it was. Thread-safe. */
sdpa_status sdpa_select(const char *name);

typedef enum sdpa_selection {
    SDPA_SELECTED_AUTO = 0,    /* best supported implementation */
    SDPA_SELECTED_ENV,         /* forced by SDPA_ISA at load time */
    SDPA_SELECTED_ENV_REFUSED, /* SDPA_ISA named something unknown or unsupported: automatic */
    SDPA_SELECTED_FORCED       /* forced by sdpa_select() */
} sdpa_selection;
/* Why the active implementation is active. */
sdpa_selection sdpa_selection_reason(void);
const char *sdpa_selection_str(sdpa_selection r);

/* ------------------------------------------------------------------------------------------ */
/* The three primitives, f32. The plain forms run on the active implementation; the _impl     */
/* forms on a given one (which must be supported: an unsupported or NULL impl does nothing,    */
/* returns alpha 1 for the softmax). Size 0 does nothing. Pointers need not be aligned.        */
/* ------------------------------------------------------------------------------------------ */

/* s[j] = scale * dot(q[0..d), k[j*k_stride + 0..d)) for j < n. k_stride in elements (>= d). */
void sdpa_score_f32(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                    float scale, float *s);
/* One block of the streaming softmax. With running max *m and sum *l (start: -INFINITY, 0):
   writes p[j] = exp(s[j] - m_new) over s in place, sets *m = m_new, *l = alpha * l + sum(p),
   and returns alpha = exp(m_old - m_new), the factor for the caller's accumulator.
   Never NaN from -inf alone: while every score seen is -INFINITY, p = 0, (m, l) stay
   (-INFINITY, 0) and alpha = 1. A NaN score propagates into *l. */
float sdpa_softmax_online_f32(float *s, size_t n, float *m, float *l);
/* o[0..dv) = alpha * o + sum_j p[j] * v[j*v_stride + 0..dv) for j < n. v_stride in elements. */
void sdpa_accumulate_f32(float *o, float alpha, const float *p, const float *v, size_t v_stride,
                         size_t n, size_t dv);

void sdpa_impl_score_f32(const sdpa_impl *impl, const float *q, const float *k, size_t k_stride,
                         size_t n, size_t d, float scale, float *s);
float sdpa_impl_softmax_online_f32(const sdpa_impl *impl, float *s, size_t n, float *m, float *l);
void sdpa_impl_accumulate_f32(const sdpa_impl *impl, float *o, float alpha, const float *p,
                              const float *v, size_t v_stride, size_t n, size_t dv);
/* The implementation's own exp, y[i] = exp(x[i]), as the softmax uses it (x <= 0 is the domain
   the bound below is stated for; exp(-inf) = 0, NaN propagates). */
void sdpa_impl_exp_f32(const sdpa_impl *impl, const float *x, float *y, size_t n);
/* The maximum error of that exp over x <= 0, in units in the last place of the exact result. */
double sdpa_impl_exp_max_ulp(const sdpa_impl *impl);
/* The implementation's own tanh, y[i] = tanh(x[i]), as softcap uses it (y may equal x):
   odd, tanh(+-0) = +-0, tanh(+-inf) = +-1, NaN propagates. */
void sdpa_impl_tanh_f32(const sdpa_impl *impl, const float *x, float *y, size_t n);
/* The maximum error of that tanh over every float, in units in the last place. */
double sdpa_impl_tanh_max_ulp(const sdpa_impl *impl);

/* ------------------------------------------------------------------------------------------ */
/* Fused attention: o = softmax(s) · v over the keys each row sees, s = softcap(scale q·kᵀ)    */
/* + alibi + mask, with optional sinks in the denominator; streamed, f32 accumulation.          */
/* ------------------------------------------------------------------------------------------ */
/* Storage types. The block formats are ggml's block types of the same names, byte for byte
   (K and V only): blocks of 32 elements, each starting with an f16 scale d (little-endian).
   Element i of a block is the value its quant gives, exactly as ggml's reference dequantizer
   computes it:
   - q8_0 (34 bytes): d, then 32 signed bytes q_i; x_i = d q_i.
   - q4_0 (18 bytes): d, then 16 bytes of nibbles (element i < 16 the low nibble n of byte i,
     element 16 + i its high nibble); x = d (n - 8).
   - q4_1 (20 bytes): d, an f16 minimum m, the nibbles as q4_0; x = d n + m.
   - q5_0 (22 bytes): d, 4 bytes qh (a little-endian u32, bit i the 5th bit of element i), the
     nibbles as q4_0; with n = nibble + 16 bit_i: x = d (n - 16).
   - q5_1 (24 bytes): d, m, qh, the nibbles; x = d n + m.
   - iq4_nl (18 bytes): d, the nibbles as q4_0, each an index into the 16 values
     {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}; x = d value.
   d times an integer of at most 8 bits is exact in f32, so x is exact for q8_0, q4_0, q5_0 and
   iq4_nl. For q4_1 and q5_1, d n is exact and d n + m is rounded once, to nearest even: that
   f32 is the element's value on every implementation (a fused multiply-add gives the same).
   Strides and dims stay in elements: a quantized view's head dim and strides must be multiples
   of 32, so that every row starts on a block. */
typedef enum sdpa_dtype {
    SDPA_F32 = 0,
    SDPA_F16,
    SDPA_BF16,
    SDPA_Q8_0,
    SDPA_Q4_0,
    SDPA_Q4_1,
    SDPA_Q5_0,
    SDPA_Q5_1,
    SDPA_IQ4_NL
} sdpa_dtype;

/* Elements per block of a storage type: 1 for f32, f16 and bf16, 32 for the block formats; 0
   for an unknown type. */
size_t sdpa_dtype_block(sdpa_dtype t);
/* Bytes per block (for f32, f16 and bf16: per element): 4, 2, 2, then q8_0 34, q4_0 18,
   q4_1 20, q5_0 22, q5_1 24, iq4_nl 18; 0 for an unknown type. */
size_t sdpa_dtype_size(sdpa_dtype t);
/* Bytes that n consecutive elements of type t occupy; 0 when n is not a multiple of the block,
   the type is unknown, or the product overflows size_t. */
size_t sdpa_dtype_bytes(sdpa_dtype t, size_t n);
/* The type's name as ggml and llama.cpp's --cache-type-k spell it: "f32", "f16", "bf16",
   "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"; "unknown" for any other value. */
const char *sdpa_dtype_name(sdpa_dtype t);

/* Conversions between f32 and the block formats, n elements (a multiple of 32). The quantizers
   give the bytes of ggml's reference quantizers (quantize_row_<type>_ref), per block of x:
   - q8_0: amax = max |x|, d = amax / 127, q = round(x / d) (half away from zero);
   - q4_0: m = the first element of largest magnitude (signed), d = m / -8,
     n = min(15, trunc(x / d + 8.5));
   - q5_0: as q4_0 with d = m / -16 and n = min(31, trunc(x / d + 16.5));
   - q4_1: lo = min x, hi = max x, d = (hi - lo) / 15, m = lo, n = min(15, trunc((x - lo) / d
     + 0.5));
   - q5_1: as q4_1 with d = (hi - lo) / 31 and n = trunc((x - lo) / d + 0.5);
   - iq4_nl: m = the first element of largest magnitude, then with weights w = x^2 each x takes
     the value v of the table nearest x / (m / -127) (the upper one on a tie), and the stored
     scale is the weighted least-squares d = sum w v x / sum w v^2 (0 when that sum is 0). This
     is ggml's reference, quantize_row_iq4_nl_ref, which runs no further scale trials.
   "x / d" is x times the f32 reciprocal 1 / d, as ggml computes it; d (and m) are stored as
   f16, rounded to nearest even. Where 1 / d overflows float (d below 2^-128) every stored
   integer is 0, the bytes ggml's reference quantizers give on x86 (where d is 0 they keep the
   formula's value: 8 for q4_0, 16 for q5_0, 0 for the others). An iq4_nl block whose largest
   |x| is below 1e-15 stores d = 0 and every nibble 0 (ggml leaves that block's nibbles to
   whatever its previous block left; any nibbles decode to 0 there). Refused
   (SDPA_ERR_INVALID_ARGUMENT, nothing written): a NULL pointer, n not a multiple of 32, a
   non-finite input, or a block whose d or m overflows f16. The dequantizers write the exact
   element values above (a non-finite stored scale gives non-finite values); NULL or a bad n is
   refused. n = 0 is an empty conversion: SDPA_OK, nothing read or written (the pointers must
   still be non-NULL). sdpa_quantize and sdpa_dequantize take the type as an argument (a type
   that is not a block format is refused). */
sdpa_status sdpa_quantize(sdpa_dtype t, const float *x, size_t n, void *dst);
sdpa_status sdpa_dequantize(sdpa_dtype t, const void *src, size_t n, float *y);
sdpa_status sdpa_quantize_q8_0(const float *x, size_t n, void *dst);
sdpa_status sdpa_quantize_q4_0(const float *x, size_t n, void *dst);
sdpa_status sdpa_quantize_q4_1(const float *x, size_t n, void *dst);
sdpa_status sdpa_quantize_q5_0(const float *x, size_t n, void *dst);
sdpa_status sdpa_quantize_q5_1(const float *x, size_t n, void *dst);
sdpa_status sdpa_quantize_iq4_nl(const float *x, size_t n, void *dst);
sdpa_status sdpa_dequantize_q8_0(const void *src, size_t n, float *y);
sdpa_status sdpa_dequantize_q4_0(const void *src, size_t n, float *y);
sdpa_status sdpa_dequantize_q4_1(const void *src, size_t n, float *y);
sdpa_status sdpa_dequantize_q5_0(const void *src, size_t n, float *y);
sdpa_status sdpa_dequantize_q5_1(const void *src, size_t n, float *y);
sdpa_status sdpa_dequantize_iq4_nl(const void *src, size_t n, float *y);

typedef struct sdpa_tensor { /* a view [batch][head][token][dim], dim contiguous */
    void *data;
    sdpa_dtype dtype;
    ptrdiff_t batch_stride, head_stride, token_stride; /* in elements, may be negative */
} sdpa_tensor;

/* The caller's thread pool: run task(arg, i, thread) for every i < n_tasks, each exactly once,
   in any order and on any of n_threads threads (thread < n_threads, a task never runs on two
   threads at once with the same thread index), and return when all are done. */
typedef void (*sdpa_task_fn)(void *arg, size_t task, size_t thread);
typedef void (*sdpa_parallel_for_fn)(void *pool, size_t n_tasks, sdpa_task_fn task, void *arg);

typedef struct sdpa_params { /* zero-initialise; every later field's zero means "off" */
    size_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, v_dim; /* v_dim 0: head_dim */
    float scale;                                                     /* 0: 1/sqrt(head_dim) */
    bool causal; /* query i sees key j iff j <= i + kv_len - q_len */
    /* thread-pool hook; NULL: everything runs serially on the calling thread */
    sdpa_parallel_for_fn parallel_for;
    void *pool;
    /* threads that run the call: the pool's (with parallel_for), or the team's nth
       (sdpa_forward_team); sdpa_workspace_size sizes the workspace for that many (0: 1) */
    size_t n_threads;
    /* optional output [batch][q_heads][q_len] of log-sum-exp (natural log) of the scores (as
       modified) of the keys each query row sees, its sink included; -INFINITY for a row that
       sees no key and has no sink. NULL: not written. */
    float *lse;
    /* optional caller-owned scratch: when workspace_bytes >= what sdpa_workspace_size reports,
       the call allocates nothing; otherwise (NULL or too small) it allocates its own and frees
       it before returning. Never read for data; contents are garbage after the call. */
    void *workspace;
    size_t workspace_bytes;

    /* --- who sees whom. i' = i + kv_len - q_len is query i's position among the keys
       (bottom-right alignment, as `causal` uses). Keys a row does not see are never read for
       it and never affect it. */
    /* 0: off. w >= 1: query i sees key j only if |i' - j| < w; with causal, the w most recent
       positions i' - w < j <= i'. Any w of at least q_len + kv_len (SIZE_MAX included) is no
       window: every row sees what it would see without one. */
    size_t window;
    /* NULL: off. An additive mask, a view [batch][q_heads][q_len][kv_len] of f32, f16 or bf16
       (token_stride: between query rows; the kv_len elements of a row contiguous). A stride of
       0 broadcasts over that axis. An entry of -inf hides the key from the row, as the window
       does: it never affects the row, whatever its K and V hold. */
    const sdpa_tensor *mask;
    /* --- score modifiers: s = softcap(scale q.k) + alibi + mask --------------------------- */
    /* 0: off. c > 0 (finite): s <- c tanh(s / c), after the scale. */
    float softcap;
    /* NULL: off. [q_heads] finite slopes: adds -slope_h |i' - j| (sdpa_alibi_slopes gives the
       standard ones). */
    const float *alibi_slopes;
    /* NULL: off. [q_heads] sink logits (finite, or -inf for none): adds exp(sink_h - m) to the
       row's softmax denominator, with no value row; lse includes it. A row that sees no key
       then gives zeros and lse = sink_h. */
    const float *sinks;

    /* --- ragged batches: sequences of their own lengths in one call. Per side (queries,
       keys) at most one of the two forms; causal, window and ALiBi align each sequence
       bottom-right on its own lengths, i' = i + kv_len_b - q_len_b. The mask view
       ([batch][q_heads][q_len][kv_len]) and lse ([batch][q_heads][q_len]) keep their shapes
       and are indexed by each sequence's own query and key indices. */
    /* padded: NULL, or [batch] lengths, q_lens[b] <= q_len and kv_lens[b] <= kv_len. The views
       stay [batch][head][token][dim]; rows of o (and lse entries) past q_lens[b] are not
       written, and keys past kv_lens[b] are never read. A sequence of 0 queries is skipped; one
       of 0 keys gives zeros (lse -inf, or its sink). */
    const size_t *q_lens, *kv_lens;
    /* packed: NULL, or [batch + 1] offsets, cu[0] = 0, non-decreasing (FlashAttention's
       cu_seqlens): sequence b is tokens [cu[b], cu[b + 1]) of its view, whose batch_stride is
       then unused; q_len / kv_len bound every sequence's length (the longest). */
    const size_t *cu_q, *cu_kv;
    /* --- paged K/V (vLLM's block table). NULL: off. Otherwise [batch][max_pages] page
       numbers: key j of sequence b is token j % page_size of page
       block_table[b * max_pages + j / page_size]. The k and v views then address pages:
       batch_stride is the stride between pages (n_pages of them), head_stride and
       token_stride as usual within a page. Sequence b has kv_lens[b] keys (kv_len when kv_lens
       is NULL; cu_kv cannot be combined with paging); every entry a sequence uses must lie in
       [0, n_pages), which is checked before anything is read. */
    const int32_t *block_table;
    size_t page_size, max_pages, n_pages;
    /* --- K in a block format (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl). 0: exact, the default:
       every stored value enters the arithmetic as its f32 value (see sdpa_dtype), and the
       numerics are those of f16 K/V. 1: fast Q.K, as ggml computes it: each scaled query row
       x is quantized per 32-block to int8, d_q = max |x| / 127 (kept in f32) and
       q = x (1 / d_q) rounded to nearest even, and the score is a sum over blocks b of
         d_q,b (d_k,b dot_b(q, n_k) + m_k,b sum_b q),
       with n_k the key block's integer quants (sdpa_dtype: the int8 of q8_0, n - 8, n - 16,
       the iq4_nl value, or the n of q4_1 and q5_1), m_k its minimum (q4_1, q5_1; else 0), and
       the dot products and sums of quants exact in int32, through the CPU's int8 dot products
       (VNNI, pmaddubsw, sdot) where it has them; the float operations' order is the
       implementation's. The bound this adds to a score s = sum_c x_c k_c of one row:
       |s_fast - s| <= sum_b (max_{c in b} |x_c| / 254) sum_{c in b} |k_c|, plus float
       rounding; softmax turns a bound D on every score of a row into
       |o_fast - o| <= (e^(2 D) - 1) max |v| on its output. A non-finite query element makes
       its row NaN. P.V stays f32. Refused (SDPA_ERR_UNSUPPORTED) unless K is a block format;
       a value other than 0 or 1 is SDPA_ERR_INVALID_ARGUMENT. */
    int q8_scores;
    /* --- ggml's form of ALiBi. NULL: off. [q_heads] finite factors, which need a mask: head
       h adds mask_scales[h] * m for each mask entry m (the product rounded once to float), so
       that a mask filled with -|i' - j| gives ALiBi with slopes mask_scales (ggml's
       slope_h * mask) and one mask serves every head. An entry of -inf stays -inf and hides
       its key, whatever the factor (0 included). */
    const float *mask_scales;
} sdpa_params;

/* Runs attention for every (batch, head, query) of p on the active implementation.
   q: f32 [batch][q_heads][q_len][head_dim]; k: [batch][kv_heads][kv_len][head_dim] and
   v: [batch][kv_heads][kv_len][v_dim] in f32, f16, bf16 or a block format (sdpa_dtype);
   o: f32 [batch][q_heads][q_len][v_dim].
   q_heads must be a multiple of kv_heads (GQA/MQA: query head h reads KV head h / (q_heads /
   kv_heads)). Rows that see no key (causal with q_len > kv_len, a window, a mask) are written
   as zeros. With the ragged or paged fields the views are addressed as described there: each
   sequence has its own lengths, and only its rows are written.
   Deterministic: the same inputs give the same bits for any thread count.
   On any error nothing is written to o (or lse) and a status says why; sdpa_validate gives
   the detailed message. o and lse must not overlap anything the call reads: q, k, v, the mask,
   the index arrays (block_table, q_lens, kv_lens, cu_q, cu_kv), sinks, alibi_slopes, the
   workspace (SDPA_ERR_INVALID_ARGUMENT otherwise). */
/* Special values: the same on every implementation, whether the keys are split into chunks
   or not, for any thread count. A row attends the keys it sees: all, or those that causal
   (j <= i'), the window (|i' - j| < w) and the mask (an entry other than -inf) leave it; a key
   it does not see is never read for it, and a key tile no row of a unit sees (left of every
   window, or -inf in the mask for every row) is not read at all.
   - A NaN in an attended score (a NaN query or key element, inf * 0, inf - inf; a +inf score
     too) makes every element of the row's output and its lse NaN.
   - A NaN or inf in an attended V element makes that output element non-finite (inf or NaN);
     the row's other elements are unaffected. That holds for a key whose score is -inf too
     (its weight is 0, and 0 * inf is NaN), unless the row's scores are all -inf.
   - Keys a row does not see never affect it, whatever their K and V hold.
   - A row that sees no key, or whose scores are all -inf, gives zeros and lse -INFINITY (lse
     = its sink, with sinks).
   - Modifiers: softcap maps a score into [-c, c], +-inf to +-c (an infinite score
     then attends normally); ALiBi's distance |i' - j| is formed in float, exact below 2^24; a
     NaN mask entry makes the row NaN like a NaN score.
   - scale * q is never formed in a way that overflows or underflows float: a row whose
     largest |scale * q| exceeds FLT_MAX (or is below FLT_MIN) is computed as
     (scale 2^-e q) . k times 2^e, a power of two per row that brings it just under 2^127 (or
     to [1, 2)), exact for a largest |scale * q| in [2^-252, 2^255). A score whose exact
     value fits in float is then lost to overflow only where a partial sum of the products
     exceeds FLT_MAX; an element of scale * q below 2^-275 times the row's largest (2^-126
     times, when upscaled) may lose precision or round to 0.
   - Weights: a SIMD implementation may flush a weight exp(s - m) below e^-54 of the row's
     largest to 0, which moves an output by at most n * e^-54 * max|v| / l (n keys, l >= 1 the
     row's sum of weights): 3.6e-24 * n * max|v| at most, below f32's resolution of the output
     for any n under 10^16. That keeps the P·V's products and sums over f16 and block-format V
     out of the subnormal range, where many cores compute slowly. The scalar reference keeps
     every weight. Either way a flushed weight times an inf V element is NaN, still
     non-finite. */
/* Combines n_parts partial attentions of the same rows over disjoint key sets (split KV, a
   shared prefix and each sequence's own suffix, several machines), each given as its output
   and log-sum-exp (sdpa_forward's o and lse): per row r, lse = log sum_i e^lse_i[r] and
   o = sum_i e^(lse_i[r] - lse) o_i[r], the parts combined in index order (deterministic).
   Row r of part i is o_parts[i] + r * o_stride (dv floats) and lse_parts[i][r]; the result
   goes to o + r * o_out_stride and, when lse is not NULL, lse[r].
   - A part with lse -inf saw nothing and is ignored; a row whose parts are all -inf gives
     zeros and lse -inf. A NaN lse makes the row NaN (o and lse).
   - o may be one of the parts (same pointer and stride: merged in place), and lse one of
     lse_parts; otherwise the outputs must not overlap any part.
   - Refused (SDPA_ERR_INVALID_ARGUMENT, nothing written): n_parts, rows or dv 0, a NULL
     pointer, a stride smaller than dv, other overlaps; SDPA_ERR_OVERFLOW when an extent
     overflows. The sink of a head (sdpa_params.sinks) belongs to one part only: merge parts
     computed without it, then the sink is a part with o = 0 and lse = sink. */
sdpa_status sdpa_merge(size_t n_parts, size_t rows, size_t dv, const float *const *o_parts,
                       size_t o_stride, const float *const *lse_parts, float *o,
                       size_t o_out_stride, float *lse);

/* The standard ALiBi slopes (Press et al., "Train Short, Test Long", 2022), as ggml derives
   them from max_bias: with n = the largest power of two <= n_heads, head h < n gets
   2^(-max_bias (h + 1) / n) and head h >= n gets 2^(-max_bias (2 (h - n) + 1) / (2 n)).
   max_bias = 8 gives the paper's slopes. Writes n_heads floats; nothing when slopes is NULL or
   n_heads is 0. */
void sdpa_alibi_slopes(size_t n_heads, float max_bias, float *slopes);

sdpa_status sdpa_forward(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                         const sdpa_tensor *v, const sdpa_tensor *o);
sdpa_status sdpa_impl_forward(const sdpa_impl *impl, const sdpa_params *p, const sdpa_tensor *q,
                              const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_tensor *o);

/* Teams: engines whose threads are already running when the op starts (ggml's (ith, nth)
   ops, an OpenMP parallel region). Each of nth threads calls sdpa_forward_team with the same
   arguments, the same team state and its own ith in [0, nth); every call returns when the
   whole attention is done, with the same status on every thread. Work is claimed from a
   counter in the team state; the threads meet at a barrier after planning and at the end, each
   waiting by spinning briefly, yielding the CPU a few times, then sleeping until the last
   thread arrives (a futex, on Linux). A split KV range is merged by whichever thread finishes
   its last chunk, with no barrier.
   - Results are bitwise those of sdpa_forward, for any nth.
   - The team state is sdpa_team_bytes() bytes, 8-byte aligned, owned by the caller and zeroed
     once before its first use; it is then reusable for any number of calls of any shape by
     teams of any size, one call at a time (a team state serves one team call at once).
   - p->parallel_for must be NULL (a team is the pool) and p->n_threads is ignored; the
     workspace, if given, is shared by the team and is large enough when it has
     sdpa_workspace_size's bytes for n_threads = nth; otherwise thread 0 allocates one for the
     call and frees it before returning.
   - A refused call (a bad argument, anything sdpa_validate refuses, no memory) is refused by
     every thread with the same status, and nothing is written. ith >= nth or nth = 0 is
     SDPA_ERR_INVALID_ARGUMENT on the thread that passes it; its teammates then wait for it, so
     a team must agree on nth. */
size_t sdpa_team_bytes(void);
sdpa_status sdpa_forward_team(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                              const sdpa_tensor *v, const sdpa_tensor *o, void *team, size_t ith,
                              size_t nth);
sdpa_status sdpa_impl_forward_team(const sdpa_impl *impl, const sdpa_params *p,
                                   const sdpa_tensor *q, const sdpa_tensor *k, const sdpa_tensor *v,
                                   const sdpa_tensor *o, void *team, size_t ith, size_t nth);

/* The scratch bytes sdpa_forward (sdpa_impl_forward) needs for this call, so that an engine can
   keep one buffer per layer shape and pass it in sdpa_params.workspace. Validates like the call. */
sdpa_status sdpa_workspace_size(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                                const sdpa_tensor *v, const sdpa_tensor *o, size_t *bytes);
sdpa_status sdpa_impl_workspace_size(const sdpa_impl *impl, const sdpa_params *p,
                                     const sdpa_tensor *q, const sdpa_tensor *k,
                                     const sdpa_tensor *v, const sdpa_tensor *o, size_t *bytes);

/* Checks a call exactly as sdpa_forward would, without running it. When msg is not NULL,
   writes a NUL-terminated description of the first problem found (or "ok") into
   msg[0..msg_len). */
sdpa_status sdpa_validate(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                          const sdpa_tensor *v, const sdpa_tensor *o, char *msg, size_t msg_len);

/* ------------------------------------------------------------------------------------------ */
/* Introspection: the values in force, for reports and benchmarks. Every string returned is    */
/* static (never freed, never NULL); every function is thread-safe and cheap.                  */
/* ------------------------------------------------------------------------------------------ */

/* The cache sizes the planner uses, in bytes, read once at load time: each level from the
   first source that knows it, named in *_source: "cpu_features" (CPUID), "sysconf" (the C
   library), "sysfs" (Linux, cpu0) or "default" (a stated size: 32 KiB, 1 MiB, 8 MiB). Sizes are
   as the source reports them (L3: the whole shared cache, which in a virtual machine may be the
   host's) and always > 0. */
typedef struct sdpa_cache_info {
    size_t l1d_bytes, l2_bytes, l3_bytes;
    const char *l1d_source, *l2_source, *l3_source;
} sdpa_cache_info;
void sdpa_cache_info_get(sdpa_cache_info *out); /* NULL out: does nothing */

/* One named parameter: name is a lower-case identifier, unique in its list; about says in one
   line what the value is and its unit (keys, rows, bytes). */
typedef struct sdpa_tunable {
    const char *name;
    size_t value;
    const char *about;
} sdpa_tunable;

/* The blocking and prefetch parameters impl's kernels were compiled with: those it has (value
   > 0), in a fixed order. Writes the first min(count, cap) to out (nothing when out is NULL)
   and returns count; 0 for a NULL impl. Reported for every compiled-in implementation,
   supported on this CPU or not. */
size_t sdpa_impl_tunables(const sdpa_impl *impl, sdpa_tunable *out, size_t cap);

/* The planner's parameters in force (work-item rows, split-K chunking, key-block bounds, the
   streaming threshold, the staging of paged units), then, when head_dim > 0, "block": the keys per
   block it derives from the L2 size for that head_dim (and v_dim = head_dim). Writes the first
   min(count, cap) to out (nothing when out is NULL) and returns count. */
size_t sdpa_planner_tunables(size_t head_dim, sdpa_tunable *out, size_t cap);

/* The FMA peak an implementation's speed is judged against, as the benchmark measures it: the
   name of a benchmark peak kernel, "scalar" for the reference (an implementation without a
   peak kernel of its own names the nearest one's). "" for NULL. */
const char *sdpa_impl_peak_class(const sdpa_impl *impl);

#ifdef __cplusplus
}
#endif
#endif /* SDPA_H */
