/* test_layouts_xcheck.c -- ragged, packed and paged layouts and sdpa_merge against a second,
 * independent float64 oracle */
#include "attn.h"
#include "test_pools.h"

/*
 * A second check of the serving layouts of sdpa_params, separate code from test_layouts.c, its
 * oracle written from the contract in sdpa.h alone. It stays independent on purpose: it does
 * not use problem.h or attn.h's attn_oracle64 (the builder and float64 oracle every other
 * forward test shares), so that a mistake in those cannot hide the same mistake in the
 * library; the fuzz target (tests/fuzz) keeps its own oracle for the same reason. A problem is a
 * batch of sequences of their own lengths (lq_b queries, lk_b keys) held as logical rows (the
 * values as stored: f16/bf16 K, V and mask converted exactly), which the call sees through one
 * physical form per side:
 *
 *   queries  uniform (every sequence q_len), padded (q_lens; q token-major, o head-major with
 *            padded strides) or packed (cu_q; q [tokens][Hq][D], o [Hq][tokens][Dv + 1], and a
 *            batch_stride that would leave the buffers if it were used)
 *   keys     uniform, padded (kv_lens; K head-major, V token-major), packed (cu_kv) or paged
 *            (block table over pages [n][Hkv][page][D] or [n][page][Hkv][D]; pages handed out
 *            in runs of 1 to 3 consecutive numbers to sequences picked at random, so sequences
 *            interleave and some pages are adjacent; lengths from kv_lens or kv_len)
 *
 * Every element no sequence owns (padding rows, keys past lk_b, spare pages, the rest of a
 * last page, mask entries outside a sequence) holds NaN: reading one shows in an output. o and
 * lse start as sentinels, and every element outside the sequences' rows must stay one. The
 * oracle attends, for row (b, h, i < lq_b) at i' = i + lk_b - lq_b, the keys j < lk_b that
 * causal (j <= i'), the window (|i' - j| < w) and the mask (not -inf) leave, with
 * s = softcap(scale q.k) - slope_h |i' - j| + mask and sink_h in the denominator.
 *
 * Tolerance of an output element, relative to sum_j w_j |v_jc| / l: attn_row_tol (attn.h) plus
 * the implementation's exp bound (4 ulp_exp u), plus 2 ds (|v| + |o|) with ds the largest
 * error of a score's modifiers (3 u (|softcap(s)| + |bias| + |mask|), the softcap's own
 * (2 ulp_tanh + 2) u c, a sink weight's u |sink - M|), plus the SIMD flush bound of sdpa.h
 * (n e^-54 max|v| / l). A merge adds, per part, its lse error as a relative weight error:
 * 3 delta with delta = E (1 + max_i |lse_i|).
 */

static bench_pool *g_pool[4]; /* 1, 2, 3 (shuffled) and 7 (reversed) threads */

#define F32  SDPA_F32
#define F16  SDPA_F16
#define BF16 SDPA_BF16

enum { MAXB = 16, MARGIN = 24 };

/* A packed view's batch_stride: any use of it would address memory far outside the buffers. */
#define UNUSED_STRIDE ((ptrdiff_t)1 << 33)

enum { QF_UNIFORM = 0, QF_PADDED, QF_PACKED };
enum { KF_UNIFORM = 0, KF_PADDED, KF_PACKED, KF_PAGED, KF_PAGED_UNIFORM };
static const char *const qf_names[] = {"q uniform", "q padded (q_lens)", "q packed (cu_q)"};
static const char *const kf_names[] = {"kv uniform", "kv padded (kv_lens)", "kv packed (cu_kv)",
                                       "kv paged (kv_lens)", "kv paged (kv_len)"};

typedef struct lcase {
    const char *name;
    size_t B, hq, hk, d, dv; /* dv 0: d */
    size_t lq[MAXB], lk[MAXB];
    size_t q_slack, k_slack; /* q_len = max lq + q_slack, kv_len likewise */
    int qf, kf;
    size_t page;
    bool page_tm; /* pages token-major [page][Hkv][D] (vLLM's), else head-major */
    sdpa_dtype kt, vt;
    bool causal;
    size_t window;
    float softcap;
    bool alibi, mask, sinks, no_lse;
} lcase;

static const char *dtn(sdpa_dtype t) { return t == F16 ? "f16" : t == BF16 ? "bf16" : "f32"; }

static size_t sz(size_t native, size_t sampled) { return tl_sample() > 1 ? sampled : native; }

/* ------------------------------------------------------------------------------------------ */
/* A problem                                                                                    */
/* ------------------------------------------------------------------------------------------ */
typedef struct lprob {
    lcase c;
    size_t Lq, Lk, Dv, ntq, ntk;
    size_t q_lens[MAXB], kv_lens[MAXB], cu_q[MAXB + 1], cu_kv[MAXB + 1];
    size_t rowbase[MAXB + 1], kbase[MAXB + 1]; /* logical rows: query (b, h, i), key (b, hk, j) */
    float *ql, *kl, *vl, *mk;                  /* logical values; mk [B][Hq][Lq][Lk] */
    float *slopes, *sinks;
    float *qbuf, *obuf, *lbuf; /* obuf, lbuf: MARGIN sentinels either side */
    size_t qn, on, ln;
    size_t qbs, qhs, qts, obs, ohs, ots, kbs, khs, kts, vbs, vhs, vts;
    void *kbuf, *vbuf;
    size_t kn, vn;
    uint16_t *mbuf;
    int32_t *table;
    size_t max_pages, n_pages;
    sdpa_params p;
    sdpa_tensor tq, tk, tv, to, tm;
    char what[600];
} lprob;

static size_t qrow(const lprob *pr, size_t b, size_t h, size_t i)
{
    return pr->rowbase[b] + h * pr->c.lq[b] + i;
}
static size_t krow(const lprob *pr, size_t b, size_t h, size_t j)
{
    return pr->kbase[b] + h * pr->c.lk[b] + j;
}

static size_t q_at(const lprob *pr, size_t b, size_t h, size_t i)
{
    if (pr->c.qf == QF_PACKED) return h * pr->qhs + (pr->cu_q[b] + i) * pr->qts;
    return b * pr->qbs + h * pr->qhs + i * pr->qts;
}

static size_t o_at(const lprob *pr, size_t b, size_t h, size_t i)
{
    if (pr->c.qf == QF_PACKED) return h * pr->ohs + (pr->cu_q[b] + i) * pr->ots;
    return b * pr->obs + h * pr->ohs + i * pr->ots;
}

static size_t kv_at(const lprob *pr, bool isv, size_t b, size_t h, size_t j)
{
    const size_t bs = isv ? pr->vbs : pr->kbs, hs = isv ? pr->vhs : pr->khs,
                 ts = isv ? pr->vts : pr->kts;
    switch (pr->c.kf) {
    case KF_PACKED:
        return h * hs + (pr->cu_kv[b] + j) * ts;
    case KF_PAGED:
    case KF_PAGED_UNIFORM: {
        const size_t ps = pr->c.page, P = (size_t)pr->table[b * pr->max_pages + j / ps];
        return P * bs + h * hs + (j % ps) * ts;
    }
    default:
        return b * bs + h * hs + j * ts;
    }
}

/* The block table: pages in runs of consecutive numbers, the runs shuffled, handed 1 to 3 at a
   time to a random sequence with pages left; unused entries hold out-of-range garbage. */
static void make_pages(lprob *pr, tl_rng *r)
{
    const lcase *c = &pr->c;
    const size_t B = c->B, ps = c->page;
    size_t np[MAXB], used = 0, most = 0;
    for (size_t b = 0; b < B; b++) {
        np[b] = (c->lk[b] + ps - 1) / ps;
        used += np[b];
        if (np[b] > most) most = np[b];
    }
    pr->max_pages = most + (c->kf == KF_PAGED ? 1 : 0); /* kv_len: exactly enough */
    if (pr->max_pages == 0) pr->max_pages = 1;
    pr->n_pages = used + 3; /* spare pages, NaN throughout */
    const size_t N = pr->n_pages;
    size_t *start = tl_xmalloc(N * sizeof(size_t)), *len = tl_xmalloc(N * sizeof(size_t)), nr = 0;
    for (size_t P = 0; P < N; nr++) {
        start[nr] = P;
        len[nr] = 1 + tl_below(r, 3);
        if (P + len[nr] > N) len[nr] = N - P;
        P += len[nr];
    }
    for (size_t e = nr - 1; e > 0; e--) {
        const size_t j = tl_below(r, e + 1), s = start[e], l = len[e];
        start[e] = start[j], len[e] = len[j], start[j] = s, len[j] = l;
    }
    size_t *order = tl_xmalloc(N * sizeof(size_t)), n = 0;
    for (size_t e = 0; e < nr; e++)
        for (size_t t = 0; t < len[e]; t++) order[n++] = start[e] + t;
    pr->table = tl_xmalloc(B * pr->max_pages * sizeof(int32_t));
    const int32_t garbage[5] = {-1, (int32_t)N, INT32_MAX, INT32_MIN, (int32_t)N + 1000};
    for (size_t e = 0; e < B * pr->max_pages; e++) pr->table[e] = garbage[e % 5];
    size_t have[MAXB] = {0}, next = 0;
    for (;;) {
        size_t b = tl_below(r, B), tries = 0;
        while (tries < B && have[b] == np[b]) b = (b + 1) % B, tries++;
        if (tries == B) break;
        for (size_t t = 1 + tl_below(r, 3); t > 0 && have[b] < np[b]; t--)
            pr->table[b * pr->max_pages + have[b]++] = (int32_t)order[next++];
    }
    free(start), free(len), free(order);
    const size_t Hk = c->hk, D = c->d, Dv = pr->Dv;
    if (c->page_tm) {
        pr->khs = D, pr->kts = Hk * D, pr->kbs = ps * Hk * D;
        pr->vhs = Dv, pr->vts = Hk * Dv, pr->vbs = ps * Hk * Dv;
    } else {
        pr->kts = D, pr->khs = ps * D, pr->kbs = Hk * ps * D;
        pr->vts = Dv, pr->vhs = ps * Dv, pr->vbs = Hk * ps * Dv;
    }
    pr->kn = N * pr->kbs, pr->vn = N * pr->vbs;
}

