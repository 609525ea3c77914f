/* test_quant.c -- block-format K and V, q8 scores, conversions: every implementation vs float64 */
#include "problem.h"

/* white-box: each implementation's own dequantizer (sdpa_kernels.dequant) */
#include "../dispatch/internal.h"

/*
 * The block storage types of sdpa.h (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl: ggml's block types
 * of those names) checked on every implementation of the registry against code written here
 * from the published formulas, never the library's. Every check that takes a block format
 * loops over problem.h's table of them (ref_formats), or takes its types in turn:
 *
 *   - the conversions: sdpa_quantize and the per-type functions must give byte for byte what
 *     ggml's reference quantizers give (problem.h's reference codec, with its own f16
 *     rounding), the dequantizers d n (+ m) exactly, and the refusals write nothing; and a
 *     fixed table of blocks whose bytes and values are written out (quant_bytes.h, derived by
 *     tests/quant_bytes.py from the formulas alone);
 *   - each implementation's own dequantizer (the driver's staged copies), where it has one: rows
 *     of every block format (negative and -0 scales and minimums, every stored value, every
 *     quant 0) bit for bit against ggml's reference formulas in f32, the sign of zero too;
 *   - exact mode (q8_scores 0): every stored value enters as its exact f32 value, so the
 *     output must meet the float64 oracle computed on the dequantized K and V within the
 *     tolerance the f16 tests use (problem.h: attn_row_tol times sum_j w_j |v_jc| / l, plus
 *     what the modifiers add, 2 ds (sum w|v| / l + |o|) with ds = 3 u (|softcap(s)| + |bias| +
 *     |mask|) + the softcap's own error);
 *   - fast mode (q8_scores 1): sdpa.h's bound. With x = scale q (the row), every score of the
 *     row is off by at most D_row = max_j sum_b (max_{c in b} |x_c| / 254) sum_{c in b} |k_jc|
 *     (over the keys the row sees) plus float rounding, taken here as (D / 32 + 8) u (A + D_row
 *     + 2 R) (the f32 scale of each block, its products with d_k and m_k, the sum over blocks,
 *     x itself; A = max_j sum_c |x_c k_jc|, R = max_j sum_b sum_{c in b} |x_c| max_{c in b}
 *     |k_jc| for K with a minimum, whose terms d_k dot and m_k sum q may each exceed the score
 *     by far); the output is then within (e^(2 D_row) - 1) max |v| of the exact one, on top of
 *     the exact-mode tolerance, and lse within D_row of it. That bound is a worst case, which a
 *     coarser quantization (a 7-bit grid, truncation) still meets on random data, so the output
 *     is also held to a float64 model of the stated algorithm: d_b = max_{c in b} |x_c| / 127,
 *     q_c = round(x_c / d_b) clamped to +-127, score sum_b d_b (d_k dot(q, n) + m_k sum q) =
 *     sum_c d_b q_c (d_k n_c + m_k), K's d n + m unrounded, within the exact-mode tolerance
 *     plus (e^(2 T_row) - 1) max |v|, where T_row = max_j sum over the elements whose x_c / d_b
 *     lies within 2^-13 of a rounding tie (where f32 rounding of scale q, d_b and the quotient
 *     may legitimately pick the other integer) of d_b |k_jc|, plus the float rounding above.
 *     Fast mode must also differ from exact mode somewhere (q is not on the int8 grid), and
 *     both give the same bits on 1, 2 and 3 threads;
 *   - refusals: every block format with a dim or a stride not a multiple of 32, as q or o,
 *     q8_scores on a K that is not a block format or a value other than 0 and 1: a status, a
 *     message from sdpa_validate, and o and lse untouched.
 *
 * The forward problems are batches of sequences (lq_b queries, lk_b keys) in one of the forms
 * of sdpa_params: queries each / padded / packed; keys each (dense, strided token-major,
 * reversed), padded, packed or paged (pages of 16 and 32 keys, which the library stages, 64
 * and 128; shuffled, or in order so that consecutive pages form runs). Storage no sequence
 * owns holds NaN (a block with a NaN scale), o and lse are sentinel-filled and everything no
 * row owns must stay so. Under SDPA_TEST_SAMPLE the loops over types and page sizes run every
 * Nth case.
 */

/* ------------------------------------------------------------------------------------------ */
/* The forward cases                                                                            */
/* ------------------------------------------------------------------------------------------ */
static qcase mk(const char *name, size_t B, size_t qh, size_t kvh, size_t d, size_t dv, size_t lq,
                size_t lk, sdpa_dtype kt, sdpa_dtype vt)
{
    qcase c;
    memset(&c, 0, sizeof c);
    c.name = name, c.B = B, c.qh = qh, c.kvh = kvh, c.d = d, c.dv = dv, c.kt = kt, c.vt = vt;
    for (size_t b = 0; b < B; b++) c.lq[b] = lq, c.lk[b] = lk;
    return c;
}

/* Block format i of the table, cyclically: the cases that take one run over all of them. */
static sdpa_dtype blk(size_t i) { return ref_formats[i % N_FORMATS].t; }

/* K and V type pairs: every block format as K and as V, beside f32, f16 and bf16, with an
   older format and with another new one; in an order in which the sampled runs
   (SDPA_TEST_SAMPLE 2 or 4: prefills of some pairs, decodes of others) still meet each one. */
static const struct {
    sdpa_dtype k, v;
} g_types[] = {{Q41, Q50}, {IQ4, F16}, {F32, Q51}, {F32, Q8},   {Q51, Q41}, {Q50, IQ4}, {F16, Q4},
               {IQ4, Q8},  {Q4, Q51},  {BF16, Q8}, {Q41, BF16}, {Q50, F32}, {F16, IQ4}, {Q8, Q41}};
enum { N_TYPES = sizeof g_types / sizeof g_types[0] };

/* head_dim / v_dim pairs, 32 to 256, odd multiples of 32 among them */
static const size_t g_dims[][2] = {{32, 32},   {96, 96},   {64, 64},   {160, 160},
                                   {128, 128}, {224, 224}, {256, 256}, {64, 32},
                                   {32, 64},   {96, 160},  {224, 64}};
enum { N_DIMS = sizeof g_dims / sizeof g_dims[0] };

/* K only, V only and both in a block format, over head dims, prefill and decode, GQA, dense,
   strided and reversed K/V. */
static void t_types(const sdpa_impl *impl)
{
    for (size_t i = 0; i < N_TYPES; i++) {
        const size_t *dm = g_dims[i % N_DIMS];
        const bool big = dm[0] + dm[1] > 256; /* fewer rows for the large head dims */
        const size_t lq = big ? 24 : i % 3 == 2 ? 70 : 40;
        qcase a =
            mk("prefill", 1, big ? 4 : 8, 2, dm[0], dm[1], lq, 70, g_types[i].k, g_types[i].v);
        a.causal = i % 2 == 0;
        a.kf = (int)(i % 3); /* dense, strided, reversed */
        if (!tl_sampled_out(i)) qprob_case(impl, &a, 100 + i);
        const size_t *dn = g_dims[(i + 4) % N_DIMS];
        qcase b = mk("decode", dn[0] + dn[1] > 256 ? 1 : 2, 8, 2, dn[0], dn[1], 1 + i % 4,
                     120 + 31 * (i % 11), g_types[i].k, g_types[i].v);
        b.causal = i % 4 != 0;
        b.kf = (int)((i + 1) % 3);
        if (!tl_sampled_out(i + 1)) qprob_case(impl, &b, 200 + i);
    }
    /* a long decode: split into KV chunks and merged; every block format as K or as V */
    for (size_t s = 0; s < N_FORMATS / 2; s++) {
        if (tl_sampled_out(s)) continue;
        qcase c = mk("long decode", 1, 8, 2, 128, 128, 1, 2100, blk(s), blk(s + N_FORMATS / 2));
        if (s % 2) c.kf = KV_REVERSED, c.dv = 64, c.lq[0] = 3, c.causal = true;
        qprob_case(impl, &c, 300 + s);
    }
    /* 1, 2 and 3 query rows per KV head (the widest score tiles of the block-format decode:
       8, 4 and 2 keys on AVX2, 16, 8 and 4 on AVX-512), over key counts no tile width divides,
       so that the last tile of a block stores only some of its keys; K of a block format, then
       f16 K beside block-format V */
    for (size_t g = 1; g <= 3; g++) {
        qcase e = mk("decode, 1-3 rows a KV head", 1, 2 * g, 2, 64, 64, 1, 61 + 16 * g, blk(2 * g),
                     blk(2 * g + 1));
        qprob_case(impl, &e, 320 + g);
        e.kt = F16, e.lk[0] = 333;
        qprob_case(impl, &e, 324 + g);
    }
    /* larger values (scores of several units, weights far from uniform), and values far from
       0 (the minimum of q4_1 and q5_1 carries them) */
    for (size_t s = 0; s < N_FORMATS; s++) {
        if (tl_sampled_out(s + 1)) continue;
        qcase d = mk("prefill, wide values", 1, 4, 4, 64, 64, 40, 70, blk(s + 1), blk(s + 3));
        d.krange = 4.0f, d.causal = true;
        if (s % 2) d.krange = 0.5f, d.kshift = s % 4 == 1 ? 6.0f : -3.0f;
        qprob_case(impl, &d, 310 + s);
    }
}

