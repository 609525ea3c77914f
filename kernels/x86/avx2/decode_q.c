/* decode_q.c -- the AVX2 decode path for K or V in a block format (shared/decode_q.h) */
#include "avx2.h"

#define SDPA_QD_FN                       decode_q_loop_avx2
#define SDPA_QD_SOFTMAX(s, nv, nb, m, l) softmax_avx2(1, s, nv, nb, m, l, NULL)
#define SDPA_QD_VNNI                     0
#include "decode_q.h"

void sdpa_decode_q_avx2(const sdpa_rows *w) { decode_q_loop_avx2(w); }
size_t sdpa_decode_q_ws_avx2(size_t rows, size_t d) { return QD_WS_FLOATS(rows, d); }
void sdpa_dequant_avx2(sdpa_dtype type, const void *src, float *dst, size_t n)
{
    qd_dequant(type, src, dst, n);
}
