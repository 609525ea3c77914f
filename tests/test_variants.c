/* test_variants.c -- window, mask, softcap, ALiBi and sinks on every implementation against a
 * float64 oracle */
#include "attn.h"
#include "test_pools.h"

/*
 * The attention variants of sdpa_params (issue #14), checked on every implementation of the
 * registry against the float64 oracle (attn.h: attn_oracle64), straight from the contract in
 * sdpa.h:
 *
 *   i' = i + kv_len - q_len                      query i's position among the keys
 *   row i sees key j   iff  (not causal or j <= i') and (window 0 or |i' - j| < window)
 *                           and the mask entry is not -inf
 *   s_ij = softcap(scale q.k) - slope_h |i' - j| + mask_ij,    softcap(x) = c tanh(x / c)
 *   o_i = sum_j e^(s_ij - M) v_j / (sum_j e^(s_ij - M) + e^(sink_h - M)),  lse_i = M + log(...)
 *
 * over the keys the row sees only (the oracle never reads another key, so NaN and inf put into
 * hidden keys cannot reach it), from the very values the library reads (f16/bf16 K, V and mask
 * converted exactly). A row that sees nothing gives zeros and lse -inf, or lse = sink_h.
 *
 * Tolerance of an output element (attn_oracle64 gathers the sums, prob_check() applies them): the
 * plain attention bound of attn.h (attn_row_tol: f32 accumulation of the weights and weighted
 * values, the f32 score dot products) plus what the variants add, each from a stated bound:
 *   - the implementation's exp error, sdpa_impl_exp_max_ulp: a weight off by e ULP (relative
 *     2 e u) moves an output by at most 2 e u * 2 (numerator and denominator) times sum w|v|;
 *   - the error of each key's score from the modifiers, ds_j: the products and sums that add
 *     the cap, the bias and the mask round with relative error u each, 3 u (|softcap(s)| +
 *     |bias| + |mask|), and the softcap itself, c tanh(s/c), misses by the implementation's
 *     sdpa_impl_tanh_max_ulp ULP of a value below 1 (2 u each) plus the roundings of s/c
 *     (u |x| sech^2 x <= 0.45 u) and of c * tanh (u), times c: (2 ulp_tanh + 2) u c. To first
 *     order, a score off by ds_j moves output c by (w_j / l) ds_j |v_jc - o_c|, so the bound
 *     is sum_j (w_j / l) ds_j (|v_jc| + |o_c|), doubled for the second-order terms;
 *   - the weights SIMD kernels may flush below e^-54 of the row's largest (sdpa.h): at most
 *     n e^-54 max|v| / l.
 * With a sink, l includes e^(sink - M), and the sink weight's exponent rounds by u |sink - M|.
 * lse: E_row (1 + |lse|) as attn.h (E_row: attn_row_tol plus the exp term), plus
 * 2 sum_j (w_j / l) ds_j.
 */

static bench_pool *g_pool[3]; /* 1, 2 and 3 threads (the last one shuffled) */

#define F32  SDPA_F32
#define F16  SDPA_F16
#define BF16 SDPA_BF16

enum { MK_NONE = 0, MK_RANDOM, MK_BLOCKDIAG, MK_TILES, MK_DISTANCE };
enum { MS_NONE = 0, MS_ALIBI, MS_MIXED };
enum { SK_NONE = 0, SK_RANDOM, SK_HALF, SK_NONE_INF };
enum { AL_NONE = 0, AL_STD, AL_RANDOM };
enum { PZ_NONE = 0, PZ_HIDDEN, PZ_SOME };

typedef struct vcase {
    const char *name;
    size_t batch, qh, kvh, ql, kvl, d, dv; /* dv 0: d */
    float scale;                           /* 0: 1/sqrt(d) */
    bool causal;
    size_t window;
    float softcap;
    int alibi; /* AL_STD: sdpa_alibi_slopes(qh, 8); AL_RANDOM: uniform [0, 0.3) */
    /* SK_RANDOM: uniform [-1, 3), every third head -inf; SK_HALF: log(kv_len) +- 1, as heavy
       as all the keys together (a sink counted twice, or once per chunk, shows in full);
       SK_NONE_INF: every head -inf (no sink at all, through the sink path) */
    int sinks;
    int mask;
    sdpa_dtype mt;
    bool mb_batch, mb_heads; /* broadcast the mask over batch (stride 0), heads */
    tlayout ml;              /* the mask's layout: dense, padded rows, reversed rows */
    /* mask_scales. MS_ALIBI: sdpa_alibi_slopes(qh, 8), ggml's ALiBi over an MK_DISTANCE mask;
       MS_MIXED: uniform [-2, 2), head 1 zero, head 2 negative */
    int mscales;
    float holes;     /* MK_RANDOM: share of -inf entries */
    bool empty_rows; /* MK_RANDOM: every 13th row (i % 13 == 4) all -inf */
    size_t nseq;     /* MK_BLOCKDIAG: sequences packed in the call */
    sdpa_dtype kt, vt;
    tlayout lkv;
    int poison; /* PZ_HIDDEN: NaN/inf in K and V of keys no row sees;
                   PZ_SOME: NaN in K / inf in V of keys some rows see and others not */
    bool no_lse;
    float range; /* q and k uniform in [-range, range); 0: 1 */
} vcase;

static const char *dtn(sdpa_dtype t) { return t == F16 ? "f16" : t == BF16 ? "bf16" : "f32"; }

/* ------------------------------------------------------------------------------------------ */
/* A problem: the views, the mask, the per-head arrays and the parameters of one call.          */
/* ------------------------------------------------------------------------------------------ */
typedef struct prob {
    const vcase *c;
    sdpa_params p;
    tview q, k, v, o, m;
    sdpa_tensor tq, tk, tv, to, tm;
    float *lse; /* lse_elems floats, the view at lse + LSE_MARGIN, sentinels around */
    size_t lse_elems, rows;
    float *slopes, *sinks, *mscales;
    size_t *seq_end; /* MK_BLOCKDIAG: end (exclusive) of each sequence's positions */
    char what[320];
} prob;

enum { LSE_MARGIN = 8 };

static double mask_at(const prob *pr, size_t b, size_t h, size_t i, size_t j)
{
    const vcase *c = pr->c;
    return pr->m.vals[tview_dense(&pr->m, c->mb_batch ? 0 : b, c->mb_heads ? 0 : h, i, j)];
}

/* Whether row i of (b, h) sees key j: causality, window, and a mask entry other than -inf. */
static bool sees(const prob *pr, size_t b, size_t h, size_t i, size_t j)
{
    const vcase *c = pr->c;
    const long long ip = (long long)i + (long long)c->kvl - (long long)c->ql, jj = (long long)j;
    if (c->causal && jj > ip) return false;
    if (c->window && llabs(ip - jj) >= (long long)c->window) return false;
    if (c->mask != MK_NONE && mask_at(pr, b, h, i, j) == -INFINITY) return false;
    return true;
}

static size_t seq_of(const prob *pr, long long pos)
{
    size_t s = 0;
    while (s < pr->c->nseq && pos >= (long long)pr->seq_end[s]) s++;
    return s;
}

