/* test_quant.c -- q8_0/q4_0 K and V, fast q8 scores and the block conversions, on every implementation against float64 */
#include "attn.h"
#include "test_pools.h"

/*
 * The block storage types of sdpa.h (SDPA_Q8_0, SDPA_Q4_0: ggml's block_q8_0 and block_q4_0)
 * checked on every implementation of the registry against code written here from the
 * published formulas, never the library's:
 *
 *   - the conversions: sdpa_quantize_* must give byte for byte what ggml's reference
 *     quantizers give (ref_q8_0 / ref_q4_0 below, with their own f16 rounding), the
 *     dequantizers d q exactly, and the refusals write nothing;
 *   - exact mode (q8_scores 0): every stored value enters as d q, so the output must meet the
 *     float64 oracle computed on the dequantized K and V within the tolerance the f16 tests
 *     use (test_layouts.c: attn_row_tol times sum_j w_j |v_jc| / l, plus what the modifiers
 *     add, 2 ds (sum w|v| / l + |o|) with ds = 3 u (|softcap(s)| + |bias| + |mask|) + the
 *     softcap's own error);
 *   - fast mode (q8_scores 1): sdpa.h's bound. With x = scale q (the row), every score of the
 *     row is off by at most D_row = max_j sum_b (max_{c in b} |x_c| / 254) sum_{c in b} |k_jc|
 *     (over the keys the row sees) plus float rounding, taken here as (D / 32 + 8) u (A + D_row)
 *     (the f32 scale of each block, its product with d_k, the sum over blocks, x itself;
 *     A = max_j sum_c |x_c k_jc|); the output is then within (e^(2 D_row) - 1) max |v| of the
 *     exact one, on top of the exact-mode tolerance, and lse within D_row of it. That bound
 *     is a worst case, which a coarser quantization (a 7-bit grid, truncation) still meets on
 *     random data, so the output is also held to a float64 model of the stated algorithm:
 *     d_b = max_{c in b} |x_c| / 127, q_c = round(x_c / d_b) clamped to +-127, score
 *     sum_c d_b q_c k_c, within the exact-mode tolerance plus (e^(2 T_row) - 1) max |v|, where
 *     T_row = max_j sum over the elements whose x_c / d_b lies within 2^-13 of a rounding tie
 *     (where f32 rounding of scale q, d_b and the quotient may legitimately pick the other
 *     integer) of d_b |k_jc|, plus the float rounding above. Fast mode must also differ from
 *     exact mode somewhere (q is not on the int8 grid), and both give the same bits on 1, 2
 *     and 3 threads;
 *   - refusals: block formats with a dim or a stride not a multiple of 32, q8_scores on a K
 *     that is not a block format or a value other than 0 and 1: a status, a message from
 *     sdpa_validate, and o and lse untouched.
 *
 * The forward problems are batches of sequences (lq_b queries, lk_b keys) in one of the forms
 * of sdpa_params: queries each / padded / packed; keys each (dense, strided token-major,
 * reversed), padded, packed or paged (pages of 16 and 32 keys, which the library stages, 64
 * and 128; shuffled, or in order so that consecutive pages form runs). Storage no sequence owns holds NaN (a block with a NaN scale), o and lse are sentinel-
 * filled and everything no row owns must stay so.
 */

static bench_pool *g_pool[2]; /* 2 threads, and 3 threads in shuffled order */

#define F32 SDPA_F32
#define F16 SDPA_F16
#define BF16 SDPA_BF16
#define Q8 SDPA_Q8_0
#define Q4 SDPA_Q4_0

enum { QK = 32, Q8_BYTES = 34, Q4_BYTES = 18 };

static const char *dtn(sdpa_dtype t)
{
    return t == F16 ? "f16" : t == BF16 ? "bf16" : t == Q8 ? "q8_0" : t == Q4 ? "q4_0" : "f32";
}

static bool quantized(sdpa_dtype t) { return t == Q8 || t == Q4; }

/* ------------------------------------------------------------------------------------------ */
/* The reference block codec, from the formulas alone                                          */
/* ------------------------------------------------------------------------------------------ */

/* binary32 -> binary16, round to nearest even (nearbyint in double, the default rounding
   mode), overflow (>= 65520) to inf. */
static uint16_t ref_f16(float x)
{
    const uint16_t sign = signbit(x) ? 0x8000u : 0u;
    const double a = fabs((double)x);
    if (isnan(x)) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x1p-14) return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p24)); /* 1024: 2^-14 */
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int E = e - 1;
    double m = nearbyint(ldexp(a, 10 - E)); /* [1024, 2048] */
    if (m == 2048.0) m = 1024.0, E++;
    return (uint16_t)(sign | (uint16_t)((E + 15) << 10) | (uint16_t)(m - 1024.0));
}

/* binary16 -> its value, exactly. */
static double ref_f16_value(uint16_t h)
{
    const int ex = (h >> 10) & 31, man = h & 1023;
    double v = ex == 31 ? (man ? NAN : INFINITY) : ex == 0 ? ldexp(man, -24) : ldexp(1024 + man, ex - 25);
    return h & 0x8000u ? -v : v;
}

/* round half away from zero (exact in double for every float) */
static int ref_round(float t)
{
    const double a = floor(fabs((double)t) + 0.5);
    return (int)(t < 0 ? -a : a);
}

/* ggml's quantize_row_q8_0_ref on one block. The products are volatile: no FMA contraction. */
static void ref_q8_0(const float *x, unsigned char *y)
{
    float amax = 0.0f;
    for (int i = 0; i < QK; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = ref_f16(d);
    y[0] = (unsigned char)(h & 0xff), y[1] = (unsigned char)(h >> 8);
    for (int i = 0; i < QK; i++) {
        volatile float t = x[i] * id;
        y[2 + i] = (unsigned char)(int8_t)ref_round(t);
    }
}

/* ggml's quantize_row_q4_0_ref on one block: m the first element of largest magnitude. */
static void ref_q4_0(const float *x, unsigned char *y)
{
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < QK; i++)
        if (amax < fabsf(x[i])) amax = fabsf(x[i]), m = x[i];
    const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = ref_f16(d);
    y[0] = (unsigned char)(h & 0xff), y[1] = (unsigned char)(h >> 8);
    for (int i = 0; i < QK / 2; i++) {
        volatile float t0 = x[i] * id, t1 = x[QK / 2 + i] * id;
        volatile float s0 = t0 + 8.5f, s1 = t1 + 8.5f;
        int n0 = (int)(int8_t)s0, n1 = (int)(int8_t)s1;
        if (n0 > 15) n0 = 15;
        if (n1 > 15) n1 = 15;
        y[2 + i] = (unsigned char)(n0 | n1 << 4);
    }
}

/* One block's values d q, exactly (in double, then to float: an f16 times a small integer). */
static void ref_deq(sdpa_dtype t, const unsigned char *y, float *x)
{
    const double d = ref_f16_value((uint16_t)(y[0] | y[1] << 8));
    for (int i = 0; i < QK; i++) {
        const int q = t == Q8 ? (int)(int8_t)y[2 + i]
                              : (int)((i < QK / 2 ? y[2 + i] : y[2 + i - QK / 2] >> 4) & 15) - 8;
        x[i] = (float)(d * q);
    }
}

static size_t ref_block_bytes(sdpa_dtype t) { return t == Q8 ? Q8_BYTES : t == Q4 ? Q4_BYTES : 0; }
static size_t ref_elem_bytes(sdpa_dtype t) { return t == F32 ? 4 : 2; }

/* Bytes of element offset off (a multiple of the block for the block formats). */
static ptrdiff_t ref_off_bytes(sdpa_dtype t, ptrdiff_t off)
{
    return quantized(t) ? off / QK * (ptrdiff_t)ref_block_bytes(t) : off * (ptrdiff_t)ref_elem_bytes(t);
}

/* ------------------------------------------------------------------------------------------ */
/* K and V storage: a view [n][h][t][dim] of any type, NaN wherever nothing is stored           */
/* ------------------------------------------------------------------------------------------ */
typedef struct kvbuf {
    sdpa_dtype     t;
    size_t         dim;
    ptrdiff_t      bs, hs, ts; /* elements */
    ptrdiff_t      origin;     /* element of [0][0][0][0] in the allocation */
    size_t         nelem;
    unsigned char *mem;
} kvbuf;

static void kvbuf_init(kvbuf *kb, sdpa_dtype t, size_t dim, size_t n, size_t h, size_t tok, ptrdiff_t bs,
                       ptrdiff_t hs, ptrdiff_t ts)
{
    kb->t = t, kb->dim = dim, kb->bs = bs, kb->hs = hs, kb->ts = ts;
    ptrdiff_t lo = 0, hi = (ptrdiff_t)dim; /* [lo, hi) */
    const ptrdiff_t st[3] = {bs, hs, ts}, cnt[3] = {(ptrdiff_t)n, (ptrdiff_t)h, (ptrdiff_t)tok};
    for (int i = 0; i < 3; i++) {
        const ptrdiff_t reach = (cnt[i] > 0 ? cnt[i] - 1 : 0) * st[i];
        if (reach < 0) lo += reach;
        else hi += reach;
    }
    kb->origin = QK - lo; /* a spare block either side */
    kb->nelem = (size_t)(hi - lo) + 2 * QK;
    const size_t bytes = (size_t)ref_off_bytes(t, (ptrdiff_t)kb->nelem);
    kb->mem = tl_xmalloc(bytes);
    if (quantized(t)) { /* every block: scale NaN */
        for (size_t b = 0; b < kb->nelem / QK; b++) {
            unsigned char *p = kb->mem + b * ref_block_bytes(t);
            memset(p, 0x11, ref_block_bytes(t));
            p[0] = 0x00, p[1] = 0x7e;
        }
    } else {
        tl_fill_nan(kb->mem, t, kb->nelem);
    }
}

