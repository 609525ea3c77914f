/* kernel_table.h -- the internal interface every implementation (scalar, avx2, avx512, neon, ...)
 * exports */
#ifndef SDPA_KERNEL_TABLE_H
#define SDPA_KERNEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

/* Glossary: each word below has this one meaning in the driver, the kernels and their docs.
   - group: the query heads that share one KV head (GQA; q_heads / kv_heads of them). The split
     merge works per group (a merge group), the planner's rows are a group's heads x queries.
   - item: the driver's unit of scheduling (driver/plan.c): one query block (qb queries) of one
     group of one sequence, against one KV chunk (all its keys unless the sequence is split).
     A thread runs whole items.
   - unit: one call of an implementation's `rows` kernel (sdpa_rows below): R query rows against
     a key range of one KV head. An item runs one unit, or several when its keys are staged or
     cut at page runs.
   - block: a range of consecutive keys a kernel takes per inner step (sdpa_rows.block, the
     *_block tunables); scores, softmax and P·V finish a block before the next starts. The
     32-element storage blocks of the quantized types are always called format blocks (a block
     format is a type made of them, see convert.h).
   - sub-block: a part of a block whose V rows stay in L1 across the column passes of its P·V
     (decode_pv_kb, decode_q_pv_kb, pv_kb keys).
   - tile: what one micro-kernel call computes: the scores or P·V terms of mr rows by nr keys
     (or nr output columns), in registers (score_<isa>_<mr>x<nr>, pv_<isa>_<mr>x<nr>).
   - panel: a packed operand of a micro-kernel: a K panel (nr keys, packed for one tile row), a
     Qᵀ or Q panel (query rows packed together, prefill_panel of them), a V panel.
   - run: a maximal stretch of rows, keys or pages that takes one path: the rows of a block that
     all see the same keys (SDPA_VISIBLE_RUNS), the adjacent pages read as one (driver/keys.c).
   - chunk: a split sequence's share of its keys, one item's; merged afterwards (sdpa_merge). */

/* One unit of fused work, built by the driver (driver/run.c) and run by an
   implementation's `rows` kernel: R query rows against keys [kv_begin, kv_end) of one KV head.

   - q is packed by the driver: f32, row r at q + r * d, already multiplied by the scale, so a
     score is dot(q_r, k_j).
   - score_mul, when not NULL, holds a power of two per row: row r's scores are
     dot(q_r, k_j) * score_mul[r] (the driver scales a row whose scale * q would overflow or
     underflow by 2^-e, and asks for 2^e back here). NULL: every multiplier is 1.
   - Rows are ordered so that kv_limit is non-decreasing in r; row r sees key j iff
     j < kv_limit[r]. The driver guarantees kv_begin < kv_end <= kv_limit[R - 1] (the kernel never
     reads a key at or past kv_end) and kv_end <= kv_len.
   - k row j (all d elements, of dtype k_type) starts at element j * k_stride of k, which already
     points at the KV head's token 0; v likewise with dv elements. For the block formats
     (sdpa_dtype_quantized: only for a kernel with quant_rows >= rows) d, dv and the strides are
   multiples of 32 and element offset e lies at byte e / 32 * (block bytes), see convert.h.
   - m, l (R each) and acc (R * dv, row r at acc + r * dv) are the running online-softmax state,
     initialised by the driver to (-INFINITY, 0, 0) and updated in place: after the call, for each
     row, acc = sum_j exp(s_j - m) v_j and l = sum_j exp(s_j - m) over every key seen so far.
     l = 0 means the row has seen no key yet (whatever m holds). A NaN score seen makes l NaN
     (m may stay finite or -inf: a kernel may keep NaN out of its running max), and NaN stays
     there; the driver's merge and finish read NaN from l or m. A key past a row's limit never
     touches its state: it is skipped, not weighted by 0 (0 * inf would be NaN).
   - ws is scratch of at least ws_floats(R, d, dv, block) floats, 64-byte aligned, private to
     this call. block is the number of keys the driver wants processed per inner step (a hint
     derived from cache sizes; the kernel may use any block up to it).
   - pf[0..n_pf) name memory the driver touches next (the output rows it writes after the call,
     the next unit's query rows): a hint only. A kernel may prefetch them, spread over its own
     work, so that the driver's memory-bound steps do not wait on them; it must not read them.
   - reverse asks for the key blocks in decreasing order, a cache hint only: the driver sets it
     on every other unit of a run of units over the same keys, so that each unit starts on the
     keys the previous one touched last (a forward scan over more keys than the cache holds
     evicts each one just before the next unit needs it). The online softmax takes its keys in
     any order; a kernel may ignore the hint, and one that honours it must do so the same way
     on every call (the result then depends on the order, bitwise, but not on the threads). */
