/* decode_ilv.h -- the planning of the decode's interleaved turns (decode_values_ilv of the AVX2
 * and AVX-512 decodes): which next keys a block's P·V may score, and where those keys live */
#ifndef SDPA_DECODE_ILV_H
#define SDPA_DECODE_ILV_H

#include <stddef.h>

#include "kernel_table.h"
#include "kernel_util.h"

/* Where the turns find keys: a view's own rows (pg NULL, key j at row j of k and v), or a paged
   unit's pages (key j at row j % size of page j / size). Keys at or past kend are never
   requested; turn: keys per turn. */
typedef struct sdpa_ilv_keys {
    const sdpa_pages *pg;
    const void *k, *v;
    size_t kend;
    size_t turn;
} sdpa_ilv_keys;

/* The block scored ahead: keys [j0, j0 + n) of k (a K view, or the paged unit whose pieces the
   hooks get), in the score scratch's first n columns; n = 0: none. */
typedef struct sdpa_ilv_pre {
    const void *k;
    size_t j0, n;
} sdpa_ilv_pre;

/* The K (v = 0) or V array holding key j of x in *base, and j's row there. */
static inline size_t sdpa_ilv_page(const sdpa_ilv_keys *x, int v, size_t j, const void **base)
{
    if (!x->pg) {
        *base = v ? x->v : x->k;
        return j;
    }
    size_t row;
    *base = sdpa_page_at(x->pg, v, j, &row);
    return row;
}

/* Keys [j, j + n) of x cut at kend and at the end of j's page: their array in *base, the first
   one's row there (returned) and the row past the last one that may be requested (*jend). From
   kend on none, at row 0 of the first array: x may list no page past kend's. */
static inline size_t sdpa_ilv_span(const sdpa_ilv_keys *x, int v, size_t j, const void **base,
                                   size_t *jend)
{
    if (j >= x->kend) {
        *base = !x->pg ? (v ? x->v : x->k) : (v ? x->pg->v : x->pg->k)[0];
        *jend = 0;
        return 0;
    }
    const size_t lj = sdpa_ilv_page(x, v, j, base);
    size_t left = x->kend - j; /* j < kend: checked above */
    if (x->pg) left = sdpa_min(left, x->pg->size - lj);
    *jend = lj + left;
    return lj;
}

/* What the view w's keys are part of (the paged unit of a piece, a paged unit itself, else its
   own K). */
static inline const void *sdpa_ilv_id(const sdpa_rows *w)
{
    return w->piece_of ? (const void *)w->piece_of : w->pages ? (const void *)w : w->k;
}

/* Whether keys [j0, j0 + nb) of the view w, whose scores go o columns into the scratch, were
   scored ahead (then the loop's score hook has nothing to do); a miss forgets the block. */
static inline int sdpa_ilv_pre_hit(sdpa_ilv_pre *p, const sdpa_rows *w, size_t j0, size_t nb,
                                   size_t o)
{
    if (!p->n) return 0;
    const size_t a = w->piece_of ? w->piece_base + j0 : j0;
    if (sdpa_ilv_id(w) == p->k && a >= o && a - o == p->j0 && o + nb <= p->n) return 1;
    p->n = 0;
    return 0;
}

/* Whether turns of at most `turn` keys fit the pages of the paged unit P: a turn is a page, or
   pages hold whole turns. Every part of a unit that fails it takes the block order. */
static inline int sdpa_ilv_pages_ok(const sdpa_rows *P, size_t turn)
{
    const size_t ps = P->pages->size;
    return ps % sdpa_min(ps, turn) == 0;
}

/* Whether the P·V of keys [j0, j0 + nb) of the view w (scores o columns into the scratch; every
   row sees them all) may score the next block's keys at the same place, B keys per block, and
   where: x, and in it the first key of the part (*a0) and the next block's keys to score
   ([*jn, *jn + *nbn)). The next block must lie whole before kend, the rows' end, so that the
   loop scores it, and exactly it, next, in the same tiles. A paged unit's block comes in parts
   (its pages, or the block within a page): each part extends the keys scored ahead (*pre, of
   which the part at offset o must find o keys done) from its own offset, and a turn is a page
   when pages hold fewer than `turn` keys. pre is cleared at a block's first part. */
static inline int sdpa_ilv_plan(const sdpa_rows *w, size_t j0, size_t nb, size_t o, size_t B,
                                size_t kend, size_t turn, sdpa_ilv_pre *pre, sdpa_ilv_keys *x,
                                size_t *a0, size_t *jn, size_t *nbn)
{
    if (!o) pre->n = 0; /* a block's first part: what was scored ahead is used */
    const sdpa_rows *P = w->piece_of;
    if (!P) { /* a view of its own: a block per call */
        *x = (sdpa_ilv_keys){NULL, w->k, w->v, kend, turn};
        *a0 = j0, *jn = j0 + nb;
        *nbn = w->kv_end > *jn ? sdpa_min(B, w->kv_end - *jn) : 0;
        return o == 0 && nb == B && *nbn && *jn + *nbn <= kend;
    }
    const size_t ps = P->pages->size, full = ps >= B ? B : B / ps * ps, T = sdpa_min(ps, turn);
    *x = (sdpa_ilv_keys){P->pages, NULL, NULL, sdpa_min(P->kv_end, P->kv_limit[P->rows - 1]), T};
    *a0 = w->piece_base + j0;
    if (!sdpa_ilv_pages_ok(P, turn) || *a0 < o || sdpa_page_block(P, *a0 - o, B) != full) return 0;
    const size_t b1 = *a0 - o + full, n1 = sdpa_page_block(P, b1, B);
    if (!n1 || n1 > full || b1 + n1 > x->kend || o >= n1) return 0;
    if (o && !(pre->k == (const void *)P && pre->j0 == b1 && pre->n == o)) return 0;
    *jn = b1 + o, *nbn = sdpa_min(nb, n1 - o);
    return 1;
}

/* Records the keys a part's turns scored ahead (sdpa_ilv_plan's a part at offset o). */
static inline void sdpa_ilv_scored(sdpa_ilv_pre *pre, const sdpa_rows *w, size_t o, size_t jn,
                                   size_t nbn)
{
    pre->k = sdpa_ilv_id(w), pre->j0 = jn - o, pre->n = o + nbn;
}

#endif /* SDPA_DECODE_ILV_H */