/* The mask's value at a stored element (bm, hm, i, j). */
static float mask_value(prob *pr, tl_rng *r, size_t i, size_t j)
{
    const vcase *c = pr->c;
    switch (c->mask) {
    case MK_RANDOM:
        if (c->empty_rows && i % 13 == 4) return -INFINITY;
        return tl_uniform(r, 0.0f, 1.0f) < c->holes ? -INFINITY : tl_uniform(r, -2.0f, 2.0f);
    case MK_BLOCKDIAG: {
        /* the query at position i' sees the keys of its own sequence only; a query before the
           keys (i' < 0) belongs to none */
        const long long ip = (long long)i + (long long)c->kvl - (long long)c->ql;
        if (ip < 0) return -INFINITY;
        return seq_of(pr, ip) == seq_of(pr, (long long)j) ? 0.0f : -INFINITY;
    }
    case MK_DISTANCE: /* -|i' - j|, llama.cpp's ALiBi mask, with holes */
        if (tl_uniform(r, 0.0f, 1.0f) < c->holes) return -INFINITY;
        return -fabsf((float)((long long)i + (long long)c->kvl - (long long)c->ql - (long long)j));
    case MK_TILES:
        /* keys [0, 512) (up to half the keys) and [576, 640) hidden from every row: whole key
           blocks for any block size of the planner (64..512 keys), aligned or not; past 4096
           keys also [1024, 3072), whole KV chunks of a split decode (1024 or 2048 keys) */
        if ((j < 512 && j < c->kvl / 2) || (j >= 576 && j < 640) ||
            (c->kvl > 4096 && j >= 1024 && j < 3072))
            return -INFINITY;
        return tl_uniform(r, -1.0f, 1.0f);
    default:
        return 0.0f;
    }
}

static void prob_init(prob *pr, const vcase *c, uint64_t seed)
{
    memset(pr, 0, sizeof *pr);
    pr->c = c;
    const size_t dv = c->dv ? c->dv : c->d;
    tl_rng r = {seed};
    tview_layout(&pr->q, c->batch, c->qh, c->ql, c->d, F32, L_DENSE, 0);
    tview_layout(&pr->k, c->batch, c->kvh, c->kvl, c->d, c->kt, c->lkv, 0);
    tview_layout(&pr->v, c->batch, c->kvh, c->kvl, dv, c->vt, c->lkv, 0);
    tview_layout(&pr->o, c->batch, c->qh, c->ql, dv, F32, L_PADDED, 5);
    tview_alloc(&pr->q);
    tview_alloc(&pr->k);
    tview_alloc(&pr->v);
    tview_alloc(&pr->o);
    const float range = c->range > 0 ? c->range : 1.0f;
    tview_fill(&pr->q, &r, -range, range);
    tview_fill(&pr->k, &r, -range, range);
    tview_fill(&pr->v, &r, -1.0f, 1.0f);
    tview_sentinel(&pr->o);
    pr->rows = c->batch * c->qh * c->ql;
    pr->lse_elems = pr->rows + 2 * LSE_MARGIN;
    pr->lse = tl_xmalloc(pr->lse_elems * sizeof(float));
    tl_fill_sentinel(pr->lse, pr->lse_elems);

    sdpa_params *p = &pr->p;
    p->batch = c->batch, p->q_heads = c->qh, p->kv_heads = c->kvh, p->q_len = c->ql,
    p->kv_len = c->kvl;
    p->head_dim = c->d, p->v_dim = c->dv, p->scale = c->scale, p->causal = c->causal;
    p->lse = c->no_lse ? NULL : pr->lse + LSE_MARGIN;
    p->window = c->window;
    p->softcap = c->softcap;
    if (c->alibi != AL_NONE) {
        pr->slopes = tl_xmalloc(c->qh * sizeof(float));
        if (c->alibi == AL_STD)
            sdpa_alibi_slopes(c->qh, 8.0f, pr->slopes);
        else
            for (size_t h = 0; h < c->qh; h++) pr->slopes[h] = tl_uniform(&r, 0.0f, 0.3f);
        p->alibi_slopes = pr->slopes;
    }
    if (c->sinks != SK_NONE) {
        pr->sinks = tl_xmalloc(c->qh * sizeof(float));
        for (size_t h = 0; h < c->qh; h++)
            pr->sinks[h] = c->sinks == SK_NONE_INF ? -INFINITY
                           : c->sinks == SK_HALF ? logf((float)c->kvl) + tl_uniform(&r, -1.0f, 1.0f)
                           : h % 3 == 1          ? -INFINITY
                                                 : tl_uniform(&r, -1.0f, 3.0f);
        p->sinks = pr->sinks;
    }
    if (c->mask != MK_NONE) {
        if (c->mask == MK_BLOCKDIAG) {
            /* nseq sequences of uneven lengths, each at least 1 */
            pr->seq_end = tl_xmalloc(c->nseq * sizeof(size_t));
            for (size_t s = 0; s + 1 < c->nseq; s++) {
                size_t e = c->kvl * (s + 1) / c->nseq;
                const size_t jit = c->kvl / (4 * c->nseq);
                if (jit) e = e - jit + tl_below(&r, 2 * jit + 1);
                pr->seq_end[s] = e;
            }
            pr->seq_end[c->nseq - 1] = c->kvl;
        }
        tview_layout(&pr->m, c->mb_batch ? 1 : c->batch, c->mb_heads ? 1 : c->qh, c->ql, c->kvl,
                     c->mt, c->ml, 0);
        tview_alloc(&pr->m);
        for (size_t b = 0; b < pr->m.B; b++)
            for (size_t h = 0; h < pr->m.H; h++)
                for (size_t i = 0; i < c->ql; i++)
                    for (size_t j = 0; j < c->kvl; j++)
                        pr->m.vals[tview_dense(&pr->m, b, h, i, j)] = tview_store(
                            &pr->m, tview_index(&pr->m, b, h, i, j), mask_value(pr, &r, i, j));
        pr->tm = tview_tensor(&pr->m);
        if (c->mb_batch) pr->tm.batch_stride = 0;
        if (c->mb_heads) pr->tm.head_stride = 0;
        p->mask = &pr->tm;
    }
    if (c->mscales != MS_NONE) {
        pr->mscales = tl_xmalloc(c->qh * sizeof(float));
        if (c->mscales == MS_ALIBI)
            sdpa_alibi_slopes(c->qh, 8.0f, pr->mscales);
        else
            for (size_t h = 0; h < c->qh; h++)
                pr->mscales[h] = h == 1 ? 0.0f : h == 2 ? -0.75f : tl_uniform(&r, -2.0f, 2.0f);
        p->mask_scales = pr->mscales;
    }
    if (c->poison != PZ_NONE) {
        /* which rows of each (batch, KV head) see each key */
        const size_t G = c->qh / c->kvh, dvv = pr->v.D;
        size_t n_some = 0, n_poisoned = 0;
        for (size_t b = 0; b < c->batch; b++)
            for (size_t kh = 0; kh < c->kvh; kh++)
                for (size_t j = 0; j < c->kvl; j++) {
                    size_t seen = 0, total = G * c->ql;
                    for (size_t h = kh * G; h < (kh + 1) * G; h++)
                        for (size_t i = 0; i < c->ql; i++) seen += sees(pr, b, h, i, j);
                    tview *k = &pr->k, *v = &pr->v;
#define PUT(t, cc, x)                                                                              \
    ((t)->vals[tview_dense(t, b, kh, j, cc)] = tview_store(t, tview_index(t, b, kh, j, cc), x))
                    if (c->poison == PZ_HIDDEN && seen == 0) {
                        n_poisoned++;
                        PUT(k, j % c->d, NAN);
                        PUT(k, (j + 1) % c->d, j % 2 ? INFINITY : -INFINITY);
                        for (size_t cc = 0; cc < dvv; cc++)
                            PUT(v, cc, cc % 3 == 0 ? NAN : cc % 3 == 1 ? INFINITY : 1e30f);
                    } else if (c->poison == PZ_SOME && seen > 0 && seen < total &&
                               n_some++ % 5 == 0) {
                        n_poisoned++;
                        /* rows that see it: the NaN score makes the row NaN, the inf its column */
                        if (n_some % 4 == 1)
                            PUT(k, 0, NAN);
                        else
                            PUT(v, j % dvv, INFINITY);
                    }
#undef PUT
                }
        CHECK(n_poisoned > 0, "%s: no key to poison: the case does not test what it says", c->name);
    }
    pr->tq = tview_tensor(&pr->q), pr->tk = tview_tensor(&pr->k), pr->tv = tview_tensor(&pr->v);
    pr->to = tview_tensor(&pr->o);

    int n = snprintf(pr->what, sizeof pr->what,
                     "%s [b=%zu hq=%zu hkv=%zu q_len=%zu kv_len=%zu d=%zu dv=%zu%s", c->name,
                     c->batch, c->qh, c->kvh, c->ql, c->kvl, c->d, dv, c->causal ? " causal" : "");
#define MORE(...)                                                                                  \
    (n += snprintf(pr->what + n, n < (int)sizeof pr->what ? sizeof pr->what - (size_t)n : 0,       \
                   __VA_ARGS__))
    if (c->window) MORE(" window=%zu", c->window);
    if (c->softcap != 0) MORE(" softcap=%g", c->softcap);
    if (c->alibi) MORE(" alibi=%s", c->alibi == AL_STD ? "std" : "random");
    if (c->sinks)
        MORE(" sinks=%s", c->sinks == SK_RANDOM ? "random" : c->sinks == SK_HALF ? "half" : "-inf");
    if (c->mask)
        MORE(" mask=%s %s%s%s %s",
             c->mask == MK_RANDOM      ? "random"
             : c->mask == MK_BLOCKDIAG ? "block-diagonal"
             : c->mask == MK_DISTANCE  ? "distance"
                                       : "tiles",
             dtn(c->mt), c->mb_batch ? " bcast-batch" : "", c->mb_heads ? " bcast-heads" : "",
             layout_names[c->ml]);
    if (c->mscales) MORE(" mask_scales=%s", c->mscales == MS_ALIBI ? "alibi" : "mixed");
    if (c->poison) MORE(" poison=%s", c->poison == PZ_HIDDEN ? "hidden" : "some");
    MORE(" K %s V %s %s%s]", dtn(c->kt), dtn(c->vt), layout_names[c->lkv],
         c->no_lse ? " no-lse" : "");
#undef MORE
}

