/* test_exp.c -- every implementation's exp over every float in [-104, 0] against the double exp()
 */
#include "testlib.h"

#include "ulp_sweep.h"

/*
 * The softmax only ever takes exp of x <= 0, and below about -103.97 the exact result is under
 * half the least subnormal, so [-104, 0] is the whole domain where the result is not 0 by
 * rounding. As bit patterns that is +0 and then 0x80000000 (-0) ... 0xc2d00000 (-104):
 * 1,120,927,745 floats, enumerated by index i -> bits 0x80000000 + i (index 0 being -0), plus +0
 * checked separately.
 *
 * Error measure as in ulp_sweep.h, against exp((double)x) (a normal double over the whole range).
 * The double exp() is accurate to well under one double ULP, 2^-29 float ULPs, which is
 * negligible at the resolution of the bound being checked.
 *
 * SDPA_EXP_STRIDE=N checks every Nth float instead (for slow emulated runs); the default 1 is
 * exhaustive.
 */
#define FIRST_BITS 0x80000000u
#define LAST_BITS  0xc2d00000u /* -104.0f */

static us_sweep sweep = {
    .name = "exp",
    .first_bits = FIRST_BITS,
    .span = (uint64_t)(LAST_BITS - FIRST_BITS) + 1,
    .ref = exp,
    .run = sdpa_impl_exp_f32,
    .bound = sdpa_impl_exp_max_ulp,
};

/* exp(0) = 1, exp(-0) = 1, exp(-inf) = 0, NaN -> NaN, exactly, alone and in every lane of a vector
 */
static void test_special(const sdpa_impl *impl)
{
    const float specials[] = {0.0f, -0.0f, -INFINITY, NAN};
    const float want[] = {1.0f, 1.0f, 0.0f, NAN};
    float x[37], y[37];
    for (size_t si = 0; si < 4; si++) {
        for (size_t n = 1; n <= 37; n += 6) {
            for (size_t pos = 0; pos < n; pos++) {
                for (size_t i = 0; i < n; i++) x[i] = -0.5f * (float)i;
                x[pos] = specials[si];
                sdpa_impl_exp_f32(impl, x, y, n);
                bool ok = isnan(want[si]) ? isnan(y[pos]) : y[pos] == want[si];
                if (!CHECK(ok, "exp(%g) = %.9g at lane %zu of %zu, want %g", specials[si], y[pos],
                           pos, n, want[si]))
                    break;
            }
        }
    }
}

static const char *const points[] = {"exp over [-104, 0]"};

static void report(const sdpa_impl *impl, size_t m)
{
    const us_result all = us_merge(&sweep, m);
    /* +0, which the enumeration (all negative) does not include */
    float zero = 0.0f, y0;
    sdpa_impl_exp_f32(impl, &zero, &y0, 1);

    tl_start(points[0], sdpa_impl_name(impl));
    us_report(&sweep, m, &all, sweep.n_values + 1);
    CHECK(y0 == 1.0f, "exp(+0) = %.9g, want 1", y0);
    tl_end();
}

int main(void)
{
    tl_header("exp of every implementation, every float in [-104, 0]");
    uint64_t stride = 1;
    us_parse_stride("SDPA_EXP_STRIDE", &stride);
    if (!us_plan_and_run(&sweep, stride, "SDPA_EXP_STRIDE", "[-104, -0] plus +0",
                         "exp special values", test_special))
        return 1;
    /* one test point per registered implementation, skips included */
    us_report_each(points, 1, report);
    return tl_finish();
}
