/* test_forward.c -- fused attention of every implementation against float64 attention on varied
   shapes */
#include "attn.h"

typedef struct fcase {
    const char *name;
    size_t batch, qh, kvh, ql, kvl, d, dv; /* dv 0: d */
    float scale;                           /* 0: 1/sqrt(d) */
    bool causal;
    sdpa_dtype kt, vt;
    tlayout lq, lkv, lo;
    bool no_lse;
    float range; /* q and k uniform in [-range, range]; 0: 1 */
    bool v_pos;  /* v uniform in [0.5, 1.5] instead of [-1, 1]: outputs near 1, so an error
                    in l shows in full instead of being scaled down by a near-zero mean */
} fcase;

static const char *dtype_name(sdpa_dtype t)
{
    return t == SDPA_F16 ? "f16" : t == SDPA_BF16 ? "bf16" : "f32";
}

/* Runs one case on impl and checks it against the oracle; o and lse are surrounded by
   sentinels so that a write outside the views is caught. */
static void run_case(const sdpa_impl *impl, const fcase *c, uint64_t seed)
{
    char what[256];
    const size_t dv = c->dv ? c->dv : c->d;
    snprintf(what, sizeof what,
             "%s [b=%zu hq=%zu hkv=%zu q_len=%zu kv_len=%zu d=%zu dv=%zu scale=%g%s K %s V %s "
             "q/kv/o %s/%s/%s]",
             c->name, c->batch, c->qh, c->kvh, c->ql, c->kvl, c->d, dv, c->scale,
             c->causal ? " causal" : "", dtype_name(c->kt), dtype_name(c->vt), layout_names[c->lq],
             layout_names[c->lkv], layout_names[c->lo]);
    tl_rng r = {seed};
    tview q, k, v, o;
    tview_layout(&q, c->batch, c->qh, c->ql, c->d, SDPA_F32, c->lq, 0);
    tview_layout(&k, c->batch, c->kvh, c->kvl, c->d, c->kt, c->lkv, 0);
    tview_layout(&v, c->batch, c->kvh, c->kvl, dv, c->vt, c->lkv, 0);
    tview_layout(&o, c->batch, c->qh, c->ql, dv, SDPA_F32, c->lo, 5);
    tview_alloc(&q);
    tview_alloc(&k);
    tview_alloc(&v);
    tview_alloc(&o);
    const float range = c->range > 0 ? c->range : 1.0f;
    tview_fill(&q, &r, -range, range);
    tview_fill(&k, &r, -range, range);
    tview_fill(&v, &r, c->v_pos ? 0.5f : -1.0f, c->v_pos ? 1.5f : 1.0f);
    tview_sentinel(&o);
    const size_t rows = c->batch * c->qh * c->ql, lse_margin = 8, lse_elems = rows + 2 * lse_margin;
    float *lse = tl_xmalloc(lse_elems * sizeof(float));
    tl_fill_sentinel(lse, lse_elems);

    sdpa_params p = {0};
    p.batch = c->batch, p.q_heads = c->qh, p.kv_heads = c->kvh, p.q_len = c->ql, p.kv_len = c->kvl;
    p.head_dim = c->d, p.v_dim = c->dv, p.scale = c->scale, p.causal = c->causal;
    p.lse = c->no_lse ? NULL : lse + lse_margin;
    sdpa_tensor tq = tview_tensor(&q), tk = tview_tensor(&k), tv = tview_tensor(&v),
                to = tview_tensor(&o);
    sdpa_status st = sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to);
    if (CHECK(st == SDPA_OK, "%s: status %d (%s)", what, (int)st, sdpa_status_str(st))) {
        attn_ref ref;
        attn_oracle(&p, &q, &k, &v, &ref);
        attn_check(what, &p, &o, c->no_lse ? NULL : lse, lse_margin, lse_elems, &ref);
        attn_ref_free(&ref);
        if (c->no_lse)
            for (size_t e = 0; e < lse_elems; e++)
                if (!CHECK(tl_is_sentinel(lse[e]), "%s: lse was written with p->lse NULL", what))
                    break;
    }
    free(lse);
    tview_free(&q);
    tview_free(&k);
    tview_free(&v);
    tview_free(&o);
}

#define F32  SDPA_F32
#define F16  SDPA_F16
#define BF16 SDPA_BF16

