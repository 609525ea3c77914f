/* test_tanh.c -- every implementation's tanh over every finite float against the double tanh() */
#include "testlib.h"

#include "ulp_sweep.h"

/*
 * The domain is every finite non-negative float, as bit patterns 0x00000000 (+0) ...
 * 0x7f7fffff (FLT_MAX): 2,139,095,040 values, enumerated by index i -> bits i. It includes the
 * whole range where tanh does not round to 1 (below about 9.01) and everything beyond it. Each
 * value is checked against the stated bound, and its negation bit for bit against the negated
 * result (tanh(-x) = -tanh(x)), so together every finite float is covered; infinities and NaN
 * are the special-value test's.
 *
 * Error measure as in ulp_sweep.h, against tanh((double)x) (0 for x = 0). The double tanh() is
 * accurate to a few double ULPs, 2^-28 float ULPs, negligible at the resolution of the bound
 * being checked.
 *
 * Besides the bound, every chunk is checked on its negation and, every IN_PLACE_EVERY-th chunk,
 * in place (y == x). SDPA_TANH_STRIDE=N checks every Nth float instead. When it is unset and
 * SDPA_EXP_STRIDE=S is set (as the slow emulated runs do), the stride is 4S + 1: twice the exp
 * test's domain at twice its calls per value, and odd, so that the sample still meets every
 * pattern of low mantissa bits. The default 1 is exhaustive.
 */
#define LAST_BITS      0x7f7fffffu /* FLT_MAX */
#define IN_PLACE_EVERY 16

/* Per thread and implementation, the checks beyond the bound. */
typedef struct more_result {
    uint64_t n_odd_bad; /* x whose tanh(-x) is not -tanh(x) bit for bit */
    uint32_t odd_bits[US_MAX_SHOWN];
    float odd_yp[US_MAX_SHOWN], odd_yn[US_MAX_SHOWN];
    uint64_t n_in_place;     /* values also computed in place */
    uint64_t n_in_place_bad; /* ... with other bits than out of place */
    uint32_t in_place_bits;  /* the first of them */
} more_result;

static more_result more_results[US_THREADS][US_MAX_IMPLS];

/* How many of a[i], b[i] differ in their bits by other than flip (0: equal bits). */
US_NOT_SANITIZED static uint64_t count_unlike(const float *a, const float *b, uint32_t flip,
                                              uint64_t cnt)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < cnt; i++) {
        uint32_t ua, ub;
        memcpy(&ua, &a[i], sizeof ua);
        memcpy(&ub, &b[i], sizeof ub);
        bad += (ua ^ ub) != flip;
    }
    return bad;
}

/* -x for every x of the chunk, bit for bit (x >= 0 here). */
US_NOT_SANITIZED static void negate(float *xn, const float *x, uint64_t cnt)
{
    for (uint64_t i = 0; i < cnt; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        b |= 0x80000000u;
        memcpy(&xn[i], &b, sizeof b);
    }
}

/* Oddness and in place for implementation m on a chunk whose y = tanh(x) the sweep checked.
   Scratch: -x (made at the first implementation, kept for the others), tanh(-x), in-place. */
static void more_checks(us_sweep *s, const us_chunk *ck, size_t m)
{
    const sdpa_impl *impl = s->impls[m];
    more_result *r = &more_results[ck->thread][m];
    const float *x = ck->x, *y = ck->y;
    float *xn = ck->scratch[0], *yn = ck->scratch[1], *w = ck->scratch[2];
    const uint64_t cnt = ck->cnt;
    if (m == 0) negate(xn, x, cnt);

    sdpa_impl_tanh_f32(impl, xn, yn, cnt);
    if (count_unlike(y, yn, 0x80000000u, cnt) != 0)
        for (uint64_t i = 0; i < cnt; i++) {
            if ((tl_bits(y[i]) ^ tl_bits(yn[i])) == 0x80000000u) continue;
            if (r->n_odd_bad < US_MAX_SHOWN) {
                r->odd_bits[r->n_odd_bad] = tl_bits(x[i]);
                r->odd_yp[r->n_odd_bad] = y[i];
                r->odd_yn[r->n_odd_bad] = yn[i];
            }
            r->n_odd_bad++;
        }

    if (ck->index % IN_PLACE_EVERY == 0) {
        memcpy(w, x, cnt * sizeof(float));
        sdpa_impl_tanh_f32(impl, w, w, cnt);
        const uint64_t bad = count_unlike(y, w, 0, cnt);
        if (bad != 0 && r->n_in_place_bad == 0)
            for (uint64_t i = 0; i < cnt; i++)
                if (tl_bits(y[i]) != tl_bits(w[i])) {
                    r->in_place_bits = tl_bits(x[i]);
                    break;
                }
        r->n_in_place_bad += bad;
        r->n_in_place += cnt;
    }
}

