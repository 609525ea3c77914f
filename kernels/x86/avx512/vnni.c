/* vnni.c -- avx512-vnni: the avx512 implementation, with fast int8 scores by vpdpbusd (AVX512-VNNI)
 */
#define SDPA_QD_VNNI 1
#include "decode_q.c"

/* A decode unit with fast scores takes the VNNI instance of the block-format decode path; every
   other unit is the avx512 implementation's. */
static void rows_avx512_vnni(const sdpa_rows *w)
{
    if (w->qq && w->rows <= DECODE_MAX_ROWS)
        sdpa_decode_q_avx512_vnni(w);
    else
        sdpa_rows_avx512(w);
}

#include "kernel_def.h"

/* the avx512 table, its rows entry overridden */
SDPA_DEFINE_KERNELS_FROM(avx512_vnni, avx512, EXP_MAX_ULP, .rows = rows_avx512_vnni);
