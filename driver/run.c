/* run.c -- sdpa_forward and siblings: validate, plan, run the items on the caller's pool, merge */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* Query i's position among its sequence's keys, i' = i + lk - lq (bottom-right alignment; sizes
   are validated to fit, so it fits in ptrdiff_t). */
static ptrdiff_t q_pos(const seqinfo *sq, size_t i)
{
    return (ptrdiff_t)i + (ptrdiff_t)sq->lk - (ptrdiff_t)sq->lq;
}

static size_t clamp_keys(const seqinfo *sq, ptrdiff_t j)
{
    return j <= 0 ? 0 : (size_t)j < sq->lk ? (size_t)j : sq->lk;
}

/* Keys query row i may see: [kv_first(i), kv_limit(i)), both non-decreasing in i: causal
   j <= i', window |i' - j| < w, and the sequence's own keys. */
static size_t kv_limit(const plan *pl, const seqinfo *sq, size_t i)
{
    if (pl->causal) return clamp_keys(sq, q_pos(sq, i) + 1);
    if (pl->window) return clamp_keys(sq, q_pos(sq, i) + (ptrdiff_t)pl->window);
    return sq->lk;
}
static size_t kv_first(const plan *pl, const seqinfo *sq, size_t i)
{
    return pl->window ? clamp_keys(sq, q_pos(sq, i) - (ptrdiff_t)pl->window + 1) : 0;
}

/* dst = scale * src, each product rounded once to float; returns the power of two 2^e the row's
   scores must be multiplied by: 1, but where the largest product M = max|scale * src| (finite,
   non-zero) leaves float's normal range. M > FLT_MAX: e > 0 brings it to [2^126, 2^127), the
   least scaling that avoids the overflow, so that every score that fits stays in range; M below
   FLT_MIN: e < 0 brings it to [1, 2), keeping 126 binades below it. Powers of two scale exactly,
   so the scores are those of the exact products, rounded as the plain ones would be. */
static float scale_row(float *restrict dst, const float *restrict src, float scale, size_t n)
{
    /* max |src| as the largest magnitude bit pattern (an integer max, which vectorises); a NaN
       or inf element makes M non-finite, and the row takes the plain product */
    typedef uint32_t __attribute__((may_alias)) bits32;
    const bits32 *sb = (const bits32 *)src;
    uint32_t mb = 0;
    for (size_t c = 0; c < n; c++) {
        const uint32_t a = sb[c] & 0x7fffffffu;
        mb = a > mb ? a : mb;
    }
    float mx;
    memcpy(&mx, &mb, sizeof mx);
    const double M = (double)mx * fabs((double)scale);
    if (M != 0.0 && isfinite(M) && (M < FLT_MIN || M > FLT_MAX)) {
        int e;
        (void)frexp(M, &e); /* M = f 2^e, f in [0.5, 1) */
        e = M > FLT_MAX ? e - 127 : e - 1;
        e = e < -126 ? -126 : e > 127 ? 127 : e; /* 2^e a normal float: M in [2^-252, 2^255) */
        /* scale * 2^-e * src is exact in double (48 significant bits, exponent well in range) */
        const double f = ldexp((double)scale, -e);
        for (size_t c = 0; c < n; c++) dst[c] = (float)(f * (double)src[c]);
        return ldexpf(1.0f, e);
    }
    for (size_t c = 0; c < n; c++) dst[c] = scale * src[c];
    return 1.0f;
}

/* Fast scores (q8_scores): a scaled query row quantized per 32-block, d = max |x| / 127 (f32)
   and q = x (1 / d) rounded to nearest even, so |d q - x| <= d / 2 plus float rounding; a block
   with a non-finite element gets d = NaN, which makes every score of the row NaN, as a NaN
   query would (a block whose 1 / d overflows, below 2^-128 of FLT_MAX, gets quants 0). */