static void prob_free(prob *pr)
{
    tview_free(&pr->q);
    tview_free(&pr->k);
    tview_free(&pr->v);
    tview_free(&pr->o);
    if (pr->c->mask != MK_NONE) tview_free(&pr->m);
    free(pr->lse);
    free(pr->slopes);
    free(pr->sinks);
    free(pr->mscales);
    free(pr->seq_end);
}

/* Runs the call on impl (pool NULL: serially; else through that pool). */
static sdpa_status prob_run(prob *pr, const sdpa_impl *impl, bench_pool *pool)
{
    return tl_forward_on(impl, &pr->p, pool, &pr->tq, &pr->tk, &pr->tv, &pr->to);
}

/* ------------------------------------------------------------------------------------------ */
/* The oracle and the check                                                                     */
/* ------------------------------------------------------------------------------------------ */
/* What the oracle (attn.h) says about one problem, and the parts of the tolerance that do not
   depend on the implementation (its exp and tanh bounds are applied in the check). Computed
   once per case and test, and shared by the implementations (the oracle dominates the run
   time, more so under emulation). */
typedef struct vref {
    const vcase *c;
    uint64_t seed;
    attn_ref a;
} vref;

static void vref_free(vref *r)
{
    attn_ref_free(&r->a);
    memset(r, 0, sizeof *r);
}

static void oracle(const prob *pr, uint64_t seed, vref *r)
{
    const vcase *c = pr->c;
    const attn_problem P = {.B = c->batch,
                            .Hq = c->qh,
                            .Hk = c->kvh,
                            .Lq = c->ql,
                            .Lk = c->kvl,
                            .D = c->d,
                            .Dv = pr->o.D,
                            .q = pr->q.vals,
                            .k = pr->k.vals,
                            .v = pr->v.vals,
                            .scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)c->d),
                            .causal = c->causal,
                            .window = c->window,
                            .softcap = c->softcap,
                            .slopes = pr->slopes,
                            .sinks = pr->sinks,
                            .mask = c->mask != MK_NONE ? pr->m.vals : NULL,
                            .mask_scales = pr->mscales,
                            .mbs = c->mb_batch ? 0 : pr->m.H * c->ql * c->kvl,
                            .mhs = c->mb_heads ? 0 : c->ql * c->kvl,
                            .mis = c->kvl};
    r->c = c, r->seed = seed;
    attn_oracle64(&P, &r->a);
}

/* The oracle's answers for the current test, shared by its implementations. */
enum { MAX_CACHED = 32 };
static vref cache[MAX_CACHED];
static size_t n_cached;

static void cache_clear(void)
{
    for (size_t i = 0; i < n_cached; i++) vref_free(&cache[i]);
    n_cached = 0;
}

static const vref *oracle_for(const prob *pr, uint64_t seed)
{
    for (size_t i = 0; i < n_cached; i++)
        if (cache[i].c == pr->c && cache[i].seed == seed) return &cache[i];
    if (n_cached == MAX_CACHED) cache_clear();
    oracle(pr, seed, &cache[n_cached]);
    return &cache[n_cached++];
}

static double worst_ratio; /* largest |error| / tolerance of the current test point */

static void note_ratio(double err, double tol)
{
    if (tol > 0 && err / tol > worst_ratio) worst_ratio = err / tol;
}

/* Checks o and lse of the last call against the float64 oracle, and that nothing outside the
   views was written. Returns the number of failed checks. */
static long prob_check(const prob *pr, uint64_t seed, const sdpa_impl *impl)
{
    const long before = tl_case_failures;
    const vcase *c = pr->c;
    const attn_ref *r = &oracle_for(pr, seed)->a;
    const size_t Hq = c->qh, Tq = c->ql, Dv = pr->o.D;
    const double u = TL_U, exp_ulp = sdpa_impl_exp_max_ulp(impl),
                 tanh_ulp = sdpa_impl_tanh_max_ulp(impl);
    /* the softcap's error per score: (2 ulp_tanh + 2) u c (see the top of the file) */
    const double cap_err = c->softcap > 0 ? (2.0 * tanh_ulp + 2.0) * u * (double)c->softcap : 0.0;
    const char *what = pr->what;
    const float *ob = pr->o.buf;
    const float *lse = c->no_lse ? NULL : pr->lse + LSE_MARGIN;
    bool stop = false;
    for (size_t b = 0; b < c->batch && !stop; b++)
        for (size_t h = 0; h < Hq && !stop; h++)
            for (size_t i = 0; i < Tq && !stop; i++) {
                const size_t row = (b * Hq + h) * Tq + i;
                const ptrdiff_t o0 = tview_index(&pr->o, b, h, i, 0);
                const float lgot = lse ? lse[row] : 0.0f;
                if (r->kind[row] ==
                    ATTN_ROW_NAN) { /* a NaN (or +inf) attended score: the whole row and lse NaN */
                    for (size_t e = 0; e < Dv && !stop; e++)
                        if (!CHECK(isnan(ob[o0 + e]),
                                   "%s: b=%zu h=%zu i=%zu attends a NaN score: o[%zu]=%g, want NaN",
                                   what, b, h, i, e, ob[o0 + e]))
                            stop = true;
                    if (lse && !stop &&
                        !CHECK(isnan(lgot), "%s: b=%zu h=%zu i=%zu: lse %g, want NaN", what, b, h,
                               i, lgot))
                        stop = true;
                    continue;
                }
                if (r->kind[row] == ATTN_ROW_NOTHING) { /* zeros; lse the sink, or -inf */
                    for (size_t e = 0; e < Dv && !stop; e++)
                        if (!CHECK(ob[o0 + e] == 0.0f,
                                   "%s: b=%zu h=%zu i=%zu sees no key: o[%zu]=%g, want 0", what, b,
                                   h, i, e, ob[o0 + e]))
                            stop = true;
                    if (lse && !stop &&
                        !CHECK(lgot == (float)r->lse[row],
                               "%s: b=%zu h=%zu i=%zu sees no key: lse %.9g, want %.9g (%s)", what,
                               b, h, i, lgot, (float)r->lse[row],
                               pr->sinks ? "the sink" : "no sink"))
                        stop = true;
                    continue;
                }
                const double E = r->tol[row] + 4.0 * exp_ulp * u,
                             S1 = r->s1[row] + cap_err * r->wk[row];
                for (size_t e = 0; e < Dv && !stop; e++) {
                    const size_t x = row * Dv + e;
                    const double ref = r->o[x];
                    const float got = ob[o0 + e];
                    if (!isfinite(ref)) { /* an attended V element not finite */
                        if (!CHECK(!isfinite(got),
                                   "%s: b=%zu h=%zu i=%zu o[%zu]=%g: an attended V element is not "
                                   "finite",
                                   what, b, h, i, e, got))
                            stop = true;
                        continue;
                    }
                    const double tol = E * r->wabs[x] +
                                       2.0 * (r->m1[x] + cap_err * r->wabs[x] + S1 * fabs(ref)) +
                                       r->flush[x] + FLT_TRUE_MIN;
                    note_ratio(fabs(got - ref), tol);
                    if (!CHECK(fabs(got - ref) <= tol,
                               "%s: b=%zu h=%zu i=%zu (sees %zu keys) o[%zu]=%.9g, float64 %.9g, "
                               "|err| %.3g > tol %.3g",
                               what, b, h, i, r->seen[row], e, got, ref, fabs(got - ref), tol))
                        stop = true;
                }
                if (lse && !stop) {
                    const double lref = r->lse[row], tol = E * (1.0 + fabs(lref)) + 2.0 * S1;
                    note_ratio(fabs(lgot - lref), tol);
                    if (!CHECK(fabs(lgot - lref) <= tol,
                               "%s: b=%zu h=%zu i=%zu lse=%.9g, float64 %.9g, tol %.3g", what, b, h,
                               i, lgot, lref, tol))
                        stop = true;
                }
            }
    /* nothing outside the views written */
    unsigned char *in_view = tl_xmalloc(pr->o.n_elems);
    memset(in_view, 0, pr->o.n_elems);
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < Tq; i++)
                for (size_t e = 0; e < Dv; e++) in_view[tview_index(&pr->o, b, h, i, e)] = 1;
    size_t outside = 0;
    for (size_t e = 0; e < pr->o.n_elems; e++) outside += !in_view[e] && !tl_is_sentinel(ob[e]);
    CHECK(outside == 0, "%s: %zu elements of o outside the view were written", what, outside);
    size_t bad = 0;
    for (size_t e = 0; e < pr->lse_elems; e++) {
        const bool in = e >= LSE_MARGIN && e < LSE_MARGIN + pr->rows;
        if ((!in || c->no_lse) && !tl_is_sentinel(pr->lse[e])) bad++;
    }
    CHECK(bad == 0, "%s: %zu elements of the lse buffer %s were written", what, bad,
          c->no_lse ? "(p->lse NULL)" : "outside the view");
    free(in_view);
    return tl_case_failures - before;
}