/* Ragged: padded and packed sequences; paged K/V with pages of 16, 32, 64 and 128 keys,
   shuffled or in order. */
static void t_ragged(const sdpa_impl *impl)
{
    qcase a = mk("ragged decodes", 4, 8, 2, 64, 64, 1, 0, Q8, Q4);
    const size_t lka[4] = {1, 100, 0, 700};
    for (size_t b = 0; b < 4; b++) a.lk[b] = lka[b];
    a.qf = Q_PADDED, a.kf = KV_PADDED;
    qprob_case(impl, &a, 400);
    a.kt = Q41, a.vt = IQ4, a.d = 96, a.dv = 160;
    qprob_case(impl, &a, 405);
    qcase b = mk("ragged prefills", 3, 4, 2, 128, 64, 0, 0, Q50, Q51);
    const size_t lqb[3] = {7, 0, 40}, lkb[3] = {7, 50, 70};
    for (size_t s = 0; s < 3; s++) b.lq[s] = lqb[s], b.lk[s] = lkb[s];
    b.qf = Q_PADDED, b.kf = KV_PADDED, b.causal = true;
    qprob_case(impl, &b, 401);
    b.qf = Q_PACKED, b.kf = KV_PACKED, b.kt = IQ4, b.vt = F16, b.d = 64, b.dv = 32;
    qprob_case(impl, &b, 402);
    b.qf = Q_PADDED, b.kf = KV_PACKED, b.kt = F32, b.vt = Q41, b.d = 32, b.dv = 32,
    b.causal = false;
    qprob_case(impl, &b, 403);
    a.qf = Q_PACKED, a.kf = KV_PACKED, a.kt = Q51, a.vt = Q50, a.d = 32, a.dv = 64;
    qprob_case(impl, &a, 404);

    /* per page size: decodes and prefills, K and V of types that go round the formats */
    static const size_t pages[4] = {16, 32, 64, 128};
    static const sdpa_dtype pk[4] = {Q8, F16, Q41, IQ4}, pv[4] = {Q4, Q50, F32, Q51};
    static const sdpa_dtype qk[4] = {Q51, Q4, IQ4, Q50}, qv[4] = {Q41, F32, Q8, Q4};
    for (size_t i = 0; i < 4; i++) {
        qcase p = a;
        p.name = "paged decodes";
        p.qf = Q_PADDED, p.kf = KV_PAGED, p.page = pages[i], p.kt = pk[i], p.vt = pv[i];
        p.d = g_dims[i][0], p.dv = g_dims[i][1];
        if (!tl_sampled_out(i)) qprob_case(impl, &p, 410 + i);
        qcase q = b;
        q.name = "paged prefills";
        q.qf = i == 1 ? Q_PACKED : Q_PADDED, q.kf = KV_PAGED, q.page = pages[i], q.causal = i != 2;
        q.kt = qk[i], q.vt = qv[i];
        q.d = g_dims[6 - i][0], q.dv = g_dims[7 + i % 2][1];
        q.lk[2] = 300; /* 40 queries over 300 keys: many pages */
        if (!tl_sampled_out(i + 1)) qprob_case(impl, &q, 420 + i);
    }
    /* more query rows than a decode unit takes, so the prefill paths page too */
    qcase c = mk("paged prefill, 8 heads per KV head", 2, 16, 2, 64, 64, 0, 0, Q8, Q50);
    c.lq[0] = 40, c.lq[1] = 17, c.lk[0] = 300, c.lk[1] = 17;
    c.qf = Q_PADDED, c.kf = KV_PAGED, c.page = 16, c.causal = true;
    qprob_case(impl, &c, 430);
    c.page = 128, c.kt = IQ4, c.vt = Q4;
    qprob_case(impl, &c, 431);
    /* pages in order: with one KV head consecutive pages are one run of key rows; with two,
       consecutive page numbers whose rows of a head are not adjacent */
    c.kvh = 1, c.inorder = true, c.page = 16, c.kt = Q51, c.vt = Q8;
    qprob_case(impl, &c, 432);
    c.page = 128, c.kt = Q50, c.vt = IQ4;
    qprob_case(impl, &c, 433);
    c.kvh = 2, c.page = 64, c.kt = Q41, c.vt = F16;
    qprob_case(impl, &c, 434);
}

/* The variants with block-format K and V: window, mask (f32 or f16, -inf holes), softcap,
   ALiBi, sinks (lse is written by every case). */
static void t_variants(const sdpa_impl *impl)
{
    for (size_t s = 0; s < N_FORMATS; s++) { /* all of them at once, K of every block format */
        qcase a = mk("all variants", 1, 8, 2, 64, 64, 40, 70, blk(s), blk(s + 1));
        a.causal = true, a.window = 12, a.mask = true, a.softcap = 20.0f, a.alibi = true,
        a.sinks = true;
        a.mt = s % 2 ? F16 : F32;
        qprob_case(impl, &a, 500 + 10 * s);
    }
    qcase b = mk("mask and sinks, decode", 2, 8, 2, 128, 64, 4, 300, Q8, F32);
    b.mask = true, b.sinks = true;
    qprob_case(impl, &b, 501);
    b.kt = Q51, b.vt = Q41, b.d = 160, b.dv = 96;
    qprob_case(impl, &b, 511);
    qcase c = mk("window", 1, 4, 1, 32, 32, 40, 300, Q50, Q8);
    c.window = 50, c.kf = KV_STRIDED;
    qprob_case(impl, &c, 502);
    c.causal = true, c.window = 20, c.kt = F16, c.vt = IQ4;
    qprob_case(impl, &c, 503);
    qcase d = mk("softcap and alibi", 1, 8, 2, 64, 32, 70, 70, Q4, Q4);
    d.softcap = 5.0f, d.alibi = true, d.krange = 4.0f, d.kf = KV_REVERSED;
    qprob_case(impl, &d, 504);
    d.kt = Q41, d.vt = Q51, d.d = 224, d.dv = 64;
    qprob_case(impl, &d, 514);
    qcase e = mk("paged variants", 3, 8, 2, 64, 64, 40, 70, IQ4, Q4);
    e.causal = true, e.window = 12, e.mask = true, e.softcap = 20.0f, e.alibi = true,
    e.sinks = true;
    e.qf = Q_PACKED, e.kf = KV_PAGED, e.page = 16;
    e.lq[1] = 1, e.lk[1] = 130, e.lq[2] = 0, e.lk[2] = 9;
    qprob_case(impl, &e, 505);
    e.page = 128, e.kt = Q50, e.vt = F16, e.d = 128, e.dv = 64;
    qprob_case(impl, &e, 506);
}

/* q8_scores 1 on K of every block format: within sdpa.h's bound and the float64 model,
   different from exact mode, deterministic over threads. */