/* Stores dim raw values at element offset off (from [0][0][0][0]); stored[] gets the values
   the view then holds (quantized and dequantized by the reference codec, or rounded). */
static void kvbuf_put(kvbuf *kb, ptrdiff_t off, const float *raw, float *stored)
{
    const ptrdiff_t at = kb->origin + off;
    if (quantized(kb->t)) {
        unsigned char *p = kb->mem + ref_off_bytes(kb->t, at);
        for (size_t b = 0; b < kb->dim / QK; b++, p += ref_block_bytes(kb->t)) {
            if (kb->t == Q8) ref_q8_0(raw + b * QK, p);
            else ref_q4_0(raw + b * QK, p);
            ref_deq(kb->t, p, stored + b * QK);
        }
    } else {
        for (size_t c = 0; c < kb->dim; c++) {
            tl_put(kb->mem, kb->t, (size_t)(at + (ptrdiff_t)c), raw[c]);
            stored[c] = tl_stored(kb->t, raw[c]);
        }
    }
}

static sdpa_tensor kvbuf_tensor(const kvbuf *kb, ptrdiff_t bs)
{
    return (sdpa_tensor){kb->mem + ref_off_bytes(kb->t, kb->origin), kb->t, bs, kb->hs, kb->ts};
}

/* ------------------------------------------------------------------------------------------ */
/* A problem                                                                                    */
/* ------------------------------------------------------------------------------------------ */
enum { Q_EACH = 0, Q_PADDED, Q_PACKED };
enum { KV_DENSE = 0, KV_STRIDED, KV_REVERSED, KV_PADDED, KV_PACKED, KV_PAGED };
enum { MAXB = 6, MARGIN = 16 };

typedef struct qcase {
    const char *name;
    size_t      B, qh, kvh, d, dv;
    size_t      lq[MAXB], lk[MAXB]; /* per sequence; the _EACH and dense forms use the longest */
    int         qf, kf;
    size_t      page;
    bool        inorder; /* KV_PAGED: pages in table order (runs of adjacent pages), else shuffled */
    sdpa_dtype  kt, vt;
    bool        causal;
    size_t      window;
    float       softcap;
    bool        alibi, mask, sinks;
    int         fast;   /* q8_scores */
    float       krange; /* raw K and V uniform in [-krange, krange); 0: 1 */
} qcase;

typedef struct qprob {
    qcase       c;
    size_t      Lq, Lk, on, lsen;
    float      *q, *k, *v, *mk; /* logical: [B][Hq][Lq][D], [B][Hk][Lk][D], [B][Hk][Lk][Dv], mask */
    float      *qbuf, *obuf, *lse, *slopes, *sinks;
    kvbuf       kb, vb;
    size_t      q_lens[MAXB], kv_lens[MAXB], cu_q[MAXB + 1], cu_kv[MAXB + 1];
    int32_t    *table;
    sdpa_params p;
    sdpa_tensor tq, tk, tv, to, tm;
    char        what[320];
} qprob;

static size_t row_off(const qprob *pr, size_t b, size_t h, size_t i, size_t dim)
{
    const qcase *c = &pr->c;
    if (c->qf == Q_PACKED) return ((pr->cu_q[b] + i) * c->qh + h) * dim;
    return ((b * c->qh + h) * pr->Lq + i) * dim;
}

static void qprob_init(qprob *pr, const qcase *cin, uint64_t seed)
{
    memset(pr, 0, sizeof *pr);
    pr->c = *cin;
    qcase *c = &pr->c;
    tl_rng r = {seed};
    if (c->dv == 0) c->dv = c->d;
    const size_t B = c->B, Hq = c->qh, Hk = c->kvh, D = c->d, Dv = c->dv;
    for (size_t b = 0; b < B; b++) {
        if (c->lq[b] > pr->Lq) pr->Lq = c->lq[b];
        if (c->lk[b] > pr->Lk) pr->Lk = c->lk[b];
    }
    if (pr->Lq == 0) pr->Lq = 1;
    if (pr->Lk == 0) pr->Lk = 1;
    const size_t Lq = pr->Lq, Lk = pr->Lk;
    for (size_t b = 0; b < B; b++) { /* the forms without lengths: every sequence the longest */
        if (c->qf == Q_EACH) c->lq[b] = Lq;
        if (c->kf <= KV_REVERSED) c->lk[b] = Lk;
        pr->q_lens[b] = c->lq[b], pr->kv_lens[b] = c->lk[b];
        pr->cu_q[b + 1] = pr->cu_q[b] + c->lq[b];
        pr->cu_kv[b + 1] = pr->cu_kv[b] + c->lk[b];
    }
    const float kr = c->krange > 0 ? c->krange : 1.0f;
    pr->q = tl_xmalloc(B * Hq * Lq * D * sizeof(float));
    pr->k = tl_xmalloc(B * Hk * Lk * D * sizeof(float));
    pr->v = tl_xmalloc(B * Hk * Lk * Dv * sizeof(float));
    for (size_t e = 0; e < B * Hq * Lq * D; e++) pr->q[e] = tl_uniform(&r, -1.0f, 1.0f);
    for (size_t e = 0; e < B * Hk * Lk * D; e++) pr->k[e] = NAN;
    for (size_t e = 0; e < B * Hk * Lk * Dv; e++) pr->v[e] = NAN;

    sdpa_params *p = &pr->p;
    p->batch = B, p->q_heads = Hq, p->kv_heads = Hk, p->q_len = Lq, p->kv_len = Lk, p->head_dim = D;
    p->v_dim = Dv == D && seed % 2 ? 0 : Dv; /* 0 means head_dim */
    p->causal = c->causal, p->window = c->window, p->softcap = c->softcap, p->q8_scores = c->fast;

    /* queries and outputs: [B][Hq][Lq][dim], or token-major [tokens][Hq][dim] when packed */
    const size_t qtok = c->qf == Q_PACKED ? (pr->cu_q[B] ? pr->cu_q[B] : 1) : B * Lq;
    pr->qbuf = tl_xmalloc(qtok * Hq * D * sizeof(float));
    for (size_t e = 0; e < qtok * Hq * D; e++) pr->qbuf[e] = NAN;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++)
                memcpy(pr->qbuf + row_off(pr, b, h, i, D), pr->q + ((b * Hq + h) * Lq + i) * D, D * sizeof(float));
    pr->on = qtok * Hq * Dv;
    pr->obuf = tl_xmalloc((pr->on + 2 * MARGIN) * sizeof(float));
    tl_fill_sentinel(pr->obuf, pr->on + 2 * MARGIN);
    pr->lsen = B * Hq * Lq;
    pr->lse = tl_xmalloc((pr->lsen + 2 * MARGIN) * sizeof(float));
    tl_fill_sentinel(pr->lse, pr->lsen + 2 * MARGIN);
    p->lse = pr->lse + MARGIN;
    if (c->qf == Q_PACKED) {
        p->cu_q = pr->cu_q;
        pr->tq = (sdpa_tensor){pr->qbuf, F32, 987654321, (ptrdiff_t)D, (ptrdiff_t)(Hq * D)};
        pr->to = (sdpa_tensor){pr->obuf + MARGIN, F32, 987654321, (ptrdiff_t)Dv, (ptrdiff_t)(Hq * Dv)};
    } else {
        if (c->qf == Q_PADDED) p->q_lens = pr->q_lens;
        pr->tq = (sdpa_tensor){pr->qbuf, F32, (ptrdiff_t)(Hq * Lq * D), (ptrdiff_t)(Lq * D), (ptrdiff_t)D};
        pr->to = (sdpa_tensor){pr->obuf + MARGIN, F32, (ptrdiff_t)(Hq * Lq * Dv), (ptrdiff_t)(Lq * Dv), (ptrdiff_t)Dv};
    }

    /* keys and values: the storage of each form; where[b][h][j] is the element offset of a row */
    float *raw = tl_xmalloc((D > Dv ? D : Dv) * sizeof(float));
    const size_t dims[2] = {D, Dv};
    kvbuf *kvs[2] = {&pr->kb, &pr->vb};
    const sdpa_dtype types[2] = {c->kt, c->vt};
    size_t *perm = NULL, n_pages = 0, max_pages = 0;
    if (c->kf == KV_PAGED) {
        size_t used = 0, mp = 1;
        for (size_t b = 0; b < B; b++) {
            const size_t n = (c->lk[b] + c->page - 1) / c->page;
            used += n;
            if (n > mp) mp = n;
        }
        max_pages = mp + 1, n_pages = used + 3; /* a spare table entry per sequence, spare pages */
        perm = tl_xmalloc(n_pages * sizeof(size_t));
        for (size_t e = 0; e < n_pages; e++) perm[e] = e;
        for (size_t e = n_pages - 1; e > 0 && !c->inorder; e--) {
            const size_t j = tl_below(&r, e + 1), t = perm[e];
            perm[e] = perm[j], perm[j] = t;
        }
        pr->table = tl_xmalloc(B * max_pages * sizeof(int32_t));
        size_t next = 0;
        for (size_t b = 0; b < B; b++)
            for (size_t pg = 0; pg < max_pages; pg++)
                pr->table[b * max_pages + pg] = pg * c->page < c->lk[b] ? (int32_t)perm[next++]
                                                : pg % 2 ? -7 : (int32_t)(n_pages + 5); /* never used */
        p->block_table = pr->table, p->page_size = c->page, p->max_pages = max_pages, p->n_pages = n_pages;
        p->kv_lens = pr->kv_lens;
    }
    for (int s = 0; s < 2; s++) {
        const ptrdiff_t dm = (ptrdiff_t)dims[s], hk = (ptrdiff_t)Hk, lk = (ptrdiff_t)Lk;
        ptrdiff_t bs = 0;
        switch (c->kf) {
        case KV_PAGED: {
            const ptrdiff_t ps = (ptrdiff_t)c->page;
            kvbuf_init(kvs[s], types[s], dims[s], n_pages, Hk, c->page, hk * ps * dm, ps * dm, dm);
            bs = hk * ps * dm;
            break;
        }
        case KV_PACKED: {
            const ptrdiff_t tok = (ptrdiff_t)(pr->cu_kv[B] ? pr->cu_kv[B] : 1);
            kvbuf_init(kvs[s], types[s], dims[s], 1, Hk, (size_t)tok, 0, tok * dm, dm);
            bs = -123456768; /* unused (a multiple of 32, as every stride of a block view must be) */
            break;
        }
        case KV_STRIDED: /* token-major, every stride padded by a block */
            kvbuf_init(kvs[s], types[s], dims[s], B, Hk, Lk, lk * (hk * (dm + 32) + 32) + 64, dm + 32,
                       hk * (dm + 32) + 32);
            bs = kvs[s]->bs;
            break;
        case KV_REVERSED: /* tokens last to first */
            kvbuf_init(kvs[s], types[s], dims[s], B, Hk, Lk, hk * lk * (dm + 32), lk * (dm + 32), -(dm + 32));
            bs = kvs[s]->bs;
            break;
        default:
            kvbuf_init(kvs[s], types[s], dims[s], B, Hk, Lk, hk * lk * dm, lk * dm, dm);
            bs = kvs[s]->bs;
            break;
        }
        float *logical = s == 0 ? pr->k : pr->v;
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < Hk; h++)
                for (size_t j = 0; j < c->lk[b]; j++) {
                    const kvbuf *kb = kvs[s];
                    ptrdiff_t off;
                    if (c->kf == KV_PAGED) {
                        const ptrdiff_t P = pr->table[b * max_pages + j / c->page];
                        off = P * kb->bs + (ptrdiff_t)h * kb->hs + (ptrdiff_t)(j % c->page) * kb->ts;
                    } else if (c->kf == KV_PACKED) {
                        off = (ptrdiff_t)h * kb->hs + (ptrdiff_t)(pr->cu_kv[b] + j) * kb->ts;
                    } else {
                        off = (ptrdiff_t)b * kb->bs + (ptrdiff_t)h * kb->hs + (ptrdiff_t)j * kb->ts;
                    }
                    for (size_t e = 0; e < dims[s]; e++) raw[e] = tl_uniform(&r, -kr, kr);
                    kvbuf_put(kvs[s], off, raw, logical + ((b * Hk + h) * Lk + j) * dims[s]);
                }
        if (s == 0) pr->tk = kvbuf_tensor(kvs[s], bs);
        else pr->tv = kvbuf_tensor(kvs[s], bs);
    }
    if (c->kf == KV_PADDED) p->kv_lens = pr->kv_lens;
    if (c->kf == KV_PACKED) p->cu_kv = pr->cu_kv;
    free(raw), free(perm);

    if (c->mask) { /* f32 [B][Hq][Lq][Lk] by per-sequence index, -inf holes, NaN outside */
        const size_t n = B * Hq * Lq * Lk;
        pr->mk = tl_xmalloc(n * sizeof(float));
        for (size_t e = 0; e < n; e++) {
            const size_t j = e % Lk, i = e / Lk % Lq, b = e / (Hq * Lq * Lk);
            float x = tl_uniform(&r, 0.0f, 1.0f) < 0.15f ? -INFINITY : tl_uniform(&r, -2.0f, 2.0f);
            if (i % 11 == 3) x = -INFINITY; /* a row that sees nothing */
            if (i >= c->lq[b] || j >= c->lk[b]) x = NAN;
            pr->mk[e] = x;
        }
        pr->tm = (sdpa_tensor){pr->mk, F32, (ptrdiff_t)(Hq * Lq * Lk), (ptrdiff_t)(Lq * Lk), (ptrdiff_t)Lk};
        p->mask = &pr->tm;
    }
    if (c->alibi) p->alibi_slopes = pr->slopes = tl_alibi_slopes(Hq);
    if (c->sinks) p->sinks = pr->sinks = tl_sinks(&r, Hq);
    static const char *const qn[] = {"q each", "q padded", "q packed"};
    static const char *const kn[] = {"kv dense", "kv strided", "kv reversed", "kv padded", "kv packed", "kv paged"};
    int w = snprintf(pr->what, sizeof pr->what, "%s [B=%zu hq=%zu hkv=%zu d=%zu dv=%zu lq=%zu lk=%zu %s %s", c->name,
                     B, Hq, Hk, D, Dv, Lq, Lk, qn[c->qf], kn[c->kf]);
