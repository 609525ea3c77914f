/* test_primitives.c -- score, online softmax and accumulate of every implementation against float64
 * oracles */
#include "testlib.h"

/* Lengths: every tail of up to three 16-wide vectors plus one, then a few larger ones. */
static const size_t lengths[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,  12,  13,
                                 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,  25,  26,
                                 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37,  38,  39,
                                 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 127, 1000};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])
#define MAX_LEN   1000

/* Head dims: every one of 1 ... 256, and 576 (MLA-style). */
static size_t dims[260];
static size_t n_dims;
#define MAX_DIM 576
#define MAX_PAD 16

static void init_dims(void)
{
    for (size_t d = 1; d <= 256; d++) dims[n_dims++] = d;
    dims[n_dims++] = 576;
}

static const size_t pads[4] = {0, 1, 7, MAX_PAD};

/* The case being checked, for the messages of near_sum and guards_kept. */
static char g_case[128];

/* A sum's result got against its float64 value ref: a sum of products in any order (FMA or
   not) is within gamma_k, so within k u mag (mag the sum of the |products|) plus the least
   subnormal. The message names element name[i] of the case g_case. */
static bool near_sum(float got, double ref, double mag, size_t k, const char *name, size_t i)
{
    const double tol = (double)k * TL_U * mag + FLT_TRUE_MIN;
    return CHECK(fabs(got - ref) <= tol, "%s: %s[%zu]=%.9g, float64 %.9g, tol %.3g", g_case, name,
                 i, got, ref, tol);
}

/* The sentinels around an output of n floats at buf + off (off 0 or 1) are untouched. */
static bool guards_kept(const float *buf, size_t off, size_t n)
{
    return tl_is_sentinel(buf[off + n]) && (off == 0 || tl_is_sentinel(buf[0]));
}

/* ------------------------------------------------------------------------------------------ */
/* score: s[j] = scale * dot(q, k_j)                                                           */
/* Tolerance: any summation order (with or without FMA, with the scale folded into q or        */
/* applied last) is within gamma_{d+2} of the exact value; we allow (d + 4) u sum|scale q k|,  */
/* u = 2^-24, plus the least subnormal.                                                         */
/* ------------------------------------------------------------------------------------------ */
static void test_score(const sdpa_impl *impl)
{
    tl_rng r = {1};
    float *qb = tl_xmalloc((MAX_DIM + 1) * sizeof(float));
    float *kb = tl_xmalloc((MAX_LEN * (MAX_DIM + MAX_PAD) + 1) * sizeof(float));
    float *sb = tl_xmalloc((MAX_LEN + 2) * sizeof(float));
    static const float scales[4] = {0.0f /* 1/sqrt(d) */, 1.0f, 0.37f, -2.5f};

    for (size_t li = 0; li < N_LENGTHS && !tl_give_up(); li++) {
        for (size_t di = 0; di < n_dims; di++) {
            if (tl_sampled_out(li * 7 + di)) continue;
            const size_t n = lengths[li], d = dims[di];
            const size_t pad = pads[(n + 3 * d) % 4], ks = d + pad;
            const size_t off = (n + d) % 2; /* unaligned by one float every other case */
            float scale = scales[(7 * n + d) % 4];
            if (scale == 0.0f) scale = 1.0f / sqrtf((float)d);
            float *q = qb + off, *k = kb + off, *s = sb + off;
            snprintf(g_case, sizeof g_case, "n=%zu d=%zu k_stride=%zu offset=%zu scale=%g", n, d,
                     ks, off, scale);
            tl_fill(&r, q, d, -1.0f, 1.0f);
            tl_fill(&r, k, (n - 1) * ks + d, -1.0f, 1.0f);
            tl_fill_sentinel(sb, MAX_LEN + 2);
            sdpa_impl_score_f32(impl, q, k, ks, n, d, scale, s);
            for (size_t j = 0; j < n; j++) {
                double ref = 0, mag = 0;
                for (size_t i = 0; i < d; i++) {
                    ref += (double)q[i] * k[j * ks + i];
                    mag += fabs((double)q[i] * k[j * ks + i]);
                }
                if (!near_sum(s[j], ref * scale, mag * fabs(scale), d + 4, "s", j)) break;
            }
            CHECK(guards_kept(sb, off, n), "%s: score wrote outside s[0..n)", g_case);
        }
    }
    free(qb), free(kb), free(sb);
}