static void t_fast(const sdpa_impl *impl)
{
    g_worst_fast = 0, g_fast_err = 0, g_worst_model = 0;
    for (size_t s = 0; s < N_FORMATS; s++) {
        const size_t *dm = g_dims[(2 * s) % N_DIMS];
        qcase a =
            mk("fast decode", 2, 8, 2, dm[0], dm[0], 1, 150, blk(s), s % 2 ? F16 : blk(s + 2));
        a.fast = 1;
        if (s % 2) a.lq[0] = a.lq[1] = 4, a.causal = true, a.lk[1] = 257, a.kf = KV_STRIDED;
        qprob_case(impl, &a, 600 + 10 * s);
        qcase b = mk("fast prefill", 1, 8, 2, 64, 64, 40, 70, blk(s), blk(s + 3));
        b.fast = 1, b.causal = true;
        if (s % 3 == 1) b.d = 32, b.lq[0] = 70, b.causal = false, b.kf = KV_REVERSED;
        if (s % 3 == 2) b.d = 128, b.dv = 32, b.krange = 4.0f;
        if (!tl_sampled_out(s)) qprob_case(impl, &b, 602 + 10 * s);
        /* values far from 0 on a small spread: with q4_1 and q5_1 the score is mostly m_k sum q */
        qcase c = mk("fast prefill, values far from 0", 1, 4, 2, 96, 64, 24, 70, blk(s), F32);
        c.fast = 1, c.krange = 0.5f, c.kshift = s % 2 ? -6.0f : 8.0f;
        if (!tl_sampled_out(s + 1)) qprob_case(impl, &c, 604 + 10 * s);
    }
    qcase c = mk("fast paged decodes", 4, 8, 2, 64, 64, 1, 0, Q41, Q8);
    const size_t lkc[4] = {1, 100, 0, 700};
    for (size_t s = 0; s < 4; s++) c.lk[s] = lkc[s];
    c.fast = 1, c.qf = Q_PADDED, c.kf = KV_PAGED, c.page = 32;
    qprob_case(impl, &c, 605);
    c.page = 128, c.kt = Q51, c.qf = Q_PACKED;
    qprob_case(impl, &c, 606);
    qcase d = mk("fast paged prefill, variants", 2, 4, 2, 64, 64, 0, 0, IQ4, Q8);
    d.lq[0] = 40, d.lq[1] = 7, d.lk[0] = 70, d.lk[1] = 7;
    d.fast = 1, d.qf = Q_PADDED, d.kf = KV_PAGED, d.page = 16, d.causal = true, d.mask = true,
    d.sinks = true, d.softcap = 10.0f, d.alibi = true;
    qprob_case(impl, &d, 607);
    d.kf = KV_PACKED, d.qf = Q_PACKED, d.kt = Q50, d.window = 9;
    qprob_case(impl, &d, 608);
    /* every format's quants at the top of their range against query quants near 127: the
       largest partial sums the int8 dot products add (a decode of 4 and of 8 rows a KV head) */
    for (size_t s = 0; s < N_FORMATS; s++) {
        qcase x = mk("fast decode, extreme quants", 1, 8, 2, 128, 128, 1, 300, blk(s), F16);
        x.fast = 1, x.extreme = true;
        if (s % 2) x.qh = 16, x.lk[0] = 77;
        qprob_case(impl, &x, 630 + s);
    }
    qcase e = mk("fast long decode", 1, 8, 2, 128, 128, 2, 2100, Q4, Q8);
    e.fast = 1, e.causal = true;
    qprob_case(impl, &e, 609);
    e.kt = Q41, e.vt = Q51, e.kshift = 3.0f, e.d = e.dv = 64, e.lq[0] = 1;
    qprob_case(impl, &e, 619);
    printf("# %s: fast mode: worst |o_fast - o| / bound %.3f (worst |o_fast - o| %.3g), worst "
           "|o_fast - model| / "
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
    const sdpa_params base = {.batch = 2,
                              .q_heads = 2,
                              .kv_heads = 1,
                              .q_len = 3,
                              .kv_len = LK,
                              .head_dim = 32,
                              .lse = lb + 64};
    typedef struct bad {
        const char *why;
        sdpa_params p;
        sdpa_tensor q, k, v, o;
        sdpa_status want;
    } bad;
    bad cases[96];
    char whys[96][64];
    size_t n = 0;
#define BAD(w, st, stmt)                                                                           \
    do {                                                                                           \
        bad *x = &cases[n++];                                                                      \
        x->why = w, x->want = st, x->p = base;                                                     \
        x->q = (sdpa_tensor){qb, F32, 6 * 128, 3 * 128, 128};                                      \
        x->o = (sdpa_tensor){ob + 64, F32, 6 * 128, 3 * 128, 128};                                 \
        x->k = (sdpa_tensor){kb, Q8, LK * 128, LK * 128, 32};                                      \
        x->v = (sdpa_tensor){vb, Q4, LK * 128, LK * 128, 32};                                      \
        sdpa_params *p = &x->p;                                                                    \
        sdpa_tensor *k = &x->k, *v = &x->v, *q = &x->q, *o = &x->o;                                \
        (void)p, (void)k, (void)v, (void)q, (void)o;                                               \
        stmt;                                                                                      \
    } while (0)
    BAD("head_dim 48, k q8_0", SDPA_ERR_INVALID_ARGUMENT,
        (p->head_dim = 48, k->token_stride = 64, v->token_stride = 64));
    BAD("head_dim 48, v q4_0 (k f32)", SDPA_ERR_INVALID_ARGUMENT,
        (p->head_dim = 48, k->dtype = F32, k->token_stride = 48));
    BAD("v_dim 48, v q4_0", SDPA_ERR_INVALID_ARGUMENT, (p->v_dim = 48, v->token_stride = 64));
    BAD("v_dim 16, v q8_0", SDPA_ERR_INVALID_ARGUMENT, (p->v_dim = 16, v->dtype = Q8));
    BAD("k token_stride 40, head_dim 32", SDPA_ERR_INVALID_ARGUMENT, k->token_stride = 40);
    BAD("v token_stride -40", SDPA_ERR_INVALID_ARGUMENT,
        (v->token_stride = -40, v->data = vb + 4096));
    BAD("k head_stride not a multiple of 32", SDPA_ERR_INVALID_ARGUMENT,
        k->head_stride = LK * 32 + 16);
    BAD("v head_stride not a multiple of 32", SDPA_ERR_INVALID_ARGUMENT,
        v->head_stride = LK * 32 + 48);
    BAD("k batch_stride not a multiple of 32", SDPA_ERR_INVALID_ARGUMENT,
        k->batch_stride = LK * 32 + 8);
    BAD("v batch_stride not a multiple of 32", SDPA_ERR_INVALID_ARGUMENT,
        (p->kv_len = 33, v->batch_stride = 33 * 32 + 1));
    BAD("q8_scores on f16 k", SDPA_ERR_UNSUPPORTED, (p->q8_scores = 1, k->dtype = F16));
    BAD("q8_scores on f32 k (v q4_0)", SDPA_ERR_UNSUPPORTED, (p->q8_scores = 1, k->dtype = F32));
    BAD("q8_scores on bf16 k", SDPA_ERR_UNSUPPORTED, (p->q8_scores = 1, k->dtype = BF16));
    BAD("q8_scores 2", SDPA_ERR_INVALID_ARGUMENT, p->q8_scores = 2);
    BAD("q8_scores -1", SDPA_ERR_INVALID_ARGUMENT, p->q8_scores = -1);
    BAD("q in q8_0", SDPA_ERR_UNSUPPORTED, q->dtype = Q8);
    BAD("o in q4_0", SDPA_ERR_UNSUPPORTED, o->dtype = Q4);
    BAD("k of an unknown dtype", SDPA_ERR_INVALID_ARGUMENT, k->dtype = (sdpa_dtype)99);
    /* every block format: dims and strides not multiples of 32 in K and in V, q8_scores with an
       f16 K beside it, the format for q or o */
    for (size_t f = 0; f < N_FORMATS; f++) {
        const sdpa_dtype t = blk(f);
#define BADT(w, st, stmt)                                                                          \
    do {                                                                                           \
        snprintf(whys[n], sizeof whys[n], w ", %s", dtn(t));                                       \
        BAD(whys[n], st, stmt);                                                                    \
    } while (0)
        BADT("head_dim 48, k", SDPA_ERR_INVALID_ARGUMENT,
             (p->head_dim = 48, k->dtype = t, k->token_stride = 64, v->dtype = F32,
              v->token_stride = 64));
        BADT("head_dim 48 (k f32), v", SDPA_ERR_INVALID_ARGUMENT,
             (p->head_dim = 48, k->dtype = F32, k->token_stride = 48, v->dtype = t,
              v->token_stride = 64));
        BADT("v_dim 96 + 16, v", SDPA_ERR_INVALID_ARGUMENT,
             (p->v_dim = 112, v->dtype = t, v->token_stride = 128));
        BADT("k token_stride 40, head_dim 32, k", SDPA_ERR_INVALID_ARGUMENT,
             (k->dtype = t, k->token_stride = 40));
        BADT("v token_stride -40, v", SDPA_ERR_INVALID_ARGUMENT,
             (v->dtype = t, v->token_stride = -40, v->data = vb + 4096));
        BADT("k head_stride not a multiple of 32, k", SDPA_ERR_INVALID_ARGUMENT,
             (k->dtype = t, k->head_stride = LK * 32 + 16));
        BADT("v batch_stride not a multiple of 32, v", SDPA_ERR_INVALID_ARGUMENT,
             (p->kv_len = 33, v->dtype = t, v->batch_stride = 33 * 32 + 1));
        BADT("q8_scores on f16 k, v", SDPA_ERR_UNSUPPORTED,
             (p->q8_scores = 1, k->dtype = F16, v->dtype = t));
        BADT("q in", SDPA_ERR_UNSUPPORTED, q->dtype = t);
        BADT("o in", SDPA_ERR_UNSUPPORTED, o->dtype = t);
#undef BADT
    }
#undef BAD
    for (size_t i = 0; i < n; i++) {
        bad *x = &cases[i];
        char msg[256] = "";
        size_t ws = 12345;
        const sdpa_status st = sdpa_impl_forward(impl, &x->p, &x->q, &x->k, &x->v, &x->o);
        const sdpa_status sv = sdpa_validate(&x->p, &x->q, &x->k, &x->v, &x->o, msg, sizeof msg);
        const sdpa_status sw =
            sdpa_impl_workspace_size(impl, &x->p, &x->q, &x->k, &x->v, &x->o, &ws);
        CHECK(st == x->want && sv == x->want && sw == x->want && msg[0] && strcmp(msg, "ok") != 0,
              "%s: status %s (validate %s \"%s\", workspace_size %s), want %s", x->why,
              sdpa_status_str(st), sdpa_status_str(sv), msg, sdpa_status_str(sw),
              sdpa_status_str(x->want));
        size_t wrote = 0;
        for (size_t e = 0; e < OUT; e++) wrote += !tl_is_sentinel(ob[e]) + !tl_is_sentinel(lb[e]);
        CHECK(wrote == 0, "%s: the refused call wrote %zu elements of o and lse", x->why, wrote);
        tl_fill_sentinel(ob, OUT), tl_fill_sentinel(lb, OUT);
    }
    /* the base call itself is valid with K and V of every block format, fast mode too (zero
       bytes: d = m = 0, every value 0, every output 0) */
    for (size_t f = 0; f < N_FORMATS; f++)
        for (int fast = 0; fast < 2; fast++) {
            sdpa_params p = base;
            p.q8_scores = fast;
            const sdpa_tensor q = {qb, F32, 6 * 128, 3 * 128, 128},
                              o = {ob + 64, F32, 6 * 128, 3 * 128, 128};
            const sdpa_tensor k = {kb, blk(f), LK * 128, LK * 128, 32},
                              v = {vb, blk(f + 1), LK * 128, LK * 128, 32};
            const sdpa_status st = sdpa_impl_forward(impl, &p, &q, &k, &v, &o);
            CHECK(st == SDPA_OK && ob[64] == 0.0f && fabsf(lb[64] - logf((float)LK)) < 1e-5f,
                  "the valid base call (k %s, v %s, q8_scores %d): status %s, o[0] %g, lse %g",
                  dtn(k.dtype), dtn(v.dtype), fast, sdpa_status_str(st), ob[64], lb[64]);
        }
    free(qb), free(kb), free(vb), free(ob), free(lb);
}

/* ------------------------------------------------------------------------------------------ */
/* The conversions and the dtype sizes (no implementation involved: one test point)             */
/* ------------------------------------------------------------------------------------------ */
enum { NKIND = 20, NBLK = 4 * NKIND };

/* The API's conversions of each block format, and the values at its scale's edge: top, one
   element that puts d just under the f16 maximum (65519 rounds to 65504), over, one that
   puts it at 65520 or beyond (refused); the rest of the block in [-1, 1] (has_min: [0, 1], so
   that the span is at most top and over less 1). */
typedef sdpa_status (*quant_fn)(const float *, size_t, void *);
typedef sdpa_status (*deq_fn)(const void *, size_t, float *);
static const struct {
    sdpa_dtype t;
    quant_fn quant;
    deq_fn deq;
    float top, over;
} g_api[] = {
    /* top and over: 65519 and 65520 times 127, -8 and -16; 65519 and 65521 times 15 and 31 */
    {Q8, sdpa_quantize_q8_0, sdpa_dequantize_q8_0, 8320913.0f, 8321040.0f},
    {Q4, sdpa_quantize_q4_0, sdpa_dequantize_q4_0, -524152.0f, -524160.0f},
    {Q41, sdpa_quantize_q4_1, sdpa_dequantize_q4_1, 982785.0f, 982816.0f},
    {Q50, sdpa_quantize_q5_0, sdpa_dequantize_q5_0, -1048304.0f, -1048320.0f},
    {Q51, sdpa_quantize_q5_1, sdpa_dequantize_q5_1, 2031089.0f, 2031151.0f},
    {IQ4, sdpa_quantize_iq4_nl, sdpa_dequantize_iq4_nl, -7.0e6f, -9.0e6f}, /* d near |x| / 127 */
};
_Static_assert(sizeof g_api / sizeof g_api[0] == N_FORMATS, "a row of g_api per block format");

/* Block k of the conversion data for type t: each kind of block the formulas have an edge at. */
static void conv_block(tl_rng *r, size_t k, sdpa_dtype t, float top, float *x)
{
    const size_t kind = k % NKIND;
    const bool other = k / NKIND % 2 != 0; /* the second variant of a kind */
    const bool has_min = ref_format_of(t)->has_min;
    switch (kind) {
    case 0: /* plain */
        for (int i = 0; i < QK; i++) x[i] = tl_uniform(r, -1.0f, 1.0f);
        break;
    case 1: { /* a random magnitude, 1e-7 .. 1e5 (has_min: the minimum within f16, 6e4) */
        const float m = fminf(powf(10.0f, tl_uniform(r, -7.0f, 5.0f)), has_min ? 6.0e4f : 1e5f);
        for (int i = 0; i < QK; i++) x[i] = m * tl_uniform(r, -1.0f, 1.0f);
        break;
    }
    case 2: /* q8_0 ties: d = 1, x * id = n + 0.5 exactly (half away from zero) */
        for (int i = 0; i < QK; i++)
            x[i] = (float)((int)tl_below(r, 253) - 126) + (i % 2 ? 0.5f : -0.5f);
        x[tl_below(r, QK)] = other ? -127.0f : 127.0f;
        break;
    case 3: /* q4_0 ties: m = -8 first, d = 1: x + 8.5 an integer or n + 0.5 */
        for (int i = 0; i < QK; i++)
            x[i] = (float)((int)tl_below(r, 15) - 7) + (i % 3 ? 0.5f : -0.5f);
        x[3] = -8.0f, x[20] = 8.0f; /* +8 later: the first of largest magnitude is -8 */
        break;
    case 4: /* zeros, then negative zeros */
        for (int i = 0; i < QK; i++) x[i] = other ? -0.0f : 0.0f;
        break;
    case 5: /* all equal */
        for (int i = 0; i < QK; i++) x[i] = other ? -0.7f : 0.3f;
        break;
    case 6: /* the largest magnitude negative; with +a = -a, the first wins */
        for (int i = 0; i < QK; i++) x[i] = tl_uniform(r, -1.0f, 1.0f);
        x[9] = -2.5f, x[other ? 2 : 25] = 2.5f;
        break;
    case 7: /* tiny: d an f16 subnormal */
        for (int i = 0; i < QK; i++) x[i] = 1e-5f * tl_uniform(r, -1.0f, 1.0f);
        break;
    case 8: /* tiny: d rounds to 0 in f16, the quants do not */
        for (int i = 0; i < QK; i++) x[i] = 1e-9f * tl_uniform(r, -1.0f, 1.0f);
        break;
    case 9: /* tiny: f32 normal, far below f16 (iq4_nl: below 1e-15, a zero block) */
        for (int i = 0; i < QK; i++) x[i] = 1e-30f * tl_uniform(r, -1.0f, 1.0f);
        break;
    case 10: /* large: the scale just under the f16 maximum */
        for (int i = 0; i < QK; i++)
            x[i] = has_min ? tl_uniform(r, 0.0f, top) : 0.9f * top * tl_uniform(r, -1.0f, 1.0f);
        x[5] = top;
        if (has_min) x[17] = 0.0f;
        break;
    case 11: /* large, in range (has_min: the minimum within f16) */
        for (int i = 0; i < QK; i++)
            x[i] = (has_min ? 6.0e4f : 4.0e5f) * tl_uniform(r, -1.0f, 1.0f);
        break;
    case 12: /* q4_0 scale exactly between two f16 values: ties to even (1 + 2^-11 -> 1, 1 + 3 2^-11
                -> 1 + 2^-9) */
        for (int i = 0; i < QK; i++) x[i] = tl_uniform(r, -7.0f, 7.0f);
        x[0] = -8.0f * (other ? 1.0f + 3 * 0x1p-11f : 1.0f + 0x1p-11f);
        break;
    case 13: /* a small integer grid: most x * id exact */
        for (int i = 0; i < QK; i++) x[i] = (float)((int)tl_below(r, 17) - 8);
        break;
    case 14: /* one element far larger than the rest */
        for (int i = 0; i < QK; i++) x[i] = tl_uniform(r, -1e-3f, 1e-3f);
        x[tl_below(r, QK)] = other ? -1000.0f : 1000.0f;
        break;
    case 15: /* magnitudes spread over the block (has_min: below 2^15, the minimum in f16) */
        for (int i = 0; i < QK; i++)
            x[i] = ldexpf(tl_uniform(r, -1.0f, 1.0f), (int)tl_below(r, has_min ? 36 : 40) - 20);
        break;
    case 16: { /* q4_1 / q5_1 ties: lo = -3, hi = lo + 15 (31), d = 1: (x - lo) + 0.5 = n + 1 */
        const int top_n = t == Q51 || other ? 31 : 15;
        for (int i = 0; i < QK; i++) x[i] = -3.0f + (float)tl_below(r, (size_t)top_n) + 0.5f;
        x[7] = -3.0f, x[26] = -3.0f + (float)top_n;
        break;
    }
    case 17: /* iq4_nl ties: m = -127 first, d = 1: x halfway between two table values (the
                upper one wins) or on one */
        for (int i = 0; i < QK; i++) {
            const size_t j = tl_below(r, 15);
            x[i] = 0.5f * (float)(ref_iq4nl_table[j] + ref_iq4nl_table[j + (i % 3 ? 1 : 0)]);
        }
        x[1] = -127.0f, x[other ? 30 : 0] = 127.0f;
        break;
    case 18: /* the minimum far from 0, a small spread: d n + m is rounded */
        for (int i = 0; i < QK; i++)
            x[i] = (other ? 60000.0f : -60000.0f) + tl_uniform(r, 0.0f, 2.0f);
        break;
    default: /* subnormal: 1 / d overflows float, every stored integer 0 (iq4_nl: a zero block) */
        for (int i = 0; i < QK; i++) x[i] = 1e-39f * tl_uniform(r, -1.0f, 1.0f);
        x[4] = other ? 0x1p-126f : -0x1p-140f;
        break;
    }
}

static void t_convert(void)
{
    tl_start("quant: conversions byte-identical to the reference, dtype sizes", "api");
    /* sizes, as sdpa.h states them; 9 is past the last type */
    static const size_t blk[9] = {1, 1, 1, 32, 32, 32, 32, 32, 32};
    static const size_t bytes[9] = {4, 2, 2, 34, 18, 20, 22, 24, 18};
    static const char *const names[9] = {"f32",  "f16",  "bf16", "q8_0",  "q4_0",
                                         "q4_1", "q5_0", "q5_1", "iq4_nl"};
    for (int t = 0; t < 9; t++) {
        CHECK(sdpa_dtype_block((sdpa_dtype)t) == blk[t], "sdpa_dtype_block(%s) = %zu, want %zu",
              names[t], sdpa_dtype_block((sdpa_dtype)t), blk[t]);
        CHECK(sdpa_dtype_size((sdpa_dtype)t) == bytes[t], "sdpa_dtype_size(%s) = %zu, want %zu",
              names[t], sdpa_dtype_size((sdpa_dtype)t), bytes[t]);
        CHECK(strcmp(sdpa_dtype_name((sdpa_dtype)t), names[t]) == 0,
              "sdpa_dtype_name(%d) = \"%s\", want \"%s\"", t, sdpa_dtype_name((sdpa_dtype)t),
              names[t]);
        CHECK(strcmp(dtn((sdpa_dtype)t), names[t]) == 0 &&
                  (t < 3 || ref_block_bytes((sdpa_dtype)t) == bytes[t]),
              "the test's own table disagrees with sdpa.h on %s", names[t]);
    }
    CHECK(sdpa_dtype_block((sdpa_dtype)9) == 0 && sdpa_dtype_size((sdpa_dtype)9) == 0 &&
              sdpa_dtype_block((sdpa_dtype)-1) == 0 && sdpa_dtype_size((sdpa_dtype)-1) == 0 &&
              strcmp(sdpa_dtype_name((sdpa_dtype)9), "unknown") == 0 &&
              strcmp(sdpa_dtype_name((sdpa_dtype)-1), "unknown") == 0,
          "an unknown dtype must have block and size 0 and the name \"unknown\"");
    const struct {
        sdpa_dtype t;
        size_t n, want;
    } nb[] = {{Q8, 32, 34},
              {Q8, 64, 68},
              {Q4, 32000, 18000},
              {Q8, 33, 0},
              {Q4, 16, 0},
              {Q8, 0, 0},
              {F32, 5, 20},
              {F16, 7, 14},
              {BF16, 3, 6},
              {Q41, 64, 40},
              {Q50, 96, 66},
              {Q51, 32, 24},
              {IQ4, 320, 180},
              {Q51, 48, 0},
              {(sdpa_dtype)9, 32, 0},
              {F32, SIZE_MAX / 2, 0},
              {Q8, SIZE_MAX / 32 * 32, 0},                  /* 34 bytes a block: overflows */
              {Q4, SIZE_MAX / 32 * 32, SIZE_MAX / 32 * 18}, /* the largest n fits */
              {IQ4, SIZE_MAX / 32 * 32, SIZE_MAX / 32 * 18},
              {Q51, SIZE_MAX / 32 * 32, SIZE_MAX / 32 * 24}};
    for (size_t i = 0; i < sizeof nb / sizeof nb[0]; i++)
        CHECK(sdpa_dtype_bytes(nb[i].t, nb[i].n) == nb[i].want,
              "sdpa_dtype_bytes(%s, %zu) = %zu, want %zu", dtn(nb[i].t), nb[i].n,
              sdpa_dtype_bytes(nb[i].t, nb[i].n), nb[i].want);

    /* quantizers: byte for byte, every kind of block, each at several positions in a row; the
       per-type functions and sdpa_quantize in turn */
    tl_rng r = {700};
    float *x = tl_xmalloc(NBLK * QK * sizeof(float)), *y = tl_xmalloc(NBLK * QK * sizeof(float)),
          *yr = tl_xmalloc(NBLK * QK * sizeof(float));
    enum { GOT = NBLK * QMAX_BYTES + 64 };
    unsigned char *got = tl_xmalloc(GOT), *want = tl_xmalloc(NBLK * QMAX_BYTES);
    for (int round = 0; round < 4; round++) {
        for (size_t f = 0; f < N_FORMATS; f++) {
            const sdpa_dtype t = g_api[f].t;
            const size_t bb = ref_block_bytes(t);
            for (size_t b = 0; b < NBLK; b++)
                conv_block(&r, b + (size_t)round * 7, t, g_api[f].top, x + b * QK);
            memset(got, 0xa5, GOT);
            const sdpa_status st =
                round % 2 ? sdpa_quantize(t, x, NBLK * QK, got) : g_api[f].quant(x, NBLK * QK, got);
            if (!CHECK(st == SDPA_OK, "%s quantize: status %s", dtn(t), sdpa_status_str(st))) {
                for (size_t b = 0; b < NBLK; b++)
                    if (sdpa_quantize(t, x + b * QK, QK, got) != SDPA_OK)
                        (void)CHECK(false, "%s block %zu (kind %zu) refused", dtn(t), b,
                                    (b + (size_t)round * 7) % NKIND);
                continue;
            }
            size_t past = 0;
            for (size_t e = NBLK * bb; e < GOT; e++) past += got[e] != 0xa5;
            CHECK(past == 0, "%s quantize wrote %zu bytes past the %zu blocks", dtn(t), past,
                  (size_t)NBLK);
            for (size_t b = 0; b < NBLK; b++) {
                ref_format_of(t)->quant(x + b * QK, want + b * bb);
                if (memcmp(got + b * bb, want + b * bb, bb) != 0) {
                    size_t e = 0;
                    while (got[b * bb + e] == want[b * bb + e]) e++;
                    (void)CHECK(false,
                                "%s block %zu (kind %zu): byte %zu is 0x%02x, the reference 0x%02x",
                                dtn(t), b, (b + (size_t)round * 7) % NKIND, e, got[b * bb + e],
                                want[b * bb + e]);
                }
            }
            /* dequantize: exactly d n (+ m), from the bytes of the reference */
            for (size_t b = 0; b < NBLK; b++) ref_deq(t, want + b * bb, yr + b * QK, NULL);
            tl_fill_sentinel(y, NBLK * QK);
            const sdpa_status sd = round % 2 ? g_api[f].deq(want, NBLK * QK, y)
                                             : sdpa_dequantize(t, want, NBLK * QK, y);
            CHECK(sd == SDPA_OK, "%s dequantize: status %s", dtn(t), sdpa_status_str(sd));
            for (size_t e = 0; e < NBLK * QK; e++)
                if (!CHECK(tl_bits(y[e]) == tl_bits(yr[e]),
                           "%s dequantize[%zu] = %.9g, d n (+ m) = %.9g", dtn(t), e, y[e], yr[e]))
                    break;
        }
    }
    /* dequantize random bytes (any finite scale and minimum, any quants) exactly; a non-finite
       scale (or minimum) gives non-finite values */
    for (size_t f = 0; f < N_FORMATS; f++) {
        const sdpa_dtype t = g_api[f].t;
        const size_t bb = ref_block_bytes(t);
        const bool has_min = ref_format_of(t)->has_min;
        for (size_t b = 0; b < NBLK; b++) {
            for (size_t e = 0; e < bb; e++) want[b * bb + e] = (unsigned char)tl_next(&r);
            if ((want[b * bb + 1] & 0x7c) == 0x7c) want[b * bb + 1] ^= 0x04; /* finite */
            if (has_min && (want[b * bb + 3] & 0x7c) == 0x7c) want[b * bb + 3] ^= 0x04;
        }
        want[5 * bb + 1] = 0x7c, want[5 * bb] = 0;                  /* +inf */
        want[6 * bb + 1] = 0xfe, want[6 * bb] = 0x01;               /* NaN */
        if (has_min) want[7 * bb + 3] = 0xfc, want[7 * bb + 2] = 0; /* a minimum of -inf */
        for (size_t b = 0; b < NBLK; b++) ref_deq(t, want + b * bb, yr + b * QK, NULL);
        const sdpa_status sd = g_api[f].deq(want, NBLK * QK, y);
        CHECK(sd == SDPA_OK, "%s dequantize of random bytes: status %s", dtn(t),
              sdpa_status_str(sd));
        for (size_t e = 0; e < NBLK * QK; e++) {
            const bool nonfinite = e / QK == 5 || e / QK == 6 || (has_min && e / QK == 7);
            if (nonfinite) {
                if (!CHECK(!isfinite(y[e]), "%s dequantize with a non-finite scale: y[%zu] = %g",
                           dtn(t), e, y[e]))
                    break;
            } else if (!CHECK(tl_bits(y[e]) == tl_bits(yr[e]),
                              "%s dequantize of random bytes: y[%zu] = %.9g, d n (+ m) = %.9g",
                              dtn(t), e, y[e], yr[e])) {
                break;
            }
        }
    }
    /* refusals: nothing written */
    for (size_t f = 0; f < N_FORMATS; f++) {
        const sdpa_dtype t = g_api[f].t;
        const bool has_min = ref_format_of(t)->has_min;
        const quant_fn quant = g_api[f].quant;
        const deq_fn deq = g_api[f].deq;
        enum { N4 = 4 * QK, W = 4 * QMAX_BYTES };
        const struct {
            const char *why;
            size_t at;
            float val;
            size_t n;
        } rq[] = {{"NaN in the second block", QK + 3, NAN, N4},
                  {"+inf in the last block", N4 - 1, INFINITY, N4},
                  {"-inf in the first block", 0, -INFINITY, N4},
                  {"a scale over the f16 range", 2 * QK + 7, g_api[f].over, N4},
                  {"a minimum over the f16 range (-65520)", 3 * QK + 1, -65520.0f, N4},
                  {"a huge finite value", QK, 3e38f, N4},
                  {"n = 33", 0, 0.5f, 33},
                  {"n = 16", 0, 0.5f, 16}};
        for (size_t i = 0; i < sizeof rq / sizeof rq[0]; i++) {
            if (strstr(rq[i].why, "minimum") && !has_min) continue;
            for (size_t e = 0; e < N4; e++) x[e] = tl_uniform(&r, has_min ? 0.0f : -1.0f, 1.0f);
            x[rq[i].at] = rq[i].val;
            for (int api = 0; api < 2; api++) {
                memset(got, 0xa5, W);
                const sdpa_status st =
                    api ? sdpa_quantize(t, x, rq[i].n, got) : quant(x, rq[i].n, got);
                size_t wrote = 0;
                for (size_t e = 0; e < W; e++) wrote += got[e] != 0xa5;
                CHECK(st == SDPA_ERR_INVALID_ARGUMENT && wrote == 0,
                      "%s %s, %s: status %s, %zu bytes written", dtn(t),
                      api ? "sdpa_quantize" : "quantize", rq[i].why, sdpa_status_str(st), wrote);
            }
        }
        /* just inside the range: accepted, the scale (or minimum) rounding down to 65504 */
        for (size_t e = 0; e < N4; e++) x[e] = tl_uniform(&r, has_min ? 0.0f : -1.0f, 1.0f);
        x[QK + 5] = g_api[f].top;
        if (has_min) x[2 * QK + 9] = -65519.0f;
        bool same = quant(x, N4, got) == SDPA_OK;
        for (size_t b = 0; b < 4 && same; b++) {
            unsigned char ref[QMAX_BYTES];
            ref_format_of(t)->quant(x + b * QK, ref);
            same = memcmp(ref, got + b * ref_block_bytes(t), ref_block_bytes(t)) == 0;
        }
        CHECK(same,
              "%s quantize: a scale (or minimum) rounding down to the f16 maximum must be "
              "accepted, as the reference",
              dtn(t));
        memset(got, 0xa5, W);
        CHECK(quant(NULL, QK, got) == SDPA_ERR_INVALID_ARGUMENT &&
                  quant(x, QK, NULL) == SDPA_ERR_INVALID_ARGUMENT &&
                  sdpa_quantize(t, NULL, QK, got) == SDPA_ERR_INVALID_ARGUMENT &&
                  sdpa_quantize(t, x, QK, NULL) == SDPA_ERR_INVALID_ARGUMENT,
              "%s quantize: a NULL pointer accepted", dtn(t));
        tl_fill_sentinel(y, N4);
        CHECK(deq(NULL, QK, y) == SDPA_ERR_INVALID_ARGUMENT &&
                  deq(want, QK, NULL) == SDPA_ERR_INVALID_ARGUMENT &&
                  deq(want, 31, y) == SDPA_ERR_INVALID_ARGUMENT &&
                  deq(want, QK + 16, y) == SDPA_ERR_INVALID_ARGUMENT &&
                  sdpa_dequantize(t, NULL, QK, y) == SDPA_ERR_INVALID_ARGUMENT &&
                  sdpa_dequantize(t, want, 48, y) == SDPA_ERR_INVALID_ARGUMENT,
              "%s dequantize: NULL or a bad n accepted", dtn(t));
        /* n = 0: an empty conversion */
        CHECK(quant(x, 0, got) == SDPA_OK && deq(want, 0, y) == SDPA_OK,
              "%s: n = 0 must be an empty conversion", dtn(t));
        size_t wrote = 0;
        for (size_t e = 0; e < W; e++) wrote += got[e] != 0xa5;
        for (size_t e = 0; e < N4; e++) wrote += !tl_is_sentinel(y[e]);
        CHECK(wrote == 0, "%s: refused or empty conversions wrote %zu elements", dtn(t), wrote);
    }
    /* sdpa_quantize and sdpa_dequantize refuse a type that is not a block format */
    static const sdpa_dtype not_blocks[] = {F32,           F16, BF16, (sdpa_dtype)9, (sdpa_dtype)-1,
                                            (sdpa_dtype)99};
    for (size_t i = 0; i < sizeof not_blocks / sizeof not_blocks[0]; i++) {
        for (size_t e = 0; e < QK; e++) x[e] = 0.25f;
        memset(got, 0xa5, GOT);
        tl_fill_sentinel(y, QK);
        const sdpa_status sq = sdpa_quantize(not_blocks[i], x, QK, got);
        const sdpa_status sd = sdpa_dequantize(not_blocks[i], want, QK, y);
        size_t wrote = 0;
        for (size_t e = 0; e < GOT; e++) wrote += got[e] != 0xa5;
        for (size_t e = 0; e < QK; e++) wrote += !tl_is_sentinel(y[e]);
        CHECK(sq == SDPA_ERR_INVALID_ARGUMENT && sd == SDPA_ERR_INVALID_ARGUMENT && wrote == 0,
              "sdpa_quantize / sdpa_dequantize of type %d: status %s / %s, %zu elements written",
              (int)not_blocks[i], sdpa_status_str(sq), sdpa_status_str(sd), wrote);
    }
    free(x), free(y), free(yr), free(got), free(want);
    tl_end();
}

/* ------------------------------------------------------------------------------------------ */
/* Fixed blocks: bytes and values written out, derived apart from the library and from the     */
/* reference codec above (tests/quant_bytes.py, from sdpa.h's formulas)                         */
/* ------------------------------------------------------------------------------------------ */
typedef struct qb_input {
    const char *name;
    sdpa_dtype only; /* the one block format it is for; F32: every one */
    float x[QK];
} qb_input;
typedef struct qb_case {
    sdpa_dtype t;
    size_t input; /* into qb_inputs */
    size_t nbytes;
    unsigned char bytes[QMAX_BYTES];
    float y[QK]; /* the values sdpa.h states, exactly */
} qb_case;
#include "quant_bytes.h"

enum {
    N_QB_INPUTS = sizeof qb_inputs / sizeof qb_inputs[0],
    N_QB_CASES = sizeof qb_cases / sizeof qb_cases[0]
};

static void hex_bytes(const unsigned char *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) snprintf(out + 3 * i, 4, "%02x ", b[i]);
}

