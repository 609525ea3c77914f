/* validate.c -- sdpa_validate: every check on a call's shapes, strides, overlaps and fields */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "driver.h"

typedef struct checker {
    char *msg;
    size_t len;
} checker;

static sdpa_status fail(checker *c, sdpa_status s, const char *fmt, ...)
{
    if (c->msg && c->len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg, c->len, fmt, ap);
        va_end(ap);
    }
    return s;
}

/* The byte range [lo, hi) a view [n0][n1][n2][inner] touches, relative to its data pointer. */
typedef struct extent {
    ptrdiff_t lo, hi;
} extent;

static sdpa_status view_extent(checker *c, const char *name, const sdpa_tensor *t,
                               const size_t n[3], size_t inner, extent *e)
{
    const ptrdiff_t st[3] = {t->batch_stride, t->head_stride, t->token_stride};
    const size_t esz = sdpa_block_bytes(t->dtype), blk = sdpa_block_elems(t->dtype);
    ptrdiff_t lo = 0, hi = 0; /* in elements (multiples of blk: strides and inner checked) */
    for (int a = 0; a < 3; a++) {
        ptrdiff_t span;
        if (n[a] - 1 > (size_t)PTRDIFF_MAX ||
            __builtin_mul_overflow(st[a], (ptrdiff_t)(n[a] - 1), &span))
            return fail(c, SDPA_ERR_OVERFLOW, "%s: stride %td times extent %zu overflows", name,
                        st[a], n[a]);
        if (span < 0 ? __builtin_add_overflow(lo, span, &lo)
                     : __builtin_add_overflow(hi, span, &hi))
            return fail(c, SDPA_ERR_OVERFLOW, "%s: offsets overflow", name);
    }
    ptrdiff_t top, bytes_lo, bytes_hi;
    if (inner > (size_t)PTRDIFF_MAX || __builtin_add_overflow(hi, (ptrdiff_t)inner, &top) ||
        __builtin_mul_overflow(lo / (ptrdiff_t)blk, (ptrdiff_t)esz, &bytes_lo) ||
        __builtin_mul_overflow(top / (ptrdiff_t)blk, (ptrdiff_t)esz, &bytes_hi) ||
        __builtin_sub_overflow(bytes_hi, bytes_lo, &top))
        return fail(c, SDPA_ERR_OVERFLOW, "%s: the view's byte extent overflows", name);
    e->lo = bytes_lo;
    e->hi = bytes_hi;
    return SDPA_OK;
}

/* Distinct output rows must not share memory, or the result would depend on write order:
   sorted by |stride|, each axis must step past everything the inner axes span. */
static bool rows_disjoint(const sdpa_tensor *t, const size_t n[3], size_t inner)
{
    size_t a_st[3], a_n[3], k = 0;
    const ptrdiff_t st[3] = {t->batch_stride, t->head_stride, t->token_stride};
    for (int a = 0; a < 3; a++)
        if (n[a] > 1) {
            a_st[k] = (size_t)(st[a] < 0 ? -st[a] : st[a]);
            a_n[k++] = n[a];
        }
    for (size_t i = 1; i < k; i++) /* insertion sort, three entries at most */
        for (size_t j = i; j > 0 && a_st[j] < a_st[j - 1]; j--) {
            size_t ts = a_st[j], tn = a_n[j];
            a_st[j] = a_st[j - 1], a_n[j] = a_n[j - 1];
            a_st[j - 1] = ts, a_n[j - 1] = tn;
        }
    size_t span = inner; /* elements covered by the inner axes (extents already overflow-checked) */
    for (size_t i = 0; i < k; i++) {
        if (a_st[i] < span) return false;
        span = a_st[i] * (a_n[i] - 1) + span;
    }
    return true;
}

static bool overlaps(const void *a, extent ea, const void *b, extent eb)
{
    const uintptr_t a0 = (uintptr_t)a + (uintptr_t)ea.lo, a1 = (uintptr_t)a + (uintptr_t)ea.hi;
    const uintptr_t b0 = (uintptr_t)b + (uintptr_t)eb.lo, b1 = (uintptr_t)b + (uintptr_t)eb.hi;
    return a0 < b1 && b0 < a1;
}

