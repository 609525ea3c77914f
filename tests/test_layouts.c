/* test_layouts.c -- ragged (padded, packed) and paged K/V, and sdpa_merge, on every implementation
 * against a float64 oracle */
#include "problem.h"

#include "../dispatch/internal.h" /* sdpa_kernels.paged_rows */

/*
 * The serving layouts of sdpa_params (issue #15), checked on every implementation of the
 * registry against the float64 oracle (attn.h), from the contract in sdpa.h. A problem
 * (problem.h, shared with test_quant.c) is a batch of sequences of their own lengths (lq_b
 * queries, lk_b keys), held as logical data [b][head][token][dim] (the values as stored: f16/bf16
 * K and V converted exactly); the call sees them through one of the physical forms:
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

/* ------------------------------------------------------------------------------------------ */
/* The cases                                                                                    */
/* ------------------------------------------------------------------------------------------ */
static size_t sz(size_t native, size_t sampled) { return tl_sample() > 1 ? sampled : native; }

/* A case of B sequences, K and V of type t, an f16 mask when one is set. */
static qcase lcase(const char *name, size_t B, size_t qh, size_t kvh, int qf, int kf, size_t page,
                   sdpa_dtype t, bool causal)
{
    qcase c;
    memset(&c, 0, sizeof c);
    c.name = name, c.B = B, c.qh = qh, c.kvh = kvh, c.d = 64, c.qf = qf, c.kf = kf, c.page = page;
    c.kt = c.vt = t, c.causal = causal, c.mt = F16;
    return c;
}

/* Uneven decodes: a sequence of 0 keys, one of 1, long ones split into KV chunks (>= 2048). */
static qcase decodes(int qf, int kf, size_t page, sdpa_dtype t)
{
    qcase c = lcase("ragged decodes", 6, 8, 2, qf, kf, page, t, false);
    static const size_t lk[6] = {1, 100, 0, 3000, 777, 5000};
    for (size_t b = 0; b < 6; b++) c.lq[b] = 1, c.lk[b] = lk[b];
    c.lk[5] = sz(5000, 2600);
    c.lk[3] = sz(3000, 2100);
    return c;
}

/* Ragged prefills, causal: a sequence of 0 queries, more queries than keys, a long one. */
static qcase prefills(int qf, int kf, size_t page, sdpa_dtype t)
{
    qcase c = lcase("ragged prefills", 4, 4, 2, qf, kf, page, t, true);
    static const size_t lq[4] = {7, 0, 33, 64}, lk[4] = {7, 50, 20, 130};
    for (size_t b = 0; b < 4; b++) c.lq[b] = lq[b], c.lk[b] = lk[b];
    return c;
}

static void t_padded(const sdpa_impl *impl)
{
    qcase a = decodes(Q_PADDED, KV_PADDED, 0, F16);
    qprob_case(impl, &a, 11);
    qcase b = prefills(Q_PADDED, KV_PADDED, 0, F32);
    qprob_case(impl, &b, 12);
    qcase c = prefills(Q_EACH, KV_PADDED, 0, BF16); /* every sequence q_len queries */
    for (size_t s = 0; s < c.B; s++) c.lq[s] = 64;
    c.causal = false;
    qprob_case(impl, &c, 13);
}

static void t_packed(const sdpa_impl *impl)
{
    qcase a = decodes(Q_PACKED, KV_PACKED, 0, F16);
    qprob_case(impl, &a, 21);
    qcase b = prefills(Q_PACKED, KV_PACKED, 0, F32);
    qprob_case(impl, &b, 22);
    qcase c = prefills(Q_PADDED, KV_PACKED, 0, BF16); /* the forms mixed */
    qprob_case(impl, &c, 23);
    qcase d = prefills(Q_PACKED, KV_PADDED, 0, F16);
    d.window = 9;
    qprob_case(impl, &d, 24);
}