static void t_fixed_bytes(void)
{
    tl_start("quant: fixed blocks, bytes and values written out", "api");
    size_t per_type[N_FORMATS] = {0};
    for (size_t c = 0; c < N_QB_CASES; c++) {
        const qb_case *k = &qb_cases[c];
        const qb_input *in = &qb_inputs[k->input];
        const sdpa_dtype t = k->t;
        size_t f = 0;
        while (g_api[f].t != t) f++;
        per_type[f]++;
        CHECK(k->nbytes == sdpa_dtype_size(t),
              "%s: the table's block is %zu bytes, sdpa_dtype_size %zu", dtn(t), k->nbytes,
              sdpa_dtype_size(t));
        unsigned char got[2][QMAX_BYTES + 8], ref[QMAX_BYTES];
        memset(got, 0xa5, sizeof got);
        const sdpa_status s0 = sdpa_quantize(t, in->x, QK, got[0]),
                          s1 = g_api[f].quant(in->x, QK, got[1]);
        ref_format_of(t)->quant(in->x, ref);
        for (int a = 0; a < 2; a++) {
            char g[3 * QMAX_BYTES + 1], w[3 * QMAX_BYTES + 1];
            hex_bytes(got[a], k->nbytes, g), hex_bytes(k->bytes, k->nbytes, w);
            CHECK((a ? s1 : s0) == SDPA_OK && memcmp(got[a], k->bytes, k->nbytes) == 0 &&
                      got[a][k->nbytes] == 0xa5,
                  "%s of \"%s\" (%s): status %s, bytes\n#   %s\n# want %s", dtn(t), in->name,
                  a ? "per-type function" : "sdpa_quantize", sdpa_status_str(a ? s1 : s0), g, w);
        }
        CHECK(memcmp(ref, k->bytes, k->nbytes) == 0,
              "%s of \"%s\": the test's reference quantizer disagrees", dtn(t), in->name);
        float y[2][QK], yr[QK];
        tl_fill_sentinel(y[0], 2 * QK);
        const sdpa_status d0 = sdpa_dequantize(t, k->bytes, QK, y[0]),
                          d1 = g_api[f].deq(k->bytes, QK, y[1]);
        ref_deq(t, k->bytes, yr, NULL);
        for (int i = 0; i < QK; i++) {
            if (!CHECK(d0 == SDPA_OK && d1 == SDPA_OK && tl_bits(y[0][i]) == tl_bits(k->y[i]) &&
                           tl_bits(y[1][i]) == tl_bits(k->y[i]),
                       "%s dequantize of \"%s\": element %d = %a / %a, want %a", dtn(t), in->name,
                       i, y[0][i], y[1][i], k->y[i]))
                break;
            if (!CHECK(tl_bits(yr[i]) == tl_bits(k->y[i]),
                       "%s of \"%s\": the test's decoder gives %a at %d, want %a", dtn(t), in->name,
                       yr[i], i, k->y[i]))
                break;
        }
    }
    /* every type's blocks in one row: the same bytes at every position */
    for (size_t f = 0; f < N_FORMATS; f++) {
        const sdpa_dtype t = g_api[f].t;
        const size_t bb = ref_block_bytes(t);
        float x[N_QB_CASES * QK];
        unsigned char want[N_QB_CASES * QMAX_BYTES], got[N_QB_CASES * QMAX_BYTES];
        size_t n = 0;
        for (size_t c = N_QB_CASES; c-- > 0;) /* last to first: other neighbours than the table's */
            if (qb_cases[c].t == t) {
                memcpy(x + n * QK, qb_inputs[qb_cases[c].input].x, sizeof(float) * QK);
                memcpy(want + n * bb, qb_cases[c].bytes, bb);
                n++;
            }
        CHECK(n == per_type[f] && n >= 10, "%s: %zu fixed blocks", dtn(t), n);
        CHECK(g_api[f].quant(x, n * QK, got) == SDPA_OK && memcmp(got, want, n * bb) == 0,
              "%s: the fixed blocks in one row of %zu give other bytes", dtn(t), n);
    }
    tl_end();
}

