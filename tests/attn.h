/* attn.h -- test helpers for fused attention: strided tensor views in any layout and a float64
 * oracle */
#ifndef SDPA_TEST_ATTN_H
#define SDPA_TEST_ATTN_H

#include "testlib.h"

#include "convert.h"

/* ------------------------------------------------------------------------------------------ */
/* Views                                                                                        */
/* ------------------------------------------------------------------------------------------ */
typedef enum tlayout {
    L_DENSE = 0,   /* [batch][head][token][dim], packed */
    L_PADDED,      /* the same order, every stride padded (rows, heads and batches do not touch) */
    L_TOKEN_MAJOR, /* [batch][token][head][dim] as many engines store it, padded a little */
    L_REVERSED,    /* tokens stored last to first: a negative token stride */
    L_COUNT
} tlayout;

static const char *const layout_names[L_COUNT] = {"dense", "padded", "token-major", "reversed"};

typedef struct tview {
    size_t B, H, T, D; /* logical shape [B][H][T][D] */
    sdpa_dtype dtype;
    ptrdiff_t bs, hs, ts; /* strides in elements */
    size_t es;            /* element size in bytes */
    size_t n_elems;       /* extent of the allocation, elements */
    ptrdiff_t origin;     /* element index of [0][0][0][0] within the allocation */
    void *buf;            /* the allocation (owned unless placed) */
    bool owned;
    float *vals; /* dense f32 copy [B][H][T][D] of the stored values, after conversion */
} tview;

/* Lays out a view (strides and extent) with `margin` spare elements before and after it. */
static inline void tview_layout(tview *t, size_t B, size_t H, size_t T, size_t D, sdpa_dtype dt,
                                tlayout layout, size_t margin)
{
    memset(t, 0, sizeof *t);
    t->B = B, t->H = H, t->T = T, t->D = D, t->dtype = dt;
    t->es = sdpa_dtype_size(dt) ? sdpa_dtype_size(dt) : 4;
    ptrdiff_t b = (ptrdiff_t)B, h = (ptrdiff_t)H, n = (ptrdiff_t)T, d = (ptrdiff_t)D;
    switch (layout) {
    case L_DENSE:
        t->ts = d, t->hs = n * d, t->bs = h * n * d;
        break;
    case L_PADDED:
        t->ts = d + 3, t->hs = n * (d + 3) + 5, t->bs = h * (n * (d + 3) + 5) + 7;
        break;
    case L_TOKEN_MAJOR:
        t->hs = d + 2, t->ts = h * (d + 2) + 1, t->bs = n * (h * (d + 2) + 1) + 3;
        break;
    default:
        t->ts = -(d + 1), t->hs = n * (d + 1), t->bs = h * n * (d + 1);
        break;
    }
    (void)b;
    /* extent: the lowest and highest element any index reaches */
    ptrdiff_t lo = 0, hi = d - 1;
    const ptrdiff_t st[3] = {t->bs, t->hs, t->ts}, cnt[3] = {b, h, n};
    for (int i = 0; i < 3; i++) {
        ptrdiff_t reach = (cnt[i] - 1) * st[i];
        if (reach < 0)
            lo += reach;
        else
            hi += reach;
    }
    t->origin = (ptrdiff_t)margin - lo;
    t->n_elems = (size_t)(hi - lo + 1) + 2 * margin;
}

static inline void tview_alloc(tview *t)
{
    t->buf = tl_xmalloc(t->n_elems * t->es);
    t->owned = true;
    memset(t->buf, 0, t->n_elems * t->es);
    t->vals = tl_xmalloc(t->B * t->H * t->T * t->D * sizeof(float));
}

/* Uses caller memory of n_elems * es bytes (a guard-page region) instead of allocating. */
static inline void tview_place(tview *t, void *mem)
{
    t->buf = mem;
    t->owned = false;
    t->vals = tl_xmalloc(t->B * t->H * t->T * t->D * sizeof(float));
}

static inline void tview_free(tview *t)
{
    if (t->owned) free(t->buf);
    free(t->vals);
    t->buf = t->vals = NULL;
}

