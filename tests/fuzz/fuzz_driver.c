/* fuzz_driver.c -- seeded driver of the fuzz target: fixed-seed inputs and the corpus replay as
 * TAP, corpus writer */
/*
 * usage:
 *   fuzz_driver [--execs N] [--seed S] [--variants 0|1|2] [--api 0|1|2] [--formats 0|1|2]
 *               [--team 0|1|2] [--corpus DIR] [--describe] [FILE...]
 *     generated inputs (FILEs alone: none unless --execs), each option the share of them with
 *     the attention variants, the API fields (ragged, paged, q8_0/q4_0, head dims up to 256,
 *     sdpa_merge), the block formats of every kind, or mask_scales and teams: 0 none, 1 half
 *     (default), 2 all; then the replay of DIR and the FILEs
 *   fuzz_driver [--describe] --hex HEX    replay one input given as hex bytes (and print it)
 *   fuzz_driver --write-corpus DIR        write the reproducers and seeds of tests/fuzz/corpus
 *
 * Prints one TAP point per implementation for the generated inputs (an implementation this CPU
 * cannot run is a SKIP, never a pass) and one for the replay of the corpus directory and FILEs.
 * A failing input is printed as hex (replay it with --hex) and, when SDPA_FUZZ_ARTIFACTS names a
 * directory, saved there. Environment: SDPA_FUZZ_EXECS (generated inputs; default below, an
 * eighth of it under AddressSanitizer), SDPA_FUZZ_SEED, SDPA_TEST_SAMPLE=N (N > 1: a 1/N share,
 * for emulated CPUs).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "../test_select.h"
#include "fuzz_forward.h"
#include "sdpa.h"

/* About 30-60 s natively on two cores for every supported implementation together. */
#define DEFAULT_EXECS 10000

#if defined(__SANITIZE_ADDRESS__)
#define FZ_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_UNDER_ASAN 1
#endif
#endif

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}
static unsigned rnd(uint64_t *s, unsigned n) { return (unsigned)(rng_next(s) % n); }
static unsigned between(uint64_t *s, unsigned lo, unsigned hi) { return lo + rnd(s, hi - lo + 1); }

/* ------------------------------------------------------------------------------------------ */
/* The generator: a spec drawn with the sizes and value classes weighted towards what finds     */
/* bugs (small shapes mostly, a tenth long enough to split, specials injected sparsely).        */
/* ------------------------------------------------------------------------------------------ */
/* The attention variants, each on about a third of the inputs that have any: windows small and
   large, softcaps from subnormal to near FLT_MAX, ALiBi slopes, sinks, masks of every class and
   layout, rare NaN or +inf mask entries, non-finite K/V on hidden keys, and a few refused calls. */
static void gen_variants(uint64_t *r, fz_spec *s)
{
    if (rnd(r, 3) == 0)
        s->window = rnd(r, 4) == 0   ? between(r, 1, 4)
                    : rnd(r, 3) == 0 ? between(r, 1, s->kv_len + 40)
                                     : between(r, 1, 1 + s->kv_len / 2);
    if (rnd(r, 3) == 0) {
        static const uint8_t kinds[12] = {3, 3, 4, 4, 4, 7, 7, 2, 2, 5, 6, 1};
        s->softcap_kind = kinds[rnd(r, 12)];
        s->softcap_param = (uint32_t)rng_next(r);
        if (s->softcap_kind == 1)
            s->softcap_param = fz_f32_bits(
                ldexpf(1.0f + (float)rnd(r, 1u << 20) * 0x1p-20f, (int)between(r, 0, 200) - 100));
    }
    if (rnd(r, 3) == 0)
        s->alibi_kind = (uint8_t)between(r, 1, 3), s->alibi_param = (uint8_t)rng_next(r);
    if (rnd(r, 3) == 0)
        s->sink_kind = (uint8_t)between(r, 1, 3), s->sink_param = (uint8_t)rng_next(r);
    if (rnd(r, 5) < 2) {
        s->mask = (uint8_t)between(r, 1, 3);
        s->mask_layout = rnd(r, 2) ? 0 : (uint8_t)rng_next(r);
        s->mask_class = (uint8_t)rnd(r, 8);
        s->mask_param = (uint8_t)rng_next(r);
        s->mask_special = rnd(r, 12) == 0 ? (uint8_t)between(r, 1, 255) : 0;
    }
    if (rnd(r, 4) == 0) s->poison = (uint8_t)between(r, 1, 255);
    if (s->invalid < 0 && rnd(r, 30) == 0)
        s->invalid = FZ_N_INVALID_PLAIN + (int)rnd(r, FZ_N_INVALID_VARIANT);
}

/* A head dim: a multiple of 32 up to 256 on 4 in 10, an odd one below 256 on 2 in 10, else kept. */
static unsigned gen_dim(uint64_t *r, unsigned d)
{
    const unsigned c = rnd(r, 10);
    return c < 4 ? 32 * between(r, 1, 8) : c < 6 ? 2 * rnd(r, 128) + 1 : d;
}

/* The API fields (issue #24), each on a share of the inputs that have any: head dims of every
   multiple of 32 up to 256 and odd ones; q8_0/q4_0 K and/or V, with q8_scores on half of those
   with a block-format K, half of which are decodes with 1 or 3 query rows per work item and a
   head dim of an odd number of blocks (where the fast scores' scratch is tightest); padded and
   packed batches with zero-length sequences and sequences of more queries than keys; paged K/V
   with page sizes 1 to 256, shared pages and junk in unused entries; sdpa_merge calls; refused
   calls of the new fields. */
static void gen_api(uint64_t *r, fz_spec *s)
{
    s->head_dim = gen_dim(r, s->head_dim);
    if (s->v_dim && rnd(r, 2)) s->v_dim = gen_dim(r, s->v_dim);
    if (rnd(r, 5) < 2) {
        const unsigned w = rnd(r, 4); /* K, V, both, both */
        if (w != 1) s->k_format = (uint8_t)between(r, 1, 2);
        if (w != 0) s->v_format = (uint8_t)between(r, 1, 2);
        if (s->k_format && rnd(r, 2)) {
            s->q8_scores = 1;
            if (rnd(r, 2)) {
                s->q_len = 2 * rnd(r, 2) + 1;
                s->group = rnd(r, 2) ? 1 : 3;
                s->head_dim = 32 * (2 * rnd(r, 4) + 1);
            }
        }
    }
    if (rnd(r, 3) == 0) {
        s->q_form = (uint8_t)rnd(r, 3);
        s->kv_form = (uint8_t)rnd(r, 3);
        s->slack = (uint8_t)rnd(r, 4);
        s->q_lens_class = (uint8_t)rnd(r, 8);
        s->kv_lens_class = (uint8_t)rnd(r, 8);
        if (s->batch == 1 && rnd(r, 3)) s->batch = between(r, 2, 3);
    }
    if (rnd(r, 4) == 0) {
        s->paged = (uint8_t)(1 | (rnd(r, 3) == 0 ? 2 : 0) | (rnd(r, 2) ? 4 : 0) |
                             (rnd(r, 2) ? 8 : 0) | rnd(r, 4) << 4 | rnd(r, 4) << 6);
        const unsigned pc = rnd(r, 6);
        s->page_size = pc == 0   ? between(r, 1, 15)
                       : pc == 1 ? 16 * between(r, 1, 16)
                       : pc == 2 ? between(r, 17, 255)
                       : pc == 3 ? 16
                       : pc == 4 ? between(r, 1, 4)
                                 : 256;
        if (rnd(r, 2))
            s->layout[1] = s->layout[2] = 2; /* [head][page][token]: adjacent pages form runs */
        if (s->kv_form == 2) s->kv_form = 1;
    }
    if (rnd(r, 6) == 0) {
        s->merge = (uint8_t)between(r, 1, 255);
        s->merge_rows = (uint8_t)rng_next(r);
        s->merge_layout = (uint8_t)(rnd(r, 4) == 0 ? rng_next(r) : rng_next(r) & 15);
        if (rnd(r, 8) == 0) s->merge_refuse = (uint8_t)between(r, 1, 255);
    }
    s->misc = rnd(r, 8) == 0 ? (uint8_t)between(r, 1, 7) : 0;
    if (s->invalid < 0 && rnd(r, 20) == 0)
        s->invalid = FZ_INVALID_API_FIRST + (int)rnd(r, FZ_N_INVALID_API);
}