/* One side's lengths: padded (each <= bound) or packed (cu from 0, non-decreasing, each
   sequence <= bound); *tokens: packed, the tokens of all sequences (at least 1, for the view's
   extent). */
static sdpa_status check_lengths(checker *c, const char *side, size_t batch, const size_t *lens,
                                 const size_t *cu, size_t bound, const char *bound_name,
                                 size_t *tokens)
{
    *tokens = 1;
    if (lens && cu)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                    "%s_lens and cu_%s are both set: a side is padded or packed, not both", side,
                    side);
    if (lens) {
        for (size_t b = 0; b < batch; b++)
            if (lens[b] > bound)
                return fail(c, SDPA_ERR_INVALID_ARGUMENT, "%s_lens[%zu] = %zu exceeds %s (%zu)",
                            side, b, lens[b], bound_name, bound);
    }
    if (cu) {
        if (cu[0] != 0)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "cu_%s[0] = %zu: it must be 0", side, cu[0]);
        for (size_t b = 0; b < batch; b++) {
            if (cu[b + 1] < cu[b])
                return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                            "cu_%s decreases: cu_%s[%zu] = %zu < cu_%s[%zu] = %zu", side, side,
                            b + 1, cu[b + 1], side, b, cu[b]);
            if (cu[b + 1] - cu[b] > bound)
                return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                            "cu_%s: sequence %zu has %zu tokens, more than %s (%zu)", side, b,
                            cu[b + 1] - cu[b], bound_name, bound);
        }
        if (cu[batch] > 0) *tokens = cu[batch];
    }
    return SDPA_OK;
}

/* The ragged and paged fields: forms, lengths, and every page entry a sequence uses. */
static sdpa_status validate_layouts(checker *c, const sdpa_params *p, size_t *q_tok, size_t *k_tok)
{
    sdpa_status s;
    if ((s = check_lengths(c, "q", p->batch, p->q_lens, p->cu_q, p->q_len, "q_len", q_tok)) !=
            SDPA_OK ||
        (s = check_lengths(c, "kv", p->batch, p->kv_lens, p->cu_kv, p->kv_len, "kv_len", k_tok)) !=
            SDPA_OK)
        return s;
    if (!p->block_table) return SDPA_OK;
    if (p->cu_kv)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                    "cu_kv and block_table are both set: paged lengths come from kv_lens or "
                    "kv_len");
    if (p->page_size == 0 || p->max_pages == 0 || p->n_pages == 0)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT, "block_table is set with %s 0",
                    p->page_size == 0   ? "page_size"
                    : p->max_pages == 0 ? "max_pages"
                                        : "n_pages");
    size_t longest = 0, span, entries;
    for (size_t b = 0; b < p->batch; b++) {
        const size_t lk = p->kv_lens ? p->kv_lens[b] : p->kv_len;
        if (lk > longest) longest = lk;
    }
    if (!mul_sz(p->max_pages, p->page_size, &span) || !mul_sz(p->batch, p->max_pages, &entries))
        return fail(c, SDPA_ERR_OVERFLOW,
                    "block_table: max_pages %zu, page_size %zu, n_pages %zu "
                    "overflow",
                    p->max_pages, p->page_size, p->n_pages);
    if (span < longest)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                    "block_table: max_pages (%zu) x page_size (%zu) is shorter than the longest "
                    "sequence (%zu keys)",
                    p->max_pages, p->page_size, longest);
    for (size_t b = 0; b < p->batch; b++) {
        const size_t lk = p->kv_lens ? p->kv_lens[b] : p->kv_len;
        const int32_t *tab = p->block_table + b * p->max_pages;
        for (size_t j = 0; j < (lk + p->page_size - 1) / p->page_size; j++)
            if (tab[j] < 0 || (size_t)tab[j] >= p->n_pages)
                return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                            "block_table[%zu][%zu] = %d is outside [0, n_pages = %zu)", b, j,
                            (int)tab[j], p->n_pages);
    }
    return SDPA_OK;
}

