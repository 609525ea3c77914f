/* decode_pv.c -- the AVX-512 decode's P·V (decode_pv.h) for f32 and f16 V, and its dispatcher */
#include "decode_pv.h"

PV_DECODE_FNS(F32)
PV_DECODE_FNS(F16)
static pv_avx512_decode_fn *const pv_avx512_decode_fns[2][DECODE_MAX_ROWS] = {
    DECODE_ROW8(pv_avx512_decode, F32), DECODE_ROW8(pv_avx512_decode, F16)};

void sdpa_pv_decode_avx512(size_t R, float *acc, size_t dv, const float *alpha, const float *S,
                           const void *v, const sdpa_pages *vp, sdpa_dtype vt, ptrdiff_t vs,
                           size_t j0, const size_t *nk, decode_pf *pf, size_t ja0, size_t ja1,
                           int half)
{
    if (R < 1 || R > DECODE_MAX_ROWS) return;
    if (vt == SDPA_BF16)
        sdpa_pv_decode_avx512_bf16(R, acc, dv, alpha, S, v, vp, vs, j0, nk, pf, ja0, ja1, half);
    else
        pv_avx512_decode_fns[decode_type_ix(vt)][R - 1](acc, dv, alpha, S, v, vp, vs, j0, nk, pf,
                                                        ja0, ja1, half);
}