#define MORE(...) (w += snprintf(pr->what + w, w < (int)sizeof pr->what ? sizeof pr->what - (size_t)w : 0, __VA_ARGS__))
    if (c->kf == KV_PAGED) MORE(" page=%zu", c->page);
    if (c->kf == KV_PAGED && c->inorder) MORE(" in order");
    MORE(" k %s v %s%s", dtn(c->kt), dtn(c->vt), c->causal ? " causal" : "");
    if (c->window) MORE(" window=%zu", c->window);
    if (c->softcap != 0) MORE(" softcap=%g", c->softcap);
    if (c->alibi) MORE(" alibi");
    if (c->mask) MORE(" mask");
    if (c->sinks) MORE(" sinks");
    if (c->krange > 0) MORE(" |k|,|v|<%g", c->krange);
    MORE("%s]", c->fast ? " q8_scores" : "");
#undef MORE
}

static void qprob_free(qprob *pr)
{
    free(pr->q), free(pr->k), free(pr->v), free(pr->mk), free(pr->qbuf), free(pr->obuf), free(pr->lse);
    free(pr->slopes), free(pr->sinks), free(pr->kb.mem), free(pr->vb.mem), free(pr->table);
}

static sdpa_status qprob_run(qprob *pr, const sdpa_impl *impl, bench_pool *pool)
{
    tl_fill_sentinel(pr->obuf, pr->on + 2 * MARGIN);
    tl_fill_sentinel(pr->lse, pr->lsen + 2 * MARGIN);
    return tl_forward_on(impl, &pr->p, pool, &pr->tq, &pr->tk, &pr->tv, &pr->to);
}

/* ------------------------------------------------------------------------------------------ */
/* The float64 oracle on the dequantized K and V                                                */
/* ------------------------------------------------------------------------------------------ */
typedef struct qref {
    double *o, *wabs;                  /* per output element */
    double *lse, *tol, *ds, *dq, *vmax; /* per row: E_row, modifier error, fast-score bound, max |v| */
    double *om, *lsem, *tm;            /* the fast-score model: output, lse, per row T_row */
    size_t *seen;
} qref;

static void qref_free(qref *r)
{
    free(r->o), free(r->wabs), free(r->lse), free(r->tol), free(r->ds), free(r->dq), free(r->vmax), free(r->seen);
    free(r->om), free(r->lsem), free(r->tm);
}