/* One case on impl, serially, against the oracle. */
static void run_case(const sdpa_impl *impl, const vcase *c, uint64_t seed)
{
    prob pr;
    prob_init(&pr, c, seed);
    const sdpa_status st = prob_run(&pr, impl, NULL);
    if (CHECK(st == SDPA_OK, "%s: status %d (%s)", pr.what, (int)st, sdpa_status_str(st)))
        prob_check(&pr, seed, impl);
    prob_free(&pr);
}

static void run_cases(const sdpa_impl *impl, const vcase *cases, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n && !tl_give_up(); i++) {
        if (tl_sampled_out(i)) continue;
        run_case(impl, &cases[i], seed + i);
    }
}

#define RUN(impl, cases, seed) run_cases(impl, cases, sizeof cases / sizeof cases[0], seed)

/* ------------------------------------------------------------------------------------------ */
/* The cases                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* No modifier: the oracle agrees with the library where the two have always been compared. */
static void t_plain(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "plain prefill causal",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 120,
         .kvl = 150,
         .d = 64,
         .causal = true},
        {.name = "plain prefill f16",
         .batch = 2,
         .qh = 2,
         .kvh = 1,
         .ql = 120,
         .kvl = 130,
         .d = 40,
         .kt = F16,
         .vt = F16},
        {.name = "plain decode bf16",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 700,
         .d = 72,
         .kt = BF16,
         .vt = BF16},
        {.name = "plain q_len > kv_len causal",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 9,
         .kvl = 4,
         .d = 16,
         .causal = true},
    };
    RUN(impl, cases, 100);
}

static void t_window(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "window 1 causal (each query sees its own position)",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 130,
         .kvl = 130,
         .d = 64,
         .causal = true,
         .window = 1},
        {.name = "window 1 not causal",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 40,
         .kvl = 60,
         .d = 40,
         .window = 1},
        {.name = "window 32 causal prefill GQA",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 200,
         .kvl = 240,
         .d = 64,
         .causal = true,
         .window = 32,
         .kt = F16,
         .vt = F16},
        {.name = "window 50 not causal (both sides)",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 160,
         .kvl = 300,
         .d = 72,
         .window = 50,
         .kt = BF16,
         .vt = BF16},
        {.name = "window wider than the sequence",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 100,
         .kvl = 120,
         .d = 40,
         .causal = true,
         .window = 1000},
        {.name = "window wider than the sequence, not causal",
         .batch = 1,
         .qh = 2,
         .kvh = 2,
         .ql = 30,
         .kvl = 90,
         .d = 64,
         .window = 5000},
        {.name = "window causal q_len > kv_len (rows see nothing)",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 40,
         .kvl = 16,
         .d = 64,
         .causal = true,
         .window = 8},
        {.name = "window not causal q_len > kv_len (early rows see nothing)",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 50,
         .kvl = 10,
         .d = 40,
         .window = 5},
        {.name = "window decode",
         .batch = 2,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 900,
         .d = 64,
         .window = 100,
         .kt = F16,
         .vt = F16},
        {.name = "window few-row decode causal",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 4,
         .kvl = 600,
         .d = 72,
         .causal = true,
         .window = 64,
         .kt = BF16,
         .vt = F16},
        {.name = "long decode, window 4096 (split into chunks)",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 1,
         .kvl = 20000,
         .d = 64,
         .causal = true,
         .window = 4096,
         .kt = F16,
         .vt = F16},
        {.name = "long decode, window 4096 not causal",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 1,
         .kvl = 20000,
         .d = 40,
         .window = 4096},
        {.name = "window, key blocks in both directions",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 100,
         .kvl = 1100,
         .d = 32,
         .causal = true,
         .window = 500},
    };
    RUN(impl, cases, 200);
}