/* ------------------------------------------------------------------------------------------ */
/* Each implementation's own dequantizer (sdpa_kernels.dequant, the driver's staged copies)      */
/* bit for bit against ggml's reference formulas                                                */
/* ------------------------------------------------------------------------------------------ */

/* ggml's reference dequantizers (dequantize_row_<type>) on one block, in their f32 arithmetic:
   element j < 16 from the low nibble of byte j, 16 + j from its high nibble (q5: bits j and
   16 + j of qh their 5th bits); the integer quant as float times d, plus m for q4_1 and q5_1
   (d n is exact: fused or not, the sum rounds once). A quant of 0 times d < 0 or d = -0 is -0. */
static void ggml_deq_block(sdpa_dtype t, const unsigned char *b, float *y)
{
    const float d = (float)ref_f16_value(ref_get16(b));
    if (t == Q8) {
        for (int j = 0; j < QK; j++) y[j] = (float)(int8_t)b[2 + j] * d;
        return;
    }
    const bool has_min = t == Q41 || t == Q51, has_qh = t == Q50 || t == Q51;
    const float m = has_min ? (float)ref_f16_value(ref_get16(b + 2)) : 0.0f;
    const unsigned char *qs = b + (has_min ? 4 : 2);
    uint32_t qh = 0;
    if (has_qh) {
        for (int i = 0; i < 4; i++) qh |= (uint32_t)qs[i] << 8 * i;
        qs += 4;
    }
    for (int j = 0; j < QK / 2; j++)
        for (int h = 0; h < 2; h++) {
            const int e = j + h * QK / 2;
            const int n = (h ? qs[j] >> 4 : qs[j] & 15) | (int)(qh >> e & 1) << 4;
            if (t == IQ4)
                y[e] = d * (float)ref_iq4nl_table[n];
            else if (has_min)
                y[e] = (float)n * d + m;
            else
                y[e] = (float)(n - (t == Q4 ? 8 : 16)) * d;
        }
}