static void lprob_init(lprob *pr, const lcase *cin, uint64_t seed)
{
    memset(pr, 0, sizeof *pr);
    pr->c = *cin;
    const lcase *c = &pr->c;
    tl_rng r = {seed};
    const size_t B = c->B, Hq = c->hq, Hk = c->hk, D = c->d, Dv = c->dv ? c->dv : c->d;
    pr->Dv = Dv;
    for (size_t b = 0; b < B; b++) {
        if (c->lq[b] > pr->Lq) pr->Lq = c->lq[b];
        if (c->lk[b] > pr->Lk) pr->Lk = c->lk[b];
    }
    pr->Lq += c->q_slack, pr->Lk += c->k_slack;
    if (pr->Lq == 0) pr->Lq = 1;
    if (pr->Lk == 0) pr->Lk = 1;
    const size_t Lq = pr->Lq, Lk = pr->Lk;
    for (size_t b = 0; b < B; b++) {
        if ((c->qf == QF_UNIFORM && c->lq[b] != Lq) ||
            ((c->kf == KF_UNIFORM || c->kf == KF_PAGED_UNIFORM) && c->lk[b] != Lk)) {
            printf("Bail out! case \"%s\": a uniform side needs every sequence at the bound\n",
                   c->name);
            exit(1);
        }
        pr->q_lens[b] = c->lq[b], pr->kv_lens[b] = c->lk[b];
        pr->cu_q[b + 1] = pr->cu_q[b] + c->lq[b];
        pr->cu_kv[b + 1] = pr->cu_kv[b] + c->lk[b];
        pr->rowbase[b + 1] = pr->rowbase[b] + Hq * c->lq[b];
        pr->kbase[b + 1] = pr->kbase[b] + Hk * c->lk[b];
    }
    /* logical data first, so that cases of one seed and one logical problem share it whatever
       their forms (the oracle cache relies on it) */
    const size_t rows = pr->rowbase[B], krows = pr->kbase[B];
    pr->ql = tl_xmalloc((rows + 1) * D * sizeof(float));
    pr->kl = tl_xmalloc((krows + 1) * D * sizeof(float));
    pr->vl = tl_xmalloc((krows + 1) * Dv * sizeof(float));
    for (size_t e = 0; e < rows * D; e++) pr->ql[e] = tl_uniform(&r, -1.0f, 1.0f);
    for (size_t e = 0; e < krows * D; e++)
        pr->kl[e] = tl_stored(c->kt, tl_uniform(&r, -1.0f, 1.0f));
    for (size_t e = 0; e < krows * Dv; e++)
        pr->vl[e] = tl_stored(c->vt, tl_uniform(&r, -1.0f, 1.0f));
    sdpa_params *p = &pr->p;
    if (c->mask) {
        /* f16 [B][Hq][Lq][Lk + 4]: -inf holes, rows (h % 3 == 1, i % 7 == 3) all -inf, NaN
           wherever no sequence's (i, j) is */
        const size_t mts = Lk + 4, mhs = Lq * mts, mbs = Hq * mhs, n = B * mbs;
        pr->mbuf = tl_xmalloc(n * sizeof(uint16_t));
        pr->mk = tl_xmalloc(B * Hq * Lq * Lk * sizeof(float));
        for (size_t e = 0; e < n; e++) pr->mbuf[e] = sdpa_f32_to_f16(NAN);
        for (size_t e = 0; e < B * Hq * Lq * Lk; e++) pr->mk[e] = NAN;
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < Hq; h++)
                for (size_t i = 0; i < c->lq[b]; i++)
                    for (size_t j = 0; j < c->lk[b]; j++) {
                        float x = tl_uniform(&r, 0.0f, 1.0f) < 0.15f ? -INFINITY
                                                                     : tl_uniform(&r, -2.0f, 2.0f);
                        if (h % 3 == 1 && i % 7 == 3) x = -INFINITY;
                        const uint16_t hb = sdpa_f32_to_f16(x);
                        pr->mbuf[b * mbs + h * mhs + i * mts + j] = hb;
                        pr->mk[((b * Hq + h) * Lq + i) * Lk + j] = sdpa_f16_to_f32(hb);
                    }
        pr->tm = (sdpa_tensor){pr->mbuf, F16, (ptrdiff_t)mbs, (ptrdiff_t)mhs, (ptrdiff_t)mts};
        p->mask = &pr->tm;
    }
    if (c->alibi) {
        pr->slopes = tl_xmalloc(Hq * sizeof(float));
        sdpa_alibi_slopes(Hq, 8.0f, pr->slopes);
        p->alibi_slopes = pr->slopes;
    }
    if (c->sinks) { /* h % 3 == 2: no sink (-inf) */
        pr->sinks = tl_xmalloc(Hq * sizeof(float));
        for (size_t h = 0; h < Hq; h++)
            pr->sinks[h] = h % 3 == 2 ? -INFINITY : tl_uniform(&r, -1.0f, 3.0f);
        p->sinks = pr->sinks;
    }

    /* queries and outputs */
    if (c->qf == QF_PACKED) {
        pr->ntq = pr->cu_q[B] ? pr->cu_q[B] : 1;
        pr->qhs = D, pr->qts = Hq * D, pr->qn = pr->ntq * Hq * D;
        pr->ots = Dv + 1, pr->ohs = pr->ntq * pr->ots, pr->on = Hq * pr->ohs;
    } else {
        pr->qhs = D + 1, pr->qts = Hq * (D + 1), pr->qbs = Lq * pr->qts, pr->qn = B * pr->qbs;
        pr->ots = Dv + 3, pr->ohs = Lq * pr->ots + 2, pr->obs = Hq * pr->ohs + 5,
        pr->on = B * pr->obs;
    }
    pr->qbuf = tl_xmalloc(pr->qn * sizeof(float));
    for (size_t e = 0; e < pr->qn; e++) pr->qbuf[e] = NAN;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++)
                memcpy(pr->qbuf + q_at(pr, b, h, i), pr->ql + qrow(pr, b, h, i) * D,
                       D * sizeof(float));
    pr->obuf = tl_xmalloc((pr->on + 2 * MARGIN) * sizeof(float));
    pr->ln = B * Hq * Lq;
    pr->lbuf = tl_xmalloc((pr->ln + 2 * MARGIN) * sizeof(float));
    const bool qpk = c->qf == QF_PACKED;
    pr->tq = (sdpa_tensor){pr->qbuf, F32, qpk ? UNUSED_STRIDE : (ptrdiff_t)pr->qbs,
                           (ptrdiff_t)pr->qhs, (ptrdiff_t)pr->qts};
    pr->to = (sdpa_tensor){pr->obuf + MARGIN, F32, qpk ? UNUSED_STRIDE : (ptrdiff_t)pr->obs,
                           (ptrdiff_t)pr->ohs, (ptrdiff_t)pr->ots};

    /* keys and values */
    switch (c->kf) {
    case KF_PACKED:
        pr->ntk = pr->cu_kv[B] ? pr->cu_kv[B] : 1;
        pr->khs = D, pr->kts = Hk * D, pr->kn = pr->ntk * Hk * D;
        pr->vts = Dv, pr->vhs = pr->ntk * Dv, pr->vn = Hk * pr->vhs;
        break;
    case KF_PAGED:
    case KF_PAGED_UNIFORM:
        make_pages(pr, &r);
        break;
    default:
        pr->kts = D, pr->khs = Lk * D, pr->kbs = Hk * pr->khs, pr->kn = B * pr->kbs;
        pr->vhs = Dv + 2, pr->vts = Hk * (Dv + 2), pr->vbs = Lk * pr->vts, pr->vn = B * pr->vbs;
    }
    const size_t ke = sdpa_dtype_size(c->kt), ve = sdpa_dtype_size(c->vt);
    pr->kbuf = tl_xmalloc(pr->kn * ke), pr->vbuf = tl_xmalloc(pr->vn * ve);
    tl_fill_nan(pr->kbuf, c->kt, pr->kn), tl_fill_nan(pr->vbuf, c->vt, pr->vn);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hk; h++)
            for (size_t j = 0; j < c->lk[b]; j++) {
                const size_t ka = kv_at(pr, false, b, h, j), va = kv_at(pr, true, b, h, j),
                             lr = krow(pr, b, h, j);
                for (size_t e = 0; e < D; e++) tl_put(pr->kbuf, c->kt, ka + e, pr->kl[lr * D + e]);
                for (size_t e = 0; e < Dv; e++)
                    tl_put(pr->vbuf, c->vt, va + e, pr->vl[lr * Dv + e]);
            }
    const bool kpk = c->kf == KF_PACKED;
    pr->tk = (sdpa_tensor){pr->kbuf, c->kt, kpk ? UNUSED_STRIDE : (ptrdiff_t)pr->kbs,
                           (ptrdiff_t)pr->khs, (ptrdiff_t)pr->kts};
    pr->tv = (sdpa_tensor){pr->vbuf, c->vt, kpk ? UNUSED_STRIDE : (ptrdiff_t)pr->vbs,
                           (ptrdiff_t)pr->vhs, (ptrdiff_t)pr->vts};

    p->batch = B, p->q_heads = Hq, p->kv_heads = Hk, p->q_len = Lq, p->kv_len = Lk, p->head_dim = D,
    p->v_dim = c->dv;
    p->causal = c->causal, p->window = c->window, p->softcap = c->softcap;
    p->lse = c->no_lse ? NULL : pr->lbuf + MARGIN;
    if (c->qf == QF_PADDED) p->q_lens = pr->q_lens;
    if (c->qf == QF_PACKED) p->cu_q = pr->cu_q;
    if (c->kf == KF_PADDED || c->kf == KF_PAGED) p->kv_lens = pr->kv_lens;
    if (c->kf == KF_PACKED) p->cu_kv = pr->cu_kv;
    if (c->kf == KF_PAGED || c->kf == KF_PAGED_UNIFORM) {
        p->block_table = pr->table, p->page_size = c->page, p->max_pages = pr->max_pages,
        p->n_pages = pr->n_pages;
    }
    tl_fill_sentinel(pr->obuf, pr->on + 2 * MARGIN);
    tl_fill_sentinel(pr->lbuf, pr->ln + 2 * MARGIN);

    int w = snprintf(pr->what, sizeof pr->what,
                     "%s [B=%zu hq=%zu hkv=%zu d=%zu dv=%zu q_len=%zu kv_len=%zu %s, %s", c->name,
                     B, Hq, Hk, D, Dv, Lq, Lk, qf_names[c->qf], kf_names[c->kf]);
