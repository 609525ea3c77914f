/* test_prefetch.c -- the K/V row-stream prefetch cursor (kernels/generic/prefetch.h): every line of
 * every row, in address order, none outside the rows; rows of whole lines end to end as one run */
#include "testlib.h"

#include "prefetch.h"

/* Rows [0, n) of row_bytes each, stride bytes apart (negative: row 0 highest), the first at
   byte offset off of a buffer. The cursor is a hint: a wrong address never faults, so only a
   test can tell that it names the right lines. */
typedef struct pcase {
    size_t row_bytes;
    ptrdiff_t stride;
    size_t n, off;
} pcase;

static const pcase pcases[] = {
    {256, 256, 40, 0},  /* f16 rows of 128 elements end to end: the decode case */
    {256, 1024, 40, 0}, /* heads interleaved: gaps between rows */
    {512, 512, 9, 0},   /* f32 rows */
    {80, 80, 50, 0},    /* rows that straddle lines */
    {80, 96, 50, 16},   /* a stride that is not a multiple of 64, rows not aligned */
    {256, -256, 40, 0}, /* negative stride */
    {200, -512, 20, 8}, /* negative stride, gaps, unaligned */
    {64, 128, 10, 32},  /* each row straddles two lines only through its alignment */
    {128, 128, 10, 48}, /* rows end to end, each across three lines: one run of lines */
    {256, 256, 40, 32}, /* the decode case 32 bytes off the line grid: one run of lines */
    {64, 64, 1, 0},     /* one line */
    {256, 256, 0, 0},   /* no rows: nothing requested */
};

static bool in_row_lines(uintptr_t line, uintptr_t base, const pcase *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const uintptr_t r = base + (uintptr_t)((ptrdiff_t)i * c->stride);
        if (line + 64 > r && line < r + c->row_bytes) return true;
    }
    return false;
}

static void test_rows(void)
{
    tl_start("prefetch row stream", "generic");
    for (size_t ci = 0; ci < sizeof pcases / sizeof pcases[0]; ci++) {
        const pcase *c = &pcases[ci];
        const size_t span =
            c->n ? (c->n - 1) * (size_t)(c->stride < 0 ? -c->stride : c->stride) : 0;
        unsigned char *buf = tl_xmalloc(span + c->row_bytes + c->off + 128);
        const uintptr_t b0 = ((uintptr_t)buf + 63) & ~(uintptr_t)63; /* 64-aligned origin */
        /* row 0 sits at the top of the span for a negative stride */
        const uintptr_t base = b0 + c->off + (c->stride < 0 ? span : 0);
        sdpa_pf_rows s = sdpa_pf_rows_begin((const void *)base, c->stride, c->row_bytes, c->n);
        if (c->n && c->row_bytes % 64 == 0 && c->stride == (ptrdiff_t)c->row_bytes && (base & 63)) {
            /* rows of whole lines end to end, off the grid: every line of their bytes once, in
               address order, and nothing else */
            const size_t want = c->n * c->row_bytes / 64 + 1;
            size_t count = 0, wrong = 0;
            for (const char *p; (p = sdpa_pf_rows_pop(&s)) != NULL && count < want + 8; count++)
                if ((uintptr_t)p != (base & ~(uintptr_t)63) + 64 * count) wrong++;
            CHECK(count == want, "case %zu: %zu lines named, want %zu", ci, count, want);
            CHECK(wrong == 0, "case %zu: %zu lines out of the run", ci, wrong);
            free(buf);
            continue;
        }
        const size_t L = ((base & 63) + c->row_bytes + 63) / 64;
        size_t count = 0, outside = 0, disorder = 0;
        uintptr_t prev = 0;
        /* lines named, to check coverage: a row's line index from its first line */
        bool *seen = calloc(c->n * (L + 1) + 1, 1);
        for (const char *p; (p = sdpa_pf_rows_pop(&s)) != NULL && count < c->n * L + 8; count++) {
            const uintptr_t line = (uintptr_t)p & ~(uintptr_t)63;
            if (!in_row_lines(line, base, c)) outside++;
            /* within one row the lines ascend; rows follow the stride's direction */
            if (count % L && line <= prev) disorder++;
            prev = line;
            const size_t row = count / L;
            const uintptr_t r = base + (uintptr_t)((ptrdiff_t)row * c->stride);
            const uintptr_t first = r & ~(uintptr_t)63;
            if (line >= first && (line - first) / 64 <= L)
                seen[row * (L + 1) + (line - first) / 64] = true;
        }
        CHECK(count == c->n * L, "case %zu: %zu lines named, want %zu rows x %zu lines", ci, count,
              c->n, L);
        CHECK(outside == 0, "case %zu: %zu lines named outside every row", ci, outside);
        CHECK(disorder == 0, "case %zu: %zu lines out of address order within a row", ci, disorder);
        /* every line holding a byte of a row is named; a stride that is not a multiple of 64
           may leave a row's last line out (documented: a hint) */
        size_t missed = 0;
        for (size_t i = 0; i < c->n; i++) {
            const uintptr_t r = base + (uintptr_t)((ptrdiff_t)i * c->stride);
            const size_t need = ((r & 63) + c->row_bytes + 63) / 64;
            const size_t must = c->stride % 64 == 0 ? need : need - 1;
            for (size_t l = 0; l < must; l++)
                if (!seen[i * (L + 1) + l]) missed++;
        }
        CHECK(missed == 0, "case %zu: %zu lines of the rows never named", ci, missed);
        CHECK(sdpa_pf_rows_pop(&s) == NULL, "case %zu: the stream goes on after its last line", ci);
        free(seen);
        free(buf);
    }
    tl_end();
}

