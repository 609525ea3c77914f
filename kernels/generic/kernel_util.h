/* kernel_util.h -- small helpers every kernel file shares: forced inlining, unrolling, sizes */
#ifndef SDPA_KERNEL_UTIL_H
#define SDPA_KERNEL_UTIL_H

#include <stddef.h>

#include "kernel_table.h"

/* Micro-kernels are written once with their shape as a parameter and instantiated with
   constants; forcing them inline lets the compiler unroll them and keep every accumulator in a
   register. */
#define SDPA_INLINE static inline __attribute__((always_inline))
#define SDPA_UNROLL _Pragma("GCC unroll 16")

/* n rounded up to a multiple of 16 floats (64 bytes: scratch sub-buffers start on a line). */
static inline size_t sdpa_round16(size_t n) { return (n + 15) & ~(size_t)15; }
static inline size_t sdpa_min(size_t a, size_t b) { return a < b ? a : b; }
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

/* Calls BODY(ra, ka, kb) for the runs of a row group [r0, r1) (key limits lim[r]) of a block
   [j0, j0 + nb) in which every row sees every key: rows [ra, r1) over block keys [ka, kb),
   the first run (ka = 0) covering every row of the group. Limits are non-decreasing, so the
   runs step the first row up as keys go past earlier rows' limits. A kernel runs its P·V tile per run, so
   that a key past a row's limit is skipped rather than weighted by 0 (0 * inf is NaN). */
#define SDPA_VISIBLE_RUNS(lim, r0, r1, j0, nb, BODY)                                              \
    do {                                                                                       \
        size_t ra_ = (r0), ka_ = 0;                                                            \
        while (ra_ < (r1)) {                                                                   \
            const size_t kb_ = sdpa_seen((lim)[ra_], (j0), (nb));                             \
            if (kb_ > ka_) {                                                                   \
                BODY(ra_, ka_, kb_);                                                           \
                ka_ = kb_;                                                                     \
            }                                                                                  \
            while (ra_ < (r1) && sdpa_seen((lim)[ra_], (j0), (nb)) <= ka_) ra_++;             \
        }                                                                                      \
    } while (0)

#endif /* SDPA_KERNEL_UTIL_H */
