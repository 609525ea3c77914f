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
    const size_t esz = sdpa_dtype_size(t->dtype);
    ptrdiff_t lo = 0, hi = 0; /* in elements */
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
        __builtin_mul_overflow(lo, (ptrdiff_t)esz, &bytes_lo) ||
        __builtin_mul_overflow(top, (ptrdiff_t)esz, &bytes_hi) ||
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
        if (sdpa_dtype_size(ts[i]->dtype) == 0)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT, "%s has an unknown dtype (%d)", tn[i],
                        (int)ts[i]->dtype);
    if (q->dtype != SDPA_F32 || o->dtype != SDPA_F32)
        return fail(c, SDPA_ERR_UNSUPPORTED, "%s must be SDPA_F32 (f16/bf16 storage is for k and v)",
                    q->dtype != SDPA_F32 ? "q" : "o");

    /* Every product the driver will form must fit. */
    size_t rows, t;
    if (!mul_sz(p->batch, p->q_heads, &rows) || !mul_sz(rows, p->q_len, &rows) ||
        !mul_sz(rows, dv, &t) || !mul_sz(rows, p->head_dim, &t) ||
        !mul_sz(p->batch, p->kv_heads, &t) || !mul_sz(t, p->kv_len, &t) ||
        !mul_sz(t, p->head_dim > dv ? p->head_dim : dv, &t) || !add_sz(p->kv_len, p->q_len, &t) ||
        !add_sz(p->head_dim, 2, &t) || !mul_sz(t, sizeof(float) * 1024, &t) ||
        !add_sz(dv, 2, &t) || !mul_sz(t, sizeof(float) * 1024, &t))
        return fail(c, SDPA_ERR_OVERFLOW, "sizes overflow (batch %zu, heads %zu/%zu, lengths %zu/%zu,"
                    " dims %zu/%zu)", p->batch, p->q_heads, p->kv_heads, p->q_len, p->kv_len,
                    p->head_dim, dv);

    const size_t nq[3] = {p->batch, p->q_heads, p->q_len};
    const size_t nk[3] = {p->batch, p->kv_heads, p->kv_len};
    extent eq, ek, ev, eo;
    sdpa_status s;
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
        if (sdpa_dtype_size(mk->dtype) == 0)
            return fail(c, SDPA_ERR_INVALID_ARGUMENT,
                        "mask has dtype %d: it must be SDPA_F32, SDPA_F16 or SDPA_BF16", (int)mk->dtype);
        extent em;
        if ((s = view_extent(c, "mask", mk, nq, p->kv_len, &em)) != SDPA_OK) return s;
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

typedef struct plan {
    const sdpa_kernels *k;
    size_t B, Hq, Hkv, G, Lq, Lk, D, Dv;
    float  scale;
    bool   causal;
    size_t window;            /* 0: off */
    bool   mods;              /* softcap, ALiBi or a mask: the kernels' modifier path */
    const sdpa_params *p;     /* the call (modifier and sink arrays, the mask view) */
    const sdpa_tensor *q, *kt, *vt, *o;
    float *lse;
    size_t qb, n_qblk, chunk, n_chunks, block, R, n_items;
    int    stream;    /* sdpa_rows.stream: K and V exceed the last-level cache */
    size_t ws_stride; /* floats of per-thread scratch: qp [R*D] | limits | state | prefetch hints |
                         kernel scratch | score multipliers */
    size_t lim_off;   /* where the key limits (size_t) start in it */
    size_t state_off; /* where m, l, acc start (unsplit problems) */
    size_t pf_off;    /* where the prefetch hints (2R spans) start */
    size_t mul_off;   /* where the rows' score multipliers (R floats, see scale_row) start */
    size_t kws_off;   /* where the kernel's scratch starts */
    size_t var_off;   /* where the rows' window starts, positions, slopes and mask rows start */
    size_t partial_off; /* where the split-K partial states start, after the workspaces */
    float *ws;        /* n_threads * ws_stride floats, 64-byte aligned */
    float *partial;   /* n_chunks > 1: per item, m[R] l[R] acc[R * Dv] */
} plan;

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

/* Query i's position among the keys, i' = i + Lk - Lq (bottom-right alignment; sizes are
   validated to fit, so it fits in ptrdiff_t). */
static ptrdiff_t q_pos(const plan *pl, size_t i)
{
    return (ptrdiff_t)i + (ptrdiff_t)pl->Lk - (ptrdiff_t)pl->Lq;
}

