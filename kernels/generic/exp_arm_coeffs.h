/* exp_arm_coeffs.h -- the constants of the exp shared by the neon and sve kernels (same operations, same bits) */
#ifndef SDPA_EXP_ARM_COEFFS_H
#define SDPA_EXP_ARM_COEFFS_H

/* e^x = 2^n * e^r with n = round(x / ln2), r = x - n*ln2 in [-ln2/2, ln2/2].
   Cody-Waite: LN2_HI keeps 16 significant bits, so n*LN2_HI is exact for |n| <= 150 and
   x - n*LN2_HI is exact (Sterbenz); only the LN2_LO step rounds, by at most 2^-25 of r. */
#define EXP_LOG2E 0x1.715476p+0f
#define EXP_LN2_HI 0x1.62e4p-1f
#define EXP_LN2_LO 0x1.7f7d1cp-20f
/* e^r ~ 1 + r + r^2 (C2 + r C3 + r^2 C4 + r^3 C5 + r^4 C6) on [-ln2/2, ln2/2]: a minimax fit of
   the relative error with the first two terms fixed at 1 (so exp(0) = 1 exactly); after rounding
   the coefficients to float the fit's own relative error is 5.4e-9, about 0.05 ULP. */
#define EXP_C3 0x1.5554aep-3f
#define EXP_C4 0x1.555602p-5f
#define EXP_C5 0x1.122e24p-7f
#define EXP_C6 0x1.6c5b36p-10f

#endif /* SDPA_EXP_ARM_COEFFS_H */
