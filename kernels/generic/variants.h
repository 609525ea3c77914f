/* variants.h -- the attention variants on a score tile: window start, softcap, ALiBi, mask */
#ifndef SDPA_VARIANTS_H
#define SDPA_VARIANTS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "convert.h"
#include "kernel_table.h"
#include "kernel_util.h"
#include "tanh.h"

/* Whether a unit takes the variant path: a window start or a modifier. A unit without either
   runs the plain loop, unchanged. */
static inline bool sdpa_is_variant(const sdpa_rows *w) { return w->kv_first || w->mods; }

static inline size_t sdpa_first(const sdpa_rows *w, size_t r)
{
    return w->kv_first ? w->kv_first[r] : 0;
}

static inline const void *sdpa_mask_row(const sdpa_rows *w, size_t r)
{
    return w->mods && w->mods->mask ? w->mods->mask[r] : NULL;
}

/* -inf's bits in a mask dtype. */
static inline uint32_t sdpa_ninf_bits(sdpa_dtype t)
{
    return t == SDPA_F32 ? 0xff800000u : t == SDPA_F16 ? 0xfc00u : 0xff80u;
}

/* Whether mask entry j of a row is -inf, on the bits. */
static inline bool sdpa_mask_hides(const void *row, sdpa_dtype t, size_t j)
{
    if (t == SDPA_F32) return ((const sdpa_bits32 *)row)[j] == sdpa_ninf_bits(t);
    return ((const uint16_t *)row)[j] == sdpa_ninf_bits(t);
}

/* Whether row r sees key j: inside [first, limit) and not masked by -inf. */
static inline bool sdpa_sees(const sdpa_rows *w, size_t r, size_t j)
{
    if (j < sdpa_first(w, r) || j >= w->kv_limit[r]) return false;
    const void *mr = sdpa_mask_row(w, r);
    return !mr || !sdpa_mask_hides(mr, w->mods->mask_type, j);
}

/* Whether rows [r0, r1) see none of the keys [j0, j0 + nb): each row's interval misses the
   block, or every entry of the mask in it is -inf. Such a block is neither read nor computed
   (the rows' state is unchanged). Reads the mask tile up to the first entry that is not -inf. */
static inline bool sdpa_block_hidden(const sdpa_rows *w, size_t r0, size_t r1, size_t j0, size_t nb)
{
    for (size_t r = r0; r < r1; r++) {
        const size_t a = sdpa_first(w, r) > j0 ? sdpa_first(w, r) : j0;
        const size_t b = w->kv_limit[r] < j0 + nb ? w->kv_limit[r] : j0 + nb;
        if (a >= b) continue;
        const void *mr = sdpa_mask_row(w, r);
        if (!mr) return false;
        const sdpa_dtype t = w->mods->mask_type;
        for (size_t j = a; j < b; j++)
            if (!sdpa_mask_hides(mr, t, j)) return false;
    }
    return true;
}

/* binary16 -> binary32, exact, branch-free so that a loop of it vectorises: the exponent and
   mantissa bits moved into a float's and scaled by 2^112 rebias normals and subnormals alike
   (the product is exact); inf and NaN keep their payload. */
static inline float sdpa_f16_to_f32_vec(uint16_t h)
{
    const uint32_t t = (uint32_t)(h & 0x7fffu) << 13;
    const uint32_t special = 0u - (uint32_t)((h & 0x7c00u) == 0x7c00u);
    uint32_t r = sdpa_f32_bits(sdpa_bits_f32(t) * 0x1p112f);
    r = (r & ~special) | ((0x7f800000u | t) & special);
    return sdpa_bits_f32(r | (uint32_t)(h & 0x8000u) << 16);
}

/* s[0..n) <- c tanh(s / c), with inv = 1 / c, or 0 where 1 / c overflows (c < 2^-128): then
   the division itself, as 0 * inf would make a zero score NaN. One pass, tanh inlined. */
static inline void sdpa_softcap(float *s, size_t n, float c, float inv)
{
    if (inv != 0.0f)
        for (size_t j = 0; j < n; j++) s[j] = c * sdpa_tanh1(s[j] * inv);
    else
        for (size_t j = 0; j < n; j++) s[j] = c * sdpa_tanh1(s[j] / c);
}

/* ALiBi, the mask and the window start on row r's scores of keys [j0, j0 + n), score j at
   s[j * ds] (softcap, elementwise, is the caller's, before). Keys before the row's first and
   keys the mask hides get -inf, whatever their score (a NaN from a hidden key stays out).
   Returns whether a key of the range is hidden from the row. Inlined with ds = 1 for row-major
   tiles, so that the loops vectorise. */