static size_t clamp_keys(const plan *pl, ptrdiff_t j)
{
    return j <= 0 ? 0 : (size_t)j < pl->Lk ? (size_t)j : pl->Lk;
}

/* Keys query row i may see: [kv_first(i), kv_limit(i)), both non-decreasing in i: causal
   j <= i', window |i' - j| < w. */
static size_t kv_limit(const plan *pl, size_t i)
{
    if (pl->causal) return clamp_keys(pl, q_pos(pl, i) + 1);
    if (pl->window) return clamp_keys(pl, q_pos(pl, i) + (ptrdiff_t)pl->window);
    return pl->Lk;
}
static size_t kv_first(const plan *pl, size_t i)
{
    return pl->window ? clamp_keys(pl, q_pos(pl, i) - (ptrdiff_t)pl->window + 1) : 0;
}

/* Row (b, h, i) of an f32 view (q or o). */
static float *f32_row(const sdpa_tensor *t, size_t b, size_t h, size_t i)
{
    return (float *)t->data + (ptrdiff_t)b * t->batch_stride + (ptrdiff_t)h * t->head_stride +
           (ptrdiff_t)i * t->token_stride;
}

/* Writes one finished row: o = acc / l, and lse = m + log(l); zeros and -inf when no key.
   A sink s (once per row, whatever the split) joins the denominator: with M = max(m, s),
   o = acc e^(m - M) / (l e^(m - M) + e^(s - M)), lse = M + log of that denominator; a row
   that saw no key gives zeros and lse = s. */
static void finish_row(const plan *pl, size_t b, size_t h, size_t i, float m, float l,
                       const float *acc)
{
    float *o = f32_row(pl->o, b, h, i);
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
    size_t b, kvh, i0, qn, chunk;
} item;

static item item_at(const plan *pl, size_t t)
{
    item it;
    it.chunk = t % pl->n_chunks;
    t /= pl->n_chunks;
    const size_t qblk = t % pl->n_qblk;
    t /= pl->n_qblk;
    it.kvh = t % pl->Hkv;
    it.b = t / pl->Hkv;
    it.i0 = qblk * pl->qb;
    it.qn = pl->Lq - it.i0 < pl->qb ? pl->Lq - it.i0 : pl->qb;
    return it;
}

/* One work item: pack the scaled queries of every head of the group (query-major, so the key
   limits are non-decreasing), run the implementation's fused kernel over the item's KV range,
   then either finish the rows (no split) or leave the partial state for the merge. */