static inline ptrdiff_t tview_index(const tview *t, size_t b, size_t h, size_t n, size_t c)
{
    return t->origin + (ptrdiff_t)b * t->bs + (ptrdiff_t)h * t->hs + (ptrdiff_t)n * t->ts +
           (ptrdiff_t)c;
}

static inline size_t tview_dense(const tview *t, size_t b, size_t h, size_t n, size_t c)
{
    return ((b * t->H + h) * t->T + n) * t->D + c;
}

static inline sdpa_tensor tview_tensor(const tview *t)
{
    sdpa_tensor x;
    x.data = (char *)t->buf + t->origin * (ptrdiff_t)t->es;
    x.dtype = t->dtype;
    x.batch_stride = t->bs;
    x.head_stride = t->hs;
    x.token_stride = t->ts;
    return x;
}

/* n_heads standard ALiBi slopes (max_bias 8), allocated: the variant tests' slopes. */
static inline float *tl_alibi_slopes(size_t n_heads)
{
    float *s = tl_xmalloc(n_heads * sizeof(float));
    sdpa_alibi_slopes(n_heads, 8.0f, s);
    return s;
}

/* n_heads sink logits, allocated: every third head from the second has none (-inf), the others
   a value in [-1, 3). */
static inline float *tl_sinks(tl_rng *r, size_t n_heads)
{
    float *s = tl_xmalloc(n_heads * sizeof(float));
    for (size_t h = 0; h < n_heads; h++) s[h] = h % 3 == 1 ? -INFINITY : tl_uniform(r, -1.0f, 3.0f);
    return s;
}

/* x as an element of type t holds it (f16 and bf16 round to nearest even). */
static inline float tl_stored(sdpa_dtype t, float x)
{
    return t == SDPA_F16    ? sdpa_f16_to_f32(sdpa_f32_to_f16(x))
           : t == SDPA_BF16 ? sdpa_bf16_to_f32(sdpa_f32_to_bf16(x))
                            : x;
}

/* Stores x, converted to t, at element e of buf. */
static inline void tl_put(void *buf, sdpa_dtype t, size_t e, float x)
{
    if (t == SDPA_F16)
        ((uint16_t *)buf)[e] = sdpa_f32_to_f16(x);
    else if (t == SDPA_BF16)
        ((uint16_t *)buf)[e] = sdpa_f32_to_bf16(x);
    else
        ((float *)buf)[e] = x;
}

/* n elements of type t, all NaN: storage a reader must never reach. */
static inline void tl_fill_nan(void *buf, sdpa_dtype t, size_t n)
{
    for (size_t e = 0; e < n; e++) tl_put(buf, t, e, NAN);
}

/* Stores v at an element (converted to the view's type) and returns the value actually stored. */
static inline float tview_store(tview *t, ptrdiff_t idx, float v)
{
    tl_put(t->buf, t->dtype, (size_t)idx, v);
    return tl_stored(t->dtype, v);
}

/* Fills every element of the view with uniform values in [lo, hi), keeping the stored values. */
static inline void tview_fill(tview *t, tl_rng *r, float lo, float hi)
{
    for (size_t b = 0; b < t->B; b++)
        for (size_t h = 0; h < t->H; h++)
            for (size_t n = 0; n < t->T; n++)
                for (size_t c = 0; c < t->D; c++)
                    t->vals[tview_dense(t, b, h, n, c)] =
                        tview_store(t, tview_index(t, b, h, n, c), tl_uniform(r, lo, hi));
}

/* An f32 output view: every element of the allocation holds the sentinel before the call. */
static inline void tview_sentinel(tview *t) { tl_fill_sentinel((float *)t->buf, t->n_elems); }

static inline float tview_out(const tview *t, size_t b, size_t h, size_t n, size_t c)
{
    return ((const float *)t->buf)[tview_index(t, b, h, n, c)];
}

