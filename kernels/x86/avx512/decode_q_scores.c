/* decode_q_scores.c -- the score instances of the AVX-512 block-format decode path
 * (shared/decode_q.h, part 1): apart from decode_q.c so that each compiles in half the time */
#include "avx512.h"
#include "decode_q_part.h" /* before decode_q.h: the instances' prefix */

#define SDPA_QD_PART 1
#include "decode_q.h"