#define MORE(...)                                                                                  \
    (w += snprintf(pr->what + w, w < (int)sizeof pr->what ? sizeof pr->what - (size_t)w : 0,       \
                   __VA_ARGS__))
    if (c->kf >= KF_PAGED)
        MORE(" page=%zu %s max_pages=%zu n_pages=%zu", c->page,
             c->page_tm ? "token-major" : "head-major", pr->max_pages, pr->n_pages);
    MORE(" K %s V %s%s", dtn(c->kt), dtn(c->vt), c->causal ? " causal" : "");
    if (c->window) MORE(" window=%zu", c->window);
    if (c->softcap != 0) MORE(" softcap=%g", c->softcap);
    if (c->alibi) MORE(" alibi");
    if (c->mask) MORE(" mask f16");
    if (c->sinks) MORE(" sinks");
    if (c->no_lse) MORE(" no-lse");
    MORE(" lq=");
    for (size_t b = 0; b < B; b++) MORE("%s%zu", b ? "," : "", c->lq[b]);
    MORE(" lk=");
    for (size_t b = 0; b < B; b++) MORE("%s%zu", b ? "," : "", c->lk[b]);
    MORE("]");
#undef MORE
}

static void lprob_free(lprob *pr)
{
    free(pr->ql), free(pr->kl), free(pr->vl), free(pr->mk), free(pr->slopes), free(pr->sinks);
    free(pr->qbuf), free(pr->obuf), free(pr->lbuf), free(pr->kbuf), free(pr->vbuf), free(pr->mbuf),
        free(pr->table);
}

static void lprob_reset(lprob *pr)
{
    tl_fill_sentinel(pr->obuf, pr->on + 2 * MARGIN);
    tl_fill_sentinel(pr->lbuf, pr->ln + 2 * MARGIN);
}

static sdpa_status call(const lprob *pr, const sdpa_params *pp, const sdpa_impl *impl,
                        bench_pool *pool, void *ws, size_t ws_bytes)
{
    sdpa_params p = *pp;
    p.workspace = ws, p.workspace_bytes = ws_bytes;
    return tl_forward_on(impl, &p, pool, &pr->tq, &pr->tk, &pr->tv, &pr->to);
}

/* ------------------------------------------------------------------------------------------ */
/* The oracle                                                                                   */
/* ------------------------------------------------------------------------------------------ */
typedef struct lkey { /* what the oracle's answer depends on */
    uint64_t seed;
    size_t B, hq, hk, d, dv, lq[MAXB], lk[MAXB], window;
    sdpa_dtype kt, vt;
    float softcap;
    bool causal, alibi, mask, sinks;
} lkey;

typedef struct lref {
    lkey key;
    unsigned char *none; /* per row: sees no key */
    size_t *seen;        /* per row */
    double *o, *lse;     /* per element, per row */
    float *wabs, *fl;    /* per element: sum w |v| / l, the flush bound */
    float *e0, *ds;      /* per row: attn_row_tol, the largest modifier error of a score */
} lref;

static lkey key_of(const lcase *c, uint64_t seed)
{
    lkey k;
    memset(&k, 0, sizeof k);
    k.seed = seed, k.B = c->B, k.hq = c->hq, k.hk = c->hk, k.d = c->d, k.dv = c->dv ? c->dv : c->d;
    memcpy(k.lq, c->lq, sizeof k.lq), memcpy(k.lk, c->lk, sizeof k.lk);
    k.window = c->window, k.kt = c->kt, k.vt = c->vt, k.softcap = c->softcap;
    k.causal = c->causal, k.alibi = c->alibi, k.mask = c->mask, k.sinks = c->sinks;
    return k;
}

static void oracle(const lprob *pr, uint64_t seed, lref *r)
{
    const lcase *c = &pr->c;
    const size_t Hq = c->hq, G = c->hq / c->hk, D = c->d, Dv = pr->Dv, Lq = pr->Lq, Lk = pr->Lk;
    const size_t rows = pr->rowbase[c->B] + 1;
    const double scale = 1.0 / sqrt((double)D), u = TL_U, cap = c->softcap;
    r->key = key_of(c, seed);
    r->none = tl_xmalloc(rows), r->seen = tl_xmalloc(rows * sizeof(size_t));
    r->o = tl_xmalloc(rows * Dv * sizeof(double)), r->lse = tl_xmalloc(rows * sizeof(double));
    r->wabs = tl_xmalloc(rows * Dv * sizeof(float)), r->fl = tl_xmalloc(rows * Dv * sizeof(float));
    r->e0 = tl_xmalloc(rows * sizeof(float)), r->ds = tl_xmalloc(rows * sizeof(float));
    double *s = tl_xmalloc((Lk + 1) * sizeof(double));
    size_t *idx = tl_xmalloc((Lk + 1) * sizeof(size_t));
    for (size_t b = 0; b < c->B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++) {
                const size_t row = qrow(pr, b, h, i), hk = h / G;
                const long long ip = (long long)i + (long long)c->lk[b] - (long long)c->lq[b];
                const float *qr = pr->ql + row * D;
                const double sink = pr->sinks ? (double)pr->sinks[h] : -INFINITY;
                const double slope = pr->slopes ? (double)pr->slopes[h] : 0.0;
                size_t n = 0;
                double mx = -INFINITY, A = 0.0, ds = 0.0;
                for (size_t j = 0; j < c->lk[b]; j++) {
                    const long long jj = (long long)j;
                    if (c->causal && jj > ip) continue;
                    if (c->window && llabs(ip - jj) >= (long long)c->window) continue;
                    const double mv =
                        pr->mk ? (double)pr->mk[((b * Hq + h) * Lq + i) * Lk + j] : 0.0;
                    if (mv == -INFINITY) continue;
                    const float *kr = pr->kl + krow(pr, b, hk, j) * D;
                    double acc = 0.0, mag = 0.0;
                    for (size_t e = 0; e < D; e++) {
                        acc += (double)qr[e] * kr[e];
                        mag += fabs((double)qr[e] * kr[e]);
                    }
                    double x = scale * acc;
                    if (cap > 0) x = cap * tanh(x / cap);
                    const double bias = -slope * fabs((double)(ip - jj));
                    s[n] = x + bias + mv;
                    idx[n++] = j;
                    if (s[n - 1] > mx) mx = s[n - 1];
                    if (scale * mag > A) A = scale * mag;
                    ds = fmax(ds, 3.0 * u * (fabs(x) + fabs(bias) + fabs(mv)));
                }
                r->seen[row] = n;
                r->none[row] = n == 0;
                if (n == 0) {
                    r->lse[row] = sink;
                    r->e0[row] = r->ds[row] = 0.0f;
                    for (size_t e = 0; e < Dv; e++)
                        r->o[row * Dv + e] = 0.0,
                                        r->wabs[row * Dv + e] = r->fl[row * Dv + e] = 0.0f;
                    continue;
                }
                const double M = fmax(mx, sink);
                double l = 0.0;
                for (size_t t = 0; t < n; t++) l += (s[t] = exp(s[t] - M));
                if (sink > -INFINITY) {
                    l += exp(sink - M);
                    ds = fmax(ds, u * fabs(sink - M));
                }
                for (size_t e = 0; e < Dv; e++) {
                    double num = 0.0, wa = 0.0, vmax = 0.0;
                    for (size_t t = 0; t < n; t++) {
                        const double vv = pr->vl[krow(pr, b, hk, idx[t]) * Dv + e];
                        num += s[t] * vv, wa += s[t] * fabs(vv);
                        vmax = fmax(vmax, fabs(vv));
                    }
                    r->o[row * Dv + e] = num / l;
                    r->wabs[row * Dv + e] = (float)(wa / l);
                    r->fl[row * Dv + e] = (float)((double)n * SDPA_TEST_FLUSH * vmax / l);
                }
                r->lse[row] = M + log(l);
                r->e0[row] = (float)attn_row_tol(n, D, A);
                r->ds[row] = (float)ds;
            }
    free(s), free(idx);
}

static void lref_free(lref *r)
{
    free(r->none), free(r->seen), free(r->o), free(r->lse), free(r->wabs), free(r->fl), free(r->e0),
        free(r->ds);
    memset(r, 0, sizeof *r);
}

/* Answers of the current test, shared by its implementations (the oracle is the slow part
   under emulation); cleared between tests. */
enum { MAX_CACHED = 40 };
static lref g_cache[MAX_CACHED];
static size_t g_ncached;

static void cache_clear(void)
{
    for (size_t i = 0; i < g_ncached; i++) lref_free(&g_cache[i]);
    g_ncached = 0;
}

static bool key_eq(const lkey *a, const lkey *b)
{
    bool eq = a->seed == b->seed && a->B == b->B && a->hq == b->hq && a->hk == b->hk &&
              a->d == b->d && a->dv == b->dv && a->window == b->window && a->kt == b->kt &&
              a->vt == b->vt && a->softcap == b->softcap && a->causal == b->causal &&
              a->alibi == b->alibi && a->mask == b->mask && a->sinks == b->sinks;
    for (size_t i = 0; i < MAXB; i++) eq = eq && a->lq[i] == b->lq[i] && a->lk[i] == b->lk[i];
    return eq;
}

static const lref *oracle_for(const lprob *pr, uint64_t seed)
{
    const lkey k = key_of(&pr->c, seed);
    for (size_t i = 0; i < g_ncached; i++)
        if (key_eq(&g_cache[i].key, &k)) return &g_cache[i];
    if (g_ncached == MAX_CACHED) cache_clear();
    oracle(pr, seed, &g_cache[g_ncached]);
    return &g_cache[g_ncached++];
}

/* ------------------------------------------------------------------------------------------ */
/* Checks                                                                                       */
/* ------------------------------------------------------------------------------------------ */
static double g_worst; /* largest |error| / tolerance of the current test point */

typedef struct tolp {
    double E;    /* the implementation's exp bound: 4 ulp_exp u */
    double capx; /* the softcap's error per score, (2 ulp_tanh + 2) u c */
} tolp;

static tolp tol_of(const sdpa_impl *impl, float softcap)
{
    tolp t;
    t.E = 4.0 * sdpa_impl_exp_max_ulp(impl) * TL_U;
    t.capx =
        softcap > 0 ? (2.0 * sdpa_impl_tanh_max_ulp(impl) + 2.0) * TL_U * (double)softcap : 0.0;
    return t;
}

static void note(double err, double tol)
{
    if (tol > 0 && err / tol > g_worst) g_worst = err / tol;
}

