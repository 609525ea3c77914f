/* prefetch.h -- walking the driver's prefetch hints (sdpa_rows.pf) a few cache lines at a time */
#ifndef SDPA_PREFETCH_H
#define SDPA_PREFETCH_H

#include "kernel_table.h"

/* The driver's query packing and output writes are memory-bound; left alone they wait on every
   line. A kernel with long compute-bound stretches requests those lines a few at a time between
   its tiles, so they arrive while it computes. Few at a time: a burst larger than the core's
   line-fill buffers stalls the arithmetic it was meant to hide behind. */
typedef struct sdpa_pf_cursor {
    const sdpa_span *s, *e;
    size_t           off;
} sdpa_pf_cursor;

static inline sdpa_pf_cursor sdpa_pf_begin(const sdpa_rows *w)
{
    const sdpa_pf_cursor c = {w->pf, w->pf + w->n_pf, 0};
    return c;
}

/* Requests the next `lines` 64-byte lines of the hints (into the outer caches). */
static inline void sdpa_pf_lines(sdpa_pf_cursor *c, int lines)
{
    while (lines > 0 && c->s < c->e) {
        if (c->off >= c->s->bytes) {
            c->s++;
            c->off = 0;
            continue;
        }
        __builtin_prefetch((const char *)c->s->p + c->off, 0, 2);
        c->off += 64;
        lines--;
    }
}

#endif /* SDPA_PREFETCH_H */
