/* test_guard.c -- no kernel reads or writes past either end of its buffers (PROT_NONE guard
   pages) */
#include "attn.h"

#include <signal.h>

/*
 * Every buffer a kernel touches is placed so that its last element ends exactly where a
 * PROT_NONE page begins (and, in a second pass, so that its first element starts right after
 * one). A vector load or store that strays past the data, even by one lane, faults: the process
 * dies with SIGSEGV and meson reports the test as failed, with the implementation and the case
 * printed just before (stdout is flushed before every call that could fault).
 * Results are also checked (loosely: they are checked exactly elsewhere) so that a kernel that
 * silently skipped the work does not pass.
 */

#define NMAX 49
#define DMAX 127
#define PAD  3

static const size_t guard_dims[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13,
                                    14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
                                    27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39,
                                    40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 64, 127};
#define N_GUARD_DIMS (sizeof guard_dims / sizeof guard_dims[0])

/* one guarded region per buffer role, reused by every case */
static tl_guard g_q, g_k, g_s, g_o, g_p, g_v;

/* place n floats at the end (end = true) or the start of a region */
static float *place(const tl_guard *g, size_t n, bool end)
{
    return end ? tl_guard_end(g, n * sizeof(float)) : tl_guard_begin(g);
}

/* The case about to run, written out by the SIGSEGV handler if it faults: printing every case
   up front would flood the log with thousands of lines. */
static char current[200];
static size_t current_len;

static void announce(const char *what, size_t n, size_t d, size_t stride, bool end)
{
    int len = snprintf(current, sizeof current,
                       "# FAULT %s: %s n=%zu d=%zu stride=%zu, buffers at the %s of their region\n",
                       tl_label, what, n, d, stride, end ? "end" : "start");
    current_len = len > 0 ? ((size_t)len < sizeof current ? (size_t)len : sizeof current - 1) : 0;
}