/* The f16 scales (and minimums) of the dequantizer's blocks: +-1, +-0, a negative fraction, the
   smallest subnormals, the largest finite values, a small power of 2; then random finite ones. */
static const uint16_t deq_f16s[] = {0x3c00, 0xbc00, 0x0000, 0x8000, 0xb666,
                                    0x0001, 0x8001, 0x7bff, 0xfbff, 0x2c00};
enum { N_DEQ_FIXED = sizeof deq_f16s / sizeof deq_f16s[0], N_DEQ_F16 = N_DEQ_FIXED + 2 };
/* Quant patterns: 0-7 every stored value of the format at shifted positions (q8_0: bytes
   32 k .. 32 k + 31), 8 every quant 0 (q4_0's n = 8; iq4_nl's nibble 8, the value 1), 9-10
   random. */
enum { N_DEQ_PATTERNS = 11, N_DEQ_MAXB = N_DEQ_F16 * N_DEQ_F16 * N_DEQ_PATTERNS };

static uint16_t deq_f16(tl_rng *r, size_t i)
{
    if (i < N_DEQ_FIXED) return deq_f16s[i];
    const uint16_t h = (uint16_t)tl_next(r);
    return (h & 0x7c00) == 0x7c00 ? (uint16_t)(h ^ 0x0400) : h; /* finite */
}

