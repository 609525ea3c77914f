/* test_layouts.c -- ragged (padded, packed) and paged K/V, and sdpa_merge, on every implementation against a float64 oracle */
#include "attn.h"
#include "test_pools.h"

/*
 * The serving layouts of sdpa_params (issue #15), checked on every implementation of the
 * registry against an oracle written here, in double, from the contract in sdpa.h. A problem
 * is a batch of sequences of their own lengths (lq_b queries, lk_b keys), held as logical data
 * [b][head][token][dim] (the values as stored: f16/bf16 K and V converted exactly); the call
 * sees them through one of the physical forms:
 *
 *   queries  padded (q_lens, the view [B][Hq][q_len][D]) or packed (cu_q, token-major
 *            [tokens][Hq][D], batch_stride garbage: it must be unused), or neither (q_len each)
 *   keys     padded (kv_lens), packed (cu_kv, head-major [Hkv][tokens][D]) or paged (a block
 *            table over pages [n_pages][Hkv][page][D], shuffled)
 *
 * Storage a sequence does not own (keys past lk_b, page rows past it, spare pages, mask entries
 * past a sequence's lengths) holds NaN: a read of it reaches an output as NaN. o and lse are
 * sentinel-filled: every element outside the sequences' rows must stay so. For each row
 * (b, h, i < lq_b), i' = i + lk_b - lq_b, the oracle attends the keys j < lk_b with causal
 * j <= i', window |i' - j| < w and a mask entry other than -inf, scores
 * softcap(scale q.k) - slope |i' - j| + mask, and a sink in the denominator.
 *
 * Tolerance of an output element: attn_row_tol (attn.h: f32 accumulation, the exp, the score
 * dot products) times sum_j w_j |v_jc| / l, plus what the modifiers add: a score off by ds_j
 * moves the output by at most 2 sum_j (w_j / l) ds_j (|v_jc| + |o_c|), bounded here with
 * max_j ds_j, ds_j = 3 u (|softcap(s)| + |bias| + |mask|) + (2 tanh_ulp + 2) u c (the products
 * and sums that add them, and the softcap's own error, as test_variants.c derives them).
 */

static bench_pool *g_pool[2]; /* 2 threads, and 3 threads in shuffled order */

#define F32 SDPA_F32
#define F16 SDPA_F16
#define BF16 SDPA_BF16

enum { Q_EACH = 0, Q_PADDED, Q_PACKED };
enum { KV_EACH = 0, KV_PADDED, KV_PACKED, KV_PAGED };

typedef struct lcase {
    const char *name;
    size_t      B, qh, kvh, d;
    size_t      lq[16], lk[16]; /* per sequence (B <= 16) */
    int         qf, kf;         /* Q_*, KV_* */
    size_t      page;           /* KV_PAGED: keys per page */
    sdpa_dtype  kt;             /* K and V */
    bool        causal;
    size_t      window;
    float       softcap;
    bool        alibi, mask, sinks;
} lcase;

static const char *dtn(sdpa_dtype t) { return t == F16 ? "f16" : t == BF16 ? "bf16" : "f32"; }

/* ------------------------------------------------------------------------------------------ */
/* A problem: logical data, the physical views of one form, and the parameters of the call.    */
/* ------------------------------------------------------------------------------------------ */
enum { MARGIN = 16 };

typedef struct lprob {
    const lcase *c;
    size_t       Lq, Lk, Dv;     /* the call's q_len and kv_len (the longest), v_dim */
    float       *q, *k, *v;      /* logical, dense [B][H][L][D], the values as stored */
    float       *mk;             /* logical mask [B][Hq][Lq][Lk], as stored (f16) */
    float       *slopes, *sinks;
    /* physical */
    float       *qbuf, *obuf, *lse; /* o and lse with MARGIN floats either side */
    size_t       qn, on, lsen;      /* floats in qbuf, obuf (without margins), lse (rows) */
    void        *kbuf, *vbuf;
    uint16_t    *mbuf;
    size_t       q_lens[16], kv_lens[16], cu_q[17], cu_kv[17];
    int32_t     *table;
    size_t       n_pages, max_pages;
    sdpa_params  p;
    sdpa_tensor  tq, tk, tv, to, tm;
    char         what[300];
} lprob;

static size_t qrow_off(const lprob *pr, size_t b, size_t h, size_t i) /* element of q/o row */
{
    const lcase *c = pr->c;
    if (c->qf == Q_PACKED) return ((pr->cu_q[b] + i) * c->qh + h) * c->d;
    return ((b * c->qh + h) * pr->Lq + i) * c->d;
}

