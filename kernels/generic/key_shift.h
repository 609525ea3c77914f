/* key_shift.h -- a unit's keys from a base key on, as a unit of their own: one shift for all */
#ifndef SDPA_KEY_SHIFT_H
#define SDPA_KEY_SHIFT_H

#include <stddef.h>

#include "convert.h"
#include "kernel_table.h"

/* Makes *u the unit w with its key indices shifted down by base, so that u's key j is w's key
   base + j, for a caller that hands the kernel keys starting at base (a page, a run of pages,
   a staged copy). Shifted, row by row: the limits (kv_limit) and, when w has them, the window
   starts (kv_first), both saturating at 0; the modifiers' positions (pos - base, which may go
   negative) and mask rows (advanced by base entries of mask_type). They are written to scratch,
   4 * w->rows words (limits, starts, positions, mask rows, rows words each), and to *um (a
   copy of *w->mods), which u points at; a unit without starts or modifiers keeps NULL there.
   Every other field is w's: the caller sets what addresses u's keys (k, v and their layout,
   kv_begin, kv_end, pages). */
static inline void sdpa_key_shift(const sdpa_rows *w, size_t base, void *scratch, sdpa_rows *u,
                                  sdpa_mods *um)
{
    const size_t R = w->rows;
    size_t *lim = (size_t *)scratch, *first = lim + R;
    ptrdiff_t *pos = (ptrdiff_t *)(void *)(first + R);
    const void **mask = (const void **)(void *)(pos + R);
    *u = *w;
    for (size_t r = 0; r < R; r++) lim[r] = w->kv_limit[r] > base ? w->kv_limit[r] - base : 0;
    u->kv_limit = lim;
    if (w->kv_first) {
        for (size_t r = 0; r < R; r++) first[r] = w->kv_first[r] > base ? w->kv_first[r] - base : 0;
        u->kv_first = first;
    }
    if (w->mods) {
        *um = *w->mods;
        for (size_t r = 0; r < R; r++) pos[r] = w->mods->pos[r] - (ptrdiff_t)base;
        um->pos = pos;
        if (um->mask) {
            const size_t es = sdpa_block_bytes(um->mask_type);
            for (size_t r = 0; r < R; r++) mask[r] = (const char *)w->mods->mask[r] + base * es;
            um->mask = mask;
        }
        u->mods = um;
    }
}

#endif /* SDPA_KEY_SHIFT_H */
