/* vnni_scores.c -- avx512-vnni: the score instances of its block-format decode path (fast int8
 * scores by vpdpbusd), apart from vnni.c as decode_q_scores.c is from decode_q.c */
#define SDPA_QD_VNNI 1
#include "decode_q_scores.c"