/* vLLM's chunked prefill: one sequence prefilling 512 queries beside 15 decodes. */
static void t_chunked_prefill(const sdpa_impl *impl)
{
    qcase c =
        lcase("chunked prefill beside 15 decodes", 16, 4, 1, Q_PACKED, KV_PADDED, 0, F16, true);
    c.lq[0] = sz(512, 96);
    c.lk[0] = c.lq[0] + sz(88, 40);
    for (size_t s = 1; s < 16; s++) c.lq[s] = 1, c.lk[s] = 1 + (s * 397) % sz(4200, 1200);
    qprob_case(impl, &c, 31);
    c.kf = KV_PAGED, c.page = 16;
    qprob_case(impl, &c, 32);
}

static void t_paged(const sdpa_impl *impl)
{
    static const size_t pages[] = {1, 16, 32, 256};
    static const sdpa_dtype types[] = {F32, F16, BF16, F16};
    for (size_t i = 0; i < 4; i++) {
        qcase a = decodes(Q_PADDED, KV_PAGED, pages[i], types[i]);
        if (pages[i] == 1 && tl_sample() > 1) a.lk[5] = 700, a.lk[3] = 300; /* one unit per key */
        qprob_case(impl, &a, 41 + i);
        qcase b = prefills(i % 2 ? Q_PACKED : Q_PADDED, KV_PAGED, pages[i], types[3 - i]);
        qprob_case(impl, &b, 45 + i);
    }
    /* more query rows than a decode unit takes, so the prefill paths page too */
    qcase c =
        lcase("paged prefill, 8 heads per KV head", 2, 16, 2, Q_PADDED, KV_PAGED, 16, F16, true);
    c.lq[0] = 40, c.lq[1] = 17, c.lk[0] = 300, c.lk[1] = 17;
    qprob_case(impl, &c, 49);
    c.page = 128;
    qprob_case(impl, &c, 50);
}

/* Decodes of 1 to 4 query rows per KV head over several full key blocks, on 16- and 128-key
   pages: the decode paths that read K and V in turns, page by page, scoring the next block's
   page at the same offset ahead of its softmax. */
