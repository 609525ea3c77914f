/* rows_loop.h -- the ISA-independent tile loop: key blocks, visible-key bookkeeping, online-softmax
 * state */
/*
 * One loop drives every path of every implementation (the AVX-512 prefill excepted: its scores
 * are transposed and computed panel by panel, see kernels/x86/avx512/prefill.c). An
 * implementation's translation unit re-includes this file once per path, after defining, as
 * static functions compiled for its ISA (so that they inline into the loop below):
 *
 *   SDPA_LOOP_FN                the name to give the loop (void SDPA_LOOP_FN(const sdpa_rows *w))
 *   SDPA_LOOP_CTX               the path's per-call state (scratch pointers, packed q, prefetch
 *                               streams): a struct type
 *   size_t loop_begin(SDPA_LOOP_CTX *c, const sdpa_rows *w, float **S, size_t *lds,
 *                     float **alpha)
 *         sets up the call (scratch, packing q, first prefetches), returns the keys per block
 *         and points S ([rows][lds] scores) and alpha ([rows]) into the scratch
 *   void  loop_scores(SDPA_LOOP_CTX *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
 *                     float *S, size_t lds)
 *         S[r][j] = dot(q_r, key j0 + j) for r0 <= r < rows and j < nb (rows before r0 see none
 *         of the block; a path may compute them too, they are never read)
 *   float loop_softmax(SDPA_LOOP_CTX *c, size_t r, float *s, size_t nv, size_t nb, float *m,
 *                      float *l)
 *         the online-softmax step of row r over s[0..nv) (1 <= nv <= nb), s[nv..nb) written as
 *         p = 0 (never exponentiated: those keys are past the row's limit); returns alpha
 *   void  loop_values(SDPA_LOOP_CTX *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
 *                     const float *alpha, const float *S, size_t lds)
 *         acc[r] = alpha[r] * acc[r] + sum_{j < nv} S[r][j] * v[j0 + j] for r0 <= r < rows,
 *         nv = sdpa_visible(w, r, j0, nb); keys past nv are skipped, not weighted by 0 (an inf
 *         or NaN there must stay out of the row) or carry p = 0 exactly with finite v
 *
 * A block's scores (and values) may come in several calls, each over a part of the block with
 * S advanced by a multiple of 16 columns (a paged unit: one call per page, on a unit of that
 * page alone); loop_softmax then runs once per row r0 <= r < rows, after all of them. What a
 * path carries from loop_scores to loop_softmax (a row's running max) must combine over all
 * the score calls of a block and start afresh for the next block, for every row: one before
 * r0, whose scores a path may compute but which takes no softmax step, may see a later block
 * (scanning backwards).
 *
 * and optionally SDPA_LOOP_REVERSE (1: honour sdpa_rows.reverse, scanning the blocks from the
 * last), SDPA_LOOP_AHEAD_ROWS (1: on a paged unit, the rows of later pages that a piece's
 * hooks should request are handed to them in sdpa_rows.ahead_row, ahead_n, for their own
 * streams to request among their arithmetic; without it the loop requests them itself, at once,
 * before each hook call, or with SDPA_LOOP_AHEAD_TOUCH only the first line of each later page,
 * for a path whose own requests the core's prefetcher extends), SDPA_LOOP_VALUES_PAGED(c) (an
 * expression of the context: nonzero when, on a paged unit, loop_values takes the whole block of
 * the unit itself, w->pages set, and reads V through the pages, rather than a call per page
 * piece; the exact path of a block whose hidden keys have a non-finite V stays per piece),
 * SDPA_LOOP_SCORED(c, w, j0, nb) (an expression, evaluated once a block: nonzero when the
 * scores of the paged unit w's block [j0, j0 + nb) are already in S, so that the loop makes no
 * piece of it for loop_scores), SDPA_LOOP_SCORES_PAGED(c) (an expression of the context:
 * nonzero when, on a paged unit, loop_scores takes the whole block of the unit itself, w->pages
 * set, reading K through the pages and requesting later pages itself) and
 * SDPA_LOOP_PAGES_SELF(c) (an expression of the context: nonzero
 * when the path's hooks request a paged unit's later pages themselves, as the interleaved turns do;
 * the loop then requests none, since its requests would only compete with theirs for the core's
 * line-fill buffers).
 *
 * The loop owns what every path shares: blocking, the rows that see a block (limits are
 * non-decreasing in r, so they are the rows from r0 on), each row's visible keys, the rows'
 * score multipliers (sdpa_rows.score_mul, applied between loop_scores and loop_softmax), and
 * the softmax state (m and l in w, alpha per block). A unit with window starts or modifiers
 * (sdpa_rows.kv_first, .mods) runs a second copy of the loop that also skips blocks no row sees,
 * applies the modifiers (variants.h) after the multipliers, and takes the exact per-row P·V for
 * a block where a key hidden from some row has a non-finite V; a plain unit never branches
 * into any of it.
 */
#include <stddef.h>

#include "kernel_table.h"
#include "kernel_util.h"
#include "variants.h"