/* Blocks of type t into out, every scale with every pattern (and every minimum): the count. */
static size_t deq_blocks(tl_rng *r, sdpa_dtype t, unsigned char *out)
{
    const ref_format *f = ref_format_of(t);
    const int bits = t == Q8 ? 8 : t == Q50 || t == Q51 ? 5 : 4;
    const int zero = t == Q4 || t == IQ4 ? 8 : t == Q50 ? 16 : 0;
    size_t nb = 0;
    for (size_t s = 0; s < N_DEQ_F16; s++)
        for (size_t mi = 0; mi < (f->has_min ? N_DEQ_F16 : 1); mi++)
            for (int k = 0; k < N_DEQ_PATTERNS; k++, nb++) {
                unsigned char *b = out + nb * f->bytes;
                int q[QK];
                for (int i = 0; i < QK; i++)
                    q[i] = k < 8    ? (bits == 8 ? 32 * k + i : (i + 3 * k) % (1 << bits))
                           : k == 8 ? zero
                                    : (int)(tl_next(r) % (1u << bits));
                ref_put16(b, deq_f16(r, s));
                if (f->has_min) ref_put16(b + 2, deq_f16(r, mi));
                unsigned char *p = b + (f->has_min ? 4 : 2);
                if (bits == 8)
                    for (int i = 0; i < QK; i++) p[i] = (unsigned char)q[i];
                else
                    ref_pack(q, bits == 5 ? p + 4 : p, bits == 5 ? p : NULL);
            }
    return nb;
}

