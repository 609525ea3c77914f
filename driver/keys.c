/* keys.c -- sdpa_run_keys: an item's keys to the kernel: in place, kernel-paged, staged, in runs */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>

#include "driver.h"
#include "key_shift.h"

static size_t sdpa_min(size_t a, size_t b) { return a < b ? a : b; }

static void prefetch_row(const char *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
}

/* Row `row` of physical page P of a K or V view t whose data is d (KV head offset h, in
   elements). */
static const char *page_row(const char *d, const sdpa_tensor *t, ptrdiff_t P, ptrdiff_t h,
                            ptrdiff_t row)
{
    return d + sdpa_off_bytes(t->dtype, P * t->batch_stride + h + row * t->token_stride);
}

/* Key j's row of the item's KV head in the K or V view t (head offset h, in elements): in its
   page, at its packed token, or in its batch. */
static const char *kv_row(const plan *pl, const item *it, const sdpa_tensor *t, ptrdiff_t h,
                          size_t j)
{
    const sdpa_params *p = pl->p;
    if (p->block_table) {
        const int32_t *tab = p->block_table + it->b * p->max_pages;
        return page_row(t->data, t, tab[j / p->page_size], h, (ptrdiff_t)(j % p->page_size));
    }
    const ptrdiff_t base =
        p->cu_kv ? (ptrdiff_t)(it->sq->k0 + j) * t->token_stride
                 : (ptrdiff_t)it->b * t->batch_stride + (ptrdiff_t)j * t->token_stride;
    return (const char *)t->data + sdpa_off_bytes(t->dtype, base + h);
}

/* One staged row: a block format dequantized to f32 (deq: by the kernel's own vector code when
   it has one), anything else copied as it is. */
static void stage_row(const plan *pl, char *dst, const char *src, sdpa_dtype t, size_t n, bool deq)
{
    if (deq && sdpa_dtype_quantized(t) && pl->k->dequant)
        pl->k->dequant(t, src, (float *)(void *)dst, n);
    else if (deq && sdpa_dtype_quantized(t))
        sdpa_row_to_f32(src, t, 0, 0, n, (float *)(void *)dst);
    else
        memcpy(dst, src, (size_t)sdpa_off_bytes(t, (ptrdiff_t)n));
}

/* Where a paged sequence's page pg and the next are one run of key rows in both K and V. */
static bool pages_adjacent(const plan *pl, const int32_t *tab, size_t pg)
{
    const ptrdiff_t ps = (ptrdiff_t)pl->p->page_size;
    return tab[pg + 1] == tab[pg] + 1 && pl->kt->batch_stride == ps * pl->kt->token_stride &&
           pl->vt->batch_stride == ps * pl->vt->token_stride;
}

/* Runs the kernel on keys [c0, c1) of the item's KV head. Contiguous K/V: one unit. Paged:
   one unit with the item's page list (sdpa_rows.pages) when the kernel walks pages itself
   (sdpa_kernels.paged_rows); otherwise short pages are gathered into a dense copy, STAGE_KEYS
   keys per unit, and longer ones handed over one unit per run of adjacent pages. K or V in a
   block format, for a unit the kernel cannot read them in (sdpa_kernels.quant_rows): staged,
   dequantized exactly to f32, STAGE_KEYS keys per unit, whatever the layout. Those units
   are rebased so that their first row is key 0 (limits, window starts, positions and mask rows
   shifted with it): a kernel only ever addresses rows it is given, and the online-softmax
   state carries from unit to unit. */
