/* merge.c -- combining partial attentions: sdpa_merge, and the split-K merge sdpa_forward runs */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* Part i of row r "saw something" when its sum is not 0: l[i][r] when l is given, else (the
   public form, where the log-weight is an lse) 1 for an lse other than -inf. */
static float part_sum(const float *const *l, const float *const *m, size_t i, size_t r)
{
    return l ? l[i][r] : (m[i][r] == -INFINITY ? 0.0f : 1.0f);
}

void sdpa_merge_weights(size_t n, const float *const *m, const float *const *l, size_t r, float *M,
                        float *L)
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

void sdpa_merge_values(size_t n, const float *const *m, const float *const *l,
                       const float *const *a, size_t r, size_t ra, size_t dv, float M, float g,
                       float *out)
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