/* The block formats of every kind (issue #26): K and/or V of any of the six, q4_1, q5_0, q5_1
   and iq4_nl on three in four of them, q8_scores on half of those with a block-format K, a
   decode of an odd number of blocks on half of those; K or V of one sign (a fill of (0, 1)) or
   constant on a third, where the minimum of q4_1 and q5_1 is not the block's -max |x|. */
static void gen_formats(uint64_t *r, fz_spec *s)
{
    const unsigned w = rnd(r, 4); /* K, V, both, both */
    s->k_format = w == 1 ? 0 : (uint8_t)(rnd(r, 4) ? between(r, 3, 6) : between(r, 1, 2));
    s->v_format = w == 0 ? 0 : (uint8_t)(rnd(r, 4) ? between(r, 3, 6) : between(r, 1, 2));
    s->q8_scores = s->k_format && rnd(r, 2);
    if (s->q8_scores && rnd(r, 2)) {
        s->q_len = 2 * rnd(r, 2) + 1;
        s->head_dim = 32 * (2 * rnd(r, 4) + 1);
    }
    if (rnd(r, 3) == 0) {
        const unsigned t = rnd(r, 3); /* K, V, both */
        if (t != 1) s->fill[1] = rnd(r, 2) ? 7 : 6;
        if (t != 0) s->fill[2] = rnd(r, 2) ? 7 : 6;
    }
}

/* mask_scales and the team: on a third of the inputs that have any, factors over the mask (one
   made here when the spec has none) of every class, the mask a distance mask (ggml's ALiBi)
   on a third of those; a team of 1 to 4 threads on a quarter (teams of threads that outnumber
   the cores wait long at their barriers); a few refused mask_scales calls. Drawn after
   everything else, so that a spec without them draws what it drew before. */
static void gen_team(uint64_t *r, fz_spec *s)
{
    if (rnd(r, 3) == 0) {
        if (!s->mask) {
            s->mask = (uint8_t)between(r, 1, 3);
            s->mask_layout = rnd(r, 2) ? 0 : (uint8_t)rng_next(r);
            s->mask_class = (uint8_t)rnd(r, 8);
            s->mask_param = (uint8_t)rng_next(r);
        }
        s->scales_kind = (uint8_t)(between(r, 1, 3) | (rnd(r, 3) == 0 ? 4 : 0));
        s->scales_param = (uint8_t)rng_next(r);
    }
    if (rnd(r, 4) == 0) s->team = (uint8_t)between(r, 1, FZ_MAX_TEAM);
    if (s->invalid < 0 && rnd(r, 30) == 0)
        s->invalid = FZ_INVALID_SCALES_FIRST + (int)rnd(r, FZ_N_INVALID_SCALES);
}

/* variants, api, formats and team: 0 never, 1 on half of the inputs, 2 always */
static void gen_spec(uint64_t *r, fz_spec *s, int variants, int api, int formats, int team)
{
    fz_spec_init(s);
    s->causal = rnd(r, 2);
    s->lse = rnd(r, 4) != 0;
    s->workspace = rnd(r, 4) == 0 ? between(r, 1, 2) : 0;
    s->threads = between(r, 2, 3);
    s->batch = rnd(r, 3) ? 1 : between(r, 2, 3);
    s->kv_heads = between(r, 1, 3);
    s->group = between(r, 1, 4);
    const unsigned sz = rnd(r, 100);
    if (sz < 55)
        s->q_len = between(r, 1, 8), s->kv_len = between(r, 1, 64);
    else if (sz < 78)
        s->q_len = between(r, 1, 40), s->kv_len = between(r, 1, 300);
    else if (sz < 88)
        s->q_len = between(r, 1, 4), s->kv_len = between(r, 300, 1100);
    else { /* one query block over 2048+ keys: the planner splits the keys into chunks */
        s->q_len = between(r, 1, 16);
        s->kv_len = between(r, 2040, 2200);
        s->batch = 1;
        s->kv_heads = between(r, 1, 2);
    }
    const unsigned dc = rnd(r, 100);
    s->head_dim = dc < 60 ? between(r, 1, 32) : dc < 85 ? between(r, 33, 96) : between(r, 97, 160);
    if (rnd(r, 10) < 3) s->v_dim = rnd(r, 2) ? between(r, 1, 24) : between(r, 1, 160);
    s->k_dtype = rnd(r, 2) ? 0 : between(r, 1, 2);
    s->v_dtype = rnd(r, 2) ? 0 : between(r, 1, 2);
    s->scale_kind = rnd(r, 5) < 2 ? 0 : between(r, 1, 7);
    s->scale_param = (uint32_t)rng_next(r);
    if (s->scale_kind == 1) { /* a raw scale: any finite float within 2^+-60 */
        const float f =
            ldexpf(1.0f + (float)rnd(r, 1u << 20) * 0x1p-20f, (int)between(r, 0, 120) - 60);
        s->scale_param = fz_f32_bits(rnd(r, 2) ? -f : f);
    }
    for (int t = 0; t < 4; t++) s->layout[t] = rnd(r, 2) ? 0 : (uint8_t)rng_next(r);
    s->invalid = rnd(r, 25) == 0 ? (int)rnd(r, FZ_N_INVALID_PLAIN) : -1;
    static const uint8_t fills[20] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 2, 3, 4, 4, 4, 5, 5, 5, 6, 7};
    for (int t = 0; t < 3; t++) {
        s->fill[t] = fills[rnd(r, 20)];
        s->fill_param[t] = (uint8_t)rng_next(r);
    }
    s->seed = (uint32_t)rng_next(r);
    s->n_inject = rnd(r, 2) ? 0 : between(r, 1, 6);
    for (unsigned i = 0; i < s->n_inject; i++) {
        fz_inject *in = &s->inject[i];
        in->tensor = (uint8_t)rnd(r, 3);
        const unsigned sh = rnd(r, 10);
        in->shape = sh < 6 ? FZS_ELEMENT : sh < 8 ? FZS_ROW : sh < 9 ? FZS_ROWS : FZS_COLUMN;
        in->value = (uint8_t)rnd(r, 16);
        in->param = (uint8_t)rng_next(r);
        in->idx = (uint32_t)rng_next(r);
        in->len = (uint16_t)(rnd(r, 4) ? rnd(r, 16) : rnd(r, 1100));
        in->raw = fz_f32_bits(
            ldexpf(1.0f + (float)rnd(r, 1024) / 1024.0f, (int)between(r, 0, 200) - 100));
    }
    if (variants == 2 || (variants == 1 && rnd(r, 2))) gen_variants(r, s);
    if (api == 2 || (api == 1 && rnd(r, 2))) gen_api(r, s);
    if (formats == 2 || (formats == 1 && rnd(r, 2))) gen_formats(r, s);
    if (team == 2 || (team == 1 && rnd(r, 2))) gen_team(r, s);
}