static void quantize_row(const float *x, size_t n, int8_t *q, float *qd)
{
    for (size_t b = 0; b < n; b += SDPA_QK, x += SDPA_QK, q += SDPA_QK) {
        float amax = 0.0f;
        bool finite = true;
        for (size_t i = 0; i < SDPA_QK; i++) {
            const float a = fabsf(x[i]);
            finite = finite && a <= FLT_MAX;
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.0f;
        qd[b / SDPA_QK] = finite ? d : NAN;
        if (!finite || d == 0.0f || !isfinite(1.0f / d)) {
            memset(q, 0, SDPA_QK);
            continue;
        }
        /* t = x (1/d), |t| <= 127 (1 + 2^-22), rounded to nearest even by adding and taking
           away 1.5 2^23: plain float arithmetic that vectorises, no libm call */
        const float id = 1.0f / d;
        for (size_t i = 0; i < SDPA_QK; i++) {
            const float t = x[i] * id, r = (t + 0x1.8p23f) - 0x1.8p23f;
            q[i] = (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
        }
    }
}

/* One work item: pack the scaled queries of every head of the group (query-major, so the key
   limits are non-decreasing), run the implementation's fused kernel over the item's KV range,
   then either finish the rows (no split) or leave the partial state for the merge. */
void sdpa_run_item(void *arg, size_t t, size_t thread)
{
    const plan *pl = arg;
    const item it = sdpa_item_at(pl, t);
    const seqinfo *sq = it.sq;
    const size_t R = it.qn * pl->G, D = pl->D, Dv = pl->Dv;
    const bool split = sq->n_chunks > 1;
    float *ws = pl->ws + thread * pl->ws_stride;
    float *qp = ws;
    size_t *lim = (size_t *)(void *)(ws + pl->lim_off);
    float *state =
        split ? pl->partial + (sq->part0 + it.local) * pl->R * (Dv + 2) : ws + pl->state_off;
    float *m = state, *l = state + R, *acc = state + 2 * R;
    float *mul = ws + pl->mul_off;
    bool scaled = false;
    /* the variants' per-row arrays: window starts, positions, slopes, mask rows */
    size_t *first = (size_t *)(void *)(ws + pl->var_off);
    ptrdiff_t *pos = (ptrdiff_t *)(first + pl->R);
    const void **mrow = (const void **)(pos + pl->R);
    float *slope = (float *)(mrow + pl->R), *mscale = slope + pl->R;
    const sdpa_params *p = pl->p;
    const sdpa_tensor *mk = p->mask;

    for (size_t i = 0; i < it.qn; i++) {
        const size_t li = kv_limit(pl, sq, it.i0 + i), fi = kv_first(pl, sq, it.i0 + i);
        for (size_t g = 0; g < pl->G; g++) {
            const size_t r = i * pl->G + g, h = it.kvh * pl->G + g;
            const float *qrow = f32_row(pl, pl->q, sq, it.b, h, it.i0 + i);
            mul[r] = scale_row(qp + r * D, qrow, pl->scale, D);
            scaled |= mul[r] != 1.0f;
            lim[r] = li;
            first[r] = fi;
            pos[r] = q_pos(sq, it.i0 + i);
            if (p->alibi_slopes) slope[r] = p->alibi_slopes[h];
            if (p->mask_scales) mscale[r] = p->mask_scales[h];
            if (mk)
                mrow[r] = (const char *)mk->data +
                          ((ptrdiff_t)it.b * mk->batch_stride + (ptrdiff_t)h * mk->head_stride +
                           (ptrdiff_t)(it.i0 + i) * mk->token_stride) *
                              (ptrdiff_t)sdpa_block_bytes(mk->dtype);
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
    }
    const sdpa_mods mods = {
        .softcap = p->softcap,
        /* 0 where 1 / softcap overflows: the kernels then divide */
        .inv_softcap = p->softcap > 0.0f && isfinite(1.0f / p->softcap) ? 1.0f / p->softcap : 0.0f,
        .slope = p->alibi_slopes ? slope : NULL,
        .pos = pos,
        .mask = mk ? mrow : NULL,
        .mask_type = mk ? mk->dtype : SDPA_F32,
        .mask_scale = mk && p->mask_scales ? mscale : NULL,
    };
    memset(acc, 0, R * Dv * sizeof *acc);

    /* what this thread most likely touches next: the rows it writes when the kernel returns
       (unsplit problems) and the next item's query rows (its own next item when run serially) */
    sdpa_span *pf = (sdpa_span *)(void *)(ws + pl->pf_off);
    size_t n_pf = 0;
    if (!split)
        for (size_t r = 0; r < R; r++) {
            const size_t h = it.kvh * pl->G + r % pl->G, i = it.i0 + r / pl->G;
            pf[n_pf].p = f32_row(pl, pl->o, sq, it.b, h, i);
            pf[n_pf++].bytes = Dv * sizeof(float);
        }
    if (t + 1 < pl->n_items) {
        const item nx = sdpa_item_at(pl, t + 1);
        if (nx.chunk == 0)
            for (size_t r = 0; r < nx.qn * pl->G; r++) {
                const size_t h = nx.kvh * pl->G + r % pl->G, i = nx.i0 + r / pl->G;
                pf[n_pf].p = f32_row(pl, pl->q, nx.sq, nx.b, h, i);
                pf[n_pf++].bytes = D * sizeof(float);
            }
    }

    /* a split sequence's chunk, or all of an unsplit one's keys */
    size_t c0 = split ? it.chunk * pl->chunk : 0;
    size_t c1 = split && c0 + pl->chunk < sq->lk ? c0 + pl->chunk : sq->lk;
    if (c0 < first[0]) c0 = first[0];     /* keys left of every row's window are never read */
    if (c1 > lim[R - 1]) c1 = lim[R - 1]; /* keys no row of the item sees are never read */
    int8_t *qq = NULL;
    float *qd = NULL;
    if (p->q8_scores && c0 < c1) {
        qq = (int8_t *)(void *)(ws + pl->qq_off);
        qd = ws + pl->qq_off + qq_scales_off(R, D);
        for (size_t r = 0; r < R; r++)
            quantize_row(qp + r * D, D, qq + r * D, qd + r * (D / SDPA_QK));
        if (R > pl->k->quant_rows) {
            /* a kernel that stages K takes the quantized rows as f32 values: the same scores
               up to float rounding (d_q q is exact to 2^-24, the products of the quants exact) */
            for (size_t r = 0; r < R; r++)
                for (size_t c = 0; c < D; c++)
                    qp[r * D + c] = qd[r * (D / SDPA_QK) + c / SDPA_QK] * (float)qq[r * D + c];
            qq = NULL, qd = NULL;
        }
    }
    if (c0 < c1) {
        sdpa_rows w = {
            .rows = R,
            .d = D,
            .dv = Dv,
            .q = qp,
            .kv_limit = lim,
            .kv_first = pl->window ? first : NULL,
            .mods = pl->mods ? &mods : NULL,
            .score_mul = scaled ? mul : NULL,
            .k_stride = pl->kt->token_stride,
            .v_stride = pl->vt->token_stride,
            .k_type = pl->kt->dtype,
            .v_type = pl->vt->dtype,
            .qq = qq,
            .qd = qd,
            .m = m,
            .l = l,
            .acc = acc,
            .ws = ws + pl->kws_off,
            .block = pl->block,
            .pf = pf,
            .n_pf = n_pf,
            /* consecutive query blocks of the same KV head scan their keys in alternate
               directions: each starts where the previous one ended, on keys still in cache */
            .reverse = (int)(it.i0 / pl->qb % 2),
            .stream = pl->stream,
        };
        sdpa_run_keys(pl, &it, &w, c0, c1, ws + pl->reb_off, ws + pl->stage_off);
    }
    if (split) {
        /* the group's last chunk to finish merges it: the counter's release-acquire chain makes
           every chunk's partial state visible to that thread, whichever it is, and the merge
           reads the parts in chunk order, so the result is the same on any thread count */
        if (atomic_fetch_add_explicit(&pl->done[sq->grp0 + it.kvh], 1, memory_order_acq_rel) + 1 ==
            sq->n_chunks)
            sdpa_merge_group(pl, it.b, it.kvh, thread);
        return;
    }
    for (size_t r = 0; r < R; r++)
        sdpa_finish_row(pl, sq, it.b, it.kvh * pl->G + r % pl->G, it.i0 + r / pl->G, m[r], l[r],
                        acc + r * Dv);
}

static void run_all(const sdpa_params *p, size_t n, sdpa_task_fn fn, plan *pl)
{
    if (p->parallel_for) {
        p->parallel_for(p->pool, n, fn, pl);
    } else {
        for (size_t t = 0; t < n; t++) fn(pl, t, 0);
    }
}

/* Validates and plans a call with `threads` workspaces; *bytes is the scratch it needs. */
sdpa_status sdpa_setup_call(const sdpa_impl *impl, const sdpa_params *p, const sdpa_tensor *q,
                            const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_tensor *o,
                            size_t threads, plan *pl, size_t *bytes)
{
    sdpa_status s = sdpa_validate(p, q, k, v, o, NULL, 0);
    if (s != SDPA_OK) return s;
    if (!impl) return SDPA_ERR_INVALID_ARGUMENT;
    if (!sdpa_impl_supported(impl)) return SDPA_ERR_UNSUPPORTED;
    size_t floats;
    if ((s = sdpa_make_plan(impl, p, q, k, v, o, threads, pl, &floats)) != SDPA_OK) return s;
    *bytes = floats * sizeof(float);
    return SDPA_OK;
}

/* The caller's workspace, aligned up to 64 bytes, when it holds `bytes` from there; else NULL. */
float *sdpa_caller_workspace(const sdpa_params *p, size_t bytes)
{
    if (!p->workspace) return NULL;
    const uintptr_t base = ((uintptr_t)p->workspace + 63) & ~(uintptr_t)63;
    const size_t pad = (size_t)(base - (uintptr_t)p->workspace);
    return p->workspace_bytes >= pad && p->workspace_bytes - pad >= bytes ? (float *)base : NULL;
}

/* Points a plan's views (partial states, sequence table, merge counters) into its scratch ws,
   laid out as planned. */
void sdpa_plan_views(plan *pl, float *ws)
{
    pl->ws = ws;
    pl->partial = pl->ws + pl->partial_off;
    pl->seq = (seqinfo *)(void *)(pl->ws + pl->seq_off);
    pl->done = (atomic_uint *)(void *)(pl->ws + pl->done_off);
}

/* Lays a plan's scratch out in ws (64-byte aligned), writes its sequence table there and zeroes
   its merge counters. */
void sdpa_attach_workspace(plan *pl, float *ws)
{
    sdpa_plan_views(pl, ws);
    size_t n_items, n_parts, n_groups;
    (void)sdpa_walk_seqs(pl, &n_items, &n_parts, &n_groups); /* as planned: the counts fit */
    for (size_t g = 0; g < n_groups; g++) atomic_init(&pl->done[g], 0);
}

sdpa_status sdpa_impl_workspace_size(const sdpa_impl *impl, const sdpa_params *p,
                                     const sdpa_tensor *q, const sdpa_tensor *k,
                                     const sdpa_tensor *v, const sdpa_tensor *o, size_t *bytes)
{
    sdpa_status s = sdpa_validate(p, q, k, v, o, NULL, 0);
    if (s != SDPA_OK) return s;
    if (!impl || !bytes) return SDPA_ERR_INVALID_ARGUMENT;
    plan pl;
    size_t floats;
    const size_t threads = p->n_threads ? p->n_threads : 1;
    if ((s = sdpa_make_plan(impl, p, q, k, v, o, threads, &pl, &floats)) != SDPA_OK) return s;
    *bytes = floats * sizeof(float) + 64; /* room to align a caller's buffer to 64 bytes */
    return SDPA_OK;
}

sdpa_status sdpa_workspace_size(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                                const sdpa_tensor *v, const sdpa_tensor *o, size_t *bytes)
{
    return sdpa_impl_workspace_size(sdpa_active(), p, q, k, v, o, bytes);
}

sdpa_status sdpa_impl_forward(const sdpa_impl *impl, const sdpa_params *p, const sdpa_tensor *q,
                              const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_tensor *o)
{
    plan pl;
    size_t bytes;
    const size_t threads = p && p->parallel_for && p->n_threads ? p->n_threads : 1;
    sdpa_status s = sdpa_setup_call(impl, p, q, k, v, o, threads, &pl, &bytes);
    if (s != SDPA_OK) return s;
    float *ws = sdpa_caller_workspace(p, bytes);
    void *own = NULL;
    if (!ws) {
        /* no caller scratch, or too small for this call: our own, freed before returning */
        own = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!own) return SDPA_ERR_NO_MEMORY;
        ws = own;
    }
    sdpa_attach_workspace(&pl, ws);
    run_all(p, pl.n_items, sdpa_run_item, &pl); /* split groups merged by their last chunk */
    free(own);
    return SDPA_OK;
}

sdpa_status sdpa_forward(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                         const sdpa_tensor *v, const sdpa_tensor *o)
{
    return sdpa_impl_forward(sdpa_active(), p, q, k, v, o);
}