static void lprob_init(lprob *pr, const lcase *c, uint64_t seed)
{
    memset(pr, 0, sizeof *pr);
    pr->c = c;
    tl_rng r = {seed};
    const size_t B = c->B, Hq = c->qh, Hk = c->kvh, D = c->d;
    pr->Dv = D;
    for (size_t b = 0; b < B; b++) {
        if (c->lq[b] > pr->Lq) pr->Lq = c->lq[b];
        if (c->lk[b] > pr->Lk) pr->Lk = c->lk[b];
    }
    if (pr->Lq == 0) pr->Lq = 1;
    if (pr->Lk == 0) pr->Lk = 1;
    const size_t Lq = pr->Lq, Lk = pr->Lk;
    pr->q = tl_xmalloc(B * Hq * Lq * D * sizeof(float));
    pr->k = tl_xmalloc(B * Hk * Lk * D * sizeof(float));
    pr->v = tl_xmalloc(B * Hk * Lk * D * sizeof(float));
    for (size_t e = 0; e < B * Hq * Lq * D; e++) pr->q[e] = tl_uniform(&r, -1.0f, 1.0f);
    for (size_t e = 0; e < B * Hk * Lk * D; e++) {
        pr->k[e] = tl_stored(c->kt, tl_uniform(&r, -1.0f, 1.0f));
        pr->v[e] = tl_stored(c->kt, tl_uniform(&r, -1.0f, 1.0f));
    }
    /* the per-sequence length arrays of both forms */
    for (size_t b = 0; b < B; b++) {
        pr->q_lens[b] = c->lq[b], pr->kv_lens[b] = c->lk[b];
        pr->cu_q[b + 1] = pr->cu_q[b] + c->lq[b];
        pr->cu_kv[b + 1] = pr->cu_kv[b] + c->lk[b];
    }
    sdpa_params *p = &pr->p;
    p->batch = B, p->q_heads = Hq, p->kv_heads = Hk, p->q_len = Lq, p->kv_len = Lk, p->head_dim = D;
    p->causal = c->causal, p->window = c->window, p->softcap = c->softcap;

    /* queries and outputs */
    const size_t qtok = c->qf == Q_PACKED ? pr->cu_q[B] : B * Lq;
    pr->qn = (qtok ? qtok : 1) * Hq * D;
    pr->qbuf = tl_xmalloc(pr->qn * sizeof(float));
    for (size_t e = 0; e < pr->qn; e++) pr->qbuf[e] = NAN; /* rows no sequence owns */
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++)
                memcpy(pr->qbuf + qrow_off(pr, b, h, i), pr->q + ((b * Hq + h) * Lq + i) * D, D * sizeof(float));
    pr->on = pr->qn;
    pr->obuf = tl_xmalloc((pr->on + 2 * MARGIN) * sizeof(float));
    tl_fill_sentinel(pr->obuf, pr->on + 2 * MARGIN);
    pr->lsen = B * Hq * Lq;
    pr->lse = tl_xmalloc((pr->lsen + 2 * MARGIN) * sizeof(float));
    tl_fill_sentinel(pr->lse, pr->lsen + 2 * MARGIN);
    p->lse = pr->lse + MARGIN;
    if (c->qf == Q_PACKED) {
        p->cu_q = pr->cu_q;
        pr->tq = (sdpa_tensor){pr->qbuf, F32, 987654321, (ptrdiff_t)D, (ptrdiff_t)(Hq * D)};
    } else {
        if (c->qf == Q_PADDED) p->q_lens = pr->q_lens;
        pr->tq = (sdpa_tensor){pr->qbuf, F32, (ptrdiff_t)(Hq * Lq * D), (ptrdiff_t)(Lq * D), (ptrdiff_t)D};
    }
    pr->to = pr->tq;
    pr->to.data = pr->obuf + MARGIN;

    /* keys and values */
    const size_t es = sdpa_dtype_size(c->kt);
    if (c->kf == KV_PAGED) {
        const size_t ps = c->page;
        size_t used = 0, mp = 1;
        for (size_t b = 0; b < B; b++) {
            const size_t n = (c->lk[b] + ps - 1) / ps;
            used += n;
            if (n > mp) mp = n;
        }
        pr->max_pages = mp + 1; /* a spare entry per sequence, out of range: never used */
        pr->n_pages = used + 3; /* spare pages, NaN throughout */
        pr->table = tl_xmalloc(B * pr->max_pages * sizeof(int32_t));
        size_t *perm = tl_xmalloc(pr->n_pages * sizeof(size_t));
        for (size_t e = 0; e < pr->n_pages; e++) perm[e] = e;
        for (size_t e = pr->n_pages - 1; e > 0; e--) {
            const size_t j = tl_below(&r, e + 1), t = perm[e];
            perm[e] = perm[j], perm[j] = t;
        }
        const size_t elems = pr->n_pages * Hk * ps * D;
        pr->kbuf = tl_xmalloc(elems * es), pr->vbuf = tl_xmalloc(elems * es);
        tl_fill_nan(pr->kbuf, c->kt, elems), tl_fill_nan(pr->vbuf, c->kt, elems);
        size_t next = 0;
        for (size_t b = 0; b < B; b++)
            for (size_t pg = 0; pg < pr->max_pages; pg++) {
                int32_t *t = &pr->table[b * pr->max_pages + pg];
                if (pg * ps >= c->lk[b]) {
                    *t = pg % 2 ? -7 : (int32_t)(pr->n_pages + 5); /* unused: never checked */
                    continue;
                }
                const size_t P = perm[next++];
                *t = (int32_t)P;
                for (size_t h = 0; h < Hk; h++)
                    for (size_t j = pg * ps; j < c->lk[b] && j < (pg + 1) * ps; j++)
                        for (size_t e = 0; e < D; e++) {
                            const size_t at = ((P * Hk + h) * ps + (j - pg * ps)) * D + e;
                            tl_put(pr->kbuf, c->kt, at, pr->k[((b * Hk + h) * Lk + j) * D + e]);
                            tl_put(pr->vbuf, c->kt, at, pr->v[((b * Hk + h) * Lk + j) * D + e]);
                        }
            }
        free(perm);
        p->block_table = pr->table, p->page_size = ps, p->max_pages = pr->max_pages, p->n_pages = pr->n_pages;
        p->kv_lens = pr->kv_lens;
        pr->tk = (sdpa_tensor){pr->kbuf, c->kt, (ptrdiff_t)(Hk * ps * D), (ptrdiff_t)(ps * D), (ptrdiff_t)D};
    } else if (c->kf == KV_PACKED) {
        const size_t tok = pr->cu_kv[B] ? pr->cu_kv[B] : 1, elems = Hk * tok * D;
        pr->kbuf = tl_xmalloc(elems * es), pr->vbuf = tl_xmalloc(elems * es);
        tl_fill_nan(pr->kbuf, c->kt, elems), tl_fill_nan(pr->vbuf, c->kt, elems);
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < Hk; h++)
                for (size_t j = 0; j < c->lk[b]; j++)
                    for (size_t e = 0; e < D; e++) {
                        const size_t at = (h * tok + pr->cu_kv[b] + j) * D + e;
                        tl_put(pr->kbuf, c->kt, at, pr->k[((b * Hk + h) * Lk + j) * D + e]);
                        tl_put(pr->vbuf, c->kt, at, pr->v[((b * Hk + h) * Lk + j) * D + e]);
                    }
        p->cu_kv = pr->cu_kv;
        pr->tk = (sdpa_tensor){pr->kbuf, c->kt, -123456789, (ptrdiff_t)(tok * D), (ptrdiff_t)D};
    } else {
        const size_t elems = B * Hk * Lk * D;
        pr->kbuf = tl_xmalloc(elems * es), pr->vbuf = tl_xmalloc(elems * es);
        tl_fill_nan(pr->kbuf, c->kt, elems), tl_fill_nan(pr->vbuf, c->kt, elems);
        for (size_t b = 0; b < B; b++)
            for (size_t e = 0; e < Hk * Lk * D; e++) {
                const size_t j = e / D % Lk, at = b * Hk * Lk * D + e;
                if (j >= c->lk[b]) continue;
                tl_put(pr->kbuf, c->kt, at, pr->k[at]);
                tl_put(pr->vbuf, c->kt, at, pr->v[at]);
            }
        if (c->kf == KV_PADDED) p->kv_lens = pr->kv_lens;
        pr->tk = (sdpa_tensor){pr->kbuf, c->kt, (ptrdiff_t)(Hk * Lk * D), (ptrdiff_t)(Lk * D), (ptrdiff_t)D};
    }
    pr->tv = pr->tk;
    pr->tv.data = pr->vbuf;

    if (c->mask) { /* f16, [B][Hq][Lq][Lk] by per-sequence index; NaN outside each sequence */
        const size_t n = B * Hq * Lq * Lk;
        pr->mk = tl_xmalloc(n * sizeof(float));
        pr->mbuf = tl_xmalloc(n * sizeof(uint16_t));
        for (size_t e = 0; e < n; e++) {
            const size_t j = e % Lk, i = e / Lk % Lq, b = e / (Hq * Lq * Lk);
            float x = tl_uniform(&r, 0.0f, 1.0f) < 0.15f ? -INFINITY : tl_uniform(&r, -2.0f, 2.0f);
            if (i % 11 == 3) x = -INFINITY; /* a row that sees nothing */
            if (i >= c->lq[b] || j >= c->lk[b]) x = NAN;
            pr->mbuf[e] = sdpa_f32_to_f16(x);
            pr->mk[e] = sdpa_f16_to_f32(pr->mbuf[e]);
        }
        pr->tm = (sdpa_tensor){pr->mbuf, F16, (ptrdiff_t)(Hq * Lq * Lk), (ptrdiff_t)(Lq * Lk), (ptrdiff_t)Lk};
        p->mask = &pr->tm;
    }
    if (c->alibi) p->alibi_slopes = pr->slopes = tl_alibi_slopes(Hq);
    if (c->sinks) p->sinks = pr->sinks = tl_sinks(&r, Hq);
    static const char *const qn[] = {"q each", "q padded", "q packed"};
    static const char *const kn[] = {"kv each", "kv padded", "kv packed", "kv paged"};
    int w = snprintf(pr->what, sizeof pr->what, "%s [B=%zu hq=%zu hkv=%zu d=%zu %s %s", c->name, B, Hq, Hk, D,
                     qn[c->qf], kn[c->kf]);
