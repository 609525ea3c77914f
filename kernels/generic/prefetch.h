/* prefetch.h -- software prefetch helpers: the driver's hints (sdpa_rows.pf), and K/V rows in
 * address order */
#ifndef SDPA_PREFETCH_H
#define SDPA_PREFETCH_H

#include <stdint.h>

#include "kernel_table.h"

/* The driver's query packing and output writes are memory-bound; left alone they wait on every
   line. A kernel with long compute-bound stretches requests those lines a few at a time between
   its tiles, so they arrive while it computes. Few at a time: a burst larger than the core's
   line-fill buffers stalls the arithmetic it was meant to hide behind. */
typedef struct sdpa_pf_cursor {
    const sdpa_span *s, *e;
    size_t off;
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

/* Requests the rows of a K/V view in address order, one 64-byte line per request, for kernels
   that stream K/V from memory. A decode tile reads a line of each of its keys' rows at a time
   (line 0 of keys j..j+3, then line 1, ...); requests issued in that order jump between rows and
   defeat the memory system's own streaming, while the same lines requested row after row (the
   order of a plain stream) arrive about twice as fast. A stream that has run out requests
   nothing. Lines are counted from the line holding a row's first byte; with a stride that is
   not a multiple of 64 a row may get one line too few: a hint, never a fault. */
typedef struct sdpa_pf_rows {
    const char *p;  /* next line to request */
    ptrdiff_t skip; /* bytes from past a row's last line to the next row's first */
    size_t li;      /* lines of the current row already requested */
    size_t L;       /* lines per row */
    size_t n;       /* lines left in the stream */
    const char *p2; /* a second run of rows like the first (sdpa_pf_rows_chain), n2 lines, */
    size_t n2;      /* requested once the first has run out */
} sdpa_pf_rows;

/* rows [0, nrows) starting at row0, stride bytes apart, row_bytes each. Rows of whole lines end
   to end (stride == row_bytes) are one run of lines however they are aligned: row_bytes / 64
   lines a row, and the line holding the last row's end; so a view whose rows are 32 bytes off
   the line grid (a 32-byte aligned cache) keeps the plain cursor of an aligned one. */
static inline sdpa_pf_rows sdpa_pf_rows_begin(const void *row0, ptrdiff_t stride, size_t row_bytes,
                                              size_t nrows)
{
    const uintptr_t a = (uintptr_t)row0;
    size_t L = row_bytes ? ((a & 63) + row_bytes + 63) / 64 : 0, n = L * nrows;
    if ((a & 63) && nrows && row_bytes % 64 == 0 && stride == (ptrdiff_t)row_bytes)
        L = row_bytes / 64, n = L * nrows + 1;
    const sdpa_pf_rows c = {
        (const char *)(a & ~(uintptr_t)63), stride - (ptrdiff_t)(64 * L), 0, L, n, NULL, 0};
    return c;
}

/* Appends nrows rows from row0 (the stream's stride and row size: another page of the same
   view) to the stream, requested after its own; an empty stream becomes that run. A run whose
   rows take a different number of lines (another offset within a line) is left out: a hint. */
static inline void sdpa_pf_rows_chain(sdpa_pf_rows *c, const void *row0, size_t row_bytes,
                                      size_t nrows)
{
    const sdpa_pf_rows r =
        sdpa_pf_rows_begin(row0, c->skip + (ptrdiff_t)(64 * c->L), row_bytes, nrows);
    if (c->n == 0)
        *c = r;
    else if (r.L == c->L)
        c->p2 = r.p, c->n2 = r.n;
}

/* Takes up the chained run once the first has run out (nothing otherwise). */
static inline void sdpa_pf_rows_take(sdpa_pf_rows *c)
{
    if (!c->n && c->n2) c->p = c->p2, c->n = c->n2, c->li = 0, c->n2 = 0;
}

/* The stream's next line, or NULL once it has run out, the chained run included (tests walk a
   stream with this). */
static inline const char *sdpa_pf_rows_pop(sdpa_pf_rows *c)
{
    sdpa_pf_rows_take(c);
    if (!c->n) return NULL;
    const char *p = c->p;
    c->n--;
    c->p += 64;
    if (++c->li == c->L) {
        c->li = 0;
        c->p += c->skip;
    }
    return p;
}

/* The locality of a K/V stream's requests: 3 (prefetcht0 on x86), into every level down to L1.
   The decode loops use each line once, a few dozen keys after they request it, so it need not
   wait in L2. */
#define SDPA_PF_STREAM_LOCALITY 3

/* Requests every line of row j of a K/V view (element size es, stride in elements, n elements):
   a whole row at once, for a stream's first rows or rows a cursor does not cover. */
static inline void sdpa_pf_row(const void *base, size_t es, ptrdiff_t stride, size_t j, size_t n)
{
    const char *p = (const char *)base + (ptrdiff_t)j * stride * (ptrdiff_t)es;
    for (size_t b = 0; b < n * es; b += 64) __builtin_prefetch(p + b, 0, SDPA_PF_STREAM_LOCALITY);
}

/* Requests the next `lines` lines of the stream's current run. It stops at the run's end, so
   that a step tests one count: a kernel takes up a chained run (sdpa_pf_rows_take) between its
   tiles. */
static inline void sdpa_pf_rows_next(sdpa_pf_rows *c, int lines)
{
    for (int i = 0; i < lines && c->n; i++)
        __builtin_prefetch(sdpa_pf_rows_pop(c), 0, SDPA_PF_STREAM_LOCALITY);
}

#endif /* SDPA_PREFETCH_H */