/* ------------------------------------------------------------------------------------------ */
/* The float64 oracle: every per-feature test's reference (test_forward, test_variants,        */
/* test_layouts, test_quant, ...). It reads a problem as logical data, the values as stored    */
/* (f16/bf16/block formats converted exactly), dense [b][head][token][dim], and follows the    */
/* contract of sdpa.h in double: for row (b, h, i < lq_b), i' = i + lk_b - lq_b,               */
/*   row i sees key j < lk_b  iff  (not causal or j <= i') and (window 0 or |i' - j| < window) */
/*                                 and the mask entry is not -inf                              */
/*   s_ij = softcap(scale q.k) - slope_h |i' - j| + f_h mask_ij, softcap(x) = c tanh(x / c),   */
/*   f_h the mask's factor (mask_scales; 1 without)                                           */
/*   o_i = sum_j e^(s_ij - M) v_j / (sum_j e^(s_ij - M) + e^(sink_h - M)), lse_i = M + log(...) */
/* over the keys the row sees only (it never reads another key, so NaN and inf in hidden keys  */
/* cannot reach it). A row that sees nothing gives zeros and lse = sink_h or -inf; a row with  */
/* a NaN or +inf score is ATTN_ROW_NAN. Alongside the answers it gathers the sums each test's  */
/* tolerance is made of; the tests apply their own bounds to them. A new modifier or storage   */
/* type is an edit here (and in the problem builders), never in each test.                     */
/* ------------------------------------------------------------------------------------------ */
enum { ATTN_ROW_KEYS = 0, ATTN_ROW_NOTHING, ATTN_ROW_NAN };

typedef struct attn_problem {
    size_t B, Hq, Hk, Lq, Lk, D, Dv; /* rows (b * Hq + h) * Lq + i; Lq, Lk the longest */
    const size_t *lq, *lk;           /* per sequence; NULL: Lq (Lk) each */
    const float *q, *k, *v;          /* dense [B][Hq][Lq][D], [B][Hk][Lk][D], [B][Hk][Lk][Dv] */
    double scale;
    bool causal;
    size_t window;
    double softcap;
    const float *slopes, *sinks; /* [Hq] or NULL */
    const float *mask;           /* NULL, or element b*mbs + h*mhs + i*mis + j */
    const float *mask_scales;    /* [Hq] or NULL: head h adds mask_scales[h] * mask */
    size_t mbs, mhs, mis;        /* 0 broadcasts */
    double tanh_ulp;             /* the implementation's softcap error, for ds */
    bool q8_model;               /* also the float64 model of q8 scores (D % 32 == 0) */
    /* q8_model: K's d n + m unrounded, dense like k (NULL: k), the values the integer
       arithmetic of the fast scores stands for; k_min: K has a minimum m per block (q4_1, q5_1),
       whose term m_k sum q is rounded on its own. */
    const double *kmodel;
    bool k_min;
} attn_problem;

typedef struct attn_ref {
    double *o;     /* [rows][Dv] the output */
    double *wabs;  /* sum_j w_j |v_jc| / l, the scale each output element's error is measured in */
    double *m1;    /* sum_j w_j ds_j |v_jc| / l, ds_j without the softcap's own error */
    double *flush; /* n e^-54 max_j |v_jc| / l: the weights SIMD kernels may flush (sdpa.h) */
    double *lse;   /* [rows] */
    double *tol;   /* per row: E_row = attn_row_tol(n, d, A) */
    double *ds;    /* per row: max_j ds_j, with the softcap's error (2 tanh_ulp + 2) u c */
    double *s1;    /* per row: sum_j w_j ds_j / l (+ the sink weight's rounding) */
    double *wk;    /* per row: sum_j w_j / l over the keys (the sink's share left out) */
    double *vmax;  /* per row: max |v| over the keys seen */
    size_t *seen;  /* per row: keys seen */
    unsigned char *kind; /* per row: ATTN_ROW_* */
    /* q8_model: x = scale q quantized per 32-block (d_b = max |x_c| / 127, q = round, +-127),  */
    /* score sum_b d_b (d_k dot(q, n) + m_k sum q) = sum_c d_b q_c (d_k n_c + m_k) in float64;   */
    /* dq: sdpa.h's bound on the score error, tm: T_row (ties); both with the float rounding    */
    double *om, *lsem, *dq, *tm;
} attn_ref;

/* Keys a query row sees: all, or with causality (bottom-right aligned) j <= i + kv_len - q_len. */
static inline size_t attn_limit(const sdpa_params *p, size_t i)
{
    if (!p->causal) return p->kv_len;
    if (i + p->kv_len < p->q_len) return 0;
    size_t lim = i + p->kv_len - p->q_len + 1;
    return lim < p->kv_len ? lim : p->kv_len;
}