#define MORE(...) (w += snprintf(pr->what + w, w < (int)sizeof pr->what ? sizeof pr->what - (size_t)w : 0, __VA_ARGS__))
    if (c->kf == KV_PAGED) MORE(" page=%zu", c->page);
    MORE(" %s%s", dtn(c->kt), c->causal ? " causal" : "");
    if (c->window) MORE(" window=%zu", c->window);
    if (c->softcap != 0) MORE(" softcap=%g", c->softcap);
    if (c->alibi) MORE(" alibi");
    if (c->mask) MORE(" mask");
    if (c->sinks) MORE(" sinks");
    MORE("]");
#undef MORE
}

static void lprob_free(lprob *pr)
{
    free(pr->q), free(pr->k), free(pr->v), free(pr->mk), free(pr->slopes), free(pr->sinks);
    free(pr->qbuf), free(pr->obuf), free(pr->lse), free(pr->kbuf), free(pr->vbuf), free(pr->mbuf);
    free(pr->table);
}

static sdpa_status lprob_run(lprob *pr, const sdpa_impl *impl, bench_pool *pool)
{
    return tl_forward_on(impl, &pr->p, pool, &pr->tq, &pr->tk, &pr->tv, &pr->to);
}

/* ------------------------------------------------------------------------------------------ */
/* The oracle and the check                                                                     */
/* ------------------------------------------------------------------------------------------ */
typedef struct lref {
    double *o, *wabs, *lse, *tol, *ds; /* per element (o, wabs) or per row */
    size_t *seen;
} lref;

static void lref_free(lref *r) { free(r->o), free(r->wabs), free(r->lse), free(r->tol), free(r->ds), free(r->seen); }