static const fcase shapes[] = {
    {.name = "1x1", .batch = 1, .qh = 1, .kvh = 1, .ql = 1, .kvl = 1, .d = 1},
    {.name = "1x1 causal",
     .batch = 1,
     .qh = 1,
     .kvh = 1,
     .ql = 1,
     .kvl = 1,
     .d = 1,
     .causal = true},
    {.name = "1x1 d=64", .batch = 1, .qh = 1, .kvh = 1, .ql = 1, .kvl = 1, .d = 64},
    {.name = "odd sizes", .batch = 2, .qh = 3, .kvh = 3, .ql = 5, .kvl = 7, .d = 13, .dv = 9},
    {.name = "odd sizes causal",
     .batch = 3,
     .qh = 5,
     .kvh = 5,
     .ql = 11,
     .kvl = 19,
     .d = 23,
     .causal = true},
    {.name = "q_len > kv_len", .batch = 1, .qh = 2, .kvh = 2, .ql = 9, .kvl = 4, .d = 16},
    {.name = "q_len > kv_len causal (rows 0..4 see nothing)",
     .batch = 1,
     .qh = 2,
     .kvh = 2,
     .ql = 9,
     .kvl = 4,
     .d = 16,
     .causal = true},
    {.name = "q_len >> kv_len causal",
     .batch = 2,
     .qh = 2,
     .kvh = 1,
     .ql = 40,
     .kvl = 3,
     .d = 8,
     .causal = true},
    {.name = "q_len < kv_len", .batch = 1, .qh = 2, .kvh = 1, .ql = 5, .kvl = 37, .d = 24},
    {.name = "q_len < kv_len causal",
     .batch = 1,
     .qh = 2,
     .kvh = 1,
     .ql = 5,
     .kvl = 37,
     .d = 24,
     .causal = true},
    {.name = "square causal",
     .batch = 1,
     .qh = 2,
     .kvh = 2,
     .ql = 67,
     .kvl = 67,
     .d = 32,
     .causal = true},
    {.name = "v_dim > head_dim",
     .batch = 1,
     .qh = 2,
     .kvh = 2,
     .ql = 7,
     .kvl = 33,
     .d = 40,
     .dv = 80},
    {.name = "v_dim < head_dim causal",
     .batch = 2,
     .qh = 1,
     .kvh = 1,
     .ql = 6,
     .kvl = 50,
     .d = 64,
     .dv = 32,
     .causal = true},
    {.name = "v_dim 1", .batch = 1, .qh = 1, .kvh = 1, .ql = 3, .kvl = 20, .d = 7, .dv = 1},
    {.name = "head_dim 128",
     .batch = 1,
     .qh = 2,
     .kvh = 1,
     .ql = 9,
     .kvl = 70,
     .d = 128,
     .causal = true},
    {.name = "head_dim 256",
     .batch = 1,
     .qh = 1,
     .kvh = 1,
     .ql = 4,
     .kvl = 40,
     .d = 256,
     .causal = true},
    {.name = "head_dim 576 v_dim 512 (MLA)",
     .batch = 1,
     .qh = 2,
     .kvh = 1,
     .ql = 3,
     .kvl = 70,
     .d = 576,
     .dv = 512},
    {.name = "head_dim 255 odd",
     .batch = 1,
     .qh = 1,
     .kvh = 1,
     .ql = 5,
     .kvl = 21,
     .d = 255,
     .dv = 129},
    {.name = "explicit scale",
     .batch = 1,
     .qh = 2,
     .kvh = 2,
     .ql = 8,
     .kvl = 30,
     .d = 32,
     .scale = 0.3f},
    {.name = "scale 1 (large scores)",
     .batch = 1,
     .qh = 1,
     .kvh = 1,
     .ql = 8,
     .kvl = 50,
     .d = 128,
     .scale = 1.0f},
    {.name = "negative scale",
     .batch = 1,
     .qh = 1,
     .kvh = 1,
     .ql = 4,
     .kvl = 25,
     .d = 16,
     .scale = -0.2f},
    {.name = "scores up to +-60",
     .batch = 1,
     .qh = 1,
     .kvh = 1,
     .ql = 6,
     .kvl = 90,
     .d = 64,
     .range = 8.0f,
     .causal = true},
    {.name = "GQA 8/2",
     .batch = 1,
     .qh = 8,
     .kvh = 2,
     .ql = 11,
     .kvl = 45,
     .d = 32,
     .causal = true},
    {.name = "GQA 6/3 token-major",
     .batch = 2,
     .qh = 6,
     .kvh = 3,
     .ql = 5,
     .kvl = 29,
     .d = 16,
     .lq = L_TOKEN_MAJOR,
     .lkv = L_TOKEN_MAJOR,
     .lo = L_TOKEN_MAJOR},
    {.name = "MQA decode", .batch = 2, .qh = 4, .kvh = 1, .ql = 1, .kvl = 300, .d = 64},
    {.name = "MQA prefill causal",
     .batch = 1,
     .qh = 4,
     .kvh = 1,
     .ql = 33,
     .kvl = 50,
     .d = 64,
     .causal = true},
    {.name = "K,V f16",
     .batch = 1,
     .qh = 4,
     .kvh = 2,
     .ql = 13,
     .kvl = 77,
     .d = 64,
     .causal = true,
     .kt = F16,
     .vt = F16},
    {.name = "K,V bf16",
     .batch = 1,
     .qh = 4,
     .kvh = 2,
     .ql = 13,
     .kvl = 77,
     .d = 64,
     .causal = true,
     .kt = BF16,
     .vt = BF16},
    {.name = "K f16 V bf16",
     .batch = 2,
     .qh = 2,
     .kvh = 1,
     .ql = 7,
     .kvl = 41,
     .d = 48,
     .dv = 24,
     .kt = F16,
     .vt = BF16},
    {.name = "K bf16 V f32",
     .batch = 1,
     .qh = 3,
     .kvh = 1,
     .ql = 5,
     .kvl = 66,
     .d = 80,
     .kt = BF16},
    {.name = "K f32 V f16 odd",
     .batch = 1,
     .qh = 1,
     .kvh = 1,
     .ql = 3,
     .kvl = 19,
     .d = 17,
     .dv = 33,
     .vt = F16},
    {.name = "f16 decode",
     .batch = 1,
     .qh = 8,
     .kvh = 2,
     .ql = 1,
     .kvl = 1000,
     .d = 128,
     .kt = F16,
     .vt = F16},
    /* decode paths by GQA group size (4: three-key score tiles, 24-column P·V passes), split
       into KV chunks whose last one is short, with prefetch distances running past kv_end */
    {.name = "GQA 4 decode bf16 split-K",
     .batch = 1,
     .qh = 8,
     .kvh = 2,
     .ql = 1,
     .kvl = 4099,
     .d = 128,
     .kt = BF16,
     .vt = BF16},
    {.name = "GQA 4 decode f16 odd dims split-K",
     .batch = 2,
     .qh = 4,
     .kvh = 1,
     .ql = 1,
     .kvl = 2500,
     .d = 72,
     .dv = 40,
     .kt = F16,
     .vt = F16},
    {.name = "GQA 4 two-token decode causal",
     .batch = 1,
     .qh = 8,
     .kvh = 2,
     .ql = 2,
     .kvl = 3001,
     .d = 64,
     .causal = true,
     .kt = F16,
     .vt = BF16},
    {.name = "GQA 3 decode bf16",
     .batch = 1,
     .qh = 6,
     .kvh = 2,
     .ql = 1,
     .kvl = 777,
     .d = 96,
     .kt = BF16,
     .vt = BF16},
    /* the decode score loop's fast path (whole tiles whose rows DEC_PF keys ahead exist): one
       row per item (16-key tiles), f32 rows with a partial last line, interleaved heads (the
       K and V strides span all heads), and V with a stride other than K's (no V requests) */
    {.name = "MHA decode f16",
     .batch = 1,
     .qh = 2,
     .kvh = 2,
     .ql = 1,
     .kvl = 700,
     .d = 128,
     .kt = F16,
     .vt = F16},
    {.name = "MHA decode f32 odd head_dim",
     .batch = 1,
     .qh = 2,
     .kvh = 2,
     .ql = 1,
     .kvl = 300,
     .d = 40},
    {.name = "GQA 2 decode bf16 token-major",
     .batch = 1,
     .qh = 4,
     .kvh = 2,
     .ql = 1,
     .kvl = 500,
     .d = 64,
     .kt = BF16,
     .vt = BF16,
     .lkv = L_TOKEN_MAJOR},
    {.name = "GQA 4 decode K f16 V f32",
     .batch = 1,
     .qh = 4,
     .kvh = 1,
     .ql = 1,
     .kvl = 600,
     .d = 64,
     .kt = F16},
    /* 8 KV heads of 6148 keys: three 2048-key chunks and one of 4 keys; 32 of 4100 keys: one
       4096-key chunk and one of 4 (the chunk length grows with the problem's size) */
    {.name = "decode split into 2048-key chunks",
     .batch = 1,
     .qh = 32,
     .kvh = 8,
     .ql = 1,
     .kvl = 6148,
     .d = 16,
     .kt = F16,
     .vt = F16},
    {.name = "decode split into 4096-key chunks",
     .batch = 1,
     .qh = 32,
     .kvh = 32,
     .ql = 1,
     .kvl = 4100,
     .d = 16,
     .kt = F16,
     .vt = F16},
    /* several key blocks per work item, and odd query blocks, which scan them in reverse */
    {.name = "prefill key blocks both directions causal",
     .batch = 1,
     .qh = 4,
     .kvh = 2,
     .ql = 150,
     .kvl = 1300,
     .d = 48,
     .causal = true},
    {.name = "prefill key blocks both directions f16/bf16",
     .batch = 1,
     .qh = 2,
     .kvh = 2,
     .ql = 140,
     .kvl = 1100,
     .d = 32,
     .kt = F16,
     .vt = BF16},
    /* 80 query heads per KV head: 80-row work items, two Qᵀ panels (64 and 16 rows) */
    {.name = "80 query heads per KV head",
     .batch = 1,
     .qh = 80,
     .kvh = 1,
     .ql = 2,
     .kvl = 90,
     .d = 40,
     .causal = true},
    {.name = "padded strides",
     .batch = 2,
     .qh = 2,
     .kvh = 2,
     .ql = 9,
     .kvl = 31,
     .d = 24,
     .causal = true,
     .lq = L_PADDED,
     .lkv = L_PADDED,
     .lo = L_PADDED},
    {.name = "padded strides f16",
     .batch = 2,
     .qh = 4,
     .kvh = 2,
     .ql = 6,
     .kvl = 23,
     .d = 20,
     .dv = 12,
     .kt = F16,
     .vt = F16,
     .lq = L_PADDED,
     .lkv = L_PADDED,
     .lo = L_PADDED},
    {.name = "token-major",
     .batch = 2,
     .qh = 4,
     .kvh = 4,
     .ql = 7,
     .kvl = 13,
     .d = 16,
     .causal = true,
     .lq = L_TOKEN_MAJOR,
     .lkv = L_TOKEN_MAJOR,
     .lo = L_TOKEN_MAJOR},
    {.name = "mixed layouts",
     .batch = 2,
     .qh = 4,
     .kvh = 2,
     .ql = 10,
     .kvl = 35,
     .d = 32,
     .lq = L_PADDED,
     .lkv = L_TOKEN_MAJOR,
     .lo = L_DENSE,
     .kt = BF16},
    {.name = "negative token strides",
     .batch = 2,
     .qh = 2,
     .kvh = 1,
     .ql = 6,
     .kvl = 40,
     .d = 16,
     .causal = true,
     .lq = L_REVERSED,
     .lkv = L_REVERSED,
     .lo = L_REVERSED},
    {.name = "negative token strides f16",
     .batch = 1,
     .qh = 2,
     .kvh = 2,
     .ql = 4,
     .kvl = 33,
     .d = 8,
     .kt = F16,
     .vt = F16,
     .lkv = L_REVERSED},
    {.name = "positive v",
     .batch = 1,
     .qh = 2,
     .kvh = 2,
     .ql = 17,
     .kvl = 300,
     .d = 64,
     .v_pos = true,
     .causal = true},
    {.name = "without lse",
     .batch = 1,
     .qh = 2,
     .kvh = 1,
     .ql = 5,
     .kvl = 20,
     .d = 16,
     .no_lse = true,
     .causal = true},
};