typedef struct sdpa_span {
    const void *p;
    size_t bytes;
} sdpa_span;

/* The score modifiers of a unit (sdpa_rows.mods), applied to a row's scores after score_mul,
   in this order: s <- softcap tanh(s / softcap) when softcap > 0 (inv_softcap = 1 / softcap,
   or 0 where that overflows); s -= slope[r] |pos[r] - j|
   when slope is not NULL; s += mask[r][j] when mask is not NULL, or s += mask_scale[r] *
   mask[r][j] when mask_scale is not NULL too (an entry of -inf hides key j from row r: the
   score becomes -inf whatever it was or the factor is, and the key must not affect the row).
   pos[r] is row r's position among the keys (i', may be negative); mask[r] points at row r's
   mask entry for key 0, of dtype mask_type (f32, f16 or bf16). */
typedef struct sdpa_mods {
    float softcap, inv_softcap;
    const float *slope;
    const ptrdiff_t *pos;
    const void *const *mask;
    sdpa_dtype mask_type;
    const float *mask_scale;
} sdpa_mods;

/* A paged unit's K/V (sdpa_rows.pages): key j is row j % size of page j / size, whose row 0
   is at k[j / size - first] (likewise v), rows k_stride / v_stride elements apart within a
   page; size is a multiple of 16. scratch holds 4 * rows words, where rows_loop.h shifts a
   piece's key indices to its page (sdpa_key_shift), ones holds rows floats of 1. */
typedef struct sdpa_pages {
    const void *const *k, *const *v;
    size_t first, size;
    void *scratch;
    const float *ones;
} sdpa_pages;