/* One row against the oracle; extra widens the relative term (a merge's weight errors). */
static bool row_ok(const lref *r, size_t row, size_t Dv, const float *got, const float *glse,
                   tolp t, double extra, const char *what, size_t b, size_t h, size_t i)
{
    if (r->none[row]) {
        for (size_t e = 0; e < Dv; e++)
            if (!CHECK(got[e] == 0.0f, "%s: b=%zu h=%zu i=%zu sees no key: o[%zu] = %g, want 0",
                       what, b, h, i, e, got[e]))
                return false;
        return !glse || CHECK(*glse == (float)r->lse[row],
                              "%s: b=%zu h=%zu i=%zu sees no key: lse %.9g, want %.9g", what, b, h,
                              i, *glse, (float)r->lse[row]);
    }
    const double Er = r->e0[row] + t.E + extra, ds = r->ds[row] + t.capx;
    for (size_t e = 0; e < Dv; e++) {
        const double ref = r->o[row * Dv + e], wa = r->wabs[row * Dv + e];
        const double tol =
            Er * wa + 2.0 * ds * (wa + fabs(ref)) + r->fl[row * Dv + e] + FLT_TRUE_MIN;
        note(fabs(got[e] - ref), tol);
        if (!CHECK(fabs(got[e] - ref) <= tol,
                   "%s: b=%zu h=%zu i=%zu (sees %zu keys) o[%zu] = %.9g, float64 %.9g, |err| %.3g "
                   "> tol %.3g",
                   what, b, h, i, r->seen[row], e, got[e], ref, fabs(got[e] - ref), tol))
            return false;
    }
    if (!glse) return true;
    const double lref_ = r->lse[row], tol = Er * (1.0 + fabs(lref_)) + 2.0 * ds;
    note(fabs(*glse - lref_), tol);
    return CHECK(fabs(*glse - lref_) <= tol,
                 "%s: b=%zu h=%zu i=%zu lse %.9g, float64 %.9g, tol %.3g", what, b, h, i, *glse,
                 lref_, tol);
}

/* o and lse of the last call against the oracle; every element outside the sequences' rows
   (padding, the margins, lse past q_lens[b]; all of lse without p->lse) still a sentinel. */
static void lprob_check(const lprob *pr, const lref *r, tolp t, const char *tag)
{
    const lcase *c = &pr->c;
    const size_t Hq = c->hq, Dv = pr->Dv, Lq = pr->Lq;
    unsigned char *own = tl_xmalloc(pr->on + 2 * MARGIN), *lown = tl_xmalloc(pr->ln + 2 * MARGIN);
    memset(own, 0, pr->on + 2 * MARGIN), memset(lown, 0, pr->ln + 2 * MARGIN);
    char what[700];
    snprintf(what, sizeof what, "%s%s", pr->what, tag);
    bool stop = false;
    for (size_t b = 0; b < c->B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++) {
                const size_t at = MARGIN + o_at(pr, b, h, i), la = MARGIN + (b * Hq + h) * Lq + i;
                memset(own + at, 1, Dv);
                if (!c->no_lse) lown[la] = 1;
                if (!stop)
                    stop = !row_ok(r, qrow(pr, b, h, i), Dv, pr->obuf + at,
                                   c->no_lse ? NULL : pr->lbuf + la, t, 0.0, what, b, h, i);
            }
    size_t bad = 0, first = 0;
    for (size_t e = 0; e < pr->on + 2 * MARGIN; e++)
        if (!own[e] && !tl_is_sentinel(pr->obuf[e]) && bad++ == 0) first = e;
    CHECK(
        bad == 0,
        "%s: %zu elements of o outside the sequences' rows written (first at %td from o's origin)",
        what, bad, (ptrdiff_t)first - MARGIN);
    bad = 0;
    for (size_t e = 0; e < pr->ln + 2 * MARGIN; e++)
        if (!lown[e] && !tl_is_sentinel(pr->lbuf[e]) && bad++ == 0) first = e;
    CHECK(bad == 0, "%s: %zu lse entries outside the sequences' rows written (first at %td)", what,
          bad, (ptrdiff_t)first - MARGIN);
    free(own), free(lown);
}

/* A case serially against the oracle; with threads, also the same bits on pools of 1, 2, 3 and
   7 threads and with a caller workspace of the reported size. */
static void run_case(const sdpa_impl *impl, const lcase *c, uint64_t seed, bool threads)
{
    lprob pr;
    lprob_init(&pr, c, seed);
    const lref *r = oracle_for(&pr, seed);
    sdpa_status st = call(&pr, &pr.p, impl, NULL, NULL, 0);
    char msg[256] = "";
    if (st != SDPA_OK) sdpa_validate(&pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, msg, sizeof msg);
    if (!CHECK(st == SDPA_OK, "%s: status %s (\"%s\")", pr.what, sdpa_status_str(st), msg)) {
        lprob_free(&pr);
        return;
    }
    lprob_check(&pr, r, tol_of(impl, c->softcap), " serial");
    if (threads) {
        const size_t ob = (pr.on + 2 * MARGIN) * sizeof(float),
                     lb = (pr.ln + 2 * MARGIN) * sizeof(float);
        float *o1 = tl_xmalloc(ob), *l1 = tl_xmalloc(lb);
        memcpy(o1, pr.obuf, ob), memcpy(l1, pr.lbuf, lb);
        for (size_t t = 0; t < 4; t++) {
            lprob_reset(&pr);
            st = call(&pr, &pr.p, impl, g_pool[t], NULL, 0);
            CHECK(st == SDPA_OK && memcmp(o1, pr.obuf, ob) == 0 && memcmp(l1, pr.lbuf, lb) == 0,
                  "%s: %zu threads (status %s) give other bits than the serial call", pr.what,
                  bench_pool_threads(g_pool[t]), sdpa_status_str(st));
        }
        size_t bytes = 0;
        st = sdpa_impl_workspace_size(impl, &pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, &bytes);
        if (CHECK(st == SDPA_OK && bytes > 0, "%s: workspace_size %s, %zu bytes", pr.what,
                  sdpa_status_str(st), bytes)) {
            void *ws = tl_xmalloc(bytes);
            lprob_reset(&pr);
            st = call(&pr, &pr.p, impl, g_pool[2], ws, bytes);
            CHECK(st == SDPA_OK && memcmp(o1, pr.obuf, ob) == 0 && memcmp(l1, pr.lbuf, lb) == 0,
                  "%s: with a caller workspace of %zu bytes (status %s) other bits than without",
                  pr.what, bytes, sdpa_status_str(st));
            free(ws);
        }
        free(o1), free(l1);
    }
    lprob_free(&pr);
}

static void run_cases(const sdpa_impl *impl, const lcase *cases, size_t n, uint64_t seed,
                      bool threads)
{
    for (size_t i = 0; i < n && !tl_give_up(); i++)
        if (!tl_sampled_out(i)) run_case(impl, &cases[i], seed + i, threads);
}

#define RUN(impl, cases, seed, threads)                                                            \
    run_cases(impl, cases, sizeof cases / sizeof cases[0], seed, threads)

/* ------------------------------------------------------------------------------------------ */
/* Ragged batches: padded, packed, mixed                                                        */
/* ------------------------------------------------------------------------------------------ */
static void t_padded(const sdpa_impl *impl)
{
    const lcase cases[] = {
        {.name = "decodes, padded (0 queries, 0 keys, one split-K length)",
         .B = 6,
         .hq = 8,
         .hk = 2,
         .d = 64,
         .lq = {1, 0, 1, 1, 1, 1},
         .lk = {300, 50, 0, 1, 2500, 129},
         .q_slack = 2,
         .k_slack = 7,
         .qf = QF_PADDED,
         .kf = KF_PADDED,
         .kt = F16,
         .vt = F16,
         .causal = true},
        {.name = "prefills, padded, causal (more queries than keys, 0 keys)",
         .B = 5,
         .hq = 4,
         .hk = 4,
         .d = 64,
         .dv = 48,
         .lq = {37, 0, 64, 5, 100},
         .lk = {37, 20, 40, 0, 130},
         .q_slack = 3,
         .k_slack = 1,
         .qf = QF_PADDED,
         .kf = KF_PADDED,
         .kt = F32,
         .vt = F32,
         .causal = true},
        {.name = "prefills, padded, window 16 both sides",
         .B = 3,
         .hq = 4,
         .hk = 2,
         .d = 40,
         .lq = {50, 9, 80},
         .lk = {70, 9, 33},
         .qf = QF_PADDED,
         .kf = KF_PADDED,
         .kt = BF16,
         .vt = BF16,
         .window = 16},
        {.name = "padded queries, every sequence kv_len keys",
         .B = 3,
         .hq = 6,
         .hk = 3,
         .d = 64,
         .lq = {10, 0, 25},
         .lk = {90, 90, 90},
         .q_slack = 1,
         .qf = QF_PADDED,
         .kf = KF_UNIFORM,
         .kt = F16,
         .vt = BF16,
         .causal = true},
        {.name = "padded keys, every sequence q_len queries",
         .B = 4,
         .hq = 4,
         .hk = 1,
         .d = 32,
         .lq = {12, 12, 12, 12},
         .lk = {0, 200, 11, 64},
         .k_slack = 5,
         .qf = QF_UNIFORM,
         .kf = KF_PADDED,
         .kt = BF16,
         .vt = F32},
        {.name = "padded, sinks and no lse",
         .B = 3,
         .hq = 6,
         .hk = 2,
         .d = 64,
         .lq = {4, 1, 0},
         .lk = {0, 77, 10},
         .q_slack = 2,
         .qf = QF_PADDED,
         .kf = KF_PADDED,
         .kt = F16,
         .vt = F16,
         .sinks = true,
         .no_lse = true},
    };
    RUN(impl, cases, 1000, false);
}