/* ------------------------------------------------------------------------------------------ */
/* online softmax                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Allowed relative error of p = exp(s - m_new) computed in f32. Three sources, each stated:
   the f32 subtraction s - m rounds (u |s - m|); an implementation may fold log2(e) into s and m
   separately (one rounding of each, u (|s| + |m|)), which is no worse than the conditioning of
   the f32 inputs themselves; and the exp itself is within its stated bound E ULPs, an ULP
   being at most 2^-23 of the result. 1% slack covers second-order terms. */
static double p_rel_tol(double s, double m, double exp_ulp)
{
    double x = fabs(s - m);
    double arg = TL_U * (x + fabs(s) + fabs(m));
    return 1.01 * arg + (exp_ulp + 1.0) * 0x1p-23;
}

/* exp in double of the exact difference: the oracle */
static double p_ref(float s, float m) { return exp((double)s - (double)m); }

/* absolute floor of an exp result in the subnormal range: E ULPs of 2^-149 */
static double p_abs_tol(double exp_ulp) { return (exp_ulp + 1.0) * 0x1p-149; }

/* Runs one softmax block on a copy of s with state (m0, l0) and checks every output against the
   float64 oracle. Returns false on failure. */
static bool check_softmax_block(const sdpa_impl *impl, const float *s_in, size_t n, float m0,
                                float l0, size_t off, const char *what)
{
    static float buf[MAX_LEN + 2];
    const double E = sdpa_impl_exp_max_ulp(impl);
    float *s = buf + off;
    memcpy(s, s_in, n * sizeof *s);
    float m = m0, l = l0;
    float alpha = sdpa_impl_softmax_online_f32(impl, s, n, &m, &l);

    float m_new = m0;
    for (size_t j = 0; j < n; j++)
        if (s_in[j] > m_new) m_new = s_in[j];
    bool ok = true;
    if (m_new ==
        -INFINITY) { /* nothing but -inf so far: the state must not move and nothing is NaN */
        ok &= CHECK(
            m == -INFINITY && l == l0 && alpha == 1.0f,
            "%s n=%zu all -inf, state (%g, %g): got m=%g l=%g alpha=%g, want (-inf, %g), alpha 1",
            what, n, m0, l0, m, l, alpha, l0);
        for (size_t j = 0; j < n && ok; j++)
            ok &= CHECK(s[j] == 0.0f, "%s n=%zu all -inf: p[%zu]=%g, want 0", what, n, j, s[j]);
        return ok;
    }
    ok &= CHECK(m == m_new, "%s n=%zu: m=%.9g, want the maximum %.9g", what, n, m, m_new);

    double rel_max = 0, sum_ref = 0;
    for (size_t j = 0; j < n; j++) {
        double ref = s_in[j] == -INFINITY ? 0.0 : p_ref(s_in[j], m_new);
        sum_ref += ref;
        if (s_in[j] == -INFINITY) {
            ok &= CHECK(s[j] == 0.0f, "%s n=%zu: p[%zu]=%g for a -inf score, want exactly 0", what,
                        n, j, s[j]);
            continue;
        }
        double rel = p_rel_tol(s_in[j], m_new, E);
        if (rel > rel_max) rel_max = rel;
        double tol = rel * ref + p_abs_tol(E);
        ok &= CHECK(fabs(s[j] - ref) <= tol,
                    "%s n=%zu: p[%zu]=%.9g, float64 exp(%.9g - %.9g)=%.9g, tol %.3g", what, n, j,
                    s[j], s_in[j], m_new, ref, tol);
        if (!ok) return ok;
    }
    double alpha_ref;
    if (m0 == -INFINITY) {
        /* alpha = exp(-inf - m_new) = 0; the accumulator it scales is empty anyway */
        alpha_ref = 0.0;
        ok &= CHECK(alpha == 0.0f, "%s n=%zu fresh state: alpha=%g, want exp(-inf)=0", what, n,
                    alpha);
    } else {
        alpha_ref = p_ref(m0, m_new);
        double rel = p_rel_tol(m0, m_new, E);
        if (rel > rel_max) rel_max = rel;
        double tol = rel * alpha_ref + p_abs_tol(E);
        ok &= CHECK(fabs(alpha - alpha_ref) <= tol, "%s n=%zu: alpha=%.9g, float64 %.9g, tol %.3g",
                    what, n, alpha, alpha_ref, tol);
        if (m_new == m0)
            ok &= CHECK(alpha == 1.0f, "%s n=%zu: max unchanged but alpha=%.9g", what, n, alpha);
    }
    /* l = alpha l0 + sum p: the p and alpha errors (rel_max) plus a sum of n + 1 terms, any order
     */
    double l_ref = alpha_ref * l0 + sum_ref;
    double tol = (rel_max + (double)(n + 2) * TL_U) * l_ref + (double)(n + 1) * p_abs_tol(E);
    ok &= CHECK(fabs(l - l_ref) <= tol, "%s n=%zu state (%g, %g): l=%.9g, float64 %.9g, tol %.3g",
                what, n, m0, l0, l, l_ref, tol);
    return ok;
}