static void t_mask(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "mask f16 per batch and head",
         .batch = 2,
         .qh = 4,
         .kvh = 2,
         .ql = 100,
         .kvl = 150,
         .d = 64,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 0.3f},
        {.name = "mask f32 broadcast over batch",
         .batch = 2,
         .qh = 4,
         .kvh = 1,
         .ql = 100,
         .kvl = 140,
         .d = 40,
         .mask = MK_RANDOM,
         .mt = F32,
         .mb_batch = true,
         .holes = 0.5f,
         .causal = true},
        {.name = "mask f16 broadcast over heads",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 110,
         .kvl = 110,
         .d = 64,
         .mask = MK_RANDOM,
         .mt = F16,
         .mb_heads = true,
         .holes = 0.2f,
         .kt = F16,
         .vt = F16},
        {.name = "mask f32 broadcast over both, padded rows",
         .batch = 2,
         .qh = 4,
         .kvh = 2,
         .ql = 100,
         .kvl = 120,
         .d = 72,
         .mask = MK_RANDOM,
         .mt = F32,
         .mb_batch = true,
         .mb_heads = true,
         .ml = L_PADDED,
         .holes = 0.4f},
        {.name = "mask bf16, reversed rows",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 100,
         .kvl = 130,
         .d = 64,
         .mask = MK_RANDOM,
         .mt = BF16,
         .ml = L_REVERSED,
         .holes = 0.3f,
         .kt = BF16,
         .vt = BF16},
        {.name = "mask with rows all -inf",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 100,
         .kvl = 90,
         .d = 40,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 0.9f,
         .empty_rows = true,
         .causal = true},
        {.name = "mask decode f16",
         .batch = 2,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 1000,
         .d = 64,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 0.5f,
         .kt = F16,
         .vt = F16},
        {.name = "mask few-row decode f32",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 3,
         .kvl = 500,
         .d = 72,
         .mask = MK_RANDOM,
         .mt = F32,
         .holes = 0.7f,
         .mb_heads = true},
        {.name = "mask split-K decode f16",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 1,
         .kvl = 9000,
         .d = 40,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 0.6f,
         .kt = BF16,
         .vt = BF16},
        {.name = "block-diagonal mask, 4 sequences packed",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 260,
         .kvl = 260,
         .d = 64,
         .causal = true,
         .mask = MK_BLOCKDIAG,
         .nseq = 4,
         .mt = F16,
         .mb_batch = true,
         .mb_heads = true},
        {.name = "block-diagonal mask, 7 sequences, not causal",
         .batch = 2,
         .qh = 2,
         .kvh = 1,
         .ql = 300,
         .kvl = 300,
         .d = 40,
         .mask = MK_BLOCKDIAG,
         .nseq = 7,
         .mt = F32,
         .mb_batch = true,
         .mb_heads = true,
         .kt = F16},
        {.name = "mask hiding whole key blocks from every row",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 100,
         .kvl = 1100,
         .d = 64,
         .mask = MK_TILES,
         .mt = F16,
         .mb_heads = true,
         .causal = true},
        {.name = "mask hiding whole key blocks, not causal",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 100,
         .kvl = 1100,
         .d = 32,
         .mask = MK_TILES,
         .mt = F32,
         .kt = F16,
         .vt = BF16},
        {.name = "mask hiding whole chunks of a split-K decode",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 4500,
         .d = 64,
         .mask = MK_TILES,
         .mt = F16,
         .kt = F16,
         .vt = F16},
    };
    RUN(impl, cases, 300);
}

/* mask_scales: ggml's ALiBi (a distance mask shared by every head, each head's slope as its
   factor), and arbitrary factors, zero and negative ones included, on every mask dtype. */
static void t_mask_scales(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "ggml ALiBi prefill, f16 distance mask shared by heads and batch",
         .batch = 2,
         .qh = 8,
         .kvh = 2,
         .ql = 64,
         .kvl = 100,
         .d = 64,
         .causal = true,
         .mask = MK_DISTANCE,
         .mt = F16,
         .mb_batch = true,
         .mb_heads = true,
         .holes = 0.1f,
         .mscales = MS_ALIBI,
         .kt = F16,
         .vt = F16},
        {.name = "ggml ALiBi decode, f16 distance mask, sinks",
         .batch = 1,
         .qh = 16,
         .kvh = 4,
         .ql = 1,
         .kvl = 1500,
         .d = 128,
         .mask = MK_DISTANCE,
         .mt = F16,
         .mb_heads = true,
         .mscales = MS_ALIBI,
         .sinks = SK_RANDOM,
         .kt = F16,
         .vt = F16},
        {.name = "mixed factors, f32 mask per head, rows all -inf, softcap",
         .batch = 2,
         .qh = 4,
         .kvh = 2,
         .ql = 100,
         .kvl = 90,
         .d = 40,
         .mask = MK_RANDOM,
         .mt = F32,
         .holes = 0.3f,
         .empty_rows = true,
         .softcap = 20.0f,
         .mscales = MS_MIXED},
        {.name = "mixed factors, bf16 mask shared by heads, padded rows, ALiBi slopes too",
         .batch = 1,
         .qh = 8,
         .kvh = 8,
         .ql = 40,
         .kvl = 300,
         .d = 64,
         .mask = MK_RANDOM,
         .mt = BF16,
         .mb_heads = true,
         .ml = L_PADDED,
         .holes = 0.2f,
         .alibi = AL_RANDOM,
         .mscales = MS_MIXED},
    };
    RUN(impl, cases, 450);
}

static void t_softcap(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "softcap 2 prefill",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 160,
         .kvl = 180,
         .d = 64,
         .causal = true,
         .softcap = 2.0f,
         .range = 3.0f},
        {.name = "softcap 5 prefill f16",
         .batch = 1,
         .qh = 4,
         .kvh = 4,
         .ql = 130,
         .kvl = 150,
         .d = 72,
         .softcap = 5.0f,
         .range = 3.0f,
         .kt = F16,
         .vt = F16},
        {.name = "softcap 30 (Gemma), small scores",
         .batch = 2,
         .qh = 2,
         .kvh = 1,
         .ql = 100,
         .kvl = 100,
         .d = 40,
         .causal = true,
         .softcap = 30.0f},
        {.name = "softcap 0.5 with scale 1",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 60,
         .kvl = 80,
         .d = 64,
         .scale = 1.0f,
         .softcap = 0.5f,
         .range = 2.0f,
         .kt = BF16,
         .vt = BF16},
        {.name = "softcap decode",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 800,
         .d = 64,
         .softcap = 3.0f,
         .range = 3.0f,
         .kt = BF16,
         .vt = BF16},
        {.name = "softcap split-K decode",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 1,
         .kvl = 8200,
         .d = 40,
         .softcap = 4.0f,
         .range = 3.0f,
         .kt = F16,
         .vt = F16},
    };
    RUN(impl, cases, 400);
}

static void t_alibi(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "alibi prefill causal",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 120,
         .kvl = 150,
         .d = 64,
         .causal = true,
         .alibi = AL_STD},
        {.name = "alibi prefill not causal (bias both sides)",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 120,
         .kvl = 160,
         .d = 40,
         .alibi = AL_RANDOM,
         .kt = F16,
         .vt = F16},
        {.name = "alibi 12 heads (non power of two slopes)",
         .batch = 1,
         .qh = 12,
         .kvh = 4,
         .ql = 100,
         .kvl = 100,
         .d = 72,
         .causal = true,
         .alibi = AL_STD,
         .kt = BF16,
         .vt = BF16},
        {.name = "alibi q_len > kv_len (negative positions)",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 30,
         .kvl = 12,
         .d = 64,
         .alibi = AL_RANDOM},
        {.name = "alibi decode",
         .batch = 2,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 1000,
         .d = 64,
         .alibi = AL_STD,
         .kt = F16,
         .vt = F16},
        {.name = "alibi split-K decode",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 8192,
         .d = 40,
         .alibi = AL_RANDOM,
         .kt = BF16,
         .vt = BF16},
    };
    RUN(impl, cases, 500);
}

static void t_sinks(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "sinks prefill causal",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 120,
         .kvl = 140,
         .d = 64,
         .causal = true,
         .sinks = SK_RANDOM},
        {.name = "sinks prefill, as heavy as the keys",
         .batch = 2,
         .qh = 4,
         .kvh = 1,
         .ql = 100,
         .kvl = 150,
         .d = 40,
         .sinks = SK_HALF,
         .kt = F16,
         .vt = F16},
        {.name = "sinks all -inf (none)",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 100,
         .kvl = 100,
         .d = 64,
         .causal = true,
         .sinks = SK_NONE_INF},
        {.name = "sinks, rows that see nothing (q_len > kv_len)",
         .batch = 1,
         .qh = 6,
         .kvh = 2,
         .ql = 20,
         .kvl = 7,
         .d = 64,
         .causal = true,
         .sinks = SK_RANDOM},
        {.name = "sinks -inf, rows that see nothing",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 20,
         .kvl = 7,
         .d = 40,
         .causal = true,
         .sinks = SK_NONE_INF},
        {.name = "sinks, rows all masked",
         .batch = 1,
         .qh = 6,
         .kvh = 3,
         .ql = 100,
         .kvl = 80,
         .d = 40,
         .sinks = SK_RANDOM,
         .mask = MK_RANDOM,
         .mt = F32,
         .holes = 0.5f,
         .empty_rows = true},
        {.name = "sinks decode",
         .batch = 2,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 1000,
         .d = 72,
         .sinks = SK_HALF,
         .kt = BF16,
         .vt = BF16},
        {.name = "sinks split-K decode (counted once)",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 8192,
         .d = 64,
         .sinks = SK_HALF,
         .kt = F16,
         .vt = F16},
        {.name = "sinks split-K decode, long",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 1,
         .kvl = 20000,
         .d = 40,
         .sinks = SK_HALF},
        {.name = "sinks split-K decode, without lse",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 1,
         .kvl = 9000,
         .d = 32,
         .sinks = SK_HALF,
         .no_lse = true,
         .kt = F16,
         .vt = F16},
        {.name = "split-K decode that sees nothing, with sinks",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 1,
         .kvl = 8192,
         .d = 16,
         .sinks = SK_RANDOM,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 1.0f,
         .kt = F16,
         .vt = F16},
        {.name = "split-K decode that sees nothing, no sinks",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 1,
         .kvl = 8192,
         .d = 16,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 1.0f,
         .kt = F16,
         .vt = F16},
        {.name = "sinks prefill without lse",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 100,
         .kvl = 100,
         .d = 40,
         .causal = true,
         .sinks = SK_RANDOM,
         .no_lse = true},
    };
    RUN(impl, cases, 600);
}