/* ------------------------------------------------------------------------------------------ */
/* The corpus: reproducers of known bugs, then generated seeds                                 */
/* ------------------------------------------------------------------------------------------ */
static fz_inject inj(unsigned tensor, unsigned shape, unsigned value, uint32_t idx, unsigned len,
                     unsigned param, float raw)
{
    fz_inject in;
    memset(&in, 0, sizeof in);
    in.tensor = (uint8_t)tensor, in.shape = (uint8_t)shape, in.value = (uint8_t)value;
    in.idx = idx, in.len = (uint16_t)len, in.param = (uint8_t)param;
    in.raw = fz_f32_bits(raw);
    return in;
}

typedef struct named_spec {
    const char *name;
    fz_spec spec;
} named_spec;

/* The defaults with lse, uniform values (fill 0) and the given seed. */
static fz_spec uniform_spec(unsigned seed)
{
    fz_spec s;
    fz_spec_init(&s);
    s.lse = 1;
    s.fill[0] = s.fill[1] = s.fill[2] = 0;
    s.seed = seed;
    return s;
}

/* One long uniform-valued problem of a single query row (decode) over kv_len keys. */
static fz_spec decode_spec(unsigned kv_len, unsigned d)
{
    fz_spec s = uniform_spec(7);
    s.kv_len = kv_len, s.head_dim = d;
    return s;
}