static us_sweep sweep = {
    .name = "tanh",
    .first_bits = 0,
    .span = (uint64_t)LAST_BITS + 1,
    .ref = tanh,
    .run = sdpa_impl_tanh_f32,
    .bound = sdpa_impl_tanh_max_ulp,
    .more = more_checks,
    .n_scratch = 3,
};

/* +-0 -> +-0, +-inf -> +-1, NaN -> NaN, the extremes of the finite and subnormal ranges, alone and
   in every lane of a vector whose other lanes must be what they are alone. */
static void test_special(const sdpa_impl *impl)
{
    const float specials[] = {0.0f,     -0.0f,   INFINITY, -INFINITY,    NAN,
                              -NAN,     FLT_MAX, -FLT_MAX, FLT_TRUE_MIN, -FLT_TRUE_MIN,
                              -FLT_MIN, 9.5f,    -20.0f};
    const float want[] = {0.0f,  -0.0f,        1.0f,          -1.0f,    NAN,  NAN,  1.0f,
                          -1.0f, FLT_TRUE_MIN, -FLT_TRUE_MIN, -FLT_MIN, 1.0f, -1.0f};
    const size_t n_sp = sizeof specials / sizeof specials[0];
    float x[37], y[37], alone[37];
    for (size_t i = 0; i < 37; i++) {
        x[i] = (i % 2 ? -0.3f : 0.3f) * (float)i;
        sdpa_impl_tanh_f32(impl, &x[i], &alone[i], 1);
    }
    for (size_t si = 0; si < n_sp && !tl_give_up(); si++) {
        for (size_t n = 1; n <= 37; n += 6) {
            for (size_t pos = 0; pos < n; pos++) {
                float xs[37];
                memcpy(xs, x, sizeof xs);
                xs[pos] = specials[si];
                sdpa_impl_tanh_f32(impl, xs, y, n);
                const bool ok =
                    isnan(want[si]) ? isnan(y[pos]) : tl_bits(y[pos]) == tl_bits(want[si]);
                if (!CHECK(ok, "tanh(%g) = %.9g (0x%08x) at lane %zu of %zu, want %g", specials[si],
                           y[pos], tl_bits(y[pos]), pos, n, want[si]))
                    break;
                for (size_t i = 0; i < n; i++)
                    if (i != pos)
                        CHECK(tl_bits(y[i]) == tl_bits(alone[i]),
                              "lane %zu of %zu: tanh(%g) = %.9g next to tanh(%g), %.9g alone", i, n,
                              x[i], y[i], specials[si], alone[i]);
            }
        }
    }
}

/* Every length up to 70 and 1000, out of place and in place, with the arrays ending at a guard
   page: in place gives the same bits, nothing outside [0, n) is read past or written, x is
   left as it was. */