/* A stream with a second run chained on (another page of the same view): the first run's
   lines, then the second's, each once, then nothing; chained on an empty stream, the second
   run alone; a run whose rows take another number of lines, left out; a kernel's cursor
   (sdpa_pf_rows_next) stops at the first run's end until sdpa_pf_rows_take starts the next. */
static void test_chain(void)
{
    tl_start("prefetch row stream, chained", "generic");
    enum { ROW = 256, STRIDE = 512, N1 = 5, N2 = 3 };
    unsigned char *buf = tl_xmalloc(4 * 4096 + 64);
    const uintptr_t b0 = ((uintptr_t)buf + 63) & ~(uintptr_t)63;
    const char *run1 = (const char *)b0, *run2 = (const char *)b0 + 2 * 4096;
    for (int empty = 0; empty < 2; empty++) {
        sdpa_pf_rows s = sdpa_pf_rows_begin(run1, STRIDE, ROW, empty ? 0 : N1);
        sdpa_pf_rows_chain(&s, run2, ROW, N2);
        const size_t L = ROW / 64, want = (empty ? 0 : N1 * L) + N2 * L;
        size_t count = 0, wrong = 0;
        for (const char *p; (p = sdpa_pf_rows_pop(&s)) != NULL && count < want + 8; count++) {
            const size_t k = empty ? count + N1 * L : count; /* index in run1 ++ run2 */
            const char *base = k < N1 * L ? run1 : run2;
            const size_t kk = k < N1 * L ? k : k - N1 * L;
            if (p != base + (kk / L) * STRIDE + (kk % L) * 64) wrong++;
        }
        CHECK(count == want, "%s: %zu lines named, want %zu", empty ? "empty" : "chained", count,
              want);
        CHECK(wrong == 0, "%s: %zu lines out of place", empty ? "empty" : "chained", wrong);
    }
    /* sdpa_pf_rows_next stops at the first run's end; sdpa_pf_rows_take starts the second there,
       and only there */
    {
        const size_t L = ROW / 64;
        sdpa_pf_rows t = sdpa_pf_rows_begin(run1, STRIDE, ROW, N1);
        sdpa_pf_rows_chain(&t, run2, ROW, N2);
        sdpa_pf_rows_next(&t, (int)L);
        sdpa_pf_rows_take(&t);
        CHECK(t.n == (N1 - 1) * L && t.p == run1 + STRIDE,
              "take before the first run's end moved the stream");
        sdpa_pf_rows_next(&t, (int)(N1 * L + 8));
        CHECK(t.n == 0 && t.n2 == N2 * L, "next went past the first run: %zu, %zu lines left", t.n,
              t.n2);
        sdpa_pf_rows_take(&t);
        CHECK(t.p == run2 && t.n == N2 * L && t.n2 == 0 && t.li == 0,
              "take did not start the chained run");
    }
    /* rows offset by 32 bytes take 5 lines, not 4: not chained */
    sdpa_pf_rows s = sdpa_pf_rows_begin(run1, STRIDE, ROW, N1);
    sdpa_pf_rows_chain(&s, run2 + 32, ROW, N2);
    size_t count = 0;
    while (sdpa_pf_rows_pop(&s) && count < 100) count++;
    CHECK(count == N1 * (ROW / 64), "misaligned run: %zu lines named, want %d", count,
          N1 * (ROW / 64));
    free(buf);
    tl_end();
}

int main(void)
{
    tl_header("the K/V row-stream prefetch cursor");
    test_rows();
    test_chain();
    return tl_finish();
}