static void oracle(const qprob *pr, const sdpa_impl *impl, qref *r)
{
    const qcase *c = &pr->c;
    const size_t B = c->B, Hq = c->qh, G = c->qh / c->kvh, Lq = pr->Lq, Lk = pr->Lk, D = c->d, Dv = c->dv;
    const size_t rows = B * Hq * Lq, nb = D / QK;
    const double scale = 1.0 / sqrt((double)D), u = TL_U, cap = c->softcap;
    const double tanh_ulp = sdpa_impl_tanh_max_ulp(impl);
    r->o = tl_xmalloc(rows * Dv * sizeof(double)), r->wabs = tl_xmalloc(rows * Dv * sizeof(double));
    r->lse = tl_xmalloc(rows * sizeof(double)), r->tol = tl_xmalloc(rows * sizeof(double));
    r->ds = tl_xmalloc(rows * sizeof(double)), r->dq = tl_xmalloc(rows * sizeof(double));
    r->vmax = tl_xmalloc(rows * sizeof(double)), r->seen = tl_xmalloc(rows * sizeof(size_t));
    r->om = tl_xmalloc(rows * Dv * sizeof(double)), r->lsem = tl_xmalloc(rows * sizeof(double));
    r->tm = tl_xmalloc(rows * sizeof(double));
    double *s = tl_xmalloc(Lk * sizeof(double)), *x = tl_xmalloc(D * sizeof(double)), *bmax = tl_xmalloc(nb * sizeof(double));
    double *sm = tl_xmalloc(Lk * sizeof(double)), *xq = tl_xmalloc(D * sizeof(double)), *tie = tl_xmalloc(D * sizeof(double));
    bool *in = tl_xmalloc(Lk * sizeof(bool));
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++) {
                const size_t row = (b * Hq + h) * Lq + i, hk = h / G;
                const long long ip = (long long)i + (long long)c->lk[b] - (long long)c->lq[b];
                const float *qr = pr->q + row * D;
                for (size_t e = 0; e < D; e++) x[e] = scale * qr[e];
                for (size_t bl = 0; bl < nb; bl++) {
                    bmax[bl] = 0;
                    for (size_t e = bl * QK; e < (bl + 1) * QK; e++) bmax[bl] = fmax(bmax[bl], fabs(x[e]));
                    /* the model's quantized row: xq = d q; tie[e] = d where q may be either integer */
                    const double db = bmax[bl] / 127.0;
                    for (size_t e = bl * QK; e < (bl + 1) * QK; e++) {
                        const double t = db > 0 ? x[e] / db : 0.0, a = fabs(t), fl = floor(a);
                        double qa = floor(a + 0.5);
                        if (qa > 127) qa = 127;
                        xq[e] = db * (t < 0 ? -qa : qa);
                        tie[e] = fabs(a - fl - 0.5) < 0x1p-13 ? db : 0.0;
                    }
                }
                double mx = pr->sinks ? pr->sinks[h] : -INFINITY, A = 0, dsmax = 0, dq = 0, vmax = 0;
                double mxm = mx, tmax = 0;
                size_t n = 0;
                for (size_t j = 0; j < c->lk[b]; j++) {
                    const long long jj = (long long)j;
                    const double mv = pr->mk ? pr->mk[row * Lk + j] : 0.0;
                    in[j] = !(c->causal && jj > ip) && !(c->window && llabs(ip - jj) >= (long long)c->window) &&
                            mv != -INFINITY;
                    if (!in[j]) continue;
                    n++;
                    const float *kr = pr->k + ((b * c->kvh + hk) * Lk + j) * D;
                    double acc = 0, mag = 0, dqj = 0, accm = 0, tj = 0;
                    for (size_t bl = 0; bl < nb; bl++) {
                        double ka = 0;
                        for (size_t e = bl * QK; e < (bl + 1) * QK; e++) {
                            acc += x[e] * kr[e], mag += fabs(x[e] * kr[e]);
                            ka += fabs((double)kr[e]);
                            accm += xq[e] * kr[e], tj += tie[e] * fabs((double)kr[e]);
                        }
                        dqj += bmax[bl] / 254.0 * ka;
                    }
                    if (dqj > dq) dq = dqj;
                    if (tj > tmax) tmax = tj;
                    double y = acc, ym = accm;
                    if (cap > 0) y = cap * tanh(y / cap), ym = cap * tanh(ym / cap);
                    const double bias = pr->slopes ? -(double)pr->slopes[h] * (double)llabs(ip - jj) : 0.0;
                    y += bias + mv, ym += bias + mv;
                    s[j] = y, sm[j] = ym;
                    if (y > mx) mx = y;
                    if (ym > mxm) mxm = ym;
                    if (mag > A) A = mag;
                    const double ds = 3 * u * (fabs(y - bias - mv) + fabs(bias) + fabs(mv)) +
                                      (cap > 0 ? (2 * tanh_ulp + 2) * u * cap : 0.0);
                    if (ds > dsmax) dsmax = ds;
                    for (size_t e = 0; e < Dv; e++) {
                        const double av = fabs((double)pr->v[((b * c->kvh + hk) * Lk + j) * Dv + e]);
                        if (av > vmax) vmax = av;
                    }
                }
                const bool sink = pr->sinks && pr->sinks[h] != -INFINITY;
                double l = sink ? exp(pr->sinks[h] - mx) : 0.0, lm = sink ? exp(pr->sinks[h] - mxm) : 0.0;
                for (size_t j = 0; j < c->lk[b]; j++)
                    if (in[j]) l += (s[j] = exp(s[j] - mx)), lm += (sm[j] = exp(sm[j] - mxm));
                r->seen[row] = n;
                r->tol[row] = attn_row_tol(n, D, A);
                r->ds[row] = dsmax;
                r->dq[row] = dq + (double)(nb + 8) * u * (A + dq);
                r->tm[row] = tmax + (double)(nb + 8) * u * (A + dq);
                r->lsem[row] = n ? mxm + log(lm) : pr->sinks ? pr->sinks[h] : -INFINITY;
                r->vmax[row] = vmax;
                r->lse[row] = n ? mx + log(l) : pr->sinks ? pr->sinks[h] : -INFINITY;
                for (size_t e = 0; e < Dv; e++) {
                    double acc = 0, mag = 0;
                    double accm = 0;
                    for (size_t j = 0; j < c->lk[b]; j++) {
                        if (!in[j]) continue;
                        const double vv = pr->v[((b * c->kvh + hk) * Lk + j) * Dv + e];
                        acc += s[j] * vv, mag += s[j] * fabs(vv), accm += sm[j] * vv;
                    }
                    r->o[row * Dv + e] = n ? acc / l : 0.0;
                    r->om[row * Dv + e] = n ? accm / lm : 0.0;
                    r->wabs[row * Dv + e] = n ? mag / l : 0.0;
                }
            }
    free(s), free(x), free(bmax), free(in), free(sm), free(xq), free(tie);
}

static double g_worst;      /* exact mode: the largest |error| / tolerance, printed per implementation */
static double g_worst_fast; /* fast mode: the largest |o_fast - o| / its bound */
static double g_fast_err;   /* fast mode: the largest |o_fast - o| met */
static double g_worst_model; /* fast mode: the largest |o_fast - o_model| / its tolerance */

/* o and lse against the oracle (fast: within sdpa.h's bound for q8 scores), and every
   element no sequence owns still a sentinel. */
static void check(const qprob *pr, const qref *r, bool fast)
{
    const qcase *c = &pr->c;
    const size_t Hq = c->qh, Lq = pr->Lq, Dv = c->dv;
    unsigned char *own = tl_xmalloc(pr->on);
    memset(own, 0, pr->on);
    for (size_t b = 0; b < c->B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++) memset(own + row_off(pr, b, h, i, Dv), 1, Dv);
    const float *o = pr->obuf + MARGIN, *lse = pr->lse + MARGIN;
    bool stop = false;
    for (size_t b = 0; b < c->B && !stop; b++)
        for (size_t h = 0; h < Hq && !stop; h++)
            for (size_t i = 0; i < c->lq[b] && !stop; i++) {
                const size_t row = (b * Hq + h) * Lq + i, at = row_off(pr, b, h, i, Dv);
                const double fast_o = fast ? expm1(2 * r->dq[row]) * r->vmax[row] : 0.0;
                for (size_t e = 0; e < Dv && !stop; e++) {
                    const float got = o[at + e];
                    const double ref = r->o[row * Dv + e];
                    if (r->seen[row] == 0) {
                        stop = !CHECK(got == 0.0f, "%s: b=%zu h=%zu i=%zu sees no key: o[%zu] = %g, want 0", pr->what,
                                      b, h, i, e, got);
                        continue;
                    }
                    const double tol0 = r->tol[row] * r->wabs[row * Dv + e] +
                                        2 * r->ds[row] * (r->wabs[row * Dv + e] + fabs(ref)) + FLT_TRUE_MIN;
                    const double tol = tol0 + fast_o, err = fabs(got - ref);
                    if (fast) {
                        if (err / tol > g_worst_fast) g_worst_fast = err / tol;
                        if (err > g_fast_err) g_fast_err = err;
                    } else if (err / tol > g_worst) {
                        g_worst = err / tol;
                    }
                    stop = !CHECK(err <= tol,
                                  "%s: b=%zu h=%zu i=%zu (sees %zu keys) o[%zu] = %.9g, float64 %.9g, |err| %.3g > %.3g%s",
                                  pr->what, b, h, i, r->seen[row], e, got, ref, err, tol,
                                  fast ? " (fast-score bound)" : "");
                    if (!fast || stop) continue;
                    const double refm = r->om[row * Dv + e], errm = fabs(got - refm);
                    const double tolm = tol0 + 2 * r->ds[row] * fabs(refm) + expm1(2 * r->tm[row]) * r->vmax[row];
                    if (errm / tolm > g_worst_model) g_worst_model = errm / tolm;
                    stop = !CHECK(errm <= tolm,
                                  "%s: b=%zu h=%zu i=%zu o[%zu] = %.9g, the float64 model of the q8 scores %.9g (exact "
                                  "%.9g), |err| %.3g > %.3g",
                                  pr->what, b, h, i, e, got, refm, ref, errm, tolm);
                }
                const float gl = lse[row];
                const double rl = r->lse[row];
                if (!stop && r->seen[row] == 0)
                    stop = !CHECK(gl == (float)rl, "%s: b=%zu h=%zu i=%zu sees no key: lse %g, want %g", pr->what, b, h,
                                  i, gl, rl);
                else if (!stop)
                    stop = !CHECK(fabs(gl - rl) <= r->tol[row] * (1 + fabs(rl)) + 2 * r->ds[row] + (fast ? r->dq[row] : 0),
                                  "%s: b=%zu h=%zu i=%zu lse %.9g, float64 %.9g", pr->what, b, h, i, gl, rl);
                if (!stop && fast && r->seen[row] > 0)
                    stop = !CHECK(fabs(gl - r->lsem[row]) <= r->tol[row] * (1 + fabs(rl)) + 2 * r->ds[row] + r->tm[row],
                                  "%s: b=%zu h=%zu i=%zu lse %.9g, the float64 model of the q8 scores %.9g", pr->what,
                                  b, h, i, gl, r->lsem[row]);
            }
    size_t bad = 0;
    for (size_t e = 0; e < pr->on + 2 * MARGIN; e++) {
        const bool in = e >= MARGIN && e < MARGIN + pr->on && own[e - MARGIN];
        if (!in && !tl_is_sentinel(pr->obuf[e])) bad++;
    }
    CHECK(bad == 0, "%s: %zu elements of o that no sequence's row owns were written", pr->what, bad);
    bad = 0;
    for (size_t e = 0; e < pr->lsen + 2 * MARGIN; e++) {
        bool in = e >= MARGIN && e - MARGIN < pr->lsen;
        if (in) in = (e - MARGIN) % Lq < c->lq[(e - MARGIN) / (Hq * Lq)];
        if (!in && !tl_is_sentinel(pr->lse[e])) bad++;
    }
    CHECK(bad == 0, "%s: %zu lse entries past the sequences' rows were written", pr->what, bad);
    free(own);
}