static size_t known_specs(named_spec *out)
{
    size_t n = 0;
    fz_spec s;
    /* 1. q[0] NaN, 2048 keys: split into two chunks whose partial states are merged */
    s = decode_spec(2048, 64);
    s.inject[s.n_inject++] = inj(FZ_Q, FZS_ELEMENT, FZV_NAN, 0, 0, 0, 0);
    out[n++] = (named_spec){"bug1-split-q-nan", s};
    /* 2. one NaN score in each 1024-key chunk (k[5][0] and k[1500][3]) */
    s = decode_spec(2048, 64);
    s.inject[s.n_inject++] = inj(FZ_K, FZS_ELEMENT, FZV_NAN, 5 * 64 + 0, 0, 0, 0);
    s.inject[s.n_inject++] = inj(FZ_K, FZS_ELEMENT, FZV_NAN, 1500 * 64 + 3, 0, 0, 0);
    out[n++] = (named_spec){"bug2-split-nan-score-per-chunk", s};
    /* 3. every score of the first chunk NaN: K rows 0..1023 NaN */
    s = decode_spec(2048, 64);
    s.inject[s.n_inject++] = inj(FZ_K, FZS_ROWS, FZV_NAN, 0, 1023, 0, 0);
    out[n++] = (named_spec){"bug3-split-first-chunk-all-nan", s};
    /* 4. causal: a key a row does not see must not reach it */
    fz_spec_init(&s);
    s.causal = 1, s.lse = 1;
    s.q_len = 2, s.kv_len = 2, s.head_dim = 4;
    s.fill[0] = s.fill[1] = s.fill[2] = 0;
    s.seed = 11;
    s.inject[s.n_inject++] = inj(FZ_V, FZS_ELEMENT, FZV_PINF, 1 * 4 + 0, 0, 0, 0);
    out[n++] = (named_spec){"bug4a-causal-unseen-v-inf", s};
    s.inject[0].value = FZV_NAN;
    out[n++] = (named_spec){"bug4b-causal-unseen-v-nan", s};
    s.q_len = 16, s.kv_len = 16;
    s.inject[0] = inj(FZ_V, FZS_ROW, FZV_PINF, 15, 0, 0, 0);
    out[n++] = (named_spec){"bug4c-causal-16-rows-v15-inf", s};
    /* 5a. q 1e10, k 1e-20 and 2e-20, scale 1e30: scores 1e20 and 2e20 fit a float, but
       scale * q = 1e40 does not */
    fz_spec_init(&s);
    s.lse = 1;
    s.kv_len = 2;
    s.scale_kind = 1, s.scale_param = fz_f32_bits(1e30f);
    s.inject[s.n_inject++] = inj(FZ_Q, FZS_ELEMENT, FZV_RAW, 0, 0, 0, 1e10f);
    s.inject[s.n_inject++] = inj(FZ_K, FZS_ELEMENT, FZV_RAW, 0, 0, 0, 1e-20f);
    s.inject[s.n_inject++] = inj(FZ_K, FZS_ELEMENT, FZV_RAW, 1, 0, 0, 2e-20f);
    s.inject[s.n_inject++] = inj(FZ_V, FZS_ELEMENT, FZV_ONE, 0, 0, 0, 0);
    s.inject[s.n_inject++] = inj(FZ_V, FZS_ELEMENT, FZV_RAW, 1, 0, 0, 2.0f);
    out[n++] = (named_spec){"bug5a-scale-q-overflow", s};
    /* 5b. q 1e-30, scale 1e-30 (scale * q underflows in f32) against k = -inf: every score is
       -inf, so zeros and lse -inf, not 0 * -inf = NaN */
    fz_spec_init(&s);
    s.lse = 1;
    s.kv_len = 2;
    s.scale_kind = 1, s.scale_param = fz_f32_bits(1e-30f);
    s.inject[s.n_inject++] = inj(FZ_Q, FZS_ELEMENT, FZV_RAW, 0, 0, 0, 1e-30f);
    s.inject[s.n_inject++] = inj(FZ_K, FZS_ROWS, FZV_NINF, 0, 1, 0, 0);
    s.inject[s.n_inject++] = inj(FZ_V, FZS_ELEMENT, FZV_ONE, 0, 0, 0, 0);
    s.inject[s.n_inject++] = inj(FZ_V, FZS_ELEMENT, FZV_RAW, 1, 0, 0, 2.0f);
    out[n++] = (named_spec){"bug5b-scale-q-underflow-k-ninf", s};
    /* 6. q 1, k {0, -88}, v {0, 1e38}: o = e^-88 1e38 = 0.605; SIMD may flush e^-88 to 0 */
    fz_spec_init(&s);
    s.lse = 1;
    s.kv_len = 2;
    s.scale_kind = 6; /* 1.0 */
    s.inject[s.n_inject++] = inj(FZ_Q, FZS_ELEMENT, FZV_ONE, 0, 0, 0, 0);
    s.inject[s.n_inject++] = inj(FZ_K, FZS_ELEMENT, FZV_RAW, 1, 0, 0, -88.0f);
    s.inject[s.n_inject++] = inj(FZ_V, FZS_ELEMENT, FZV_RAW, 1, 0, 0, 1e38f);
    out[n++] = (named_spec){"bug6-flushed-weight-huge-v", s};
    /* 7. q = {FLT_MAX, 1e-30}, k = {{0, 1e30}, {0, 0}}, v = {1, 0}: scores 1 and 0 (plain f32
       products are exact enough), so o = e / (e + 1) = 0.731; a shift of scale q putting
       FLT_MAX near 1 underflows 1e-30 to 0 and gives 0.5 */
    fz_spec_init(&s);
    s.lse = 1;
    s.kv_len = 2, s.head_dim = 2, s.v_dim = 1;
    s.scale_kind = 6; /* 1.0 */
    s.inject[s.n_inject++] = inj(FZ_Q, FZS_ELEMENT, FZV_FLTMAX, 0, 0, 0, 0);
    s.inject[s.n_inject++] = inj(FZ_Q, FZS_ELEMENT, FZV_RAW, 1, 0, 0, 1e-30f);
    s.inject[s.n_inject++] = inj(FZ_K, FZS_ELEMENT, FZV_RAW, 1, 0, 0, 1e30f);
    s.inject[s.n_inject++] = inj(FZ_V, FZS_ELEMENT, FZV_ONE, 0, 0, 0, 0);
    out[n++] = (named_spec){"bug7-q-range-lost-to-rescaling", s};
    /* variant bug 1: softcap 2^-140 (valid: finite, positive), score 0 (q = k = 0), v = 1: the
       score is c tanh(0 / c) = 0, so o = 1 and lse = 0; s * (1 / c) with 1 / c = inf is NaN */
    fz_spec_init(&s);
    s.lse = 1;
    s.softcap_kind = 2, s.softcap_param = 9; /* 2^(9 - 149) */
    s.inject[s.n_inject++] = inj(FZ_V, FZS_ELEMENT, FZV_ONE, 0, 0, 0, 0);
    out[n++] = (named_spec){"variant-bug1-subnormal-softcap-zero-score", s};

    /* Seeds of the variants. Poison: 1 + (what | where << 2), what 0 K NaN, 1 V +inf, 2 V NaN,
       3 K -inf and V NaN; where 0 keys every row hides, 1 the first row, 2 the last, 3 any. */
    /* decode, causal with a window of 300 over 2100 keys (split into chunks): the keys left of
       the window hold NaN K */
    s = decode_spec(2100, 64);
    s.causal = 1, s.window = 300, s.poison = 1 + (0 | 0 << 2);
    out[n++] = (named_spec){"var-window-causal-decode-split", s};
    /* four queries, window 700 both ways over 2200 keys, V +inf outside every window */
    s = decode_spec(2200, 40);
    s.q_len = 4, s.window = 700, s.poison = 1 + (1 | 0 << 2);
    out[n++] = (named_spec){"var-window-split-v-inf-outside", s};
    /* sinks over a split decode: a moderate sink, and a second head with another */
    s = decode_spec(2048, 64);
    s.group = 2, s.sink_kind = 1, s.sink_param = 3;
    out[n++] = (named_spec){"var-sinks-split", s};
    /* sinks of every class (-inf, huge, large negative) on a split causal decode */
    s = decode_spec(2100, 32);
    s.kv_heads = 2, s.group = 4, s.causal = 1, s.sink_kind = 2, s.sink_param = 0;
    out[n++] = (named_spec){"var-sinks-mixed-split", s};
    /* an f32 mask with -inf holes (100 of 256), one query row: every hidden key holds NaN K */
    s = decode_spec(64, 16);
    s.mask = 1, s.mask_class = 2, s.mask_param = 100, s.poison = 1 + (0 | 0 << 2);
    out[n++] = (named_spec){"var-mask-holes-k-nan", s};
    /* the same with V NaN and K -inf on the hidden keys, an f16 mask broadcast over heads */
    s.mask = 2, s.group = 3, s.mask_layout = 2, s.poison = 1 + (3 | 0 << 2);
    out[n++] = (named_spec){"var-mask-holes-kv-nonfinite", s};
    /* a bf16 block-diagonal mask (blocks of 5) on a causal prefill; V +inf on the keys the
       first row hides */
    s = uniform_spec(21);
    s.causal = 1, s.q_len = 24, s.kv_len = 24, s.head_dim = 8;
    s.mask = 3, s.mask_class = 3, s.mask_param = 4, s.poison = 1 + (1 | 1 << 2);
    out[n++] = (named_spec){"var-mask-block-diagonal-v-inf", s};
    /* split decode whose first 1024-key chunk the mask hides whole, its K NaN */
    s = decode_spec(2048, 64);
    s.mask = 1, s.mask_class = 6, s.mask_param = 128 + 3, s.poison = 1 + (0 | 0 << 2);
    out[n++] = (named_spec){"var-mask-hides-first-chunk", s};
    /* Gemma-like softcap 30 with the standard ALiBi slopes on a causal prefill */
    fz_spec_init(&s);
    s.lse = 1, s.causal = 1, s.q_len = 16, s.kv_len = 40, s.head_dim = 32, s.group = 4;
    s.fill[0] = s.fill[1] = s.fill[2] = 5, s.fill_param[0] = s.fill_param[1] = 4, s.seed = 5;
    s.softcap_kind = 3, s.softcap_param = 290, s.alibi_kind = 1, s.alibi_param = 7;
    out[n++] = (named_spec){"var-softcap-alibi-prefill", s};
    /* every variant at once on a split decode with NaN and +inf in the mask's hidden keys */
    s = decode_spec(2150, 48);
    s.group = 2, s.window = 900, s.softcap_kind = 4, s.softcap_param = 500, s.alibi_kind = 2,
    s.alibi_param = 4;
    s.sink_kind = 1, s.sink_param = 2, s.mask = 2, s.mask_class = 7, s.poison = 1 + (2 | 0 << 2);
    out[n++] = (named_spec){"var-all-split", s};

    /* The API fields (issue #24). Defect 1: q8_scores wrote the quantized query's block scales
       past its scratch slot when R D / 32 is odd (here one row per item and D = 96: the slot
       was 32 floats and the 3 scales went to floats 32-34), over the plan's sequence table; the
       second KV head's item then reads garbage lengths. */
    s = uniform_spec(24);
    s.kv_heads = 3, s.kv_len = 40, s.head_dim = 96;
    s.k_format = 1, s.q8_scores = 1;
    out[n++] = (named_spec){"api-bug1-q8-scores-scales-past-slot", s};
    /* padded queries and keys: sequences of 0 queries, of 0 keys, and of more queries than keys,
       causal (rows before the first key see nothing) */
    s = uniform_spec(31);
    s.causal = 1, s.batch = 3, s.kv_heads = 2, s.group = 2, s.q_len = 9, s.kv_len = 7,
    s.head_dim = 24;
    s.q_form = 1, s.kv_form = 1, s.q_lens_class = 5, s.kv_lens_class = 3;
    out[n++] = (named_spec){"api-padded-zero-and-short", s};
    /* packed queries and keys with unused tokens after the last sequence, a window, ALiBi */
    s = uniform_spec(32);
    s.batch = 3, s.group = 3, s.q_len = 12, s.kv_len = 50, s.head_dim = 40;
    s.q_form = 2, s.kv_form = 2, s.slack = 3, s.q_lens_class = 1, s.kv_lens_class = 2;
    s.window = 9, s.alibi_kind = 1, s.alibi_param = 7;
    out[n++] = (named_spec){"api-packed-slack-window", s};
    /* paged, pages of one key, shared pages, junk in unused entries, shuffled, spare pages */
    s = uniform_spec(33);
    s.batch = 3, s.kv_heads = 2, s.group = 2, s.q_len = 3, s.kv_len = 37, s.head_dim = 32;
    s.kv_form = 1, s.kv_lens_class = 1;
    s.paged = 1 | 2 | 4 | 8 | 3 << 4 | 2 << 6, s.page_size = 1;
    out[n++] = (named_spec){"api-paged-ps1-shared-junk", s};
    /* paged decode over 2100 keys (split into chunks), pages of 16 in order in a [head][page]
       layout: adjacent pages form runs */
    s = decode_spec(2100, 64);
    s.kv_heads = 2, s.group = 4, s.causal = 1, s.layout[1] = s.layout[2] = 2;
    s.paged = 1 | 1 << 4, s.page_size = 16;
    out[n++] = (named_spec){"api-paged-ps16-runs-split", s};
    /* paged prefill, pages of 48 keys (gathered into a staged copy), f16 K beside q4_0 V */
    s = uniform_spec(35);
    s.causal = 1, s.group = 4, s.q_len = 20, s.kv_len = 150, s.head_dim = 64, s.k_dtype = 1;
    s.v_format = 2, s.paged = 1 | 4 | 8, s.page_size = 48;
    out[n++] = (named_spec){"api-paged-ps48-q4-v", s};
    /* q4_0 K with q8_scores on a split decode */
    s = decode_spec(2100, 128);
    s.group = 3, s.k_format = 2, s.q8_scores = 1;
    out[n++] = (named_spec){"api-q4-k-q8-scores-split", s};
    /* q8_0 K and V, head dim 256, GQA 4, a prefill block beyond the decode path's rows */
    s = uniform_spec(37);
    s.causal = 1, s.kv_heads = 2, s.group = 4, s.q_len = 8, s.kv_len = 70, s.head_dim = 256;
    s.k_format = s.v_format = 1;
    out[n++] = (named_spec){"api-q8-kv-d256-gqa", s};
    /* an odd head dim (255) with bf16 K and a v_dim of 1 in f16 */
    s = uniform_spec(38);
    s.group = 2, s.q_len = 5, s.kv_len = 33, s.head_dim = 255, s.v_dim = 1, s.k_dtype = 2,
    s.v_dtype = 1;
    out[n++] = (named_spec){"api-odd-dim-255", s};
    /* sdpa_merge: 8 parts of special lse values (-inf, NaN, +inf, huge) merged in place, dv 200 */
    fz_spec_init(&s);
    s.head_dim = 200, s.seed = 39;
    s.merge = 1 + (7 | 8 | 16 | 2 << 5 | 128), s.merge_rows = 40 | 3 << 6, s.merge_layout = 1;
    out[n++] = (named_spec){"api-merge-specials-in-place", s};
    /* refused: lse over the block table, o over cu_kv, and a merge whose extent overflows */
    fz_spec_init(&s);
    s.lse = 1, s.batch = 2, s.kv_len = 20, s.head_dim = 16, s.paged = 1, s.page_size = 4;
    s.invalid = FZ_INVALID_API_FIRST + 19; /* 45 */
    out[n++] = (named_spec){"api-refused-lse-over-block-table", s};
    fz_spec_init(&s);
    s.batch = 3, s.kv_len = 20, s.head_dim = 16, s.kv_form = 2, s.kv_lens_class = 1;
    s.invalid = FZ_INVALID_API_FIRST + 32; /* 58 */
    s.merge_refuse = 1 + 16;
    out[n++] = (named_spec){"api-refused-o-over-cu-kv-merge-overflow", s};

    /* The block formats of issue #26. q4_1 K beside q5_0 V on a causal GQA prefill, head dim 96 */
    s = uniform_spec(41);
    s.causal = 1, s.kv_heads = 2, s.group = 3, s.q_len = 12, s.kv_len = 70;
    s.head_dim = 96;
    s.k_format = 3, s.v_format = 4;
    out[n++] = (named_spec){"fmt-q4_1-k-q5_0-v-prefill", s};
    /* iq4_nl K with q8_scores on a split decode, head dim 160, V in f16 */
    s = decode_spec(2100, 160);
    s.group = 2, s.v_dtype = 1, s.k_format = 6, s.q8_scores = 1;
    out[n++] = (named_spec){"fmt-iq4_nl-k-q8-scores-split", s};
    /* q5_1 K and V, paged (pages of 16, shuffled, junk in unused entries), K in (0, 1), V
       constant: the minimum holds the values */
    fz_spec_init(&s);
    s.lse = 1, s.batch = 3, s.kv_heads = 2, s.group = 2, s.q_len = 4, s.kv_len = 90;
    s.head_dim = 64;
    s.fill[0] = 0, s.fill[1] = 7, s.fill[2] = 6, s.fill_param[2] = 77, s.seed = 43;
    s.kv_form = 1, s.kv_lens_class = 1, s.paged = 1 | 4 | 8, s.page_size = 16;
    s.k_format = s.v_format = 5;
    out[n++] = (named_spec){"fmt-q5_1-kv-paged-ps16-one-sign", s};
    /* q4_1 K of values in (0, 1) with q8_scores (the score is mostly m_k sum q), head dim 224,
       three query rows per KV head, q5_1 V */
    fz_spec_init(&s);
    s.lse = 1, s.group = 3, s.q_len = 1, s.kv_len = 300, s.head_dim = 224;
    s.fill[0] = 0, s.fill[1] = 7, s.fill[2] = 0, s.seed = 44;
    s.k_format = 3, s.v_format = 5, s.q8_scores = 1;
    out[n++] = (named_spec){"fmt-q4_1-k-q8-scores-one-sign", s};
    /* iq4_nl K with a -inf element, q5_0 V with a NaN one, a causal prefill with sinks */
    s = uniform_spec(45);
    s.causal = 1, s.group = 2, s.q_len = 6, s.kv_len = 40, s.head_dim = 32;
    s.sink_kind = 1, s.sink_param = 2;
    s.inject[s.n_inject++] = inj(FZ_K, FZS_ELEMENT, FZV_NINF, 5 * 32 + 7, 0, 0, 0);
    s.inject[s.n_inject++] = inj(FZ_V, FZS_ELEMENT, FZV_NAN, 20 * 32 + 3, 0, 0, 0);
    s.k_format = 6, s.v_format = 4;
    out[n++] = (named_spec){"fmt-iq4_nl-k-q5_0-v-nonfinite", s};

    /* mask_scales (scales_kind: class | 4 for ggml's distance mask) and teams. ggml's ALiBi: the
       standard slopes of max_bias 8 over one f32 distance mask shared by batch and heads, a
       causal GQA prefill on a team of 4 */
    fz_spec_init(&s);
    s.lse = 1, s.causal = 1, s.batch = 2, s.group = 4, s.q_len = 16, s.kv_len = 40;
    s.head_dim = 32;
    s.fill[0] = s.fill[1] = s.fill[2] = 0, s.seed = 51;
    s.mask = 1, s.mask_layout = 1 | 2, s.scales_kind = 1 | 4, s.scales_param = 7, s.team = 4;
    out[n++] = (named_spec){"ms-alibi-distance-mask-prefill", s};
    /* the same over an f16 distance mask with -inf holes, a split decode with sinks, team of 3 */
    s = decode_spec(2100, 64);
    s.group = 4, s.sink_kind = 1, s.sink_param = 2;
    s.mask = 2, s.mask_class = 2, s.mask_param = 40, s.scales_kind = 1 | 4, s.scales_param = 7;
    s.team = 3;
    out[n++] = (named_spec){"ms-alibi-split-decode-sinks", s};
    /* factors 0, -0, negative, subnormal, ... per head over a bf16 mask of -inf, 0, +-8 and -100;
       V +inf on the keys every row hides */
    fz_spec_init(&s);
    s.lse = 1, s.kv_heads = 2, s.group = 4, s.q_len = 6, s.kv_len = 50, s.head_dim = 40;
    s.fill[0] = s.fill[1] = s.fill[2] = 0, s.seed = 53;
    s.mask = 3, s.mask_class = 7, s.poison = 1 + (1 | 0 << 2), s.scales_kind = 2;
    out[n++] = (named_spec){"ms-random-factors-bf16-mask", s};
    /* a factor of 2^20 over large finite negatives (-1e4 .. -FLT_MAX): products beyond float
       are -inf, scores of weight 0 on keys the row still sees; team of 2 */
    fz_spec_init(&s);
    s.lse = 1, s.group = 2, s.q_len = 5, s.kv_len = 30, s.head_dim = 16;
    s.fill[0] = s.fill[1] = s.fill[2] = 0, s.seed = 54;
    s.mask = 1, s.mask_class = 5, s.scales_kind = 3, s.scales_param = 0, s.team = 2;
    out[n++] = (named_spec){"ms-large-factor-huge-mask", s};
    /* -2^24 on the odd heads over the same mask: +inf scores, NaN rows there */
    s.scales_param = 128 + 4, s.seed = 55;
    out[n++] = (named_spec){"ms-large-negative-factor-nan", s};
    /* teams: a split decode over 2150 keys on 4 threads, the workspace sized for them */
    s = decode_spec(2150, 128);
    s.kv_heads = 2, s.group = 2, s.workspace = 1, s.team = 4;
    out[n++] = (named_spec){"team-split-decode-nth4", s};
    /* paged q8_0 K with q8_scores on 3 threads, a workspace too small (thread 0 allocates) */
    fz_spec_init(&s);
    s.lse = 1, s.batch = 3, s.kv_heads = 2, s.group = 2, s.q_len = 3, s.kv_len = 90;
    s.head_dim = 96;
    s.fill[0] = s.fill[1] = s.fill[2] = 0, s.seed = 57;
    s.kv_form = 1, s.kv_lens_class = 1, s.paged = 1 | 4 | 8, s.page_size = 16;
    s.k_format = 1, s.q8_scores = 1, s.workspace = 2, s.team = 3;
    out[n++] = (named_spec){"team-paged-q8-scores-nth3", s};
    /* packed queries and padded keys with sinks on 2 threads, the workspace sized for 2 + 2
       threads and 4 bytes off malloc's alignment */
    fz_spec_init(&s);
    s.lse = 1, s.causal = 1, s.batch = 3, s.group = 3, s.q_len = 12, s.kv_len = 60;
    s.head_dim = 48;
    s.fill[0] = s.fill[1] = s.fill[2] = 0, s.seed = 58;
    s.q_form = 2, s.kv_form = 1, s.q_lens_class = 1, s.kv_lens_class = 5, s.sink_kind = 2;
    s.workspace = 1, s.misc = 1 | 2, s.team = 2;
    out[n++] = (named_spec){"team-ragged-sinks-nth2", s};
    /* a team of one on a causal prefill */
    fz_spec_init(&s);
    s.lse = 1, s.causal = 1, s.kv_heads = 3, s.q_len = 40, s.kv_len = 64, s.head_dim = 64;
    s.fill[0] = s.fill[1] = s.fill[2] = 0, s.seed = 59;
    s.team = 1;
    out[n++] = (named_spec){"team-nth1-prefill", s};
    /* refused mask_scales calls, each made by a team too (every thread refuses) */
    static const struct {
        const char *name;
        int kind;
        uint8_t team;
    } refused[5] = {{"ms-refused-nan-factor-team", 0, 4},
                    {"ms-refused-inf-factor", 1, 0},
                    {"ms-refused-no-mask-team", 3, 2},
                    {"ms-refused-lse-over-scales-team", 4, 3},
                    {"ms-refused-o-over-scales", 5, 0}};
    for (int i = 0; i < 5; i++) {
        fz_spec_init(&s);
        s.lse = 1, s.batch = 2, s.group = 3, s.q_len = 4, s.kv_len = 20, s.head_dim = 16;
        s.fill[0] = s.fill[1] = s.fill[2] = 0, s.seed = 60 + (uint32_t)i;
        s.mask = 1, s.mask_class = 1, s.scales_kind = 2, s.team = refused[i].team;
        s.invalid = FZ_INVALID_SCALES_FIRST + refused[i].kind;
        out[n++] = (named_spec){refused[i].name, s};
    }
    return n;
}

