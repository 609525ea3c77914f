/* test_variant_tile.c -- the score-tile functions of the variants (kernels/generic/variants.h):
 * row-major and transposed alike, against direct definitions */
/*
 * The functions are compiled here for the baseline; each implementation compiles the same source
 * for its ISA and is checked end to end by test_variants.c. This test pins down what the forward
 * tests can only see through a softmax: the exact score each (row, key) gets, in both layouts a
 * kernel uses (row-major, s[j]; the AVX-512 prefill's transposed panels, s[j * pw]), which keys
 * count as hidden, and the exact P·V path that skips them.
 */
#include "testlib.h"

#include <math.h>

#include "convert.h"
#include "variants.h"

enum { R = 24, NB = 80, PW = 32, DV = 12, LK = 400 };

/* the mask entry, exactly, by convert.h's reference conversions */
static float mask_value(const void *row, sdpa_dtype t, size_t j)
{
    if (t == SDPA_F32) return ((const float *)row)[j];
    const uint16_t h = ((const uint16_t *)row)[j];
    return t == SDPA_F16 ? sdpa_f16_to_f32(h) : sdpa_bf16_to_f32(h);
}

static void test_f16(void)
{
    tl_start("branch-free f16 decode, all 65536 inputs", "generic");
    size_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = sdpa_f16_to_f32((uint16_t)h), b = sdpa_f16_to_f32_vec((uint16_t)h);
        if (tl_bits(a) != tl_bits(b) && bad++ < 5)
            (void)CHECK(false, "h=0x%04x: %08x, want %08x", (unsigned)h, tl_bits(b), tl_bits(a));
    }
    CHECK(bad == 0, "%zu inputs decoded differently", bad);
    tl_end();
}

typedef struct unit {
    size_t lim[R], first[R];
    ptrdiff_t pos[R];
    float slope[R];
    const void *mrow[R];
    sdpa_mods mods;
    sdpa_rows w;
    void *mask;
    float *v, *acc;
} unit;

/* A unit of R rows over LK keys: non-decreasing windows, slopes, a mask of dtype t whose rows
   hold finite values and -inf holes (a run of whole -inf tiles included). */
static void make_unit(unit *u, tl_rng *g, sdpa_dtype t, bool with_mask, bool with_first)
{
    memset(u, 0, sizeof *u);
    const size_t es = sdpa_dtype_size(t);
    u->mask = tl_xmalloc(R * LK * es);
    for (size_t r = 0; r < R; r++) {
        u->pos[r] = (ptrdiff_t)(100 + 3 * r) - 7;
        u->lim[r] = 120 + 5 * r;
        u->first[r] = with_first ? 20 + 4 * r : 0;
        u->slope[r] = tl_uniform(g, -0.5f, 0.5f);
        u->mrow[r] = (const char *)u->mask + r * LK * es;
        for (size_t j = 0; j < LK; j++) {
            float x = tl_uniform(g, -3.0f, 3.0f);
            if (tl_below(g, 5) == 0 || (j >= 160 && j < 240)) x = -INFINITY;
            if (t == SDPA_F32)
                ((float *)u->mask)[r * LK + j] = x;
            else if (t == SDPA_F16)
                ((uint16_t *)u->mask)[r * LK + j] = sdpa_f32_to_f16(x);
            else
                ((uint16_t *)u->mask)[r * LK + j] = sdpa_f32_to_bf16(x);
        }
    }
    u->v = tl_xmalloc(LK * DV * sizeof(float));
    tl_fill(g, u->v, LK * DV, -1.0f, 1.0f);
    u->acc = tl_xmalloc(R * DV * sizeof(float));
    u->mods = (sdpa_mods){
        .slope = u->slope, .pos = u->pos, .mask = with_mask ? u->mrow : NULL, .mask_type = t};
    u->w = (sdpa_rows){.rows = R,
                       .d = 1,
                       .dv = DV,
                       .kv_limit = u->lim,
                       .kv_first = with_first ? u->first : NULL,
                       .mods = &u->mods,
                       .v = u->v,
                       .v_stride = DV,
                       .v_type = SDPA_F32,
                       .kv_begin = with_first ? 20 : 0,
                       .kv_end = LK,
                       .acc = u->acc};
}