static void run_item(void *arg, size_t t, size_t thread)
{
    const plan *pl = arg;
    const item it = item_at(pl, t);
    const size_t R = it.qn * pl->G, D = pl->D, Dv = pl->Dv;
    float *ws = pl->ws + thread * pl->ws_stride;
    float *qp = ws;
    size_t *lim = (size_t *)(void *)(ws + pl->lim_off);
    float *state = (pl->n_chunks > 1) ? pl->partial + t * pl->R * (Dv + 2) : ws + pl->state_off;
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
        const size_t li = kv_limit(pl, it.i0 + i), fi = kv_first(pl, it.i0 + i);
        for (size_t g = 0; g < pl->G; g++) {
            const size_t r = i * pl->G + g, h = it.kvh * pl->G + g;
            mul[r] = scale_row(qp + r * D, f32_row(pl->q, it.b, h, it.i0 + i), pl->scale, D);
            scaled |= mul[r] != 1.0f;
            lim[r] = li;
            first[r] = fi;
            pos[r] = q_pos(pl, it.i0 + i);
            if (p->alibi_slopes) slope[r] = p->alibi_slopes[h];
            if (mk)
                mrow[r] = (const char *)mk->data +
                          ((ptrdiff_t)it.b * mk->batch_stride + (ptrdiff_t)h * mk->head_stride +
                           (ptrdiff_t)(it.i0 + i) * mk->token_stride) *
                              (ptrdiff_t)sdpa_dtype_size(mk->dtype);
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
    }
    const sdpa_mods mods = {
        .softcap = p->softcap,
        .inv_softcap = p->softcap > 0.0f ? 1.0f / p->softcap : 0.0f,
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
    if (pl->n_chunks == 1)
        for (size_t r = 0; r < R; r++) {
            const size_t h = it.kvh * pl->G + r % pl->G, i = it.i0 + r / pl->G;
            pf[n_pf].p = f32_row(pl->o, it.b, h, i);
            pf[n_pf++].bytes = Dv * sizeof(float);
        }
    if (t + 1 < pl->n_items) {
        const item nx = item_at(pl, t + 1);
        if (nx.chunk == 0)
            for (size_t r = 0; r < nx.qn * pl->G; r++) {
                const size_t h = nx.kvh * pl->G + r % pl->G, i = nx.i0 + r / pl->G;
                pf[n_pf].p = f32_row(pl->q, nx.b, h, i);
                pf[n_pf++].bytes = D * sizeof(float);
            }
    }

    size_t c0 = it.chunk * pl->chunk;
    size_t c1 = c0 + pl->chunk < pl->Lk ? c0 + pl->chunk : pl->Lk;
    if (c0 < first[0]) c0 = first[0]; /* keys left of every row's window are never read */
    if (c1 > lim[R - 1]) c1 = lim[R - 1]; /* keys no row of the item sees are never read */
    if (c0 < c1) {
        const size_t ke = sdpa_dtype_size(pl->kt->dtype), ve = sdpa_dtype_size(pl->vt->dtype);
        const sdpa_rows w = {
            .rows = R, .d = D, .dv = Dv, .q = qp, .kv_limit = lim,
            .kv_first = pl->window ? first : NULL, .mods = pl->mods ? &mods : NULL,
            .score_mul = scaled ? mul : NULL,
            .k = (const char *)pl->kt->data +
                 ((ptrdiff_t)it.b * pl->kt->batch_stride + (ptrdiff_t)it.kvh * pl->kt->head_stride) *
                     (ptrdiff_t)ke,
            .v = (const char *)pl->vt->data +
                 ((ptrdiff_t)it.b * pl->vt->batch_stride + (ptrdiff_t)it.kvh * pl->vt->head_stride) *
                     (ptrdiff_t)ve,
            .k_stride = pl->kt->token_stride, .v_stride = pl->vt->token_stride,
            .k_type = pl->kt->dtype, .v_type = pl->vt->dtype,
            .kv_begin = c0, .kv_end = c1,
            .m = m, .l = l, .acc = acc,
            .ws = ws + pl->kws_off, .block = pl->block,
            .pf = pf, .n_pf = n_pf,
            /* consecutive query blocks of the same KV head scan their keys in alternate
               directions: each starts where the previous one ended, on keys still in cache */
            .reverse = (int)(it.i0 / pl->qb % 2),
            .stream = pl->stream,
        };
        pl->k->rows(&w);
    }
    if (pl->n_chunks > 1) return;
    for (size_t r = 0; r < R; r++)
        finish_row(pl, it.b, it.kvh * pl->G + r % pl->G, it.i0 + r / pl->G, m[r], l[r],
                   acc + r * Dv);
}

/* Merges the chunks of one (batch, KV head, query block) in chunk order, so the result does not
   depend on which thread computed what: m = max m_c, l = sum l_c e^(m_c - m), the same for acc.
   A chunk's state says what it saw: l = 0, nothing (whatever m is); l or m NaN, a NaN score
   (some kernels keep NaN out of m and carry it in l only), which makes the whole row NaN. */
static void merge_group(void *arg, size_t grp, size_t thread)
{
    const plan *pl = arg;
    const item it = item_at(pl, grp * pl->n_chunks);
    const size_t R = it.qn * pl->G, Dv = pl->Dv, stride = pl->R * (Dv + 2);
    const float *first = pl->partial + grp * pl->n_chunks * stride;
    float *acc = pl->ws + thread * pl->ws_stride; /* Dv floats of this thread's scratch */
    for (size_t r = 0; r < R; r++) {
        float m = -INFINITY;
        bool nan = false;
        for (size_t c = 0; c < pl->n_chunks; c++) {
            const float mc = first[c * stride + r], lc = first[c * stride + R + r];
            if (isnan(mc) || isnan(lc))
                nan = true;
            else if (lc != 0.0f && mc > m)
                m = mc;
        }
        float l = 0.0f;
        memset(acc, 0, Dv * sizeof *acc);
        if (nan) {
            l = NAN; /* finish_row then writes NaN for o and lse */
        } else if (m != -INFINITY) {
            for (size_t c = 0; c < pl->n_chunks; c++) {
                const float *st = first + c * stride;
                const float mc = st[r], lc = st[R + r];
                if (lc == 0.0f) continue; /* the chunk saw nothing for this row */
                const float f = expf(mc - m);
                const float *ac = st + 2 * R + r * Dv;
                l += f * lc;
                for (size_t j = 0; j < Dv; j++) acc[j] += f * ac[j];
            }
        }
        finish_row(pl, it.b, it.kvh * pl->G + r % pl->G, it.i0 + r / pl->G, m, l, acc);
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

/* Plans a validated call on an implementation; sets *floats to the scratch it needs (per-thread
   workspaces, then the split-K partial states), in floats. Depends on the problem and the
   implementation only, never on the thread count except for the number of workspaces. */
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
    pl->window = p->window;
    pl->mods = p->softcap > 0.0f || p->alibi_slopes || p->mask;
    pl->p = p;
    pl->q = q, pl->kt = k, pl->vt = v, pl->o = o, pl->lse = p->lse;

    /* Everything below depends on the problem only, never on the thread count: that is what
       makes the result bitwise identical for any number of threads. */
    pl->qb = pl->G >= ROWS_TARGET ? 1 : ROWS_TARGET / pl->G;
    if (pl->qb > pl->Lq) pl->qb = pl->Lq;
    pl->n_qblk = (pl->Lq + pl->qb - 1) / pl->qb;
    pl->chunk = pl->Lk;
    if (pl->n_qblk == 1 && pl->Lk >= SPLIT_MIN_KV) {
        /* The longest chunks (an item starts its K/V streams cold) that still leave SPLIT_ITEMS
           items to share among threads; from the problem's size alone, never the thread count. */
        const size_t groups = pl->B * pl->Hkv;
        pl->chunk = SPLIT_CHUNK_MIN;
        while (pl->chunk < SPLIT_CHUNK_MAX && pl->chunk < pl->Lk &&
               groups * (pl->Lk / (2 * pl->chunk)) >= SPLIT_ITEMS)
            pl->chunk *= 2;
    }
    pl->n_chunks = (pl->Lk + pl->chunk - 1) / pl->chunk;
    pl->block = sdpa_plan_block(pl->D, pl->Dv);
    pl->R = pl->qb * pl->G;
    {
        /* the K and V bytes the call reads (in double: a product of validated sizes, only
           compared) against STREAM_BYTES, a fixed size rather than the detected L3 (which in a
           virtual machine can be the host's total), so the same problem takes the same path */
        const double kv = (double)pl->B * (double)pl->Hkv * (double)pl->Lk *
                          ((double)pl->D * (double)sdpa_dtype_size(pl->kt->dtype) +
                           (double)pl->Dv * (double)sdpa_dtype_size(pl->vt->dtype));
        pl->stream = kv > (double)STREAM_BYTES;
    }

    const size_t threads = p->parallel_for ? (p->n_threads ? p->n_threads : 1) : 1;
    const size_t lim_floats = round16(pl->R * sizeof(size_t) / sizeof(float) + 1);
    const size_t kws = pl->k->ws_floats(pl->R, pl->D, pl->Dv, pl->block);
    size_t n_items, ws_floats, pf = 0;
    pl->lim_off = round16(pl->R * pl->D);
    pl->state_off = pl->lim_off + lim_floats;
    pl->pf_off = pl->state_off + round16(pl->R * (pl->Dv + 2));
    pl->var_off = pl->pf_off + round16(2 * pl->R * sizeof(sdpa_span) / sizeof(float));
    pl->kws_off = pl->var_off +
                  round16(pl->R * (sizeof(size_t) + sizeof(ptrdiff_t) + sizeof(void *) + sizeof(float)) /
                          sizeof(float));
    if (!mul_sz(pl->B * pl->Hkv, pl->n_qblk, &n_items) || !mul_sz(n_items, pl->n_chunks, &n_items) ||
        !add_sz(pl->kws_off, round16(kws), &pl->mul_off) ||
        !add_sz(pl->mul_off, round16(pl->R), &pl->ws_stride) ||
        !mul_sz(pl->ws_stride, threads, &ws_floats) ||
        (pl->n_chunks > 1 && !mul_sz(n_items, pl->R * (pl->Dv + 2), &pf)) ||
        !add_sz(ws_floats, round16(pf), floats) || *floats > SIZE_MAX / sizeof(float) - 64)
        return SDPA_ERR_OVERFLOW;
    pl->n_items = n_items;
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
    pl.partial = pl.n_chunks > 1 ? pl.ws + pl.partial_off : NULL;

    run_all(p, pl.n_items, run_item, &pl);
    if (pl.n_chunks > 1) run_all(p, pl.n_items / pl.n_chunks, merge_group, &pl);
    free(own);
    return SDPA_OK;
}

sdpa_status sdpa_forward(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                         const sdpa_tensor *v, const sdpa_tensor *o)
{
    return sdpa_impl_forward(sdpa_active(), p, q, k, v, o);
}
