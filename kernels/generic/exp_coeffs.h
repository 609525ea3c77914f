/* exp_coeffs.h -- the one exp of every SIMD implementation: constants, operation order, stated
 * bound */
#ifndef SDPA_EXP_COEFFS_H
#define SDPA_EXP_COEFFS_H

/*
 * Every SIMD implementation (avx2, avx512, neon, sve) computes e^x with the same sequence of
 * correctly rounded IEEE operations, fused where marked, so all of them give the same bits:
 *
 *   x  = min(max(x, EXP_LO), EXP_HI)     (NaN passes through both clamps)
 *   nf = round_to_nearest_even(x * EXP_LOG2E)          (the product rounded first)
 *   r  = fma(-nf, EXP_LN2_HI, x);  r = fma(-nf, EXP_LN2_LO, r)
 *   q  = fma(r, C6, C5); q = fma(r, q, C4); q = fma(r, q, C3); q = fma(r, q, 0.5);
 *   q  = fma(r, q, 1);   p = fma(r, q, 1)
 *   e^x = (p * 2^n1) * 2^n2,  n1 = floor(nf / 2), n2 = nf - n1
 *
 * Cody-Waite: EXP_LN2_HI keeps 16 significant bits, so nf * EXP_LN2_HI is exact for |nf| <= 150
 * and x - nf * EXP_LN2_HI is exact (Sterbenz); only the EXP_LN2_LO step rounds, by at most 2^-25
 * of r, |r| <= ln2/2. The polynomial is a minimax fit of the relative error of e^r on
 * [-ln2/2, ln2/2] with the first two terms fixed at 1 (so exp(0) = 1 exactly); after rounding
 * the coefficients to float its own relative error is 5.4e-9, about 0.05 ULP. 2^nf is built in
 * two factors, both normal for every nf in [-150, 128]: p * 2^n1 is exact and the second product
 * rounds once, so results in the subnormal range (x in about [-103.97, -87.34]) are correctly
 * scaled, x <= EXP_LO gives 0 and x >= EXP_HI gives +inf.
 *
 * Stated bound, over every float x <= 0 (error in ULPs of the exact result, a ULP being at
 * least 2^-149): EXP_MAX_ULP, checked exhaustively over [-104, 0] on every implementation by
 * tests/test_exp.c.
 */
#define EXP_LO      -104.0f
#define EXP_HI      89.0f
#define EXP_LOG2E   0x1.715476p+0f
#define EXP_LN2_HI  0x1.62e4p-1f
#define EXP_LN2_LO  0x1.7f7d1cp-20f
#define EXP_C3      0x1.5554aep-3f
#define EXP_C4      0x1.555602p-5f
#define EXP_C5      0x1.122e24p-7f
#define EXP_C6      0x1.6c5b36p-10f
#define EXP_MAX_ULP 0.912

/*
 * The fused kernels' exp (x = s - m <= 0, -inf or NaN) is the same sequence for x >= EXP_FTZ_CUT,
 * and so the same bits there, but gives exactly 0 below it: every weight is then at least
 * e^-54 > 2^-78 (nf >= -78, 2^nf one normal factor), so a multiple of 2^-101, and its product
 * with an f16 or block-format V element (a multiple of 2^-24) a multiple of 2^-125: every P·V
 * product and partial sum over such V is 0 or normal. Why: an operation that reads a subnormal
 * takes a microcode assist on many cores, and with a cut near the subnormal range the P·V of a
 * band of tiny weights (ALiBi, distance masks) cancels into subnormals. What it drops is below
 * e^-54 = 3.5e-24 of the row maximum's weight, 1, which is in the row's sum l.
 */
#define EXP_FTZ_CUT -54.0f

#endif /* SDPA_EXP_COEFFS_H */
