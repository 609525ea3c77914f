/* kernel_util.h -- small helpers every kernel file shares: forced inlining, unrolling, sizes */
#ifndef SDPA_KERNEL_UTIL_H
#define SDPA_KERNEL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "convert.h"
#include "kernel_table.h"
#include "key_shift.h"

/* Micro-kernels are written once with their shape as a parameter and instantiated with
   constants; forcing them inline lets the compiler unroll them and keep every accumulator in a
   register. */
#define SDPA_INLINE static inline __attribute__((always_inline))
#define SDPA_UNROLL _Pragma("GCC unroll 16")
/* One specialisation of a kernel (a storage type, a row count) as a function of its own, called
   once per block or run of tiles: expanded in place at every call site, the specialisations
   would make functions whose compile time grows faster than their size. */
#define SDPA_NOINLINE static __attribute__((noinline))
/* The cases 1 to N of a switch over a small count, each calling X(n) with its constant n, so
   that every count gets its own specialisation; the caller writes the default. */
#define SDPA_CASE(X, n)                                                                            \
    case n:                                                                                        \
        X(n);                                                                                      \
        break;
#define SDPA_CASES3(X) SDPA_CASE(X, 1) SDPA_CASE(X, 2) SDPA_CASE(X, 3)
#define SDPA_CASES6(X) SDPA_CASES3(X) SDPA_CASE(X, 4) SDPA_CASE(X, 5) SDPA_CASE(X, 6)
#define SDPA_CASES7(X) SDPA_CASES6(X) SDPA_CASE(X, 7)
/* The row switch of a tile of 1 to 4 rows (mr): the statement FOUR for 4 rows, else X(3), X(2)
   or X(1), the row count a constant in each. */
#define SDPA_ROWS4_SWITCH(mr, FOUR, X)                                                             \
    switch (mr) {                                                                                  \
    case 4:                                                                                        \
        FOUR;                                                                                      \
        break;                                                                                     \
        SDPA_CASE(X, 3)                                                                            \
        SDPA_CASE(X, 2)                                                                            \
    default:                                                                                       \
        X(1);                                                                                      \
        break;                                                                                     \
    }
/* A switch over a storage type t with the type as a constant in each case: ELEM(T) for f16 and
   bf16 (and f32, the default), QUANT(T) for every block format. */
#define SDPA_TYPE_SWITCH(t, ELEM, QUANT)                                                           \
    switch (t) {                                                                                   \
        SDPA_CASE(ELEM, SDPA_F16)                                                                  \
        SDPA_CASE(ELEM, SDPA_BF16)                                                                 \
        SDPA_CASE(QUANT, SDPA_Q8_0)                                                                \
        SDPA_CASE(QUANT, SDPA_Q4_0)                                                                \
        SDPA_CASE(QUANT, SDPA_Q4_1)                                                                \
        SDPA_CASE(QUANT, SDPA_Q5_0)                                                                \
        SDPA_CASE(QUANT, SDPA_Q5_1)                                                                \
        SDPA_CASE(QUANT, SDPA_IQ4_NL)                                                              \
    default:                                                                                       \
        ELEM(SDPA_F32);                                                                            \
        break;                                                                                     \
    }
/* A switch calling X(T) with t's block format T as a constant (SDPA_Q8_0 for q8_0 and every
   type not listed), so that each format gets its own instance. */
#define SDPA_FORMAT_SWITCH(t, X)                                                                   \
    switch (t) {                                                                                   \
        SDPA_CASE(X, SDPA_Q4_0)                                                                    \
        SDPA_CASE(X, SDPA_Q4_1)                                                                    \
        SDPA_CASE(X, SDPA_Q5_0)                                                                    \
        SDPA_CASE(X, SDPA_Q5_1)                                                                    \
        SDPA_CASE(X, SDPA_IQ4_NL)                                                                  \
    default:                                                                                       \
        X(SDPA_Q8_0);                                                                              \
        break;                                                                                     \
    }

/* n rounded up to a multiple of 16 floats (64 bytes: scratch sub-buffers start on a line). */
static inline size_t sdpa_round16(size_t n) { return (n + 15) & ~(size_t)15; }
static inline size_t sdpa_min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t sdpa_max(size_t a, size_t b) { return a > b ? a : b; }
/* Row j of a K/V view as an element offset (strides may be negative). */
static inline ptrdiff_t sdpa_row_off(ptrdiff_t stride, size_t j) { return (ptrdiff_t)j * stride; }