static void t_paged_turns(const sdpa_impl *impl)
{
    for (size_t i = 0; i < 8; i++) {
        const size_t per = 1 + i / 2, page = i % 2 ? 128 : 16;
        qcase c = lcase("paged decodes, 1-4 rows per KV head", 2, 2 * per, 2, Q_PADDED, KV_PAGED,
                        page, i % 4 < 2 ? F16 : BF16, false);
        c.lq[0] = c.lq[1] = 1;
        c.lk[0] = sz(1700, 1100), c.lk[1] = sz(2600, 1300);
        qprob_case(impl, &c, 171 + i);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Pages of 16 keys: the contiguous call's bits                                                */
/* ------------------------------------------------------------------------------------------ */
/* A kernel that walks pages itself (sdpa_kernels.paged_rows) reads each key where the page
   table puts it and computes on the same blocks as over contiguous K/V, since every block size
   is a multiple of 16: a paged call gives, bit for bit, the same call's o and lse over the same
   keys laid out contiguously. Pages are shuffled; the last page's rows past the keys hold NaN
   (a block format's: a NaN scale). Block formats (those without a minimum) take decode units,
   which read them in place through the pages. */
typedef struct pbcase {
    size_t lq, hq, hkv, lk, d;
    sdpa_dtype t;
    bool causal;
} pbcase;

static void paged_bits_case(const sdpa_impl *impl, const pbcase *c, uint64_t seed)
{
    enum { PS = 16 };
    const size_t lq = c->lq, hq = c->hq, hkv = c->hkv, lk = c->lk, d = c->d;
    const bool qt = quantized(c->t);
    const size_t bb = qt ? ref_block_bytes(c->t) : 0; /* bytes per block of 32 */
    const size_t np = (lk + PS - 1) / PS, es = c->t == F32 ? 4 : 2;
    const size_t row = qt ? d / 32 * bb : d * es;
    const size_t no = hq * lq * d;
    tl_rng r = {seed};
    float *q = tl_xmalloc(no * sizeof(float)), *x = tl_xmalloc(d * sizeof(float));
    tl_fill(&r, q, no, -1, 1);
    unsigned char *k = tl_xmalloc(hkv * lk * row), *v = tl_xmalloc(hkv * lk * row);
    unsigned char *kp = tl_xmalloc(np * hkv * PS * row), *vp = tl_xmalloc(np * hkv * PS * row);
    for (size_t e = 0; qt && e < np * hkv * PS * row; e += bb) /* NaN scales, 0x5a quants */
        for (int a = 0; a < 2; a++) {
            unsigned char *blk = (a ? vp : kp) + e;
            memset(blk, 0x5a, bb);
            blk[0] = 0x00, blk[1] = 0x7e;
        }
    for (size_t e = 0; !qt && e < np * hkv * PS * d; e++) { /* NaN in every row no key fills */
        const float nan = NAN;
        const uint16_t h = c->t == F16 ? 0x7e00 : 0x7fc0;
        memcpy(kp + e * es, es == 4 ? (const void *)&nan : (const void *)&h, es);
        memcpy(vp + e * es, es == 4 ? (const void *)&nan : (const void *)&h, es);
    }
    for (size_t a = 0; qt && a < 2;
         a++) /* block formats: random quants, scales in +-[1/64, 1/16] */
        for (size_t b = 0; b < hkv * lk * row / bb; b++) {
            unsigned char *blk = (a ? v : k) + b * bb;
            for (size_t i = 2; i < bb; i++) blk[i] = (unsigned char)tl_below(&r, 256);
            const float sc =
                (1.0f / 64 + (float)tl_below(&r, 48) / 1024) * (tl_below(&r, 2) ? 1 : -1);
            const uint16_t h = ref_f16(sc);
            memcpy(blk, &h, 2);
        }
    for (size_t a = 0; !qt && a < 2; a++) /* K, then V: rows of uniform values in [-2, 2] */
        for (size_t j = 0; j < hkv * lk; j++) {
            tl_fill(&r, x, d, -2, 2);
            unsigned char *dst = (a ? v : k) + j * row;
            for (size_t i = 0; i < d; i++) {
                uint16_t h = c->t == F16 ? ref_f16(x[i]) : (uint16_t)(tl_bits(x[i]) >> 16);
                memcpy(dst + i * es, es == 4 ? (const void *)&x[i] : (const void *)&h, es);
            }
        }
    int32_t *table = tl_xmalloc(np * sizeof(int32_t));
    for (size_t i = 0; i < np; i++) table[i] = (int32_t)i;
    for (size_t i = np; i > 1; i--) { /* shuffled */
        const size_t jx = tl_below(&r, i);
        const int32_t t = table[i - 1];
        table[i - 1] = table[jx], table[jx] = t;
    }
    for (size_t h = 0; h < hkv; h++)
        for (size_t j = 0; j < lk; j++) {
            const size_t at = (((size_t)table[j / PS] * hkv + h) * PS + j % PS) * row;
            memcpy(kp + at, k + (h * lk + j) * row, row);
            memcpy(vp + at, v + (h * lk + j) * row, row);
        }
    float *o[2], *lse[2];
    sdpa_status st[2];
    for (int paged = 0; paged < 2; paged++) {
        sdpa_params p = tl_params(1, hq, hkv, lq, lk, d);
        p.causal = c->causal;
        o[paged] = tl_xmalloc(no * sizeof(float)), lse[paged] = tl_xmalloc(hq * lq * sizeof(float));
        p.lse = lse[paged];
        const ptrdiff_t kl = paged ? PS : (ptrdiff_t)lk; /* keys per [head] view */
        sdpa_tensor tq = {q, F32, (ptrdiff_t)no, (ptrdiff_t)(lq * d), (ptrdiff_t)d},
                    to = {o[paged], F32, (ptrdiff_t)no, (ptrdiff_t)(lq * d), (ptrdiff_t)d},
                    tk = {paged ? kp : k, c->t, (ptrdiff_t)hkv * kl * (ptrdiff_t)d,
                          kl * (ptrdiff_t)d, (ptrdiff_t)d},
                    tv = {paged ? vp : v, c->t, (ptrdiff_t)hkv * kl * (ptrdiff_t)d,
                          kl * (ptrdiff_t)d, (ptrdiff_t)d};
        if (paged) p.block_table = table, p.page_size = PS, p.max_pages = np, p.n_pages = np;
        st[paged] = sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to);
    }
    CHECK(st[0] == SDPA_OK && st[1] == SDPA_OK,
          "%s %zu/%zu heads, %zu queries, %zu keys: status %s, %s", dtn(c->t), hq, hkv, lq, lk,
          sdpa_status_str(st[0]), sdpa_status_str(st[1]));
    size_t bad = 0, first = 0;
    for (size_t e = 0; e < no; e++)
        if (tl_bits(o[0][e]) != tl_bits(o[1][e]) && bad++ == 0) first = e;
    for (size_t e = 0; e < hq * lq; e++)
        if (tl_bits(lse[0][e]) != tl_bits(lse[1][e]) && bad++ == 0) first = no + e;
    CHECK(bad == 0,
          "%s %zu/%zu heads, %zu queries, %zu keys, D %zu%s: %zu outputs of the paged call differ "
          "from the contiguous call's (first: %s %zu, %.9g against %.9g)",
          dtn(c->t), hq, hkv, lq, lk, d, c->causal ? ", causal" : "", bad, first < no ? "o" : "lse",
          first < no ? first : first - no, first < no ? o[1][first] : lse[1][first - no],
          first < no ? o[0][first] : lse[0][first - no]);
    free(q), free(x), free(k), free(v), free(kp), free(vp), free(table);
    for (int i = 0; i < 2; i++) free(o[i]), free(lse[i]);
}

static void t_paged_bits(const sdpa_impl *impl)
{
    static const pbcase cases[] = {
        {1, 2, 2, 1000, 128, F16, false},      /* one row per KV head (MHA) */
        {1, 8, 2, 2100, 128, F16, false},      /* 4 rows: the interleaved turns */
        {1, 14, 2, 5000, 64, BF16, false},     /* 7 rows, KV chunks */
        {3, 8, 2, 777, 128, BF16, true},       /* 12 rows: a prefill unit */
        {40, 8, 2, 600, 128, F16, true},       /* 160 rows, causal */
        {20, 4, 1, 333, 64, F32, false},       /* f32, a partial last page */
        {1, 8, 2, 2100, 128, Q8, false},       /* q8_0, 4 rows: whole blocks through the pages */
        {1, 2, 2, 1000, 64, SDPA_Q4_0, false}, /* q4_0, one row */
        {1, 14, 2, 1500, 128, Q8, false},      /* q8_0, 7 rows */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        paged_bits_case(impl, &cases[i], 181 + i);
}

static const char *walks_no_pages(const sdpa_impl *impl)
{
    return impl->k->paged_rows == SIZE_MAX
               ? NULL
               : "does not walk pages for every unit (the driver gathers them for some)";
}

static void t_paged_variants(const sdpa_impl *impl)
{
    qcase a = prefills(Q_PACKED, KV_PAGED, 16, F16);
    a.window = 12, a.mask = true, a.softcap = 20.0f, a.alibi = true, a.sinks = true;
    qprob_case(impl, &a, 51);
    qcase b = decodes(Q_PADDED, KV_PAGED, 32, BF16);
    b.window = 700, b.mask = true, b.sinks = true;
    qprob_case(impl, &b, 52);
    qcase c = prefills(Q_PADDED, KV_PACKED, 0, F32);
    c.mask = true, c.alibi = true, c.softcap = 5.0f;
    qprob_case(impl, &c, 53);
    /* decodes of 4 and 7 rows per KV head on 16-key pages: a variant's P·V over a whole block
       of pages */
    qcase d = decodes(Q_PADDED, KV_PAGED, 16, F16);
    d.window = 900, d.mask = true, d.softcap = 30.0f;
    qprob_case(impl, &d, 54);
    qcase e = decodes(Q_PADDED, KV_PAGED, 16, BF16);
    e.qh = 14, e.alibi = true, e.sinks = true;
    qprob_case(impl, &e, 55);
}

/* ------------------------------------------------------------------------------------------ */
/* sdpa_merge                                                                                   */
/* ------------------------------------------------------------------------------------------ */
enum { MQ = 3, MH = 4, MD = 64, MK = 1000 };

/* The call of one head group over keys [j0, j1) of k and v ([MK][MD] f32), o and lse out. */
static sdpa_status part_call(const sdpa_impl *impl, const float *q, const float *k, const float *v,
                             size_t j0, size_t j1, float *o, float *lse, const float *sinks)
{
    sdpa_params p = tl_params(1, MH, 1, MQ, j1 - j0, MD);
    p.lse = lse, p.sinks = sinks;
    sdpa_tensor tq = {(void *)q, F32, MH * MQ * MD, MQ * MD, MD},
                to = {o, F32, MH * MQ * MD, MQ * MD, MD};
    sdpa_tensor tk = {(void *)(k + j0 * MD), F32, MK * MD, MK * MD, MD},
                tv = {(void *)(v + j0 * MD), F32, MK * MD, MK * MD, MD};
    return sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to);
}

static void t_merge(const sdpa_impl *impl)
{
    enum { ROWS = MH * MQ };
    tl_rng r = {61};
    float *q = tl_xmalloc(ROWS * MD * sizeof(float)), *k = tl_xmalloc(MK * MD * sizeof(float)),
          *v = tl_xmalloc(MK * MD * sizeof(float));
    tl_fill(&r, q, ROWS * MD, -1, 1), tl_fill(&r, k, MK * MD, -1, 1),
        tl_fill(&r, v, MK * MD, -1, 1);
    float ow[ROWS * MD], lw[ROWS], po[4][ROWS * MD], pl[4][ROWS], om[ROWS * MD], lm[ROWS];
    float sinks[MH] = {0.5f, -INFINITY, 2.0f, -1.0f};
    CHECK(part_call(impl, q, k, v, 0, MK, ow, lw, NULL) == SDPA_OK, "the whole call failed");
    /* parts: one key, 399 keys, 600 keys, and an empty part (nothing seen: zeros and -inf) */
    const size_t cut[4][2] = {{0, 1}, {1, 400}, {400, MK}, {0, 0}};
    for (size_t i = 0; i < 3; i++)
        CHECK(part_call(impl, q, k, v, cut[i][0], cut[i][1], po[i], pl[i], NULL) == SDPA_OK,
              "part %zu failed", i);
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
        if (!CHECK(d <= 2e-6, "merged o[%zu] = %.9g, the unsplit call %.9g", e, om[e], ow[e]))
            break;
    }
    for (size_t e = 0; e < ROWS; e++)
        if (!CHECK(fabs(lm[e] - lw[e]) <= 2e-6 * (1 + fabs(lw[e])),
                   "merged lse[%zu] = %.9g, unsplit %.9g", e, lm[e], lw[e]))
            break;
    /* against float64: the whole attention of each row, from the merged result */
    sdpa_params p = {
        .batch = 1, .q_heads = MH, .kv_heads = 1, .q_len = MQ, .kv_len = MK, .head_dim = MD};
    tview tq, tk, tv, to;
    tview_layout(&tq, 1, MH, MQ, MD, F32, L_DENSE, 0),
        tview_layout(&tk, 1, 1, MK, MD, F32, L_DENSE, 0);
    tview_layout(&tv, 1, 1, MK, MD, F32, L_DENSE, 0),
        tview_layout(&to, 1, MH, MQ, MD, F32, L_DENSE, 0);
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
        if (!CHECK(fabs(ip[e] - om[e]) <= 2e-6, "in place: o[%zu] = %.9g, out of place %.9g", e,
                   ip[e], om[e]))
            break;

    /* sinks: parts without them, then the sink as a part of o = 0 and lse = sink */
    float os[ROWS * MD], ls[ROWS], zo[ROWS * MD], zl[ROWS];
    CHECK(part_call(impl, q, k, v, 0, MK, os, ls, sinks) == SDPA_OK, "the call with sinks failed");
    memset(zo, 0, sizeof zo);
    for (size_t e = 0; e < ROWS; e++) zl[e] = sinks[e / MQ];
    const float *ops3[4] = {po[0], po[1], po[2], zo}, *lps3[4] = {pl[0], pl[1], pl[2], zl};
    CHECK(sdpa_merge(4, ROWS, MD, ops3, MD, lps3, om, MD, lm) == SDPA_OK,
          "merge with a sink part failed");
    for (size_t e = 0; e < ROWS * MD; e++)
        if (!CHECK(fabs(om[e] - os[e]) <= 2e-6,
                   "sink merged o[%zu] = %.9g, the call with sinks %.9g", e, om[e], os[e]))
            break;
    for (size_t e = 0; e < ROWS; e++)
        CHECK(fabs(lm[e] - ls[e]) <= 2e-6 * (1 + fabs(ls[e])),
              "sink merged lse[%zu] %.9g, the call %.9g", e, lm[e], ls[e]);

    /* every part empty: zeros and -inf; a NaN lse: the row NaN, the others untouched by it */
    const float *ope[2] = {po[3], po[3]}, *lpe[2] = {pl[3], pl[3]};
    CHECK(sdpa_merge(2, ROWS, MD, ope, MD, lpe, om, MD, lm) == SDPA_OK, "empty merge failed");
    for (size_t e = 0; e < ROWS * MD; e++)
        if (!CHECK(om[e] == 0.0f, "empty parts: o[%zu] = %g, want 0", e, om[e])) break;
    for (size_t e = 0; e < ROWS; e++)
        CHECK(lm[e] == -INFINITY, "empty parts: lse[%zu] = %g, want -inf", e, lm[e]);
    float nl[ROWS];
    memcpy(nl, pl[1], sizeof nl);
    nl[5] = NAN;
    const float *opn[2] = {po[0], po[1]}, *lpn[2] = {pl[0], nl};
    CHECK(sdpa_merge(2, ROWS, MD, opn, MD, lpn, om, MD, lm) == SDPA_OK, "NaN merge failed");
    CHECK(isnan(lm[5]) && isnan(om[5 * MD]) && isnan(om[5 * MD + MD - 1]),
          "a NaN lse must make its row NaN");
    CHECK(!isnan(lm[4]) && !isnan(om[4 * MD]) && !isnan(lm[6]),
          "a NaN lse must leave the other rows alone");
    free(q), free(k), free(v);
}

