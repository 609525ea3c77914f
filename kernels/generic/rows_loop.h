/* rows_loop.h -- the ISA-independent fused tile loop (blocking, causal masking, online-softmax bookkeeping) */
/*
 * Included by an implementation's translation unit after it defines, as static inline functions
 * compiled for its ISA (so that they inline into the loop below):
 *
 *   SDPA_KPAD(d)                       floats per packed key row (>= d), a macro
 *   void  pack_k(const sdpa_rows *w, size_t j0, size_t nb, float *kp)
 *         converts keys [j0, j0 + nb) to f32 in the ISA's packed layout in kp
 *         (room: nb * SDPA_KPAD(d) floats, 64-byte aligned)
 *   void  score_tile(const float *q, size_t ra, size_t d, const float *kp, size_t nb,
 *                    float *S, size_t lds)
 *         S[r * lds + j] = dot(q[r * d ..], key j) for r < ra, j < nb
 *   float softmax_row(float *s, size_t n, float *m, float *l)
 *         the online-softmax primitive (sdpa.h contract)
 *   const float *pack_v(const sdpa_rows *w, size_t j0, size_t nb, float *vp, ptrdiff_t *vs)
 *         f32 rows of values [j0, j0 + nb): either straight from w->v (f32) or converted into vp
 *         (room: nb * dv floats); *vs receives the row stride in floats. Instead, an ISA may
 *         define SDPA_ROW_TO_F32(src, element_offset, n, dtype, dst), its converter of one
 *         f16/bf16 row, and take the pack_v below
 *   void  pv_tile(float *acc, size_t dv, const float *alpha, const float *P, size_t lds,
 *                 size_t ra, const float *v, ptrdiff_t vs, size_t nb)
 *         acc[r] = alpha[r] * acc[r] + sum_j P[r * lds + j] * v[j * vs ..] for r < ra
 *
 * and SDPA_ROWS_FN / SDPA_WS_FN, the names to give the two functions defined here.
 */
#include <math.h>

#include "kernel_table.h"

#ifndef SDPA_ROWS_ALIGN
#define SDPA_ROWS_ALIGN 16 /* floats: 64 bytes, so every sub-buffer starts on a cache line */
#endif

#ifdef SDPA_ROW_TO_F32
/* f32 values are used in place; f16/bf16 rows are converted into vp (the dtype a constant in
   each loop, so the converter specialises when it inlines). */
static const float *pack_v(const sdpa_rows *w, size_t j0, size_t nb, float *vp, ptrdiff_t *vs)
{
    const ptrdiff_t stride = w->v_stride;
    if (w->v_type == SDPA_F32) {
        *vs = stride;
        return (const float *)w->v + (ptrdiff_t)j0 * stride;
    }
    const size_t dv = w->dv;
    *vs = (ptrdiff_t)dv;
    if (w->v_type == SDPA_F16)
        for (size_t j = 0; j < nb; j++)
            SDPA_ROW_TO_F32(w->v, (ptrdiff_t)(j0 + j) * stride, dv, SDPA_F16, vp + j * dv);
    else
        for (size_t j = 0; j < nb; j++)
            SDPA_ROW_TO_F32(w->v, (ptrdiff_t)(j0 + j) * stride, dv, SDPA_BF16, vp + j * dv);
    return vp;
}
#endif

static inline size_t sdpa_rows_round(size_t n)
{
    return (n + SDPA_ROWS_ALIGN - 1) / SDPA_ROWS_ALIGN * SDPA_ROWS_ALIGN;
}

/* Scratch layout: S [rows][lds], kp [block][KPAD(d)], vp [block][dv], alpha [rows]. */
static size_t SDPA_WS_FN(size_t rows, size_t d, size_t dv, size_t block)
{
    size_t lds = sdpa_rows_round(block);
    return rows * lds + sdpa_rows_round(block * SDPA_KPAD(d)) + sdpa_rows_round(block * dv) +
           sdpa_rows_round(rows);
}

static void SDPA_ROWS_FN(const sdpa_rows *w)
{
    const size_t R = w->rows, d = w->d, dv = w->dv, B = w->block;
    const size_t lds = sdpa_rows_round(B);
    float *S = w->ws;
    float *kp = S + R * lds;
    float *vp = kp + sdpa_rows_round(B * SDPA_KPAD(d));
    float *alpha = vp + sdpa_rows_round(B * dv);
    size_t r0 = 0; /* rows before r0 see none of the current block (limits are non-decreasing) */

    for (size_t j0 = w->kv_begin; j0 < w->kv_end; j0 += B) {
        const size_t nb = (w->kv_end - j0 < B) ? w->kv_end - j0 : B;
        while (r0 < R && w->kv_limit[r0] <= j0) r0++;
        if (r0 == R) break;
        const size_t ra = R - r0;
        float *Sa = S + r0 * lds;

        pack_k(w, j0, nb, kp);
        score_tile(w->q + r0 * d, ra, d, kp, nb, Sa, lds);
        for (size_t r = r0; r < R; r++) {
            float *s = S + r * lds;
            const size_t lim = w->kv_limit[r];
            /* the diagonal tile: keys past this row's limit get weight exactly 0 */
            if (lim < j0 + nb)
                for (size_t j = lim - j0; j < nb; j++) s[j] = -INFINITY;
            alpha[r] = softmax_row(s, nb, &w->m[r], &w->l[r]);
        }
        ptrdiff_t vs;
        const float *vr = pack_v(w, j0, nb, vp, &vs);
        pv_tile(w->acc + r0 * dv, dv, alpha + r0, Sa, lds, ra, vr, vs, nb);
    }
}