static void test_softmax_block(const sdpa_impl *impl)
{
    tl_rng r = {2};
    static float s[MAX_LEN];
    static const float mags[] = {1.0f, 10.0f, 80.0f};
    for (size_t li = 0; li < N_LENGTHS && !tl_give_up(); li++) {
        const size_t n = lengths[li];
        for (size_t mi = 0; mi < 3; mi++) {
            const float mag = mags[mi];
            for (int variant = 0; variant < 4; variant++) {
                const size_t off = (n + mi + (size_t)variant) % 2;
                tl_fill(&r, s, n, -mag, mag);
                /* variant 1 and 3: sprinkle -inf scores (masked keys) */
                if (variant & 1)
                    for (size_t j = variant == 1 ? 0 : 2; j < n; j += 3) s[j] = -INFINITY;
                /* variant 2 and 3: a running state whose max is sometimes above every score */
                float m0 = -INFINITY, l0 = 0.0f;
                if (variant & 2) {
                    m0 = tl_uniform(&r, -mag, 1.5f * mag);
                    l0 = tl_uniform(&r, 0.5f, 40.0f);
                }
                char what[64];
                snprintf(what, sizeof what, "block |s|<=%g variant %d offset %zu", mag, variant,
                         off);
                check_softmax_block(impl, s, n, m0, l0, off, what);
            }
            /* wholly -inf block, fresh and running */
            for (size_t j = 0; j < n; j++) s[j] = -INFINITY;
            check_softmax_block(impl, s, n, -INFINITY, 0.0f, n % 2, "wholly -inf, fresh");
            check_softmax_block(impl, s, n, tl_uniform(&r, -mag, mag), 3.25f, n % 2,
                                "wholly -inf, running");
        }
        /* the exact extremes of the stated score range */
        for (size_t j = 0; j < n; j++) s[j] = (j % 2) ? 80.0f : -80.0f;
        check_softmax_block(impl, s, n, -INFINITY, 0.0f, 0, "scores +-80");
        check_softmax_block(impl, s, n, 80.0f, 1.0f, 1, "scores +-80, m=80");
    }
}

/* Several blocks through the running state against a one-shot float64 softmax of everything.
   Tolerance for the final l, relative to the exact l: the final l is a sum over blocks of block
   sums rescaled by every later alpha, so the relative errors add up. Per block we allow twice the
   bound of one exp (its p's and its alpha, each p_rel_tol with |s|, |m| <= the largest finite
   magnitude so far) plus a sum of n + 2 terms, (n + 2) u. */