static void oracle(const lprob *pr, const sdpa_impl *impl, lref *r)
{
    const lcase *c = pr->c;
    const size_t B = c->B, Hq = c->qh, G = c->qh / c->kvh, Lq = pr->Lq, Lk = pr->Lk, D = c->d, rows = B * Hq * Lq;
    const double scale = 1.0 / sqrt((double)D), u = TL_U, cap = c->softcap;
    const double tanh_ulp = sdpa_impl_tanh_max_ulp(impl);
    r->o = tl_xmalloc(rows * D * sizeof(double)), r->wabs = tl_xmalloc(rows * D * sizeof(double));
    r->lse = tl_xmalloc(rows * sizeof(double)), r->tol = tl_xmalloc(rows * sizeof(double));
    r->ds = tl_xmalloc(rows * sizeof(double)), r->seen = tl_xmalloc(rows * sizeof(size_t));
    double *s = tl_xmalloc(Lk * sizeof(double));
    bool *in = tl_xmalloc(Lk * sizeof(bool));
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++) {
                const size_t row = (b * Hq + h) * Lq + i, hk = h / G;
                const long long ip = (long long)i + (long long)c->lk[b] - (long long)c->lq[b];
                const float *qr = pr->q + row * D;
                double mx = pr->sinks ? pr->sinks[h] : -INFINITY, A = 0, dsmax = 0;
                size_t n = 0;
                for (size_t j = 0; j < c->lk[b]; j++) {
                    const long long jj = (long long)j;
                    const double mv = pr->mk ? pr->mk[row * Lk + j] : 0.0;
                    in[j] = !(c->causal && jj > ip) && !(c->window && llabs(ip - jj) >= (long long)c->window) &&
                            mv != -INFINITY;
                    if (!in[j]) continue;
                    n++;
                    const float *kr = pr->k + ((b * c->kvh + hk) * Lk + j) * D;
                    double acc = 0, mag = 0;
                    for (size_t e = 0; e < D; e++) acc += (double)qr[e] * kr[e], mag += fabs((double)qr[e] * kr[e]);
                    double x = acc * scale;
                    if (cap > 0) x = cap * tanh(x / cap);
                    const double bias = pr->slopes ? -(double)pr->slopes[h] * (double)llabs(ip - jj) : 0.0;
                    x += bias + mv;
                    s[j] = x;
                    if (x > mx) mx = x;
                    if (mag * scale > A) A = mag * scale;
                    const double ds = 3 * u * (fabs(x - bias - mv) + fabs(bias) + fabs(mv)) +
                                      (cap > 0 ? (2 * tanh_ulp + 2) * u * cap : 0.0);
                    if (ds > dsmax) dsmax = ds;
                }
                double l = pr->sinks && pr->sinks[h] != -INFINITY ? exp(pr->sinks[h] - mx) : 0.0;
                for (size_t j = 0; j < c->lk[b]; j++)
                    if (in[j]) l += (s[j] = exp(s[j] - mx));
                r->seen[row] = n;
                r->tol[row] = attn_row_tol(n, D, A);
                r->ds[row] = dsmax;
                r->lse[row] = n ? mx + log(l) : pr->sinks ? pr->sinks[h] : -INFINITY;
                for (size_t e = 0; e < D; e++) {
                    double acc = 0, mag = 0;
                    for (size_t j = 0; j < c->lk[b]; j++) {
                        if (!in[j]) continue;
                        const double vv = pr->v[((b * c->kvh + hk) * Lk + j) * D + e];
                        acc += s[j] * vv, mag += s[j] * fabs(vv);
                    }
                    r->o[row * D + e] = n ? acc / l : 0.0;
                    r->wabs[row * D + e] = n ? mag / l : 0.0;
                }
            }
    free(s), free(in);
}

static double g_worst; /* the largest |error| / tolerance met, printed per implementation */

/* o and lse against the oracle, and every element no sequence owns still a sentinel. */
static void check(const lprob *pr, const lref *r)
{
    const lcase *c = pr->c;
    const size_t Hq = c->qh, Lq = pr->Lq, D = c->d;
    unsigned char *own = tl_xmalloc(pr->on);
    memset(own, 0, pr->on);
    const float *o = pr->obuf + MARGIN, *lse = pr->lse + MARGIN;
    bool stop = false;
    for (size_t b = 0; b < c->B && !stop; b++)
        for (size_t h = 0; h < Hq && !stop; h++)
            for (size_t i = 0; i < c->lq[b] && !stop; i++) {
                const size_t row = (b * Hq + h) * Lq + i, at = qrow_off(pr, b, h, i);
                for (size_t e = 0; e < D && !stop; e++) {
                    own[at + e] = 1;
                    const float got = o[at + e];
                    const double ref = r->o[row * D + e];
                    if (r->seen[row] == 0) {
                        stop = !CHECK(got == 0.0f, "%s: b=%zu h=%zu i=%zu sees no key: o[%zu] = %g, want 0", pr->what,
                                      b, h, i, e, got);
                        continue;
                    }
                    const double tol = r->tol[row] * r->wabs[row * D + e] +
                                       2 * r->ds[row] * (r->wabs[row * D + e] + fabs(ref)) + FLT_TRUE_MIN;
                    if (fabs(got - ref) / tol > g_worst) g_worst = fabs(got - ref) / tol;
                    stop = !CHECK(fabs(got - ref) <= tol,
                                  "%s: b=%zu h=%zu i=%zu (sees %zu keys) o[%zu] = %.9g, float64 %.9g, |err| %.3g > %.3g",
                                  pr->what, b, h, i, r->seen[row], e, got, ref, fabs(got - ref), tol);
                }
                const float gl = lse[row];
                const double rl = r->lse[row];
                if (!stop && r->seen[row] == 0)
                    stop = !CHECK(gl == (float)rl, "%s: b=%zu h=%zu i=%zu sees no key: lse %g, want %g", pr->what, b, h,
                                  i, gl, rl);
                else if (!stop)
                    stop = !CHECK(fabs(gl - rl) <= r->tol[row] * (1 + fabs(rl)) + 2 * r->ds[row],
                                  "%s: b=%zu h=%zu i=%zu lse %.9g, float64 %.9g", pr->what, b, h, i, gl, rl);
            }
    size_t bad = 0;
    for (size_t e = 0; e < pr->on + 2 * MARGIN; e++) {
        const bool in = e >= MARGIN && e < MARGIN + pr->on && own[e - MARGIN];
        if (!in && !tl_is_sentinel(pr->obuf[e])) bad++;
    }
    CHECK(bad == 0, "%s: %zu elements of o that no sequence's row owns were written", pr->what, bad);
    bad = 0;
    for (size_t e = 0; e < pr->lsen + 2 * MARGIN; e++) {
        const size_t row = e - MARGIN;
        bool in = e >= MARGIN && row < pr->lsen;
        if (in) {
            const size_t i = row % Lq, b = row / (Hq * Lq);
            in = i < c->lq[b];
        }
        if (!in && !tl_is_sentinel(pr->lse[e])) bad++;
    }
    CHECK(bad == 0, "%s: %zu lse entries past the sequences' rows were written", pr->what, bad);
    free(own);
}