#define N_SEEDS     24 /* generated seeds of plain calls (seed-NN) */
#define N_VAR_SEEDS 12 /* generated seeds with variants (var-seed-NN) */
#define N_OLD_KNOWN 10 /* reproducers before the variants: the plain seeds' generator offset */
#define N_API_SEEDS 12 /* generated seeds with the API fields (api-seed-NN) */
#define N_FMT_SEEDS 12 /* generated seeds with the block formats of issue #26 (fmt-seed-NN) */
#define N_MS_SEEDS  12 /* generated seeds with mask_scales and teams (ms-seed-NN) */

static int write_corpus(const char *dir)
{
    named_spec specs[96];
    const size_t n = known_specs(specs);
    mkdir(dir, 0777);
    uint8_t buf[FZ_MAX_BYTES];
    char path[4096];
    int written = 0;
    for (size_t i = 0; i < n + N_SEEDS + N_VAR_SEEDS + N_API_SEEDS + N_FMT_SEEDS + N_MS_SEEDS;
         i++) {
        fz_spec s;
        char name[64];
        if (i < n) {
            s = specs[i].spec;
            snprintf(name, sizeof name, "%s", specs[i].name);
        } else if (i < n + N_SEEDS) {
            /* the index the seed had before the variants' reproducers joined the list */
            uint64_t r = 0xc0ffee00u + N_OLD_KNOWN + (i - n);
            gen_spec(&r, &s, 0, 0, 0, 0); /* the seeds written before the variants, unchanged */
            snprintf(name, sizeof name, "seed-%02zu", i - n);
        } else if (i < n + N_SEEDS + N_VAR_SEEDS) {
            uint64_t r = 0x7a810000u + (i - n - N_SEEDS);
            gen_spec(&r, &s, 2, 0, 0, 0);
            snprintf(name, sizeof name, "var-seed-%02zu", i - n - N_SEEDS);
        } else if (i < n + N_SEEDS + N_VAR_SEEDS + N_API_SEEDS) {
            uint64_t r = 0xa9100000u + (i - n - N_SEEDS - N_VAR_SEEDS);
            gen_spec(&r, &s, 1, 2, 0, 0);
            snprintf(name, sizeof name, "api-seed-%02zu", i - n - N_SEEDS - N_VAR_SEEDS);
        } else if (i < n + N_SEEDS + N_VAR_SEEDS + N_API_SEEDS + N_FMT_SEEDS) {
            const size_t k = i - n - N_SEEDS - N_VAR_SEEDS - N_API_SEEDS;
            uint64_t r = 0xb10c0000u + k;
            gen_spec(&r, &s, 1, 1, 2, 0);
            snprintf(name, sizeof name, "fmt-seed-%02zu", k);
        } else {
            const size_t k = i - n - N_SEEDS - N_VAR_SEEDS - N_API_SEEDS - N_FMT_SEEDS;
            uint64_t r = 0x3ca1e000u + k;
            gen_spec(&r, &s, 1, 1, 1, 2);
            snprintf(name, sizeof name, "ms-seed-%02zu", k);
        }
        const size_t len = fz_encode(&s, buf, sizeof buf);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "fuzz_driver: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
        written++;
    }
    printf("wrote %d inputs to %s\n", written, dir);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Running and reporting                                                                        */
/* ------------------------------------------------------------------------------------------ */
static const char *artifacts;
static int printed_repros;

static void print_hex(const uint8_t *d, size_t n)
{
    printf("#   reproducer (%zu bytes; fuzz_driver --hex ", n);
    for (size_t i = 0; i < n; i++) printf("%02x", d[i]);
    printf(")\n");
}

static void save_artifact(const uint8_t *d, size_t n, const char *tag)
{
    if (!artifacts || !*artifacts) return;
    mkdir(artifacts, 0777);
    char path[4096];
    snprintf(path, sizeof path, "%s/fail-%s", artifacts, tag);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(d, 1, n, f);
        fclose(f);
        printf("#   saved as %s\n", path);
    }
}