/* The tolerance of one output row, relative to sum_j w_j |v_jc|:
     E_row = 1e-5 * sqrt(1 + n/256) + 8 u sqrt(d) A,
   n = keys seen, u = 2^-24, A = max_j |scale| sum_i |q_i k_ji| (the score's condition).
   The first term covers f32 accumulation of n weighted values and of l (rounding errors grow
   like sqrt(n) when summed in blocks; 1e-5 is about 80 u), the exp's few ULPs and the final
   division; the second the f32 score dot products (any order), whose absolute error moves
   every output by at most about twice that times the weighted |v|. An f16 or bf16 accumulator
   misses it by orders of magnitude at n = 65536. */
static inline double attn_row_tol(size_t n, size_t d, double A)
{
    return 1e-5 * sqrt(1.0 + (double)n / 256.0) + 8.0 * TL_U * sqrt((double)d) * A;
}

static inline void attn_ref_free(attn_ref *r)
{
    free(r->o), free(r->wabs), free(r->m1), free(r->flush), free(r->lse), free(r->tol), free(r->ds);
    free(r->s1), free(r->wk), free(r->vmax), free(r->seen), free(r->kind);
    free(r->om), free(r->lsem), free(r->dq), free(r->tm);
    memset(r, 0, sizeof *r);
}