/* An output (o or lse, extent e from out) must not overlap any array the call reads besides
   the views: the index arrays, the slopes and sinks, the mask and the workspace; written over,
   a page number or a length checked above could change under the call. Index arrays are
   validated already, so their sizes fit. */
static sdpa_status check_reads(checker *c, const sdpa_params *p, const char *name, const void *out,
                               extent e)
{
    /* byte counts saturate: an array that long could not be read anyway */
#define SAT_BYTES(n, size) ((n) > (size_t)PTRDIFF_MAX / (size) ? (size_t)PTRDIFF_MAX : (n) * (size))
    size_t entries = SIZE_MAX;
    if (p->block_table && !mul_sz(p->batch, p->max_pages, &entries)) entries = SIZE_MAX;
    const struct {
        const char *name;
        const void *ptr;
        size_t bytes;
    } arr[] = {
        {"block_table", p->block_table, SAT_BYTES(entries, sizeof(int32_t))},
        {"q_lens", p->q_lens, SAT_BYTES(p->batch, sizeof(size_t))},
        {"kv_lens", p->kv_lens, SAT_BYTES(p->batch, sizeof(size_t))},
        {"cu_q", p->cu_q, SAT_BYTES(p->batch, sizeof(size_t)) + sizeof(size_t)},
        {"cu_kv", p->cu_kv, SAT_BYTES(p->batch, sizeof(size_t)) + sizeof(size_t)},
        {"sinks", p->sinks, SAT_BYTES(p->q_heads, sizeof(float))},
        {"alibi_slopes", p->alibi_slopes, SAT_BYTES(p->q_heads, sizeof(float))},
        {"mask_scales", p->mask_scales, SAT_BYTES(p->q_heads, sizeof(float))},
    };
#undef SAT_BYTES
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) {
        if (!arr[i].ptr || arr[i].bytes == 0) continue;
        if (overlaps(out, e, arr[i].ptr, (extent){0, (ptrdiff_t)arr[i].bytes}))
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "%s overlaps %s, which the call reads", name,
                        arr[i].name);
    }
    return SDPA_OK;
}