#ifndef SDPA_LOOP_REVERSE
#define SDPA_LOOP_REVERSE 0
#endif
/* keys ahead of a paged unit's piece whose rows the loop requests past the piece's page */
#define SDPA_LOOP_AHEAD SDPA_PAGE_AHEAD
/* The rows of keys [a, b) of the paged unit w, past the piece's page: handed to the hook in
   u.ahead_row, u.ahead_n (SDPA_LOOP_AHEAD_ROWS: its own streams request them a few lines at a
   time among its arithmetic), or only the first line of each page starting in [e, b)
   (SDPA_LOOP_AHEAD_TOUCH: the core's prefetcher takes the rest), else requested here at once. */
#if defined(SDPA_LOOP_AHEAD_ROWS)
#define SDPA_LOOP_PAGE_AHEAD(w, v, a, b)                                                           \
    (sdpa_page_touch(w, v, e, b), sdpa_page_run(w, v, a, b, &u.ahead_row, &u.ahead_n),             \
     u.ahead_first = (a)-u.piece_base)
#elif defined(SDPA_LOOP_AHEAD_TOUCH)
#define SDPA_LOOP_PAGE_AHEAD(w, v, a, b) ((void)(a), sdpa_page_touch(w, v, e, b))
#else
#define SDPA_LOOP_PAGE_AHEAD(w, v, a, b) sdpa_page_ahead(w, v, a, b)
#endif
#ifndef SDPA_LOOP_PAGES_SELF
#define SDPA_LOOP_PAGES_SELF(c) 0
#endif
#ifndef SDPA_LOOP_VALUES_PAGED
#define SDPA_LOOP_VALUES_PAGED(c) 0
#endif
#ifndef SDPA_LOOP_SCORED
#define SDPA_LOOP_SCORED(c, w, j0, nb) 0
#endif
#ifndef SDPA_LOOP_SCORES_PAGED
#define SDPA_LOOP_SCORES_PAGED(c) 0
#endif

#define SDPA_LOOP_CAT2(a, b) a##b
#define SDPA_LOOP_CAT(a, b)  SDPA_LOOP_CAT2(a, b)

/* The score and value hooks, each compiled once per path and called once per block (or
   page piece): inlined into the loop's four call sites (two paths, paged or not) they would
   multiply the kernels' specialisations, and a call per block costs nothing measurable. */
SDPA_NOINLINE void SDPA_LOOP_CAT(SDPA_LOOP_FN, _scores)(SDPA_LOOP_CTX *c, const sdpa_rows *w,
                                                        size_t r0, size_t j0, size_t nb, float *S,
                                                        size_t lds)
{
    loop_scores(c, w, r0, j0, nb, S, lds);
}
SDPA_NOINLINE void SDPA_LOOP_CAT(SDPA_LOOP_FN, _values)(SDPA_LOOP_CTX *c, const sdpa_rows *w,
                                                        size_t r0, size_t j0, size_t nb,
                                                        const float *alpha, const float *S,
                                                        size_t lds)
{
    loop_values(c, w, r0, j0, nb, alpha, S, lds);
}

/* The loop, once for the plain path (var = 0: exactly the kernels' own steps) and once for the
   variant path (var = 1: window starts, modifiers, hidden-key handling), from one body. */
