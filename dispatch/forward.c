/* forward.c -- sdpa_forward: validation, planning into work items, threading, split-K merge, finalisation */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "internal.h"

/* ---------------------------------------------------------------------------------------- */
/* Checked arithmetic                                                                        */
/* ---------------------------------------------------------------------------------------- */

static bool mul_sz(size_t a, size_t b, size_t *r) { return !__builtin_mul_overflow(a, b, r); }
static bool add_sz(size_t a, size_t b, size_t *r) { return !__builtin_add_overflow(a, b, r); }

/* ---------------------------------------------------------------------------------------- */
/* Validation                                                                                */
/* ---------------------------------------------------------------------------------------- */

typedef struct checker {
    char  *msg;
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
    const size_t esz = sdpa_block_bytes((int)t->dtype), blk = sdpa_block_elems((int)t->dtype);
    ptrdiff_t lo = 0, hi = 0; /* in elements (multiples of blk: strides and inner checked) */
    for (int a = 0; a < 3; a++) {
        ptrdiff_t span;
        if (n[a] - 1 > (size_t)PTRDIFF_MAX ||
            __builtin_mul_overflow(st[a], (ptrdiff_t)(n[a] - 1), &span))
            return fail(c, SDPA_ERR_OVERFLOW, "%s: stride %td times extent %zu overflows", name,
                        st[a], n[a]);
        if (span < 0 ? __builtin_add_overflow(lo, span, &lo) : __builtin_add_overflow(hi, span, &hi))
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
static sdpa_status validate_layouts(checker *c, const sdpa_params *p, size_t *q_tok,
                                    size_t *k_tok)
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
                    p->page_size == 0 ? "page_size" : p->max_pages == 0 ? "max_pages" : "n_pages");
    size_t longest = 0, span, entries;
    for (size_t b = 0; b < p->batch; b++) {
        const size_t lk = p->kv_lens ? p->kv_lens[b] : p->kv_len;
        if (lk > longest) longest = lk;
    }
    if (!mul_sz(p->max_pages, p->page_size, &span) || !mul_sz(p->batch, p->max_pages, &entries))
        return fail(c, SDPA_ERR_OVERFLOW, "block_table: max_pages %zu, page_size %zu, n_pages %zu "
                    "overflow", p->max_pages, p->page_size, p->n_pages);
    if (span < longest)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                    "block_table: max_pages (%zu) x page_size (%zu) is shorter than the longest "
                    "sequence (%zu keys)", p->max_pages, p->page_size, longest);
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
static sdpa_status check_reads(checker *c, const sdpa_params *p, const char *name,
                               const void *out, extent e)
{
    /* byte counts saturate: an array that long could not be read anyway */
#define SAT_BYTES(n, size) ((n) > (size_t)PTRDIFF_MAX / (size) ? (size_t)PTRDIFF_MAX : (n) * (size))
    size_t entries = SIZE_MAX;
    if (p->block_table && !mul_sz(p->batch, p->max_pages, &entries)) entries = SIZE_MAX;
    const struct {
        const char *name;
        const void *ptr;
        size_t      bytes;
    } arr[] = {
        {"block_table", p->block_table, SAT_BYTES(entries, sizeof(int32_t))},
        {"q_lens", p->q_lens, SAT_BYTES(p->batch, sizeof(size_t))},
        {"kv_lens", p->kv_lens, SAT_BYTES(p->batch, sizeof(size_t))},
        {"cu_q", p->cu_q, SAT_BYTES(p->batch, sizeof(size_t)) + sizeof(size_t)},
        {"cu_kv", p->cu_kv, SAT_BYTES(p->batch, sizeof(size_t)) + sizeof(size_t)},
        {"sinks", p->sinks, SAT_BYTES(p->q_heads, sizeof(float))},
        {"alibi_slopes", p->alibi_slopes, SAT_BYTES(p->q_heads, sizeof(float))},
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
                    !q ? "q" : !k ? "k" : !v ? "v" : "o");
    if (!q->data || !k->data || !v->data || !o->data)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT, "tensor %s has NULL data",
                    !q->data ? "q" : !k->data ? "k" : !v->data ? "v" : "o");
    const size_t dv = p->v_dim ? p->v_dim : p->head_dim;
    static const char *const dim_names[] = {"batch", "q_heads", "kv_heads", "q_len", "kv_len",
                                            "head_dim"};
    const size_t dims[] = {p->batch, p->q_heads, p->kv_heads, p->q_len, p->kv_len, p->head_dim};
    for (int i = 0; i < 6; i++)
        if (dims[i] == 0) return fail(c, SDPA_ERR_INVALID_ARGUMENT, "%s is 0", dim_names[i]);
    if (p->q_heads % p->kv_heads != 0)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                    "q_heads (%zu) is not a multiple of kv_heads (%zu)", p->q_heads, p->kv_heads);
    if (!isfinite(p->scale))
        return fail(c, SDPA_ERR_INVALID_ARGUMENT, "scale is %s", isnan(p->scale) ? "NaN" : "infinite");
    const sdpa_tensor *ts[4] = {q, k, v, o};
    static const char *const tn[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++)
        if (sdpa_block_bytes((int)ts[i]->dtype) == 0)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "%s has an unknown dtype (%d)", tn[i],
                        (int)ts[i]->dtype);
    if (q->dtype != SDPA_F32 || o->dtype != SDPA_F32)
        return fail(c, SDPA_ERR_UNSUPPORTED,
                    "%s must be SDPA_F32 (f16, bf16, q8_0 and q4_0 storage is for k and v)",
                    q->dtype != SDPA_F32 ? "q" : "o");
    /* a block format's rows start on a block: its dim and every stride a multiple of one */
    for (int i = 1; i < 3; i++) {
        const size_t blk = sdpa_block_elems((int)ts[i]->dtype), dim = i == 1 ? p->head_dim : dv;
        const ptrdiff_t st[3] = {ts[i]->batch_stride, ts[i]->head_stride, ts[i]->token_stride};
        static const char *const sn[3] = {"batch_stride", "head_stride", "token_stride"};
        if (blk == 1) continue;
        if (dim % blk != 0)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                        "%s is %s: its %s (%zu) must be a multiple of %zu", tn[i],
                        ts[i]->dtype == SDPA_Q8_0 ? "q8_0" : "q4_0", i == 1 ? "head_dim" : "v_dim",
                        dim, blk);
        for (int a = 0; a < 3; a++)
            if (st[a] % (ptrdiff_t)blk != 0)
                return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                            "%s is %s: its %s (%td) must be a multiple of %zu elements", tn[i],
                            ts[i]->dtype == SDPA_Q8_0 ? "q8_0" : "q4_0", sn[a], st[a], blk);
    }
    if (p->q8_scores != 0 && p->q8_scores != 1)
        return fail(c, SDPA_ERR_INVALID_ARGUMENT, "q8_scores is %d: it must be 0 (exact) or 1",
                    p->q8_scores);
    if (p->q8_scores && !sdpa_dtype_quantized((int)k->dtype))
        return fail(c, SDPA_ERR_UNSUPPORTED,
                    "q8_scores needs k in q8_0 or q4_0 (k has dtype %d)", (int)k->dtype);

    /* Every product the driver will form must fit. */
    size_t rows, t;
    if (!mul_sz(p->batch, p->q_heads, &rows) || !mul_sz(rows, p->q_len, &rows) ||
        !mul_sz(rows, dv, &t) || !mul_sz(rows, p->head_dim, &t) ||
        !mul_sz(p->batch, p->kv_heads, &t) || !mul_sz(t, p->kv_len, &t) ||
        !mul_sz(t, p->head_dim > dv ? p->head_dim : dv, &t) || !add_sz(p->kv_len, p->q_len, &t) ||
        t > (size_t)PTRDIFF_MAX / 2 || /* positions and window edges are signed sums of these */
        !add_sz(p->head_dim, 2, &t) || !mul_sz(t, sizeof(float) * 1024, &t) ||
        !add_sz(dv, 2, &t) || !mul_sz(t, sizeof(float) * 1024, &t))
        return fail(c, SDPA_ERR_OVERFLOW, "sizes overflow (batch %zu, heads %zu/%zu, lengths %zu/%zu,"
                    " dims %zu/%zu)", p->batch, p->q_heads, p->kv_heads, p->q_len, p->kv_len,
                    p->head_dim, dv);

    sdpa_status s;
    size_t q_tok, k_tok; /* packed: the tokens of all sequences */
    if ((s = validate_layouts(c, p, &q_tok, &k_tok)) != SDPA_OK) return s;
    /* the views' shapes: packed sequences are tokens of batch 0, pages stand for batches */
    const size_t nq[3] = {p->cu_q ? 1 : p->batch, p->q_heads, p->cu_q ? q_tok : p->q_len};
    const size_t nk[3] = {p->block_table ? p->n_pages : p->cu_kv ? 1 : p->batch, p->kv_heads,
                          p->block_table ? p->page_size : p->cu_kv ? k_tok : p->kv_len};
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
                return fail(c, SDPA_ERR_INVALID_ARGUMENT, "alibi_slopes[%zu] is %g: slopes must be finite",
                            h, (double)p->alibi_slopes[h]);
    if (p->sinks)
        for (size_t h = 0; h < p->q_heads; h++)
            if (isnan(p->sinks[h]) || p->sinks[h] == INFINITY)
                return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                            "sinks[%zu] is %g: a sink must be finite (or -inf, none)", h,
                            (double)p->sinks[h]);
    if (p->mask) {
        const sdpa_tensor *mk = p->mask;
        if (!mk->data) return fail(c, SDPA_ERR_INVALID_ARGUMENT, "mask has NULL data");
        if (mk->dtype != SDPA_F32 && mk->dtype != SDPA_F16 && mk->dtype != SDPA_BF16)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                        "mask has dtype %d: it must be SDPA_F32, SDPA_F16 or SDPA_BF16", (int)mk->dtype);
        extent em;
        /* indexed per sequence, whatever the layout */
        const size_t nm[3] = {p->batch, p->q_heads, p->q_len};
        if ((s = view_extent(c, "mask", mk, nm, p->kv_len, &em)) != SDPA_OK) return s;
        if (overlaps(mk->data, em, o->data, eo))
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "mask overlaps o");
        if (p->lse && overlaps(mk->data, em, p->lse, (extent){0, (ptrdiff_t)(rows * sizeof(float))}))
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "mask overlaps lse");
    }
    if (p->workspace && p->workspace_bytes) {
        const extent ew = {0, p->workspace_bytes > (size_t)PTRDIFF_MAX ? PTRDIFF_MAX
                                                                        : (ptrdiff_t)p->workspace_bytes};
        if (overlaps(p->workspace, ew, o->data, eo) || overlaps(p->workspace, ew, q->data, eq) ||
            overlaps(p->workspace, ew, k->data, ek) || overlaps(p->workspace, ew, v->data, ev) ||
            (p->lse && overlaps(p->workspace, ew, p->lse,
                                (extent){0, (ptrdiff_t)(rows * sizeof(float))})))
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

/* ---------------------------------------------------------------------------------------- */
/* Planning: work items over batch x KV head x query block x KV chunk                        */
/* ---------------------------------------------------------------------------------------- */

/* The planner's parameters (ROWS_TARGET, SPLIT_*, BLOCK_*, STREAM_BYTES) are listed, with what
   each is, in SDPA_PLANNER_PARAMS (internal.h), which sdpa_planner_tunables reports. */

typedef struct seqinfo {
    size_t lq, lk;     /* the sequence's query and key counts */
    size_t q0, k0;     /* packed (cu_q / cu_kv): its first token in the views; else 0 */
    size_t n_qblk, n_chunks;
    size_t item0;      /* its first work item */
    size_t part0;      /* split (n_chunks > 1): its first partial-state slot */
    size_t grp0;       /* split: its first merge group (one per KV head) */
} seqinfo;

typedef struct plan {
    const sdpa_kernels *k;
    size_t B, Hq, Hkv, G, Lq, Lk, D, Dv;
    float  scale;
    bool   causal;
    size_t window;            /* 0: off */
    bool   mods;              /* softcap, ALiBi or a mask: the kernels' modifier path */
    const sdpa_params *p;     /* the call (modifier, sink and layout arrays, the mask view) */
    const sdpa_tensor *q, *kt, *vt, *o;
    float *lse;
    size_t qb, chunk, block, R, n_items, n_groups, max_chunks;
    int    stream;    /* sdpa_rows.stream: K and V exceed the last-level cache */
    size_t ws_stride; /* floats of per-thread scratch: qp [R*D] | limits | state | prefetch hints |
                         variant rows | paged rebase rows | merge pointers | kernel scratch |
                         score multipliers */
    size_t lim_off;   /* where the key limits (size_t) start in it */
    size_t state_off; /* where m, l, acc start (unsplit problems) */
    size_t pf_off;    /* where the prefetch hints (2R spans) start */
    size_t mul_off;   /* where the rows' score multipliers (R floats, see scale_row) start */
    size_t kws_off;   /* where the kernel's scratch starts */
    size_t var_off;   /* where the rows' window starts, positions, mask rows and slopes start */
    size_t reb_off;   /* where a paged run's rebased limits, starts, positions, mask rows start */
    size_t mptr_off;  /* where the merge's part pointers (3 max_chunks) start */
    size_t stage_off; /* where the staged copy of short pages' K and V rows starts */
    size_t stage_keys; /* keys per staged copy; 0: K/V always handed to the kernel in place */
    bool   quant;      /* K or V in a block format (q8_0, q4_0) */
    size_t qq_off;     /* fast scores (q8_scores): the rows' int8 quants [R*D], then their block
                          scales [R*D/32] */
    size_t ptab_off;  /* from stage_off: the page lists of a unit the kernel pages itself */
    size_t partial_off; /* where the split-K partial states start, after the workspaces */
    size_t seq_off;   /* where the sequence table starts, after the partial states */
    float *ws;        /* n_threads * ws_stride floats, 64-byte aligned */
    float *partial;   /* per split item, m[R] l[R] acc[R * Dv] */
    seqinfo *seq;     /* [B] */
} plan;

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

/* Fast scores' slot (q8_scores) for R rows of head dim D, in floats: the int8 quants, R*D bytes
   rounded up to 16 floats, then the R*D/32 block scales. Both the size and the scales' offset
   come from here, so that the scales always lie inside the slot. */
static size_t qq_scales_off(size_t R, size_t D) { return round16(R * D / 4); }
static size_t qq_floats(size_t R, size_t D) { return qq_scales_off(R, D) + round16(R * D / SDPA_QK); }

/* Sequence b's query and key counts: packed, padded or the call's own. */
static size_t seq_lq(const sdpa_params *p, size_t b)
{
    return p->cu_q ? p->cu_q[b + 1] - p->cu_q[b] : p->q_lens ? p->q_lens[b] : p->q_len;
}
static size_t seq_lk(const sdpa_params *p, size_t b)
{
    return p->cu_kv ? p->cu_kv[b + 1] - p->cu_kv[b] : p->kv_lens ? p->kv_lens[b] : p->kv_len;
}

/* Query i's position among its sequence's keys, i' = i + lk - lq (bottom-right alignment; sizes
   are validated to fit, so it fits in ptrdiff_t). */
static ptrdiff_t q_pos(const seqinfo *sq, size_t i)
{
    return (ptrdiff_t)i + (ptrdiff_t)sq->lk - (ptrdiff_t)sq->lq;
}

static size_t clamp_keys(const seqinfo *sq, ptrdiff_t j)
{
    return j <= 0 ? 0 : (size_t)j < sq->lk ? (size_t)j : sq->lk;
}

/* Keys query row i may see: [kv_first(i), kv_limit(i)), both non-decreasing in i: causal
   j <= i', window |i' - j| < w, and the sequence's own keys. */
static size_t kv_limit(const plan *pl, const seqinfo *sq, size_t i)
{
    if (pl->causal) return clamp_keys(sq, q_pos(sq, i) + 1);
    if (pl->window) return clamp_keys(sq, q_pos(sq, i) + (ptrdiff_t)pl->window);
    return sq->lk;
}
static size_t kv_first(const plan *pl, const seqinfo *sq, size_t i)
{
    return pl->window ? clamp_keys(sq, q_pos(sq, i) - (ptrdiff_t)pl->window + 1) : 0;
}

/* Row (h, i) of sequence b in an f32 view of the query side (q or o): packed sequences start
   at token q0 of batch 0. */
static float *f32_row(const plan *pl, const sdpa_tensor *t, const seqinfo *sq, size_t b, size_t h,
                      size_t i)
{
    const ptrdiff_t bo = pl->p->cu_q ? 0 : (ptrdiff_t)b * t->batch_stride;
    return (float *)t->data + bo + (ptrdiff_t)h * t->head_stride +
           (ptrdiff_t)(sq->q0 + i) * t->token_stride;
}

/* Writes one finished row: o = acc / l, and lse = m + log(l); zeros and -inf when no key.
   A sink s (once per row, whatever the split) joins the denominator: with M = max(m, s),
   o = acc e^(m - M) / (l e^(m - M) + e^(s - M)), lse = M + log of that denominator; a row
   that saw no key gives zeros and lse = s. lse is indexed by the sequence's own i. */
static void finish_row(const plan *pl, const seqinfo *sq, size_t b, size_t h, size_t i, float m,
                       float l, const float *acc)
{
    float *o = f32_row(pl, pl->o, sq, b, h, i);
    float *lse = pl->lse ? &pl->lse[(b * pl->Hq + h) * pl->Lq + i] : NULL;
    const float sink = pl->p->sinks ? pl->p->sinks[h] : -INFINITY;
    if (l == 0.0f) { /* the row saw no key (or only -inf scores) */
        memset(o, 0, pl->Dv * sizeof *o);
        if (lse) *lse = sink;
        return;
    }
    if (sink != -INFINITY && l == l && m == m) {
        const float M = m > sink ? m : sink;
        const float f = expf(m - M), L = l * f + expf(sink - M);
        const float g = f / L;
        for (size_t c = 0; c < pl->Dv; c++) o[c] = acc[c] * g;
        if (lse) *lse = M + logf(L);
        return;
    }
    /* one division per row: a per-element divide costs more than the rest of finishing */
    const float inv = 1.0f / l;
    for (size_t c = 0; c < pl->Dv; c++) o[c] = acc[c] * inv;
    if (lse) *lse = m + logf(l);
}

/* dst = scale * src, each product rounded once to float; returns the power of two 2^e the row's
   scores must be multiplied by: 1, but where the largest product M = max|scale * src| (finite,
   non-zero) leaves float's normal range. M > FLT_MAX: e > 0 brings it to [2^126, 2^127), the
   least scaling that avoids the overflow, so that every score that fits stays in range; M below
   FLT_MIN: e < 0 brings it to [1, 2), keeping 126 binades below it. Powers of two scale exactly,
   so the scores are those of the exact products, rounded as the plain ones would be. */
static float scale_row(float *restrict dst, const float *restrict src, float scale, size_t n)
{
    /* max |src| as the largest magnitude bit pattern (an integer max, which vectorises); a NaN
       or inf element makes M non-finite, and the row takes the plain product */
    typedef uint32_t __attribute__((may_alias)) bits32;
    const bits32 *sb = (const bits32 *)src;
    uint32_t mb = 0;
    for (size_t c = 0; c < n; c++) {
        const uint32_t a = sb[c] & 0x7fffffffu;
        mb = a > mb ? a : mb;
    }
    float mx;
    memcpy(&mx, &mb, sizeof mx);
    const double M = (double)mx * fabs((double)scale);
    if (M != 0.0 && isfinite(M) && (M < FLT_MIN || M > FLT_MAX)) {
        int e;
        (void)frexp(M, &e); /* M = f 2^e, f in [0.5, 1) */
        e = M > FLT_MAX ? e - 127 : e - 1;
        e = e < -126 ? -126 : e > 127 ? 127 : e; /* 2^e a normal float: M in [2^-252, 2^255) */
        /* scale * 2^-e * src is exact in double (48 significant bits, exponent well in range) */
        const double f = ldexp((double)scale, -e);
        for (size_t c = 0; c < n; c++) dst[c] = (float)(f * (double)src[c]);
        return ldexpf(1.0f, e);
    }
    for (size_t c = 0; c < n; c++) dst[c] = scale * src[c];
    return 1.0f;
}

typedef struct item {
    const seqinfo *sq;
    size_t b, kvh, i0, qn, chunk;
    size_t local; /* the item's index within its sequence */
} item;

/* The last sequence whose first entry (an item or a merge group) is <= t: the one holding t,
   since a sequence with none shares its first entry with the next. */
static size_t seq_of(const plan *pl, size_t t, bool groups)
{
    size_t lo = 0, hi = pl->B - 1;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo + 1) / 2;
        if ((groups ? pl->seq[mid].grp0 : pl->seq[mid].item0) <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static item item_at(const plan *pl, size_t t)
{
    item it;
    it.b = seq_of(pl, t, false);
    it.sq = &pl->seq[it.b];
    it.local = t - it.sq->item0;
    size_t u = it.local;
    it.chunk = u % it.sq->n_chunks;
    u /= it.sq->n_chunks;
    const size_t qblk = u % it.sq->n_qblk;
    it.kvh = u / it.sq->n_qblk;
    it.i0 = qblk * pl->qb;
    it.qn = it.sq->lq - it.i0 < pl->qb ? it.sq->lq - it.i0 : pl->qb;
    return it;
}

/* Paged units the kernel does not page itself (run_keys) */
enum {
    PAGE_PF_KEYS = 16,   /* keys of the next page run requested before a run starts */
    STAGE_MAX_PAGE = 64, /* pages of fewer keys are gathered into a dense copy ... */
    STAGE_KEYS = 256,    /* ... this many keys per copy (a unit the kernel then runs) */
    STAGE_PF_KEYS = 32,  /* keys requested ahead of the gather (the pages are scattered) */
};

static size_t sdpa_min(size_t a, size_t b) { return a < b ? a : b; }

static void prefetch_row(const char *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
}

/* Row `row` of physical page P of a K or V view t whose data is d (KV head offset h, in
   elements). */
static const char *page_row(const char *d, const sdpa_tensor *t, ptrdiff_t P, ptrdiff_t h,
                            ptrdiff_t row)
{
    return d + sdpa_off_bytes((int)t->dtype, P * t->batch_stride + h + row * t->token_stride);
}

/* Key j's row of the item's KV head in the K or V view t (head offset h, in elements): in its
   page, at its packed token, or in its batch. */
static const char *kv_row(const plan *pl, const item *it, const sdpa_tensor *t, ptrdiff_t h,
                          size_t j)
{
    const sdpa_params *p = pl->p;
    if (p->block_table) {
        const int32_t *tab = p->block_table + it->b * p->max_pages;
        return page_row(t->data, t, tab[j / p->page_size], h, (ptrdiff_t)(j % p->page_size));
    }
    const ptrdiff_t base = p->cu_kv ? (ptrdiff_t)(it->sq->k0 + j) * t->token_stride
                                    : (ptrdiff_t)it->b * t->batch_stride +
                                          (ptrdiff_t)j * t->token_stride;
    return (const char *)t->data + sdpa_off_bytes((int)t->dtype, base + h);
}

/* Bytes per element of a storage type (a fraction for the block formats), for estimates. */
static double elem_bytes(sdpa_dtype t)
{
    return (double)sdpa_block_bytes((int)t) / (double)sdpa_block_elems((int)t);
}

/* One staged row: a block format dequantized to f32 (deq: by the kernel's own vector code when
   it has one), anything else copied as it is. */
static void stage_row(const plan *pl, char *dst, const char *src, sdpa_dtype t, size_t n, bool deq)
{
    if (deq && sdpa_dtype_quantized((int)t) && pl->k->dequant)
        pl->k->dequant((int)t, src, (float *)(void *)dst, n);
    else if (deq && sdpa_dtype_quantized((int)t))
        sdpa_row_to_f32(src, (int)t, 0, 0, n, (float *)(void *)dst);
    else
        memcpy(dst, src, (size_t)sdpa_off_bytes((int)t, (ptrdiff_t)n));
}

/* Where a paged sequence's page pg and the next are one run of key rows in both K and V. */
static bool pages_adjacent(const plan *pl, const int32_t *tab, size_t pg)
{
    const ptrdiff_t ps = (ptrdiff_t)pl->p->page_size;
    return tab[pg + 1] == tab[pg] + 1 && pl->kt->batch_stride == ps * pl->kt->token_stride &&
           pl->vt->batch_stride == ps * pl->vt->token_stride;
}

/* The rows' key indices of w shifted down by base (limits and starts saturate at 0), into the
   arrays a rebased unit points at. */
static void rebase(const sdpa_rows *w, size_t *lim2, size_t *first2, ptrdiff_t *pos2,
                   const void **mask2, size_t mes, size_t base)
{
    for (size_t r = 0; r < w->rows; r++) {
        lim2[r] = w->kv_limit[r] > base ? w->kv_limit[r] - base : 0;
        if (w->kv_first) first2[r] = w->kv_first[r] > base ? w->kv_first[r] - base : 0;
        if (w->mods) pos2[r] = w->mods->pos[r] - (ptrdiff_t)base;
        if (w->mods && w->mods->mask) mask2[r] = (const char *)w->mods->mask[r] + base * mes;
    }
}

/* Runs the kernel on keys [c0, c1) of the item's KV head. Contiguous K/V: one unit. Paged:
   one unit with the item's page list (sdpa_rows.pages) when the kernel walks pages itself
   (sdpa_kernels.paged_rows); otherwise short pages are gathered into a dense copy, STAGE_KEYS
   keys per unit, and longer ones handed over one unit per run of adjacent pages. K or V in a
   block format, for a unit the kernel cannot read them in (sdpa_kernels.quant_rows): staged,
   dequantized exactly to f32, STAGE_KEYS keys per unit, whatever the layout. Those units
   are rebased so that their first row is key 0 (limits, window starts, positions and mask rows
   shifted with it): a kernel only ever addresses rows it is given, and the online-softmax
   state carries from unit to unit. */
static void run_keys(const plan *pl, const item *it, sdpa_rows *w, size_t c0, size_t c1,
                     float *reb, float *stage)
{
    const sdpa_params *p = pl->p;
    const char *kd = pl->kt->data, *vd = pl->vt->data;
    const sdpa_dtype kt = pl->kt->dtype, vt = pl->vt->dtype;
    const ptrdiff_t kh = (ptrdiff_t)it->kvh * pl->kt->head_stride,
                    vh = (ptrdiff_t)it->kvh * pl->vt->head_stride;
    const size_t ps = p->page_size, R = w->rows;
    /* K or V in a block format the kernel does not read for units of R rows: staged, dequantized */
    const bool deq = pl->quant && R > pl->k->quant_rows;
    if (!p->block_table && !deq) {
        w->k = kv_row(pl, it, pl->kt, kh, 0);
        w->v = kv_row(pl, it, pl->vt, vh, 0);
        w->kv_begin = c0, w->kv_end = c1;
        pl->k->rows(w);
        return;
    }
    const int32_t *tab = p->block_table ? p->block_table + it->b * p->max_pages : NULL;
    if (tab && !deq && ps % 16 == 0 && R <= pl->k->paged_rows) {
        /* the kernel walks the pages itself (pages of a multiple of 16 keys keep every piece
           of a key block aligned, see sdpa_pages): their row 0 for this KV head, listed */
        const size_t p0 = c0 / ps, np = (c1 - 1) / ps - p0 + 1;
        const void **kp = (const void **)(void *)(stage + pl->ptab_off), **vp = kp + np;
        for (size_t i = 0; i < np; i++) {
            kp[i] = page_row(kd, pl->kt, tab[p0 + i], kh, 0);
            vp[i] = page_row(vd, pl->vt, tab[p0 + i], vh, 0);
        }
        float *ones = (float *)(void *)((size_t *)(void *)reb + 4 * R);
        for (size_t r = 0; r < R; r++) ones[r] = 1.0f;
        const sdpa_pages pages = {kp, vp, p0, ps, reb, ones};
        w->pages = &pages;
        w->k = w->v = NULL;
        w->kv_begin = c0, w->kv_end = c1;
        w->reverse = 0;
        pl->k->rows(w);
        w->pages = NULL;
        return;
    }
    const size_t *first = w->kv_first;
    const sdpa_mods *mods = w->mods;
    size_t *lim2 = (size_t *)(void *)reb, *first2 = lim2 + R;
    ptrdiff_t *pos2 = (ptrdiff_t *)(first2 + R);
    const void **mask2 = (const void **)(pos2 + R);
    const size_t mes = mods && mods->mask ? sdpa_block_bytes((int)mods->mask_type) : 0;
    sdpa_mods m2 = mods ? *mods : (sdpa_mods){0};
    sdpa_rows u = *w;
    u.kv_limit = lim2;
    u.kv_first = first ? first2 : NULL;
    u.mods = mods ? &m2 : NULL;
    if (mods) {
        m2.pos = pos2;
        if (mods->mask) m2.mask = mask2;
    }
    if (deq || (tab && ps < STAGE_MAX_PAGE)) {
        /* rows gathered (short pages) or dequantized to f32 (block formats), stage_keys at a
           time, into a dense copy the kernel reads as one unit (keys [s0, s1) at rows
           [0, s1 - s0) of the copy) */
        const size_t n_st = (c1 - c0 + pl->stage_keys - 1) / pl->stage_keys;
        const sdpa_dtype skt = deq && sdpa_dtype_quantized((int)kt) ? SDPA_F32 : kt;
        const sdpa_dtype svt = deq && sdpa_dtype_quantized((int)vt) ? SDPA_F32 : vt;
        const size_t krow = (size_t)sdpa_off_bytes((int)skt, (ptrdiff_t)pl->D),
                     vrow = (size_t)sdpa_off_bytes((int)svt, (ptrdiff_t)pl->Dv);
        const size_t kin = (size_t)sdpa_off_bytes((int)kt, (ptrdiff_t)pl->D),
                     vin = (size_t)sdpa_off_bytes((int)vt, (ptrdiff_t)pl->Dv);
        char *sk = (char *)(void *)stage, *sv = sk + pl->stage_keys * krow;
        u.k = sk, u.v = sv, u.k_stride = (ptrdiff_t)pl->D, u.v_stride = (ptrdiff_t)pl->Dv;
        u.k_type = skt, u.v_type = svt;
        for (size_t si = 0; si < n_st; si++) {
            const size_t s0 = c0 + (w->reverse ? n_st - 1 - si : si) * pl->stage_keys;
            const size_t s1 = s0 + pl->stage_keys < c1 ? s0 + pl->stage_keys : c1;
            for (size_t j = s0; j < s1; j++) {
                const size_t ja = j + STAGE_PF_KEYS; /* requested ahead: pages are scattered */
                if (ja < c1) {
                    prefetch_row(kv_row(pl, it, pl->kt, kh, ja), kin);
                    prefetch_row(kv_row(pl, it, pl->vt, vh, ja), vin);
                }
                stage_row(pl, sk + (j - s0) * krow, kv_row(pl, it, pl->kt, kh, j), kt, pl->D, deq);
                stage_row(pl, sv + (j - s0) * vrow, kv_row(pl, it, pl->vt, vh, j), vt, pl->Dv, deq);
            }
            rebase(w, lim2, first2, pos2, mask2, mes, s0);
            u.kv_begin = 0, u.kv_end = s1 - s0;
            pl->k->rows(&u);
        }
        return;
    }
    const size_t pg_lo = c0 / ps, pg_hi = (c1 - 1) / ps; /* the pages [c0, c1) touches */
    /* runs taken from the last when the unit scans backwards (the cache hint of sdpa_rows) */
    for (size_t pg = w->reverse ? pg_hi : pg_lo;;) {
        size_t a = pg, e = pg; /* the run's pages [a, e] */
        if (w->reverse)
            while (a > pg_lo && pages_adjacent(pl, tab, a - 1)) a--;
        else
            while (e < pg_hi && pages_adjacent(pl, tab, e)) e++;
        const size_t base = a * ps, j0 = base > c0 ? base : c0,
                     j1 = (e + 1) * ps < c1 ? (e + 1) * ps : c1;
        rebase(w, lim2, first2, pos2, mask2, mes, base);
        const ptrdiff_t page = tab[a];
        u.k = page_row(kd, pl->kt, page, kh, 0);
        u.v = page_row(vd, pl->vt, page, vh, 0);
        u.kv_begin = j0 - base, u.kv_end = j1 - base;
        const bool last = w->reverse ? a == pg_lo : e == pg_hi;
        if (!last) {
            /* the next run's first keys, requested now: a kernel streams only the keys it is
               given, so without this every run would start on a cold line */
            const size_t np = w->reverse ? a - 1 : e + 1;
            const size_t nk = sdpa_min(ps, PAGE_PF_KEYS);
            const size_t n0 = np * ps < c0 ? c0 - np * ps : 0;
            const ptrdiff_t P = tab[np];
            for (size_t j = n0; j < nk && np * ps + j < c1; j++) {
                prefetch_row(page_row(kd, pl->kt, P, kh, (ptrdiff_t)j),
                             (size_t)sdpa_off_bytes((int)kt, (ptrdiff_t)pl->D));
                prefetch_row(page_row(vd, pl->vt, P, vh, (ptrdiff_t)j),
                             (size_t)sdpa_off_bytes((int)vt, (ptrdiff_t)pl->Dv));
            }
        }
        pl->k->rows(&u);
        if (last) break;
        pg = w->reverse ? a - 1 : e + 1;
    }
}

/* Fast scores (q8_scores): a scaled query row quantized per 32-block, d = max |x| / 127 (f32)
   and q = x (1 / d) rounded to nearest even, so |d q - x| <= d / 2 plus float rounding; a block
   with a non-finite element gets d = NaN, which makes every score of the row NaN, as a NaN
   query would (a block whose 1 / d overflows, below 2^-128 of FLT_MAX, gets quants 0). */
static void quantize_row(const float *x, size_t n, int8_t *q, float *qd)
{
    for (size_t b = 0; b < n; b += SDPA_QK, x += SDPA_QK, q += SDPA_QK) {
        float amax = 0.0f;
        bool finite = true;
        for (size_t i = 0; i < SDPA_QK; i++) {
            const float a = fabsf(x[i]);
            finite = finite && a <= FLT_MAX;
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.0f;
        qd[b / SDPA_QK] = finite ? d : NAN;
        if (!finite || d == 0.0f || !isfinite(1.0f / d)) {
            memset(q, 0, SDPA_QK);
            continue;
        }
        /* t = x (1/d), |t| <= 127 (1 + 2^-22), rounded to nearest even by adding and taking
           away 1.5 2^23: plain float arithmetic that vectorises, no libm call */
        const float id = 1.0f / d;
        for (size_t i = 0; i < SDPA_QK; i++) {
            const float t = x[i] * id, r = (t + 0x1.8p23f) - 0x1.8p23f;
            q[i] = (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
        }
    }
}

/* One work item: pack the scaled queries of every head of the group (query-major, so the key
   limits are non-decreasing), run the implementation's fused kernel over the item's KV range,
   then either finish the rows (no split) or leave the partial state for the merge. */
static void run_item(void *arg, size_t t, size_t thread)
{
    const plan *pl = arg;
    const item it = item_at(pl, t);
    const seqinfo *sq = it.sq;
    const size_t R = it.qn * pl->G, D = pl->D, Dv = pl->Dv;
    const bool split = sq->n_chunks > 1;
    float *ws = pl->ws + thread * pl->ws_stride;
    float *qp = ws;
    size_t *lim = (size_t *)(void *)(ws + pl->lim_off);
    float *state = split ? pl->partial + (sq->part0 + it.local) * pl->R * (Dv + 2)
                         : ws + pl->state_off;
    float *m = state, *l = state + R, *acc = state + 2 * R;
    float *mul = ws + pl->mul_off;
    bool scaled = false;
    /* the variants' per-row arrays: window starts, positions, slopes, mask rows */
    size_t *first = (size_t *)(void *)(ws + pl->var_off);
    ptrdiff_t *pos = (ptrdiff_t *)(first + pl->R);
    const void **mrow = (const void **)(pos + pl->R);
    float *slope = (float *)(mrow + pl->R);
    const sdpa_params *p = pl->p;
    const sdpa_tensor *mk = p->mask;

    for (size_t i = 0; i < it.qn; i++) {
        const size_t li = kv_limit(pl, sq, it.i0 + i), fi = kv_first(pl, sq, it.i0 + i);
        for (size_t g = 0; g < pl->G; g++) {
            const size_t r = i * pl->G + g, h = it.kvh * pl->G + g;
            const float *qrow = f32_row(pl, pl->q, sq, it.b, h, it.i0 + i);
            mul[r] = scale_row(qp + r * D, qrow, pl->scale, D);
            scaled |= mul[r] != 1.0f;
            lim[r] = li;
            first[r] = fi;
            pos[r] = q_pos(sq, it.i0 + i);
            if (p->alibi_slopes) slope[r] = p->alibi_slopes[h];
            if (mk)
                mrow[r] = (const char *)mk->data +
                          ((ptrdiff_t)it.b * mk->batch_stride + (ptrdiff_t)h * mk->head_stride +
                           (ptrdiff_t)(it.i0 + i) * mk->token_stride) *
                              (ptrdiff_t)sdpa_block_bytes((int)mk->dtype);
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
    }
    const sdpa_mods mods = {
        .softcap = p->softcap,
        /* 0 where 1 / softcap overflows: the kernels then divide */
        .inv_softcap = p->softcap > 0.0f && isfinite(1.0f / p->softcap) ? 1.0f / p->softcap : 0.0f,
        .slope = p->alibi_slopes ? slope : NULL,
        .pos = pos,
        .mask = mk ? mrow : NULL,
        .mask_type = mk ? mk->dtype : SDPA_F32,
    };
    memset(acc, 0, R * Dv * sizeof *acc);

    /* what this thread most likely touches next: the rows it writes when the kernel returns
       (unsplit problems) and the next item's query rows (its own next item when run serially) */
    sdpa_span *pf = (sdpa_span *)(void *)(ws + pl->pf_off);
    size_t n_pf = 0;
    if (!split)
        for (size_t r = 0; r < R; r++) {
            const size_t h = it.kvh * pl->G + r % pl->G, i = it.i0 + r / pl->G;
            pf[n_pf].p = f32_row(pl, pl->o, sq, it.b, h, i);
            pf[n_pf++].bytes = Dv * sizeof(float);
        }
    if (t + 1 < pl->n_items) {
        const item nx = item_at(pl, t + 1);
        if (nx.chunk == 0)
            for (size_t r = 0; r < nx.qn * pl->G; r++) {
                const size_t h = nx.kvh * pl->G + r % pl->G, i = nx.i0 + r / pl->G;
                pf[n_pf].p = f32_row(pl, pl->q, nx.sq, nx.b, h, i);
                pf[n_pf++].bytes = D * sizeof(float);
            }
    }

    /* a split sequence's chunk, or all of an unsplit one's keys */
    size_t c0 = split ? it.chunk * pl->chunk : 0;
    size_t c1 = split && c0 + pl->chunk < sq->lk ? c0 + pl->chunk : sq->lk;
    if (c0 < first[0]) c0 = first[0]; /* keys left of every row's window are never read */
    if (c1 > lim[R - 1]) c1 = lim[R - 1]; /* keys no row of the item sees are never read */
    int8_t *qq = NULL;
    float *qd = NULL;
    if (p->q8_scores && c0 < c1) {
        qq = (int8_t *)(void *)(ws + pl->qq_off);
        qd = ws + pl->qq_off + qq_scales_off(R, D);
        for (size_t r = 0; r < R; r++) quantize_row(qp + r * D, D, qq + r * D, qd + r * (D / SDPA_QK));
        if (R > pl->k->quant_rows) {
            /* a kernel that stages K takes the quantized rows as f32 values: the same scores
               up to float rounding (d_q q is exact to 2^-24, the products of the quants exact) */
            for (size_t r = 0; r < R; r++)
                for (size_t c = 0; c < D; c++)
                    qp[r * D + c] = qd[r * (D / SDPA_QK) + c / SDPA_QK] * (float)qq[r * D + c];
            qq = NULL, qd = NULL;
        }
    }
    if (c0 < c1) {
        sdpa_rows w = {
            .rows = R, .d = D, .dv = Dv, .q = qp, .kv_limit = lim,
            .kv_first = pl->window ? first : NULL, .mods = pl->mods ? &mods : NULL,
            .score_mul = scaled ? mul : NULL,
            .k_stride = pl->kt->token_stride, .v_stride = pl->vt->token_stride,
            .k_type = pl->kt->dtype, .v_type = pl->vt->dtype,
            .qq = qq, .qd = qd,
            .m = m, .l = l, .acc = acc,
            .ws = ws + pl->kws_off, .block = pl->block,
            .pf = pf, .n_pf = n_pf,
            /* consecutive query blocks of the same KV head scan their keys in alternate
               directions: each starts where the previous one ended, on keys still in cache */
            .reverse = (int)(it.i0 / pl->qb % 2),
            .stream = pl->stream,
        };
        run_keys(pl, &it, &w, c0, c1, ws + pl->reb_off, ws + pl->stage_off);
    }
    if (split) return;
    for (size_t r = 0; r < R; r++)
        finish_row(pl, sq, it.b, it.kvh * pl->G + r % pl->G, it.i0 + r / pl->G, m[r], l[r],
                   acc + r * Dv);
}

/* Merges the chunks of one (sequence, KV head) of a split sequence in chunk order with the
   code of sdpa_merge (merge.c), so the result does not depend on which thread computed what:
   m = max m_c, l = sum l_c e^(m_c - m), the same for acc. A chunk's state says what it saw:
   l = 0, nothing (whatever m is); l or m NaN, a NaN score (some kernels keep NaN out of m and
   carry it in l only), which makes the whole row NaN. */
static void merge_group(void *arg, size_t grp, size_t thread)
{
    const plan *pl = arg;
    const size_t b = seq_of(pl, grp, true);
    const seqinfo *sq = &pl->seq[b];
    const size_t kvh = grp - sq->grp0, nc = sq->n_chunks;
    const size_t R = sq->lq * pl->G, Dv = pl->Dv, stride = pl->R * (Dv + 2);
    const float *st = pl->partial + (sq->part0 + kvh * nc) * stride;
    float *ws = pl->ws + thread * pl->ws_stride;
    float *acc = ws; /* Dv floats of this thread's scratch */
    const float **mp = (const float **)(void *)(ws + pl->mptr_off), **lp = mp + nc, **ap = lp + nc;
    for (size_t c = 0; c < nc; c++) {
        mp[c] = st + c * stride;
        lp[c] = mp[c] + R;
        ap[c] = mp[c] + 2 * R;
    }
    for (size_t r = 0; r < R; r++) {
        float m, l;
        sdpa_merge_weights(nc, mp, lp, r, &m, &l);
        if (l == 0.0f || l != l) /* nothing seen (zeros), or NaN (finish_row writes NaN) */
            memset(acc, 0, Dv * sizeof *acc);
        else
            sdpa_merge_values(nc, mp, lp, ap, r, r * Dv, Dv, m, 1.0f, acc);
        finish_row(pl, sq, b, kvh * pl->G + r % pl->G, r / pl->G, m, l, acc);
    }
}

static void run_all(const sdpa_params *p, size_t n, sdpa_task_fn fn, plan *pl)
{
    if (p->parallel_for) {
        p->parallel_for(p->pool, n, fn, pl);
    } else {
        for (size_t t = 0; t < n; t++) fn(pl, t, 0);
    }
}

size_t sdpa_plan_block(size_t D, size_t Dv)
{
    /* a block of K and V (f32) plus its score tile should sit in about half of L2 */
    if (D > SIZE_MAX / 16 || Dv > SIZE_MAX / 16) return BLOCK_MIN; /* only from introspection */
    const size_t l2 = sdpa_cached_l2_bytes();
    size_t b = l2 / 2 / (sizeof(float) * (D + Dv + ROWS_TARGET));
    b = b / 16 * 16;
    return b < BLOCK_MIN ? BLOCK_MIN : b > BLOCK_MAX ? BLOCK_MAX : b;
}

/* A sequence of one query block and at least SPLIT_MIN_KV keys is split into KV chunks. */
static bool splittable(const plan *pl, size_t lq, size_t lk)
{
    return lq >= 1 && lq <= pl->qb && lk >= SPLIT_MIN_KV;
}

/* Walks the sequences: their items, partial slots and merge groups, in batch order, with the
   counts checked; fills pl->seq when it is set. */
static bool walk_seqs(plan *pl, size_t *n_items, size_t *n_parts, size_t *n_groups)
{
    size_t items = 0, parts = 0, groups = 0;
    pl->max_chunks = 1;
    for (size_t b = 0; b < pl->B; b++) {
        seqinfo s = {0};
        s.lq = seq_lq(pl->p, b), s.lk = seq_lk(pl->p, b);
        s.q0 = pl->p->cu_q ? pl->p->cu_q[b] : 0;
        s.k0 = pl->p->cu_kv ? pl->p->cu_kv[b] : 0;
        s.n_qblk = (s.lq + pl->qb - 1) / pl->qb;
        s.n_chunks = splittable(pl, s.lq, s.lk) ? (s.lk + pl->chunk - 1) / pl->chunk : 1;
        s.item0 = items, s.part0 = parts, s.grp0 = groups;
        size_t n;
        if (!mul_sz(pl->Hkv, s.n_qblk, &n) || !mul_sz(n, s.n_chunks, &n) ||
            !add_sz(items, n, &items))
            return false;
        if (s.n_chunks > 1) {
            parts += n; /* <= items: cannot overflow */
            groups += pl->Hkv;
            if (s.n_chunks > pl->max_chunks) pl->max_chunks = s.n_chunks;
        }
        if (pl->seq) pl->seq[b] = s;
    }
    *n_items = items, *n_parts = parts, *n_groups = groups;
    return true;
}

/* Plans a validated call on an implementation; sets *floats to the scratch it needs (per-thread
   workspaces, the split-K partial states, the sequence table), in floats. Depends on the
   problem and the implementation only, never on the thread count except for the number of
   workspaces. */
static sdpa_status make_plan(const sdpa_impl *impl, const sdpa_params *p, const sdpa_tensor *q,
                             const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_tensor *o,
                             plan *pl, size_t *floats)
{
    memset(pl, 0, sizeof *pl);
    pl->k = impl->k;
    pl->B = p->batch, pl->Hq = p->q_heads, pl->Hkv = p->kv_heads, pl->G = p->q_heads / p->kv_heads;
    pl->Lq = p->q_len, pl->Lk = p->kv_len, pl->D = p->head_dim;
    pl->Dv = p->v_dim ? p->v_dim : p->head_dim;
    pl->scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)p->head_dim);
    pl->causal = p->causal;
    /* a window at least as wide as every sequence (|i' - j| < q_len + kv_len always) is none:
       that also keeps the window edges, i' +- w, far from overflow */
    pl->window = p->window < pl->Lq + pl->Lk ? p->window : 0;
    pl->mods = p->softcap > 0.0f || p->alibi_slopes || p->mask;
    pl->p = p;
    pl->q = q, pl->kt = k, pl->vt = v, pl->o = o, pl->lse = p->lse;

    /* Everything below depends on the problem only, never on the thread count: that is what
       makes the result bitwise identical for any number of threads. */
    pl->qb = pl->G >= ROWS_TARGET ? 1 : ROWS_TARGET / pl->G;
    if (pl->qb > pl->Lq) pl->qb = pl->Lq;
    pl->R = pl->qb * pl->G;
    /* One chunk size for the call: the longest (an item starts its K/V streams cold) that
       still leaves SPLIT_ITEMS items among the splittable sequences' KV heads; short sequences
       stay whole. From the problem alone, never the thread count. */
    double kv_keys = 0; /* keys read over all sequences (only compared, below) */
    size_t longest = 0, lk_max = 0;
    for (size_t b = 0; b < pl->B; b++) {
        const size_t lq = seq_lq(p, b), lk = seq_lk(p, b);
        if (lq) kv_keys += (double)lk;
        if (lk > lk_max) lk_max = lk;
        if (splittable(pl, lq, lk) && lk > longest) longest = lk;
    }
    pl->chunk = SIZE_MAX;
    if (longest) {
        pl->chunk = SPLIT_CHUNK_MIN;
        for (;;) {
            size_t n = 0;
            for (size_t b = 0; b < pl->B && n < SPLIT_ITEMS; b++) {
                const size_t lq = seq_lq(p, b), lk = seq_lk(p, b);
                if (splittable(pl, lq, lk)) n += pl->Hkv * (lk / (2 * pl->chunk));
            }
            if (pl->chunk >= SPLIT_CHUNK_MAX || pl->chunk >= longest || n < SPLIT_ITEMS) break;
            pl->chunk *= 2;
        }
    }
    pl->block = sdpa_plan_block(pl->D, pl->Dv);
    {
        /* the K and V bytes the call reads (in double: a product of validated sizes, only
           compared) against STREAM_BYTES, a fixed size rather than the detected L3 (which in a
           virtual machine can be the host's total), so the same problem takes the same path */
        const double kv = (double)pl->Hkv * kv_keys *
                          ((double)pl->D * elem_bytes(pl->kt->dtype) +
                           (double)pl->Dv * elem_bytes(pl->vt->dtype));
        pl->stream = kv > (double)STREAM_BYTES;
    }
    size_t n_items, n_parts, n_groups;
    if (!walk_seqs(pl, &n_items, &n_parts, &n_groups)) return SDPA_ERR_OVERFLOW;

    const size_t threads = p->parallel_for ? (p->n_threads ? p->n_threads : 1) : 1;
    const size_t lim_floats = round16(pl->R * sizeof(size_t) / sizeof(float) + 1);
    const size_t kws = pl->k->ws_floats(pl->R, pl->D, pl->Dv, pl->block);
    const size_t row_ptrs = /* floats of R size_t, R ptrdiff_t, R pointers and R floats */
        round16(pl->R * (2 * sizeof(size_t) + sizeof(ptrdiff_t) + sizeof(void *) + sizeof(float)) /
                sizeof(float));
    size_t ws_floats, pf = 0, st, tab;
    pl->lim_off = round16(pl->R * pl->D);
    pl->state_off = pl->lim_off + lim_floats;
    pl->pf_off = pl->state_off + round16(pl->R * (pl->Dv + 2));
    pl->var_off = pl->pf_off + round16(2 * pl->R * sizeof(sdpa_span) / sizeof(float));
    pl->reb_off = pl->var_off + row_ptrs;
    pl->mptr_off = pl->reb_off + row_ptrs;
    size_t stage = 0;
    pl->quant = sdpa_dtype_quantized((int)k->dtype) || sdpa_dtype_quantized((int)v->dtype);
    if ((pl->quant && pl->k->quant_rows < pl->R) ||
        (p->block_table && p->page_size < STAGE_MAX_PAGE)) {
        /* units whose K/V the kernel cannot read in place: block formats dequantized to f32,
           short pages gathered (validated products: D, Dv, STAGE_KEYS far from overflow) */
        const size_t kb = pl->quant ? sizeof(float) : sdpa_block_bytes((int)k->dtype);
        const size_t vb = pl->quant ? sizeof(float) : sdpa_block_bytes((int)v->dtype);
        pl->stage_keys = STAGE_KEYS;
        stage = STAGE_KEYS * (pl->D * kb + pl->Dv * vb) / sizeof(float);
    }
    if (p->block_table) {
        /* units the kernel pages itself: their page lists */
        const size_t pages = (lk_max + p->page_size - 1) / p->page_size; /* <= max_pages */
        pl->ptab_off = round16(stage);
        stage = pl->ptab_off + round16(2 * pages * sizeof(void *) / sizeof(float));
    }
    if (!mul_sz(pl->max_chunks, 3 * sizeof(void *) / sizeof(float), &st) ||
        !add_sz(pl->mptr_off, round16(st), &pl->stage_off) ||
        !add_sz(pl->stage_off, round16(stage), &pl->kws_off) ||
        !add_sz(pl->kws_off, round16(kws), &pl->mul_off) ||
        !add_sz(pl->mul_off, round16(pl->R), &pl->qq_off) ||
        !add_sz(pl->qq_off, p->q8_scores ? qq_floats(pl->R, pl->D) : 0,
                &pl->ws_stride) ||
        !mul_sz(pl->ws_stride, threads, &ws_floats) ||
        !mul_sz(n_parts, pl->R * (pl->Dv + 2), &pf) ||
        !add_sz(ws_floats, round16(pf), &pl->seq_off) ||
        !mul_sz(pl->B, sizeof(seqinfo) / sizeof(float), &tab) ||
        !add_sz(pl->seq_off, tab, floats) || *floats > SIZE_MAX / sizeof(float) - 64)
        return SDPA_ERR_OVERFLOW;
    pl->n_items = n_items;
    pl->n_groups = n_groups;
    pl->partial_off = ws_floats;
    return SDPA_OK;
}

sdpa_status sdpa_impl_workspace_size(const sdpa_impl *impl, const sdpa_params *p,
                                     const sdpa_tensor *q, const sdpa_tensor *k,
                                     const sdpa_tensor *v, const sdpa_tensor *o, size_t *bytes)
{
    checker chk = {NULL, 0};
    sdpa_status s = validate(&chk, p, q, k, v, o);
    if (s != SDPA_OK) return s;
    if (!impl || !bytes) return SDPA_ERR_INVALID_ARGUMENT;
    plan pl;
    size_t floats;
    if ((s = make_plan(impl, p, q, k, v, o, &pl, &floats)) != SDPA_OK) return s;
    *bytes = floats * sizeof(float) + 64; /* room to align a caller's buffer to 64 bytes */
    return SDPA_OK;
}

sdpa_status sdpa_workspace_size(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                                const sdpa_tensor *v, const sdpa_tensor *o, size_t *bytes)
{
    return sdpa_impl_workspace_size(sdpa_active(), p, q, k, v, o, bytes);
}

sdpa_status sdpa_impl_forward(const sdpa_impl *impl, const sdpa_params *p, const sdpa_tensor *q,
                              const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_tensor *o)
{
    checker chk = {NULL, 0};
    sdpa_status s = validate(&chk, p, q, k, v, o);
    if (s != SDPA_OK) return s;
    if (!impl) return SDPA_ERR_INVALID_ARGUMENT;
    if (!sdpa_impl_supported(impl)) return SDPA_ERR_UNSUPPORTED;

    plan pl;
    size_t floats;
    if ((s = make_plan(impl, p, q, k, v, o, &pl, &floats)) != SDPA_OK) return s;
    const size_t bytes = floats * sizeof(float);
    void *own = NULL;
    uintptr_t base = (uintptr_t)p->workspace;
    base = (base + 63) & ~(uintptr_t)63;
    if (!p->workspace || p->workspace_bytes < bytes + (size_t)(base - (uintptr_t)p->workspace)) {
        /* no caller scratch, or too small for this call: our own, freed before returning */
        own = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!own) return SDPA_ERR_NO_MEMORY;
        base = (uintptr_t)own;
    }
    pl.ws = (float *)base;
    pl.partial = pl.ws + pl.partial_off;
    pl.seq = (seqinfo *)(void *)(pl.ws + pl.seq_off);
    size_t n_items, n_parts, n_groups;
    (void)walk_seqs(&pl, &n_items, &n_parts, &n_groups); /* as planned: the counts fit */

    run_all(p, pl.n_items, run_item, &pl);
    if (pl.n_groups) run_all(p, pl.n_groups, merge_group, &pl);
    free(own);
    return SDPA_OK;
}

sdpa_status sdpa_forward(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                         const sdpa_tensor *v, const sdpa_tensor *o)
{
    return sdpa_impl_forward(sdpa_active(), p, q, k, v, o);
}