/* Keys of the block [j0, j0 + nb) that row r of a unit sees: a prefix, as a row's keys end at
   its limit. */
static inline size_t sdpa_seen(size_t lim, size_t j0, size_t nb)
{
    return lim <= j0 ? 0 : sdpa_min(nb, lim - j0);
}
static inline size_t sdpa_visible(const sdpa_rows *w, size_t r, size_t j0, size_t nb)
{
    return sdpa_seen(w->kv_limit[r], j0, nb);
}

/* s[0..n) *= mul (a power of two: exact but where a score overflows or underflows, as the
   scaled score itself would). The rare path of sdpa_rows.score_mul, left to the compiler. */
static inline void sdpa_scale_scores(float *s, size_t n, float mul)
{
    if (mul == 1.0f) return;
    for (size_t j = 0; j < n; j++) s[j] *= mul;
}

/* Calls BODY(ra, ka, kb) for the runs of rows [r0, r1) (key limits lim[r]) of a block
   [j0, j0 + nb) in which every row sees every key: rows [ra, r1) over block keys [ka, kb),
   the first run (ka = 0) covering every row. Limits are non-decreasing, so the
   runs step the first row up as keys go past earlier rows' limits. A kernel runs its P·V tile
   per run, so that a key past a row's limit is skipped rather than weighted by 0 (0 * inf is
   NaN). */
#define SDPA_VISIBLE_RUNS(lim, r0, r1, j0, nb, BODY)                                               \
    do {                                                                                           \
        size_t ra_ = (r0), ka_ = 0;                                                                \
        while (ra_ < (r1)) {                                                                       \
            const size_t kb_ = sdpa_seen((lim)[ra_], (j0), (nb));                                  \
            if (kb_ > ka_) {                                                                       \
                BODY(ra_, ka_, kb_);                                                               \
                ka_ = kb_;                                                                         \
            }                                                                                      \
            while (ra_ < (r1) && sdpa_seen((lim)[ra_], (j0), (nb)) <= ka_) ra_++;                  \
        }                                                                                          \
    } while (0)

/* A float's bits and back, through a union: GCC keeps these in registers and vectorises loops
   that use them as no-ops. */
typedef union sdpa_pun {
    float f;
    uint32_t u;
} sdpa_pun;
static inline uint32_t sdpa_f32_bits(float f) { return (sdpa_pun){.f = f}.u; }
static inline float sdpa_bits_f32(uint32_t u) { return (sdpa_pun){.u = u}.f; }

/* Whether every element of rows [ja, jb) of v (type vt, stride vs, dv elements each) is finite:
   no exponent field all ones (f32 0x7f800000, f16 0x7c00, bf16 0x7f80), tested on the bits so
   that the loop vectorises. */
typedef uint32_t __attribute__((may_alias)) sdpa_bits32;
static inline bool sdpa_rows_finite(const void *v, sdpa_dtype vt, ptrdiff_t vs, size_t dv,
                                    size_t ja, size_t jb)
{
    unsigned bad = 0;
    for (size_t j = ja; j < jb; j++) {
        if (sdpa_dtype_quantized(vt)) { /* d q is finite iff the scale d is */
            const unsigned char *x =
                (const unsigned char *)v + sdpa_off_bytes(vt, sdpa_row_off(vs, j));
            const size_t bb = sdpa_block_bytes(vt);
            for (size_t b = 0; b < dv / SDPA_QK; b++, x += bb) bad |= (x[1] & 0x7c) == 0x7c;
        } else if (vt == SDPA_F32) {
            const sdpa_bits32 *x = (const sdpa_bits32 *)v + sdpa_row_off(vs, j);
            for (size_t c = 0; c < dv; c++) bad |= (x[c] & 0x7f800000u) == 0x7f800000u;
        } else {
            const uint16_t e = vt == SDPA_F16 ? 0x7c00 : 0x7f80;
            const uint16_t *x = (const uint16_t *)v + sdpa_row_off(vs, j);
            for (size_t c = 0; c < dv; c++) bad |= (x[c] & e) == e;
        }
    }
    return !bad;
}

/* The K (v = 0) or V (v = 1) array of the pages pg holding a paged unit's key j, and j's row in
   it (*row). */
static inline const void *sdpa_page_at(const sdpa_pages *pg, int v, size_t j, size_t *row)
{
    const size_t p = j / pg->size;
    *row = j - p * pg->size;
    return (v ? pg->v : pg->k)[p - pg->first];
}