static inline void attn_oracle64(const attn_problem *P, attn_ref *r)
{
    enum { QB = 32 };
    const size_t B = P->B, Hq = P->Hq, G = P->Hq / P->Hk, Lq = P->Lq, Lk = P->Lk, D = P->D,
                 Dv = P->Dv;
    const size_t rows = B * Hq * Lq, nb = D / QB;
    const double scale = P->scale, cap = P->softcap, u = TL_U;
    memset(r, 0, sizeof *r);
    r->o = tl_xmalloc(rows * Dv * sizeof(double)), r->wabs = tl_xmalloc(rows * Dv * sizeof(double));
    r->m1 = tl_xmalloc(rows * Dv * sizeof(double)),
    r->flush = tl_xmalloc(rows * Dv * sizeof(double));
    r->lse = tl_xmalloc(rows * sizeof(double)), r->tol = tl_xmalloc(rows * sizeof(double));
    r->ds = tl_xmalloc(rows * sizeof(double)), r->s1 = tl_xmalloc(rows * sizeof(double));
    r->wk = tl_xmalloc(rows * sizeof(double)), r->vmax = tl_xmalloc(rows * sizeof(double));
    r->seen = tl_xmalloc(rows * sizeof(size_t)), r->kind = tl_xmalloc(rows);
    for (size_t e = 0; e < rows * Dv; e++) r->o[e] = r->wabs[e] = r->m1[e] = r->flush[e] = 0.0;
    for (size_t e = 0; e < rows; e++) {
        r->lse[e] = -INFINITY, r->tol[e] = r->ds[e] = r->s1[e] = r->wk[e] = r->vmax[e] = 0.0;
        r->seen[e] = 0, r->kind[e] = ATTN_ROW_NOTHING;
    }
    if (P->q8_model) {
        r->om = tl_xmalloc(rows * Dv * sizeof(double)), r->lsem = tl_xmalloc(rows * sizeof(double));
        r->dq = tl_xmalloc(rows * sizeof(double)), r->tm = tl_xmalloc(rows * sizeof(double));
        for (size_t e = 0; e < rows * Dv; e++) r->om[e] = 0.0;
        for (size_t e = 0; e < rows; e++) r->lsem[e] = -INFINITY, r->dq[e] = r->tm[e] = 0.0;
    }
    const size_t nk = Lk ? Lk : 1, nd = D ? D : 1, nbb = nb ? nb : 1;
    double *s = tl_xmalloc(nk * sizeof(double)), *dsj = tl_xmalloc(nk * sizeof(double));
    double *sm = tl_xmalloc(nk * sizeof(double)), *x = tl_xmalloc(nd * sizeof(double));
    double *xq = tl_xmalloc(nd * sizeof(double)), *tie = tl_xmalloc(nd * sizeof(double));
    double *bmax = tl_xmalloc(nbb * sizeof(double)),
           *vcol = tl_xmalloc((Dv ? Dv : 1) * sizeof(double));
    size_t *idx = tl_xmalloc(nk * sizeof(size_t));
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++) {
            const size_t hk = h / G, lqb = P->lq ? P->lq[b] : Lq, lkb = P->lk ? P->lk[b] : Lk;
            const double slope = P->slopes ? (double)P->slopes[h] : 0.0;
            const double sink = P->sinks ? (double)P->sinks[h] : -INFINITY;
            for (size_t i = 0; i < lqb; i++) {
                const size_t row = (b * Hq + h) * Lq + i;
                const long long ip = (long long)i + (long long)lkb - (long long)lqb;
                const float *qr = P->q + row * D;
                if (P->q8_model)
                    for (size_t bl = 0; bl < nb; bl++) {
                        bmax[bl] = 0;
                        for (size_t e = bl * QB; e < (bl + 1) * QB; e++) {
                            x[e] = scale * qr[e];
                            /* a compare, not fmax: aarch64 gcc 12 fails to vectorise that
                               reduction (an internal compiler error) */
                            if (fabs(x[e]) > bmax[bl]) bmax[bl] = fabs(x[e]);
                        }
                        /* the model's quantized row: xq = d q; tie[e] = d where q may be either
                         * integer */
                        const double db = bmax[bl] / 127.0;
                        for (size_t e = bl * QB; e < (bl + 1) * QB; e++) {
                            const double t = db > 0 ? x[e] / db : 0.0, a = fabs(t), fl = floor(a);
                            double qa = floor(a + 0.5);
                            if (qa > 127) qa = 127;
                            xq[e] = db * (t < 0 ? -qa : qa);
                            tie[e] = fabs(a - fl - 0.5) < 0x1p-13 ? db : 0.0;
                        }
                    }
                size_t n = 0;
                bool nan_row = false;
                double mx = -INFINITY, mxm = -INFINITY, A = 0, dsmax = 0, dq = 0, tmax = 0, R = 0;
                for (size_t j = 0; j < lkb; j++) {
                    const long long jj = (long long)j;
                    const double mraw =
                        P->mask ? P->mask[b * P->mbs + h * P->mhs + i * P->mis + j] : 0.0;
                    if ((P->causal && jj > ip) ||
                        (P->window && llabs(ip - jj) >= (long long)P->window) || mraw == -INFINITY)
                        continue; /* never read */
                    /* exact: a product of two floats fits in double */
                    const double mv = P->mask_scales ? (double)P->mask_scales[h] * mraw : mraw;
                    const float *kr = P->k + ((b * P->Hk + hk) * Lk + j) * D;
                    const double *km =
                        P->kmodel ? P->kmodel + ((b * P->Hk + hk) * Lk + j) * D : NULL;
                    double acc = 0, mag = 0, accm = 0, dqj = 0, tj = 0, rj = 0;
                    for (size_t e = 0; e < D; e++) {
                        acc += (double)qr[e] * kr[e];
                        mag += fabs((double)qr[e] * kr[e]);
                    }
                    if (P->q8_model)
                        for (size_t bl = 0; bl < nb; bl++) {
                            double ka = 0, kb = 0, xa = 0;
                            for (size_t e = bl * QB; e < (bl + 1) * QB; e++) {
                                ka += fabs((double)kr[e]), kb = fmax(kb, fabs((double)kr[e]));
                                xa += fabs(x[e]);
                                accm += xq[e] * (km ? km[e] : kr[e]);
                                tj += tie[e] * fabs((double)kr[e]);
                            }
                            dqj += bmax[bl] / 254.0 * ka;
                            rj += xa * kb;
                        }
                    double y = scale * acc, ym = accm;
                    if (cap > 0) y = cap * tanh(y / cap), ym = cap * tanh(ym / cap);
                    const double bias = -slope * (double)llabs(ip - jj);
                    const double sc = y + bias + mv;
                    if (isnan(sc) || sc == INFINITY) nan_row = true;
                    s[n] = sc, sm[n] = ym + bias + mv;
                    dsj[n] = 3.0 * u * (fabs(y) + fabs(bias) + fabs(mv));
                    idx[n++] = j;
                    if (sc > mx) mx = sc;
                    if (sm[n - 1] > mxm) mxm = sm[n - 1];
                    if (fabs(scale) * mag > A) A = fabs(scale) * mag;
                    const double ds =
                        dsj[n - 1] + (cap > 0 ? (2 * P->tanh_ulp + 2) * u * cap : 0.0);
                    if (ds > dsmax) dsmax = ds;
                    if (dqj > dq) dq = dqj;
                    if (tj > tmax) tmax = tj;
                    if (P->k_min && rj > R) R = rj;
                }
                r->seen[row] = n;
                r->kind[row] = nan_row ? ATTN_ROW_NAN : n == 0 ? ATTN_ROW_NOTHING : ATTN_ROW_KEYS;
                r->lse[row] = nan_row ? NAN : sink;
                if (P->q8_model) r->lsem[row] = sink;
                if (r->kind[row] != ATTN_ROW_KEYS) continue;
                const double M = fmax(mx, sink), Mm = fmax(mxm, sink);
                double wk = 0, lm = 0, s1 = 0, ws = 0, vmax = 0;
                for (size_t t = 0; t < n; t++) {
                    wk += (s[t] = exp(s[t] - M)); /* the weight */
                    if (P->q8_model) lm += (sm[t] = exp(sm[t] - Mm));
                }
                double l = wk;
                if (sink > -INFINITY) {
                    ws = exp(sink - M);
                    l += ws;
                    lm += exp(sink - Mm);
                }
                for (size_t e = 0; e < Dv; e++) vcol[e] = 0.0;
                for (size_t t = 0; t < n; t++) {
                    const float *vr = P->v + ((b * P->Hk + hk) * Lk + idx[t]) * Dv;
                    const double w = s[t], wd = w * dsj[t];
                    s1 += wd;
                    for (size_t e = 0; e < Dv; e++) {
                        const double vv = vr[e], av = fabs(vv);
                        r->o[row * Dv + e] += w * vv;
                        r->wabs[row * Dv + e] += w * av;
                        r->m1[row * Dv + e] += wd * av;
                        if (P->q8_model) r->om[row * Dv + e] += sm[t] * vv;
                        if (av > vcol[e]) vcol[e] = av;
                    }
                }
                for (size_t e = 0; e < Dv; e++) {
                    r->o[row * Dv + e] /= l;
                    r->wabs[row * Dv + e] /= l;
                    r->m1[row * Dv + e] /= l;
                    r->flush[row * Dv + e] = (double)n * SDPA_TEST_FLUSH * vcol[e] / l;
                    if (P->q8_model) r->om[row * Dv + e] /= lm;
                    if (vcol[e] > vmax) vmax = vcol[e];
                }
                r->lse[row] = M + log(l);
                r->tol[row] = attn_row_tol(n, D, A);
                r->ds[row] = dsmax;
                if (ws > 0)
                    s1 += ws * u * fabs(sink - M); /* the rounding of the sink weight's exponent */
                r->s1[row] = s1 / l;
                r->wk[row] = wk / l;
                r->vmax[row] = vmax;
                if (P->q8_model) {
                    /* the float rounding: each block's terms and their sum over blocks, relative
                       to sum |x k| and the bound itself; with a minimum also to what d_k dot and
                       m_k sum q reach on their own, sum_c |x_c| (|k_c| + 2 |m_k|), |m_k| at most
                       the block's largest |k| (an element of n = 0 is m_k itself: the reference
                       quantizers give every block one), so sum_b sum |x| max |k| = R bounds it */
                    const double fr = (double)(nb + 8) * u * (A + dq + 2 * R);
                    r->lsem[row] = Mm + log(lm);
                    r->dq[row] = dq + fr;
                    r->tm[row] = tmax + fr;
                }
            }
        }
    free(s), free(dsj), free(sm), free(x), free(xq), free(tie), free(bmax), free(vcol), free(idx);
}