typedef struct sdpa_rows {
    size_t rows, d, dv;
    const float *q;
    const size_t *kv_limit;
    /* NULL: every row's keys start at 0. Else row r sees key j only if kv_first[r] <= j, with
       kv_first non-decreasing in r and kv_first[0] <= kv_begin (a sliding window). A key before
       a row's first is hidden from it like one past its limit. */
    const size_t *kv_first;
    const sdpa_mods *mods; /* NULL: no modifier, the plain path */
    const float *score_mul;
    const void *k;
    const void *v;
    ptrdiff_t k_stride, v_stride;
    sdpa_dtype k_type, v_type;
    size_t kv_begin, kv_end;
    float *m, *l, *acc;
    float *ws;
    size_t block;
    const sdpa_span *pf;
    size_t n_pf;
    int reverse;
    /* 1 when the call's K and V together exceed the last-level cache, so that they come from
       memory whatever the caller did before: a kernel may then trade speed in cache for speed
       streaming from memory */
    int stream;
    /* NULL: k and v address the keys as above. Else the keys live in pages (k and v unused): a
       kernel with paged_rows >= rows accepts this. rows_loop.h cuts each key block at page ends
       and hands every piece to the hooks as a unit of its own page, in increasing order
       whatever reverse asks; the AVX-512 prefill gathers each block's rows page by page into
       the f32 copy it computes on, in the order reverse asks, as for contiguous K/V. */
    const sdpa_pages *pages;
    /* 0: nothing. Else, on a piece of a paged unit given to a path that defines
       SDPA_LOOP_AHEAD_ROWS (rows_loop.h): ahead_n rows of a later page, from ahead_row, the
       array's stride apart, that the hook requests while it runs, spread over its work (K rows
       in loop_scores, V rows in loop_values): the rows its own stream, ending at its page's
       end, cannot reach. ahead_first: the key, counted as the piece's keys are, of ahead_row
       (past the piece's end, in a later page). */
    const void *ahead_row;
    size_t ahead_n, ahead_first;
    /* NULL: the unit is not a page's piece. Else it is a piece of the paged unit piece_of
       (rows_loop.h), its key j being piece_of's key piece_base + j: a hook may read that
       unit's later pages through it. */
    const struct sdpa_rows *piece_of;
    size_t piece_base;
    /* NULL: exact scores. Else fast scores (sdpa_params.q8_scores, K in a block format only, a
       unit of at most sdpa_kernels.quant_rows rows): row r's query quantized per 32-block,
       quants at qq + r * d and block scales at qd + r * d / 32, and the score of key j is
       sum_b qd[b] (d_k[b] dot_b(qq, k quants) + m_k[b] sum_b qq) with the block dot products
       and sums exact in int32, k quants and m_k as sdpa_block_quants gives them (m_k = 0 but for
       q4_1 and q5_1; q still holds the scaled rows). A NaN qd makes the score NaN. */
    const int8_t *qq;
    const float *qd;
} sdpa_rows;

/* An implementation's blocking and prefetch parameters: the values its kernels are compiled with
   (each kernel file takes them from here, so what is reported is what runs). 0: the
   implementation has no such parameter. Vocabulary, the same on every ISA: a unit of at most
   decode_max_rows rows takes the decode path (K and V read in place, once, every load shared
   by the rows), a larger one the prefill path (K and V packed per block, register-blocked
   micro-kernels named <op>_<isa>_<mr>x<nr>); decode_q_* are those of a separate decode path
   for K or V in a block format (read in place, format block by format block). */
typedef struct sdpa_tuning {
    size_t decode_max_rows;    /* rows of the largest unit that takes the decode path */
    size_t decode_block;       /* keys per decode block (at most) */
    size_t decode_block_few;   /* keys per decode block when few rows stream both K and V ahead */
    size_t decode_pf_keys;     /* software-prefetch distance of the decode streams, in keys */
    size_t decode_pv_kb;       /* keys per decode P·V sub-block (their V rows stay in L1) */
    size_t decode_ilv_turn;    /* keys per turn when a few-row decode alternates a block's P·V
                                  with the next block's scores over contiguous K/V or a page's
                                  piece (decode_values_ilv; a 16-key-paged unit's whole block
                                  turns a P·V sub-block, two pages) */
    size_t decode_q_block;     /* keys per block of the block-format decode path (at most) */
    size_t decode_q_pf_keys;   /* software-prefetch distance of that path, in keys */
    size_t decode_q_pf_paged;  /* ... through short pages, read a block at a time */
    size_t decode_q_pv_kb;     /* keys per P·V sub-block of that path (their V rows stay in L1) */
    size_t prefill_block;      /* keys per prefill block (at most; the driver's hint may be less) */
    size_t prefill_panel;      /* query rows packed together (a Qᵀ panel or a Q panel) */
    size_t prefill_pf_lines;   /* lines of the driver's hint (sdpa_rows.pf) requested per prefill
                                  score tile */
    size_t score_mr, score_nr; /* query rows x keys of the prefill score micro-kernel,
                                  score_<isa>_<mr>x<nr> (on every ISA, transposed or not) */
    size_t pv_mr, pv_nr;       /* query rows x output columns of the prefill P·V micro-kernel,
                                  pv_<isa>_<mr>x<nr> */
    size_t pv_kb;              /* keys per prefill P·V sub-block (0: the whole block) */
} sdpa_tuning;