static void t_all(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "all modifiers prefill",
         .batch = 2,
         .qh = 8,
         .kvh = 2,
         .ql = 150,
         .kvl = 200,
         .d = 64,
         .causal = true,
         .window = 96,
         .softcap = 4.0f,
         .alibi = AL_STD,
         .sinks = SK_RANDOM,
         .mask = MK_RANDOM,
         .mt = F16,
         .mb_batch = true,
         .holes = 0.25f,
         .range = 2.0f},
        {.name = "all modifiers prefill, odd head_dim, bf16",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 150,
         .kvl = 170,
         .d = 72,
         .dv = 40,
         .window = 60,
         .softcap = 3.0f,
         .alibi = AL_RANDOM,
         .sinks = SK_HALF,
         .mask = MK_RANDOM,
         .mt = BF16,
         .mb_heads = true,
         .holes = 0.3f,
         .kt = BF16,
         .vt = BF16,
         .range = 2.0f},
        {.name = "all modifiers prefill f16, token-major K/V",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 120,
         .kvl = 300,
         .d = 40,
         .causal = true,
         .window = 200,
         .softcap = 2.0f,
         .alibi = AL_STD,
         .sinks = SK_RANDOM,
         .mask = MK_RANDOM,
         .mt = F32,
         .holes = 0.2f,
         .kt = F16,
         .vt = F16,
         .lkv = L_TOKEN_MAJOR,
         .range = 2.0f},
        {.name = "all modifiers, block-diagonal",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 240,
         .kvl = 240,
         .d = 64,
         .causal = true,
         .window = 40,
         .softcap = 5.0f,
         .alibi = AL_STD,
         .sinks = SK_RANDOM,
         .mask = MK_BLOCKDIAG,
         .nseq = 3,
         .mt = F16,
         .mb_batch = true,
         .mb_heads = true,
         .range = 2.0f},
        {.name = "all modifiers decode",
         .batch = 2,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 900,
         .d = 64,
         .causal = true,
         .window = 512,
         .softcap = 3.0f,
         .alibi = AL_RANDOM,
         .sinks = SK_HALF,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 0.3f,
         .kt = F16,
         .vt = F16,
         .range = 2.0f},
        {.name = "all modifiers few-row decode",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 4,
         .kvl = 700,
         .d = 72,
         .causal = true,
         .window = 300,
         .softcap = 3.0f,
         .alibi = AL_STD,
         .sinks = SK_RANDOM,
         .mask = MK_RANDOM,
         .mt = F32,
         .mb_heads = true,
         .holes = 0.3f,
         .kt = BF16,
         .vt = BF16,
         .range = 2.0f},
        {.name = "all modifiers split-K decode",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 10000,
         .d = 64,
         .causal = true,
         .window = 6000,
         .softcap = 3.0f,
         .alibi = AL_RANDOM,
         .sinks = SK_HALF,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 0.4f,
         .kt = F16,
         .vt = F16,
         .range = 2.0f},
    };
    RUN(impl, cases, 700);
}

/* Keys a row does not see never reach it, whatever their K and V hold. */
static void t_hidden(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "NaN/inf outside the window",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 4,
         .kvl = 300,
         .d = 64,
         .causal = true,
         .window = 32,
         .poison = PZ_HIDDEN,
         .kt = F16,
         .vt = F16},
        {.name = "NaN/inf outside the window, split-K decode",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 9000,
         .d = 40,
         .causal = true,
         .window = 1500,
         .poison = PZ_HIDDEN},
        {.name = "NaN/inf outside a two-sided window",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 2,
         .kvl = 400,
         .d = 64,
         .window = 20,
         .poison = PZ_HIDDEN,
         .kt = BF16,
         .vt = BF16},
        {.name = "NaN/inf in keys masked -inf for every row",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 100,
         .kvl = 800,
         .d = 64,
         .mask = MK_TILES,
         .mt = F16,
         .mb_heads = true,
         .poison = PZ_HIDDEN},
        {.name = "NaN/inf in masked keys, decode",
         .batch = 2,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 700,
         .d = 72,
         .mask = MK_RANDOM,
         .mt = F32,
         .holes = 0.5f,
         .mb_heads = true,
         .poison = PZ_HIDDEN,
         .kt = F16,
         .vt = F16},
        {.name = "NaN/inf in masked keys, split-K decode",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 1,
         .kvl = 5000,
         .d = 64,
         .mask = MK_TILES,
         .mt = BF16,
         .poison = PZ_HIDDEN,
         .kt = BF16,
         .vt = BF16},
        {.name = "NaN/inf across sequences of a block-diagonal mask",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 200,
         .kvl = 200,
         .d = 40,
         .causal = true,
         .mask = MK_BLOCKDIAG,
         .nseq = 3,
         .mt = F16,
         .mb_heads = true,
         .poison = PZ_SOME},
        {.name = "NaN K / inf V seen by some rows, window",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 120,
         .kvl = 150,
         .d = 64,
         .causal = true,
         .window = 16,
         .poison = PZ_SOME,
         .kt = F16,
         .vt = F16},
        {.name = "NaN K / inf V seen by some rows, mask",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 100,
         .kvl = 120,
         .d = 72,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 0.6f,
         .poison = PZ_SOME,
         .sinks = SK_RANDOM},
        {.name = "NaN/inf hidden, all modifiers",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 3,
         .kvl = 2600,
         .d = 64,
         .causal = true,
         .window = 900,
         .softcap = 3.0f,
         .alibi = AL_STD,
         .sinks = SK_HALF,
         .mask = MK_TILES,
         .mt = F16,
         .mb_heads = true,
         .poison = PZ_HIDDEN,
         .kt = F16,
         .vt = F16,
         .range = 2.0f},
    };
    RUN(impl, cases, 800);
}

