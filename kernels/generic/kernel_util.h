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
static inline size_t sdpa_visible(const sdpa_rows *w, size_t r, size_t j0, size_t nb)
{
    const size_t lim = w->kv_limit[r];
    return lim <= j0 ? 0 : sdpa_min(nb, lim - j0);
}

#endif /* SDPA_KERNEL_UTIL_H */