/* Runs a case serially against the oracle, then on 2 and 3 threads for the same bits. */
static void run_case(const sdpa_impl *impl, const lcase *c, uint64_t seed)
{
    lprob pr;
    lprob_init(&pr, c, seed);
    lref r;
    oracle(&pr, impl, &r);
    sdpa_status st = lprob_run(&pr, impl, NULL);
    char msg[256] = "";
    if (st != SDPA_OK) sdpa_validate(&pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, msg, sizeof msg);
    if (CHECK(st == SDPA_OK, "%s: status %s (%s)", pr.what, sdpa_status_str(st), msg)) {
        check(&pr, &r);
        float *o1 = tl_xmalloc((pr.on + 2 * MARGIN) * sizeof(float)), *l1 = tl_xmalloc((pr.lsen + 2 * MARGIN) * sizeof(float));
        memcpy(o1, pr.obuf, (pr.on + 2 * MARGIN) * sizeof(float));
        memcpy(l1, pr.lse, (pr.lsen + 2 * MARGIN) * sizeof(float));
        for (size_t t = 0; t < 2 && !tl_sampled_out(t + 1); t++) {
            tl_fill_sentinel(pr.obuf, pr.on + 2 * MARGIN);
            tl_fill_sentinel(pr.lse, pr.lsen + 2 * MARGIN);
            st = lprob_run(&pr, impl, g_pool[t]);
            CHECK(st == SDPA_OK && memcmp(o1, pr.obuf, (pr.on + 2 * MARGIN) * sizeof(float)) == 0 &&
                      memcmp(l1, pr.lse, (pr.lsen + 2 * MARGIN) * sizeof(float)) == 0,
                  "%s: %zu threads give other bits than one", pr.what, bench_pool_threads(g_pool[t]));
        }
        free(o1), free(l1);
    }
    lref_free(&r);
    lprob_free(&pr);
}

/* ------------------------------------------------------------------------------------------ */
/* The cases                                                                                    */
/* ------------------------------------------------------------------------------------------ */
static size_t sz(size_t native, size_t sampled) { return tl_sample() > 1 ? sampled : native; }

/* Uneven decodes: a sequence of 0 keys, one of 1, long ones split into KV chunks (>= 2048). */
static lcase decodes(int qf, int kf, size_t page, sdpa_dtype t)
{
    lcase c = {"ragged decodes", 6, 8, 2, 64, {1, 1, 1, 1, 1, 1}, {1, 100, 0, 3000, 777, 5000}, qf, kf, page, t, false, 0, 0.0f, false, false, false};
    c.lk[5] = sz(5000, 2600);
    c.lk[3] = sz(3000, 2100);
    return c;
}

/* Ragged prefills, causal: a sequence of 0 queries, more queries than keys, a long one. */
static lcase prefills(int qf, int kf, size_t page, sdpa_dtype t)
{
    lcase c = {"ragged prefills", 4, 4, 2, 64, {7, 0, 33, 64}, {7, 50, 20, 130}, qf, kf, page, t, true, 0, 0.0f, false, false, false};
    return c;
}

static void t_padded(const sdpa_impl *impl)
{
    lcase a = decodes(Q_PADDED, KV_PADDED, 0, F16);
    run_case(impl, &a, 11);
    lcase b = prefills(Q_PADDED, KV_PADDED, 0, F32);
    run_case(impl, &b, 12);
    lcase c = prefills(Q_EACH, KV_PADDED, 0, BF16); /* every sequence q_len queries */
    for (size_t s = 0; s < c.B; s++) c.lq[s] = 64;
    c.causal = false;
    run_case(impl, &c, 13);
}

static void t_packed(const sdpa_impl *impl)
{
    lcase a = decodes(Q_PACKED, KV_PACKED, 0, F16);
    run_case(impl, &a, 21);
    lcase b = prefills(Q_PACKED, KV_PACKED, 0, F32);
    run_case(impl, &b, 22);
    lcase c = prefills(Q_PADDED, KV_PACKED, 0, BF16); /* the forms mixed */
    run_case(impl, &c, 23);
    lcase d = prefills(Q_PACKED, KV_PADDED, 0, F16);
    d.window = 9;
    run_case(impl, &d, 24);
}

/* vLLM's chunked prefill: one sequence prefilling 512 queries beside 15 decodes. */
static void t_chunked_prefill(const sdpa_impl *impl)
{
    lcase c = {"chunked prefill beside 15 decodes", 16, 4, 1, 64, {0}, {0}, Q_PACKED, KV_PADDED, 0, F16, true, 0, 0.0f, false, false, false};
    c.lq[0] = sz(512, 96);
    c.lk[0] = c.lq[0] + sz(88, 40);
    for (size_t s = 1; s < 16; s++) c.lq[s] = 1, c.lk[s] = 1 + (s * 397) % sz(4200, 1200);
    run_case(impl, &c, 31);
    c.kf = KV_PAGED, c.page = 16;
    run_case(impl, &c, 32);
}

static void t_paged(const sdpa_impl *impl)
{
    static const size_t pages[] = {1, 16, 32, 256};
    static const sdpa_dtype types[] = {F32, F16, BF16, F16};
    for (size_t i = 0; i < 4; i++) {
        lcase a = decodes(Q_PADDED, KV_PAGED, pages[i], types[i]);
        if (pages[i] == 1 && tl_sample() > 1) a.lk[5] = 700, a.lk[3] = 300; /* one unit per key */
        run_case(impl, &a, 41 + i);
        lcase b = prefills(i % 2 ? Q_PACKED : Q_PADDED, KV_PAGED, pages[i], types[3 - i]);
        run_case(impl, &b, 45 + i);
    }
    /* more query rows than a decode unit takes, so the prefill paths page too */
    lcase c = {"paged prefill, 8 heads per KV head", 2, 16, 2, 64, {40, 17}, {300, 17}, Q_PADDED, KV_PAGED, 16, F16, true, 0, 0.0f, false, false, false};
    run_case(impl, &c, 49);
    c.page = 128;
    run_case(impl, &c, 50);
}