static void test_softmax_chain(const sdpa_impl *impl)
{
    tl_rng r = {3};
    const double E = sdpa_impl_exp_max_ulp(impl);
    enum { TOTAL = 4096 };
    static float all[TOTAL], blk[TOTAL + 1];
    for (int trial = 0; trial < 60 && !tl_give_up(); trial++) {
        const float mag = trial % 3 == 0 ? 80.0f : trial % 3 == 1 ? 10.0f : 1.0f;
        size_t used = 0, nblocks = 0;
        float m = -INFINITY, l = 0.0f;
        double tol_rel = 0, big = 0;
        bool ok = true;
        /* a schedule of block sizes: tails 1..49, a 127 now and then; on odd trials the scores rise
           block after block (alpha < 1 each time), on even ones they are stationary */
        while (used < 700 + (size_t)trial * 40) {
            size_t n = (tl_next(&r) % 8 == 0) ? 127 : 1 + tl_below(&r, 49);
            if (used + n > TOTAL) break;
            float *s = all + used;
            float hi = mag;
            if (trial % 2) hi = -mag + 2.0f * mag * fminf(1.0f, (float)(nblocks + 1) / 20.0f);
            tl_fill(&r, s, n, -mag, hi);
            if (nblocks == 0 && trial % 4 == 1)
                for (size_t j = 0; j < n; j++) s[j] = -INFINITY; /* a leading wholly masked block */
            if (nblocks == 3 && trial % 4 == 2)
                for (size_t j = 0; j < n; j++) s[j] = -INFINITY; /* a masked block in the middle */
            for (size_t j = 0; j < n; j++)
                if (isfinite(s[j]) && fabsf(s[j]) > big) big = fabsf(s[j]);
            float *b = blk + (nblocks % 2); /* alternate alignment */
            memcpy(b, s, n * sizeof *b);
            float m_before = m;
            float alpha = sdpa_impl_softmax_online_f32(impl, b, n, &m, &l);
            ok &= CHECK(!isnan(alpha) && !isnan(m) && !isnan(l),
                        "trial %d block %zu (n=%zu): NaN state m=%g l=%g alpha=%g", trial, nblocks,
                        n, m, l, alpha);
            if (m_before == -INFINITY && m == -INFINITY)
                ok &= CHECK(l == 0.0f && alpha == 1.0f,
                            "trial %d block %zu all -inf: l=%g alpha=%g, want 0 and 1", trial,
                            nblocks, l, alpha);
            tol_rel += 2.0 * p_rel_tol(big, -big, E) + (double)(n + 2) * TL_U;
            used += n;
            nblocks++;
            if (!ok) break;
        }
        if (!ok) continue;
        float m_ref = -INFINITY;
        for (size_t j = 0; j < used; j++) m_ref = all[j] > m_ref ? all[j] : m_ref;
        double l_ref = 0;
        for (size_t j = 0; j < used; j++)
            if (all[j] != -INFINITY) l_ref += exp((double)all[j] - m_ref);
        CHECK(m == m_ref, "trial %d (%zu blocks, %zu scores): m=%.9g, want %.9g", trial, nblocks,
              used, m, m_ref);
        double tol = tol_rel * l_ref;
        CHECK(fabs(l - l_ref) <= tol,
              "trial %d (%zu blocks, %zu scores, |s|<=%g): l=%.9g, float64 %.9g, tol %.3g", trial,
              nblocks, used, mag, l, l_ref, tol);
    }
}

