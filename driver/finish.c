/* finish.c -- finishing rows (o, lse, sinks) and merging partial attentions: split-K, sdpa_merge */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "driver.h"

/* The merge of partial attentions, one row at a time, shared by sdpa_merge and the split-K
   merge of sdpa_forward. Part i of row r has log-weight m[i][r], sum l[i][r] (l NULL: 1, or 0
   for m = -inf, as an lse gives) and values a[i] + ra (dv floats); a part with sum 0 saw
   nothing and is never read. Parts are taken in index order.
   sdpa_merge_weights: M = the largest m of a part that saw something, L = sum l e^(m - M);
   L = 0 (M = -inf) when none did, L = NaN when a part has a NaN m or l.
   sdpa_merge_values: out[c] = g * sum e^(m - M) a[c]; out may be one of the parts' rows. */

/* Part i of row r "saw something" when its sum is not 0: l[i][r] when l is given, else (the
   public form, where the log-weight is an lse) 1 for an lse other than -inf. */
static float part_sum(const float *const *l, const float *const *m, size_t i, size_t r)
{
    return l ? l[i][r] : (m[i][r] == -INFINITY ? 0.0f : 1.0f);
}

static void sdpa_merge_weights(size_t n, const float *const *m, const float *const *l, size_t r,
                               float *M, float *L)
{
    float mx = -INFINITY;
    bool nan = false;
    for (size_t i = 0; i < n; i++) {
        const float mi = m[i][r], li = part_sum(l, m, i, r);
        if (isnan(mi) || isnan(li))
            nan = true;
        else if (li != 0.0f && mi > mx)
            mx = mi;
    }
    float sum = 0.0f;
    if (nan) {
        sum = NAN;
    } else if (mx != -INFINITY) {
        for (size_t i = 0; i < n; i++) {
            const float li = part_sum(l, m, i, r);
            if (li != 0.0f) sum += li * expf(m[i][r] - mx);
        }
    }
    *M = mx;
    *L = sum;
}

static void sdpa_merge_values(size_t n, const float *const *m, const float *const *l,
                              const float *const *a, size_t r, size_t ra, size_t dv, float M,
                              float g, float *out)
{
    /* column blocks through a stack buffer: out may be one of the parts' rows (in place), so
       each block is read from every part before any of it is written */
    enum { CB = 64 };
    float t[CB];
    for (size_t c0 = 0; c0 < dv; c0 += CB) {
        const size_t nc = dv - c0 < CB ? dv - c0 : CB;
        memset(t, 0, nc * sizeof *t);
        if (M != -INFINITY)
            for (size_t i = 0; i < n; i++) {
                if (part_sum(l, m, i, r) == 0.0f) continue; /* saw nothing: never read */
                const float f = expf(m[i][r] - M);
                const float *ai = a[i] + ra + c0;
                for (size_t c = 0; c < nc; c++) t[c] += f * ai[c];
            }
        for (size_t c = 0; c < nc; c++) out[c0 + c] = t[c] * g;
    }
}

/* The byte range of `rows` rows of dv floats, stride apart. */

/* Writes one finished row: o = acc / l, and lse = m + log(l); zeros and -inf when no key.
   A sink s (once per row, whatever the split) joins the denominator: with M = max(m, s),
   o = acc e^(m - M) / (l e^(m - M) + e^(s - M)), lse = M + log of that denominator; a row
   that saw no key gives zeros and lse = s. lse is indexed by the sequence's own i. */