/* The same bits for any thread count: serial, and pools of 1, 2 and 3 threads (shuffled). */
static void t_determinism(const sdpa_impl *impl)
{
    static const vcase cases[] = {
        {.name = "all modifiers prefill",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 150,
         .kvl = 200,
         .d = 64,
         .causal = true,
         .window = 96,
         .softcap = 4.0f,
         .alibi = AL_STD,
         .sinks = SK_RANDOM,
         .mask = MK_RANDOM,
         .mt = F16,
         .mb_batch = true,
         .holes = 0.25f,
         .range = 2.0f,
         .kt = F16,
         .vt = F16},
        {.name = "split-K decode with sinks",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 12000,
         .d = 64,
         .causal = true,
         .window = 9000,
         .softcap = 3.0f,
         .alibi = AL_RANDOM,
         .sinks = SK_HALF,
         .mask = MK_RANDOM,
         .mt = F16,
         .holes = 0.3f,
         .kt = BF16,
         .vt = BF16,
         .range = 2.0f},
        {.name = "split-K decode, sinks only",
         .batch = 1,
         .qh = 4,
         .kvh = 1,
         .ql = 1,
         .kvl = 9000,
         .d = 40,
         .sinks = SK_HALF,
         .kt = F16,
         .vt = F16},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        prob pr;
        prob_init(&pr, &cases[ci], 900 + ci);
        const size_t ob = pr.o.n_elems * sizeof(float), lb = pr.lse_elems * sizeof(float);
        float *o0 = tl_xmalloc(ob), *l0 = tl_xmalloc(lb);
        sdpa_status st = prob_run(&pr, impl, NULL);
        CHECK(st == SDPA_OK, "%s serial: status %s", pr.what, sdpa_status_str(st));
        if (st == SDPA_OK) prob_check(&pr, 900 + ci, impl);
        memcpy(o0, pr.o.buf, ob);
        memcpy(l0, pr.lse, lb);
        for (int t = 0; t < 3; t++) {
            tview_sentinel(&pr.o);
            tl_fill_sentinel(pr.lse, pr.lse_elems);
            st = prob_run(&pr, impl, g_pool[t]);
            CHECK(st == SDPA_OK, "%s on %zu threads: status %s", pr.what,
                  bench_pool_threads(g_pool[t]), sdpa_status_str(st));
            CHECK(memcmp(o0, pr.o.buf, ob) == 0,
                  "%s: o on a pool of %zu threads differs from the serial call's bits", pr.what,
                  bench_pool_threads(g_pool[t]));
            CHECK(memcmp(l0, pr.lse, lb) == 0,
                  "%s: lse on a pool of %zu threads differs from the serial call's bits", pr.what,
                  bench_pool_threads(g_pool[t]));
        }
        free(o0);
        free(l0);
        prob_free(&pr);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Bad values: refused with a status and a message, nothing written                            */
/* ------------------------------------------------------------------------------------------ */
enum { BB = 2, BHQ = 4, BHK = 2, BLQ = 3, BLK = 5, BD = 8 };

typedef struct bcall {
    sdpa_params p;
    sdpa_tensor q, k, v, o, m;
    float slopes[BHQ], sinks[BHQ], mscales[BHQ];
} bcall;

static float b_q[BB * BHQ * BLQ * BD], b_k[BB * BHK * BLK * BD], b_v[BB * BHK * BLK * BD];
static float b_o[BB * BHQ * BLQ * BD], b_lse[BB * BHQ * BLQ], b_mask[BB * BHQ * BLQ * BLK];

static sdpa_tensor dense4(void *data, size_t h, size_t t, size_t d)
{
    return (sdpa_tensor){data, F32, (ptrdiff_t)(h * t * d), (ptrdiff_t)(t * d), (ptrdiff_t)d};
}

/* A valid call with every modifier on, which each case breaks in one way. */
static void bcall_init(bcall *c)
{
    memset(c, 0, sizeof *c);
    c->p.batch = BB, c->p.q_heads = BHQ, c->p.kv_heads = BHK, c->p.q_len = BLQ, c->p.kv_len = BLK,
    c->p.head_dim = BD;
    c->p.lse = b_lse;
    c->p.causal = true, c->p.window = 3, c->p.softcap = 5.0f;
    sdpa_alibi_slopes(BHQ, 8.0f, c->slopes);
    for (size_t h = 0; h < BHQ; h++) c->sinks[h] = 0.5f * (float)h;
    c->p.alibi_slopes = c->slopes, c->p.sinks = c->sinks;
    c->q = dense4(b_q, BHQ, BLQ, BD), c->k = dense4(b_k, BHK, BLK, BD),
    c->v = dense4(b_v, BHK, BLK, BD);
    c->o = dense4(b_o, BHQ, BLQ, BD);
    c->m = dense4(b_mask, BHQ, BLQ, BLK);
    c->p.mask = &c->m;
    for (size_t h = 0; h < BHQ; h++) c->mscales[h] = 0.25f * (float)h - 0.5f;
    c->p.mask_scales = c->mscales;
}

typedef struct bad_value {
    const char *name;
    void (*make)(bcall *c);
    sdpa_status want; /* SDPA_OK: a valid edge value, which must be accepted */
} bad_value;

#define BAD(fn, body)                                                                              \
    static void fn(bcall *c) { body; }
BAD(softcap_nan, c->p.softcap = NAN)
BAD(softcap_neg, c->p.softcap = -1.0f)
BAD(softcap_inf, c->p.softcap = INFINITY)
BAD(softcap_minf, c->p.softcap = -INFINITY)
BAD(slope_nan, c->slopes[1] = NAN)
BAD(slope_inf, c->slopes[3] = INFINITY)
BAD(slope_minf, c->slopes[0] = -INFINITY)
BAD(sink_nan, c->sinks[2] = NAN)
BAD(sink_inf, c->sinks[0] = INFINITY)
BAD(mask_dtype99, c->m.dtype = (sdpa_dtype)99)
BAD(mask_dtype_neg, c->m.dtype = (sdpa_dtype)-1)
BAD(mask_null, c->m.data = NULL)
BAD(mask_ts_overflow, c->m.token_stride = PTRDIFF_MAX / 2)
BAD(mask_bs_overflow, c->m.batch_stride = PTRDIFF_MIN / 2 + 1)
BAD(mask_hs_overflow, c->m.head_stride = PTRDIFF_MAX / 3)
BAD(mask_on_o, c->m.data = b_o + 5)
BAD(mask_on_lse, (c->m.data = b_lse, c->m.batch_stride = 0, c->m.head_stride = 0))
BAD(sink_minf, c->sinks[1] = -INFINITY)
BAD(slope_neg, c->slopes[2] = -0.25f)
BAD(softcap_zero, c->p.softcap = 0.0f)
BAD(mask_bcast, (c->m.batch_stride = 0, c->m.head_stride = 0))
BAD(mask_f16, c->m.dtype = F16)
BAD(mask_bf16, c->m.dtype = BF16)
BAD(mscale_nan, c->mscales[1] = NAN)
BAD(mscale_inf, c->mscales[3] = INFINITY)
BAD(mscale_minf, c->mscales[0] = -INFINITY)
BAD(mscale_no_mask, c->p.mask = NULL)
BAD(mscale_on_o, (c->p.mask_scales = b_o + 3))
BAD(mscale_on_lse, (c->p.mask_scales = b_lse + 1))
BAD(mscale_off, c->p.mask_scales = NULL)

static const bad_value bad_values[] = {
    {"softcap NaN", softcap_nan, SDPA_ERR_INVALID_ARGUMENT},
    {"softcap -1", softcap_neg, SDPA_ERR_INVALID_ARGUMENT},
    {"softcap +inf", softcap_inf, SDPA_ERR_INVALID_ARGUMENT},
    {"softcap -inf", softcap_minf, SDPA_ERR_INVALID_ARGUMENT},
    {"alibi slope NaN", slope_nan, SDPA_ERR_INVALID_ARGUMENT},
    {"alibi slope +inf", slope_inf, SDPA_ERR_INVALID_ARGUMENT},
    {"alibi slope -inf", slope_minf, SDPA_ERR_INVALID_ARGUMENT},
    {"sink NaN", sink_nan, SDPA_ERR_INVALID_ARGUMENT},
    {"sink +inf", sink_inf, SDPA_ERR_INVALID_ARGUMENT},
    {"mask dtype 99", mask_dtype99, SDPA_ERR_INVALID_ARGUMENT},
    {"mask dtype -1", mask_dtype_neg, SDPA_ERR_INVALID_ARGUMENT},
    {"mask data NULL", mask_null, SDPA_ERR_INVALID_ARGUMENT},
    {"mask token_stride PTRDIFF_MAX/2", mask_ts_overflow, SDPA_ERR_OVERFLOW},
    {"mask batch_stride PTRDIFF_MIN/2+1", mask_bs_overflow, SDPA_ERR_OVERFLOW},
    {"mask head_stride PTRDIFF_MAX/3", mask_hs_overflow, SDPA_ERR_OVERFLOW},
    {"mask overlapping o", mask_on_o, SDPA_ERR_INVALID_ARGUMENT},
    {"mask overlapping lse", mask_on_lse, SDPA_ERR_INVALID_ARGUMENT},
    {"mask_scales NaN", mscale_nan, SDPA_ERR_INVALID_ARGUMENT},
    {"mask_scales +inf", mscale_inf, SDPA_ERR_INVALID_ARGUMENT},
    {"mask_scales -inf", mscale_minf, SDPA_ERR_INVALID_ARGUMENT},
    {"mask_scales without a mask", mscale_no_mask, SDPA_ERR_INVALID_ARGUMENT},
    {"mask_scales overlapping o", mscale_on_o, SDPA_ERR_INVALID_ARGUMENT},
    {"mask_scales overlapping lse", mscale_on_lse, SDPA_ERR_INVALID_ARGUMENT},
    /* valid edge values: accepted */
    {"sink -inf (none)", sink_minf, SDPA_OK},
    {"negative alibi slope", slope_neg, SDPA_OK},
    {"softcap 0 (off)", softcap_zero, SDPA_OK},
    {"mask broadcast over batch and heads", mask_bcast, SDPA_OK},
    {"mask f16", mask_f16, SDPA_OK},
    {"mask bf16", mask_bf16, SDPA_OK},
    {"mask without mask_scales", mscale_off, SDPA_OK},
};

static bool b_untouched(void)
{
    for (size_t i = 0; i < sizeof b_o / sizeof b_o[0]; i++)
        if (!tl_is_sentinel(b_o[i])) return false;
    for (size_t i = 0; i < sizeof b_lse / sizeof b_lse[0]; i++)
        if (!tl_is_sentinel(b_lse[i])) return false;
    return true;
}

static void t_bad_values(const sdpa_impl *impl)
{
    tl_rng r = {77};
    tl_fill(&r, b_q, sizeof b_q / sizeof b_q[0], -1, 1);
    tl_fill(&r, b_k, sizeof b_k / sizeof b_k[0], -1, 1);
    tl_fill(&r, b_v, sizeof b_v / sizeof b_v[0], -1, 1);
    memset(b_mask, 0, sizeof b_mask); /* zeros in every mask type */
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
        const bad_value *bv = &bad_values[i];
        bcall c;
        bcall_init(&c);
        bv->make(&c);
        tl_fill_sentinel(b_o, sizeof b_o / sizeof b_o[0]);
        tl_fill_sentinel(b_lse, sizeof b_lse / sizeof b_lse[0]);
        char msg[256] = "";
        const sdpa_status sv = sdpa_validate(&c.p, &c.q, &c.k, &c.v, &c.o, msg, sizeof msg);
        size_t bytes = 0;
        const sdpa_status sw = sdpa_impl_workspace_size(impl, &c.p, &c.q, &c.k, &c.v, &c.o, &bytes);
        const sdpa_status st = sdpa_impl_forward(impl, &c.p, &c.q, &c.k, &c.v, &c.o);
        if (bv->want == SDPA_OK) {
            CHECK(st == SDPA_OK && sv == SDPA_OK && sw == SDPA_OK,
                  "%s: a valid call refused: forward %s, validate %s (\"%s\"), workspace_size %s",
                  bv->name, sdpa_status_str(st), sdpa_status_str(sv), msg, sdpa_status_str(sw));
            if (st == SDPA_OK) {
                bool finite = true;
                for (size_t e = 0; e < sizeof b_o / sizeof b_o[0]; e++)
                    finite &= isfinite(b_o[e]) != 0;
                CHECK(finite, "%s: accepted, but o holds a non-finite value", bv->name);
            }
            continue;
        }
        CHECK(st == bv->want, "%s: status %d (%s), want %d (%s)", bv->name, (int)st,
              sdpa_status_str(st), (int)bv->want, sdpa_status_str(bv->want));
        CHECK(sv == st, "%s: sdpa_validate says %s, the call %s", bv->name, sdpa_status_str(sv),
              sdpa_status_str(st));
        CHECK(sw == st, "%s: sdpa_workspace_size says %s, the call %s", bv->name,
              sdpa_status_str(sw), sdpa_status_str(st));
        CHECK(msg[0] != '\0' && strcmp(msg, "ok") != 0, "%s: sdpa_validate's message is \"%s\"",
              bv->name, msg);
        CHECK(b_untouched(), "%s: refused (%s) but o or lse was written", bv->name,
              sdpa_status_str(st));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* sdpa_alibi_slopes                                                                            */
/* ------------------------------------------------------------------------------------------ */
static void t_alibi_slopes(void)
{
    tl_start("variants: sdpa_alibi_slopes", "api");
    static const float biases[] = {8.0f, 1.0f, 0.5f, 12.5f};
    for (size_t bi = 0; bi < sizeof biases / sizeof biases[0]; bi++)
        for (size_t n = 1; n <= 12; n++) {
            float out[16];
            tl_fill_sentinel(out, 16);
            sdpa_alibi_slopes(n, biases[bi], out);
            size_t p2 = 1;
            while (p2 * 2 <= n) p2 *= 2;
            for (size_t h = 0; h < n; h++) {
                const double e =
                    h < p2 ? -(double)biases[bi] * (double)(h + 1) / (double)p2
                           : -(double)biases[bi] * (double)(2 * (h - p2) + 1) / (double)(2 * p2);
                const double want = pow(2.0, e);
                const double ulp = nextafterf(out[h], INFINITY) - out[h];
                CHECK(fabs(out[h] - want) <= ulp,
                      "n_heads %zu max_bias %g: slope[%zu] = %.9g, want %.17g (2^%g)", n,
                      biases[bi], h, out[h], want, e);
            }
            for (size_t h = n; h < 16; h++)
                CHECK(tl_is_sentinel(out[h]), "n_heads %zu: slope[%zu] past the end was written", n,
                      h);
        }
    float out[8];
    sdpa_alibi_slopes(8, 8.0f, out);
    for (size_t h = 0; h < 8; h++)
        CHECK(out[h] == ldexpf(1.0f, -(int)h - 1),
              "8 heads, max_bias 8: slope[%zu] = %.9g, want 2^-%zu exactly", h, out[h], h + 1);
    /* n_heads 0 and NULL write nothing */
    tl_fill_sentinel(out, 8);
    sdpa_alibi_slopes(0, 8.0f, out);
    CHECK(tl_is_sentinel(out[0]), "n_heads 0 wrote a slope");
    sdpa_alibi_slopes(4, 8.0f, NULL);
    tl_end();
}

/* ------------------------------------------------------------------------------------------ */
static tl_impl_fn current_fn;
static void with_bounds(const sdpa_impl *impl)
{
    const double eu = sdpa_impl_exp_max_ulp(impl), tu = sdpa_impl_tanh_max_ulp(impl);
    CHECK(isfinite(eu) && eu >= 0 && isfinite(tu) && tu >= 0,
          "stated bounds: exp %g ULP, tanh %g ULP", eu, tu);
    current_fn(impl);
}

static void run_test(const char *name, tl_impl_fn fn)
{
    current_fn = fn;
    cache_clear();
    tl_for_each_impl_worst(name, with_bounds, &worst_ratio);
    cache_clear();
}

int main(void)
{
    tl_header("attention variants (window, mask, softcap, ALiBi, sinks) against float64 attention");
    if (!tl_pools_create(g_pool, 3, 1, 5)) return 1;
    run_test("variants: no modifier (the oracle)", t_plain);
    run_test("variants: window", t_window);
    run_test("variants: mask", t_mask);
    run_test("variants: softcap", t_softcap);
    run_test("variants: alibi", t_alibi);
    run_test("variants: mask_scales (ggml's ALiBi)", t_mask_scales);
    run_test("variants: sinks", t_sinks);
    run_test("variants: all modifiers together", t_all);
    run_test("variants: hidden keys never reach a row", t_hidden);
    run_test("variants: same bits for 1, 2, 3 threads", t_determinism);
    tl_for_each_impl("variants: bad values refused", t_bad_values);
    t_alibi_slopes();
    return tl_pools_finish(g_pool, 3);
}