/* The call serially against the oracle, then on 2 and 3 threads for the same bits; with
   q8_scores also exact mode against the same oracle, and the two must differ somewhere. */
static void run_case(const sdpa_impl *impl, const qcase *c, uint64_t seed)
{
    qprob pr;
    qprob_init(&pr, c, seed);
    qref r;
    oracle(&pr, impl, &r);
    const size_t ob = (pr.on + 2 * MARGIN) * sizeof(float), lb = (pr.lsen + 2 * MARGIN) * sizeof(float);
    float *o1 = tl_xmalloc(ob), *l1 = tl_xmalloc(lb);
    for (int fast = c->fast; fast >= 0; fast--) {
        pr.p.q8_scores = fast;
        sdpa_status st = qprob_run(&pr, impl, NULL);
        char msg[256] = "";
        if (st != SDPA_OK) sdpa_validate(&pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, msg, sizeof msg);
        if (!CHECK(st == SDPA_OK, "%s%s: status %s (%s)", pr.what, fast ? "" : " exact", sdpa_status_str(st), msg))
            break;
        check(&pr, &r, fast);
        if (!fast && c->fast) { /* o1 holds the fast output */
            CHECK(memcmp(o1, pr.obuf, ob) != 0, "%s: q8_scores 1 gives the very bits of exact mode (q8_scores 0): ignored?", pr.what);
            continue;
        }
        memcpy(o1, pr.obuf, ob), memcpy(l1, pr.lse, lb);
        for (size_t t = 0; t < 2 && !tl_sampled_out(t + 1); t++) {
            st = qprob_run(&pr, impl, g_pool[t]);
            CHECK(st == SDPA_OK && memcmp(o1, pr.obuf, ob) == 0 && memcmp(l1, pr.lse, lb) == 0,
                  "%s: %zu threads give other bits than one", pr.what, bench_pool_threads(g_pool[t]));
        }
    }
    free(o1), free(l1);
    qref_free(&r);
    qprob_free(&pr);
}

/* ------------------------------------------------------------------------------------------ */
/* The forward cases                                                                            */
/* ------------------------------------------------------------------------------------------ */
static qcase mk(const char *name, size_t B, size_t qh, size_t kvh, size_t d, size_t dv, size_t lq, size_t lk,
                sdpa_dtype kt, sdpa_dtype vt)
{
    qcase c;
    memset(&c, 0, sizeof c);
    c.name = name, c.B = B, c.qh = qh, c.kvh = kvh, c.d = d, c.dv = dv, c.kt = kt, c.vt = vt;
    for (size_t b = 0; b < B; b++) c.lq[b] = lq, c.lk[b] = lk;
    return c;
}

static const struct {
    sdpa_dtype k, v;
} g_types[] = {{Q8, F32}, {Q4, F16}, {F32, Q8}, {F16, Q4}, {Q8, Q8}, {Q4, Q4}, {Q8, Q4}, {Q4, Q8}, {BF16, Q8}, {Q4, BF16}};
enum { N_TYPES = sizeof g_types / sizeof g_types[0] };

/* head_dim / v_dim pairs */
static const size_t g_dims[][2] = {{32, 32}, {64, 64}, {128, 128}, {64, 32}, {32, 64}};

/* K only, V only and both in a block format, over head dims, prefill and decode, GQA, dense,
   strided and reversed K/V. */
static void t_types(const sdpa_impl *impl)
{
    for (size_t i = 0; i < N_TYPES; i++) {
        const size_t *dm = g_dims[i % 5];
        qcase a = mk("prefill", 1, 8, 2, dm[0], dm[1], i % 3 == 2 ? 70 : 40, 70, g_types[i].k, g_types[i].v);
        a.causal = i % 2 == 0;
        a.kf = (int)(i % 3); /* dense, strided, reversed */
        run_case(impl, &a, 100 + i);
        qcase b = mk("decode", 2, 8, 2, dm[0], dm[1], 1 + i % 4, 300 + 37 * i, g_types[i].k, g_types[i].v);
        b.causal = i % 4 != 0;
        b.kf = (int)((i + 1) % 3);
        run_case(impl, &b, 200 + i);
    }
    /* a long decode: split into KV chunks and merged */
    qcase c = mk("long decode", 1, 8, 2, 128, 128, 1, 2100, Q8, Q4);
    run_case(impl, &c, 300);
    c.kt = Q4, c.vt = Q8, c.kf = KV_REVERSED, c.dv = 64, c.lq[0] = 3, c.causal = true;
    run_case(impl, &c, 301);
    /* larger values (scores of several units, weights far from uniform) */
    qcase d = mk("prefill, wide values", 1, 4, 4, 64, 64, 40, 70, Q4, Q8);
    d.krange = 4.0f, d.causal = true;
    run_case(impl, &d, 302);
}

/* Ragged: padded and packed sequences; paged K/V with pages of 16, 32, 64 and 128 keys, shuffled
   or in order. */
static void t_ragged(const sdpa_impl *impl)
{
    qcase a = mk("ragged decodes", 4, 8, 2, 64, 64, 1, 0, Q8, Q4);
    const size_t lka[4] = {1, 100, 0, 700};
    for (size_t b = 0; b < 4; b++) a.lk[b] = lka[b];
    a.qf = Q_PADDED, a.kf = KV_PADDED;
    run_case(impl, &a, 400);
    qcase b = mk("ragged prefills", 3, 4, 2, 128, 64, 0, 0, Q4, Q8);
    const size_t lqb[3] = {7, 0, 40}, lkb[3] = {7, 50, 70};
    for (size_t s = 0; s < 3; s++) b.lq[s] = lqb[s], b.lk[s] = lkb[s];
    b.qf = Q_PADDED, b.kf = KV_PADDED, b.causal = true;
    run_case(impl, &b, 401);
    b.qf = Q_PACKED, b.kf = KV_PACKED, b.kt = Q8, b.vt = F16, b.d = 64, b.dv = 32;
    run_case(impl, &b, 402);
    b.qf = Q_PADDED, b.kf = KV_PACKED, b.kt = F32, b.vt = Q4, b.d = 32, b.dv = 32, b.causal = false;
    run_case(impl, &b, 403);
    a.qf = Q_PACKED, a.kf = KV_PACKED, a.kt = Q4, a.vt = Q4, a.d = 32;
    run_case(impl, &a, 404);

    static const size_t pages[3] = {16, 32, 128};
    for (size_t i = 0; i < 3; i++) {
        qcase p = a;
        p.name = "paged decodes";
        p.qf = Q_PADDED, p.kf = KV_PAGED, p.page = pages[i];
        p.kt = i == 1 ? F16 : i == 0 ? Q8 : Q4, p.vt = i == 2 ? F32 : i == 0 ? Q4 : Q8;
        p.d = g_dims[i][0], p.dv = g_dims[i][1];
        run_case(impl, &p, 410 + i);
        qcase q = b;
        q.name = "paged prefills";
        q.qf = i == 1 ? Q_PACKED : Q_PADDED, q.kf = KV_PAGED, q.page = pages[i], q.causal = i != 2;
        q.kt = i == 1 ? Q4 : Q8, q.vt = i == 2 ? Q4 : i == 0 ? Q8 : F32;
        q.d = g_dims[2 - i][0], q.dv = g_dims[3 + i % 2][1];
        q.lk[2] = 300; /* 40 queries over 300 keys: many pages */
        run_case(impl, &q, 420 + i);
    }
    /* more query rows than a decode unit takes, so the prefill paths page too */
    qcase c = mk("paged prefill, 8 heads per KV head", 2, 16, 2, 64, 64, 0, 0, Q8, Q8);
    c.lq[0] = 40, c.lq[1] = 17, c.lk[0] = 300, c.lk[1] = 17;
    c.qf = Q_PADDED, c.kf = KV_PAGED, c.page = 16, c.causal = true;
    run_case(impl, &c, 430);
    c.page = 128, c.kt = Q4, c.vt = Q4;
    run_case(impl, &c, 431);
    /* pages in order: with one KV head consecutive pages are one run of key rows; with two,
       consecutive page numbers whose rows of a head are not adjacent */
    c.kvh = 1, c.inorder = true, c.page = 16, c.kt = Q8, c.vt = Q4;
    run_case(impl, &c, 432);
    c.page = 128, c.kt = Q4, c.vt = Q8;
    run_case(impl, &c, 433);
    c.kvh = 2, c.page = 64, c.kt = Q4, c.vt = F16;
    run_case(impl, &c, 434);
}

/* The variants with block-format K and V: window, mask (f32, -inf holes), softcap, ALiBi,
   sinks (lse is written by every case). */
static void t_variants(const sdpa_impl *impl)
{
    qcase a = mk("all variants", 1, 8, 2, 64, 64, 40, 70, Q4, Q8);
    a.causal = true, a.window = 12, a.mask = true, a.softcap = 20.0f, a.alibi = true, a.sinks = true;
    run_case(impl, &a, 500);
    qcase b = mk("mask and sinks, decode", 2, 8, 2, 128, 64, 4, 300, Q8, F32);
    b.mask = true, b.sinks = true;
    run_case(impl, &b, 501);
    qcase c = mk("window", 1, 4, 1, 32, 32, 40, 300, Q8, Q8);
    c.window = 50, c.kf = KV_STRIDED;
    run_case(impl, &c, 502);
    c.causal = true, c.window = 20, c.kt = F16, c.vt = Q4;
    run_case(impl, &c, 503);
    qcase d = mk("softcap and alibi", 1, 8, 2, 64, 32, 70, 70, Q4, Q4);
    d.softcap = 5.0f, d.alibi = true, d.krange = 4.0f, d.kf = KV_REVERSED;
    run_case(impl, &d, 504);
    qcase e = a;
    e.name = "paged variants", e.B = 3, e.qf = Q_PACKED, e.kf = KV_PAGED, e.page = 16, e.kt = Q8, e.vt = Q4;
    e.lq[1] = 1, e.lk[1] = 130, e.lq[2] = 0, e.lk[2] = 9;
    run_case(impl, &e, 505);
    e.page = 128, e.kt = Q4, e.vt = F16, e.d = 128, e.dv = 64;
    run_case(impl, &e, 506);
}