/* A NaN score anywhere in a block propagates into l, and stays there through later blocks. */
static void test_softmax_nan(const sdpa_impl *impl)
{
    tl_rng r = {4};
    static float s[MAX_LEN + 1];
    for (size_t n = 1; n <= 49 && !tl_give_up(); n++) {
        for (size_t pos = 0; pos < n; pos++) {
            for (int running = 0; running < 2; running++) {
                float *b = s + (pos % 2);
                tl_fill(&r, b, n, -5.0f, 5.0f);
                b[pos] = NAN;
                float m = running ? 2.0f : -INFINITY, l = running ? 1.5f : 0.0f;
                (void)sdpa_impl_softmax_online_f32(impl, b, n, &m, &l);
                CHECK(isnan(l), "n=%zu NaN at %zu, %s state: l=%g, want NaN", n, pos,
                      running ? "running" : "fresh", l);
                tl_fill(&r, b, 17, -5.0f, 5.0f);
                (void)sdpa_impl_softmax_online_f32(impl, b, 17, &m, &l);
                CHECK(isnan(l), "n=%zu NaN at %zu: l=%g after one more block, want NaN still", n,
                      pos, l);
            }
        }
    }
    /* a NaN in a block that is otherwise wholly -inf */
    for (size_t n = 1; n <= 49; n++) {
        for (size_t j = 0; j < n; j++) s[j] = -INFINITY;
        s[n / 2] = NAN;
        float m = -INFINITY, l = 0.0f;
        (void)sdpa_impl_softmax_online_f32(impl, s, n, &m, &l);
        CHECK(isnan(l), "n=%zu NaN among -inf at %zu: l=%g, want NaN", n, n / 2, l);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* accumulate: o = alpha o + sum_j p_j v_j                                                      */
/* Tolerance: a sum of n + 1 products in any order (FMA or not) is within gamma_{n+2} of exact: */
/* we allow (n + 3) u (|alpha o| + sum |p_j v_j|) plus the least subnormal.                     */
/* ------------------------------------------------------------------------------------------ */
static void test_accumulate(const sdpa_impl *impl)
{
    tl_rng r = {5};
    float *ob = tl_xmalloc((MAX_DIM + 2) * sizeof(float));
    float *o0 = tl_xmalloc(MAX_DIM * sizeof(float));
    float *pb = tl_xmalloc((MAX_LEN + 1) * sizeof(float));
    float *vb = tl_xmalloc((MAX_LEN * (MAX_DIM + MAX_PAD) + 1) * sizeof(float));
    for (size_t li = 0; li < N_LENGTHS && !tl_give_up(); li++) {
        for (size_t di = 0; di < n_dims; di++) {
            if (tl_sampled_out(li * 7 + di)) continue;
            const size_t n = lengths[li], dv = dims[di];
            const size_t pad = pads[(3 * n + dv) % 4], vs = dv + pad;
            const size_t off = (n + dv + 1) % 2;
            float alpha;
            switch ((n + 5 * dv) % 4) {
            case 0:
                alpha = 1.0f;
                break;
            case 1:
                alpha = 0.0f;
                break;
            default:
                alpha = tl_uniform(&r, 0.0f, 1.0f);
            }
            float *o = ob + off, *p = pb + off, *v = vb + off;
            snprintf(g_case, sizeof g_case, "n=%zu dv=%zu v_stride=%zu offset=%zu alpha=%g", n, dv,
                     vs, off, alpha);
            tl_fill(&r, o0, dv, -2.0f, 2.0f);
            tl_fill(&r, p, n, 0.0f, 1.0f);
            if (n > 3) p[n / 3] = 0.0f; /* a masked key's weight */
            tl_fill(&r, v, (n - 1) * vs + dv, -1.0f, 1.0f);
            tl_fill_sentinel(ob, MAX_DIM + 2);
            memcpy(o, o0, dv * sizeof *o);
            sdpa_impl_accumulate_f32(impl, o, alpha, p, v, vs, n, dv);
            for (size_t c = 0; c < dv; c++) {
                double ref = (double)alpha * o0[c], mag = fabs(ref);
                for (size_t j = 0; j < n; j++) {
                    ref += (double)p[j] * v[j * vs + c];
                    mag += fabs((double)p[j] * v[j * vs + c]);
                }
                if (!near_sum(o[c], ref, mag, n + 3, "o", c)) break;
            }
            CHECK(guards_kept(ob, off, dv), "%s: accumulate wrote outside o[0..dv)", g_case);
        }
    }
    free(ob), free(o0), free(pb), free(vb);
}

/* ------------------------------------------------------------------------------------------ */
/* The three primitives chained as a streaming attention row, blocks of varying size, with a   */
/* wholly masked block first or in the middle, against float64 softmax(q K^T scale) V.         */
/* Tolerance (as in the fused test): |o - ref| <= E_row * sum_j w_j |v_j|, with                */
/* E_row = 1e-5 sqrt(1 + n/256) + 8 u sqrt(d) A, A = max_j |scale| sum_i |q_i k_ji|.          */
/* ------------------------------------------------------------------------------------------ */
static void test_pipeline(const sdpa_impl *impl)
{
    tl_rng r = {6};
    enum { NMAX = 3000, D = 64, DV = 48 };
    float *q = tl_xmalloc(D * sizeof(float));
    float *k = tl_xmalloc(NMAX * D * sizeof(float));
    float *v = tl_xmalloc(NMAX * DV * sizeof(float));
    float *s = tl_xmalloc(NMAX * sizeof(float));
    double *sref = tl_xmalloc(NMAX * sizeof(double));
    bool *masked = tl_xmalloc(NMAX * sizeof(bool));
    float o[DV];
    for (int trial = 0; trial < 24 && !tl_give_up(); trial++) {
        const size_t n = 1 + tl_below(&r, trial < 12 ? 200 : NMAX);
        const float scale = (trial % 3 == 0) ? 1.0f : 1.0f / sqrtf((float)D);
        tl_fill(&r, q, D, -1.0f, 1.0f);
        tl_fill(&r, k, n * D, -1.0f, 1.0f);
        tl_fill(&r, v, n * DV, -1.0f, 1.0f);
        memset(o, 0, sizeof o);
        memset(masked, 0, n * sizeof *masked);
        float m = -INFINITY, l = 0.0f;
        size_t j0 = 0, blk = 0;
        while (j0 < n) {
            size_t nb = 1 + tl_below(&r, 64);
            if (nb > n - j0) nb = n - j0;
            sdpa_impl_score_f32(impl, q, k + j0 * D, D, nb, D, scale, s + j0);
            if ((blk == 0 && trial % 4 == 1) || (blk == 2 && trial % 4 == 2)) /* a masked block */
                for (size_t j = j0; j < j0 + nb; j++) {
                    s[j] = -INFINITY;
                    masked[j] = true;
                }
            float alpha = sdpa_impl_softmax_online_f32(impl, s + j0, nb, &m, &l);
            sdpa_impl_accumulate_f32(impl, o, alpha, s + j0, v + j0 * DV, DV, nb, DV);
            j0 += nb;
            blk++;
        }
        double mx = -INFINITY, A = 0;
        size_t seen = 0;
        for (size_t j = 0; j < n; j++) {
            double acc = 0, mag = 0;
            for (size_t i = 0; i < D; i++) {
                acc += (double)q[i] * k[j * D + i];
                mag += fabs((double)q[i] * k[j * D + i]);
            }
            sref[j] = masked[j] ? -INFINITY : acc * scale;
            if (!masked[j]) {
                seen++;
                if (sref[j] > mx) mx = sref[j];
                if (mag * scale > A) A = mag * scale;
            }
        }
        if (seen == 0) {
            CHECK(l == 0.0f && m == -INFINITY, "trial %d: everything masked but m=%g l=%g", trial,
                  m, l);
            for (size_t c = 0; c < DV; c++)
                CHECK(o[c] == 0.0f, "trial %d: everything masked but o[%zu]=%g", trial, c, o[c]);
            continue;
        }
        double lsum = 0;
        for (size_t j = 0; j < n; j++) lsum += masked[j] ? 0.0 : exp(sref[j] - mx);
        const double E = 1e-5 * sqrt(1.0 + (double)seen / 256.0) + 8 * TL_U * sqrt((double)D) * A;
        for (size_t c = 0; c < DV; c++) {
            double ref = 0, mag = 0;
            for (size_t j = 0; j < n; j++) {
                if (masked[j]) continue;
                double w = exp(sref[j] - mx) / lsum;
                ref += w * v[j * DV + c];
                mag += w * fabs(v[j * DV + c]);
            }
            double got = (double)o[c] / l, tol = E * mag;
            if (!CHECK(fabs(got - ref) <= tol,
                       "trial %d n=%zu scale=%g: o[%zu]/l=%.9g, float64 %.9g, tol %.3g", trial, n,
                       scale, c, got, ref, tol))
                break;
        }
    }
    free(q);
    free(k);
    free(v);
    free(s);
    free(sref);
    free(masked);
}

/* Size 0 does nothing (header contract). */
static void test_size_zero(const sdpa_impl *impl)
{
    float q[4] = {1, 2, 3, 4}, k[4] = {1, 1, 1, 1}, s[2];
    tl_fill_sentinel(s, 2);
    sdpa_impl_score_f32(impl, q, k, 4, 0, 4, 1.0f, s);
    CHECK(tl_is_sentinel(s[0]), "score with n=0 wrote s[0]=%g", s[0]);
    float m = 1.5f, l = 2.5f;
    float alpha = sdpa_impl_softmax_online_f32(impl, s, 0, &m, &l);
    CHECK(alpha == 1.0f && m == 1.5f && l == 2.5f && tl_is_sentinel(s[0]),
          "softmax with n=0: alpha=%g m=%g l=%g, want 1 and the state unchanged", alpha, m, l);
}

int main(void)
{
    init_dims();
    tl_header("primitives against float64 oracles");
    tl_for_each_impl("score", test_score);
    tl_for_each_impl("softmax block", test_softmax_block);
    tl_for_each_impl("softmax chained blocks", test_softmax_chain);
    tl_for_each_impl("softmax NaN propagation", test_softmax_nan);
    tl_for_each_impl("accumulate", test_accumulate);
    tl_for_each_impl("score+softmax+accumulate row", test_pipeline);
    tl_for_each_impl("size 0", test_size_zero);
    return tl_finish();
}