static void on_fault(int sig)
{
    /* async-signal-safe: write(2) the prepared line, then die of the signal as usual */
    ssize_t w = write(STDOUT_FILENO, current, current_len);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void test_primitives_guard(const sdpa_impl *impl)
{
    tl_rng r = {11};
    for (int end = 1; end >= 0 && !tl_give_up(); end--) {
        for (size_t n = 1; n <= NMAX; n++) {
            for (size_t di = 0; di < N_GUARD_DIMS; di++) {
                const size_t d = guard_dims[di];
                for (size_t pad = 0; pad <= PAD; pad += PAD) {
                    const size_t st = d + pad;
                    const size_t kn = (n - 1) * st + d; /* the last row ends at the guard */
                    announce("score", n, d, st, end);
                    float *q = place(&g_q, d, end), *k = place(&g_k, kn, end),
                          *s = place(&g_s, n, end);
                    tl_fill(&r, q, d, -1.0f, 1.0f);
                    tl_fill(&r, k, kn, -1.0f, 1.0f);
                    sdpa_impl_score_f32(impl, q, k, st, n, d, 0.5f, s);
                    for (size_t j = 0; j < n; j += n - 1 ? n - 1 : 1) { /* first and last */
                        double ref = 0;
                        for (size_t i = 0; i < d; i++) ref += (double)q[i] * k[j * st + i];
                        ref *= 0.5;
                        CHECK(fabs(s[j] - ref) <= 1e-5 * (double)d,
                              "score n=%zu d=%zu stride=%zu %s: s[%zu]=%g want %g", n, d, st,
                              end ? "end" : "start", j, s[j], ref);
                    }

                    announce("softmax", n, d, st, end);
                    float m = -INFINITY, l = 0.0f;
                    float alpha = sdpa_impl_softmax_online_f32(impl, s, n, &m, &l);
                    CHECK(alpha == 0.0f && l >= 1.0f && l <= (float)n * 1.0001f,
                          "softmax n=%zu %s: alpha=%g l=%g", n, end ? "end" : "start", alpha, l);

                    announce("accumulate", n, d, st, end);
                    float *o = place(&g_o, d, end), *p = place(&g_p, n, end),
                          *v = place(&g_v, kn, end);
                    tl_fill(&r, p, n, 0.0f, 1.0f);
                    tl_fill(&r, v, kn, -1.0f, 1.0f);
                    for (size_t c = 0; c < d; c++) o[c] = 1.0f;
                    sdpa_impl_accumulate_f32(impl, o, 0.5f, p, v, st, n, d);
                    const size_t c = d - 1; /* the last column touches the guard */
                    double ref = 0.5;
                    for (size_t j = 0; j < n; j++) ref += (double)p[j] * v[j * st + c];
                    CHECK(fabs(o[c] - ref) <= 1e-5 * (double)(n + 1),
                          "accumulate n=%zu dv=%zu %s: o[%zu]=%g want %g", n, d,
                          end ? "end" : "start", c, o[c], ref);
                }
            }
            announce("exp", n, 0, 0, end);
            float *x = place(&g_q, n, end), *y = place(&g_s, n, end);
            for (size_t j = 0; j < n; j++) x[j] = -0.25f * (float)j;
            sdpa_impl_exp_f32(impl, x, y, n);
            CHECK(fabsf(y[n - 1] - expf(x[n - 1])) <= 1e-6f, "exp n=%zu: y[last]=%g", n, y[n - 1]);
        }
    }
}

/* The fused forward with q, K, V, o and lse each ending right before a guard page (dense views,
   so the last element of the last row of the last head is the last element of the buffer). */
static void test_forward_guard(const sdpa_impl *impl)
{
    static const size_t kvls[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 47, 49, 64, 100};
    static const size_t qls[] = {1, 2, 3, 5, 17};
    tl_rng r = {12};
    size_t n = 0;
    for (size_t ki = 0; ki < sizeof kvls / sizeof kvls[0] && !tl_give_up(); ki++) {
        for (size_t qi = 0; qi < sizeof qls / sizeof qls[0]; qi++) {
            for (int causal = 0; causal < 2; causal++, n++) {
                const size_t d = guard_dims[(n * 7) % N_GUARD_DIMS],
                             dv = guard_dims[(n * 11 + 3) % N_GUARD_DIMS];
                static const sdpa_dtype kv_types[3] = {SDPA_F32, SDPA_F16, SDPA_BF16};
                const sdpa_dtype kt = kv_types[n % 3], vt = kv_types[(n / 3) % 3];
                sdpa_params p = {0};
                p.batch = 1, p.q_heads = 2, p.kv_heads = 1, p.q_len = qls[qi], p.kv_len = kvls[ki];
                p.head_dim = d, p.v_dim = dv, p.causal = causal;
                tview q, k, v, o;
                tview_layout(&q, 1, 2, p.q_len, d, SDPA_F32, L_DENSE, 0);
                tview_layout(&k, 1, 1, p.kv_len, d, kt, L_DENSE, 0);
                tview_layout(&v, 1, 1, p.kv_len, dv, vt, L_DENSE, 0);
                tview_layout(&o, 1, 2, p.q_len, dv, SDPA_F32, L_DENSE, 0);
                tl_guard gq = tl_guard_alloc(q.n_elems * q.es),
                         gk = tl_guard_alloc(k.n_elems * k.es),
                         gv = tl_guard_alloc(v.n_elems * v.es),
                         go = tl_guard_alloc(o.n_elems * o.es),
                         gl = tl_guard_alloc(2 * p.q_len * sizeof(float));
                tview_place(&q, tl_guard_end(&gq, q.n_elems * q.es));
                tview_place(&k, tl_guard_end(&gk, k.n_elems * k.es));
                tview_place(&v, tl_guard_end(&gv, v.n_elems * v.es));
                tview_place(&o, tl_guard_end(&go, o.n_elems * o.es));
                p.lse = tl_guard_end(&gl, 2 * p.q_len * sizeof(float));
                tview_fill(&q, &r, -1.0f, 1.0f);
                tview_fill(&k, &r, -1.0f, 1.0f);
                tview_fill(&v, &r, -1.0f, 1.0f);
                tview_sentinel(&o);
                sdpa_tensor tq = tview_tensor(&q), tk = tview_tensor(&k), tv = tview_tensor(&v),
                            to = tview_tensor(&o);
                announce("forward", p.kv_len, d, dv, true);
                char what[160];
                snprintf(what, sizeof what, "forward q_len=%zu kv_len=%zu d=%zu dv=%zu K %d V %d%s",
                         p.q_len, p.kv_len, d, dv, (int)kt, (int)vt, causal ? " causal" : "");
                sdpa_status st = sdpa_impl_forward(impl, &p, &tq, &tk, &tv, &to);
                if (CHECK(st == SDPA_OK, "%s: status %s", what, sdpa_status_str(st))) {
                    attn_ref ref;
                    attn_oracle(&p, &q, &k, &v, &ref);
                    attn_check(what, &p, &o, p.lse, 0, 2 * p.q_len, &ref);
                    attn_ref_free(&ref);
                }
                tview_free(&q);
                tview_free(&k);
                tview_free(&v);
                tview_free(&o);
                tl_guard_free(&gq);
                tl_guard_free(&gk);
                tl_guard_free(&gv);
                tl_guard_free(&go);
                tl_guard_free(&gl);
            }
        }
    }
}

int main(void)
{
    tl_header("guard pages around every buffer");
    signal(SIGSEGV, on_fault);
    signal(SIGBUS, on_fault);
    const size_t kbytes = (NMAX * (DMAX + PAD)) * sizeof(float);
    g_q = tl_guard_alloc(kbytes);
    g_k = tl_guard_alloc(kbytes);
    g_s = tl_guard_alloc(kbytes);
    g_o = tl_guard_alloc(kbytes);
    g_p = tl_guard_alloc(kbytes);
    g_v = tl_guard_alloc(kbytes);
    tl_for_each_impl("primitives at guard pages", test_primitives_guard);
    tl_for_each_impl("forward at guard pages", test_forward_guard);
    return tl_finish();
}