static sdpa_status validate(checker *c, const sdpa_params *p, const sdpa_tensor *q,
                            const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_tensor *o)
{
    if (!p) return fail(c, SDPA_ERR_INVALID_ARGUMENT, "params is NULL");
    if (!q || !k || !v || !o)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT, "tensor %s is NULL",
                    !q   ? "q"
                    : !k ? "k"
                    : !v ? "v"
                         : "o");
    if (!q->data || !k->data || !v->data || !o->data)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT, "tensor %s has NULL data",
                    !q->data   ? "q"
                    : !k->data ? "k"
                    : !v->data ? "v"
                               : "o");
    const size_t dv = p->v_dim ? p->v_dim : p->head_dim;
    static const char *const dim_names[] = {"batch", "q_heads", "kv_heads",
                                            "q_len", "kv_len",  "head_dim"};
    const size_t dims[] = {p->batch, p->q_heads, p->kv_heads, p->q_len, p->kv_len, p->head_dim};
    for (int i = 0; i < 6; i++)
        if (dims[i] == 0) return fail(c, SDPA_ERR_INVALID_ARGUMENT, "%s is 0", dim_names[i]);
    if (p->q_heads % p->kv_heads != 0)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                    "q_heads (%zu) is not a multiple of kv_heads (%zu)", p->q_heads, p->kv_heads);
    if (!isfinite(p->scale))
        return fail(c, SDPA_ERR_INVALID_ARGUMENT, "scale is %s",
                    isnan(p->scale) ? "NaN" : "infinite");
    const sdpa_tensor *ts[4] = {q, k, v, o};
    static const char *const tn[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++)
        if (sdpa_block_bytes(ts[i]->dtype) == 0)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "%s has an unknown dtype (%d)", tn[i],
                        (int)ts[i]->dtype);
    if (q->dtype != SDPA_F32 || o->dtype != SDPA_F32)
        return fail(c, SDPA_ERR_UNSUPPORTED,
                    "%s must be SDPA_F32 (f16, bf16 and the block formats are for k and v)",
                    q->dtype != SDPA_F32 ? "q" : "o");
    /* a block format's rows start on a block: its dim and every stride a multiple of one */
    for (int i = 1; i < 3; i++) {
        const size_t blk = sdpa_block_elems(ts[i]->dtype), dim = i == 1 ? p->head_dim : dv;
        const ptrdiff_t st[3] = {ts[i]->batch_stride, ts[i]->head_stride, ts[i]->token_stride};
        static const char *const sn[3] = {"batch_stride", "head_stride", "token_stride"};
        if (blk == 1) continue;
        if (dim % blk != 0)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                        "%s is %s: its %s (%zu) must be a multiple of %zu", tn[i],
                        sdpa_dtype_str(ts[i]->dtype), i == 1 ? "head_dim" : "v_dim", dim, blk);
        for (int a = 0; a < 3; a++)
            if (st[a] % (ptrdiff_t)blk != 0)
                return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                            "%s is %s: its %s (%td) must be a multiple of %zu elements", tn[i],
                            sdpa_dtype_str(ts[i]->dtype), sn[a], st[a], blk);
    }
    if (p->q8_scores != 0 && p->q8_scores != 1)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT, "q8_scores is %d: it must be 0 (exact) or 1",
                    p->q8_scores);
    if (p->q8_scores && !sdpa_dtype_quantized(k->dtype))
        return fail(c, SDPA_ERR_UNSUPPORTED,
                    "q8_scores needs k in a block format (q8_0, q4_0, q4_1, q5_0, q5_1 or "
                    "iq4_nl); k is %s",
                    sdpa_dtype_str(k->dtype));

    /* Every product the driver will form must fit. */
    size_t rows, t;
    if (!mul_sz(p->batch, p->q_heads, &rows) || !mul_sz(rows, p->q_len, &rows) ||
        !mul_sz(rows, dv, &t) || !mul_sz(rows, p->head_dim, &t) ||
        !mul_sz(p->batch, p->kv_heads, &t) || !mul_sz(t, p->kv_len, &t) ||
        !mul_sz(t, p->head_dim > dv ? p->head_dim : dv, &t) || !add_sz(p->kv_len, p->q_len, &t) ||
        t > (size_t)PTRDIFF_MAX / 2 || /* positions and window edges are signed sums of these */
        !add_sz(p->head_dim, 2, &t) || !mul_sz(t, sizeof(float) * 1024, &t) || !add_sz(dv, 2, &t) ||
        !mul_sz(t, sizeof(float) * 1024, &t))
        return fail(c, SDPA_ERR_OVERFLOW,
                    "sizes overflow (batch %zu, heads %zu/%zu, lengths %zu/%zu, dims %zu/%zu)",
                    p->batch, p->q_heads, p->kv_heads, p->q_len, p->kv_len, p->head_dim, dv);

    sdpa_status s;
    size_t q_tok, k_tok; /* packed: the tokens of all sequences */
    if ((s = validate_layouts(c, p, &q_tok, &k_tok)) != SDPA_OK) return s;
    /* the views' shapes: packed sequences are tokens of batch 0, pages stand for batches */
    const size_t nq[3] = {p->cu_q ? 1 : p->batch, p->q_heads, p->cu_q ? q_tok : p->q_len};
    const size_t nk[3] = {p->block_table ? p->n_pages
                          : p->cu_kv     ? 1
                                         : p->batch,
                          p->kv_heads,
                          p->block_table ? p->page_size
                          : p->cu_kv     ? k_tok
                                         : p->kv_len};
    extent eq, ek, ev, eo;
    if ((s = view_extent(c, "q", q, nq, p->head_dim, &eq)) != SDPA_OK) return s;
    if ((s = view_extent(c, "k", k, nk, p->head_dim, &ek)) != SDPA_OK) return s;
    if ((s = view_extent(c, "v", v, nk, dv, &ev)) != SDPA_OK) return s;
    if ((s = view_extent(c, "o", o, nq, dv, &eo)) != SDPA_OK) return s;
    if (!rows_disjoint(o, nq, dv))
        return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                    "o: strides (%td, %td, %td) make distinct output rows overlap", o->batch_stride,
                    o->head_stride, o->token_stride);
    if (overlaps(o->data, eo, q->data, eq) || overlaps(o->data, eo, k->data, ek) ||
        overlaps(o->data, eo, v->data, ev))
        return fail(c, SDPA_ERR_INVALID_ARGUMENT, "o overlaps an input (q, k or v)");
    if (p->lse) {
        const extent el = {0, (ptrdiff_t)(rows * sizeof(float))};
        if (rows > (size_t)PTRDIFF_MAX / sizeof(float))
            return fail(c, SDPA_ERR_OVERFLOW, "lse: size overflows");
        if (overlaps(p->lse, el, o->data, eo) || overlaps(p->lse, el, q->data, eq) ||
            overlaps(p->lse, el, k->data, ek) || overlaps(p->lse, el, v->data, ev))
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "lse overlaps o or an input");
    }
    if ((s = check_reads(c, p, "o", o->data, eo)) != SDPA_OK) return s;
    if (p->lse && (s = check_reads(c, p, "lse", p->lse,
                                   (extent){0, (ptrdiff_t)(rows * sizeof(float))})) != SDPA_OK)
        return s;
    if (p->softcap != 0.0f && !(p->softcap > 0.0f && isfinite(p->softcap)))
        return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                    "softcap is %g: it must be 0 (off) or finite and positive", (double)p->softcap);
    if (p->alibi_slopes)
        for (size_t h = 0; h < p->q_heads; h++)
            if (!isfinite(p->alibi_slopes[h]))
                return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                            "alibi_slopes[%zu] is %g: slopes must be finite", h,
                            (double)p->alibi_slopes[h]);
    if (p->sinks)
        for (size_t h = 0; h < p->q_heads; h++)
            if (isnan(p->sinks[h]) || p->sinks[h] == INFINITY)
                return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                            "sinks[%zu] is %g: a sink must be finite (or -inf, none)", h,
                            (double)p->sinks[h]);
    if (p->mask_scales) {
        if (!p->mask)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                        "mask_scales without a mask: the factors scale the mask's entries");
        for (size_t h = 0; h < p->q_heads; h++)
            if (!isfinite(p->mask_scales[h]))
                return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                            "mask_scales[%zu] is %g: factors must be finite", h,
                            (double)p->mask_scales[h]);
    }
    if (p->mask) {
        const sdpa_tensor *mk = p->mask;
        if (!mk->data) return fail(c, SDPA_ERR_INVALID_ARGUMENT, "mask has NULL data");
        if (mk->dtype != SDPA_F32 && mk->dtype != SDPA_F16 && mk->dtype != SDPA_BF16)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                        "mask has dtype %d: it must be SDPA_F32, SDPA_F16 or SDPA_BF16",
                        (int)mk->dtype);
        extent em;
        /* indexed per sequence, whatever the layout */
        const size_t nm[3] = {p->batch, p->q_heads, p->q_len};
        if ((s = view_extent(c, "mask", mk, nm, p->kv_len, &em)) != SDPA_OK) return s;
        if (overlaps(mk->data, em, o->data, eo))
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "mask overlaps o");
        if (p->lse &&
            overlaps(mk->data, em, p->lse, (extent){0, (ptrdiff_t)(rows * sizeof(float))}))
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "mask overlaps lse");
    }
    if (p->workspace && p->workspace_bytes) {
        const extent ew = {0, p->workspace_bytes > (size_t)PTRDIFF_MAX
                                  ? PTRDIFF_MAX
                                  : (ptrdiff_t)p->workspace_bytes};
        if (overlaps(p->workspace, ew, o->data, eo) || overlaps(p->workspace, ew, q->data, eq) ||
            overlaps(p->workspace, ew, k->data, ek) || overlaps(p->workspace, ew, v->data, ev) ||
            (p->lse &&
             overlaps(p->workspace, ew, p->lse, (extent){0, (ptrdiff_t)(rows * sizeof(float))})))
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "workspace overlaps o, lse or an input");
    }
    return fail(c, SDPA_OK, "ok");
}

sdpa_status sdpa_validate(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                          const sdpa_tensor *v, const sdpa_tensor *o, char *msg, size_t msg_len)
{
    checker c = {msg, msg_len};
    return validate(&c, p, q, k, v, o);
}