/* The input being run, for the crash handler: a crash is a failure too, and its input must
   not be lost with the process. */
static const uint8_t *crash_data;
static size_t crash_size;
static const char *crash_tag;
static char crash_path[4096];

static void crash_write(const char *s) { (void)!write(1, s, strlen(s)); }

/* On a fatal signal: prints the input being run as hex (and saves it where SDPA_FUZZ_ARTIFACTS
   says), then dies of the signal. Only async-signal-safe calls. */
static void on_crash(int sig)
{
    static const char hex[] = "0123456789abcdef";
    crash_write("\n# CRASH (signal ");
    char num[4] = {(char)('0' + sig / 10 % 10), (char)('0' + sig % 10), ')', 0};
    crash_write(num);
    if (crash_data) {
        crash_write(" on input ");
        crash_write(crash_tag);
        crash_write("\n#   reproducer (fuzz_driver --hex ");
        for (size_t i = 0; i < crash_size; i++) {
            const char b[3] = {hex[crash_data[i] >> 4], hex[crash_data[i] & 15], 0};
            crash_write(b);
        }
        crash_write(")\n");
        if (crash_path[0]) {
            const int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
            if (fd >= 0) {
                (void)!write(fd, crash_data, crash_size);
                close(fd);
            }
        }
    } else {
        crash_write("\n");
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_crashes(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_crash);
}

/* Runs one input; returns the implementations whose checks failed, as a bit set. */
static unsigned run_one(const uint8_t *d, size_t n, const char *tag)
{
    fflush(stdout);
    crash_data = d, crash_size = n, crash_tag = tag;
    crash_path[0] = 0;
    if (artifacts && *artifacts) {
        mkdir(artifacts, 0777);
        snprintf(crash_path, sizeof crash_path, "%s/crash-%s", artifacts, tag);
    }
    unsigned long before[SDPA_FUZZ_MAX_IMPLS];
    memcpy(before, sdpa_fuzz_counts_get()->failures, sizeof before);
    const int failed = sdpa_fuzz_one(d, n);
    crash_data = NULL;
    unsigned mask = 0;
    for (size_t i = 0; i < SDPA_FUZZ_MAX_IMPLS; i++)
        if (sdpa_fuzz_counts_get()->failures[i] != before[i]) mask |= 1u << i;
    if (failed) {
        printf("# input %s: the %d failed checks above\n", tag, failed);
        if (printed_repros++ < 20) print_hex(d, n);
        save_artifact(d, n, tag);
        fflush(stdout);
    }
    return mask;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int read_file(const char *path, uint8_t *buf, size_t cap, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    *len = fread(buf, 1, cap, f);
    fclose(f);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void print_counts(const char *what, double secs)
{
    const sdpa_fuzz_counts *c = sdpa_fuzz_counts_get();
    printf("# %s: %lu inputs in %.1f s (%.0f inputs/s, %.0f forward calls/s): %lu valid (%lu split "
           "into KV chunks), "
           "%lu refused\n",
           what, c->inputs, secs, c->inputs / (secs > 0 ? secs : 1),
           c->forward_calls / (secs > 0 ? secs : 1), c->valid_calls, c->split_calls,
           c->invalid_calls);
    printf("# %s: rows checked against float64 %lu, NaN rows %lu, zero rows %lu, unchecked (beyond "
           "the promise) %lu; "
           "worst |err|/tol %.3g\n",
           what, c->rows_value, c->rows_nan, c->rows_zero, c->rows_unchecked, c->worst_ratio);
    printf("# %s: valid calls with ragged batches %lu, paged K/V %lu, block-format K or V %lu "
           "(q8_scores %lu; q4_1, q5_0, q5_1 or iq4_nl %lu); sdpa_merge %lu checked, %lu refused\n",
           what, c->ragged_calls, c->paged_calls, c->quant_calls, c->q8_calls, c->newfmt_calls,
           c->merge_calls, c->merge_refused);
    printf("# %s: valid calls with mask_scales %lu; team calls %lu\n", what, c->scaled_calls,
           c->team_calls);
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

int main(int argc, char **argv)
{
    long execs = -1;
    uint64_t seed = 1;
    const char *corpus = NULL, *hex = NULL;
    const char *files[256];
    int n_files = 0;
    bool describe = false;
    int variants = 1; /* generated inputs with attention variants: 0 none, 1 half, 2 all */
    int api = 1;      /* ... with the API fields, likewise */
    int formats = 1;  /* ... with the block formats of every kind, likewise */
    int team = 1;     /* ... with mask_scales and teams, likewise */
    const char *e = getenv("SDPA_FUZZ_SEED");
    if (e && *e) seed = strtoull(e, NULL, 0);
    e = getenv("SDPA_FUZZ_EXECS");
    if (e && *e) execs = strtol(e, NULL, 10);
    artifacts = getenv("SDPA_FUZZ_ARTIFACTS");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--execs") && i + 1 < argc)
            execs = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--corpus") && i + 1 < argc)
            corpus = argv[++i];
        else if (!strcmp(argv[i], "--hex") && i + 1 < argc)
            hex = argv[++i];
        else if (!strcmp(argv[i], "--describe"))
            describe = true;
        else if (!strcmp(argv[i], "--variants") && i + 1 < argc)
            variants = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--api") && i + 1 < argc)
            api = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--formats") && i + 1 < argc)
            formats = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--team") && i + 1 < argc)
            team = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--write-corpus") && i + 1 < argc)
            return write_corpus(argv[++i]);
        else if (argv[i][0] == '-') {
            fprintf(stderr,
                    "usage: %s [--execs N] [--seed S] [--variants 0|1|2] [--api 0|1|2] "
                    "[--formats 0|1|2] [--team 0|1|2] [--corpus DIR] [--hex HEX] [FILE...] | "
                    "--write-corpus DIR\n",
                    argv[0]);
            return 2;
        } else if (n_files < 256)
            files[n_files++] = argv[i];
    }
    sdpa_fuzz_set_log(stdout, "# ", 8);
    catch_crashes();
#ifdef __GLIBC__
    /* every input allocates and frees buffers of up to a few MB: kept in the heap rather than
       mapped afresh, they cost no page faults */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
    printf("TAP version 13\n# fuzz: sdpa_impl_forward on every implementation, serial and pooled, "
           "against float64\n");

    if (hex) { /* one input, no generated ones */
        uint8_t buf[4096];
        size_t n = 0;
        for (const char *p = hex; p[0] && p[1] && n < sizeof buf; p += 2) {
            const int hi = hexval(p[0]), lo = hexval(p[1]);
            if (hi < 0 || lo < 0) break;
            buf[n++] = (uint8_t)(hi * 16 + lo);
        }
        if (describe) sdpa_fuzz_describe(buf, n, stdout);
        const unsigned m = run_one(buf, n, "hex");
        printf("%s 1 - the input given as hex\n1..1\n", m ? "not ok" : "ok");
        return m ? 1 : 0;
    }

    if (execs < 0 && n_files > 0) execs = 0; /* replaying files only */
    if (execs < 0) {
        execs = DEFAULT_EXECS;
#ifdef FZ_UNDER_ASAN
        execs /= 8;
        printf("# AddressSanitizer build: %ld generated inputs\n", execs);
#endif
    }
    const char *sm = getenv("SDPA_TEST_SAMPLE");
    const long sample = sm ? strtol(sm, NULL, 10) : 1;
    if (sample > 1 && !getenv("SDPA_FUZZ_EXECS")) {
        execs /= sample;
        printf("# SDPA_TEST_SAMPLE=%ld: %ld generated inputs\n", sample, execs);
    }

    int point = 0, failed_points = 0;
    const size_t n_impl = sdpa_impl_count();
    unsigned long fail_inputs[SDPA_FUZZ_MAX_IMPLS] = {0};
    if (execs > 0) {
        uint64_t r = seed * 0x2545f4914f6cdd1du + 1;
        uint8_t buf[FZ_MAX_BYTES];
        sdpa_fuzz_counts_reset();
        const double t0 = now_s();
        for (long x = 0; x < execs; x++) {
            fz_spec s;
            gen_spec(&r, &s, variants, api, formats, team);
            const size_t n = fz_encode(&s, buf, sizeof buf);
            char tag[64];
            snprintf(tag, sizeof tag, "seed%llu-%ld", (unsigned long long)seed, x);
            const unsigned m = run_one(buf, n, tag);
            for (size_t i = 0; i < SDPA_FUZZ_MAX_IMPLS; i++)
                if (m & (1u << i)) fail_inputs[i]++;
        }
        print_counts("generated", now_s() - t0);
    }
    for (size_t i = 0; i < n_impl && execs > 0; i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        point++;
        if (!sdpa_impl_supported(impl)) {
            printf("ok %d - fuzz %s # SKIP %s needs %s, which this CPU or OS lacks\n", point,
                   sdpa_impl_name(impl), sdpa_impl_name(impl), sdpa_impl_requires(impl));
            continue;
        }
        if (!sdpa_test_selected(sdpa_impl_name(impl))) {
            printf("ok %d - fuzz %s # SKIP not in SDPA_TEST_IMPLS\n", point, sdpa_impl_name(impl));
            continue;
        }
        const bool ok = i >= SDPA_FUZZ_MAX_IMPLS || fail_inputs[i] == 0;
        failed_points += !ok;
        if (ok)
            printf("ok %d - fuzz %s: %ld executions\n", point, sdpa_impl_name(impl), execs);
        else
            printf("not ok %d - fuzz %s: %ld executions, %lu failing inputs\n", point,
                   sdpa_impl_name(impl), execs, fail_inputs[i]);
    }

    /* the corpus replay: every file of the corpus directory, then the FILEs */
    char *names[1024];
    int n_names = 0;
    bool corpus_error = false;
    if (corpus) {
        DIR *dir = opendir(corpus);
        if (!dir) {
            printf("# cannot open the corpus directory %s: %s\n", corpus, strerror(errno));
            corpus_error = true;
        } else {
            struct dirent *de;
            while ((de = readdir(dir)) && n_names < 1024) {
                if (de->d_name[0] == '.') continue;
                char *p = malloc(strlen(corpus) + strlen(de->d_name) + 2);
                if (!p) break;
                sprintf(p, "%s/%s", corpus, de->d_name);
                names[n_names++] = p;
            }
            closedir(dir);
            qsort(names, (size_t)n_names, sizeof *names, cmp_str);
            if (n_names == 0) {
                printf("# the corpus directory %s is empty\n", corpus);
                corpus_error = true;
            }
        }
    }
    for (int i = 0; i < n_files && n_names < 1024; i++) names[n_names++] = strdup(files[i]);
    if (n_names > 0 || corpus_error) {
        sdpa_fuzz_counts_reset();
        const double t0 = now_s();
        int bad = 0;
        for (int i = 0; i < n_names; i++) {
            uint8_t buf[1 << 16];
            size_t n = 0;
            const char *base = strrchr(names[i], '/') ? strrchr(names[i], '/') + 1 : names[i];
            if (read_file(names[i], buf, sizeof buf, &n) != 0) {
                printf("# cannot read %s\n", names[i]);
                bad++;
                continue;
            }
            if (describe) sdpa_fuzz_describe(buf, n, stdout);
            const unsigned m = run_one(buf, n, base);
            if (m) {
                printf("# corpus %s: FAILED on", base);
                for (size_t k = 0; k < SDPA_FUZZ_MAX_IMPLS; k++)
                    if (m & (1u << k)) printf(" %s", sdpa_impl_name(sdpa_impl_at(k)));
                printf("\n");
                bad++;
            }
        }
        print_counts("corpus", now_s() - t0);
        point++;
        if (bad || corpus_error) failed_points++;
        printf("%s %d - corpus replay: %d inputs on every supported implementation%s\n",
               bad || corpus_error ? "not ok" : "ok", point, n_names, bad ? ", some failed" : "");
        for (int i = 0; i < n_names; i++) free(names[i]);
    }
    printf("1..%d\n", point);
    return failed_points ? 1 : 0;
}