/* The K (v = 0) or V (v = 1) rows of keys [j, j + *n) of w as one run: the array holding key j
   (its page on a paged unit, else w's own k or v), j's row in it in *row, and *n cut at the end
   of j's page. */
static inline const void *sdpa_key_rows(const sdpa_rows *w, int v, size_t j, size_t *n, size_t *row)
{
    const sdpa_pages *pg = w->pages;
    if (!pg) {
        *row = j;
        return v ? w->v : w->k;
    }
    const void *base = sdpa_page_at(pg, v, j, row);
    *n = sdpa_min(*n, pg->size - *row);
    return base;
}

/* Whether every element of V rows [ja, jb) of w is finite (a paged unit's, page by page). */
static inline bool sdpa_v_finite(const sdpa_rows *w, size_t ja, size_t jb)
{
    for (size_t j = ja, n, r; j < jb; j += n) {
        n = jb - j;
        const void *x = sdpa_key_rows(w, 1, j, &n, &r);
        if (!sdpa_rows_finite(x, w->v_type, w->v_stride, w->dv, r, r + n)) return false;
    }
    return true;
}

/* Runs BODY(ra, ka, kb) over rows [r0, r1) of a block [j0, j0 + nb) as P·V tiles must: one
   call (ra = r0, keys [0, seen by the last row)) when the keys some of those rows do not see
   hold finite values only (their p = 0 then adds exactly 0), else per SDPA_VISIBLE_RUNS. The
   check reads the few V rows of a causal diagonal; when it passes, a full call and the runs
   give the same values (up to the sign of a zero). */
#define SDPA_PV_TILES(w, lim, r0, r1, j0, nb, BODY)                                                \
    do {                                                                                           \
        const size_t first_ = sdpa_seen((lim)[r0], (j0), (nb));                                    \
        const size_t last_ = sdpa_seen((lim)[(r1)-1], (j0), (nb));                                 \
        if (first_ == last_ || sdpa_v_finite((w), (j0) + first_, (j0) + last_)) {                  \
            BODY((r0), 0, last_);                                                                  \
        } else {                                                                                   \
            SDPA_VISIBLE_RUNS(lim, r0, r1, j0, nb, BODY);                                          \
        }                                                                                          \
    } while (0)

/* The piece of a paged unit w that starts at key j: *n (the keys wanted) is cut at the end of
   j's page, and u becomes a unit of that page alone, its keys counted from the page's first
   (sdpa_key_shift into w->pages->scratch and um: the limits, and the window starts and
   modifiers by which a piece's exact P·V skips hidden keys). Returns j's row in the page.
   Every key of the piece lies in [w->kv_begin, w->kv_end), so u's range is the page's part
   of it. */
static inline size_t sdpa_page_piece(const sdpa_rows *w, size_t j, size_t *n, sdpa_rows *u,
                                     sdpa_mods *um)
{
    const sdpa_pages *pg = w->pages;
    const size_t p = j / pg->size, base = p * pg->size, lj = j - base;
    if (*n > pg->size - lj) *n = pg->size - lj;
    sdpa_key_shift(w, base, pg->scratch, u, um);
    u->pages = NULL;
    u->k = pg->k[p - pg->first];
    u->v = pg->v[p - pg->first];
    u->kv_begin = w->kv_begin > base ? w->kv_begin - base : 0;
    u->kv_end = w->kv_end - base < pg->size ? w->kv_end - base : pg->size;
    u->piece_of = w;
    u->piece_base = base;
    return lj;
}

/* The keys of the block at key j of the paged unit w, blocks of at most B keys on the page
   grid (rows_loop.h): within a page when pages hold B keys or more, else whole pages, the
   first block up to the first page boundary; none past w's end. */
static inline size_t sdpa_page_block(const sdpa_rows *w, size_t j, size_t B)
{
    const size_t ps = w->pages->size, pe = (j / ps + 1) * ps;
    const size_t nb = ps >= B ? sdpa_min(B, pe - j) : j % ps ? pe - j : B / ps * ps;
    return j < w->kv_end ? sdpa_min(nb, w->kv_end - j) : 0;
}

/* The K (v = 0) or V (v = 1) rows of keys [j0, j1) of a paged unit w that lie in the page of
   key j0, none at or past the unit's end, as one run: its first row in *row, its length in *n
   (0 when j0 is past the end). */
