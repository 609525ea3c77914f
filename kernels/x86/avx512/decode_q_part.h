/* decode_q_part.h -- what both parts of the AVX-512 block-format decode path agree on: the
 * instance of the path (SDPA_QD_VNNI) and the prefix of the score instances' names */
#ifndef SDPA_QD_VNNI
#define SDPA_QD_VNNI 0
#endif
#if SDPA_QD_VNNI
#define SDPA_QD_PFX avx512_vnni_
#else
#define SDPA_QD_PFX avx512_
#endif