static void t_packed(const sdpa_impl *impl)
{
    const lcase cases[] = {
        {.name = "decodes, packed (0 queries, 0 keys, one split-K length)",
         .B = 6,
         .hq = 8,
         .hk = 2,
         .d = 64,
         .lq = {1, 0, 1, 1, 1, 1},
         .lk = {300, 50, 0, 1, 2500, 129},
         .qf = QF_PACKED,
         .kf = KF_PACKED,
         .kt = F16,
         .vt = F16,
         .causal = true},
        {.name = "prefills, packed, causal (more queries than keys, 0 keys)",
         .B = 5,
         .hq = 4,
         .hk = 4,
         .d = 64,
         .dv = 48,
         .lq = {37, 0, 64, 5, 100},
         .lk = {37, 20, 40, 0, 130},
         .q_slack = 1,
         .k_slack = 2,
         .qf = QF_PACKED,
         .kf = KF_PACKED,
         .kt = F32,
         .vt = F32,
         .causal = true},
        {.name = "padded queries, packed keys, sinks",
         .B = 5,
         .hq = 6,
         .hk = 2,
         .d = 64,
         .lq = {37, 0, 64, 5, 100},
         .lk = {37, 20, 40, 0, 130},
         .q_slack = 1,
         .qf = QF_PADDED,
         .kf = KF_PACKED,
         .kt = F16,
         .vt = F16,
         .causal = true,
         .sinks = true},
        {.name = "packed queries, padded keys, causal window 9",
         .B = 5,
         .hq = 4,
         .hk = 2,
         .d = 40,
         .lq = {37, 0, 64, 5, 100},
         .lk = {37, 20, 40, 0, 130},
         .k_slack = 3,
         .qf = QF_PACKED,
         .kf = KF_PADDED,
         .kt = BF16,
         .vt = BF16,
         .causal = true,
         .window = 9},
        {.name = "packed queries, every sequence kv_len keys",
         .B = 3,
         .hq = 4,
         .hk = 1,
         .d = 64,
         .lq = {3, 0, 50},
         .lk = {80, 80, 80},
         .qf = QF_PACKED,
         .kf = KF_UNIFORM,
         .kt = F16,
         .vt = F16,
         .causal = true},
        {.name = "every sequence q_len queries, packed keys",
         .B = 3,
         .hq = 4,
         .hk = 2,
         .d = 64,
         .lq = {16, 16, 16},
         .lk = {0, 100, 16},
         .qf = QF_UNIFORM,
         .kf = KF_PACKED,
         .kt = BF16,
         .vt = F16,
         .causal = true},
        {.name = "packed, a single token in all",
         .B = 4,
         .hq = 2,
         .hk = 1,
         .d = 16,
         .lq = {0, 0, 1, 0},
         .lk = {0, 3, 5, 0},
         .qf = QF_PACKED,
         .kf = KF_PACKED,
         .kt = F32,
         .vt = F32},
    };
    RUN(impl, cases, 1100, false);
}

/* vLLM's chunked prefill: one sequence prefilling a chunk (causal, with earlier context) beside
   15 decodes over lengths around the planner's block and split thresholds. */
static lcase chunked(int qf, int kf, size_t page)
{
    lcase c = {.name = "chunked prefill",
               .B = 16,
               .hq = 4,
               .hk = 1,
               .d = 64,
               .qf = qf,
               .kf = kf,
               .page = page,
               .page_tm = true,
               .kt = F16,
               .vt = F16,
               .causal = true};
    static const size_t lk[15] = {1,    17,   64, 100,  255,  256,  257, 500,
                                  1000, 1500, 0,  2047, 2048, 3000, 4100};
    c.lq[0] = sz(512, 128);
    c.lk[0] = c.lq[0] + 88;
    for (size_t b = 1; b < 16; b++) c.lq[b] = 1, c.lk[b] = lk[b - 1];
    return c;
}