static void t_paged_variants(const sdpa_impl *impl)
{
    lcase a = prefills(Q_PACKED, KV_PAGED, 16, F16);
    a.window = 12, a.mask = true, a.softcap = 20.0f, a.alibi = true, a.sinks = true;
    run_case(impl, &a, 51);
    lcase b = decodes(Q_PADDED, KV_PAGED, 32, BF16);
    b.window = 700, b.mask = true, b.sinks = true;
    run_case(impl, &b, 52);
    lcase c = prefills(Q_PADDED, KV_PACKED, 0, F32);
    c.mask = true, c.alibi = true, c.softcap = 5.0f;
    run_case(impl, &c, 53);
}

/* ------------------------------------------------------------------------------------------ */
/* sdpa_merge                                                                                   */
/* ------------------------------------------------------------------------------------------ */
enum { MQ = 3, MH = 4, MD = 64, MK = 1000 };

/* The call of one head group over keys [j0, j1) of k and v ([MK][MD] f32), o and lse out. */
static sdpa_status part_call(const sdpa_impl *impl, const float *q, const float *k, const float *v, size_t j0,
                             size_t j1, float *o, float *lse, const float *sinks)
{
    sdpa_params p = {.batch = 1, .q_heads = MH, .kv_heads = 1, .q_len = MQ, .kv_len = j1 - j0, .head_dim = MD,
                     .lse = lse, .sinks = sinks};
    sdpa_tensor tq = {(void *)q, F32, MH * MQ * MD, MQ * MD, MD}, to = {o, F32, MH * MQ * MD, MQ * MD, MD};
    sdpa_tensor tk = {(void *)(k + j0 * MD), F32, MK * MD, MK * MD, MD}, tv = {(void *)(v + j0 * MD), F32, MK * MD, MK * MD, MD};
    return sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to);
}

static void t_merge(const sdpa_impl *impl)
{
    enum { ROWS = MH * MQ };
    tl_rng r = {61};
    float *q = tl_xmalloc(ROWS * MD * sizeof(float)), *k = tl_xmalloc(MK * MD * sizeof(float)),
          *v = tl_xmalloc(MK * MD * sizeof(float));
    tl_fill(&r, q, ROWS * MD, -1, 1), tl_fill(&r, k, MK * MD, -1, 1), tl_fill(&r, v, MK * MD, -1, 1);
    float ow[ROWS * MD], lw[ROWS], po[4][ROWS * MD], pl[4][ROWS], om[ROWS * MD], lm[ROWS];
    float sinks[MH] = {0.5f, -INFINITY, 2.0f, -1.0f};
    CHECK(part_call(impl, q, k, v, 0, MK, ow, lw, NULL) == SDPA_OK, "the whole call failed");
    /* parts: one key, 399 keys, 600 keys, and an empty part (nothing seen: zeros and -inf) */
    const size_t cut[4][2] = {{0, 1}, {1, 400}, {400, MK}, {0, 0}};
    for (size_t i = 0; i < 3; i++)
        CHECK(part_call(impl, q, k, v, cut[i][0], cut[i][1], po[i], pl[i], NULL) == SDPA_OK, "part %zu failed", i);
    memset(po[3], 0, sizeof po[3]);
    for (size_t e = 0; e < ROWS; e++) pl[3][e] = -INFINITY;
    const float *ops[4] = {po[3], po[0], po[1], po[2]}, *lps[4] = {pl[3], pl[0], pl[1], pl[2]};
    CHECK(sdpa_merge(4, ROWS, MD, ops, MD, lps, om, MD, lm) == SDPA_OK, "merge failed");
    /* against the unsplit call: the same sums in another order, within a few f32 roundings of
       each term (the merge's weights e^(lse_i - lse) and the parts' own roundings) */
    double worst = 0;
    for (size_t e = 0; e < ROWS * MD; e++) {
        const double d = fabs((double)om[e] - ow[e]);
        if (d > worst) worst = d;
        if (!CHECK(d <= 2e-6, "merged o[%zu] = %.9g, the unsplit call %.9g", e, om[e], ow[e])) break;
    }
    for (size_t e = 0; e < ROWS; e++)
        if (!CHECK(fabs(lm[e] - lw[e]) <= 2e-6 * (1 + fabs(lw[e])), "merged lse[%zu] = %.9g, unsplit %.9g", e, lm[e],
                   lw[e]))
            break;
    /* against float64: the whole attention of each row, from the merged result */
    sdpa_params p = {.batch = 1, .q_heads = MH, .kv_heads = 1, .q_len = MQ, .kv_len = MK, .head_dim = MD};
    tview tq, tk, tv, to;
    tview_layout(&tq, 1, MH, MQ, MD, F32, L_DENSE, 0), tview_layout(&tk, 1, 1, MK, MD, F32, L_DENSE, 0);
    tview_layout(&tv, 1, 1, MK, MD, F32, L_DENSE, 0), tview_layout(&to, 1, MH, MQ, MD, F32, L_DENSE, 0);
    tview_alloc(&tq), tview_alloc(&tk), tview_alloc(&tv), tview_alloc(&to);
    memcpy(tq.vals, q, sizeof(float) * ROWS * MD), memcpy(tk.vals, k, sizeof(float) * MK * MD);
    memcpy(tv.vals, v, sizeof(float) * MK * MD), memcpy(to.buf, om, sizeof om);
    attn_ref ref;
    attn_oracle(&p, &tq, &tk, &tv, &ref);
    float lbuf[ROWS];
    memcpy(lbuf, lm, sizeof lm);
    attn_check("merged parts vs float64", &p, &to, lbuf, 0, ROWS, &ref);
    attn_ref_free(&ref);
    tview_free(&tq), tview_free(&tk), tview_free(&tv), tview_free(&to);

    /* in place: o is the first part */
    float ip[ROWS * MD], il[ROWS];
    memcpy(ip, po[1], sizeof ip), memcpy(il, pl[1], sizeof il);
    const float *ops2[3] = {ip, po[0], po[2]}, *lps2[3] = {il, pl[0], pl[2]};
    CHECK(sdpa_merge(3, ROWS, MD, ops2, MD, lps2, ip, MD, il) == SDPA_OK, "in-place merge failed");
    for (size_t e = 0; e < ROWS * MD; e++)
        if (!CHECK(fabs(ip[e] - om[e]) <= 2e-6, "in place: o[%zu] = %.9g, out of place %.9g", e, ip[e], om[e])) break;

    /* sinks: parts without them, then the sink as a part of o = 0 and lse = sink */
    float os[ROWS * MD], ls[ROWS], zo[ROWS * MD], zl[ROWS];
    CHECK(part_call(impl, q, k, v, 0, MK, os, ls, sinks) == SDPA_OK, "the call with sinks failed");
    memset(zo, 0, sizeof zo);
    for (size_t e = 0; e < ROWS; e++) zl[e] = sinks[e / MQ];
    const float *ops3[4] = {po[0], po[1], po[2], zo}, *lps3[4] = {pl[0], pl[1], pl[2], zl};
    CHECK(sdpa_merge(4, ROWS, MD, ops3, MD, lps3, om, MD, lm) == SDPA_OK, "merge with a sink part failed");
    for (size_t e = 0; e < ROWS * MD; e++)
        if (!CHECK(fabs(om[e] - os[e]) <= 2e-6, "sink merged o[%zu] = %.9g, the call with sinks %.9g", e, om[e], os[e]))
            break;
    for (size_t e = 0; e < ROWS; e++)
        CHECK(fabs(lm[e] - ls[e]) <= 2e-6 * (1 + fabs(ls[e])), "sink merged lse[%zu] %.9g, the call %.9g", e, lm[e], ls[e]);

    /* every part empty: zeros and -inf; a NaN lse: the row NaN, the others untouched by it */
    const float *ope[2] = {po[3], po[3]}, *lpe[2] = {pl[3], pl[3]};
    CHECK(sdpa_merge(2, ROWS, MD, ope, MD, lpe, om, MD, lm) == SDPA_OK, "empty merge failed");
    for (size_t e = 0; e < ROWS * MD; e++)
        if (!CHECK(om[e] == 0.0f, "empty parts: o[%zu] = %g, want 0", e, om[e])) break;
    for (size_t e = 0; e < ROWS; e++) CHECK(lm[e] == -INFINITY, "empty parts: lse[%zu] = %g, want -inf", e, lm[e]);
    float nl[ROWS];
    memcpy(nl, pl[1], sizeof nl);
    nl[5] = NAN;
    const float *opn[2] = {po[0], po[1]}, *lpn[2] = {pl[0], nl};
    CHECK(sdpa_merge(2, ROWS, MD, opn, MD, lpn, om, MD, lm) == SDPA_OK, "NaN merge failed");
    CHECK(isnan(lm[5]) && isnan(om[5 * MD]) && isnan(om[5 * MD + MD - 1]), "a NaN lse must make its row NaN");
    CHECK(!isnan(lm[4]) && !isnan(om[4 * MD]) && !isnan(lm[6]), "a NaN lse must leave the other rows alone");
    free(q), free(k), free(v);
}