static void t_merge_bad(void)
{
    tl_start("layouts: sdpa_merge refuses bad input", "api");
    float a[64], b[64], la[4], lb[4], o[64], l[4];
    memset(a, 0, sizeof a), memset(b, 0, sizeof b), memset(la, 0, sizeof la),
        memset(lb, 0, sizeof lb);
    const float *op[2] = {a, b}, *lp[2] = {la, lb}, *opn[2] = {a, NULL};
    tl_fill_sentinel(o, 64), tl_fill_sentinel(l, 4);
    CHECK(sdpa_merge(0, 4, 16, op, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT,
          "0 parts accepted");
    CHECK(sdpa_merge(2, 0, 16, op, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT,
          "0 rows accepted");
    CHECK(sdpa_merge(2, 4, 0, op, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT, "dv 0 accepted");
    CHECK(sdpa_merge(2, 4, 16, NULL, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT,
          "NULL parts accepted");
    CHECK(sdpa_merge(2, 4, 16, opn, 16, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT,
          "a NULL part accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, NULL, 16, l) == SDPA_ERR_INVALID_ARGUMENT,
          "NULL o accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 8, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT,
          "part stride < dv accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, o, 8, l) == SDPA_ERR_INVALID_ARGUMENT,
          "out stride < dv accepted");
    CHECK(sdpa_merge(2, 1, 16, op, 4, lp, o, 16, l) == SDPA_ERR_INVALID_ARGUMENT,
          "one row, part stride < dv accepted");
    CHECK(sdpa_merge(2, 1, 16, op, 16, lp, o, 0, l) == SDPA_ERR_INVALID_ARGUMENT,
          "one row, out stride 0 accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, b + 8, 16, l) == SDPA_ERR_INVALID_ARGUMENT,
          "o overlapping a part accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, o, 16, (float *)(o + 3)) == SDPA_ERR_INVALID_ARGUMENT,
          "lse overlapping o accepted");
    CHECK(sdpa_merge(2, 4, 16, op, 16, lp, o, 16, lb + 1) == SDPA_ERR_INVALID_ARGUMENT,
          "lse overlapping an lse part accepted");
    CHECK(sdpa_merge(2, 4, 16, op, SIZE_MAX / 2, lp, o, 16, l) == SDPA_ERR_OVERFLOW,
          "an overflowing stride accepted");
    size_t bad = 0;
    for (size_t e = 0; e < 64; e++) bad += !tl_is_sentinel(o[e]);
    for (size_t e = 0; e < 4; e++) bad += !tl_is_sentinel(l[e]);
    CHECK(bad == 0, "%zu output elements written by refused merges", bad);
    tl_end();
}

/* ------------------------------------------------------------------------------------------ */
/* Bad layouts: refused with a status and a message, nothing written                            */
/* ------------------------------------------------------------------------------------------ */
/* The call without refilling o and lse first: what refused calls write accumulates. */
static sdpa_status run_as_is(qprob *pr, const sdpa_impl *impl)
{
    return tl_forward_on(impl, &pr->p, NULL, &pr->tq, &pr->tk, &pr->tv, &pr->to);
}

static void t_bad(const sdpa_impl *impl)
{
    qcase c = prefills(Q_PADDED, KV_PAGED, 16, F16);
    qprob pr;
    qprob_init(&pr, &c, 71);
    const sdpa_params good = pr.p;
    size_t big_lens[4] = {7, 0, 33, 65};
    size_t cu_bad0[5] = {1, 8, 8, 41, 105}, cu_dec[5] = {0, 8, 7, 40, 104},
           cu_long[5] = {0, 7, 7, 40, 105};
    size_t cu_ok[5] = {0, 7, 7, 40, 104};
    int32_t *tab = pr.table;
    const size_t mp = pr.max_pages;
    sdpa_params bad[16];
    const char *why[16];
    sdpa_status want[16];
    size_t n = 0;
#define BAD(w, st, stmt)                                                                           \
    do {                                                                                           \
        bad[n] = good;                                                                             \
        sdpa_params *p = &bad[n];                                                                  \
        stmt;                                                                                      \
        why[n] = w, want[n++] = st;                                                                \
    } while (0)
    BAD("q_lens beyond q_len", SDPA_ERR_INVALID_ARGUMENT, p->q_lens = big_lens);
    BAD("kv_lens beyond kv_len", SDPA_ERR_INVALID_ARGUMENT,
        (p->kv_lens = big_lens, p->kv_len = 64));
    BAD("q_lens and cu_q both", SDPA_ERR_INVALID_ARGUMENT, p->cu_q = cu_ok);
    BAD("cu_q not from 0", SDPA_ERR_INVALID_ARGUMENT, (p->q_lens = NULL, p->cu_q = cu_bad0));
    BAD("cu_q decreasing", SDPA_ERR_INVALID_ARGUMENT, (p->q_lens = NULL, p->cu_q = cu_dec));
    BAD("cu_q sequence longer than q_len", SDPA_ERR_INVALID_ARGUMENT,
        (p->q_lens = NULL, p->cu_q = cu_long));
    BAD("kv_lens and cu_kv both", SDPA_ERR_INVALID_ARGUMENT,
        (p->block_table = NULL, p->cu_kv = cu_ok));
    BAD("cu_kv with a block table", SDPA_ERR_INVALID_ARGUMENT,
        (p->kv_lens = NULL, p->cu_kv = cu_ok));
    BAD("page_size 0", SDPA_ERR_INVALID_ARGUMENT, p->page_size = 0);
    BAD("max_pages 0", SDPA_ERR_INVALID_ARGUMENT, p->max_pages = 0);
    BAD("n_pages 0", SDPA_ERR_INVALID_ARGUMENT, p->n_pages = 0);
    BAD("max_pages x page_size shorter than a sequence", SDPA_ERR_INVALID_ARGUMENT,
        p->page_size = 4);
    BAD("max_pages x page_size overflows", SDPA_ERR_OVERFLOW,
        (p->max_pages = SIZE_MAX / 8, p->page_size = 16));
#undef BAD
    float *o_before = tl_xmalloc((pr.on + 2 * MARGIN) * sizeof(float));
    memcpy(o_before, pr.obuf, (pr.on + 2 * MARGIN) * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        char msg[256] = "";
        pr.p = bad[i];
        const sdpa_status st = run_as_is(&pr, impl);
        const sdpa_status sv =
            sdpa_validate(&pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, msg, sizeof msg);
        CHECK(st == want[i] && sv == want[i] && msg[0] && strcmp(msg, "ok") != 0,
              "%s: status %s (validate %s, \"%s\"), want %s", why[i], sdpa_status_str(st),
              sdpa_status_str(sv), msg, sdpa_status_str(want[i]));
    }
    /* block-table entries out of range, in a page a sequence uses */
    const size_t used = 3 * mp + 1; /* sequence 3 (130 keys), its second page */
    const int32_t keep = tab[used];
    const int32_t vals[3] = {-1, (int32_t)pr.n_pages, INT32_MIN};
    for (size_t i = 0; i < 3; i++) {
        char msg[256] = "";
        pr.p = good;
        tab[used] = vals[i];
        const sdpa_status st = run_as_is(&pr, impl);
        sdpa_validate(&pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, msg, sizeof msg);
        CHECK(st == SDPA_ERR_INVALID_ARGUMENT && strstr(msg, "block_table"),
              "entry %d: status %s (\"%s\")", (int)vals[i], sdpa_status_str(st), msg);
    }
    tab[used] = keep;
    CHECK(memcmp(o_before, pr.obuf, (pr.on + 2 * MARGIN) * sizeof(float)) == 0,
          "a refused call wrote o");
    size_t bad_l = 0;
    for (size_t e = 0; e < pr.lsen + 2 * MARGIN; e++) bad_l += !tl_is_sentinel(pr.lse[e]);
    CHECK(bad_l == 0, "a refused call wrote %zu lse entries", bad_l);
    /* the good call still runs: out-of-range entries in unused pages are never checked */
    pr.p = good;
    CHECK(run_as_is(&pr, impl) == SDPA_OK,
          "the valid paged call (garbage in unused table entries) refused");
    free(o_before);
    qprob_free(&pr);
}

/* ------------------------------------------------------------------------------------------ */
static void run_test(const char *name, tl_impl_fn fn)
{
    tl_for_each_impl_worst(name, fn, &g_worst);
}

int main(void)
{
    tl_header("ragged (padded, packed) and paged K/V, and sdpa_merge, against float64 attention");
    if (!tl_pools_create(g_pool, 2, 2, 9)) return 1;
    run_test("layouts: padded", t_padded);
    run_test("layouts: packed and mixed", t_packed);
    run_test("layouts: chunked prefill beside decodes", t_chunked_prefill);
    run_test("layouts: paged, page sizes 1 16 32 256", t_paged);
    run_test("layouts: paged with ragged and variants", t_paged_variants);
    run_test("layouts: paged decodes of 1-4 rows per KV head, in turns", t_paged_turns);
    tl_for_each_impl_unless("layouts: pages of 16 keys give the contiguous call's bits",
                            t_paged_bits, walks_no_pages);
    tl_for_each_impl("layouts: sdpa_merge against the unsplit call", t_merge);
    tl_for_each_impl("layouts: bad layouts refused", t_bad);
    t_merge_bad();
    return tl_pools_finish(g_pool, 2);
}