static void t_chunked(const sdpa_impl *impl)
{
    /* one seed: the same logical problem (and oracle) in every form; the same bits on every
       thread count in vLLM's (packed queries, paged K/V) */
    const lcase a = chunked(QF_PACKED, KF_PAGED, 16);
    run_case(impl, &a, 1200, true);
    const lcase b = chunked(QF_PACKED, KF_PACKED, 0);
    run_case(impl, &b, 1200, false);
    if (!tl_sampled_out(1)) {
        const lcase c = chunked(QF_PADDED, KF_PADDED, 0);
        run_case(impl, &c, 1200, false);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Paged K/V                                                                                    */
/* ------------------------------------------------------------------------------------------ */
static void t_paged(const sdpa_impl *impl)
{
    static const size_t pages[] = {1, 16, 32, 256, 100}; /* 100: not a multiple of 16 */
    static const sdpa_dtype types[] = {F32, F16, BF16};
    for (size_t pi = 0; pi < sizeof pages / sizeof pages[0] && !tl_give_up(); pi++) {
        const size_t ps = pages[pi];
        const sdpa_dtype t = types[pi % 3], t2 = types[(pi + 1) % 3];
        const lcase dec = {.name = "paged decodes, GQA",
                           .B = 6,
                           .hq = 8,
                           .hk = 2,
                           .d = 64,
                           .lq = {1, 1, 1, 1, 1, 1},
                           .lk = {37, 0, 300, 1, sz(2600, 2100), 129},
                           .k_slack = 5,
                           .qf = QF_PADDED,
                           .kf = KF_PAGED,
                           .page = ps,
                           .page_tm = pi % 2 == 0,
                           .kt = t,
                           .vt = t};
        run_case(impl, &dec, 1300 + pi, false);
        const lcase pre = {.name = "paged prefills, causal",
                           .B = 3,
                           .hq = 4,
                           .hk = 2,
                           .d = 64,
                           .lq = {20, 0, 70},
                           .lk = {50, 9, 70},
                           .q_slack = 1,
                           .qf = QF_PADDED,
                           .kf = KF_PAGED,
                           .page = ps,
                           .page_tm = pi % 2 == 1,
                           .kt = t2,
                           .vt = t,
                           .causal = true};
        if (!tl_sampled_out(pi)) run_case(impl, &pre, 1310 + pi, false);
    }
    const lcase uni[] = {
        {.name = "paged, lengths from kv_len (max_pages exactly enough, last page partial)",
         .B = 3,
         .hq = 8,
         .hk = 2,
         .d = 64,
         .lq = {1, 4, 0},
         .lk = {200, 200, 200},
         .q_slack = 0,
         .qf = QF_PADDED,
         .kf = KF_PAGED_UNIFORM,
         .page = 16,
         .kt = F16,
         .vt = F16,
         .causal = true},
        {.name = "paged, lengths from kv_len, pages exactly full",
         .B = 2,
         .hq = 4,
         .hk = 1,
         .d = 64,
         .lq = {1, 1},
         .lk = {96, 96},
         .qf = QF_UNIFORM,
         .kf = KF_PAGED_UNIFORM,
         .page = 32,
         .page_tm = true,
         .kt = BF16,
         .vt = BF16},
        {.name = "paged, kv_len beyond max_pages x page_size (only kv_lens bound the pages)",
         .B = 3,
         .hq = 4,
         .hk = 2,
         .d = 32,
         .lq = {2, 1, 3},
         .lk = {130, 16, 17},
         .k_slack = 40,
         .qf = QF_PADDED,
         .kf = KF_PAGED,
         .page = 16,
         .kt = F32,
         .vt = F16},
    };
    RUN(impl, uni, 1320, false);
}

static void t_paged_variants(const sdpa_impl *impl)
{
    const lcase cases[] = {
        {.name = "packed queries, paged, every modifier",
         .B = 4,
         .hq = 8,
         .hk = 2,
         .d = 64,
         .lq = {30, 1, 0, 12},
         .lk = {60, 300, 5, 12},
         .qf = QF_PACKED,
         .kf = KF_PAGED,
         .page = 16,
         .page_tm = true,
         .kt = F16,
         .vt = F16,
         .causal = true,
         .window = 24,
         .softcap = 5.0f,
         .alibi = true,
         .mask = true,
         .sinks = true},
        {.name = "padded queries, paged, every modifier, two-sided window, split-K",
         .B = 3,
         .hq = 6,
         .hk = 2,
         .d = 64,
         .lq = {1, 17, 40},
         .lk = {2300, 17, 100},
         .q_slack = 2,
         .qf = QF_PADDED,
         .kf = KF_PAGED,
         .page = 32,
         .kt = BF16,
         .vt = BF16,
         .window = 40,
         .softcap = 3.0f,
         .alibi = true,
         .mask = true,
         .sinks = true},
        {.name = "packed queries, pages of one key, mask and sinks",
         .B = 3,
         .hq = 6,
         .hk = 3,
         .d = 40,
         .lq = {5, 1, 3},
         .lk = {40, 33, 0},
         .qf = QF_PACKED,
         .kf = KF_PAGED,
         .page = 1,
         .kt = F32,
         .vt = F32,
         .mask = true,
         .sinks = true},
        {.name = "padded queries, pages of 100, causal ALiBi softcap sinks",
         .B = 2,
         .hq = 8,
         .hk = 2,
         .d = 64,
         .lq = {64, 1},
         .lk = {250, 1000},
         .qf = QF_PADDED,
         .kf = KF_PAGED,
         .page = 100,
         .page_tm = true,
         .kt = F16,
         .vt = F16,
         .causal = true,
         .softcap = 4.0f,
         .alibi = true,
         .sinks = true},
        {.name = "packed queries, pages of 256, causal window mask",
         .B = 2,
         .hq = 4,
         .hk = 1,
         .d = 64,
         .lq = {100, 1},
         .lk = {600, 3000},
         .qf = QF_PACKED,
         .kf = KF_PAGED,
         .page = 256,
         .kt = BF16,
         .vt = F16,
         .causal = true,
         .window = 200,
         .mask = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !tl_give_up(); i++)
        if (!tl_sampled_out(i)) run_case(impl, &cases[i], 1400 + i, i < 2);
}

/* Long decodes beside short ones: the long sequence is split into KV chunks. */
static void t_splitk(const sdpa_impl *impl)
{
    const lcase cases[] = {
        {.name = "long decode padded, sinks",
         .B = 3,
         .hq = 8,
         .hk = 2,
         .d = 64,
         .lq = {1, 1, 1},
         .lk = {sz(20000, 6000), 37, 5000},
         .qf = QF_PADDED,
         .kf = KF_PADDED,
         .kt = F16,
         .vt = F16,
         .sinks = true},
        {.name = "long decode paged 16, causal window",
         .B = 3,
         .hq = 8,
         .hk = 2,
         .d = 64,
         .lq = {1, 1, 1},
         .lk = {sz(12000, 4000), 5, 700},
         .qf = QF_PADDED,
         .kf = KF_PAGED,
         .page = 16,
         .page_tm = true,
         .kt = BF16,
         .vt = BF16,
         .causal = true,
         .window = 3000},
        {.name = "long decodes packed, ALiBi",
         .B = 3,
         .hq = 4,
         .hk = 1,
         .d = 64,
         .lq = {1, 1, 1},
         .lk = {sz(9000, 3000), 1, 2048},
         .qf = QF_PACKED,
         .kf = KF_PACKED,
         .kt = F32,
         .vt = F32,
         .alibi = true},
        {.name = "long decode paged 256, mask and softcap",
         .B = 3,
         .hq = 8,
         .hk = 2,
         .d = 64,
         .lq = {1, 1, 1},
         .lk = {sz(16000, 5000), 0, 130},
         .qf = QF_PACKED,
         .kf = KF_PAGED,
         .page = 256,
         .kt = F16,
         .vt = F16,
         .softcap = 3.0f,
         .mask = true},
    };
    RUN(impl, cases, 1500, true);
}

/* ------------------------------------------------------------------------------------------ */
/* sdpa_merge against the unsplit call and the oracle                                           */
/* ------------------------------------------------------------------------------------------ */
enum { MQ = 6, MHQ = 4, MDV = 48, MROWS = MHQ * MQ, PS = MDV + 5, OS = MDV + 2 };

/* Keys [k0, k1) of pr's single sequence as one call (kv_len k1 - k0; none: a sequence of 0
   keys), into o [MROWS][PS] and lse [MROWS]. */
static sdpa_status part_call(const sdpa_impl *impl, const lprob *pr, size_t k0, size_t k1, float *o,
                             float *lse, const float *sinks)
{
    static const size_t zero[1] = {0};
    sdpa_params p = pr->p;
    p.lse = lse, p.sinks = sinks;
    if (k1 > k0)
        p.kv_len = k1 - k0;
    else
        p.kv_len = 1, p.kv_lens = zero;
    sdpa_tensor k = pr->tk, v = pr->tv;
    k.data = (char *)k.data + k0 * pr->kts * sdpa_dtype_size(pr->c.kt);
    v.data = (char *)v.data + k0 * pr->vts * sdpa_dtype_size(pr->c.vt);
    const sdpa_tensor to = {o, F32, MROWS * PS, MQ * PS, PS};
    return sdpa_impl_forward(impl, &p, &pr->tq, &k, &v, &to);
}

static bool same_rows(const float *a, size_t as, const float *b, size_t bs, size_t rows, size_t dv)
{
    for (size_t r = 0; r < rows; r++)
        if (memcmp(a + r * as, b + r * bs, dv * sizeof(float)) != 0) return false;
    return true;
}

/* merged (stride ms, lse ml) against the oracle, with the parts' lse giving the weight error */
static void merged_vs_oracle(const char *what, const lref *r, const float *mo, size_t ms,
                             const float *ml, const float *const *lps, size_t n, tolp t)
{
    for (size_t row = 0; row < MROWS; row++) {
        double big = 0;
        for (size_t i = 0; i < n; i++)
            if (isfinite(lps[i][row])) big = fmax(big, fabs(lps[i][row]));
        const double delta = (r->e0[row] + t.E) * (1.0 + big);
        if (!row_ok(r, row, MDV, mo + row * ms, ml ? ml + row : NULL, t, 3.0 * delta, what, 0,
                    row / MQ, row % MQ))
            return;
    }
}

/* merged against another computation of the same rows (the unsplit call): both within their
   tolerances of float64 */
static void merged_vs_call(const char *what, const lref *r, const float *mo, size_t ms,
                           const float *ml, const float *co, size_t cs, const float *cl,
                           const float *const *lps, size_t n, tolp t)
{
    for (size_t row = 0; row < MROWS; row++) {
        double big = 0;
        for (size_t i = 0; i < n; i++)
            if (isfinite(lps[i][row])) big = fmax(big, fabs(lps[i][row]));
        const double Er = r->e0[row] + t.E, Em = 2.0 * Er + 3.0 * Er * (1.0 + big),
                     ds = r->ds[row] + t.capx;
        for (size_t e = 0; e < MDV; e++) {
            const double wa = r->wabs[row * MDV + e], a = mo[row * ms + e], b = co[row * cs + e];
            const double tol =
                Em * wa + 4.0 * ds * (wa + fabs(b)) + 2.0 * r->fl[row * MDV + e] + FLT_TRUE_MIN;
            if (!CHECK(fabs(a - b) <= tol,
                       "%s: row %zu o[%zu] merged %.9g, one call %.9g, tol %.3g", what, row, e, a,
                       b, tol))
                return;
        }
        const double tl = Em * (1.0 + fabs(cl[row])) + 4.0 * ds;
        if (!CHECK(fabs(ml[row] - cl[row]) <= tl,
                   "%s: row %zu lse merged %.9g, one call %.9g, tol %.3g", what, row, ml[row],
                   cl[row], tl))
            return;
    }
}

static void t_merge(const sdpa_impl *impl)
{
    const lcase base = {.name = "merge",
                        .B = 1,
                        .hq = MHQ,
                        .hk = 2,
                        .d = 64,
                        .dv = MDV,
                        .lq = {MQ},
                        .lk = {300},
                        .qf = QF_UNIFORM,
                        .kf = KF_UNIFORM,
                        .kt = F32,
                        .vt = F32};
    lprob pr;
    lprob_init(&pr, &base, 1600);
    const lref *r = oracle_for(&pr, 1600);
    const tolp t = tol_of(impl, 0.0f);
    /* the unsplit call, then parts of 1, 139 and 160 keys */
    enum { NP = 3 };
    static const size_t cut[NP + 1] = {0, 1, 140, 300};
    float *full = tl_xmalloc(MROWS * PS * sizeof(float)), fl[MROWS];
    float *po[NP], pl[NP][MROWS];
    sdpa_status st = part_call(impl, &pr, 0, 300, full, fl, NULL);
    CHECK(st == SDPA_OK, "merge: the unsplit call: %s", sdpa_status_str(st));
    for (size_t row = 0; row < MROWS && st == SDPA_OK; row++)
        if (!row_ok(r, row, MDV, full + row * PS, fl + row, t, 0.0, "merge: the unsplit call", 0,
                    row / MQ, row % MQ))
            break;
    for (size_t i = 0; i < NP; i++) {
        po[i] = tl_xmalloc(MROWS * PS * sizeof(float));
        st = part_call(impl, &pr, cut[i], cut[i + 1], po[i], pl[i], NULL);
        CHECK(st == SDPA_OK, "merge: part %zu [%zu, %zu): %s", i, cut[i], cut[i + 1],
              sdpa_status_str(st));
    }
    const float *ops[NP] = {po[0], po[1], po[2]}, *lps[NP] = {pl[0], pl[1], pl[2]};
    float *mo = tl_xmalloc(MROWS * OS * sizeof(float)), ml[MROWS], xl[MROWS];
    st = sdpa_merge(NP, MROWS, MDV, ops, PS, lps, mo, OS, ml);
    if (CHECK(st == SDPA_OK, "merge of 3 parts: %s", sdpa_status_str(st))) {
        merged_vs_oracle("merge of parts of 1, 139, 160 keys vs float64", r, mo, OS, ml, lps, NP,
                         t);
        merged_vs_call("merge of parts of 1, 139, 160 keys vs the unsplit call", r, mo, OS, ml,
                       full, PS, fl, lps, NP, t);
    }

    /* lse NULL: the same o */
    float *mo2 = tl_xmalloc(MROWS * OS * sizeof(float));
    st = sdpa_merge(NP, MROWS, MDV, ops, PS, lps, mo2, OS, NULL);
    CHECK(st == SDPA_OK && same_rows(mo, OS, mo2, OS, MROWS, MDV),
          "merge without lse: status %s, o differs", sdpa_status_str(st));

    /* in place, on the first part and on the last: the bits of the out-of-place merge */
    for (size_t which = 0; which < NP; which += NP - 1) {
        float *x = tl_xmalloc(MROWS * PS * sizeof(float)), il_[MROWS];
        memcpy(x, po[which], MROWS * PS * sizeof(float)), memcpy(il_, pl[which], sizeof il_);
        const float *ip[NP] = {po[0], po[1], po[2]}, *il[NP] = {pl[0], pl[1], pl[2]};
        ip[which] = x, il[which] = il_;
        st = sdpa_merge(NP, MROWS, MDV, ip, PS, il, x, PS, il_);
        CHECK(st == SDPA_OK && same_rows(x, PS, mo, OS, MROWS, MDV) &&
                  memcmp(il_, ml, sizeof il_) == 0,
              "merge in place on part %zu (o == o_parts[%zu], lse == lse_parts[%zu]): status %s, "
              "result differs from "
              "the out-of-place merge",
              which, which, which, sdpa_status_str(st));
        free(x);
    }
    /* only o in place (on the middle part), and only lse in place (o elsewhere) */
    {
        float *x = tl_xmalloc(MROWS * PS * sizeof(float)), xl2[MROWS], yl[MROWS];
        memcpy(x, po[1], MROWS * PS * sizeof(float)), memcpy(xl2, pl[1], sizeof xl2);
        const float *ip[NP] = {po[0], x, po[2]}, *il[NP] = {pl[0], xl2, pl[2]};
        st = sdpa_merge(NP, MROWS, MDV, ip, PS, lps, x, PS, yl);
        CHECK(st == SDPA_OK && same_rows(x, PS, mo, OS, MROWS, MDV) &&
                  memcmp(yl, ml, sizeof yl) == 0,
              "merge with o == o_parts[1], lse elsewhere: status %s, result differs",
              sdpa_status_str(st));
        st = sdpa_merge(NP, MROWS, MDV, ops, PS, il, mo2, OS, xl2);
        CHECK(st == SDPA_OK && same_rows(mo2, OS, mo, OS, MROWS, MDV) &&
                  memcmp(xl2, ml, sizeof xl2) == 0,
              "merge with lse == lse_parts[1], o elsewhere: status %s, result differs",
              sdpa_status_str(st));
        free(x);
    }

    /* one part: itself */
    st = sdpa_merge(1, MROWS, MDV, &ops[1], PS, &lps[1], mo2, OS, ml);
    if (CHECK(st == SDPA_OK, "merge of one part: %s", sdpa_status_str(st)))
        for (size_t row = 0; row < MROWS; row++) {
            bool ok = fabsf(ml[row] - pl[1][row]) <= 2 * TL_U * fabsf(pl[1][row]);
            for (size_t e = 0; e < MDV; e++)
                ok &= fabsf(mo2[row * OS + e] - po[1][row * PS + e]) <=
                      2 * TL_U * fabsf(po[1][row * PS + e]);
            if (!CHECK(ok, "merge of one part: row %zu is not the part (lse %.9g vs %.9g)", row,
                       ml[row], pl[1][row]))
                break;
        }
    st = sdpa_merge(NP, MROWS, MDV, ops, PS, lps, mo, OS, ml); /* restore the reference merge */

    /* empty parts: one from a call over a sequence of 0 keys (zeros, lse -inf), one with NaN in o
       and lse -inf; both ignored beside real parts, all of them alone give zeros and -inf */
    float *eo = tl_xmalloc(MROWS * PS * sizeof(float)), el[MROWS];
    float *no = tl_xmalloc(MROWS * PS * sizeof(float)), nl[MROWS];
    st = part_call(impl, &pr, 0, 0, eo, el, NULL);
    bool empty_ok = st == SDPA_OK;
    for (size_t row = 0; row < MROWS && empty_ok; row++) {
        empty_ok &= el[row] == -INFINITY;
        for (size_t e = 0; e < MDV; e++) empty_ok &= eo[row * PS + e] == 0.0f;
    }
    CHECK(empty_ok,
          "a call over a sequence of 0 keys (kv_lens {0}): status %s, want zeros and lse -inf",
          sdpa_status_str(st));
    for (size_t e = 0; e < MROWS * PS; e++) no[e] = NAN;
    for (size_t row = 0; row < MROWS; row++) nl[row] = -INFINITY;
    {
        const float *o5[5] = {po[0], eo, po[1], no, po[2]}, *l5[5] = {pl[0], el, pl[1], nl, pl[2]};
        st = sdpa_merge(5, MROWS, MDV, o5, PS, l5, mo2, OS, xl);
        bool ok = st == SDPA_OK;
        for (size_t row = 0; row < MROWS && ok; row++) {
            ok &= fabsf(xl[row] - ml[row]) <= 8 * TL_U * (1 + fabsf(ml[row]));
            for (size_t e = 0; e < MDV; e++)
                ok &= fabs(mo2[row * OS + e] - mo[row * OS + e]) <=
                      8 * TL_U * r->wabs[row * MDV + e] + FLT_TRUE_MIN;
        }
        CHECK(ok,
              "merge with two -inf parts (one holding NaN in o) among 3 real ones: status %s, "
              "result not that of "
              "the 3 real parts",
              sdpa_status_str(st));
        const float *o2[2] = {eo, no}, *l2[2] = {el, nl};
        for (size_t n = 1; n <= 2; n++) {
            tl_fill_sentinel(mo2, MROWS * OS);
            float zl[MROWS];
            st = sdpa_merge(n, MROWS, MDV, o2 + (2 - n), PS, l2 + (2 - n), mo2, OS, zl);
            ok = st == SDPA_OK;
            for (size_t row = 0; row < MROWS && ok; row++) {
                ok &= zl[row] == -INFINITY;
                for (size_t e = 0; e < MDV; e++) ok &= mo2[row * OS + e] == 0.0f;
            }
            CHECK(ok, "merge of %zu part(s) all -inf: status %s, want zeros and lse -inf", n,
                  sdpa_status_str(st));
        }
    }

    /* a NaN lse: that row all NaN (o and lse), every other row the bits of the plain merge */
    {
        float nanl[MROWS];
        memcpy(nanl, pl[1], sizeof nanl);
        nanl[5] = NAN;
        const float *l3[NP] = {pl[0], nanl, pl[2]};
        st = sdpa_merge(NP, MROWS, MDV, ops, PS, l3, mo2, OS, xl);
        bool row_nan = isnan(xl[5]), others = true;
        for (size_t e = 0; e < MDV; e++) row_nan &= isnan(mo2[5 * OS + e]) != 0;
        for (size_t row = 0; row < MROWS; row++)
            if (row != 5)
                others &= memcmp(mo2 + row * OS, mo + row * OS, MDV * sizeof(float)) == 0 &&
                          memcmp(&xl[row], &ml[row], sizeof(float)) == 0;
        CHECK(st == SDPA_OK && row_nan,
              "merge with lse_parts[1][5] NaN: status %s, row 5 must be NaN (lse %g)",
              sdpa_status_str(st), xl[5]);
        CHECK(others, "merge with lse_parts[1][5] NaN: other rows differ from the plain merge");
    }

    /* sinks: the parts computed without, the sink a part of o = 0 and lse = sink_h, first or last,
       against the call with sinks and the oracle of the problem with sinks */
    {
        lcase sc = base;
        sc.sinks = true;
        lprob ps;
        lprob_init(&ps, &sc, 1600); /* the same q, k, v: the sinks are drawn after them */
        const lref *rs = oracle_for(&ps, 1600);
        float *so = tl_xmalloc(MROWS * PS * sizeof(float)), sl[MROWS];
        st = part_call(impl, &ps, 0, 300, so, sl, ps.sinks);
        CHECK(st == SDPA_OK, "merge: the call with sinks: %s", sdpa_status_str(st));
        for (size_t row = 0; row < MROWS && st == SDPA_OK; row++)
            if (!row_ok(rs, row, MDV, so + row * PS, sl + row, t, 0.0, "merge: the call with sinks",
                        0, row / MQ, row % MQ))
                break;
        float *zo = tl_xmalloc(MROWS * PS * sizeof(float)), zl[MROWS];
        memset(zo, 0, MROWS * PS * sizeof(float));
        for (size_t row = 0; row < MROWS; row++) zl[row] = ps.sinks[row / MQ];
        for (int first = 0; first < 2; first++) {
            const float *o4[4], *l4[4];
            for (size_t i = 0; i < 4; i++) {
                const size_t k = first ? (i == 0 ? NP : i - 1) : i;
                o4[i] = k == NP ? zo : po[k];
                l4[i] = k == NP ? zl : pl[k];
            }
            st = sdpa_merge(4, MROWS, MDV, o4, PS, l4, mo2, OS, xl);
            if (CHECK(st == SDPA_OK, "merge with a sink part: %s", sdpa_status_str(st))) {
                const char *w = first ? "merge, the sink part first" : "merge, the sink part last";
                merged_vs_oracle(w, rs, mo2, OS, xl, l4, 4, t);
                merged_vs_call(w, rs, mo2, OS, xl, so, PS, sl, l4, 4, t);
            }
        }
        free(so), free(zo);
        lprob_free(&ps);
    }
    for (size_t i = 0; i < NP; i++) free(po[i]);
    free(full), free(mo), free(mo2), free(eo), free(no);
    lprob_free(&pr);
}

/* ------------------------------------------------------------------------------------------ */
/* Bad layouts: refused with the right status and a message, nothing written                   */
/* ------------------------------------------------------------------------------------------ */
typedef struct bad {
    const char *why;
    sdpa_params p;
    sdpa_status want; /* SDPA_OK: valid, must be accepted */
} bad;

static bool untouched(const lprob *pr)
{
    for (size_t e = 0; e < pr->on + 2 * MARGIN; e++)
        if (!tl_is_sentinel(pr->obuf[e])) return false;
    for (size_t e = 0; e < pr->ln + 2 * MARGIN; e++)
        if (!tl_is_sentinel(pr->lbuf[e])) return false;
    return true;
}

/* every written row finite (a sequence reading a page or key it does not own would give NaN) */
static bool rows_finite(const lprob *pr, const sdpa_params *p)
{
    for (size_t b = 0; b < pr->c.B; b++) {
        const size_t lq = p->q_lens ? p->q_lens[b]
                          : p->cu_q ? p->cu_q[b + 1] - p->cu_q[b]
                                    : p->q_len;
        for (size_t h = 0; h < pr->c.hq; h++)
            for (size_t i = 0; i < lq; i++)
                for (size_t e = 0; e < pr->Dv; e++)
                    if (!isfinite(pr->obuf[MARGIN + o_at(pr, b, h, i) + e])) return false;
    }
    return true;
}

static void try_bad(const sdpa_impl *impl, lprob *pr, const bad *x)
{
    char msg[256] = "";
    lprob_reset(pr);
    size_t bytes = 0;
    const sdpa_status sv =
        sdpa_validate(&x->p, &pr->tq, &pr->tk, &pr->tv, &pr->to, msg, sizeof msg);
    const sdpa_status sw =
        sdpa_impl_workspace_size(impl, &x->p, &pr->tq, &pr->tk, &pr->tv, &pr->to, &bytes);
    const sdpa_status st = call(pr, &x->p, impl, NULL, NULL, 0);
    if (x->want == SDPA_OK) {
        CHECK(st == SDPA_OK && sv == SDPA_OK && sw == SDPA_OK,
              "%s: a valid call refused: %s (validate %s \"%s\")", x->why, sdpa_status_str(st),
              sdpa_status_str(sv), msg);
        if (st == SDPA_OK)
            CHECK(rows_finite(pr, &x->p), "%s: accepted, but a written row is not finite", x->why);
        return;
    }
    CHECK(st == x->want, "%s: status %s, want %s (validate: \"%s\")", x->why, sdpa_status_str(st),
          sdpa_status_str(x->want), msg);
    CHECK(sv == x->want && msg[0] != '\0' && strcmp(msg, "ok") != 0,
          "%s: sdpa_validate %s with message \"%s\"", x->why, sdpa_status_str(sv), msg);
    CHECK(sw == x->want, "%s: sdpa_workspace_size %s", x->why, sdpa_status_str(sw));
    CHECK(untouched(pr), "%s: refused, but o or lse was written", x->why);
}

static void t_bad(const sdpa_impl *impl)
{
    /* lengths: a sequence ending mid-page (50 keys: pages 0-3, 2 keys on page 3), one of 0 keys */
    const lcase paged = {.name = "bad-input base, paged",
                         .B = 4,
                         .hq = 4,
                         .hk = 2,
                         .d = 16,
                         .lq = {7, 0, 33, 5},
                         .lk = {7, 50, 130, 0},
                         .q_slack = 2,
                         .k_slack = 3,
                         .qf = QF_PADDED,
                         .kf = KF_PAGED,
                         .page = 16,
                         .kt = F16,
                         .vt = F16,
                         .causal = true};
    lcase packed = paged;
    packed.qf = QF_PACKED, packed.kf = KF_PACKED;
    lprob pr;
    lprob_init(&pr, &paged, 1700);
    const sdpa_params g = pr.p;
    const sdpa_params *base = &g;
    const size_t mp = pr.max_pages, B = 4;
    CHECK(mp == 10 && g.q_len == 35 && g.kv_len == 133,
          "bad-input base: max_pages %zu q_len %zu kv_len %zu", mp, g.q_len, g.kv_len);
    static size_t qbig[4] = {7, 0, 36, 5}, kbig[4] = {7, 134, 130, 0}, k48[4] = {7, 48, 130, 0},
                  k49[4] = {7, 49, 130, 0};
    static size_t qzero[4] = {0, 0, 0, 0}, cu_ok[5] = {0, 7, 7, 40, 45};
    int32_t *tab[8];
    for (size_t i = 0; i < 8; i++) {
        tab[i] = tl_xmalloc(B * mp * sizeof(int32_t));
        memcpy(tab[i], pr.table, B * mp * sizeof(int32_t));
    }
    tab[0][1 * mp + 3] = (int32_t)pr.n_pages; /* the partial last page of sequence 1 */
    tab[1][2 * mp + 0] = -1;
    tab[2][0 * mp + 0] = INT32_MIN;
    tab[3][2 * mp + 8] = (int32_t)pr.n_pages + 7; /* the last page of sequence 2 (keys 128, 129) */
    tab[4][1 * mp + 4] = (int32_t)pr.n_pages + 9; /* past sequence 1's pages: unused */
    tab[5][3 * mp + 0] = -5;                      /* sequence 3 has no keys: unused */
    tab[6][1 * mp + 3] = -1; /* sequence 1's page 3: unused at 48 keys, used at 49 */
    bad list[40];
    size_t n = 0;
/* a copy of the base call, changed by stmt (p points at it), and the status it must get */
#define BAD(w, st, stmt)                                                                           \
    do {                                                                                           \
        list[n].why = w;                                                                           \
        list[n].p = *base;                                                                         \
        list[n].want = st;                                                                         \
        sdpa_params *p = &list[n++].p;                                                             \
        stmt;                                                                                      \
    } while (0)
    const sdpa_status INV = SDPA_ERR_INVALID_ARGUMENT;
    BAD("the base call (garbage in unused table entries)", SDPA_OK, (void)p);
    BAD("q_lens[2] = q_len + 1", INV, p->q_lens = qbig);
    BAD("kv_lens[1] = kv_len + 1", INV, p->kv_lens = kbig);
    BAD("q_lens and cu_q both", INV, p->cu_q = cu_ok);
    BAD("block_table entry n_pages in a sequence's partial last page", INV,
        p->block_table = tab[0]);
    BAD("block_table entry -1 in a used page", INV, p->block_table = tab[1]);
    BAD("block_table entry INT32_MIN in a used page", INV, p->block_table = tab[2]);
    BAD("block_table entry n_pages + 7 in a used page", INV, p->block_table = tab[3]);
    BAD("block_table out of range past a sequence's pages (unused)", SDPA_OK,
        p->block_table = tab[4]);
    BAD("block_table out of range in the row of a sequence of 0 keys (unused)", SDPA_OK,
        p->block_table = tab[5]);
    BAD("block_table -1 on page 3 of a sequence of 48 keys (unused)", SDPA_OK,
        (p->block_table = tab[6], p->kv_lens = k48));
    BAD("block_table -1 on page 3 of a sequence of 49 keys (used)", INV,
        (p->block_table = tab[6], p->kv_lens = k49));
    BAD("page_size 0", INV, p->page_size = 0);
    BAD("max_pages x page_size (128) shorter than the longest sequence (130)", INV,
        p->max_pages = 8);
    BAD("kv_lens NULL: kv_len (161) beyond max_pages x page_size (160)", INV,
        (p->kv_lens = NULL, p->kv_len = 161));
    BAD("kv_lens NULL: every sequence uses all 10 entries, garbage in them", INV,
        (p->kv_lens = NULL, p->kv_len = 160));
    BAD("max_pages 0 with a block table", INV, p->max_pages = 0);
    BAD("n_pages 0 with a block table", INV, p->n_pages = 0);
    BAD("cu_kv with a block table", INV, (p->kv_lens = NULL, p->cu_kv = cu_ok));
    BAD("max_pages x page_size overflows", SDPA_ERR_OVERFLOW, p->max_pages = SIZE_MAX / 8);
    BAD("page_size SIZE_MAX / 2: max_pages x page_size overflows", SDPA_ERR_OVERFLOW,
        p->page_size = SIZE_MAX / 2);
    BAD("n_pages so large that the page view overflows", SDPA_ERR_OVERFLOW,
        p->n_pages = SIZE_MAX / 4);
    BAD("every q_lens 0 (nothing to do, nothing written)", SDPA_OK, p->q_lens = qzero);
    for (size_t i = 0; i < n; i++) try_bad(impl, &pr, &list[i]);
    /* an all-empty call writes nothing */
    lprob_reset(&pr);
    sdpa_params pz = g;
    pz.q_lens = qzero;
    CHECK(call(&pr, &pz, impl, NULL, NULL, 0) == SDPA_OK && untouched(&pr),
          "every q_lens 0: o or lse written");
    for (size_t i = 0; i < 8; i++) free(tab[i]);
    lprob_free(&pr);

    lprob_init(&pr, &packed, 1701);
    const sdpa_params gp = pr.p;
    base = &gp;
    static size_t cq0[5] = {1, 8, 8, 41, 46}, ck0[5] = {3, 10, 60, 190, 190};
    static size_t cqdec[5] = {0, 7, 6, 40, 45}, ckdec[5] = {0, 7, 57, 56, 187};
    static size_t cqlong[5] = {0, 7, 7, 43, 48}, cklast[5] = {0, 7, 57, 187, 321},
                  cqz[5] = {0, 0, 0, 0, 0};
    static size_t klens[4] = {7, 50, 130, 0};
    n = 0;
    BAD("the packed base call", SDPA_OK, (void)p);
    BAD("cu_q[0] = 1", INV, p->cu_q = cq0);
    BAD("cu_kv[0] = 3", INV, p->cu_kv = ck0);
    BAD("cu_q decreasing", INV, p->cu_q = cqdec);
    BAD("cu_kv decreasing", INV, p->cu_kv = ckdec);
    BAD("cu_q: a sequence of 36 queries, q_len 35", INV, p->cu_q = cqlong);
    BAD("cu_kv: last entry makes a sequence of 134 keys, kv_len 133", INV, p->cu_kv = cklast);
    BAD("kv_lens and cu_kv both", INV, p->kv_lens = klens);
    BAD("cu_q all 0 (nothing to do)", SDPA_OK, p->cu_q = cqz);
#undef BAD
    for (size_t i = 0; i < n; i++) try_bad(impl, &pr, &list[i]);
    lprob_free(&pr);
}

/* sdpa_merge's refusals: the status, and nothing written anywhere in the arena the parts and
   the outputs are carved from. */
static void t_merge_bad(void)
{
    tl_start("layouts-xcheck: sdpa_merge refuses bad input", "api");
    enum { AN = 1024, R = 4, DV = 16, ST = 20 };
    static float arena[AN], snap[AN];
    tl_fill_sentinel(arena, AN);
    float *a = arena, *b = arena + 100, *la = arena + 200, *lb = arena + 210, *o = arena + 300,
          *l = arena + 400;
    tl_rng rng = {1800};
    for (size_t r = 0; r < R; r++) {
        for (size_t e = 0; e < DV; e++)
            a[r * ST + e] = tl_uniform(&rng, -1, 1), b[r * ST + e] = tl_uniform(&rng, -1, 1);
        la[r] = tl_uniform(&rng, -1, 3), lb[r] = tl_uniform(&rng, -1, 3);
    }
    memcpy(snap, arena, sizeof arena);
    const float *op[2] = {a, b}, *lp[2] = {la, lb}, *opn[2] = {a, NULL}, *lpn[2] = {NULL, lb};
    CHECK(sdpa_merge(2, R, DV, op, ST, lp, o, ST, l) == SDPA_OK, "the valid merge is refused");
    memcpy(arena, snap, sizeof arena);
    const sdpa_status INV = SDPA_ERR_INVALID_ARGUMENT;
#define M(w, want, ...)                                                                            \
    do {                                                                                           \
        const sdpa_status st_ = sdpa_merge(__VA_ARGS__);                                           \
        CHECK(st_ == (want), "%s: status %s, want %s", w, sdpa_status_str(st_),                    \
              sdpa_status_str(want));                                                              \
        CHECK(memcmp(arena, snap, sizeof arena) == 0, "%s: refused, but memory was written", w);   \
        memcpy(arena, snap, sizeof arena);                                                         \
    } while (0)
    M("n_parts 0", INV, 0, R, DV, op, ST, lp, o, ST, l);
    M("rows 0", INV, 2, 0, DV, op, ST, lp, o, ST, l);
    M("dv 0", INV, 2, R, 0, op, ST, lp, o, ST, l);
    M("o_parts NULL", INV, 2, R, DV, NULL, ST, lp, o, ST, l);
    M("o_parts[1] NULL", INV, 2, R, DV, opn, ST, lp, o, ST, l);
    M("lse_parts NULL", INV, 2, R, DV, op, ST, NULL, o, ST, l);
    M("lse_parts[0] NULL", INV, 2, R, DV, op, ST, lpn, o, ST, l);
    M("o NULL", INV, 2, R, DV, op, ST, lp, NULL, ST, l);
    M("o_stride < dv", INV, 2, R, DV, op, DV - 1, lp, o, ST, l);
    M("o_out_stride < dv", INV, 2, R, DV, op, ST, lp, o, DV - 1, l);
    M("o overlapping part 1", INV, 2, R, DV, op, ST, lp, b + 8, ST, l);
    M("o = part 0 with another stride", INV, 2, R, DV, op, ST, lp, a, ST + 1, l);
    M("o overlapping lse part 0", INV, 2, R, DV, op, ST, lp, la - 3, ST, l);
    M("lse overlapping o", INV, 2, R, DV, op, ST, lp, o, ST, o + 5);
    M("lse overlapping lse part 1, not equal to it", INV, 2, R, DV, op, ST, lp, o, ST, lb + 1);
    M("lse overlapping part 0's o", INV, 2, R, DV, op, ST, lp, o, ST, a + 2);
    M("o_stride overflowing", SDPA_ERR_OVERFLOW, 2, R, DV, op, SIZE_MAX / 2, lp, o, ST, l);
    M("o_out_stride overflowing", SDPA_ERR_OVERFLOW, 2, R, DV, op, ST, lp, o, SIZE_MAX / 2, l);
#undef M
    tl_end();
}

/* ------------------------------------------------------------------------------------------ */
static void run_test(const char *name, tl_impl_fn fn)
{
    cache_clear();
    tl_for_each_impl_worst(name, fn, &g_worst);
    cache_clear();
}

int main(void)
{
    tl_header(
        "ragged, packed and paged layouts and sdpa_merge against an independent float64 oracle");
    if (!tl_pools_create(g_pool, 3, 1, 11)) return 1;
    g_pool[3] =
        bench_pool_create_opts(&(bench_pool_options){.n_threads = 7, .order = BENCH_POOL_REVERSE});
    if (!g_pool[3]) {
        printf("Bail out! no thread pool\n");
        return 1;
    }
    run_test("layouts-xcheck: padded ragged batches", t_padded);
    run_test("layouts-xcheck: packed and mixed forms", t_packed);
    run_test("layouts-xcheck: chunked prefill (512 queries) beside 15 decodes", t_chunked);
    run_test("layouts-xcheck: paged K/V, pages of 1, 16, 32, 256, 100", t_paged);
    run_test("layouts-xcheck: paged with ragged queries and modifiers", t_paged_variants);
    run_test("layouts-xcheck: split-K long decodes, 1/2/3/7 threads", t_splitk);
    run_test("layouts-xcheck: sdpa_merge", t_merge);
    tl_for_each_impl("layouts-xcheck: bad layouts refused", t_bad);
    t_merge_bad();
    return tl_pools_finish(g_pool, 4);
}