static void free_unit(unit *u)
{
    free(u->mask);
    free(u->v);
    free(u->acc);
}

/* The score of row r, key j, from s by the definition, in the same float operations: ALiBi,
   then the mask (-inf hides), then the window start; hidden tells whether the key is hidden. */
static float expect(const unit *u, size_t r, size_t j, float s, bool *hidden)
{
    const float d = fabsf((float)((ptrdiff_t)j - u->pos[r]));
    s -= u->slope[r] * d;
    *hidden = false;
    if (u->mods.mask) {
        const float m = mask_value(u->mrow[r], u->mods.mask_type, j);
        if (m == -INFINITY) *hidden = true;
        s = *hidden ? -INFINITY : s + m;
    }
    if (u->w.kv_first && j < u->first[r]) {
        s = -INFINITY;
        *hidden = true;
    }
    return s;
}

static void test_modify(void)
{
    tl_start("scores: row-major and transposed against the definition", "generic");
    tl_rng g = {0x5eed1u};
    static const sdpa_dtype types[3] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    float *rm = tl_xmalloc(R * NB * sizeof(float)), *tr = tl_xmalloc(NB * PW * sizeof(float));
    for (int ti = 0; ti < 3; ti++)
        for (int cfg = 0; cfg < 4; cfg++) {
            unit u;
            make_unit(&u, &g, types[ti], cfg & 1, cfg & 2);
            for (size_t j0 = 0; j0 + NB <= LK; j0 += NB / 2) {
                for (size_t i = 0; i < R * NB; i++) rm[i] = tl_uniform(&g, -20.0f, 20.0f);
                rm[3] = NAN; /* a NaN score: hidden keys must still come out -inf */
                for (size_t r = 0; r < R; r++)
                    for (size_t j = 0; j < NB; j++) tr[j * PW + r] = rm[r * NB + j];
                for (size_t r = 0; r < R; r++) {
                    const size_t n = sdpa_seen(u.lim[r], j0, NB);
                    float want[NB];
                    bool any = false;
                    for (size_t j = 0; j < n; j++) {
                        bool h;
                        want[j] = expect(&u, r, j0 + j, rm[r * NB + j], &h);
                        any |= h;
                    }
                    const bool h1 = sdpa_modify_row(&u.w, r, j0, rm + r * NB, n, 1);
                    const bool h2 = sdpa_modify_row(&u.w, r, j0, tr + r, n, PW);
                    CHECK(h1 == any && h2 == any,
                          "type %d cfg %d j0 %zu row %zu: hidden %d/%d, want %d", ti, cfg, j0, r,
                          h1, h2, any);
                    for (size_t j = 0; j < n; j++) {
                        const uint32_t a = tl_bits(rm[r * NB + j]), b = tl_bits(tr[j * PW + r]);
                        const bool same = a == tl_bits(want[j]) ||
                                          (want[j] != want[j] && rm[r * NB + j] != rm[r * NB + j]);
                        if (!CHECK(same && a == b,
                                   "type %d cfg %d j0 %zu row %zu key %zu: %g / %g, want %g", ti,
                                   cfg, j0, r, j0 + j, (double)rm[r * NB + j],
                                   (double)tr[j * PW + r], (double)want[j]))
                            break;
                    }
                }
                /* the hidden-block test against its definition, for every first row */
                for (size_t r0 = 0; r0 < R; r0 += 5) {
                    bool seen = false;
                    for (size_t r = r0; r < R && !seen; r++)
                        for (size_t j = j0; j < j0 + NB && !seen; j++) seen = sdpa_sees(&u.w, r, j);
                    bool any_seen = false;
                    for (size_t r = r0; r < R; r++)
                        for (size_t j = j0; j < j0 + NB; j++) {
                            const bool in = j >= (u.w.kv_first ? u.first[r] : 0) && j < u.lim[r];
                            const bool masked =
                                u.mods.mask &&
                                mask_value(u.mrow[r], u.mods.mask_type, j) == -INFINITY;
                            any_seen |= in && !masked;
                        }
                    CHECK(seen == any_seen, "sdpa_sees disagrees with the definition at j0 %zu",
                          j0);
                    CHECK(sdpa_block_hidden(&u.w, r0, R, j0, NB) == !any_seen,
                          "type %d cfg %d: block [%zu, %zu) rows %zu..: hidden %d, want %d", ti,
                          cfg, j0, j0 + NB, r0, sdpa_block_hidden(&u.w, r0, R, j0, NB), !any_seen);
                }
            }
            free_unit(&u);
        }
    free(rm);
    free(tr);
    tl_end();
}