typedef struct sdpa_kernels {
    /* the three public primitives, same contract as in sdpa.h (n, d, dv >= 1 here) */
    void (*score_f32)(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                      float scale, float *s);
    float (*softmax_online_f32)(float *s, size_t n, float *m, float *l);
    void (*accumulate_f32)(float *o, float alpha, const float *p, const float *v, size_t v_stride,
                           size_t n, size_t dv);
    /* the implementation's exp over an array, and its stated max ULP error for x <= 0 */
    void (*exp_f32)(const float *x, float *y, size_t n);
    double exp_max_ulp;
    /* the implementation's tanh over an array (y may equal x; softcap uses it), and its stated
       max ULP error over every float */
    void (*tanh_f32)(const float *x, float *y, size_t n);
    double tanh_max_ulp;
    /* fused attention on one unit of work */
    void (*rows)(const sdpa_rows *w);
    /* scratch floats that `rows` needs for R rows, head dims d/dv and a key block */
    size_t (*ws_floats)(size_t rows, size_t d, size_t dv, size_t block);
    /* the largest unit `rows` takes with sdpa_rows.pages set (0: none; the driver then hands
       it one unit per run of pages) */
    size_t paged_rows;
    /* the largest unit `rows` takes with K or V in a block format (any, see convert.h) read in
       place, and fast scores (sdpa_rows.qq); 0: none (the driver then stages K and V
       dequantized to f32 and hands over f32 query values for fast scores) */
    size_t quant_rows;
    /* n elements (a multiple of 32) of a row of a block format at src to f32, exactly:
       what the driver's staged copy takes; NULL: it converts them itself, element by element */
    void (*dequant)(sdpa_dtype type, const void *src, float *dst, size_t n);
    /* the parameters the kernels above were compiled with */
    sdpa_tuning tuning;
} sdpa_kernels;

/* Every implementation exports one of these, named sdpa_kernels_<isa> (kernel_def.h defines
   it); each is declared beside its row in dispatch/registry.c, the reference also here, for
   the driver's own use.

   Adding an ISA touches three places and no other; take a hypothetical neon-dotprod (NEON with
   the armv8.2 SDOT/UDOT int8 dot products) as the example:
   1. Its kernel folder: kernels/arm/neon_dotprod/ (or files beside the NEON ones), defining
      sdpa_kernels_neon_dotprod through kernel_def.h from functions named <op>_neon_dotprod,
      with its tuning macros so that sdpa_tuning reports what it was compiled with.
   2. Its meson lines: one more row in kernels/arm/meson.build, its name ("neon-dotprod"), its
      sources and its own flags (-march=armv8.2-a+dotprod), never applied to anything else; the
      name becomes SDPA_HAVE_NEON_DOTPROD in sdpa_config.h.
   3. Its registry row in dispatch/registry.c, under SDPA_HAVE_NEON_DOTPROD and above the row it
      beats (rows are best first): the name SDPA_ISA and sdpa_select take, its requirement as
      feature keys, its kernel table and the peak class it is judged against. An
      implementation derived from another is its parent's row with the fields that differ
      overridden; with the NEON row's fields as a macro NEON_ROW (as AVX512_ROW is there):
          {NEON_ROW, .name = "neon-dotprod", .requires = KEYS("asimd", "asimddp"),
           .k = &sdpa_kernels_neon_dotprod},
      keeping the peak class "neon". asimddp is already a key of the feature table there; a
      feature that is not yet is one more line of it: its key, how the CPU and OS report it
      (a cpu_features bit, a hwcap bit), and its name in the requirement text.
   Selection, sdpa_impl_requires, the capability report (tools/sdpa-cpuinfo), the benchmark and
   the tests all read the row: none of them names an implementation. */
extern const sdpa_kernels sdpa_kernels_scalar;

#endif /* SDPA_KERNEL_TABLE_H */