static void t_merge_bad(void)
{
    tl_start("layouts: sdpa_merge refuses bad input", "api");
    float a[64], b[64], la[4], lb[4], o[64], l[4];
    memset(a, 0, sizeof a), memset(b, 0, sizeof b), memset(la, 0, sizeof la), memset(lb, 0, sizeof lb);
    const float *op[2] = {a, b}, *lp[2] = {la, lb}, *opn[2] = {a, NULL};
    tl_fill_sentinel(o, 64), tl_fill_sentinel(l, 4);
    CHECK(sdpa_merge(0, 4, 16, op, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "0 parts accepted");
    CHECK(sdpa_merge(2, 0, 16, op, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "0 rows accepted");
    CHECK(sdpa_merge(2, 4, 0, op, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "dv 0 accepted");
    CHECK(sdpa_merge(2, 4, 16, NULL, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "NULL parts accepted");
    CHECK(sdpa_merge(2, 4, 16, opn, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "a NULL part accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, NULL, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "NULL o accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 8, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "part stride < dv accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, o, 8, l) == SDPA_ERR_INVALID_ARGUMENT, "out stride < dv accepted");
    CHECK(sdpa_merge(2, 1, 16, op, 4, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "one row, part stride < dv accepted");
    CHECK(sdpa_merge(2, 1, 16, op, 16, lp, o, 0, l) == SDPA_ERR_INVALID_ARGUMENT, "one row, out stride 0 accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, b + 8, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "o overlapping a part accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, o, 16, (float *)(o + 3)) == SDPA_ERR_INVALID_ARGUMENT,
          "lse overlapping o accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, o, 16, lb + 1) == SDPA_ERR_INVALID_ARGUMENT,
          "lse overlapping an lse part accepted");
    CHECK(sdpa_merge(2, 4, 16, op, SIZE_MAX / 2, lp, o, 16, l) == SDPA_ERR_OVERFLOW, "an overflowing stride accepted");
    size_t bad = 0;
    for (size_t e = 0; e < 64; e++) bad += !tl_is_sentinel(o[e]);
    for (size_t e = 0; e < 4; e++) bad += !tl_is_sentinel(l[e]);
    CHECK(bad == 0, "%zu output elements written by refused merges", bad);
    tl_end();
}

/* ------------------------------------------------------------------------------------------ */
/* Bad layouts: refused with a status and a message, nothing written                            */
/* ------------------------------------------------------------------------------------------ */
static void t_bad(const sdpa_impl *impl)
{
    lcase c = prefills(Q_PADDED, KV_PAGED, 16, F16);
    lprob pr;
    lprob_init(&pr, &c, 71);
    const sdpa_params good = pr.p;
    size_t big_lens[4] = {7, 0, 33, 65};
    size_t cu_bad0[5] = {1, 8, 8, 41, 105}, cu_dec[5] = {0, 8, 7, 40, 104}, cu_long[5] = {0, 7, 7, 40, 105};
    size_t cu_ok[5] = {0, 7, 7, 40, 104};
    int32_t *tab = pr.table;
    const size_t mp = pr.max_pages;
    sdpa_params bad[16];
    const char *why[16];
    sdpa_status want[16];
    size_t n = 0;
#define BAD(w, st, stmt)                                                                       \
    do {                                                                                       \
        bad[n] = good;                                                                         \
        sdpa_params *p = &bad[n];                                                              \
        stmt;                                                                                  \
        why[n] = w, want[n++] = st;                                                            \
    } while (0)
    BAD("q_lens beyond q_len", SDPA_ERR_INVALID_ARGUMENT, p->q_lens = big_lens);
    BAD("kv_lens beyond kv_len", SDPA_ERR_INVALID_ARGUMENT, (p->kv_lens = big_lens, p->kv_len = 64));
    BAD("q_lens and cu_q both", SDPA_ERR_INVALID_ARGUMENT, p->cu_q = cu_ok);
    BAD("cu_q not from 0", SDPA_ERR_INVALID_ARGUMENT, (p->q_lens = NULL, p->cu_q = cu_bad0));
    BAD("cu_q decreasing", SDPA_ERR_INVALID_ARGUMENT, (p->q_lens = NULL, p->cu_q = cu_dec));
    BAD("cu_q sequence longer than q_len", SDPA_ERR_INVALID_ARGUMENT, (p->q_lens = NULL, p->cu_q = cu_long));
    BAD("kv_lens and cu_kv both", SDPA_ERR_INVALID_ARGUMENT, (p->block_table = NULL, p->cu_kv = cu_ok));
    BAD("cu_kv with a block table", SDPA_ERR_INVALID_ARGUMENT, (p->kv_lens = NULL, p->cu_kv = cu_ok));
    BAD("page_size 0", SDPA_ERR_INVALID_ARGUMENT, p->page_size = 0);
    BAD("max_pages 0", SDPA_ERR_INVALID_ARGUMENT, p->max_pages = 0);
    BAD("n_pages 0", SDPA_ERR_INVALID_ARGUMENT, p->n_pages = 0);
    BAD("max_pages x page_size shorter than a sequence", SDPA_ERR_INVALID_ARGUMENT, p->page_size = 4);
    BAD("max_pages x page_size overflows", SDPA_ERR_OVERFLOW, (p->max_pages = SIZE_MAX / 8, p->page_size = 16));
#undef BAD
    float *o_before = tl_xmalloc((pr.on + 2 * MARGIN) * sizeof(float));
    memcpy(o_before, pr.obuf, (pr.on + 2 * MARGIN) * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        char msg[256] = "";
        pr.p = bad[i];
        const sdpa_status st = lprob_run(&pr, impl, NULL);
        const sdpa_status sv = sdpa_validate(&pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, msg, sizeof msg);
        CHECK(st == want[i] && sv == want[i] && msg[0] && strcmp(msg, "ok") != 0,
              "%s: status %s (validate %s, \"%s\"), want %s", why[i], sdpa_status_str(st), sdpa_status_str(sv), msg,
              sdpa_status_str(want[i]));
    }
    /* block-table entries out of range, in a page a sequence uses */
    const size_t used = 3 * mp + 1; /* sequence 3 (130 keys), its second page */
    const int32_t keep = tab[used];
    const int32_t vals[3] = {-1, (int32_t)pr.n_pages, INT32_MIN};
    for (size_t i = 0; i < 3; i++) {
        char msg[256] = "";
        pr.p = good;
        tab[used] = vals[i];
        const sdpa_status st = lprob_run(&pr, impl, NULL);
        sdpa_validate(&pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, msg, sizeof msg);
        CHECK(st == SDPA_ERR_INVALID_ARGUMENT && strstr(msg, "block_table"), "entry %d: status %s (\"%s\")", (int)vals[i],
              sdpa_status_str(st), msg);
    }
    tab[used] = keep;
    CHECK(memcmp(o_before, pr.obuf, (pr.on + 2 * MARGIN) * sizeof(float)) == 0, "a refused call wrote o");
    size_t bad_l = 0;
    for (size_t e = 0; e < pr.lsen + 2 * MARGIN; e++) bad_l += !tl_is_sentinel(pr.lse[e]);
    CHECK(bad_l == 0, "a refused call wrote %zu lse entries", bad_l);
    /* the good call still runs: out-of-range entries in unused pages are never checked */
    pr.p = good;
    CHECK(lprob_run(&pr, impl, NULL) == SDPA_OK, "the valid paged call (garbage in unused table entries) refused");
    free(o_before);
    lprob_free(&pr);
}

/* ------------------------------------------------------------------------------------------ */
static void run_test(const char *name, tl_impl_fn fn) { tl_for_each_impl_worst(name, fn, &g_worst); }

int main(void)
{
    tl_header("ragged (padded, packed) and paged K/V, and sdpa_merge, against float64 attention");
    if (!tl_pools_create(g_pool, 2, 2, 9)) return 1;
    run_test("layouts: padded", t_padded);
    run_test("layouts: packed and mixed", t_packed);
    run_test("layouts: chunked prefill beside decodes", t_chunked_prefill);
    run_test("layouts: paged, page sizes 1 16 32 256", t_paged);
    run_test("layouts: paged with ragged and variants", t_paged_variants);
    tl_for_each_impl("layouts: sdpa_merge against the unsplit call", t_merge);
    tl_for_each_impl("layouts: bad layouts refused", t_bad);
    t_merge_bad();
    for (size_t t = 0; t < 2; t++) bench_pool_destroy(g_pool[t]);
    return tl_finish();
}