void sdpa_finish_row(const plan *pl, const seqinfo *sq, size_t b, size_t h, size_t i, float m,
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

/* Merges the chunks of one (sequence, KV head) of a split sequence in chunk order with the
   code of sdpa_merge (below), so the result does not depend on which thread computed what:
   m = max m_c, l = sum l_c e^(m_c - m), the same for acc. A chunk's state says what it saw:
   l = 0, nothing (whatever m is); l or m NaN, a NaN score (some kernels keep NaN out of m and
   carry it in l only), which makes the whole row NaN. */
void sdpa_merge_group(const plan *pl, size_t b, size_t kvh, size_t thread)
{
    const seqinfo *sq = &pl->seq[b];
    const size_t nc = sq->n_chunks;
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
        if (l == 0.0f || l != l) /* nothing seen (zeros), or NaN (sdpa_finish_row writes NaN) */
            memset(acc, 0, Dv * sizeof *acc);
        else
            sdpa_merge_values(nc, mp, lp, ap, r, r * Dv, Dv, m, 1.0f, acc);
        sdpa_finish_row(pl, sq, b, kvh * pl->G + r % pl->G, r / pl->G, m, l, acc);
    }
}

static bool rows_range(const float *p, size_t rows, size_t stride, size_t dv, uintptr_t *lo,
                       uintptr_t *hi)
{
    size_t n;
    if (__builtin_mul_overflow(rows - 1, stride, &n) || __builtin_add_overflow(n, dv, &n) ||
        __builtin_mul_overflow(n, sizeof(float), &n) ||
        __builtin_add_overflow((uintptr_t)p, (uintptr_t)n, hi))
        return false;
    *lo = (uintptr_t)p;
    return true;
}

static bool disjoint(uintptr_t a0, uintptr_t a1, uintptr_t b0, uintptr_t b1)
{
    return a1 <= b0 || b1 <= a0;
}

sdpa_status sdpa_merge(size_t n_parts, size_t rows, size_t dv, const float *const *o_parts,
                       size_t o_stride, const float *const *lse_parts, float *o,
                       size_t o_out_stride, float *lse)
{
    if (n_parts == 0 || rows == 0 || dv == 0 || !o_parts || !lse_parts || !o)
        return SDPA_ERR_INVALID_ARGUMENT;
    if (o_stride < dv || o_out_stride < dv) /* whatever rows is, as sdpa.h states */
        return SDPA_ERR_INVALID_ARGUMENT;
    uintptr_t o0, o1, l0 = 0, l1 = 0;
    if (!rows_range(o, rows, o_out_stride, dv, &o0, &o1) ||
        (lse && !rows_range(lse, rows, 1, 1, &l0, &l1)))
        return SDPA_ERR_OVERFLOW;
    if (lse && !disjoint(o0, o1, l0, l1)) return SDPA_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n_parts; i++) {
        uintptr_t a0, a1, e0, e1;
        if (!o_parts[i] || !lse_parts[i]) return SDPA_ERR_INVALID_ARGUMENT;
        if (!rows_range(o_parts[i], rows, o_stride, dv, &a0, &a1) ||
            !rows_range(lse_parts[i], rows, 1, 1, &e0, &e1))
            return SDPA_ERR_OVERFLOW;
        /* in place: the very same rows; otherwise no overlap at all */
        const bool same_o = o_parts[i] == o && o_stride == o_out_stride;
        const bool same_l = lse_parts[i] == lse;
        if ((!same_o && !disjoint(a0, a1, o0, o1)) || !disjoint(e0, e1, o0, o1) ||
            (lse && !same_l && !disjoint(e0, e1, l0, l1)) || (lse && !disjoint(a0, a1, l0, l1)))
            return SDPA_ERR_INVALID_ARGUMENT;
    }
    for (size_t r = 0; r < rows; r++) {
        float M, L;
        sdpa_merge_weights(n_parts, lse_parts, NULL, r, &M, &L);
        float *out = o + r * o_out_stride;
        if (L == 0.0f) { /* every part saw nothing */
            memset(out, 0, dv * sizeof *out);
            if (lse) lse[r] = -INFINITY;
            continue;
        }
        /* NaN L (a NaN or +inf lse) makes the whole row NaN through g */
        sdpa_merge_values(n_parts, lse_parts, NULL, o_parts, r, r * o_stride, dv, M, 1.0f / L, out);
        if (lse) lse[r] = M + logf(L);
    }
    return SDPA_OK;
}