/* q8_scores 1: within sdpa.h's bound, different from exact mode, deterministic over threads. */
static void t_fast(const sdpa_impl *impl)
{
    g_worst_fast = 0, g_fast_err = 0, g_worst_model = 0;
    qcase a = mk("fast decode", 2, 8, 2, 128, 128, 1, 300, Q8, F32);
    a.fast = 1;
    run_case(impl, &a, 600);
    a.kt = Q4, a.vt = F16, a.d = 64, a.dv = 64, a.lq[0] = a.lq[1] = 4, a.causal = true, a.lk[1] = 257;
    a.kf = KV_STRIDED;
    run_case(impl, &a, 601);
    qcase b = mk("fast prefill", 1, 8, 2, 64, 64, 40, 70, Q8, Q8);
    b.fast = 1, b.causal = true;
    run_case(impl, &b, 602);
    b.kt = Q4, b.vt = Q4, b.d = 32, b.dv = 64, b.lq[0] = 70, b.causal = false, b.kf = KV_REVERSED;
    run_case(impl, &b, 603);
    b.kt = Q8, b.vt = Q4, b.d = 128, b.dv = 32, b.krange = 4.0f, b.lq[0] = 40, b.causal = true;
    run_case(impl, &b, 604);
    qcase c = mk("fast paged decodes", 4, 8, 2, 64, 64, 1, 0, Q8, Q8);
    const size_t lkc[4] = {1, 100, 0, 700};
    for (size_t s = 0; s < 4; s++) c.lk[s] = lkc[s];
    c.fast = 1, c.qf = Q_PADDED, c.kf = KV_PAGED, c.page = 32;
    run_case(impl, &c, 605);
    c.page = 128, c.kt = Q4, c.qf = Q_PACKED;
    run_case(impl, &c, 606);
    qcase d = mk("fast paged prefill, variants", 2, 4, 2, 64, 64, 0, 0, Q4, Q8);
    d.lq[0] = 40, d.lq[1] = 7, d.lk[0] = 70, d.lk[1] = 7;
    d.fast = 1, d.qf = Q_PADDED, d.kf = KV_PAGED, d.page = 16, d.causal = true, d.mask = true, d.sinks = true,
    d.softcap = 10.0f, d.alibi = true;
    run_case(impl, &d, 607);
    d.kf = KV_PACKED, d.qf = Q_PACKED, d.kt = Q8, d.window = 9;
    run_case(impl, &d, 608);
    qcase e = mk("fast long decode", 1, 8, 2, 128, 128, 2, 2100, Q4, Q8);
    e.fast = 1, e.causal = true;
    run_case(impl, &e, 609);
    printf("# %s: fast mode: worst |o_fast - o| / bound %.3f (worst |o_fast - o| %.3g), worst |o_fast - model| / "
           "tolerance %.3f\n",
           tl_label, g_worst_fast, g_fast_err, g_worst_model);
}

/* ------------------------------------------------------------------------------------------ */
/* Refusals: a status, a message, nothing written                                               */
/* ------------------------------------------------------------------------------------------ */
static void t_bad(const sdpa_impl *impl)
{
    enum { BIG = 1 << 16, LK = 64, OUT = 4096 };
    float *qb = tl_xmalloc(BIG * sizeof(float));
    unsigned char *kb = tl_xmalloc(BIG), *vb = tl_xmalloc(BIG); /* zeros: blocks of scale 0 */
    memset(kb, 0, BIG), memset(vb, 0, BIG);
    for (size_t e = 0; e < BIG; e++) qb[e] = 0.5f;
    float *ob = tl_xmalloc(OUT * sizeof(float)), *lb = tl_xmalloc(OUT * sizeof(float));
    tl_fill_sentinel(ob, OUT), tl_fill_sentinel(lb, OUT);
    const sdpa_params base = {.batch = 2, .q_heads = 2, .kv_heads = 1, .q_len = 3, .kv_len = LK, .head_dim = 32,
                              .lse = lb + 64};
    typedef struct bad {
        const char *why;
        sdpa_params p;
        sdpa_tensor q, k, v, o;
        sdpa_status want;
    } bad;
    bad cases[20];
    size_t n = 0;
#define BAD(w, st, stmt)                                                                                     \
    do {                                                                                                     \
        bad *x = &cases[n++];                                                                                \
        x->why = w, x->want = st, x->p = base;                                                               \
        x->q = (sdpa_tensor){qb, F32, 6 * 128, 3 * 128, 128};                                                \
        x->o = (sdpa_tensor){ob + 64, F32, 6 * 128, 3 * 128, 128};                                           \
        x->k = (sdpa_tensor){kb, Q8, LK * 128, LK * 128, 32};                                                \
        x->v = (sdpa_tensor){vb, Q4, LK * 128, LK * 128, 32};                                                \
        sdpa_params *p = &x->p;                                                                              \
        sdpa_tensor *k = &x->k, *v = &x->v, *q = &x->q, *o = &x->o;                                          \
        (void)p, (void)k, (void)v, (void)q, (void)o;                                                         \
        stmt;                                                                                                \
    } while (0)
    BAD("head_dim 48, k q8_0", SDPA_ERR_INVALID_ARGUMENT, (p->head_dim = 48, k->token_stride = 64, v->token_stride = 64));
    BAD("head_dim 48, v q4_0 (k f32)", SDPA_ERR_INVALID_ARGUMENT, (p->head_dim = 48, k->dtype = F32, k->token_stride = 48));
    BAD("v_dim 48, v q4_0", SDPA_ERR_INVALID_ARGUMENT, (p->v_dim = 48, v->token_stride = 64));
    BAD("v_dim 16, v q8_0", SDPA_ERR_INVALID_ARGUMENT, (p->v_dim = 16, v->dtype = Q8));
    BAD("k token_stride 40, head_dim 32", SDPA_ERR_INVALID_ARGUMENT, k->token_stride = 40);
    BAD("v token_stride -40", SDPA_ERR_INVALID_ARGUMENT, (v->token_stride = -40, v->data = vb + 4096));
    BAD("k head_stride not a multiple of 32", SDPA_ERR_INVALID_ARGUMENT, k->head_stride = LK * 32 + 16);
    BAD("v head_stride not a multiple of 32", SDPA_ERR_INVALID_ARGUMENT, v->head_stride = LK * 32 + 48);
    BAD("k batch_stride not a multiple of 32", SDPA_ERR_INVALID_ARGUMENT, k->batch_stride = LK * 32 + 8);
    BAD("v batch_stride not a multiple of 32", SDPA_ERR_INVALID_ARGUMENT, (p->kv_len = 33, v->batch_stride = 33 * 32 + 1));
    BAD("q8_scores on f16 k", SDPA_ERR_UNSUPPORTED, (p->q8_scores = 1, k->dtype = F16));
    BAD("q8_scores on f32 k (v q4_0)", SDPA_ERR_UNSUPPORTED, (p->q8_scores = 1, k->dtype = F32));
    BAD("q8_scores on bf16 k", SDPA_ERR_UNSUPPORTED, (p->q8_scores = 1, k->dtype = BF16));
    BAD("q8_scores 2", SDPA_ERR_INVALID_ARGUMENT, p->q8_scores = 2);
    BAD("q8_scores -1", SDPA_ERR_INVALID_ARGUMENT, p->q8_scores = -1);
    BAD("q in q8_0", SDPA_ERR_UNSUPPORTED, q->dtype = Q8);
    BAD("o in q4_0", SDPA_ERR_UNSUPPORTED, o->dtype = Q4);
    BAD("k of an unknown dtype", SDPA_ERR_INVALID_ARGUMENT, k->dtype = (sdpa_dtype)5);
#undef BAD
    for (size_t i = 0; i < n; i++) {
        bad *x = &cases[i];
        char msg[256] = "";
        size_t ws = 12345;
        const sdpa_status st = sdpa_impl_forward(impl, &x->p, &x->q, &x->k, &x->v, &x->o);
        const sdpa_status sv = sdpa_validate(&x->p, &x->q, &x->k, &x->v, &x->o, msg, sizeof msg);
        const sdpa_status sw = sdpa_impl_workspace_size(impl, &x->p, &x->q, &x->k, &x->v, &x->o, &ws);
        CHECK(st == x->want && sv == x->want && sw == x->want && msg[0] && strcmp(msg, "ok") != 0,
              "%s: status %s (validate %s \"%s\", workspace_size %s), want %s", x->why, sdpa_status_str(st),
              sdpa_status_str(sv), msg, sdpa_status_str(sw), sdpa_status_str(x->want));
        size_t wrote = 0;
        for (size_t e = 0; e < OUT; e++) wrote += !tl_is_sentinel(ob[e]) + !tl_is_sentinel(lb[e]);
        CHECK(wrote == 0, "%s: the refused call wrote %zu elements of o and lse", x->why, wrote);
        tl_fill_sentinel(ob, OUT), tl_fill_sentinel(lb, OUT);
    }
    /* the base call itself is valid, fast mode too (zero K: every output 0) */
    for (int fast = 0; fast < 2; fast++) {
        sdpa_params p = base;
        p.q8_scores = fast;
        const sdpa_tensor q = {qb, F32, 6 * 128, 3 * 128, 128}, o = {ob + 64, F32, 6 * 128, 3 * 128, 128};
        const sdpa_tensor k = {kb, Q8, LK * 128, LK * 128, 32}, v = {vb, Q4, LK * 128, LK * 128, 32};
        const sdpa_status st = sdpa_impl_forward(impl, &p, &q, &k, &v, &o);
        CHECK(st == SDPA_OK && ob[64] == 0.0f && fabsf(lb[64] - logf((float)LK)) < 1e-5f,
              "the valid base call (q8_scores %d): status %s, o[0] %g, lse %g", fast, sdpa_status_str(st), ob[64],
              lb[64]);
    }
    free(qb), free(kb), free(vb), free(ob), free(lb);
}

