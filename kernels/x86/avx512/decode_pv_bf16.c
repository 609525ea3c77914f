/* decode_pv_bf16.c -- the AVX-512 decode's P·V (decode_pv.h) for bf16 V */
#include "decode_pv.h"

PV_DECODE_FNS(BF16)
static pv_avx512_decode_fn *const pv_avx512_decode_bf16_fns[DECODE_MAX_ROWS] =
    DECODE_ROW8(pv_avx512_decode, BF16);

void sdpa_pv_decode_avx512_bf16(size_t R, float *acc, size_t dv, const float *alpha, const float *S,
                                const void *v, const sdpa_pages *vp, ptrdiff_t vs, size_t j0,
                                const size_t *nk, decode_pf *pf, size_t ja0, size_t ja1, int half)
{
    if (R >= 1 && R <= DECODE_MAX_ROWS)
        pv_avx512_decode_bf16_fns[R - 1](acc, dv, alpha, S, v, vp, vs, j0, nk, pf, ja0, ja1, half);
}