SDPA_INLINE void SDPA_LOOP_CAT(SDPA_LOOP_FN, _body)(const sdpa_rows *w, const int var)
{
    const size_t R = w->rows;
    SDPA_LOOP_CTX c;
    float *S, *alpha;
    size_t lds;
    /* a paged unit: each hook call gets a piece of one page as a unit of its own (u) */
    sdpa_rows u;
    sdpa_mods um;
    size_t B;
    if (w->pages) {
        size_t n = 1;
        sdpa_page_piece(w, w->kv_begin, &n, &u, &um);
        B = loop_begin(&c, &u, &S, &lds, &alpha);
    } else {
        B = loop_begin(&c, w, &S, &lds, &alpha);
    }
    const size_t nblk = (w->kv_end - w->kv_begin + B - 1) / B;
    const int rev = SDPA_LOOP_REVERSE && w->reverse && !w->pages;
    size_t r0 = 0; /* rows before r0 see none of the block: forward, it only grows */

    for (size_t bi = 0, jn = w->kv_begin;; bi++) {
        size_t j0, nb;
        if (w->pages) {
            /* blocks on the page grid (sdpa_page_block), so that every piece but a block's
               first starts a page (S offset by a multiple of 16) */
            if (jn >= w->kv_end) break;
            j0 = jn;
            nb = sdpa_page_block(w, j0, B);
            jn = j0 + nb;
        } else {
            if (bi == nblk) break;
            j0 = w->kv_begin + (rev ? nblk - 1 - bi : bi) * B;
            nb = sdpa_min(B, w->kv_end - j0);
        }
        if (rev) r0 = 0;
        while (r0 < R && w->kv_limit[r0] <= j0) r0++;
        if (r0 == R) {
            if (rev) continue;
            break;
        }
        /* a block no row sees (left of every window, or masked for every row) is skipped */
        if (var && sdpa_block_hidden(w, r0, R, j0, nb)) continue;
        if (w->pages && SDPA_LOOP_SCORES_PAGED(&c)) {
            SDPA_LOOP_CAT(SDPA_LOOP_FN, _scores)(&c, w, r0, j0, nb, S, lds);
        } else if (w->pages) {
            if (!SDPA_LOOP_SCORED(&c, w, j0, nb))
                for (size_t o = 0, n; o < nb; o += n) {
                    n = nb - o;
                    const size_t lj = sdpa_page_piece(w, j0 + o, &n, &u, &um);
                    const size_t e = j0 + o + n;   /* the piece's end: the rows ahead past it */
                    if (!SDPA_LOOP_PAGES_SELF(&c)) /* u keeps w's ahead_n, 0 */
                        SDPA_LOOP_PAGE_AHEAD(w, 0, sdpa_max(e, j0 + o + SDPA_LOOP_AHEAD),
                                             e + SDPA_LOOP_AHEAD);
                    SDPA_LOOP_CAT(SDPA_LOOP_FN, _scores)(&c, &u, r0, lj, n, S + o, lds);
                }
        } else
            SDPA_LOOP_CAT(SDPA_LOOP_FN, _scores)(&c, w, r0, j0, nb, S, lds);
        for (size_t r = 0; r < r0; r++)
            alpha[r] = 1.0f; /* a row that sees nothing keeps its state */
        bool hidden = false; /* a key of the block hidden from a row by its first or the mask */
        for (size_t r = r0; r < R; r++) {
            const size_t nv = sdpa_visible(w, r, j0, nb);
            if (w->score_mul) sdpa_scale_scores(S + r * lds, nv, w->score_mul[r]);
            if (var) hidden |= sdpa_modify_scores(w, r, j0, S + r * lds, nv);
            alpha[r] = loop_softmax(&c, r, S + r * lds, nv, nb, &w->m[r], &w->l[r]);
        }
        /* hidden keys carry p = 0, which adds exactly 0 when their V is finite; otherwise the
           block takes the exact per-row path, which skips them */
        if (w->pages) {
            /* the first piece rescales the rows' state by alpha, the later ones by 1 (exact) */
            bool finite = true;
            for (size_t o = 0, n; var && hidden && o < nb; o += n) {
                n = nb - o;
                const size_t lj = sdpa_page_piece(w, j0 + o, &n, &u, &um);
                finite = finite && sdpa_v_finite(&u, lj, lj + sdpa_visible(&u, R - 1, lj, n));
            }
            if (finite && SDPA_LOOP_VALUES_PAGED(&c)) { /* the hook reads the pages: once a block */
                SDPA_LOOP_CAT(SDPA_LOOP_FN, _values)(&c, w, r0, j0, nb, alpha, S, lds);
                continue;
            }
            for (size_t o = 0, n; o < nb; o += n) {
                n = nb - o;
                const size_t lj = sdpa_page_piece(w, j0 + o, &n, &u, &um);
                const size_t e = j0 + o + n;
                if (!SDPA_LOOP_PAGES_SELF(&c))
                    SDPA_LOOP_PAGE_AHEAD(w, 1, sdpa_max(e, j0 + o + SDPA_LOOP_AHEAD),
                                         e + SDPA_LOOP_AHEAD);
                const float *a = o ? w->pages->ones : alpha;
                if (finite)
                    SDPA_LOOP_CAT(SDPA_LOOP_FN, _values)(&c, &u, r0, lj, n, a, S + o, lds);
                else
                    for (size_t r = r0; r < R; r++)
                        sdpa_pv_row_exact(&u, r, lj, sdpa_visible(&u, r, lj, n), a[r],
                                          S + r * lds + o, 1);
            }
            continue;
        }
        if (var && hidden && !sdpa_v_finite(w, j0, j0 + sdpa_visible(w, R - 1, j0, nb))) {
            for (size_t r = r0; r < R; r++)
                sdpa_pv_row_exact(w, r, j0, sdpa_visible(w, r, j0, nb), alpha[r], S + r * lds, 1);
            continue;
        }
        SDPA_LOOP_CAT(SDPA_LOOP_FN, _values)(&c, w, r0, j0, nb, alpha, S, lds);
    }
}

static void SDPA_LOOP_FN(const sdpa_rows *w)
{
    if (sdpa_is_variant(w))
        SDPA_LOOP_CAT(SDPA_LOOP_FN, _body)(w, 1);
    else
        SDPA_LOOP_CAT(SDPA_LOOP_FN, _body)(w, 0);
}

#undef SDPA_LOOP_FN
#undef SDPA_LOOP_CTX
#undef SDPA_LOOP_AHEAD_ROWS
#undef SDPA_LOOP_AHEAD_TOUCH
#undef SDPA_LOOP_PAGES_SELF
#undef SDPA_LOOP_VALUES_PAGED
#undef SDPA_LOOP_SCORED
#undef SDPA_LOOP_SCORES_PAGED
#undef SDPA_LOOP_PAGE_AHEAD
#undef SDPA_LOOP_REVERSE
#undef SDPA_LOOP_CAT
#undef SDPA_LOOP_CAT2