/* ------------------------------------------------------------------------------------------ */
/* The conversions and the dtype sizes (no implementation involved: one test point)             */
/* ------------------------------------------------------------------------------------------ */
enum { NBLK = 64 };

/* Block k of the conversion data: each kind of block the formulas have an edge at. */
static void conv_block(tl_rng *r, size_t k, sdpa_dtype t, float *x)
{
    const size_t kind = k % 16;
    switch (kind) {
    case 0: /* plain */
        for (int i = 0; i < QK; i++) x[i] = tl_uniform(r, -1.0f, 1.0f);
        break;
    case 1: { /* a random magnitude, 1e-7 .. 1e5 */
        const float m = powf(10.0f, tl_uniform(r, -7.0f, 5.0f));
        for (int i = 0; i < QK; i++) x[i] = m * tl_uniform(r, -1.0f, 1.0f);
        break;
    }
    case 2: /* q8_0 ties: d = 1, x * id = n + 0.5 exactly (half away from zero) */
        for (int i = 0; i < QK; i++) x[i] = (float)((int)tl_below(r, 253) - 126) + (i % 2 ? 0.5f : -0.5f);
        x[tl_below(r, QK)] = k % 32 < 16 ? 127.0f : -127.0f;
        break;
    case 3: /* q4_0 ties: m = -8 first, d = 1: x + 8.5 an integer or n + 0.5 */
        for (int i = 0; i < QK; i++) x[i] = (float)((int)tl_below(r, 15) - 7) + (i % 3 ? 0.5f : -0.5f);
        x[3] = -8.0f, x[20] = 8.0f; /* +8 later: the first of largest magnitude is -8 */
        break;
    case 4: /* zeros, then negative zeros */
        for (int i = 0; i < QK; i++) x[i] = k % 32 < 16 ? 0.0f : -0.0f;
        break;
    case 5: /* all equal */
        for (int i = 0; i < QK; i++) x[i] = k % 32 < 16 ? 0.3f : -0.7f;
        break;
    case 6: /* the largest magnitude negative; with +a = -a, the first wins */
        for (int i = 0; i < QK; i++) x[i] = tl_uniform(r, -1.0f, 1.0f);
        x[9] = -2.5f, x[k % 32 < 16 ? 25 : 2] = 2.5f;
        break;
    case 7: /* tiny: d an f16 subnormal */
        for (int i = 0; i < QK; i++) x[i] = 1e-5f * tl_uniform(r, -1.0f, 1.0f);
        break;
    case 8: /* tiny: d rounds to 0 in f16, the quants do not */
        for (int i = 0; i < QK; i++) x[i] = 1e-9f * tl_uniform(r, -1.0f, 1.0f);
        break;
    case 9: /* tiny: f32 normal, far below f16 */
        for (int i = 0; i < QK; i++) x[i] = 1e-30f * tl_uniform(r, -1.0f, 1.0f);
        break;
    case 10: /* large: the scale just under the f16 maximum (65519 rounds down to 65504) */
        if (t == Q8) {
            for (int i = 0; i < QK; i++) x[i] = 8.0e6f * tl_uniform(r, -1.0f, 1.0f);
            x[5] = 8320913.0f; /* 65519 * 127 */
        } else {
            for (int i = 0; i < QK; i++) x[i] = 5.0e5f * tl_uniform(r, -1.0f, 1.0f);
            x[30] = -524152.0f; /* 65519 * -8 */
        }
        break;
    case 11: /* large, in range for both */
        for (int i = 0; i < QK; i++) x[i] = 4.0e5f * tl_uniform(r, -1.0f, 1.0f);
        break;
    case 12: /* q4_0 scale exactly between two f16 values: ties to even (1 + 2^-11 -> 1, 1 + 3 2^-11 -> 1 + 2^-9) */
        for (int i = 0; i < QK; i++) x[i] = tl_uniform(r, -7.0f, 7.0f);
        x[0] = -8.0f * (k % 32 < 16 ? 1.0f + 0x1p-11f : 1.0f + 3 * 0x1p-11f);
        break;
    case 13: /* a small integer grid: most x * id exact */
        for (int i = 0; i < QK; i++) x[i] = (float)((int)tl_below(r, 17) - 8);
        break;
    case 14: /* one element far larger than the rest */
        for (int i = 0; i < QK; i++) x[i] = tl_uniform(r, -1e-3f, 1e-3f);
        x[tl_below(r, QK)] = k % 32 < 16 ? 1000.0f : -1000.0f;
        break;
    default: /* magnitudes spread over the block */
        for (int i = 0; i < QK; i++) x[i] = ldexpf(tl_uniform(r, -1.0f, 1.0f), (int)tl_below(r, 40) - 20);
        break;
    }
}