static void test_shapes(const sdpa_impl *impl)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0] && !tl_give_up(); i++)
        run_case(impl, &shapes[i], 100 + i);
}

/* Tile edges: q_len and kv_len on and around every power-of-two block size up to 512, smaller
   than one block, and random ones in 1..70 x 1..600; causal and not, with a rotating choice of
   head dims, types and layouts. */
static void test_tile_edges(const sdpa_impl *impl)
{
    static const size_t qls[] = {1,  2,  3,  4,  5,  7,  8,  9,  15, 16, 17,
                                 31, 32, 33, 47, 48, 49, 63, 64, 65, 70};
    static const size_t kvls[] = {1,  2,   3,   5,   8,   15,  16,  17,  31,  32,  33,  63,  64,
                                  65, 100, 127, 128, 129, 255, 256, 257, 300, 511, 512, 513, 600};
    static const size_t ds[] = {1, 3, 8, 16, 17, 32, 64, 80, 128};
    const size_t nq = sizeof qls / sizeof qls[0], nk = sizeof kvls / sizeof kvls[0];
    tl_rng r = {7};
    size_t n = 0;
    for (size_t qi = 0; qi < nq + 40 && !tl_give_up(); qi++) {
        for (size_t ki = 0; ki < nk; ki++) {
            size_t ql, kvl;
            if (qi < nq) {
                /* a third of the grid, every row and column hit */
                if ((qi + ki) % 3 != 0) continue;
                ql = qls[qi], kvl = kvls[ki];
            } else {
                if (ki != 0) break; /* 40 random pairs */
                ql = 1 + tl_below(&r, 70), kvl = 1 + tl_below(&r, 600);
            }
            for (int causal = 0; causal < 2; causal++, n++) {
                if (tl_sampled_out(n)) continue;
                fcase c = {
                    .name = "tile edges", .batch = 1, .qh = 2, .kvh = 1, .ql = ql, .kvl = kvl};
                c.causal = causal;
                c.d = ds[n % 9];
                c.dv = (n % 4 == 3) ? ds[(n + 4) % 9] : 0;
                static const sdpa_dtype kv_types[3] = {F32, F16, BF16};
                c.kt = kv_types[n % 3];
                c.vt = kv_types[(n / 3) % 3];
                c.lkv = (tlayout)((n / 2) % L_COUNT);
                c.lo = (tlayout)((n / 5) % L_COUNT);
                run_case(impl, &c, 1000 + n);
            }
        }
    }
}