static inline void sdpa_page_run(const sdpa_rows *w, int v, size_t j0, size_t j1, const void **row,
                                 size_t *n)
{
    const sdpa_pages *pg = w->pages;
    const size_t end = w->kv_end < w->kv_limit[w->rows - 1] ? w->kv_end : w->kv_limit[w->rows - 1];
    const size_t p = j0 / pg->size, pe = (p + 1) * pg->size;
    const size_t e = sdpa_min(sdpa_min(j1, end), pe);
    const sdpa_dtype t = v ? w->v_type : w->k_type;
    *n = j0 < e ? e - j0 : 0;
    *row = (const char *)(v ? pg->v : pg->k)[p - pg->first] +
           sdpa_off_bytes(t, (ptrdiff_t)(j0 - p * pg->size) * (v ? w->v_stride : w->k_stride));
}

/* Requests the first line of the K (v = 0) or V (v = 1) rows of each page of a paged unit w
   that starts in keys [j0, j1), none at or past the unit's end: that one early miss starts
   the core's own stream prefetcher on the page's rows well before the kernel's requests. */
static inline void sdpa_page_touch(const sdpa_rows *w, int v, size_t j0, size_t j1)
{
    const sdpa_pages *pg = w->pages;
    const size_t end = w->kv_end < w->kv_limit[w->rows - 1] ? w->kv_end : w->kv_limit[w->rows - 1];
    for (size_t p = (j0 + pg->size - 1) / pg->size; p * pg->size < j1 && p * pg->size < end; p++)
        __builtin_prefetch((v ? pg->v : pg->k)[p - pg->first], 0, 3);
}

/* Requests (a prefetch hint) the K (v = 0) or V (v = 1) rows of keys [j0, j1) of a paged unit
   w, each in its own page, none at or past the unit's end: what a piece's kernel cannot
   request itself, its rows ending at its page's end. */
static inline void sdpa_page_ahead(const sdpa_rows *w, int v, size_t j0, size_t j1)
{
    const sdpa_pages *pg = w->pages;
    const size_t end = w->kv_end < w->kv_limit[w->rows - 1] ? w->kv_end : w->kv_limit[w->rows - 1];
    const sdpa_dtype t = v ? w->v_type : w->k_type;
    const size_t bytes = (size_t)sdpa_off_bytes(t, (ptrdiff_t)(v ? w->dv : w->d));
    const ptrdiff_t st = v ? w->v_stride : w->k_stride;
    for (size_t j = j0; j < j1 && j < end; j++) {
        const size_t p = j / pg->size;
        const char *row = (const char *)(v ? pg->v : pg->k)[p - pg->first] +
                          sdpa_off_bytes(t, (ptrdiff_t)(j - p * pg->size) * st);
        for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 3);
    }
}

/* Keys past a paged piece's end whose rows are requested before it (rows_loop.h), or before a
   page of a block that a packer reads whole (sdpa_k_run). */
#define SDPA_PAGE_AHEAD 32

/* A packer of the block [j0, j0 + nb) of the paged unit w reaching key j0 + c, row `row` of its
   page (the block's first key or a page's): requests what rows_loop.h requests before such a
   page's piece [s, e), the K rows of keys [max(e, s + SDPA_PAGE_AHEAD), e + SDPA_PAGE_AHEAD).
   Out of line: once a page, and kept out of each type's packer. */
static __attribute__((noinline, unused)) void sdpa_k_ahead(const sdpa_rows *w, size_t j0, size_t nb,
                                                           size_t c, size_t row)
{
    const size_t s = j0 + c, e = s + sdpa_min(nb - c, w->pages->size - row);
    sdpa_page_ahead(w, 0, sdpa_max(e, s + SDPA_PAGE_AHEAD), e + SDPA_PAGE_AHEAD);
}

/* The K rows of keys [j0 + c, j0 + c + *n) of the block [j0, j0 + nb) of w as one run
   (sdpa_key_rows: w's own K, or the page of key j0 + c with *n cut at its end), key j0 + c at
   row *row. A packer takes a paged block run by run, requesting each page's later rows on
   reaching the page, so that its requests stay a page or two ahead rather than cover a whole
   block at once. */
SDPA_INLINE const void *sdpa_k_run(const sdpa_rows *w, size_t j0, size_t nb, size_t c, size_t *n,
                                   size_t *row)
{
    const void *k = sdpa_key_rows(w, 0, j0 + c, n, row);
    if (w->pages && (c == 0 || *row == 0)) sdpa_k_ahead(w, j0, nb, c, *row);
    return k;
}

#endif /* SDPA_KERNEL_UTIL_H */
