/* decode_q.c -- the AVX-512 decode path for K or V in a block format (shared/decode_q.h) */
#include "avx512.h"
#include "decode_q_part.h" /* before decode_q.h: the score instances' prefix */

/* the fused softmax, and p = 0 written for the keys past the row's limit (rows_loop.h) */
static inline float softmax_avx512_q(float *s, size_t nv, size_t nb, float *m, float *l)
{
    const float alpha = softmax_avx512(1, s, nv, m, l);
    for (size_t j = nv; j < nb; j++) s[j] = 0.0f;
    return alpha;
}

#define SDPA_QD_FN      decode_q_loop_avx512
#define SDPA_QD_SOFTMAX softmax_avx512_q
#define SDPA_QD_PART    2 /* the score instances are decode_q_scores.c's */
#include "decode_q.h"

#if SDPA_QD_VNNI
void sdpa_decode_q_avx512_vnni(const sdpa_rows *w) { decode_q_loop_avx512(w); }
#else
void sdpa_decode_q_avx512(const sdpa_rows *w) { decode_q_loop_avx512(w); }
size_t sdpa_decode_q_ws_avx512(size_t rows, size_t d) { return QD_WS_FLOATS(rows, d); }
void sdpa_dequant_avx512(sdpa_dtype type, const void *src, float *dst, size_t n)
{
    qd_dequant(type, src, dst, n);
}
#endif
