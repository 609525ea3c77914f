/* plan.c -- sdpa_make_plan: a call's work items, sequence table, KV chunks and workspace layout */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "driver.h"

_Static_assert(sizeof(atomic_uint) % sizeof(float) == 0, "counters laid out in floats");

/* Sequence b's query and key counts: packed, padded or the call's own. */
static size_t seq_lq(const sdpa_params *p, size_t b)
{
    return p->cu_q ? p->cu_q[b + 1] - p->cu_q[b] : p->q_lens ? p->q_lens[b] : p->q_len;
}
static size_t seq_lk(const sdpa_params *p, size_t b)
{
    return p->cu_kv ? p->cu_kv[b + 1] - p->cu_kv[b] : p->kv_lens ? p->kv_lens[b] : p->kv_len;
}

/* The last sequence whose first item is <= t: the one holding item t, since a sequence with
   none shares its first item with the next. */
size_t sdpa_seq_of(const plan *pl, size_t t)
{
    size_t lo = 0, hi = pl->B - 1;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo + 1) / 2;
        if (pl->seq[mid].item0 <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Work item t: sequence, KV head, query block and KV chunk (the chunk varies fastest). */
item sdpa_item_at(const plan *pl, size_t t)
{
    item it;
    it.b = sdpa_seq_of(pl, t);
    it.sq = &pl->seq[it.b];
    it.local = t - it.sq->item0;
    size_t u = it.local;
    it.chunk = u % it.sq->n_chunks;
    u /= it.sq->n_chunks;
    const size_t qblk = u % it.sq->n_qblk;
    it.kvh = u / it.sq->n_qblk;
    it.i0 = qblk * pl->qb;
    it.qn = it.sq->lq - it.i0 < pl->qb ? it.sq->lq - it.i0 : pl->qb;
    return it;
}

/* Bytes per element of a storage type (a fraction for the block formats), for estimates. */
static double elem_bytes(sdpa_dtype t)
{
    return (double)sdpa_block_bytes(t) / (double)sdpa_block_elems(t);
}

/* A sequence of one query block and at least SPLIT_MIN_KV keys is split into KV chunks. */
static bool splittable(const plan *pl, size_t lq, size_t lk)
{
    return lq >= 1 && lq <= pl->qb && lk >= SPLIT_MIN_KV;
}

/* Walks the sequences: their items, partial slots and merge groups, in batch order, with the
   counts checked; fills pl->seq when it is set. */
bool sdpa_walk_seqs(plan *pl, size_t *n_items, size_t *n_parts, size_t *n_groups)
{
    size_t items = 0, parts = 0, groups = 0;
    pl->max_chunks = 1;
    for (size_t b = 0; b < pl->B; b++) {
        seqinfo s = {0};
        s.lq = seq_lq(pl->p, b), s.lk = seq_lk(pl->p, b);
        s.q0 = pl->p->cu_q ? pl->p->cu_q[b] : 0;
        s.k0 = pl->p->cu_kv ? pl->p->cu_kv[b] : 0;
        s.n_qblk = (s.lq + pl->qb - 1) / pl->qb;
        s.n_chunks = splittable(pl, s.lq, s.lk) ? (s.lk + pl->chunk - 1) / pl->chunk : 1;
        s.item0 = items, s.part0 = parts, s.grp0 = groups;
        size_t n;
        if (!mul_sz(pl->Hkv, s.n_qblk, &n) || !mul_sz(n, s.n_chunks, &n) ||
            !add_sz(items, n, &items))
            return false;
        if (s.n_chunks > 1) {
            parts += n; /* <= items: cannot overflow */
            groups += pl->Hkv;
            if (s.n_chunks > pl->max_chunks) pl->max_chunks = s.n_chunks;
        }
        if (pl->seq) pl->seq[b] = s;
    }
    *n_items = items, *n_parts = parts, *n_groups = groups;
    return true;
}

/* Plans a validated call on an implementation; sets *floats to the scratch it needs (per-thread
   workspaces, the split-K partial states, the sequence table), in floats. Depends on the
   problem and the implementation only, never on the thread count except for the number of
   workspaces, one for each of `threads` (>= 1). */
sdpa_status sdpa_make_plan(const sdpa_impl *impl, const sdpa_params *p, const sdpa_tensor *q,
                           const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_tensor *o,
                           size_t threads, plan *pl, size_t *floats)
{
    memset(pl, 0, sizeof *pl);
    pl->k = impl->k;
    pl->B = p->batch, pl->Hq = p->q_heads, pl->Hkv = p->kv_heads, pl->G = p->q_heads / p->kv_heads;
    pl->Lq = p->q_len, pl->Lk = p->kv_len, pl->D = p->head_dim;
    pl->Dv = p->v_dim ? p->v_dim : p->head_dim;
    pl->scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)p->head_dim);
    pl->causal = p->causal;
    /* a window at least as wide as every sequence (|i' - j| < q_len + kv_len always) is none:
       that also keeps the window edges, i' +- w, far from overflow */
    pl->window = p->window < pl->Lq + pl->Lk ? p->window : 0;
    pl->mods = p->softcap > 0.0f || p->alibi_slopes || p->mask;
    pl->p = p;
    pl->q = q, pl->kt = k, pl->vt = v, pl->o = o, pl->lse = p->lse;

    /* Everything below depends on the problem only, never on the thread count: that is what
       makes the result bitwise identical for any number of threads. */
    pl->qb = pl->G >= ROWS_TARGET ? 1 : ROWS_TARGET / pl->G;
    if (pl->qb > pl->Lq) pl->qb = pl->Lq;
    pl->R = pl->qb * pl->G;
    /* One chunk size for the call: the longest (an item starts its K/V streams cold) that
       still leaves SPLIT_ITEMS items among the splittable sequences' KV heads; short sequences
       stay whole. From the problem alone, never the thread count. */
    double kv_keys = 0; /* keys read over all sequences (only compared, below) */
    size_t longest = 0, lk_max = 0;
    for (size_t b = 0; b < pl->B; b++) {
        const size_t lq = seq_lq(p, b), lk = seq_lk(p, b);
        if (lq) kv_keys += (double)lk;
        if (lk > lk_max) lk_max = lk;
        if (splittable(pl, lq, lk) && lk > longest) longest = lk;
    }
    pl->chunk = SIZE_MAX;
    if (longest) {
        pl->chunk = SPLIT_CHUNK_MIN;
        for (;;) {
            size_t n = 0;
            for (size_t b = 0; b < pl->B && n < SPLIT_ITEMS; b++) {
                const size_t lq = seq_lq(p, b), lk = seq_lk(p, b);
                if (splittable(pl, lq, lk)) n += pl->Hkv * (lk / (2 * pl->chunk));
            }
            if (pl->chunk >= SPLIT_CHUNK_MAX || pl->chunk >= longest || n < SPLIT_ITEMS) break;
            pl->chunk *= 2;
        }
    }
    pl->block = sdpa_plan_block(pl->D, pl->Dv);
    {
        /* the K and V bytes the call reads (in double: a product of validated sizes, only
           compared) against STREAM_BYTES, a fixed size rather than the detected L3 (which in a
           virtual machine can be the host's total), so the same problem takes the same path */
        const double kv = (double)pl->Hkv * kv_keys *
                          ((double)pl->D * elem_bytes(pl->kt->dtype) +
                           (double)pl->Dv * elem_bytes(pl->vt->dtype));
        pl->stream = kv > (double)STREAM_BYTES;
    }
    size_t n_items, n_parts, n_groups;
    if (!sdpa_walk_seqs(pl, &n_items, &n_parts, &n_groups)) return SDPA_ERR_OVERFLOW;

    const size_t lim_floats = round16(pl->R * sizeof(size_t) / sizeof(float) + 1);
    const size_t kws = pl->k->ws_floats(pl->R, pl->D, pl->Dv, pl->block);
    const size_t row_ptrs = /* floats of 2R size_t, R ptrdiff_t, R pointers and 2R floats */
        round16(pl->R *
                (2 * sizeof(size_t) + sizeof(ptrdiff_t) + sizeof(void *) + 2 * sizeof(float)) /
                sizeof(float));
    size_t ws_floats, pf = 0, st, tab;
    pl->lim_off = round16(pl->R * pl->D);
    pl->state_off = pl->lim_off + lim_floats;
    pl->pf_off = pl->state_off + round16(pl->R * (pl->Dv + 2));
    pl->var_off = pl->pf_off + round16(2 * pl->R * sizeof(sdpa_span) / sizeof(float));
    pl->reb_off = pl->var_off + row_ptrs;
    pl->mptr_off = pl->reb_off + row_ptrs;
    size_t stage = 0;
    pl->quant = sdpa_dtype_quantized(k->dtype) || sdpa_dtype_quantized(v->dtype);
    if ((pl->quant && pl->k->quant_rows < pl->R) ||
        (p->block_table && p->page_size < STAGE_MAX_PAGE)) {
        /* units whose K/V the kernel cannot read in place: block formats dequantized to f32,
           short pages gathered (validated products: D, Dv, STAGE_KEYS far from overflow) */
        const size_t kb = pl->quant ? sizeof(float) : sdpa_block_bytes(k->dtype);
        const size_t vb = pl->quant ? sizeof(float) : sdpa_block_bytes(v->dtype);
        pl->stage_keys = STAGE_KEYS;
        stage = STAGE_KEYS * (pl->D * kb + pl->Dv * vb) / sizeof(float);
    }
    if (p->block_table) {
        /* units the kernel pages itself: their page lists */
        const size_t pages = (lk_max + p->page_size - 1) / p->page_size; /* <= max_pages */
        pl->ptab_off = round16(stage);
        stage = pl->ptab_off + round16(2 * pages * sizeof(void *) / sizeof(float));
    }
    if (!mul_sz(pl->max_chunks, 3 * sizeof(void *) / sizeof(float), &st) ||
        !add_sz(pl->mptr_off, round16(st), &pl->stage_off) ||
        !add_sz(pl->stage_off, round16(stage), &pl->kws_off) ||
        !add_sz(pl->kws_off, round16(kws), &pl->mul_off) ||
        !add_sz(pl->mul_off, round16(pl->R), &pl->qq_off) ||
        !add_sz(pl->qq_off, p->q8_scores ? qq_floats(pl->R, pl->D) : 0, &pl->ws_stride) ||
        !mul_sz(pl->ws_stride, threads, &ws_floats) ||
        !mul_sz(n_parts, pl->R * (pl->Dv + 2), &pf) ||
        !add_sz(ws_floats, round16(pf), &pl->seq_off) ||
        !mul_sz(pl->B, sizeof(seqinfo) / sizeof(float), &tab) ||
        !add_sz(pl->seq_off, round16(tab), &pl->done_off) ||
        !add_sz(pl->done_off, round16(n_groups * sizeof(atomic_uint) / sizeof(float)), floats) ||
        *floats > SIZE_MAX / sizeof(float) - 64)
        return SDPA_ERR_OVERFLOW;
    pl->n_items = n_items;
    pl->n_groups = n_groups;
    pl->partial_off = ws_floats;
    return SDPA_OK;
}