/* The plain attention of p (causal or not, no other modifier) over dense views. */
static inline void attn_oracle(const sdpa_params *p, const tview *q, const tview *k, const tview *v,
                               attn_ref *r)
{
    const attn_problem P = {.B = p->batch,
                            .Hq = p->q_heads,
                            .Hk = p->kv_heads,
                            .Lq = p->q_len,
                            .Lk = p->kv_len,
                            .D = p->head_dim,
                            .Dv = p->v_dim ? p->v_dim : p->head_dim,
                            .q = q->vals,
                            .k = k->vals,
                            .v = v->vals,
                            .scale = p->scale != 0.0f ? (double)p->scale
                                                      : 1.0 / sqrt((double)p->head_dim),
                            .causal = p->causal};
    attn_oracle64(&P, r);
}

/* The largest |error| / tolerance seen by attn_check since it was last reset: printed by the
   tests, so that a tolerance far looser than the errors met in practice is visible. */
static double attn_worst_ratio;

/* Checks o (and lse, stored densely in lse_buf at lse_origin with sentinels around it) against
   the oracle, and that no element of o's allocation outside the view was written. Returns the
   number of failed checks. */
static inline long attn_check(const char *what, const sdpa_params *p, const tview *o,
                              const float *lse_buf, size_t lse_origin, size_t lse_elems,
                              const attn_ref *r)
{
    const long before = tl_case_failures;
    const size_t B = p->batch, Hq = p->q_heads, Tq = p->q_len, Dv = o->D;
    unsigned char *in_view = tl_xmalloc(o->n_elems);
    memset(in_view, 0, o->n_elems);
    const float *ob = o->buf;
    bool stop = false;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < Tq; i++) {
                const size_t row = (b * Hq + h) * Tq + i;
                for (size_t c = 0; c < Dv; c++) {
                    const ptrdiff_t idx = tview_index(o, b, h, i, c);
                    in_view[idx] = 1;
                    if (stop) continue;
                    const float got = ob[idx];
                    const double ref = r->o[row * Dv + c];
                    if (r->seen[row] == 0) {
                        if (!CHECK(got == 0.0f,
                                   "%s: b=%zu h=%zu i=%zu sees no key: o[%zu]=%g, want 0", what, b,
                                   h, i, c, got))
                            stop = true;
                        continue;
                    }
                    const double tol = r->tol[row] * r->wabs[row * Dv + c] + FLT_TRUE_MIN;
                    if (fabs(got - ref) / tol > attn_worst_ratio)
                        attn_worst_ratio = fabs(got - ref) / tol;
                    if (!CHECK(fabs(got - ref) <= tol,
                               "%s: b=%zu h=%zu i=%zu (sees %zu keys) o[%zu]=%.9g, float64 %.9g, "
                               "|err| %.3g > tol %.3g "
                               "(E_row %.3g)",
                               what, b, h, i, r->seen[row], c, got, ref, fabs(got - ref), tol,
                               r->tol[row]))
                        stop = true;
                }
                if (lse_buf && !stop) {
                    const float got = lse_buf[lse_origin + row];
                    const double ref = r->lse[row];
                    if (r->seen[row] == 0) {
                        if (!CHECK(got == -INFINITY,
                                   "%s: b=%zu h=%zu i=%zu sees no key: lse=%g, want -inf", what, b,
                                   h, i, got))
                            stop = true;
                    } else {
                        const double tol = r->tol[row] * (1.0 + fabs(ref));
                        if (!CHECK(fabs(got - ref) <= tol,
                                   "%s: b=%zu h=%zu i=%zu lse=%.9g, float64 %.9g, tol %.3g", what,
                                   b, h, i, got, ref, tol))
                            stop = true;
                    }
                }
            }
    size_t outside = 0, first = 0;
    for (size_t e = 0; e < o->n_elems; e++)
        if (!in_view[e] && !tl_is_sentinel(ob[e]))
            if (outside++ == 0) first = e;
    CHECK(outside == 0,
          "%s: %zu elements of o outside the view were written (first at element %zd from "
          "[0][0][0][0])",
          what, outside, (ptrdiff_t)first - o->origin);
    if (lse_buf) {
        size_t bad = 0;
        for (size_t e = 0; e < lse_elems; e++)
            if ((e < lse_origin || e >= lse_origin + B * Hq * Tq) && !tl_is_sentinel(lse_buf[e]))
                bad++;
        CHECK(bad == 0, "%s: %zu elements around lse were written", what, bad);
    }
    free(in_view);
    return tl_case_failures - before;
}

#endif /* SDPA_TEST_ATTN_H */