SDPA_INLINE bool sdpa_modify_row(const sdpa_rows *w, size_t r, size_t j0, float *s, size_t n,
                                 size_t ds)
{
    const sdpa_mods *md = w->mods;
    bool hidden = false;
    if (md && md->slope) {
        /* |pos - j| in float: exact while it is below 2^24 */
        const float sl = md->slope[r], base = (float)((ptrdiff_t)j0 - md->pos[r]);
        for (size_t j = 0; j < n; j++) s[j * ds] -= sl * fabsf(base + (float)(int32_t)j);
    }
    if (md && md->mask) {
        const void *mr = (const char *)md->mask[r] + j0 * sdpa_block_bytes((int)md->mask_type);
        uint32_t any = 0;
        /* one loop per dtype, the -inf select on the bits: each vectorises */
#define SDPA_MASK_LOOP(ELEM_T, NINF, TO_F32, SCALED)                                               \
    do {                                                                                           \
        const ELEM_T *x = mr;                                                                      \
        for (size_t j = 0; j < n; j++) {                                                           \
            const uint32_t hm = 0u - (uint32_t)(x[j] == (NINF));                                   \
            const uint32_t t = sdpa_f32_bits(s[j * ds] + SCALED(TO_F32(x[j])));                    \
            any |= hm;                                                                             \
            s[j * ds] = sdpa_bits_f32((t & ~hm) | (sdpa_ninf_bits(SDPA_F32) & hm));                \
        }                                                                                          \
    } while (0)
#define SDPA_MASK_TYPES(SCALED)                                                                    \
    do {                                                                                           \
        if (md->mask_type == SDPA_F32)                                                             \
            SDPA_MASK_LOOP(sdpa_bits32, sdpa_ninf_bits(SDPA_F32), sdpa_bits_f32, SCALED);          \
        else if (md->mask_type == SDPA_F16)                                                        \
            SDPA_MASK_LOOP(uint16_t, sdpa_ninf_bits(SDPA_F16), sdpa_f16_to_f32_vec, SCALED);       \
        else                                                                                       \
            SDPA_MASK_LOOP(uint16_t, sdpa_ninf_bits(SDPA_BF16), sdpa_bf16_to_f32, SCALED);         \
    } while (0)
#define SDPA_MASK_PLAIN(x)  (x)
#define SDPA_MASK_SCALED(x) (ms * (x))
        /* a separate loop with the factor, so that a plain mask runs exactly as without one */
        if (md->mask_scale) {
            const float ms = md->mask_scale[r];
            SDPA_MASK_TYPES(SDPA_MASK_SCALED);
        } else {
            SDPA_MASK_TYPES(SDPA_MASK_PLAIN);
        }
#undef SDPA_MASK_PLAIN
#undef SDPA_MASK_SCALED
#undef SDPA_MASK_TYPES
#undef SDPA_MASK_LOOP
        hidden = any != 0;
    }
    const size_t f = sdpa_first(w, r);
    if (f > j0) {
        const size_t nf = sdpa_min(n, f - j0);
        for (size_t j = 0; j < nf; j++) s[j * ds] = -INFINITY;
        hidden = true;
    }
    return hidden;
}

/* Every modifier on row r's row-major scores s[0..n) of keys [j0, j0 + n): softcap, then
   sdpa_modify_row; returns whether a key of them is hidden from the row. */
static inline bool sdpa_modify_scores(const sdpa_rows *w, size_t r, size_t j0, float *s, size_t n)
{
    const sdpa_mods *md = w->mods;
    if (md && md->softcap > 0.0f) sdpa_softcap(s, n, md->softcap, md->inv_softcap);
    return sdpa_modify_row(w, r, j0, s, n, 1);
}

/* acc_r = alpha acc_r + sum of p[j * ps] v_{j0 + j} over the keys j < n of the block that row r
   sees (sdpa_sees), key j0 + j's V at row vj + j of v (type vt, stride vs): the exact path of a
   block where a hidden key's V is not finite (0 * inf would be NaN), plain and rare. */
static inline void sdpa_pv_row_exact_at(const sdpa_rows *w, size_t r, size_t j0, size_t n,
                                        float alpha, const float *p, size_t ps, const void *v,
                                        sdpa_dtype vt, ptrdiff_t vs, size_t vj)
{
    const size_t dv = w->dv;
    float *acc = w->acc + r * dv;
    for (size_t c = 0; c < dv; c++) acc[c] *= alpha;
    for (size_t j = 0; j < n; j++) {
        if (!sdpa_sees(w, r, j0 + j)) continue;
        const float pj = p[j * ps];
        const ptrdiff_t off = sdpa_row_off(vs, vj + j);
        if (sdpa_dtype_quantized((int)vt)) {
            const char *x = (const char *)v + sdpa_off_bytes((int)vt, off);
            const size_t bb = sdpa_block_bytes((int)vt);
            float y[SDPA_QK];
            for (size_t b = 0; b < dv / SDPA_QK; b++) {
                sdpa_dequant_block((int)vt, x + b * bb, y);
                for (size_t c = 0; c < SDPA_QK; c++) acc[b * SDPA_QK + c] += pj * y[c];
            }
        } else if (vt == SDPA_F32) {
            const float *x = (const float *)v + off;
            for (size_t c = 0; c < dv; c++) acc[c] += pj * x[c];
        } else if (vt == SDPA_F16) {
            const uint16_t *x = (const uint16_t *)v + off;
            for (size_t c = 0; c < dv; c++) acc[c] += pj * sdpa_f16_to_f32(x[c]);
        } else {
            const uint16_t *x = (const uint16_t *)v + off;
            for (size_t c = 0; c < dv; c++) acc[c] += pj * sdpa_bf16_to_f32(x[c]);
        }
    }
}

/* The same with V read from w's own rows (key j0 + j at row j0 + j of w->v). */
static inline void sdpa_pv_row_exact(const sdpa_rows *w, size_t r, size_t j0, size_t n, float alpha,
                                     const float *p, size_t ps)
{
    sdpa_pv_row_exact_at(w, r, j0, n, alpha, p, ps, w->v, w->v_type, w->v_stride, j0);
}

#endif /* SDPA_VARIANTS_H */