/* Rows of every block format through the implementation's dequant: every element's bits those
   of ggml's formula (the sign of a zero too), nothing written past the row. */
static void t_dequant(const sdpa_impl *impl)
{
    enum { PAST = 8 };
    tl_rng r = {800};
    unsigned char *src = tl_xmalloc(N_DEQ_MAXB * QMAX_BYTES);
    float *got = tl_xmalloc((N_DEQ_MAXB * QK + PAST) * sizeof(float));
    float *want = tl_xmalloc(N_DEQ_MAXB * QK * sizeof(float));
    for (size_t f = 0; f < N_FORMATS; f++) {
        const sdpa_dtype t = ref_formats[f].t;
        const size_t nb = deq_blocks(&r, t, src), n = nb * QK, bb = ref_formats[f].bytes;
        for (size_t b = 0; b < nb; b++) {
            float y[QK];
            ggml_deq_block(t, src + b * bb, want + b * QK);
            ref_deq(t, src + b * bb, y, NULL);
            if (!CHECK(memcmp(y, want + b * QK, sizeof y) == 0,
                       "%s block %zu: the test's two decoders disagree", dtn(t), b))
                break;
        }
        tl_fill_sentinel(got, n + PAST);
        impl->k->dequant(t, src, got, n);
        size_t diff = 0, first = 0;
        for (size_t e = 0; e < n; e++)
            if (tl_bits(got[e]) != tl_bits(want[e]) && diff++ == 0) first = e;
        if (diff) {
            int q[QK];
            double d, m;
            ref_formats[f].decode(src + first / QK * bb, q, &d, &m);
            (void)CHECK(false,
                        "%s element %zu (block %zu, element %zu: d %g, m %g, quant %d) = %a, "
                        "ggml's formula %a; %zu of %zu elements differ",
                        dtn(t), first, first / QK, first % QK, d, m, q[first % QK],
                        (double)got[first], (double)want[first], diff, n);
        }
        size_t past = 0;
        for (size_t e = n; e < n + PAST; e++) past += !tl_is_sentinel(got[e]);
        CHECK(past == 0, "%s: dequant wrote %zu elements past the %zu of the row", dtn(t), past, n);
    }
    free(src), free(got), free(want);
}

static const char *no_dequant(const sdpa_impl *impl)
{
    return impl->k->dequant ? NULL : "no dequant of its own (the driver converts the elements)";
}

/* ------------------------------------------------------------------------------------------ */
static void run_test(const char *name, tl_impl_fn fn)
{
    tl_for_each_impl_worst(name, fn, &g_worst);
}

int main(void)
{
    tl_header("block-format K and V (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; exact and fast q8 "
              "scores) against "
              "float64 attention, and the conversions");
    if (!tl_pools_create(g_pool, 2, 2, 17)) return 1;
    t_convert();
    t_fixed_bytes();
    tl_for_each_impl_unless("quant: each implementation's dequant, bit for bit as ggml's formulas",
                            t_dequant, no_dequant);
    run_test("quant: K only, V only, both; prefill, decode, GQA, head dims", t_types);
    run_test("quant: ragged and paged (pages of 16 to 128 keys)", t_ragged);
    run_test("quant: window, mask, softcap, alibi, sinks, lse", t_variants);
    run_test("quant: q8_scores within the stated bound", t_fast);
    tl_for_each_impl("quant: bad block layouts and q8_scores refused", t_bad);
    return tl_pools_finish(g_pool, 2);
}