/* Long context: a few rows against 65536+ keys. Weights are spread over every key (scores within
   a few units), so l and the accumulators sum ~65536 terms: an f16 accumulator overflows, a bf16
   one is off by percents, and the split-K merge of a decode is exercised. */
static void test_long_context(const sdpa_impl *impl)
{
    const fcase cases[] = {
        {.name = "long context decode",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 1,
         .kvl = 65536,
         .d = 64},
        {.name = "long context decode, positive v",
         .batch = 1,
         .qh = 2,
         .kvh = 1,
         .ql = 1,
         .kvl = 65536,
         .d = 64,
         .v_pos = true},
        {.name = "long context causal",
         .batch = 1,
         .qh = 1,
         .kvh = 1,
         .ql = 3,
         .kvl = 65537,
         .d = 32,
         .dv = 16,
         .causal = true,
         .v_pos = true},
        {.name = "long context bf16",
         .batch = 1,
         .qh = 2,
         .kvh = 2,
         .ql = 2,
         .kvl = 70001,
         .d = 16,
         .kt = BF16,
         .vt = BF16,
         .v_pos = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(impl, &cases[i], 5000 + i);
}

/* Decodes whose K and V together exceed the driver's STREAM_BYTES (32 MiB), which kernels may
   run differently (sdpa_rows.stream: the AVX2 path with one row per KV head takes short blocks
   and requests both arrays at once): one, two and four rows, rows end to end, padded and
   reversed, K and V of different types and sizes, key counts that are no multiple of a block. */
static void test_streamed(const sdpa_impl *impl)
{
    const fcase cases[] = {
        {.name = "streamed decode, 1 row",
         .batch = 1,
         .qh = 1,
         .kvh = 1,
         .ql = 1,
         .kvl = 70001,
         .d = 128,
         .kt = F16,
         .vt = F16},
        {.name = "streamed decode, 2 rows",
         .batch = 1,
         .qh = 4,
         .kvh = 2,
         .ql = 1,
         .kvl = 40003,
         .d = 128,
         .dv = 64,
         .vt = BF16},
        {.name = "streamed decode, padded",
         .batch = 1,
         .qh = 1,
         .kvh = 1,
         .ql = 1,
         .kvl = 66000,
         .d = 136,
         .kt = F16,
         .vt = F16,
         .lkv = L_PADDED},
        {.name = "streamed decode, reversed",
         .batch = 1,
         .qh = 1,
         .kvh = 1,
         .ql = 1,
         .kvl = 70001,
         .d = 128,
         .kt = F16,
         .vt = F16,
         .lkv = L_REVERSED},
        {.name = "streamed decode, 4 rows",
         .batch = 1,
         .qh = 8,
         .kvh = 2,
         .ql = 1,
         .kvl = 40000,
         .d = 128,
         .kt = BF16,
         .vt = F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(impl, &cases[i], 6000 + i);
}

/* Runs a test and reports how close to its tolerance the worst output came. */
static tl_impl_fn current_fn;
static void with_worst_ratio(const sdpa_impl *impl)
{
    attn_worst_ratio = 0;
    current_fn(impl);
    printf("# %s: worst |error| / tolerance %.3f\n", tl_label, attn_worst_ratio);
}

static void run_test(const char *name, tl_impl_fn fn)
{
    current_fn = fn;
    tl_for_each_impl(name, with_worst_ratio);
}

int main(void)
{
    tl_header("fused attention against float64 attention");
    run_test("forward shapes", test_shapes);
    run_test("forward tile edges", test_tile_edges);
    run_test("forward long context", test_long_context);
    run_test("forward streamed decode", test_streamed);
    return tl_finish();
}