static void test_in_place(const sdpa_impl *impl)
{
    enum { MAX_N = 1000, PAD = 16 };
    tl_guard gx = tl_guard_alloc(MAX_N * sizeof(float)),
             gy = tl_guard_alloc((MAX_N + PAD) * sizeof(float)),
             gz = tl_guard_alloc(MAX_N * sizeof(float));
    float *keep = tl_xmalloc(MAX_N * sizeof(float));
    tl_rng rng = {7};
    for (size_t li = 0; li <= 70 && !tl_give_up(); li++) {
        const size_t n = li < 70 ? li + 1 : MAX_N;
        float *x = tl_guard_end(&gx, n * sizeof(float));
        float *yb = tl_guard_end(&gy, (n + PAD) * sizeof(float)), *y = yb + PAD;
        float *z = tl_guard_end(&gz, n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            const uint64_t k = tl_next(&rng);
            /* mostly [-12, 12], then tiny values, and any bit pattern */
            x[i] = k % 8 < 6    ? tl_uniform(&rng, -12.0f, 12.0f)
                   : k % 8 == 6 ? tl_uniform(&rng, -1e-20f, 1e-20f)
                                : tl_from_bits((uint32_t)(k >> 32));
        }
        memcpy(keep, x, n * sizeof(float));
        memcpy(z, x, n * sizeof(float));
        tl_fill_sentinel(yb, n + PAD);
        sdpa_impl_tanh_f32(impl, x, y, n);
        sdpa_impl_tanh_f32(impl, z, z, n);
        for (size_t i = 0; i < PAD; i++)
            CHECK(tl_is_sentinel(yb[i]), "n=%zu: y[%td] was written", n, (ptrdiff_t)i - PAD);
        for (size_t i = 0; i < n; i++) {
            if (!CHECK(tl_bits(x[i]) == tl_bits(keep[i]), "n=%zu: x[%zu] changed", n, i)) break;
            if (!CHECK(
                    tl_bits(z[i]) == tl_bits(y[i]),
                    "n=%zu: tanh(%.9g) in place %.9g (0x%08x), out of place %.9g (0x%08x) at %zu",
                    n, x[i], z[i], tl_bits(z[i]), y[i], tl_bits(y[i]), i))
                break;
        }
    }
    free(keep);
    tl_guard_free(&gx);
    tl_guard_free(&gy);
    tl_guard_free(&gz);
}

static const char *const points[] = {"tanh over [+0, FLT_MAX]", "tanh odd over every finite float",
                                     "tanh in place"};

static void report(const sdpa_impl *impl, size_t m)
{
    const char *name = sdpa_impl_name(impl);
    const us_result all = us_merge(&sweep, m);
    more_result more = {0};
    for (size_t t = 0; t < US_THREADS; t++) {
        const more_result *r = &more_results[t][m];
        us_keep_shown(more.odd_bits, more.n_odd_bad, r->odd_bits, r->n_odd_bad,
                      sizeof r->odd_bits[0]);
        us_keep_shown(more.odd_yp, more.n_odd_bad, r->odd_yp, r->n_odd_bad, sizeof r->odd_yp[0]);
        us_keep_shown(more.odd_yn, more.n_odd_bad, r->odd_yn, r->n_odd_bad, sizeof r->odd_yn[0]);
        more.n_odd_bad += r->n_odd_bad;
        if (more.n_in_place_bad == 0) more.in_place_bits = r->in_place_bits;
        more.n_in_place_bad += r->n_in_place_bad;
        more.n_in_place += r->n_in_place;
    }

    tl_start(points[0], name);
    us_report(&sweep, m, &all, sweep.n_values);
    tl_end();

    tl_start(points[1], name);
    CHECK(more.n_odd_bad == 0, "%llu values x >= 0 with tanh(-x) other than -tanh(x) bit for bit",
          (unsigned long long)more.n_odd_bad);
    for (uint64_t b = 0; b < more.n_odd_bad && b < US_MAX_SHOWN; b++)
        printf("#   x=%.9g (0x%08x): tanh(x) %.9g, tanh(-x) %.9g\n", tl_from_bits(more.odd_bits[b]),
               more.odd_bits[b], more.odd_yp[b], more.odd_yn[b]);
    tl_end();

    tl_start(points[2], name);
    CHECK(more.n_in_place_bad == 0,
          "%llu of %llu values differ in place from out of place, the first at x=%.9g (0x%08x)",
          (unsigned long long)more.n_in_place_bad, (unsigned long long)more.n_in_place,
          tl_from_bits(more.in_place_bits), more.in_place_bits);
    test_in_place(impl);
    tl_end();
}

int main(void)
{
    tl_header("tanh of every implementation, every finite float");
    const char *stride_from = "SDPA_TANH_STRIDE";
    uint64_t stride = 1;
    if (!us_parse_stride("SDPA_TANH_STRIDE", &stride) &&
        us_parse_stride("SDPA_EXP_STRIDE", &stride)) {
        stride = 4 * stride + 1;
        stride_from = "4 SDPA_EXP_STRIDE + 1";
    }
    if (!us_plan_and_run(&sweep, stride, stride_from, "[+0, FLT_MAX] and their negations",
                         "tanh special values", test_special))
        return 1;
    /* three test points per registered implementation, skips included */
    us_report_each(points, 3, report);
    return tl_finish();
}
