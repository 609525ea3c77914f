/* test_workspace.c -- caller-owned scratch: the size query, the same bits with it, a too-small one,
 * overlap refused */
#include "attn.h"

static void run_case(const sdpa_impl *impl, size_t Hq, size_t Hkv, size_t Lq, size_t Lk, size_t D,
                     sdpa_dtype kv_type, bool causal)
{
    tl_rng rng = {0x5eed0001u + Lq * 31 + Lk};
    tview q, k, v, o;
    tview_layout(&q, 1, Hq, Lq, D, SDPA_F32, L_DENSE, 0);
    tview_layout(&k, 1, Hkv, Lk, D, kv_type, L_PADDED, 0);
    tview_layout(&v, 1, Hkv, Lk, D, kv_type, L_DENSE, 0);
    tview_layout(&o, 1, Hq, Lq, D, SDPA_F32, L_DENSE, 0);
    tview_alloc(&q), tview_alloc(&k), tview_alloc(&v), tview_alloc(&o);
    tview_fill(&q, &rng, -1.0f, 1.0f), tview_fill(&k, &rng, -1.0f, 1.0f),
        tview_fill(&v, &rng, -1.0f, 1.0f);
    sdpa_params p = tl_params(1, Hq, Hkv, Lq, Lk, D);
    p.causal = causal;
    const sdpa_tensor tq = tview_tensor(&q), tk = tview_tensor(&k), tv = tview_tensor(&v),
                      to = tview_tensor(&o);
    const size_t out_bytes = o.n_elems * sizeof(float);
    float *ref = tl_xmalloc(out_bytes);

    CHECK(sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to) == SDPA_OK, "plain call failed");
    memcpy(ref, o.buf, out_bytes);

    size_t need = 0;
    CHECK(sdpa_impl_workspace_size(impl, &p, &tq, &tk, &tv, &to, &need) == SDPA_OK && need > 0,
          "size query failed (%zu bytes)", need);
    /* an odd offset: the library must align inside the buffer it is given */
    unsigned char *mem = tl_xmalloc(need + 3);
    const size_t sizes[2] = {need, need / 2}; /* enough, and too small (falls back to its own) */
    for (int s = 0; s < 2; s++) {
        p.workspace = mem + 3;
        p.workspace_bytes = sizes[s] == need ? need : sizes[s];
        tl_fill_sentinel(o.buf, o.n_elems);
        CHECK(sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to) == SDPA_OK,
              "call with %zu-byte workspace failed", p.workspace_bytes);
        CHECK(
            memcmp(ref, o.buf, out_bytes) == 0,
            "Hq%zu Hkv%zu Lq%zu Lk%zu D%zu: output with a %s workspace differs from the plain call",
            Hq, Hkv, Lq, Lk, D, s == 0 ? "sufficient" : "too small");
    }
    /* a workspace overlapping the output is refused before anything is written */
    tl_fill_sentinel(o.buf, o.n_elems);
    p.workspace = o.buf;
    p.workspace_bytes = need;
    char msg[160] = "";
    const sdpa_status st = sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to);
    CHECK(st == SDPA_ERR_INVALID_ARGUMENT, "overlapping workspace: status %d (%s)", (int)st,
          sdpa_status_str(st));
    CHECK(sdpa_validate(&p, &tq, &tk, &tv, &to, msg, sizeof msg) == st && msg[0] != '\0',
          "validate disagrees or gives no message");
    size_t touched = 0;
    for (size_t e = 0; e < o.n_elems; e++) touched += !tl_is_sentinel(((float *)o.buf)[e]);
    CHECK(touched == 0, "refused call wrote %zu output elements", touched);

    free(mem), free(ref);
    tview_free(&q), tview_free(&k), tview_free(&v), tview_free(&o);
}

static void test_workspace(const sdpa_impl *impl)
{
    run_case(impl, 4, 4, 70, 70, 32, SDPA_F32, true);   /* prefill, several query blocks */
    run_case(impl, 8, 2, 1, 5000, 64, SDPA_F16, false); /* decode: split-K partial states too */
    run_case(impl, 2, 1, 3, 2100, 16, SDPA_BF16, true); /* a few queries over a split KV */
}

int main(void)
{
    tl_header("caller-owned workspace");
    tl_for_each_impl("workspace", test_workspace);
    return tl_finish();
}