void sdpa_run_keys(const plan *pl, const item *it, sdpa_rows *w, size_t c0, size_t c1, float *reb,
                   float *stage)
{
    const sdpa_params *p = pl->p;
    const char *kd = pl->kt->data, *vd = pl->vt->data;
    const sdpa_dtype kt = pl->kt->dtype, vt = pl->vt->dtype;
    const ptrdiff_t kh = (ptrdiff_t)it->kvh * pl->kt->head_stride,
                    vh = (ptrdiff_t)it->kvh * pl->vt->head_stride;
    const size_t ps = p->page_size, R = w->rows;
    /* K or V in a block format the kernel does not read for units of R rows: staged, dequantized */
    const bool deq = pl->quant && R > pl->k->quant_rows;
    if (!p->block_table && !deq) {
        w->k = kv_row(pl, it, pl->kt, kh, 0);
        w->v = kv_row(pl, it, pl->vt, vh, 0);
        w->kv_begin = c0, w->kv_end = c1;
        pl->k->rows(w);
        return;
    }
    const int32_t *tab = p->block_table ? p->block_table + it->b * p->max_pages : NULL;
    if (tab && !deq && ps % 16 == 0 && R <= pl->k->paged_rows) {
        /* the kernel walks the pages itself (pages of a multiple of 16 keys keep every piece
           of a key block aligned, see sdpa_pages): their row 0 for this KV head, listed */
        const size_t p0 = c0 / ps, np = (c1 - 1) / ps - p0 + 1;
        const void **kp = (const void **)(void *)(stage + pl->ptab_off), **vp = kp + np;
        for (size_t i = 0; i < np; i++) {
            kp[i] = page_row(kd, pl->kt, tab[p0 + i], kh, 0);
            vp[i] = page_row(vd, pl->vt, tab[p0 + i], vh, 0);
        }
        float *ones = (float *)(void *)((size_t *)(void *)reb + 4 * R);
        for (size_t r = 0; r < R; r++) ones[r] = 1.0f;
        const sdpa_pages pages = {kp, vp, p0, ps, reb, ones};
        w->pages = &pages;
        w->k = w->v = NULL;
        w->kv_begin = c0, w->kv_end = c1;
        pl->k->rows(w);
        w->pages = NULL;
        return;
    }
    sdpa_rows u; /* the unit of the keys handed over, rebased in reb (sdpa_key_shift) */
    sdpa_mods um;
    if (deq || (tab && ps < STAGE_MAX_PAGE)) {
        /* rows gathered (short pages) or dequantized to f32 (block formats), stage_keys at a
           time, into a dense copy the kernel reads as one unit (keys [s0, s1) at rows
           [0, s1 - s0) of the copy) */
        const size_t n_st = (c1 - c0 + pl->stage_keys - 1) / pl->stage_keys;
        const sdpa_dtype skt = deq && sdpa_dtype_quantized(kt) ? SDPA_F32 : kt;
        const sdpa_dtype svt = deq && sdpa_dtype_quantized(vt) ? SDPA_F32 : vt;
        const size_t krow = (size_t)sdpa_off_bytes(skt, (ptrdiff_t)pl->D),
                     vrow = (size_t)sdpa_off_bytes(svt, (ptrdiff_t)pl->Dv);
        const size_t kin = (size_t)sdpa_off_bytes(kt, (ptrdiff_t)pl->D),
                     vin = (size_t)sdpa_off_bytes(vt, (ptrdiff_t)pl->Dv);
        char *sk = (char *)(void *)stage, *sv = sk + pl->stage_keys * krow;
        for (size_t si = 0; si < n_st; si++) {
            const size_t s0 = c0 + (w->reverse ? n_st - 1 - si : si) * pl->stage_keys;
            const size_t s1 = s0 + pl->stage_keys < c1 ? s0 + pl->stage_keys : c1;
            for (size_t j = s0; j < s1; j++) {
                const size_t ja = j + STAGE_PF_KEYS; /* requested ahead: pages are scattered */
                if (ja < c1) {
                    prefetch_row(kv_row(pl, it, pl->kt, kh, ja), kin);
                    prefetch_row(kv_row(pl, it, pl->vt, vh, ja), vin);
                }
                stage_row(pl, sk + (j - s0) * krow, kv_row(pl, it, pl->kt, kh, j), kt, pl->D, deq);
                stage_row(pl, sv + (j - s0) * vrow, kv_row(pl, it, pl->vt, vh, j), vt, pl->Dv, deq);
            }
            sdpa_key_shift(w, s0, reb, &u, &um);
            u.k = sk, u.v = sv, u.k_stride = (ptrdiff_t)pl->D, u.v_stride = (ptrdiff_t)pl->Dv;
            u.k_type = skt, u.v_type = svt;
            u.kv_begin = 0, u.kv_end = s1 - s0;
            pl->k->rows(&u);
        }
        return;
    }
    const size_t pg_lo = c0 / ps, pg_hi = (c1 - 1) / ps; /* the pages [c0, c1) touches */
    /* runs taken from the last when the unit scans backwards (the cache hint of sdpa_rows) */
    for (size_t pg = w->reverse ? pg_hi : pg_lo;;) {
        size_t a = pg, e = pg; /* the run's pages [a, e] */
        if (w->reverse)
            while (a > pg_lo && pages_adjacent(pl, tab, a - 1)) a--;
        else
            while (e < pg_hi && pages_adjacent(pl, tab, e)) e++;
        const size_t base = a * ps, j0 = base > c0 ? base : c0,
                     j1 = (e + 1) * ps < c1 ? (e + 1) * ps : c1;
        sdpa_key_shift(w, base, reb, &u, &um);
        const ptrdiff_t page = tab[a];
        u.k = page_row(kd, pl->kt, page, kh, 0);
        u.v = page_row(vd, pl->vt, page, vh, 0);
        u.kv_begin = j0 - base, u.kv_end = j1 - base;
        const bool last = w->reverse ? a == pg_lo : e == pg_hi;
        if (!last) {
            /* the next run's first keys, requested now: a kernel streams only the keys it is
               given, so without this every run would start on a cold line */
            const size_t np = w->reverse ? a - 1 : e + 1;
            const size_t nk = sdpa_min(ps, PAGE_PF_KEYS);
            const size_t n0 = np * ps < c0 ? c0 - np * ps : 0;
            const ptrdiff_t P = tab[np];
            for (size_t j = n0; j < nk && np * ps + j < c1; j++) {
                prefetch_row(page_row(kd, pl->kt, P, kh, (ptrdiff_t)j),
                             (size_t)sdpa_off_bytes(kt, (ptrdiff_t)pl->D));
                prefetch_row(page_row(vd, pl->vt, P, vh, (ptrdiff_t)j),
                             (size_t)sdpa_off_bytes(vt, (ptrdiff_t)pl->Dv));
            }
        }
        pl->k->rows(&u);
        if (last) break;
        pg = w->reverse ? a - 1 : e + 1;
    }
}