static void t_convert(void)
{
    tl_start("quant: conversions byte-identical to the reference, dtype sizes", "api");
    /* sizes */
    static const size_t blk[5] = {1, 1, 1, 32, 32}, bytes[5] = {4, 2, 2, 34, 18};
    for (int t = 0; t < 5; t++) {
        CHECK(sdpa_dtype_block((sdpa_dtype)t) == blk[t], "sdpa_dtype_block(%s) = %zu, want %zu", dtn((sdpa_dtype)t),
              sdpa_dtype_block((sdpa_dtype)t), blk[t]);
        CHECK(sdpa_dtype_size((sdpa_dtype)t) == bytes[t], "sdpa_dtype_size(%s) = %zu, want %zu", dtn((sdpa_dtype)t),
              sdpa_dtype_size((sdpa_dtype)t), bytes[t]);
    }
    CHECK(sdpa_dtype_block((sdpa_dtype)5) == 0 && sdpa_dtype_size((sdpa_dtype)5) == 0 &&
              sdpa_dtype_block((sdpa_dtype)-1) == 0 && sdpa_dtype_size((sdpa_dtype)-1) == 0,
          "an unknown dtype must have block and size 0");
    const struct {
        sdpa_dtype t;
        size_t     n, want;
    } nb[] = {{Q8, 32, 34},   {Q8, 64, 68},         {Q4, 32000, 18000}, {Q8, 33, 0},   {Q4, 16, 0},
              {Q8, 0, 0},     {F32, 5, 20},         {F16, 7, 14},       {BF16, 3, 6},  {(sdpa_dtype)5, 32, 0},
              {F32, SIZE_MAX / 2, 0}, {Q8, SIZE_MAX / 32 * 32, 0},
              {Q4, SIZE_MAX / 32 * 32, SIZE_MAX / 32 * 18}}; /* q4_0: the largest n fits */
    for (size_t i = 0; i < sizeof nb / sizeof nb[0]; i++)
        CHECK(sdpa_dtype_bytes(nb[i].t, nb[i].n) == nb[i].want, "sdpa_dtype_bytes(%s, %zu) = %zu, want %zu",
              dtn(nb[i].t), nb[i].n, sdpa_dtype_bytes(nb[i].t, nb[i].n), nb[i].want);

    /* quantizers: byte for byte, every kind of block, each at several positions in a row */
    tl_rng r = {700};
    float *x = tl_xmalloc(NBLK * QK * sizeof(float)), *y = tl_xmalloc(NBLK * QK * sizeof(float)),
          *yr = tl_xmalloc(NBLK * QK * sizeof(float));
    unsigned char *got = tl_xmalloc(NBLK * Q8_BYTES + 64), *want = tl_xmalloc(NBLK * Q8_BYTES);
    for (int round = 0; round < 4; round++) {
        for (int f = 0; f < 2; f++) {
            const sdpa_dtype t = f ? Q4 : Q8;
            const size_t bb = ref_block_bytes(t);
            for (size_t b = 0; b < NBLK; b++) conv_block(&r, b + (size_t)round * 7, t, x + b * QK);
            memset(got, 0xa5, NBLK * Q8_BYTES + 64);
            const sdpa_status st = f ? sdpa_quantize_q4_0(x, NBLK * QK, got) : sdpa_quantize_q8_0(x, NBLK * QK, got);
            if (!CHECK(st == SDPA_OK, "%s quantize: status %s", dtn(t), sdpa_status_str(st))) continue;
            size_t past = 0;
            for (size_t e = NBLK * bb; e < NBLK * Q8_BYTES + 64; e++) past += got[e] != 0xa5;
            CHECK(past == 0, "%s quantize wrote %zu bytes past the %zu blocks", dtn(t), past, (size_t)NBLK);
            for (size_t b = 0; b < NBLK; b++) {
                if (f) ref_q4_0(x + b * QK, want + b * bb);
                else ref_q8_0(x + b * QK, want + b * bb);
                if (memcmp(got + b * bb, want + b * bb, bb) != 0) {
                    size_t e = 0;
                    while (got[b * bb + e] == want[b * bb + e]) e++;
                    const size_t el = e < 2 ? 0 : e - 2; /* the element (q4_0: and el + 16) */
                    (void)CHECK(false, "%s block %zu (kind %zu): byte %zu is 0x%02x, the reference 0x%02x (x[%zu] = %.9g)",
                          dtn(t), b, (b + (size_t)round * 7) % 16, e, got[b * bb + e], want[b * bb + e], el,
                          x[b * QK + el]);
                }
            }
            /* dequantize: exactly d q, from the bytes of the reference */
            for (size_t b = 0; b < NBLK; b++) ref_deq(t, want + b * bb, yr + b * QK);
            tl_fill_sentinel(y, NBLK * QK);
            const sdpa_status sd = f ? sdpa_dequantize_q4_0(want, NBLK * QK, y) : sdpa_dequantize_q8_0(want, NBLK * QK, y);
            CHECK(sd == SDPA_OK, "%s dequantize: status %s", dtn(t), sdpa_status_str(sd));
            for (size_t e = 0; e < NBLK * QK; e++)
                if (!CHECK(tl_bits(y[e]) == tl_bits(yr[e]), "%s dequantize[%zu] = %.9g, d q = %.9g", dtn(t), e, y[e],
                           yr[e]))
                    break;
        }
    }
    /* the sign of zero: q4_0 of an all-zero block has d = 0 / -8 = -0 (f16 0x8000), as ggml */
    {
        float z[QK] = {0};
        unsigned char b4[Q4_BYTES], b8[Q8_BYTES];
        CHECK(sdpa_quantize_q4_0(z, QK, b4) == SDPA_OK && b4[0] == 0x00 && b4[1] == 0x80 && b4[2] == 0x88,
              "q4_0 of zeros: scale bytes %02x %02x, first quants 0x%02x; want 00 80 and 0x88", b4[0], b4[1], b4[2]);
        CHECK(sdpa_quantize_q8_0(z, QK, b8) == SDPA_OK && b8[0] == 0 && b8[1] == 0 && b8[2] == 0,
              "q8_0 of zeros: scale bytes %02x %02x, first quant %02x; want 00 00 00", b8[0], b8[1], b8[2]);
    }
    /* a block so small that 1 / d overflows float (max |x| below 127 / FLT_MAX, 8 / FLT_MAX):
       accepted, and the scale is 0 in f16, so every value is 0 (ggml's formula then converts
       x * inf or 0 * inf to int8, undefined in C: the quant bytes are not checked) */
    for (int f = 0; f < 2; f++) {
        float z[QK];
        for (int i = 0; i < QK; i++) z[i] = (i % 2 ? 1e-39f : -3e-40f) * (float)(i % 5);
        unsigned char bq[Q8_BYTES];
        float yz[QK];
        const sdpa_status st = f ? sdpa_quantize_q4_0(z, QK, bq) : sdpa_quantize_q8_0(z, QK, bq);
        bool zero = st == SDPA_OK && (f ? sdpa_dequantize_q4_0(bq, QK, yz) : sdpa_dequantize_q8_0(bq, QK, yz)) == SDPA_OK;
        for (int i = 0; i < QK && zero; i++) zero = yz[i] == 0.0f;
        CHECK(st == SDPA_OK && zero && (bq[0] | (bq[1] & 0x7f)) == 0,
              "%s of subnormal inputs: status %s, scale bytes %02x %02x, want accepted with scale +-0", f ? "q4_0" : "q8_0",
              sdpa_status_str(st), bq[0], bq[1]);
    }
    /* dequantize random bytes (any finite scale, any quants) exactly; a non-finite scale gives
       non-finite values */
    for (int f = 0; f < 2; f++) {
        const sdpa_dtype t = f ? Q4 : Q8;
        const size_t bb = ref_block_bytes(t);
        for (size_t b = 0; b < NBLK; b++) {
            for (size_t e = 0; e < bb; e++) want[b * bb + e] = (unsigned char)tl_next(&r);
            if ((want[b * bb + 1] & 0x7c) == 0x7c) want[b * bb + 1] ^= 0x04; /* finite */
        }
        want[5 * bb + 1] = 0x7c, want[5 * bb] = 0;        /* +inf */
        want[6 * bb + 1] = 0xfe, want[6 * bb] = 0x01;     /* NaN */
        for (size_t b = 0; b < NBLK; b++) ref_deq(t, want + b * bb, yr + b * QK);
        const sdpa_status sd = f ? sdpa_dequantize_q4_0(want, NBLK * QK, y) : sdpa_dequantize_q8_0(want, NBLK * QK, y);
        CHECK(sd == SDPA_OK, "%s dequantize of random bytes: status %s", dtn(t), sdpa_status_str(sd));
        for (size_t e = 0; e < NBLK * QK; e++) {
            const bool nonfinite_scale = e / QK == 5 || e / QK == 6;
            if (nonfinite_scale) {
                if (!CHECK(!isfinite(y[e]), "%s dequantize with a non-finite scale: y[%zu] = %g", dtn(t), e, y[e])) break;
            } else if (!CHECK(tl_bits(y[e]) == tl_bits(yr[e]), "%s dequantize of random bytes: y[%zu] = %.9g, d q = %.9g",
                              dtn(t), e, y[e], yr[e])) {
                break;
            }
        }
    }
    /* refusals: nothing written */
    for (int f = 0; f < 2; f++) {
        const sdpa_dtype t = f ? Q4 : Q8;
        sdpa_status (*quant)(const float *, size_t, void *) = f ? sdpa_quantize_q4_0 : sdpa_quantize_q8_0;
        sdpa_status (*deq)(const void *, size_t, float *) = f ? sdpa_dequantize_q4_0 : sdpa_dequantize_q8_0;
        for (size_t e = 0; e < 4 * QK; e++) x[e] = tl_uniform(&r, -1.0f, 1.0f);
        const struct {
            const char *why;
            size_t      at;
            float       val;
            size_t      n;
        } rq[] = {{"NaN in the second block", QK + 3, NAN, 4 * QK},
                  {"+inf in the last block", 4 * QK - 1, INFINITY, 4 * QK},
                  {"-inf in the first block", 0, -INFINITY, 4 * QK},
                  {"a scale over the f16 range (q8_0: 65520 * 127)", 2 * QK + 7, 8321040.0f, 4 * QK},
                  {"a scale over the f16 range (q4_0: 65520 * 8)", 3 * QK, -524160.0f, 4 * QK},
                  {"a huge finite value", QK, 3e38f, 4 * QK},
                  {"n = 33", 0, 0.5f, 33},
                  {"n = 16", 0, 0.5f, 16}};
        for (size_t i = 0; i < sizeof rq / sizeof rq[0]; i++) {
            /* the q8_0 threshold is inside q4_0's range and the other way round: each only for its own */
            if ((strstr(rq[i].why, "q8_0") && f) || (strstr(rq[i].why, "q4_0") && !f)) continue;
            const float keep = x[rq[i].at];
            x[rq[i].at] = rq[i].val;
            memset(got, 0xa5, 4 * Q8_BYTES);
            const sdpa_status st = quant(x, rq[i].n, got);
            size_t wrote = 0;
            for (size_t e = 0; e < 4 * Q8_BYTES; e++) wrote += got[e] != 0xa5;
            CHECK(st == SDPA_ERR_INVALID_ARGUMENT && wrote == 0, "%s quantize, %s: status %s, %zu bytes written",
                  dtn(t), rq[i].why, sdpa_status_str(st), wrote);
            x[rq[i].at] = keep;
        }
        /* just inside the range: accepted, scale 65504 */
        x[QK] = f ? -524152.0f : 8320913.0f;
        CHECK(quant(x, 4 * QK, got) == SDPA_OK && got[ref_block_bytes(t)] == 0xff && got[ref_block_bytes(t) + 1] == 0x7b,
              "%s quantize: a scale rounding down to 65504 must be accepted", dtn(t));
        memset(got, 0xa5, 4 * Q8_BYTES);
        CHECK(quant(NULL, QK, got) == SDPA_ERR_INVALID_ARGUMENT && quant(x, QK, NULL) == SDPA_ERR_INVALID_ARGUMENT,
              "%s quantize: a NULL pointer accepted", dtn(t));
        tl_fill_sentinel(y, 4 * QK);
        CHECK(deq(NULL, QK, y) == SDPA_ERR_INVALID_ARGUMENT && deq(want, QK, NULL) == SDPA_ERR_INVALID_ARGUMENT &&
                  deq(want, 31, y) == SDPA_ERR_INVALID_ARGUMENT && deq(want, QK + 16, y) == SDPA_ERR_INVALID_ARGUMENT,
              "%s dequantize: NULL or a bad n accepted", dtn(t));
        size_t wrote = 0;
        for (size_t e = 0; e < 4 * Q8_BYTES; e++) wrote += got[e] != 0xa5;
        for (size_t e = 0; e < 4 * QK; e++) wrote += !tl_is_sentinel(y[e]);
        CHECK(wrote == 0, "%s: refused conversions wrote %zu elements", dtn(t), wrote);
    }
    free(x), free(y), free(yr), free(got), free(want);
    tl_end();
}

/* ------------------------------------------------------------------------------------------ */
static void run_test(const char *name, tl_impl_fn fn) { tl_for_each_impl_worst(name, fn, &g_worst); }

int main(void)
{
    tl_header("q8_0/q4_0 K and V (exact and fast q8 scores) against float64 attention, and the conversions");
    if (!tl_pools_create(g_pool, 2, 2, 17)) return 1;
    t_convert();
    run_test("quant: K only, V only, both; prefill, decode, GQA, head dims", t_types);
    run_test("quant: ragged and paged (pages of 16 to 128 keys)", t_ragged);
    run_test("quant: window, mask, softcap, alibi, sinks, lse", t_variants);
    run_test("quant: q8_scores within the stated bound", t_fast);
    tl_for_each_impl("quant: bad block layouts and q8_scores refused", t_bad);
    for (size_t t = 0; t < 2; t++) bench_pool_destroy(g_pool[t]);
    return tl_finish();
}