static void test_pv_exact(void)
{
    tl_start("exact P.V: hidden keys skipped, both layouts", "generic");
    tl_rng g = {0x5eed2u};
    unit u;
    make_unit(&u, &g, SDPA_F16, true, true);
    const size_t j0 = 80;
    float *p = tl_xmalloc(R * NB * sizeof(float)), *pt = tl_xmalloc(NB * PW * sizeof(float));
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j < NB; j++) pt[j * PW + r] = p[r * NB + j] = tl_uniform(&g, 0.0f, 1.0f);
    /* hidden keys' V rows hold inf and NaN: a weight of 0 times them would be NaN */
    for (size_t j = j0; j < j0 + NB; j++) {
        bool hidden_somewhere = false;
        for (size_t r = 0; r < R; r++) hidden_somewhere |= j < u.lim[r] && !sdpa_sees(&u.w, r, j);
        bool seen_somewhere = false;
        for (size_t r = 0; r < R; r++) seen_somewhere |= sdpa_sees(&u.w, r, j);
        if (hidden_somewhere && !seen_somewhere) u.v[j * DV + j % DV] = (j & 1) ? INFINITY : NAN;
    }
    /* a1: the transposed call's accumulators, a2: the initial ones (for the reference) */
    float *a1 = tl_xmalloc(R * DV * sizeof(float)), *a2 = tl_xmalloc(R * DV * sizeof(float));
    tl_fill(&g, u.acc, R * DV, -1.0f, 1.0f);
    memcpy(a1, u.acc, R * DV * sizeof(float));
    memcpy(a2, u.acc, R * DV * sizeof(float));
    for (size_t r = 0; r < R; r++) {
        const float alpha = 0.5f + 0.01f * (float)r;
        const size_t n = sdpa_seen(u.lim[r], j0, NB);
        u.w.acc = u.acc;
        sdpa_pv_row_exact(&u.w, r, j0, n, alpha, p + r * NB, 1);
        u.w.acc = a1;
        sdpa_pv_row_exact(&u.w, r, j0, n, alpha, pt + r, PW);
    }
    size_t bad = 0;
    for (size_t r = 0; r < R; r++) {
        const float alpha = 0.5f + 0.01f * (float)r;
        const size_t n = sdpa_seen(u.lim[r], j0, NB);
        for (size_t c = 0; c < DV; c++) {
            double ref = (double)alpha * (double)a2[r * DV + c], mag = fabs(ref);
            for (size_t j = 0; j < n; j++)
                if (sdpa_sees(&u.w, r, j0 + j)) {
                    ref += (double)p[r * NB + j] * (double)u.v[(j0 + j) * DV + c];
                    mag += fabs((double)p[r * NB + j] * (double)u.v[(j0 + j) * DV + c]);
                }
            const float x = u.acc[r * DV + c], y = a1[r * DV + c];
            const bool ok = isfinite(x) && tl_bits(x) == tl_bits(y) &&
                            fabs((double)x - ref) <= (double)(n + 2) * 0x1p-24 * mag + 1e-30;
            if (!ok && bad++ < 5)
                (void)CHECK(false, "row %zu col %zu: %g / %g, want %.9g", r, c, (double)x,
                            (double)y, ref);
        }
    }
    CHECK(bad == 0, "%zu accumulator elements wrong", bad);
    free(p), free(pt), free(a1), free(a2);
    free_unit(&u);
    tl_end();
}

int main(void)
{
    tl_header("the variants' score-tile functions");
    test_f16();
    test_modify();
    test_pv_exact();
    return tl_finish();
}
