/* fuzz_forward.c -- differential fuzz target: bytes -> an attention call and a merge, run on every
 * implementation, checked against float64 */
/*
 * One input decodes to one call of sdpa_impl_forward (README.md gives the byte format), and
 * optionally one of sdpa_merge. The call runs on every implementation this CPU supports,
 * serially, through bench/pool.h's pool in shuffled order and, when the input asks, by a team of
 * threads (sdpa_impl_forward_team); the results must be the same bits, and the serial one must
 * match the float64 oracle below, which uses no library code.
 * Inputs built to be refused must be refused, with the same status from sdpa_validate and a
 * message, and must write nothing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fuzz_forward.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../test_select.h"
#include "pool.h"
#include "sdpa.h"

/* ------------------------------------------------------------------------------------------ */
/* Reporting                                                                                    */
/* ------------------------------------------------------------------------------------------ */
static FILE *fz_log_file;
static bool fz_log_set;
static const char *fz_log_prefix = "";
static int fz_log_max = 8;
static int fz_log_lines; /* printed for the current input */
static sdpa_fuzz_counts fz_counts;

void sdpa_fuzz_set_log(FILE *f, const char *prefix, int max_lines_per_input)
{
    fz_log_file = f;
    fz_log_set = true;
    fz_log_prefix = prefix ? prefix : "";
    fz_log_max = max_lines_per_input;
}

const sdpa_fuzz_counts *sdpa_fuzz_counts_get(void) { return &fz_counts; }
void sdpa_fuzz_counts_reset(void) { memset(&fz_counts, 0, sizeof fz_counts); }

static int fz_failed; /* failed checks of the current input */

/* fz_fail's implementation index for sdpa_merge, which no implementation runs: its failures are
   counted on the active implementation. */
#define FZ_WHO_MERGE ((size_t)-1)

static size_t fz_active_index(void)
{
    for (size_t i = 0; i < sdpa_impl_count(); i++)
        if (sdpa_impl_at(i) == sdpa_active()) return i;
    return 0;
}

/* One failed check of implementation `impl` (registry index, or FZ_WHO_MERGE). */
__attribute__((format(printf, 2, 3))) static void fz_fail(size_t impl, const char *fmt, ...)
{
    fz_failed++;
    const size_t idx = impl == FZ_WHO_MERGE ? fz_active_index() : impl;
    if (idx < SDPA_FUZZ_MAX_IMPLS) fz_counts.failures[idx]++;
    FILE *f = fz_log_set ? fz_log_file : stderr;
    if (!f || fz_log_lines >= fz_log_max) return;
    fz_log_lines++;
    fprintf(f, "%sFAIL [%s] ", fz_log_prefix,
            impl == FZ_WHO_MERGE ? "sdpa_merge" : sdpa_impl_name(sdpa_impl_at(impl)));
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    if (fz_log_lines == fz_log_max)
        fprintf(f, "%s(further failures of this input not printed)\n", fz_log_prefix);
    fflush(f);
}

/* ------------------------------------------------------------------------------------------ */
/* Float bits and the test's own f16/bf16 conversions (the oracle uses no library code)         */
/* ------------------------------------------------------------------------------------------ */
uint32_t fz_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float fz_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float f16_decode(uint16_t h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    if (e == 31)
        return m ? fz_bits_f32(((uint32_t)(h & 0x8000) << 16) | 0x7fc00000u | ((uint32_t)m << 13))
                 : sign * INFINITY;
    if (e == 0) return sign * (float)m * 0x1p-24f;
    /* a normal f16 is a normal f32 of the same significand: rebias the exponent */
    return fz_bits_f32(((uint32_t)(h & 0x8000) << 16) | ((uint32_t)(e - 15 + 127) << 23) |
                       ((uint32_t)m << 13));
}

/* Round to nearest even through the exact decoder: any rounding would do (the oracle reads
   back what was stored), this one gives the usual values. */
static uint16_t f16_encode(float f)
{
    const uint32_t u = fz_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if (f != f) return (uint16_t)(sign | 0x7e00 | ((u >> 13) & 0x1ff));
    const float a = fabsf(f);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
    uint16_t h;
    if (a < 0x1p-14f) {
        h = (uint16_t)nearbyintf(a *
                                 0x1p24f); /* subnormal steps of 2^-24; 1024 is the least normal */
    } else {
        int e;
        const float m = frexpf(a, &e);           /* a = m 2^e, m in [0.5, 1) */
        const float r = nearbyintf(m * 2048.0f); /* 11 significant bits */
        int ee = e - 1;                          /* a ~ (r / 1024) 2^ee */
        uint32_t sig = (uint32_t)r;
        if (sig == 2048) sig = 1024, ee++;
        if (ee > 15) return (uint16_t)(sign | 0x7c00);
        h = (uint16_t)(((uint32_t)(ee + 15) << 10) | (sig - 1024));
    }
    return (uint16_t)(sign | h);
}

static float bf16_decode(uint16_t b) { return fz_bits_f32((uint32_t)b << 16); }

static uint16_t bf16_encode(float f)
{
    uint32_t u = fz_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ------------------------------------------------------------------------------------------ */
/* The byte format (README.md)                                                                  */
/* ------------------------------------------------------------------------------------------ */
#define FZ_MAX_Q_LEN    40
#define FZ_MAX_KV_LEN   2200
#define FZ_MAX_DIM      256 /* the dims' byte range: inputs written when it was 160 decode as before */
#define FZ_INVALID_BASE 240 /* byte 19 >= this: a refused call of kind byte - 240 */
#define FZ_HEADER       31

/* The refused calls of the API bytes, kind FZ_INVALID_API_FIRST + these (README). */
enum {
    BAD_TABLE_HIGH,
    BAD_TABLE_NEG,
    BAD_CU_Q_DEC,
    BAD_CU_KV_DEC,
    BAD_CU_Q_0,
    BAD_Q_LENS,
    BAD_KV_LENS,
    BAD_CU_KV_LONG,
    BAD_Q_BOTH,
    BAD_CU_KV_PAGED,
    BAD_PAGE_SIZE_0,
    BAD_N_PAGES_0,
    BAD_PAGES_SHORT,
    BAD_Q8_FLOAT_K,
    BAD_Q8_2,
    BAD_QK_STRIDE,
    BAD_QV_DIM,
    BAD_Q_Q8,
    BAD_O_Q4,
    BAD_LSE_TABLE,
    BAD_LSE_Q_LENS,
    BAD_LSE_KV_LENS,
    BAD_LSE_CU_Q,
    BAD_LSE_CU_KV,
    BAD_LSE_SINKS,
    BAD_LSE_SLOPES,
    BAD_LSE_MASK,
    BAD_LSE_WS,
    BAD_O_TABLE,
    BAD_O_Q_LENS,
    BAD_O_KV_LENS,
    BAD_O_CU_Q,
    BAD_O_CU_KV,
    BAD_O_SINKS,
    BAD_O_SLOPES,
    BAD_O_WS,
    N_BAD_API
};
_Static_assert(N_BAD_API == FZ_N_INVALID_API, "the API refusals of fuzz_forward.h");

/* The refused calls of the mask_scales bytes, kind FZ_INVALID_SCALES_FIRST + these (README). */
enum { BAD_MS_NAN, BAD_MS_PINF, BAD_MS_NINF, BAD_MS_NO_MASK, BAD_MS_LSE, BAD_MS_O, N_BAD_MS };
_Static_assert(N_BAD_MS == FZ_N_INVALID_SCALES, "the mask_scales refusals of fuzz_forward.h");

typedef struct reader {
    const uint8_t *p;
    size_t n, i;
} reader;

static uint8_t rd8(reader *r) { return r->i < r->n ? r->p[r->i++] : 0; }
static uint16_t rd16(reader *r)
{
    const uint16_t a = rd8(r);
    return (uint16_t)(a | (uint16_t)(rd8(r) << 8));
}
static uint32_t rd32(reader *r)
{
    const uint32_t a = rd16(r);
    return a | ((uint32_t)rd16(r) << 16);
}

void fz_spec_init(fz_spec *s)
{
    memset(s, 0, sizeof *s);
    s->batch = s->kv_heads = s->group = s->q_len = s->kv_len = s->head_dim = 1;
    s->threads = 2;
    s->invalid = -1;
    s->page_size = 1;
    s->fill[0] = s->fill[1] = s->fill[2] = 3; /* zeros */
}

/* A format field of two bits: 0, 1, 2, and 3 read as 1. */
static uint8_t two_bits(unsigned b) { return (uint8_t)((b & 3) == 3 ? 1 : b & 3); }

void fz_decode(const uint8_t *data, size_t size, fz_spec *s)
{
    reader r = {data, size, 0};
    memset(s, 0, sizeof *s);
    const uint8_t flags = rd8(&r);
    s->causal = flags & 1;
    s->lse = (flags >> 1) & 1;
    s->workspace = ((flags >> 2) & 3) % 3;
    s->threads = (flags & 16) ? 3 : 2;
    const bool has_v_dim = flags & 32;
    s->batch = 1 + rd8(&r) % 3;
    s->kv_heads = 1 + rd8(&r) % 3;
    s->group = 1 + rd8(&r) % 4;
    s->q_len = 1 + rd8(&r) % FZ_MAX_Q_LEN;
    s->kv_len = 1 + rd16(&r) % FZ_MAX_KV_LEN;
    s->head_dim = 1 + rd8(&r) % FZ_MAX_DIM;
    const unsigned vd = 1 + rd8(&r) % FZ_MAX_DIM;
    s->v_dim = has_v_dim ? vd : 0;
    const uint8_t dt = rd8(&r);
    s->k_dtype = dt % 3;
    s->v_dtype = (dt / 3) % 3;
    s->scale_kind = rd8(&r) % 8;
    s->scale_param = rd32(&r);
    for (int i = 0; i < 4; i++) s->layout[i] = rd8(&r);
    const uint8_t inv = rd8(&r);
    s->invalid = inv >= FZ_INVALID_BASE ? inv - FZ_INVALID_BASE : -1;
    for (int t = 0; t < 3; t++) {
        s->fill[t] = rd8(&r) % 8;
        s->fill_param[t] = rd8(&r);
    }
    s->seed = rd32(&r);
    s->n_inject = rd8(&r) % (FZ_MAX_INJECT + 1);
    for (unsigned i = 0; i < s->n_inject; i++) {
        fz_inject *in = &s->inject[i];
        const uint8_t kind = rd8(&r);
        in->tensor = (kind & 3) == 3 ? FZ_K : (kind & 3);
        in->shape = (kind >> 2) & 3;
        in->value = kind >> 4;
        in->idx = rd32(&r);
        in->len = rd16(&r);
        in->param = rd8(&r);
        in->raw = in->value == FZV_RAW ? rd32(&r) : 0;
    }
    /* the variants: after everything above, so that older inputs (which end there) read 0s */
    s->window = rd16(&r);
    s->softcap_kind = rd8(&r) % 8;
    s->softcap_param = rd32(&r);
    s->alibi_kind = rd8(&r) % 4;
    s->alibi_param = rd8(&r);
    s->sink_kind = rd8(&r) % 4;
    s->sink_param = rd8(&r);
    s->mask = rd8(&r);
    s->mask_layout = rd8(&r);
    s->mask_class = rd8(&r) % 8;
    s->mask_param = rd8(&r);
    s->mask_special = rd8(&r);
    s->poison = rd8(&r);
    const uint8_t refuse = rd8(&r);
    if (s->invalid < 0 && refuse)
        s->invalid = FZ_N_INVALID_PLAIN + (refuse - 1) % FZ_N_INVALID_VARIANT;
    /* the API fields: after the variants, for the same reason */
    const uint8_t fmt = rd8(&r);
    s->k_format = two_bits(fmt);
    s->v_format = two_bits(fmt >> 2);
    s->q8_scores = (fmt >> 4) & 1;
    s->misc = (fmt >> 5) & 7;
    const uint8_t rg = rd8(&r);
    s->q_form = two_bits(rg);
    s->kv_form = two_bits(rg >> 2);
    s->slack = (rg >> 4) & 3;
    s->q_lens_class = rd8(&r) % 8;
    s->kv_lens_class = rd8(&r) % 8;
    s->paged = rd8(&r);
    s->page_size = 1u + rd8(&r);
    s->merge = rd8(&r);
    s->merge_rows = rd8(&r);
    s->merge_layout = rd8(&r);
    s->merge_refuse = rd8(&r);
    const uint8_t refuse_api = rd8(&r);
    if (s->invalid < 0 && refuse_api)
        s->invalid = FZ_INVALID_API_FIRST + (refuse_api - 1) % FZ_N_INVALID_API;
    /* the block formats, after the API fields: a nibble of K and one of V, 0 as above, else the
       format 1 + (n - 1) % 6 (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) */
    const uint8_t bf = rd8(&r);
    if (bf & 15) s->k_format = (uint8_t)(1 + ((bf & 15) - 1) % FZ_N_FORMATS);
    if (bf >> 4) s->v_format = (uint8_t)(1 + ((bf >> 4) - 1) % FZ_N_FORMATS);
    /* mask_scales and the team, after the block formats, for the same reason */
    s->scales_kind = rd8(&r) & 7;
    s->scales_param = rd8(&r);
    s->team = rd8(&r);
    const uint8_t refuse_scales = rd8(&r);
    if (s->invalid < 0 && refuse_scales)
        s->invalid = FZ_INVALID_SCALES_FIRST + (refuse_scales - 1) % FZ_N_INVALID_SCALES;
}

/* A format the API fields' two bits hold (0, q8_0, q4_0); the others go to the block-format
   byte. */
static unsigned api_format(unsigned f) { return f % 7 <= 2 ? f % 7 : 0; }
static unsigned byte_format(unsigned f) { return f % 7 > 2 ? f % 7 : 0; }
_Static_assert(FZ_N_FORMATS + 1 == 7, "formats 0..6");

static bool has_format_byte(const fz_spec *s)
{
    return byte_format(s->k_format) || byte_format(s->v_format);
}

static bool has_team_bytes(const fz_spec *s)
{
    return s->scales_kind & 7 || s->scales_param || s->team ||
           s->invalid >= FZ_INVALID_SCALES_FIRST;
}

static bool has_api_bytes(const fz_spec *s)
{
    return has_team_bytes(s) || s->k_format % 7 || s->v_format % 7 || s->q8_scores || s->misc ||
           s->q_form % 3 || s->kv_form % 3 || s->slack || s->q_lens_class % 8 ||
           s->kv_lens_class % 8 || s->paged || (s->page_size - 1) % 256 || s->merge ||
           s->merge_rows || s->merge_layout || s->merge_refuse ||
           (s->invalid >= FZ_INVALID_API_FIRST && s->invalid < FZ_INVALID_SCALES_FIRST);
}

static bool has_variant_bytes(const fz_spec *s)
{
    return s->window || s->softcap_kind % 8 || s->softcap_param || s->alibi_kind % 4 ||
           s->alibi_param || s->sink_kind % 4 || s->sink_param || s->mask || s->mask_layout ||
           s->mask_class % 8 || s->mask_param || s->mask_special || s->poison ||
           (s->invalid >= FZ_N_INVALID_PLAIN && s->invalid < FZ_INVALID_API_FIRST) ||
           has_api_bytes(s);
}

static size_t wr8(uint8_t *out, size_t cap, size_t i, unsigned v)
{
    if (i < cap) out[i] = (uint8_t)v;
    return i + 1;
}
static size_t wr16(uint8_t *out, size_t cap, size_t i, unsigned v)
{
    i = wr8(out, cap, i, v & 255);
    return wr8(out, cap, i, (v >> 8) & 255);
}
static size_t wr32(uint8_t *out, size_t cap, size_t i, uint32_t v)
{
    i = wr16(out, cap, i, v & 0xffff);
    return wr16(out, cap, i, v >> 16);
}

size_t fz_encode(const fz_spec *s, uint8_t *out, size_t cap)
{
    size_t i = 0;
    const unsigned flags = (s->causal ? 1u : 0u) | (s->lse ? 2u : 0u) | ((s->workspace % 3) << 2) |
                           (s->threads == 3 ? 16u : 0u) | (s->v_dim ? 32u : 0u);
    i = wr8(out, cap, i, flags);
    i = wr8(out, cap, i, (s->batch - 1) % 3);
    i = wr8(out, cap, i, (s->kv_heads - 1) % 3);
    i = wr8(out, cap, i, (s->group - 1) % 4);
    i = wr8(out, cap, i, (s->q_len - 1) % FZ_MAX_Q_LEN);
    i = wr16(out, cap, i, (s->kv_len - 1) % FZ_MAX_KV_LEN);
    i = wr8(out, cap, i, (s->head_dim - 1) % FZ_MAX_DIM);
    i = wr8(out, cap, i, s->v_dim ? (s->v_dim - 1) % FZ_MAX_DIM : 0);
    i = wr8(out, cap, i, s->k_dtype % 3 + 3 * (s->v_dtype % 3));
    i = wr8(out, cap, i, s->scale_kind % 8);
    i = wr32(out, cap, i, s->scale_param);
    for (int t = 0; t < 4; t++) i = wr8(out, cap, i, s->layout[t]);
    i = wr8(out, cap, i,
            s->invalid < 0 || s->invalid >= FZ_N_INVALID_PLAIN
                ? 0
                : FZ_INVALID_BASE + (unsigned)s->invalid);
    for (int t = 0; t < 3; t++) {
        i = wr8(out, cap, i, s->fill[t] % 8);
        i = wr8(out, cap, i, s->fill_param[t]);
    }
    i = wr32(out, cap, i, s->seed);
    const unsigned n = s->n_inject > FZ_MAX_INJECT ? FZ_MAX_INJECT : s->n_inject;
    i = wr8(out, cap, i, n);
    for (unsigned j = 0; j < n; j++) {
        const fz_inject *in = &s->inject[j];
        i = wr8(out, cap, i, (in->tensor % 3) | ((in->shape & 3u) << 2) | ((in->value & 15u) << 4));
        i = wr32(out, cap, i, in->idx);
        i = wr16(out, cap, i, in->len);
        i = wr8(out, cap, i, in->param);
        if ((in->value & 15) == FZV_RAW) i = wr32(out, cap, i, in->raw);
    }
    if (!has_variant_bytes(s)) return i; /* a plain call: the bytes of the format before variants */
    i = wr16(out, cap, i, s->window & 0xffff);
    i = wr8(out, cap, i, s->softcap_kind % 8);
    i = wr32(out, cap, i, s->softcap_param);
    i = wr8(out, cap, i, s->alibi_kind % 4);
    i = wr8(out, cap, i, s->alibi_param);
    i = wr8(out, cap, i, s->sink_kind % 4);
    i = wr8(out, cap, i, s->sink_param);
    i = wr8(out, cap, i, s->mask);
    i = wr8(out, cap, i, s->mask_layout);
    i = wr8(out, cap, i, s->mask_class % 8);
    i = wr8(out, cap, i, s->mask_param);
    i = wr8(out, cap, i, s->mask_special);
    i = wr8(out, cap, i, s->poison);
    i = wr8(out, cap, i,
            s->invalid >= FZ_N_INVALID_PLAIN && s->invalid < FZ_INVALID_API_FIRST
                ? 1 + (unsigned)(s->invalid - FZ_N_INVALID_PLAIN) % FZ_N_INVALID_VARIANT
                : 0);
    if (!has_api_bytes(s)) return i; /* the bytes of the format before the API fields */
    i = wr8(out, cap, i,
            api_format(s->k_format) | api_format(s->v_format) << 2 | (s->q8_scores & 1u) << 4 |
                (s->misc & 7u) << 5);
    i = wr8(out, cap, i, (s->q_form % 3u) | (s->kv_form % 3u) << 2 | (s->slack & 3u) << 4);
    i = wr8(out, cap, i, s->q_lens_class % 8);
    i = wr8(out, cap, i, s->kv_lens_class % 8);
    i = wr8(out, cap, i, s->paged);
    i = wr8(out, cap, i, (s->page_size - 1) % 256);
    i = wr8(out, cap, i, s->merge);
    i = wr8(out, cap, i, s->merge_rows);
    i = wr8(out, cap, i, s->merge_layout);
    i = wr8(out, cap, i, s->merge_refuse);
    i = wr8(out, cap, i,
            s->invalid >= FZ_INVALID_API_FIRST && s->invalid < FZ_INVALID_SCALES_FIRST
                ? 1 + (unsigned)(s->invalid - FZ_INVALID_API_FIRST) % FZ_N_INVALID_API
                : 0);
    /* the bytes of the format before the block-format byte */
    if (!has_format_byte(s) && !has_team_bytes(s)) return i;
    i = wr8(out, cap, i, byte_format(s->k_format) | byte_format(s->v_format) << 4);
    if (!has_team_bytes(s)) return i; /* the bytes of the format before mask_scales */
    i = wr8(out, cap, i, s->scales_kind & 7);
    i = wr8(out, cap, i, s->scales_param);
    i = wr8(out, cap, i, s->team);
    return wr8(out, cap, i,
               s->invalid >= FZ_INVALID_SCALES_FIRST
                   ? 1 + (unsigned)(s->invalid - FZ_INVALID_SCALES_FIRST) % FZ_N_INVALID_SCALES
                   : 0);
}

static unsigned round32(unsigned d) { return (d + 31) / 32 * 32; }

/* The spec a call is built from (README): block formats round their dims up to a multiple of
   32, paged keys are never packed (padded instead), and a refused API call gets the feature it
   is built on. */
static void fz_effective(fz_spec *s)
{
    s->k_format %= FZ_N_FORMATS + 1, s->v_format %= FZ_N_FORMATS + 1;
    switch (s->invalid - FZ_INVALID_API_FIRST) {
    case BAD_TABLE_HIGH:
    case BAD_TABLE_NEG:
    case BAD_PAGE_SIZE_0:
    case BAD_N_PAGES_0:
    case BAD_LSE_TABLE:
    case BAD_O_TABLE:
        s->paged |= 1;
        break;
    case BAD_CU_KV_PAGED:
    case BAD_PAGES_SHORT: /* every sequence kv_len keys, at least 2 */
        s->paged |= 1, s->kv_form = 0;
        if (s->kv_len < 2) s->kv_len = 2;
        break;
    case BAD_CU_Q_DEC:
    case BAD_CU_Q_0:
    case BAD_LSE_CU_Q:
    case BAD_O_CU_Q:
        s->q_form = 2;
        break;
    case BAD_CU_KV_DEC:
    case BAD_CU_KV_LONG:
    case BAD_LSE_CU_KV:
    case BAD_O_CU_KV:
        s->kv_form = 2, s->paged &= 0xfe;
        break;
    case BAD_Q_LENS:
    case BAD_Q_BOTH:
    case BAD_LSE_Q_LENS:
    case BAD_O_Q_LENS:
        s->q_form = 1;
        break;
    case BAD_KV_LENS:
    case BAD_LSE_KV_LENS:
    case BAD_O_KV_LENS:
        s->kv_form = 1;
        break;
    case BAD_Q8_FLOAT_K:
        s->k_format = 0;
        break;
    case BAD_QK_STRIDE:
        if (!s->k_format) s->k_format = 1;
        break;
    case BAD_QV_DIM:
        if (!s->v_format) s->v_format = 1;
        break;
    case BAD_LSE_SINKS:
    case BAD_O_SINKS:
        if (!(s->sink_kind % 4)) s->sink_kind = 1;
        break;
    case BAD_LSE_SLOPES:
    case BAD_O_SLOPES:
        if (!(s->alibi_kind % 4)) s->alibi_kind = 1;
        break;
    case BAD_LSE_MASK:
        if (!s->mask) s->mask = 1;
        break;
    default:
        break;
    }
    /* mask_scales need a mask: without one the class is off, unless a refusal wants it */
    if (s->invalid >= FZ_INVALID_SCALES_FIRST) {
        if (!(s->scales_kind & 3)) s->scales_kind |= 2;
        if (s->invalid - FZ_INVALID_SCALES_FIRST == BAD_MS_NO_MASK)
            s->mask = 0;
        else if (!s->mask)
            s->mask = 1;
    } else if (!s->mask) {
        s->scales_kind = 0;
    }
    if ((s->paged & 1) && s->kv_form == 2) s->kv_form = 1;
    if (s->k_format || (s->v_format && !s->v_dim)) s->head_dim = round32(s->head_dim);
    if (s->v_format && s->v_dim) s->v_dim = round32(s->v_dim);
}

/* ------------------------------------------------------------------------------------------ */
/* Problem: sizes (shrunk to a work budget), views, values                                       */
/* ------------------------------------------------------------------------------------------ */

/* The oracle and every run cost about rows * kv_len * (head_dim + v_dim) multiply-adds: the
   budget keeps one input to a few milliseconds; kv_len, which decides the split, is kept. */
#define FZ_BUDGET ((size_t)1 << 22)
#define FZ_MARGIN 16 /* sentinel elements before and after every view */
#define FZ_QK     32 /* elements per block of the block formats */

/* The block formats, as fz_spec.k_format numbers them (0: a float type) */
static const sdpa_dtype fz_formats[FZ_N_FORMATS + 1] = {SDPA_F32,  SDPA_Q8_0, SDPA_Q4_0,  SDPA_Q4_1,
                                                        SDPA_Q5_0, SDPA_Q5_1, SDPA_IQ4_NL};
/* iq4_nl's 16 values, from sdpa.h */
static const int fz_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};

static bool dt_is_block(sdpa_dtype t)
{
    for (int i = 1; i <= FZ_N_FORMATS; i++)
        if (fz_formats[i] == t) return true;
    return false;
}
static bool dt_has_min(sdpa_dtype t) { return t == SDPA_Q4_1 || t == SDPA_Q5_1; }

/* Elements per block and bytes per block (per element for f32, f16, bf16), from the formats'
   definitions in sdpa.h (the oracle does not ask the library). */
static size_t dt_block(sdpa_dtype t) { return dt_is_block(t) ? FZ_QK : 1; }
static size_t dt_bytes(sdpa_dtype t)
{
    switch (t) {
    case SDPA_F32:
        return 4;
    case SDPA_Q8_0:
        return 2 + FZ_QK;
    case SDPA_Q4_0:
    case SDPA_IQ4_NL:
        return 2 + FZ_QK / 2;
    case SDPA_Q4_1:
        return 4 + FZ_QK / 2;
    case SDPA_Q5_0:
        return 6 + FZ_QK / 2;
    case SDPA_Q5_1:
        return 8 + FZ_QK / 2;
    default:
        return 2;
    }
}
static const char *dt_name(sdpa_dtype t) { return sdpa_dtype_name(t); }

/* The float types a spec's dtype and mask bytes select (mod 3); its block formats are
   fz_formats'. */
static const sdpa_dtype float_types[3] = {SDPA_F32, SDPA_F16, SDPA_BF16};

typedef struct view {
    size_t n[3], D;   /* [batch or page][head][token], D contiguous */
    ptrdiff_t st[3];  /* strides, elements */
    ptrdiff_t origin; /* element index of [0][0][0][0] in buf */
    size_t n_elems;   /* elements of buf, margins included (a multiple of blk) */
    size_t es, blk;   /* bytes per block and elements per block (1 but for the block formats) */
    sdpa_dtype dt;
    unsigned char *buf;
    float *sh; /* a block format's values before quantization: what view_store writes */
} view;

/* A view's origin and buffer length from its counts, row length D and strides: the lowest element
   reached lies `margin` elements in, and `margin` more follow the highest. */
static void view_place(view *v, size_t margin)
{
    ptrdiff_t lo = 0, hi = (ptrdiff_t)v->D - 1;
    for (int a = 0; a < 3; a++) {
        const ptrdiff_t reach = (ptrdiff_t)(v->n[a] - 1) * v->st[a];
        *(reach < 0 ? &lo : &hi) += reach;
    }
    v->origin = (ptrdiff_t)margin - lo;
    v->n_elems = (size_t)(hi - lo + 1) + 2 * margin;
}

/* Lays out a view from a selector byte: bits 0-1 the axis order (innermost first: token, head,
   batch / head, token, batch / token, batch, head / batch, token, head), bits 2-4 a negative
   stride for token, head, batch, bits 5-6 padding of 0, 1, 3 or 8 elements (blocks, for a block
   format) after each step, bit 7 (inputs only) broadcast: a zero stride for batch and for each
   axis whose sign bit is set. A block format's strides are then multiples of its block, and so
   is its origin (a margin of one block). */
static void view_layout(view *v, size_t B, size_t H, size_t T, size_t D, sdpa_dtype dt, uint8_t sel,
                        bool may_broadcast)
{
    static const int orders[4][3] = {
        {2, 1, 0}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}}; /* axes 0 b, 1 h, 2 t */
    static const size_t pads[4] = {0, 1, 3, 8};
    memset(v, 0, sizeof *v);
    v->n[0] = B, v->n[1] = H, v->n[2] = T, v->D = D, v->dt = dt;
    v->es = dt_bytes(dt), v->blk = dt_block(dt);
    const unsigned signs = (sel >> 2) & 7; /* bit 0 token, bit 1 head, bit 2 batch */
    const bool bcast = may_broadcast && (sel & 0x80);
    const size_t pad = pads[(sel >> 5) & 3] * v->blk;
    size_t span = D;
    for (int k = 0; k < 3; k++) {
        const int a = orders[sel & 3][k];
        const unsigned bit = a == 2 ? 1u : a == 1 ? 2u : 4u;
        if (bcast && (a == 0 || (signs & bit))) {
            v->st[a] = 0;
            continue;
        }
        const size_t st = span + pad;
        span = st * (v->n[a] - 1) + span;
        v->st[a] = (signs & bit) && !bcast ? -(ptrdiff_t)st : (ptrdiff_t)st;
    }
    view_place(v, v->blk > 1 ? v->blk : FZ_MARGIN);
}

static void *fz_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "fuzz: out of memory (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}

static void *fz_xcalloc(size_t bytes)
{
    void *p = fz_xmalloc(bytes);
    memset(p, 0, bytes ? bytes : 1);
    return p;
}

static size_t view_bytes(const view *v) { return v->n_elems / v->blk * v->es; }

static void view_alloc(view *v, size_t min_elems)
{
    if (v->n_elems < min_elems) v->n_elems = (min_elems + v->blk - 1) / v->blk * v->blk;
    v->buf = fz_xcalloc(view_bytes(v));
    if (v->blk > 1) v->sh = fz_xcalloc(v->n_elems * sizeof(float));
}

static ptrdiff_t view_index(const view *v, size_t b, size_t h, size_t t, size_t c)
{
    return v->origin + (ptrdiff_t)b * v->st[0] + (ptrdiff_t)h * v->st[1] + (ptrdiff_t)t * v->st[2] +
           (ptrdiff_t)c;
}

/* A block format takes values into its shadow; view_quantize stores them. */
static void view_store(view *v, ptrdiff_t i, float x)
{
    if (v->blk > 1)
        v->sh[i] = x;
    else if (v->dt == SDPA_F32)
        memcpy(v->buf + (size_t)i * 4, &x, 4);
    else {
        const uint16_t h = v->dt == SDPA_F16 ? f16_encode(x) : bf16_encode(x);
        memcpy(v->buf + (size_t)i * 2, &h, 2);
    }
}

/* Element w of a block, by the formats' definitions in sdpa.h: an f16 scale d, then
   q8_0: 32 signed bytes q, x = d q; the others 16 bytes of nibbles (element w < 16 the low
   nibble of byte w, 16 + w its high one), after an f16 minimum m (q4_1, q5_1) and 4 bytes of
   5th bits (q5_0, q5_1: bit w of a little-endian u32); q4_0 x = d (n - 8), q5_0 d (n - 16),
   iq4_nl d times the n-th table value, q4_1 and q5_1 d n + m. d times the integer is exact in
   float; + m rounds once. */
static float block_decode(sdpa_dtype t, const unsigned char *b, size_t w)
{
    const float d = f16_decode((uint16_t)(b[0] | b[1] << 8));
    if (t == SDPA_Q8_0) return d * (float)(int8_t)b[2 + w];
    const bool has_min = dt_has_min(t), five = t == SDPA_Q5_0 || t == SDPA_Q5_1;
    const unsigned char *qs = b + 2 + (has_min ? 2 : 0) + (five ? 4 : 0);
    int n = (w < 16 ? qs[w] : qs[w - 16] >> 4) & 15;
    if (five) n |= (b[2 + (has_min ? 2 : 0) + w / 8] >> (w % 8) & 1) << 4;
    if (has_min) return d * (float)n + f16_decode((uint16_t)(b[2] | b[3] << 8));
    const int q = t == SDPA_Q4_0 ? n - 8 : t == SDPA_Q5_0 ? n - 16 : fz_iq4nl[n];
    return d * (float)q;
}

static float view_load(const view *v, ptrdiff_t i)
{
    if (v->blk > 1)
        return block_decode(v->dt, v->buf + (size_t)i / FZ_QK * v->es, (size_t)i % FZ_QK);
    if (v->dt == SDPA_F32) {
        float x;
        memcpy(&x, v->buf + (size_t)i * 4, 4);
        return x;
    }
    uint16_t h;
    memcpy(&h, v->buf + (size_t)i * 2, 2);
    return v->dt == SDPA_F16 ? f16_decode(h) : bf16_decode(h);
}

/* One block's integers n[32] into its bytes after d (and m): q8_0 the bytes themselves, the
   others nibbles and, for q5_0 and q5_1, the 5th bits. */
static void block_pack(sdpa_dtype t, const int *n, unsigned char *o)
{
    if (t == SDPA_Q8_0) {
        for (size_t i = 0; i < FZ_QK; i++) o[2 + i] = (unsigned char)(int8_t)n[i];
        return;
    }
    const bool has_min = dt_has_min(t), five = t == SDPA_Q5_0 || t == SDPA_Q5_1;
    unsigned char *qh = o + 2 + (has_min ? 2 : 0), *qs = qh + (five ? 4 : 0);
    memset(qh, 0, dt_bytes(t) - 2 - (has_min ? 2 : 0));
    for (size_t i = 0; i < FZ_QK; i++) {
        qs[i & 15] |= (unsigned char)((unsigned)(n[i] & 15) << (i < 16 ? 0 : 4));
        if (five) qh[i / 8] |= (unsigned char)(((unsigned)n[i] >> 4 & 1) << (i % 8));
    }
}

/* The scale (and minimum) a block gets, held to f16's range so that finite values stay finite:
   q8_0 max|x| / 127, q4_0 / q5_0 -m / 8 or 16 (m the element of largest magnitude), q4_1 / q5_1
   (max - min) / 15 or 31 with the minimum min, iq4_nl max|x| / 127 (a table value of each x
   nearest x / d). */
static float clamp_f16(float x) { return fminf(fmaxf(x, -65504.0f), 65504.0f); }

/* Stores a block format's shadow values. Any encoding would do (the oracle reads back what is
   stored); this one is ggml's rule for the scale (above), the integers rounded to nearest and
   clamped, while a NaN in a block makes its scale NaN and an infinity makes it infinite
   (elements +-inf where the infinities were, NaN elsewhere; q4_1 and q5_1: d = +-inf with
   m = 0, so -inf where the infinities were only in a block without +inf; iq4_nl, without a
   zero in its table: +-inf everywhere). */
static void view_quantize(view *v)
{
    if (v->blk == 1) return;
    const sdpa_dtype t = v->dt;
    const bool q8 = t == SDPA_Q8_0, has_min = dt_has_min(t), iq4 = t == SDPA_IQ4_NL;
    const int half = t == SDPA_Q5_0 ? 16 : 8; /* q4_0, q5_0: n - half */
    const int top = t == SDPA_Q5_0 || t == SDPA_Q5_1 ? 31 : 15;
    for (size_t b = 0; b < v->n_elems / FZ_QK; b++) {
        const float *x = v->sh + b * FZ_QK;
        unsigned char *o = v->buf + b * v->es;
        float amax = 0.0f, m = 0.0f, lo = INFINITY, hi = -INFINITY;
        bool nan = false, pinf = false, ninf = false;
        for (size_t i = 0; i < FZ_QK; i++) {
            if (x[i] != x[i])
                nan = true;
            else if (x[i] == INFINITY)
                pinf = true;
            else if (x[i] == -INFINITY)
                ninf = true;
            else {
                if (fabsf(x[i]) > amax) amax = fabsf(x[i]), m = x[i];
                lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
            }
        }
        uint16_t dh, mh = 0;
        if (nan)
            dh = 0x7e00;
        else if (pinf || ninf)
            dh = has_min && !pinf ? 0xfc00 : 0x7c00;
        else {
            const float d = q8 || iq4 ? amax / 127.0f
                            : has_min ? (hi - lo) / (float)top
                                      : m / (float)-half;
            dh = f16_encode(clamp_f16(d));
            if (has_min) mh = f16_encode(clamp_f16(lo == INFINITY ? 0.0f : lo));
        }
        o[0] = (unsigned char)(dh & 255), o[1] = (unsigned char)(dh >> 8);
        if (has_min) o[2] = (unsigned char)(mh & 255), o[3] = (unsigned char)(mh >> 8);
        const float d = f16_decode(dh), mn = f16_decode(mh);
        int n[FZ_QK];
        for (size_t i = 0; i < FZ_QK; i++) {
            if (nan)
                n[i] = iq4 ? 8 : q8 || has_min ? 0 : half;
            else if (pinf || ninf) {
                const int sg = isinf(x[i]) ? (x[i] > 0 ? 1 : -1) : 0;
                if (q8)
                    n[i] = 127 * sg;
                else if (has_min)
                    n[i] = sg != 0;
                else if (iq4)
                    n[i] = sg < 0 ? 0 : sg > 0 ? 15 : 8; /* 8: the value 1, d itself */
                else
                    n[i] = sg > 0 ? 2 * half - 1 : sg < 0 ? 0 : half;
            } else if (iq4) {
                int best = 0;
                const float r = d == 0.0f ? 0.0f : x[i] / d;
                for (int k = 1; k < 16; k++)
                    if (fabsf(r - (float)fz_iq4nl[k]) < fabsf(r - (float)fz_iq4nl[best])) best = k;
                n[i] = best;
            } else {
                const float r = d == 0.0f ? 0.0f : nearbyintf((x[i] - mn) / d);
                n[i] = q8        ? (int)fminf(fmaxf(r, -127.0f), 127.0f)
                       : has_min ? (int)fminf(fmaxf(r, 0.0f), (float)top)
                                 : half + (int)fminf(fmaxf(r, (float)-half), (float)(top - half));
            }
        }
        block_pack(t, n, o);
    }
}

static sdpa_tensor view_tensor(const view *v)
{
    sdpa_tensor t;
    t.data = v->buf + v->origin / (ptrdiff_t)v->blk * (ptrdiff_t)v->es;
    t.dtype = v->dt;
    t.batch_stride = v->st[0];
    t.head_stride = v->st[1];
    t.token_stride = v->st[2];
    return t;
}

/* splitmix64 */
static uint64_t fz_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}
static double fz_unit(uint64_t *s) { return (double)(fz_next(s) >> 11) * 0x1p-53; } /* [0, 1) */

/* One value of a fill class (README). */
static float fill_value(unsigned cls, unsigned param, uint64_t *s)
{
    switch (cls) {
    case 0:
        return (float)(2.0 * fz_unit(s) - 1.0);
    case 1:
        return (float)ldexp(2.0 * fz_unit(s) - 1.0, (int)(param % 64) - 32);
    case 2:
        return (float)((int)(fz_next(s) % 9) - 4);
    case 3:
        return 0.0f;
    case 4: {
        const int E = 1 + (int)(param % 60);
        const int e = (int)(fz_next(s) % (uint64_t)(2 * E + 1)) - E;
        const double m = 1.0 + fz_unit(s);
        return (float)((fz_next(s) & 1) ? -ldexp(m, e) : ldexp(m, e));
    }
    case 5:
        return (float)ldexp(2.0 * fz_unit(s) - 1.0, (int)(param % 12));
    case 6:
        return 0.5f * (float)((int)(param % 9) - 4);
    default:
        return (float)fz_unit(s);
    }
}

/* The value an injection writes (README). */
static float inject_value(const fz_inject *in)
{
    const float sign = (in->param & 128) ? -1.0f : 1.0f;
    const unsigned p = in->param & 127;
    switch (in->value & 15) {
    case FZV_NAN:
        return fz_bits_f32(0x7fc00000u);
    case FZV_PINF:
        return INFINITY;
    case FZV_NINF:
        return -INFINITY;
    case FZV_HUGE:
        return sign * (float)fmin(FLT_MAX, 1e30 * pow((double)FLT_MAX / 1e30, p / 127.0));
    case FZV_DENORMAL:
        return sign * ldexpf((float)(p + 1), -149);
    case FZV_TINY:
        return sign * ldexpf(1.0f, -126 + (int)(p % 27));
    case FZV_ZERO:
        return 0.0f;
    case FZV_NZERO:
        return -0.0f;
    case FZV_RAW:
        return fz_bits_f32(in->raw);
    case FZV_POW2:
        return sign * ldexpf(1.0f, (int)p - 64);
    case FZV_FLTMAX:
        return sign * FLT_MAX;
    case FZV_NAN_PAYLOAD:
        return fz_bits_f32(0x7f800000u | (uint32_t)(in->param + 1)); /* signalling */
    case FZV_ONE:
        return sign;
    case FZV_LARGE:
        return sign * ldexpf(1.0f, 20 + (int)(p % 40));
    case FZV_NEG_NAN:
        return fz_bits_f32(0xffc00000u);
    default:
        return (float)((int)(in->param % 9) - 4);
    }
}

static void apply_inject(view *v, const fz_inject *in)
{
    const size_t B = v->n[0], H = v->n[1], T = v->n[2], D = v->D;
    const float x = inject_value(in);
    switch (in->shape & 3) {
    case FZS_ELEMENT: {
        size_t f = in->idx % (B * H * T * D);
        const size_t c = f % D;
        f /= D;
        const size_t t = f % T;
        f /= T;
        view_store(v, view_index(v, f / H, f % H, t, c), x);
        break;
    }
    case FZS_ROW:
    case FZS_ROWS: {
        size_t f = in->idx % (B * H * T);
        const size_t t0 = f % T;
        f /= T;
        const size_t n = (in->shape & 3) == FZS_ROW ? 1 : (size_t)in->len + 1;
        for (size_t t = t0; t < T && t < t0 + n; t++)
            for (size_t c = 0; c < D; c++) view_store(v, view_index(v, f / H, f % H, t, c), x);
        break;
    }
    default: {
        const size_t f = in->idx % (T * D), t0 = f / D, c = f % D;
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < H; h++)
                for (size_t t = t0; t < T && t <= t0 + in->len; t++)
                    view_store(v, view_index(v, b, h, t, c), x);
        break;
    }
    }
}

/* Dense f32 copy [B][H][T][D] of what the view holds. */
static float *view_dense(const view *v)
{
    const size_t B = v->n[0], H = v->n[1], T = v->n[2], D = v->D;
    float *d = fz_xmalloc(B * H * T * D * sizeof *d);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t t = 0; t < T; t++)
                for (size_t c = 0; c < D; c++)
                    d[((b * H + h) * T + t) * D + c] = view_load(v, view_index(v, b, h, t, c));
    return d;
}

static float decode_scale(const fz_spec *s, size_t D)
{
    const uint32_t p = s->scale_param;
    switch (s->scale_kind % 8) {
    case 1: {
        const float f = fz_bits_f32(p);
        return isfinite(f) ? f : 0.0f;
    }
    case 2:
        return ldexpf(1.0f, (int)(p % 201) - 100);
    case 3:
        return -ldexpf(1.0f, (int)(p % 201) - 100);
    case 4:
        return (float)((1.0 + (p % 1000) / 1000.0) / sqrt((double)D));
    case 5:
        return (float)(-(0.5 + (p % 1000) / 1000.0) / sqrt((double)D));
    case 6:
        return 1.0f;
    case 7:
        return (float)(4.0 * (double)p * 0x1p-32 * ((p & 1) ? -1.0 : 1.0));
    default:
        return 0.0f;
    }
}

/* softcap c from its class (README): 0 is off */
static float decode_softcap(const fz_spec *s)
{
    const uint32_t p = s->softcap_param;
    switch (s->softcap_kind % 8) {
    case 1: {
        const float f = fabsf(fz_bits_f32(p));
        return isfinite(f) ? f : 0.0f;
    }
    case 2:
        return ldexpf(1.0f, (int)(p % 277) - 149);
    case 3:
        return 1.0f + (float)(p % 1000) / 10.0f;
    case 4:
        return (float)(p % 1000 + 1) * 0.004f;
    case 5:
        return fz_bits_f32(1 + p % 0x7fffffu); /* subnormal */
    case 6:
        return (float)((double)FLT_MAX * (0.5 + (p % 1000) / 2000.0));
    case 7:
        return ldexpf(1.0f, (int)(p % 41) - 20);
    default:
        return 0.0f;
    }
}

/* The standard ALiBi slope of head h of Hq (Press et al.; ggml's derivation from max_bias),
   computed here from its definition, not by sdpa_alibi_slopes. */
static float standard_slope(size_t h, size_t Hq, double max_bias)
{
    size_t n2 = 1;
    while (n2 * 2 <= Hq) n2 *= 2;
    return (float)(h < n2 ? exp2(-max_bias * (double)(h + 1) / (double)n2)
                          : exp2(-max_bias * (double)(2 * (h - n2) + 1) / (double)(2 * n2)));
}

/* ALiBi slopes [Hq] from their class (README); writes nothing for class 0. */
static void make_slopes(const fz_spec *s, size_t Hq, float *out)
{
    uint64_t st = ((uint64_t)s->seed << 8) ^ 0x51ed270b27u;
    const unsigned p = s->alibi_param;
    for (size_t h = 0; h < Hq; h++) {
        const double u = fz_unit(&st);
        switch (s->alibi_kind % 4) {
        case 1:
            out[h] = standard_slope(h, Hq, 1.0 + p % 16);
            break;
        case 2:
            out[h] = (float)ldexp(u, (int)(p % 16) - 8);
            break;
        case 3: {
            const unsigned c = (unsigned)(fz_next(&st) % 6);
            out[h] = c == 0   ? 0.0f
                     : c == 1 ? (float)(-2.0 * u)
                     : c == 2 ? ldexpf(1.0f, (int)(fz_next(&st) % 31))
                     : c == 3 ? 1e-30f
                     : c == 4 ? (float)u
                              : (float)ldexp(1.0 + u, (int)(fz_next(&st) % 100) - 60);
            break;
        }
        default:
            break;
        }
    }
}

/* mask_scales [Hq] from their class (README): 1 the standard slopes of max_bias 1 + p mod 16,
   2 per head one of 0, -0, negative, 1, uniform, +-2^(-30..30), 1e-30, a subnormal, 3 a large
   factor 2^(20 + p mod 16), negative on odd heads when p bit 7 is set. */
static void make_scales(const fz_spec *s, size_t Hq, float *out)
{
    uint64_t st = ((uint64_t)s->seed << 8) ^ 0x3ca1e5u;
    const unsigned p = s->scales_param;
    for (size_t h = 0; h < Hq; h++) {
        const double u = fz_unit(&st);
        switch (s->scales_kind & 3) {
        case 1:
            out[h] = standard_slope(h, Hq, 1.0 + p % 16);
            break;
        case 2: {
            const unsigned c = (unsigned)(fz_next(&st) % 8);
            const float sg = (fz_next(&st) & 1) ? -1.0f : 1.0f;
            out[h] = c == 0   ? 0.0f
                     : c == 1 ? -0.0f
                     : c == 2 ? (float)(-4.0 * u)
                     : c == 3 ? 1.0f
                     : c == 4 ? (float)u
                     : c == 5 ? sg * ldexpf(1.0f, (int)(fz_next(&st) % 61) - 30)
                     : c == 6 ? 1e-30f
                              : sg * fz_bits_f32(1 + (uint32_t)(fz_next(&st) % 0x7fffffu));
            break;
        }
        default:
            out[h] = ldexpf((p & 128) && (h & 1) ? -1.0f : 1.0f, 20 + (int)(p % 16));
            break;
        }
    }
}

/* Sinks [Hq] from their class (README). */
static void make_sinks(const fz_spec *s, size_t Hq, float *out)
{
    uint64_t st = ((uint64_t)s->seed << 8) ^ 0x5171c5u;
    const unsigned p = s->sink_param;
    for (size_t h = 0; h < Hq; h++) {
        const double u = 2.0 * fz_unit(&st) - 1.0;
        switch (s->sink_kind % 4) {
        case 1:
            out[h] = (float)ldexp(8.0 * u, (int)(p % 6) - 2);
            break;
        case 2: {
            const unsigned c = (unsigned)(fz_next(&st) % 6);
            out[h] = c == 0   ? -INFINITY
                     : c == 1 ? (float)ldexp(1.0 + u, (int)(fz_next(&st) % 100))
                     : c == 2 ? -(float)ldexp(1.0 + u, (int)(fz_next(&st) % 100))
                     : c == 3 ? 0.0f
                     : c == 4 ? (float)(80.0 + 20.0 * u)
                              : (float)(4.0 * u);
            break;
        }
        default:
            out[h] = -INFINITY;
            break;
        }
    }
}

typedef struct problem {
    size_t B, Hq, Hkv, G, Lq, Lk, D, Dv;
    bool causal;
    float scale;
    view q, k, v, o;
    float *qd, *kd, *vd; /* dense copies of what q, k, v hold, over the views' shapes */
    size_t lse_elems;    /* lse buffer: FZ_MARGIN sentinels, rows, FZ_MARGIN sentinels */
    float *lse;
    /* the variants */
    size_t window;
    float softcap;
    float *slopes, *sinks; /* [Hq] or NULL */
    float *scales;         /* mask_scales [Hq] or NULL */
    bool has_mask;
    view mask;          /* [B][Hq][Lq][Lk] */
    sdpa_tensor mask_t; /* the view as passed (a refused call may change it) */
    float *maskd;       /* dense copy of what the mask holds */
    /* ragged batches, paged K/V, fast scores */
    size_t *lq, *lk;          /* [B] each sequence's query and key counts */
    size_t *q_lens, *kv_lens; /* [B] the padded lengths passed, or NULL */
    size_t *cu_q, *cu_kv;     /* [B + 1] the packed offsets passed, or NULL */
    size_t *cu_spare;         /* [B + 1] a valid cu of lk, for refused calls that add one */
    int32_t *table;           /* [B][max_pages] the block table, or NULL */
    size_t page_size, max_pages, n_pages;
    bool q8;              /* q8_scores */
    unsigned char *arena; /* a refused call's array copied with room for an output over it */
    size_t arena_bytes;
} problem;

/* Query i of sequence b in the q and o views: its batch (0 when packed) and token. */
static void q_at(const problem *P, size_t b, size_t i, size_t *vb, size_t *vt)
{
    if (P->cu_q)
        *vb = 0, *vt = P->cu_q[b] + i;
    else
        *vb = b, *vt = i;
}

/* Key j of sequence b in the k and v views: its page (or batch, 0 when packed) and token. */
static void kv_at(const problem *P, size_t b, size_t j, size_t *vb, size_t *vt)
{
    if (P->table)
        *vb = (size_t)P->table[b * P->max_pages + j / P->page_size], *vt = j % P->page_size;
    else if (P->cu_kv)
        *vb = 0, *vt = P->cu_kv[b] + j;
    else
        *vb = b, *vt = j;
}

/* A row of a dense copy over a view's shape. */
static const float *dense_row(const float *d, const view *v, size_t vb, size_t h, size_t vt)
{
    return d + ((vb * v->n[1] + h) * v->n[2] + vt) * v->D;
}

/* The mask's view from its selector (README): bit 0 batch stride 0, bit 1 head stride 0, bits
   2-4 the token stride (kv_len, kv_len + 3, 0, -kv_len, -(kv_len + 8), a positive shift below
   kv_len (rows overlap), its negative, kv_len + 8), bit 5 the head axis inside the batch axis or
   (set) outside it, bits 6-7 negative head and batch strides. */
static void mask_layout(view *v, size_t B, size_t H, size_t T, size_t L, sdpa_dtype dt, uint8_t sel)
{
    memset(v, 0, sizeof *v);
    v->n[0] = B, v->n[1] = H, v->n[2] = T, v->D = L, v->dt = dt;
    v->es = dt_bytes(dt), v->blk = 1;
    const ptrdiff_t Ll = (ptrdiff_t)L, sh = L / 3 > 0 ? (ptrdiff_t)(L / 3) : 1;
    const ptrdiff_t tks[8] = {Ll, Ll + 3, 0, -Ll, -(Ll + 8), sh, -sh, Ll + 8};
    v->st[2] = T > 1 ? tks[(sel >> 2) & 7] : Ll;
    size_t span = (size_t)(v->st[2] < 0 ? -v->st[2] : v->st[2]) * (T - 1) + L;
    const int outer[2] = {(sel & 32) ? 0 : 1, (sel & 32) ? 1 : 0}; /* inner first */
    for (int k = 0; k < 2; k++) {
        const int a = outer[k];
        if ((a == 0 && (sel & 1)) || (a == 1 && (sel & 2)) || v->n[a] == 1) {
            v->st[a] = 0;
            continue;
        }
        const bool neg = a == 0 ? (sel & 128) : (sel & 64);
        v->st[a] = neg ? -(ptrdiff_t)span : (ptrdiff_t)span;
        span *= v->n[a];
    }
    view_place(v, FZ_MARGIN);
}

/* Query i's position among the keys of its sequence b, i' = i + lk_b - lq_b. */
static long long q_pos(const problem *P, size_t b, size_t i)
{
    return (long long)i + (long long)P->lk[b] - (long long)P->lq[b];
}

/* Keys [*lo, *hi) that query row i of sequence b may see by causal and the window
   (bottom-right aligned on the sequence's own lengths). */
static void key_range(const problem *P, size_t b, size_t i, size_t *lo, size_t *hi)
{
    const long long ip = q_pos(P, b, i), Lk = (long long)P->lk[b];
    long long a = 0, e = Lk;
    if (P->causal && ip + 1 < e) e = ip + 1;
    if (P->window) { /* any w of at least lq_b + lk_b is no window: held below that, it fits */
        const long long w = P->window < ((size_t)1 << 40) ? (long long)P->window : 1LL << 40;
        if (ip - w + 1 > a) a = ip - w + 1;
        if (ip + w < e) e = ip + w;
    }
    if (a > Lk) a = Lk;
    if (e < a) e = a;
    *lo = (size_t)a, *hi = (size_t)e;
}

/* One mask entry of class cls (README) at query row position ip, key j. */
static float mask_value(unsigned cls, unsigned p, long long ip, size_t j, uint64_t *st)
{
    const double u = 2.0 * fz_unit(st) - 1.0;
    switch (cls % 8) {
    case 0:
        return 0.0f;
    case 1:
        return (float)ldexp(u, (int)(p % 8) - 2);
    case 2:
        return (fz_next(st) & 255) < p ? -INFINITY : (float)u;
    case 3: { /* block-diagonal: query position and key in the same block of 1 + p % 64 */
        const long long bs = 1 + p % 64, jj = (long long)j;
        const long long bi = ip >= 0 ? ip / bs : -((-ip + bs - 1) / bs);
        return bi == jj / bs ? (float)(u * 0.25) : -INFINITY;
    }
    case 4: /* causal by the mask, shifted by p % 5 - 2 */
        return (long long)j > ip + (long long)(p % 5) - 2 ? -INFINITY : (float)u;
    case 5: {
        static const float big[6] = {-1e4f, -1e9f, -1e30f, -FLT_MAX, 0.0f, -3e38f};
        return big[(fz_next(st) + p) % 6];
    }
    case 6: { /* stripes of hidden keys (whole tiles), and with bit 7 every key below 1024 */
        if ((p & 128) && j < 1024) return -INFINITY;
        const size_t wdt = 1 + (p % 16) * 8;
        return (j / wdt) % 2 ? -INFINITY : 0.0f;
    }
    default: {
        const unsigned c = (unsigned)(fz_next(st) % 4);
        return c == 0   ? -INFINITY
               : c == 1 ? 0.0f
               : c == 2 ? (float)(8.0 * u)
                        : (float)(-100.0 * fabs(u));
    }
    }
}

/* Fills the mask view: the class over every entry some row reads, in order (broadcast entries
   keep the last write), its finite entries replaced by -|i' - j| with scales_kind bit 2, then
   mask_special's few NaN, +inf, -NaN entries or rows of -inf. */
static void fill_mask(problem *P, const fz_spec *s, const unsigned char *need)
{
    view *m = &P->mask;
    uint64_t st = ((uint64_t)s->seed << 8) ^ 0x3a5c0ffeu;
    const bool dist = s->scales_kind & 4; /* ggml's ALiBi mask: -|i' - j| where not hidden */
    for (size_t b = 0; b < P->B; b++)
        for (size_t h = 0; h < P->Hq; h++)
            for (size_t i = 0; i < P->Lq; i++) {
                const long long ip = q_pos(P, b, i);
                for (size_t j = 0; j < P->Lk; j++) {
                    const ptrdiff_t e = view_index(m, b, h, i, j);
                    if (!need[e]) continue;
                    float x = mask_value(s->mask_class, s->mask_param, ip, j, &st);
                    if (dist && isfinite(x)) x = -fabsf((float)(ip - (long long)j));
                    view_store(m, e, x);
                }
            }
    if (!s->mask_special) return;
    const unsigned kind = (s->mask_special - 1u) & 3, count = 1 + ((s->mask_special - 1u) >> 2) % 4;
    static const uint32_t vals[3] = {0x7fc00000u, 0x7f800000u, 0xffc00000u}; /* NaN, +inf, -NaN */
    for (unsigned c = 0; c < count; c++) {
        const size_t b = fz_next(&st) % P->B, h = fz_next(&st) % P->Hq, i = fz_next(&st) % P->Lq;
        const size_t j = fz_next(&st) % P->Lk;
        if (kind == 3)
            for (size_t x = 0; x < P->Lk; x++) view_store(m, view_index(m, b, h, i, x), -INFINITY);
        else
            view_store(m, view_index(m, b, h, i, j), fz_bits_f32(vals[kind]));
    }
}

/* Whether row (b, h, i) sees key j: in its range and not -inf in the mask (dense copies). */
static bool row_sees(const problem *P, size_t b, size_t h, size_t i, size_t j)
{
    size_t lo, hi;
    key_range(P, b, i, &lo, &hi);
    if (j < lo || j >= hi) return false;
    return !P->maskd || P->maskd[((b * P->Hq + h) * P->Lq + i) * P->Lk + j] != -INFINITY;
}

/* Writes non-finite K or V rows on keys hidden from rows (README: poison): what (p - 1) & 3 is
   K NaN, V +inf, V NaN, or K -inf with V NaN; where ((p - 1) >> 2) & 3 is keys every row of the
   KV head hides, keys the first row of its first head hides, the last row of its last head, or
   keys some row hides. Needs the dense mask. */
static void poison_keys(problem *P, uint8_t poison)
{
    const unsigned what = (poison - 1u) & 3, where = ((poison - 1u) >> 2) & 3;
    for (size_t b = 0; b < P->B; b++)
        for (size_t kh = 0; kh < P->Hkv; kh++)
            for (size_t j = 0; j < P->lk[b]; j++) {
                bool all = true, any = false;
                for (size_t g = 0; g < P->G; g++)
                    for (size_t i = 0; i < P->lq[b]; i++) {
                        const bool hid = !row_sees(P, b, kh * P->G + g, i, j);
                        all &= hid, any |= hid;
                    }
                const size_t last = P->lq[b] ? P->lq[b] - 1 : 0;
                bool hit = where == 0   ? all
                           : where == 3 ? any
                           : where == 1
                               ? P->lq[b] && !row_sees(P, b, kh * P->G, 0, j)
                               : P->lq[b] && !row_sees(P, b, kh * P->G + P->G - 1, last, j);
                if (!hit) continue;
                size_t vb, vt;
                kv_at(P, b, j, &vb, &vt);
                if (what == 0 || what == 3)
                    for (size_t c = 0; c < P->D; c++)
                        view_store(&P->k, view_index(&P->k, vb, kh, vt, c),
                                   what == 0 ? NAN : -INFINITY);
                if (what != 0)
                    for (size_t c = 0; c < P->Dv; c++)
                        view_store(&P->v, view_index(&P->v, vb, kh, vt, c),
                                   what == 1 ? INFINITY : NAN);
            }
}

static void poison_view(view *v, const unsigned char *need)
{
    const float nan = fz_bits_f32(0x7fc00000u);
    for (size_t e = 0; e < v->n_elems; e++)
        if (!need[e]) view_store(v, (ptrdiff_t)e, nan);
}

/* Which elements of q, k, v and the mask some row may read (1), by element index: query rows
   and mask entries within their sequence's lengths, the keys of a sequence that has queries. */
typedef struct needs {
    unsigned char *q, *k, *v, *m;
} needs;

static needs need_maps(const problem *P)
{
    unsigned char *nq = fz_xcalloc(P->q.n_elems), *nk = fz_xcalloc(P->k.n_elems),
                  *nv = fz_xcalloc(P->v.n_elems);
    unsigned char *nm = P->has_mask ? fz_xcalloc(P->mask.n_elems) : NULL;
    for (size_t b = 0; b < P->B; b++) {
        for (size_t h = 0; h < P->Hq; h++)
            for (size_t i = 0; i < P->lq[b]; i++) {
                size_t vb, vt;
                q_at(P, b, i, &vb, &vt);
                memset(nq + view_index(&P->q, vb, h, vt, 0), 1, P->D);
                if (nm)
                    for (size_t j = 0; j < P->lk[b]; j++) nm[view_index(&P->mask, b, h, i, j)] = 1;
            }
        if (!P->lq[b]) continue;
        for (size_t kh = 0; kh < P->Hkv; kh++)
            for (size_t j = 0; j < P->lk[b]; j++) {
                size_t vb, vt;
                kv_at(P, b, j, &vb, &vt);
                memset(nk + view_index(&P->k, vb, kh, vt, 0), 1, P->D);
                memset(nv + view_index(&P->v, vb, kh, vt, 0), 1, P->Dv);
            }
    }
    return (needs){nq, nk, nv, nm};
}

/* Every element no row may read becomes NaN, so that reading it would poison a result: beyond
   need_maps' elements, that is pages and page rows no sequence uses, packed tokens past the last
   sequence, margins and padding too. (A block format's blocks become NaN whole.) */
static void poison_unread(problem *P, needs *n)
{
    poison_view(&P->q, n->q);
    poison_view(&P->k, n->k);
    poison_view(&P->v, n->v);
    if (n->m) poison_view(&P->mask, n->m);
    free(n->q), free(n->k), free(n->v), free(n->m);
}

static void shrink_to_budget(size_t *B, size_t *Hkv, size_t *G, size_t *Lq, size_t Lk, size_t D,
                             size_t Dv)
{
    for (;;) {
        const size_t cost = *B * *Hkv * *G * *Lq * Lk * (D + Dv);
        if (cost <= FZ_BUDGET) return;
        if (*Lq > 1)
            *Lq = (*Lq + 1) / 2;
        else if (*B > 1)
            (*B)--;
        else if (*G > 1)
            (*G)--;
        else if (*Hkv > 1)
            (*Hkv)--;
        else
            return; /* one row: at most FZ_MAX_KV_LEN * 2 * FZ_MAX_DIM */
    }
}

/* The sequences' lengths of one side from its class (README), each at most bound (>= 1):
   0 all bound, 1 uniform in [0, bound], 2 0 a third of the time else uniform in [1, bound],
   3 uniform in [0, 4], 4 bound less 0..3, 5 each one of 0, 1, bound, uniform, 6 all 0 but one
   uniform in [1, bound], 7 all 0. */
static void draw_lengths(unsigned cls, size_t bound, size_t B, uint64_t *st, size_t *len)
{
    const size_t one = (size_t)(fz_next(st) % B), lo4 = bound < 4 ? bound : 4;
    for (size_t b = 0; b < B; b++) {
        const uint64_t u = fz_next(st), w = u >> 8;
        size_t n;
        switch (cls % 8) {
        case 0:
            n = bound;
            break;
        case 1:
            n = (size_t)(u % (bound + 1));
            break;
        case 2:
            n = u % 3 == 0 ? 0 : 1 + (size_t)(w % bound);
            break;
        case 3:
            n = (size_t)(u % (lo4 + 1));
            break;
        case 4:
            n = bound - (size_t)(u % lo4);
            break;
        case 5:
            n = u % 4 == 0 ? 0 : u % 4 == 1 ? 1 : u % 4 == 2 ? bound : (size_t)(w % (bound + 1));
            break;
        case 6:
            n = b == one ? 1 + (size_t)(u % bound) : 0;
            break;
        default:
            n = 0;
            break;
        }
        len[b] = n;
    }
}

static size_t *cumulative(const size_t *len, size_t B)
{
    size_t *cu = fz_xmalloc((B + 1) * sizeof *cu);
    cu[0] = 0;
    for (size_t b = 0; b < B; b++) cu[b + 1] = cu[b] + len[b];
    return cu;
}

/* The block table (README, paged flags f): sequence b's first ceil(lk_b / page_size) entries
   name pages, a new one each in order or (f bit 1) a quarter of the time one an earlier entry
   names (a shared page); bits 4-5 spare pages no entry names; bit 3 page numbers shuffled over
   every page (else in allocation order, so that a sequence's pages are adjacent); bits 6-7
   entries past the longest need; bit 2 junk (out of range numbers) in the entries a sequence
   does not use, else a valid page. */
static void build_table(problem *P, uint8_t f, size_t ps, uint64_t *st)
{
    size_t need = 0;
    for (size_t b = 0; b < P->B; b++) {
        const size_t nb = (P->lk[b] + ps - 1) / ps;
        if (nb > need) need = nb;
    }
    P->page_size = ps;
    P->max_pages = (need ? need : 1) + ((f >> 6) & 3);
    P->table = fz_xmalloc(P->B * P->max_pages * sizeof *P->table);
    size_t distinct = 0;
    for (size_t b = 0; b < P->B; b++) {
        const size_t nb = (P->lk[b] + ps - 1) / ps;
        for (size_t e = 0; e < P->max_pages; e++) {
            int32_t *t = &P->table[b * P->max_pages + e];
            if (e >= nb)
                *t = -1;
            else if ((f & 2) && distinct && fz_next(st) % 4 == 0)
                *t = (int32_t)(fz_next(st) % distinct);
            else
                *t = (int32_t)distinct++;
        }
    }
    P->n_pages = distinct + ((f >> 4) & 3);
    if (P->n_pages == 0) P->n_pages = 1;
    size_t *perm = fz_xmalloc(P->n_pages * sizeof *perm);
    for (size_t e = 0; e < P->n_pages; e++) perm[e] = e;
    if (f & 8)
        for (size_t e = P->n_pages - 1; e > 0; e--) {
            const size_t x = (size_t)(fz_next(st) % (e + 1)), t = perm[e];
            perm[e] = perm[x], perm[x] = t;
        }
    const int32_t np = (int32_t)P->n_pages;
    for (size_t e = 0; e < P->B * P->max_pages; e++) {
        int32_t *t = &P->table[e];
        if (*t >= 0) {
            *t = (int32_t)perm[*t];
            continue;
        }
        const uint64_t u = fz_next(st);
        if (!(f & 4))
            *t = (int32_t)(u % P->n_pages);
        else {
            const int32_t junk[6] = {-1,
                                     np,
                                     INT32_MIN,
                                     INT32_MAX,
                                     np + (int32_t)((u >> 8) % 1000),
                                     -1 - (int32_t)((u >> 8) % 1000)};
            *t = junk[u % 6];
        }
    }
    free(perm);
}

/* ------------------------------------------------------------------------------------------ */
/* The float64 oracle                                                                           */
/* ------------------------------------------------------------------------------------------ */
/*
 * Semantics (sdpa.h): query i sees key j iff j <= i + kv_len - q_len when causal; score
 * s_j = scale * sum_c q_c k_jc (scale 0: 1/sqrt(head_dim)), evaluated in double with IEEE
 * rules (products of floats are exact in double, and no sum of them overflows it).
 *   - a NaN or +inf among the scores the row sees: every o element and lse are NaN;
 *   - no key seen, or every seen score -inf: o is zeros, lse -inf, exactly;
 *   - else o_c = sum_j w_j v_jc / L, w_j = exp(s_j - m), L = sum_j w_j, lse = m + log L.
 *     When some key the row sees has a non-finite v_jc, o_c must be non-finite (inf or NaN):
 *     for a key of score -inf too (weight 0, and 0 * inf is NaN, as sdpa.h states).
 *
 * Tolerance of a value row. An f32 implementation computes every score with an absolute error
 * of at most a few (d + 3) 2^-24 S, S = max_j sum_c |scale q_c k_jc| (any summation order; the
 * scale applied in f32 and normalised by powers of two; f16/bf16 converted exactly), so
 * s_j - m is off by at most 2 Delta,
 *     Delta = C 2^-24 (d + 16) (1 + S),  C = 8,
 * which also absorbs the exp's stated error (about 1 ULP) and the f32 1/sqrt(d). Every computed
 * weight is then within a factor e^(+-2 Delta) of w_j, at most 1, and the computed sum is at
 * least 1 (the maximum's weight is exp(0) = 1), so, since sum_j w_j (v_jc - o_c) = 0,
 *     |o_c - ref_c| <= (1 + 2^-10) sum_j e_j |v_jc - ref_c| / max(1, L e^(-2 Delta))
 *                      + C 2^-24 (n + 16) Wp_c + C (n + 16) 2^-149,
 *     e_j = min(1, w_j (e^(2 Delta) - 1)),      for a key that may be flushed (s_j - m - 2 Delta
 *           < -53: the SIMD exp gives 0 below e^-54) e_j = max(e_j, w_j) + 2^-147 (a subnormal
 *           weight's rounding, the reference's),
 *     Wp_c = sum_j min(1, w_j e^(2 Delta)) |v_jc| / max(1, L e^(-2 Delta)),  a bound of the
 *           computed sum_j w_j |v_jc| / L, in which the f32 accumulation (n products and sums,
 *           the rescaling by alpha, the division) rounds: the second term; the third is the
 *           absolute rounding of products with subnormal values.
 * For well-conditioned rows (Delta << 1) this is about 2 Delta sum_j w_j |v_jc - ref_c| / L: a
 * relative error of 1e-3 to 1e-4 of the weighted |v| fails. It is never looser than the
 * brief's Vmax (C 2^-24 (d + n + 16)(1 + S) + n 2^-77) form for such rows, and stays exact for
 * badly conditioned ones (huge scores: e_j vanishes for keys far below the maximum).
 * lse: |lse - ref| <= 3 Delta + C 2^-24 (n + 16 + |ref|).
 *
 * What the library does not promise (rows or elements left unchecked, counted):
 *   - max_c |scale q_c| = M (finite q_c) outside [2^-252, 2^255) (the per-row power-of-two
 *     factor f on scale q, 1 unless M leaves float's normal range, then bringing M just under
 *     2^127 or to [1, 2), covers that range), or, in a row with an infinite q_c (which is not
 *     rescaled), a finite |scale q_c| above 2^127;
 *   - an element that f makes subnormal (sdpa.h: it may lose precision or round to 0);
 *   - S f above 2^126: f32 partial sums could overflow; a score above 2^127 (float's range);
 *   - a finite non-zero q_c meeting an infinite k_jc whose scale q_c f could underflow to 0
 *     in f32 (below 2^-148; 0 * inf is NaN where the exact product is infinite);
 *   - o_c when sum_j |v_jc| over the keys of finite score exceeds 2^126: the f32 accumulator
 *     may overflow (a non-finite o_c is then accepted; a finite one is still checked).
 * NaN rows are checked whatever the promise: no overflow or underflow removes a NaN.
 *
 * The variants (README): the row sees the keys causal, the window and the mask (-inf) leave it;
 * scores are softcap(scale q.k) - slope |i' - j| + mask (times mask_scales[h], the product
 * rounded once to float), and a sink is a key of value 0. Each
 *
 * Ragged and paged calls (README): row (b, h, i) exists for i < lq_b, aligned on the
 * sequence's own lengths, i' = i + lk_b - lq_b, and reads keys j < lk_b through the block table
 * or the packed offsets. Block-format K and V enter as their exact values (d q, or d n + m
 * rounded once for q4_1 and q5_1). With q8_scores, each key's score error gains sdpa.h's bound
 * sum_b (max_{c in b} |x_c| / 254) sum_{c in b} |k_jc|, x = scale q (the whole
 * max_{c in b} |x_c| for a block whose quantization scale would be subnormal or whose
 * reciprocal overflows: its quants may be 0), for q4_1 and q5_1 the rounding of d_k dot and
 * m_k sum q on their own (README), a non-finite query element
 * makes a row that sees a key NaN, and a row that sees an infinite K element is unchecked (the
 * int8 dot product is scaled by d_k after the sum, so inf * 0 need not occur where the exact
 * score has it).
 */
#define FZ_C 8.0

enum { ROW_VALUE = 0, ROW_NAN, ROW_ZERO, ROW_SKIP, ROW_ABSENT /* i >= lq_b: never written */ };
enum { COL_FINITE = 0, COL_NONFINITE = 1, COL_MAY_NONFINITE = 2 };

typedef struct oracle {
    unsigned char *row_kind;   /* [rows] */
    double *lse_ref, *lse_tol; /* [rows] */
    double *ref, *tol;         /* [rows * Dv] */
    unsigned char *col;        /* [rows * Dv] COL_* */
} oracle;

/* Keys row i of sequence b may see by causal and the window (the mask may hide some). */
static size_t visible(const problem *P, size_t b, size_t i)
{
    size_t lo, hi;
    key_range(P, b, i, &lo, &hi);
    return hi - lo;
}

/* The largest error bound any supported implementation states for its tanh, in ULPs. */
static double tanh_ulp(void)
{
    static double u = -1.0;
    if (u < 0) {
        u = 0.0;
        for (size_t i = 0; i < sdpa_impl_count(); i++) {
            const sdpa_impl *impl = sdpa_impl_at(i);
            const double t = sdpa_impl_supported(impl) ? sdpa_impl_tanh_max_ulp(impl) : 0.0;
            if (!(t <= u)) u = t; /* a NaN bound: charge it as infinite */
        }
    }
    return u;
}

/* Error bound of one computed score after the modifiers (README, Tolerance): raw score raw
   (scale q.k, exact) computed with error e0; softcap c (0: off) gives sc; ALiBi adds a; the mask
   adds mk (with mask_scales, scaled: the exact product, which the library rounds to float once
   before the add) and gives the final score fin. */
static double score_error(double raw, double e0, double c, double sc, bool alibi, double a,
                          bool masked, bool scaled, double mk, double fin)
{
    double e = e0;
    if (c > 0) {
        const double ut = tanh_ulp();
        if (isinf(raw))
            e = c * 0x1p-22 * (1.0 + ut) + 0x1p-148;
        else {
            const double x = raw / c;
            /* raw / c as raw * (1 / c): two roundings, and 1 / c loses bits when subnormal */
            const double rel = 0x1p-23 + (c > 0x1p125 ? c * 0x1p-149 : 0.0);
            const double dx = e0 / c + fabs(x) * rel + 0x1p-149;
            const double x0 = fabs(x) > dx ? fabs(x) - dx : 0.0;
            const double ch = cosh(x0), sech2 = isinf(ch) ? 0.0 : 1.0 / (ch * ch);
            const double y = fmin(1.0, fabs(x) + dx);
            /* c tanh moves by at most c sech^2 dx over the argument's error, and stays in [-c, c]
             */
            e = fmin(2.0 * c, c * dx * sech2) + c * ut * (0x1p-23 * y + 0x1p-149) +
                0x1p-24 * c * y + 0x1p-149;
        }
    }
    if (alibi) e = e * (1.0 + 0x1p-23) + 0x1p-23 * (fabs(a) + fabs(sc + a)) + 0x1p-148;
    if (scaled) e += 0x1p-24 * fabs(mk) + 0x1p-150; /* the product's rounding */
    if (masked) e = e * (1.0 + 0x1p-23) + 0x1p-23 * fabs(fin) + 0x1p-148;
    return e;
}

static void oracle_run(const problem *P, oracle *O)
{
    const size_t rows = P->B * P->Hq * P->Lq, D = P->D, Dv = P->Dv, Lk = P->Lk;
    const double scale = P->scale != 0.0f ? (double)P->scale : 1.0 / sqrt((double)D);
    const double cap = P->softcap;
    O->row_kind = fz_xmalloc(rows);
    O->lse_ref = fz_xmalloc(rows * sizeof(double));
    O->lse_tol = fz_xmalloc(rows * sizeof(double));
    O->ref = fz_xmalloc(rows * Dv * sizeof(double));
    O->tol = fz_xmalloc(rows * Dv * sizeof(double));
    O->col = fz_xmalloc(rows * Dv);
    double *s = fz_xmalloc(Lk * sizeof(double)), *w = fz_xmalloc(Lk * sizeof(double));
    double *e = fz_xmalloc(Lk * sizeof(double)), *wp = fz_xmalloc(Lk * sizeof(double));
    double *dl = fz_xmalloc(Lk * sizeof(double)), *wm = fz_xmalloc(Lk * sizeof(double));
    double *mk = fz_xmalloc(Lk * sizeof(double));
    double *sq = fz_xmalloc(D * sizeof(double));
    double *rs = fz_xmalloc(Lk * sizeof(double)), *eq = fz_xmalloc(Lk * sizeof(double));
    double *qb_err = fz_xmalloc((D / FZ_QK + 1) * sizeof(double)),
           *qb_top = fz_xmalloc((D / FZ_QK + 1) * sizeof(double));
    size_t *seen = fz_xmalloc(Lk * sizeof(size_t));
    const float **krows = fz_xmalloc(Lk * sizeof *krows), **vrows = fz_xmalloc(Lk * sizeof *vrows);
    double *cacc = fz_xmalloc(5 * Dv * sizeof(double)), *cvsum = cacc + Dv, *cwpv = cvsum + Dv,
           *caccm = cwpv + Dv;
    double *cdev = caccm + Dv;
    unsigned char *cflag = fz_xmalloc(Dv);
    memset(O->row_kind, ROW_ABSENT, rows);
    for (size_t b = 0; b < P->B; b++)
        for (size_t h = 0; h < P->Hq; h++) {
            const size_t hk = h / P->G;
            const double sink = P->sinks ? (double)P->sinks[h] : -INFINITY;
            for (size_t i = 0; i < P->lq[b]; i++) {
                const size_t row = (b * P->Hq + h) * P->Lq + i;
                const long long ip = q_pos(P, b, i);
                size_t qb, qt;
                q_at(P, b, i, &qb, &qt);
                const float *q = dense_row(P->qd, &P->q, qb, h, qt);
                const float *mrow = P->maskd ? P->maskd + row * Lk : NULL;
                double *ref = O->ref + row * Dv, *tol = O->tol + row * Dv;
                unsigned char *col = O->col + row * Dv;
                memset(col, COL_FINITE, Dv);
                for (size_t c = 0; c < Dv; c++) ref[c] = tol[c] = 0.0;
                O->lse_ref[row] = sink; /* what a row that sees nothing gives */
                O->lse_tol[row] = 0.0;
                size_t lo, hi, n = 0;
                key_range(P, b, i, &lo, &hi);
                for (size_t j = lo; j < hi; j++)
                    if (!mrow || mrow[j] != -INFINITY) {
                        size_t kb, kt;
                        kv_at(P, b, j, &kb, &kt);
                        krows[n] = dense_row(P->kd, &P->k, kb, hk, kt);
                        seen[n++] = j;
                    }
                if (n == 0) {
                    O->row_kind[row] = ROW_ZERO;
                    continue;
                }
                if (P->q8) { /* sdpa.h: a non-finite query element makes the row NaN */
                    bool bad_q = false;
                    for (size_t c = 0; c < D; c++) bad_q |= !isfinite(q[c]);
                    if (bad_q) {
                        O->row_kind[row] = ROW_NAN;
                        continue;
                    }
                }
                double M = 0; /* max |scale q_c| over the finite q_c */
                bool q_inf = false;
                for (size_t c = 0; c < D; c++) {
                    sq[c] = scale * q[c];
                    if (isfinite(q[c]) && fabs(sq[c]) > M) M = fabs(sq[c]);
                    if (isinf(q[c])) q_inf = true;
                }
                /* an infinite q_c leaves nothing to normalise by: scale q is then formed plainly */
                const bool in_range =
                    q_inf ? M <= 0x1p127 : M == 0 || (M >= 0x1p-252 && M < 0x1p255);
                /* the library's per-row factor f = 2^-e on scale q (sdpa.h): 1 unless M leaves
                   float's normal range, then M f just under 2^127 (M > FLT_MAX) or in [1, 2) */
                const bool normalised = !q_inf && M != 0 && (M < 0x1p-126 || M > FLT_MAX);
                double f = 1.0;
                bool fragile = false;
                if (normalised) {
                    int ex;
                    (void)frexp(M, &ex);
                    ex = M > FLT_MAX ? ex - 127 : ex - 1;
                    ex = ex < -126 ? -126 : ex > 127 ? 127 : ex;
                    f = ldexp(1.0, -ex);
                    /* an element that f makes subnormal may lose what sdpa.h says it may */
                    for (size_t c = 0; c < D; c++)
                        if (isfinite(q[c]) && q[c] != 0.0f && fabs(sq[c]) * f < 0x1p-126)
                            fragile = true;
                }
                if (P->q8) /* each block's share of the fast scores' bound, per unit of sum |k|, and
                              its largest |x f| */
                    for (size_t c0 = 0; c0 < D; c0 += FZ_QK) {
                        double amax = 0;
                        for (size_t c = c0; c < c0 + FZ_QK; c++) amax = fmax(amax, fabs(sq[c]));
                        qb_err[c0 / FZ_QK] = amax * f < 0x1p-118 ? amax : amax / 254.0;
                        qb_top[c0 / FZ_QK] = amax * f;
                    }
                bool nan = false, beyond = false, k_inf = false, q8_big = false;
                double S = 0, smax = 0,
                       Emax = 0; /* smax: the largest finite raw score (beyond float: unchecked) */
                for (size_t x = 0; x < n; x++) {
                    const size_t j = seen[x];
                    const float *k = krows[x];
                    double acc = 0, mag = 0;
                    for (size_t c = 0; c < D; c++) {
                        const double t = (double)q[c] * (double)k[c];
                        acc += t, mag += fabs(t);
                    }
                    if (!isfinite(mag)) { /* a non-finite product (else no sum overflows double) */
                        acc = mag = 0;
                        for (size_t c = 0; c < D; c++) {
                            const double t = (double)q[c] * (double)k[c];
                            acc += t;
                            if (isfinite(t)) mag += fabs(t);
                            if (isinf(k[c]) && isfinite(q[c]) && q[c] != 0.0f &&
                                fabs(sq[c]) * f < 0x1p-148)
                                fragile = true;
                            k_inf |= isinf(k[c]);
                        }
                    }
                    eq[x] = 0;
                    if (P->q8) {
                        /* for K with a minimum: sum_b sum_{c in b} |x_c| max_{c in b} |k_c| */
                        double hm = 0;
                        for (size_t c0 = 0; c0 < D; c0 += FZ_QK) {
                            double ks = 0, km = 0, xs = 0;
                            for (size_t c = c0; c < c0 + FZ_QK; c++) {
                                ks += fabs((double)k[c]), km = fmax(km, fabs((double)k[c]));
                                xs += fabs(sq[c]);
                            }
                            eq[x] += qb_err[c0 / FZ_QK] * ks;
                            hm += xs * km;
                            /* d_q <= max |x f|, d_k <= max |k|, the int32 dot < 2^19: their f32
                               product may overflow from here on, whatever the score */
                            if (qb_top[c0 / FZ_QK] * km >= 0x1p108) q8_big = true;
                        }
                        eq[x] *= 1.0 + 0x1p-20;
                        /* q4_1, q5_1: d_k dot and m_k sum q are rounded on their own, each up to
                           sum |x| (|k| + 2 |m_k|), and |m_k| is within rounding of the block's
                           largest |k| (an element of n = 0 holds m_k) */
                        if (dt_has_min(P->k.dt))
                            eq[x] += 0x1p-24 * (double)(D / FZ_QK + 8) * 4.0 * hm;
                        if (eq[x] > Emax) Emax = eq[x];
                    }
                    const double raw = acc * scale;
                    rs[x] = raw;
                    mag *= fabs(scale);
                    if (mag > S) S = mag;
                    if (isfinite(raw) && fabs(raw) > smax) smax = fabs(raw);
                    /* the modifiers: s = softcap(raw) + alibi + mask (softcap: +-inf to +-c) */
                    double t = raw;
                    if (cap > 0 && !isnan(t)) t = cap * tanh(t / cap);
                    wm[x] = t; /* after softcap, for the error bound */
                    double al = 0;
                    if (P->slopes) {
                        al = -(double)P->slopes[h] * fabs((double)(ip - (long long)j));
                        if (fabs(al) > 0x1p126) beyond = true;
                        t += al;
                    }
                    dl[x] = al;
                    /* the mask entry, times mask_scales[h]: exact in double, but a product beyond
                       float is the infinity the library's rounding gives */
                    mk[x] = mrow ? mrow[j] : 0.0;
                    if (mrow && P->scales) {
                        mk[x] *= (double)P->scales[h];
                        if (isinf((float)mk[x])) mk[x] = (double)(float)mk[x];
                    }
                    if (mrow) t += mk[x];
                    s[x] = t;
                    if (isnan(t) || t == INFINITY) nan = true;
                }
                if (nan && !(P->q8 && k_inf)) {
                    O->row_kind[row] = ROW_NAN;
                    continue;
                }
                /* an infinite K element of q4_0 is in a block of infinite scale, whose values the
                   x86 kernels form as n d - 8 d, NaN where d (n - 8) is +-inf (README) */
                const bool kinf_unchecked = k_inf && (P->q8 || P->k.dt == SDPA_Q4_0);
                /* the fast scores' f32 intermediates near the top of float's range (README): a
                   product of d_q, d_k and the int32 dot, and, in units that stage K as f32 (x86,
                   more than 8 rows), d_q q where max |x f| is within rounding of FLT_MAX */
                const bool q8_top = P->q8 && (q8_big || M * f > (double)FLT_MAX * (1.0 - 0x1p-20));
                if (!in_range || kinf_unchecked || q8_top || S * f > 0x1p126 || smax > 0x1p127 ||
                    fragile || beyond) {
                    O->row_kind[row] = ROW_SKIP;
                    continue;
                }
                double m = -INFINITY;
                for (size_t x = 0; x < n; x++)
                    if (s[x] > m) m = s[x];
                if (m == -INFINITY) {
                    O->row_kind[row] = ROW_ZERO;
                    continue;
                }
                /* per-key score errors: the dot product's, then each modifier's (README) */
                const double delta = FZ_C * 0x1p-24 * ((double)D + 16.0) * (1.0 + S + Emax);
                bool bad_bound = false;
                for (size_t x = 0; x < n; x++) {
                    dl[x] = s[x] == -INFINITY
                                ? 0.0
                                : score_error(rs[x], delta + eq[x], cap, wm[x], P->slopes != NULL,
                                              dl[x], mrow != NULL, P->scales != NULL, mk[x], s[x]);
                    /* a score of -inf (a product of mask_scales beyond float, an infinite K
                       element) is exact: weight 0 */
                    if (s[x] != -INFINITY && (!isfinite(dl[x]) || fabs(s[x]) + dl[x] >= FLT_MAX))
                        bad_bound = true;
                }
                if (bad_bound) { /* a score that may round beyond float */
                    O->row_kind[row] = ROW_SKIP;
                    continue;
                }
                O->row_kind[row] = ROW_VALUE;
                /* the reference point Mx = max(m, sink): the sink is a key of score sink, exact but
                   for the rounding of sink - m and its exp, and of value 0 */
                const double Mx = sink > m ? sink : m;
                const double dsink = sink == -INFINITY ? 0.0 : 0x1p-23 * fabs(sink - m) + 0x1p-21;
                /* how far the computed maximum may be from Mx: the largest error of a key (or the
                   sink) that may be the maximum */
                double dtop = sink == Mx ? dsink : 0.0;
                for (size_t x = 0; x < n; x++)
                    if (s[x] == Mx && dl[x] > dtop) dtop = dl[x];
                double dmu = dtop;
                for (size_t x = 0; x < n; x++)
                    if (s[x] != -INFINITY && s[x] + dl[x] >= Mx - dtop && dl[x] > dmu) dmu = dl[x];
                if (sink != -INFINITY && sink + dsink >= Mx - dtop && dsink > dmu) dmu = dsink;
                double L = 0, Lmin = 0, Lhi = 0, Llo = 0;
                for (size_t x = 0; x < n; x++) {
                    const double xs = s[x] - Mx; /* -inf for a key of score -inf */
                    if (xs == -INFINITY) {
                        w[x] = e[x] = wp[x] = 0.0;
                        continue;
                    }
                    const double Dx = dl[x] + dmu;
                    const double lg = Dx > 40 ? Dx : log(expm1(Dx));
                    w[x] = exp(xs);
                    L += w[x];
                    Lmin += exp(xs - Dx);
                    Lhi += exp(xs + dl[x]);
                    Llo += exp(xs - dl[x]);
                    e[x] = fmin(1.0, exp(xs + lg));
                    /* the SIMD exp gives 0 below e^-54 of the keys' maximum */
                    if (s[x] - m - Dx < -53.0) e[x] = fmax(e[x], w[x]) + 0x1p-147;
                    wp[x] = fmin(1.0, exp(xs + Dx));
                }
                double esink = 0.0;
                if (sink != -INFINITY) {
                    const double xs = sink - Mx, Dx = dsink + dmu;
                    L += exp(xs);
                    Lmin += exp(xs - Dx);
                    Lhi += exp(xs + dsink);
                    Llo += exp(xs - dsink);
                    esink = fmin(1.0, exp(xs + (Dx > 40 ? Dx : log(expm1(Dx)))));
                }
                /* the keys' weights times e^(m - sink) may be subnormal: absolute rounding of acc
                 */
                const bool tiny_keys = sink != -INFINITY && sink - m + dmu > 80.0;
                const double Lden = fmax(1.0, Lmin);
                O->lse_ref[row] = Mx + log(L);
                O->lse_tol[row] = fmax(log(Lhi / L), log(L / Llo)) + 2 * dmu +
                                  FZ_C * 0x1p-24 * ((double)n + 16.0 + fabs(O->lse_ref[row]));
                for (size_t x = 0; x < n; x++) {
                    size_t vb, vt;
                    kv_at(P, b, seen[x], &vb, &vt);
                    vrows[x] = dense_row(P->vd, &P->v, vb, hk, vt);
                }
                /* per column, over the keys in order (keys outer: each V row read once) */
                for (size_t c = 0; c < Dv; c++)
                    cacc[c] = cvsum[c] = cwpv[c] = caccm[c] = cdev[c] = 0, cflag[c] = 0;
                for (size_t x = 0; x < n; x++) {
                    const float *vr = vrows[x];
                    if (s[x] == -INFINITY) { /* weight 0: only a non-finite value counts */
                        for (size_t c = 0; c < Dv; c++)
                            if (!isfinite(vr[c])) cflag[c] |= 2;
                        continue;
                    }
                    const double tk = tiny_keys ? fmin(1.0, exp(s[x] - m + dl[x] + dmu)) : 0.0;
                    for (size_t c = 0; c < Dv; c++) {
                        const double vv = vr[c];
                        if (!isfinite(vv)) {
                            cflag[c] |= 1;
                            continue;
                        }
                        cacc[c] += w[x] * vv;
                        cvsum[c] += fabs(vv);
                        cwpv[c] += wp[x] * fabs(vv);
                        if (tiny_keys) caccm[c] += tk * fabs(vv);
                    }
                }
                for (size_t c = 0; c < Dv; c++)
                    ref[c] = cacc[c] / L,
                    cdev[c] = esink * fabs(ref[c]); /* the sink's value is 0 */
                for (size_t x = 0; x < n; x++) {
                    if (s[x] == -INFINITY) continue;
                    const float *vr = vrows[x];
                    for (size_t c = 0; c < Dv; c++) cdev[c] += e[x] * fabs((double)vr[c] - ref[c]);
                }
                for (size_t c = 0; c < Dv; c++) {
                    if (cflag[c]) { /* a seen key's non-finite value, of finite score or weight 0 */
                        col[c] = COL_NONFINITE;
                        continue;
                    }
                    tol[c] = (1 + 0x1p-10) * cdev[c] / Lden +
                             FZ_C * 0x1p-24 * ((double)n + 16.0) * (cwpv[c] / Lden) +
                             FZ_C * ((double)n + 16.0) * 0x1p-149 + 0x1p-146 * caccm[c];
                    if (cvsum[c] > 0x1p126) col[c] = COL_MAY_NONFINITE;
                }
            }
        }
    free(s);
    free(w);
    free(e);
    free(wp);
    free(dl);
    free(wm);
    free(mk);
    free(sq);
    free(rs);
    free(eq);
    free(qb_err);
    free(qb_top);
    free(seen);
    free(krows);
    free(vrows);
    free(cacc);
    free(cflag);
}

static void oracle_free(oracle *O)
{
    free(O->row_kind);
    free(O->lse_ref);
    free(O->lse_tol);
    free(O->ref);
    free(O->tol);
    free(O->col);
}

/* ------------------------------------------------------------------------------------------ */
/* Checks of one run                                                                            */
/* ------------------------------------------------------------------------------------------ */
#define FZ_SENTINEL 0x7fc5a5a5u /* a NaN payload no computation produces */

static void fill_sentinel(float *x, size_t n)
{
    const float s = fz_bits_f32(FZ_SENTINEL);
    for (size_t i = 0; i < n; i++) x[i] = s;
}

/* Equal bits, or both NaN (payloads may differ). */
static bool same_float(float a, float b)
{
    return fz_f32_bits(a) == fz_f32_bits(b) || (a != a && b != b);
}

static void check_result(size_t impl, const char *how, const problem *P, const oracle *O)
{
    const size_t Dv = P->Dv;
    const float *ob = (const float *)(const void *)P->o.buf;
    unsigned char *in_view = fz_xcalloc(P->o.n_elems), *in_lse = fz_xcalloc(P->lse_elems);
    int reported =
        0; /* one message per row kind at most: a wrong row usually is wrong throughout */
    for (size_t b = 0; b < P->B; b++)
        for (size_t h = 0; h < P->Hq; h++)
            for (size_t i = 0; i < P->lq[b]; i++) {
                const size_t row = (b * P->Hq + h) * P->Lq + i;
                const int kind = O->row_kind[row];
                const float lse = P->lse ? P->lse[FZ_MARGIN + row] : 0.0f;
                if (P->lse) in_lse[FZ_MARGIN + row] = 1;
                size_t ob0, ot;
                q_at(P, b, i, &ob0, &ot);
                bool bad = false;
                for (size_t c = 0; c < Dv; c++) {
                    const ptrdiff_t idx = view_index(&P->o, ob0, h, ot, c);
                    in_view[idx] = 1;
                    const float got = ob[idx];
                    if (bad || kind == ROW_SKIP) continue;
                    if (kind == ROW_NAN) {
                        if (!isnan(got)) {
                            bad = true;
                            if (reported++ < 3)
                                fz_fail(impl,
                                        "%s: b=%zu h=%zu i=%zu: a NaN or +inf score is seen, "
                                        "o[%zu]=%.9g, want NaN",
                                        how, b, h, i, c, got);
                        }
                    } else if (kind == ROW_ZERO) {
                        if (got != 0.0f) {
                            bad = true;
                            if (reported++ < 3)
                                fz_fail(impl,
                                        "%s: b=%zu h=%zu i=%zu sees no key of score above -inf "
                                        "(%zu keys): o[%zu]=%.9g, want 0",
                                        how, b, h, i, visible(P, b, i), c, got);
                        }
                    } else {
                        const size_t e = row * Dv + c;
                        if (O->col[e] == COL_NONFINITE) {
                            if (isfinite(got)) {
                                bad = true;
                                if (reported++ < 3)
                                    fz_fail(impl,
                                            "%s: b=%zu h=%zu i=%zu: a seen key of finite score has "
                                            "a non-finite v[.][%zu]:"
                                            " o[%zu]=%.9g, want inf or NaN",
                                            how, b, h, i, c, c, got);
                            }
                            continue;
                        }
                        if (!isfinite(got) && O->col[e] == COL_MAY_NONFINITE) continue;
                        const double err = fabs((double)got - O->ref[e]);
                        if (isfinite(got) && O->tol[e] > 0 &&
                            err / O->tol[e] > fz_counts.worst_ratio)
                            fz_counts.worst_ratio = err / O->tol[e];
                        if (!(err <= O->tol[e])) {
                            bad = true;
                            if (reported++ < 3)
                                fz_fail(impl,
                                        "%s: b=%zu h=%zu i=%zu (sees %zu keys): o[%zu]=%.9g, "
                                        "float64 %.9g, |err| %.3g > tol %.3g",
                                        how, b, h, i, visible(P, b, i), c, got, O->ref[e], err,
                                        O->tol[e]);
                        }
                    }
                }
                if (!P->lse || kind == ROW_SKIP || bad) continue;
                if (kind == ROW_NAN && !isnan(lse)) {
                    if (reported++ < 3)
                        fz_fail(impl, "%s: b=%zu h=%zu i=%zu: lse=%.9g, want NaN", how, b, h, i,
                                lse);
                } else if (kind == ROW_ZERO && lse != (float)O->lse_ref[row]) {
                    if (reported++ < 3)
                        fz_fail(
                            impl,
                            "%s: b=%zu h=%zu i=%zu: lse=%.9g, want %.9g (no key: the sink or -inf)",
                            how, b, h, i, lse, O->lse_ref[row]);
                } else if (kind == ROW_VALUE &&
                           !(fabs((double)lse - O->lse_ref[row]) <= O->lse_tol[row])) {
                    if (reported++ < 3)
                        fz_fail(impl, "%s: b=%zu h=%zu i=%zu: lse=%.9g, float64 %.9g, tol %.3g",
                                how, b, h, i, lse, O->lse_ref[row], O->lse_tol[row]);
                }
            }
    /* every element of o's buffer and of lse's that no row owns: rows past a sequence's length,
       packed tokens past the last sequence, padding, margins */
    size_t outside = 0, first = 0;
    for (size_t e = 0; e < P->o.n_elems; e++)
        if (!in_view[e] && fz_f32_bits(ob[e]) != FZ_SENTINEL && outside++ == 0) first = e;
    if (outside)
        fz_fail(impl,
                "%s: %zu elements of o's buffer outside the rows were written (first at element "
                "%td of [0][0][0][0])",
                how, outside, (ptrdiff_t)first - P->o.origin);
    if (P->lse) {
        size_t bad = 0, at = 0;
        for (size_t e = 0; e < P->lse_elems; e++)
            if (!in_lse[e] && fz_f32_bits(P->lse[e]) != FZ_SENTINEL && bad++ == 0) at = e;
        if (bad)
            fz_fail(impl, "%s: %zu elements of lse outside the rows were written (first at %td)",
                    how, bad, (ptrdiff_t)at - FZ_MARGIN);
    }
    free(in_view);
    free(in_lse);
}

/* ------------------------------------------------------------------------------------------ */
/* Running                                                                                      */
/* ------------------------------------------------------------------------------------------ */
static bench_pool *fz_pools[2]; /* 2 and 3 threads, shuffled claim order, contract checked */

static bench_pool *get_pool(unsigned threads)
{
    bench_pool **slot = &fz_pools[threads == 3 ? 1 : 0];
    if (!*slot) {
        const bench_pool_options o = {.n_threads = threads,
                                      .order = BENCH_POOL_SHUFFLE,
                                      .check = true,
                                      .seed = 0x5eedf00du + threads};
        *slot = bench_pool_create_opts(&o);
        if (!*slot) {
            fprintf(stderr, "fuzz: cannot create a pool of %u threads\n", threads);
            abort();
        }
    }
    return *slot;
}

/* Copies of every buffer a call may not change (NULL where there is none). */
typedef struct snapshot {
    void *q, *k, *v, *o, *lse, *mask, *slopes, *sinks, *scales;
    void *q_lens, *kv_lens, *cu_q, *cu_kv, *table, *arena;
} snapshot;

static void *dup_bytes(const void *p, size_t n)
{
    if (!p) return NULL;
    void *d = fz_xmalloc(n);
    memcpy(d, p, n);
    return d;
}

static size_t table_bytes(const problem *P) { return P->B * P->max_pages * sizeof(int32_t); }

static snapshot take_snapshot(const problem *P)
{
    snapshot s;
    const size_t lb = P->B * sizeof(size_t), cb = (P->B + 1) * sizeof(size_t);
    s.q = dup_bytes(P->q.buf, view_bytes(&P->q));
    s.k = dup_bytes(P->k.buf, view_bytes(&P->k));
    s.v = dup_bytes(P->v.buf, view_bytes(&P->v));
    s.o = dup_bytes(P->o.buf, P->o.n_elems * 4);
    s.lse = dup_bytes(P->lse, P->lse_elems * 4);
    s.mask = P->has_mask ? dup_bytes(P->mask.buf, view_bytes(&P->mask)) : NULL;
    s.slopes = dup_bytes(P->slopes, P->Hq * sizeof(float));
    s.sinks = dup_bytes(P->sinks, P->Hq * sizeof(float));
    s.scales = dup_bytes(P->scales, P->Hq * sizeof(float));
    s.q_lens = dup_bytes(P->q_lens, lb);
    s.kv_lens = dup_bytes(P->kv_lens, lb);
    s.cu_q = dup_bytes(P->cu_q, cb);
    s.cu_kv = dup_bytes(P->cu_kv, cb);
    s.table = dup_bytes(P->table, table_bytes(P));
    s.arena = dup_bytes(P->arena, P->arena_bytes);
    return s;
}

static void free_snapshot(snapshot *s)
{
    free(s->q), free(s->k), free(s->v), free(s->o), free(s->lse);
    free(s->mask), free(s->slopes), free(s->sinks), free(s->scales);
    free(s->q_lens), free(s->kv_lens), free(s->cu_q), free(s->cu_kv), free(s->table),
        free(s->arena);
}

/* Names the buffers that differ from the snapshot (NULL: none). */
static const char *changed(const problem *P, const snapshot *s, bool inputs_only)
{
    const size_t lb = P->B * sizeof(size_t), cb = (P->B + 1) * sizeof(size_t);
    if (memcmp(s->q, P->q.buf, view_bytes(&P->q))) return "q";
    if (memcmp(s->k, P->k.buf, view_bytes(&P->k))) return "k";
    if (memcmp(s->v, P->v.buf, view_bytes(&P->v))) return "v";
    if (s->mask && memcmp(s->mask, P->mask.buf, view_bytes(&P->mask))) return "mask";
    if (s->slopes && memcmp(s->slopes, P->slopes, P->Hq * sizeof(float))) return "alibi_slopes";
    if (s->sinks && memcmp(s->sinks, P->sinks, P->Hq * sizeof(float))) return "sinks";
    if (s->scales && memcmp(s->scales, P->scales, P->Hq * sizeof(float))) return "mask_scales";
    if (s->q_lens && memcmp(s->q_lens, P->q_lens, lb)) return "q_lens";
    if (s->kv_lens && memcmp(s->kv_lens, P->kv_lens, lb)) return "kv_lens";
    if (s->cu_q && memcmp(s->cu_q, P->cu_q, cb)) return "cu_q";
    if (s->cu_kv && memcmp(s->cu_kv, P->cu_kv, cb)) return "cu_kv";
    if (s->table && memcmp(s->table, P->table, table_bytes(P))) return "block_table";
    if (s->arena && memcmp(s->arena, P->arena, P->arena_bytes))
        return "the array an output was placed over";
    if (inputs_only) return NULL;
    if (memcmp(s->o, P->o.buf, P->o.n_elems * 4)) return "o";
    if (P->lse && memcmp(s->lse, P->lse, P->lse_elems * 4)) return "lse";
    return NULL;
}

static void reset_outputs(problem *P)
{
    fill_sentinel((float *)(void *)P->o.buf, P->o.n_elems);
    if (P->lse) fill_sentinel(P->lse, P->lse_elems);
}

/* One team state for the process, zeroed once: every team call (any shape, team size and
   implementation) reuses it, one call at a time, as sdpa.h allows. */
static void *fz_team_state;

typedef struct team_job {
    const sdpa_impl *impl;
    const sdpa_params *p;
    const sdpa_tensor *q, *k, *v, *o;
    size_t ith, nth;
    sdpa_status status;
} team_job;

static void *team_thread(void *arg)
{
    team_job *j = arg;
    j->status = sdpa_impl_forward_team(j->impl, j->p, j->q, j->k, j->v, j->o, fz_team_state, j->ith,
                                       j->nth);
    return NULL;
}

/* The call on a team of nth threads: nth - 1 started for it, the caller is thread 0. Every
   thread must return the same status, which is returned. */
static sdpa_status run_team(size_t impl_i, const sdpa_impl *impl, const sdpa_params *p,
                            const sdpa_tensor *q, const sdpa_tensor *k, const sdpa_tensor *v,
                            const sdpa_tensor *o, size_t nth, const char *how)
{
    if (!fz_team_state) fz_team_state = fz_xcalloc(sdpa_team_bytes());
    team_job jobs[FZ_MAX_TEAM];
    pthread_t th[FZ_MAX_TEAM];
    for (size_t i = 0; i < nth; i++) jobs[i] = (team_job){impl, p, q, k, v, o, i, nth, SDPA_OK};
    for (size_t i = 1; i < nth; i++)
        if (pthread_create(&th[i], NULL, team_thread, &jobs[i]) != 0) {
            fprintf(stderr, "fuzz: cannot start a team thread\n");
            abort();
        }
    team_thread(&jobs[0]);
    for (size_t i = 1; i < nth; i++) pthread_join(th[i], NULL);
    fz_counts.team_calls++;
    for (size_t i = 1; i < nth; i++)
        if (jobs[i].status != jobs[0].status)
            fz_fail(impl_i, "%s: thread %zu returned %s, thread 0 %s", how, i,
                    sdpa_status_str(jobs[i].status), sdpa_status_str(jobs[0].status));
    return jobs[0].status;
}

/* One call of impl on P: serial, on a pool, or (nth > 0) by a team of nth threads; workspace
   mode 1 passes exactly the reported size (for a team, sized for n_threads = nth), 2 half of
   it; misc bit 0 tells the library 2 more threads than the pool or team has, bit 1 offsets the
   workspace by 4 bytes from malloc's alignment. */
static sdpa_status run_call(size_t impl_i, const sdpa_impl *impl, problem *P,
                            const sdpa_params *base, const fz_spec *spec, bench_pool *pool,
                            size_t nth, const char *how)
{
    sdpa_params p = *base;
    if (pool) {
        p.parallel_for = bench_pool_parallel_for;
        p.pool = pool;
        p.n_threads = bench_pool_threads(pool) + ((spec->misc & 1) ? 2 : 0);
    }
    if (nth) p.n_threads = nth + ((spec->misc & 1) ? 2 : 0); /* sizes the workspace only */
    const sdpa_tensor q = view_tensor(&P->q), k = view_tensor(&P->k), v = view_tensor(&P->v),
                      o = view_tensor(&P->o);
    char *ws = NULL;
    if (spec->workspace) {
        size_t bytes = 0;
        const sdpa_status s = sdpa_impl_workspace_size(impl, &p, &q, &k, &v, &o, &bytes);
        if (s != SDPA_OK)
            fz_fail(impl_i, "%s: sdpa_impl_workspace_size: %s", how, sdpa_status_str(s));
        if (spec->workspace == 2) bytes /= 2;
        const size_t off = (spec->misc & 2) ? 4 : 0;
        ws = fz_xmalloc(bytes + off);
        p.workspace = ws + off;
        p.workspace_bytes = bytes;
    }
    bench_pool_stats before = pool ? bench_pool_get_stats(pool) : (bench_pool_stats){0};
    fz_counts.forward_calls++;
    const sdpa_status s = nth ? run_team(impl_i, impl, &p, &q, &k, &v, &o, nth, how)
                              : sdpa_impl_forward(impl, &p, &q, &k, &v, &o);
    if (pool) {
        const bench_pool_stats after = bench_pool_get_stats(pool);
        if (after.bad_thread != before.bad_thread || after.overlaps != before.overlaps ||
            after.miscounts != before.miscounts)
            fz_fail(impl_i, "%s: the pool's contract checks failed (a test harness problem)", how);
    }
    free(ws);
    return s;
}

/* The valid call again, on a pool or a team of nth, against the serial run's o1 and l1 (whole
   buffers, sentinels included): the same bits, NaN payloads aside on a pool. */
static void rerun(size_t impl_i, const sdpa_impl *impl, problem *P, const sdpa_params *base,
                  const fz_spec *spec, const snapshot *snap, bench_pool *pool, size_t nth,
                  const char *how, const float *o1, const float *l1)
{
    reset_outputs(P);
    const sdpa_status s = run_call(impl_i, impl, P, base, spec, pool, nth, how);
    if (s != SDPA_OK) {
        fz_fail(impl_i, "%s: a valid call was refused: %s", how, sdpa_status_str(s));
        return;
    }
    const bool exact = nth > 0;
    const float *o2 = (const float *)(const void *)P->o.buf;
    for (size_t e = 0; e < P->o.n_elems; e++)
        if (exact ? fz_f32_bits(o1[e]) != fz_f32_bits(o2[e]) : !same_float(o1[e], o2[e])) {
            fz_fail(impl_i,
                    "%s: o differs from the serial run at element %td of [0][0][0][0]: %.9g "
                    "(0x%08x) vs %.9g (0x%08x)",
                    how, (ptrdiff_t)e - P->o.origin, o2[e], (unsigned)fz_f32_bits(o2[e]), o1[e],
                    (unsigned)fz_f32_bits(o1[e]));
            break;
        }
    for (size_t e = 0; l1 && e < P->lse_elems; e++)
        if (exact ? fz_f32_bits(l1[e]) != fz_f32_bits(P->lse[e]) : !same_float(l1[e], P->lse[e])) {
            fz_fail(impl_i, "%s: lse differs from the serial run at row %td: %.9g vs %.9g", how,
                    (ptrdiff_t)e - FZ_MARGIN, P->lse[e], l1[e]);
            break;
        }
    const char *ch = changed(P, snap, true);
    if (ch) fz_fail(impl_i, "%s: the input %s was modified", how, ch);
}

/* A valid call on impl, serially, pooled and (spec->team) by a team; snap holds the inputs as
   they were. */
static void run_valid(size_t impl_i, const sdpa_impl *impl, problem *P, const sdpa_params *base,
                      const fz_spec *spec, const oracle *O, const snapshot *snap)
{
    char msg[256];
    {
        const sdpa_tensor q = view_tensor(&P->q), k = view_tensor(&P->k), v = view_tensor(&P->v),
                          o = view_tensor(&P->o);
        const sdpa_status s = sdpa_validate(base, &q, &k, &v, &o, msg, sizeof msg);
        if (s != SDPA_OK || strcmp(msg, "ok") != 0)
            fz_fail(impl_i, "sdpa_validate refused a valid call: %s (%s)", msg, sdpa_status_str(s));
    }
    reset_outputs(P);
    sdpa_status s = run_call(impl_i, impl, P, base, spec, NULL, 0, "serial");
    if (s != SDPA_OK) {
        fz_fail(impl_i, "serial: a valid call was refused: %s", sdpa_status_str(s));
        return;
    }
    const char *ch = changed(P, snap, true);
    if (ch) fz_fail(impl_i, "serial: the input %s was modified", ch);
    check_result(impl_i, "serial", P, O);
    float *o1 = dup_bytes(P->o.buf, P->o.n_elems * 4);
    float *l1 = P->lse ? dup_bytes(P->lse, P->lse_elems * 4) : NULL;
    char how[32];
    snprintf(how, sizeof how, "pool of %u", spec->threads);
    rerun(impl_i, impl, P, base, spec, snap, get_pool(spec->threads), 0, how, o1, l1);
    if (spec->team) { /* the team's result: sdpa_forward's bits, NaN payloads included */
        const size_t nth = 1 + (spec->team - 1u) % FZ_MAX_TEAM;
        snprintf(how, sizeof how, "team of %zu", nth);
        rerun(impl_i, impl, P, base, spec, snap, NULL, nth, how, o1, l1);
    }
    free(o1);
    free(l1);
}

static const char *const invalid_names[FZ_N_INVALID] = {
    "batch 0", "q_heads 0", "kv_heads 0", "q_len 0", "kv_len 0", "head_dim 0",
    "q_heads not a multiple of kv_heads", "NaN scale", "+inf scale", "-inf scale", "o overlaps q",
    "o rows overlap", "lse overlaps o", "q in f16", "k of an unknown dtype", "v data NULL",
    "NaN softcap", "negative softcap", "+inf softcap", "NaN ALiBi slope", "infinite ALiBi slope",
    "NaN sink", "+inf sink", "mask data NULL", "mask overlaps o", "mask of an unknown dtype",
    /* the API's */
    "block_table entry n_pages", "block_table entry negative", "cu_q decreasing",
    "cu_kv decreasing", "cu_q[0] not 0", "q_lens above q_len", "kv_lens above kv_len",
    "a packed key sequence longer than kv_len", "q_lens and cu_q both", "cu_kv with block_table",
    "page_size 0", "n_pages 0", "max_pages x page_size shorter than a sequence",
    "q8_scores with a float K", "q8_scores 2",
    "q8_0/q4_0 K with a token stride not a multiple of 32",
    "q8_0/q4_0 V with a v_dim not a multiple of 32", "q in q8_0", "o in q4_0",
    "lse overlaps block_table", "lse overlaps q_lens", "lse overlaps kv_lens", "lse overlaps cu_q",
    "lse overlaps cu_kv", "lse overlaps sinks", "lse overlaps alibi_slopes",
    "lse overlaps the mask", "lse overlaps the workspace", "o overlaps block_table",
    "o overlaps q_lens", "o overlaps kv_lens", "o overlaps cu_q", "o overlaps cu_kv",
    "o overlaps sinks", "o overlaps alibi_slopes", "o overlaps the workspace",
    /* mask_scales' */
    "NaN mask_scales factor", "+inf mask_scales factor", "-inf mask_scales factor",
    "mask_scales without a mask", "lse overlaps mask_scales", "o overlaps mask_scales"};

/* For a refused call of an output over an array the call reads (API kinds BAD_LSE_* and
   BAD_O_*, BAD_MS_LSE and BAD_MS_O): the array (or a workspace of 256 bytes) copied into a fresh
   buffer with room for the output's whole extent around it, the parameter pointed at the copy,
   and lse or o.data placed on its first byte; nothing may change. which: 0 table, 1 q_lens,
   2 kv_lens, 3 cu_q, 4 cu_kv, 5 sinks, 6 slopes, 8 workspace, 9 mask_scales. */
static void place_over_array(problem *P, sdpa_params *p, sdpa_tensor *o, int which, bool on_lse)
{
    const size_t lb = P->B * sizeof(size_t), cb = (P->B + 1) * sizeof(size_t),
                 hb = P->Hq * sizeof(float);
    const void *src[10] = {P->table, P->q_lens, P->kv_lens, P->cu_q, P->cu_kv,
                           P->sinks, P->slopes, NULL,       NULL,    P->scales};
    const size_t bytes[10] = {table_bytes(P), lb, lb, cb, cb, hb, hb, 0, 256, hb};
    /* o's extent from its data pointer, in bytes: what it reaches below and from there up */
    ptrdiff_t below = 0, above = (ptrdiff_t)P->Dv;
    for (int a = 0; a < 3; a++) {
        const ptrdiff_t reach = (ptrdiff_t)(P->o.n[a] - 1) * P->o.st[a];
        if (reach < 0)
            below -= reach;
        else
            above += reach;
    }
    const size_t rows = P->B * P->Hq * P->Lq;
    const size_t before = on_lse ? 0 : (size_t)below * 4,
                 after = on_lse ? rows * 4 : (size_t)above * 4;
    const size_t at = 64 + (before + 63) / 64 * 64;
    free(P->arena);
    P->arena_bytes = at + bytes[which] + after + 64;
    P->arena = fz_xcalloc(P->arena_bytes);
    unsigned char *dst =
        P->arena + at; /* malloc's alignment, and 64 more: aligned for every array */
    if (src[which]) memcpy(dst, src[which], bytes[which]);
    switch (which) {
    case 0:
        p->block_table = (const int32_t *)(void *)dst;
        break;
    case 1:
        p->q_lens = (const size_t *)(void *)dst;
        break;
    case 2:
        p->kv_lens = (const size_t *)(void *)dst;
        break;
    case 3:
        p->cu_q = (const size_t *)(void *)dst;
        break;
    case 4:
        p->cu_kv = (const size_t *)(void *)dst;
        break;
    case 5:
        p->sinks = (const float *)(void *)dst;
        break;
    case 6:
        p->alibi_slopes = (const float *)(void *)dst;
        break;
    case 9:
        p->mask_scales = (const float *)(void *)dst;
        break;
    default:
        p->workspace = dst, p->workspace_bytes = bytes[8];
        break;
    }
    if (on_lse)
        p->lse = (float *)(void *)dst;
    else
        o->data = dst;
}

/* A refused API call (kind api, README): the problem was built with the feature it needs. */
static void make_invalid_api(problem *P, sdpa_params *p, sdpa_tensor *q, sdpa_tensor *k,
                             sdpa_tensor *o, int api)
{
    switch (api) {
    case BAD_TABLE_HIGH:
    case BAD_TABLE_NEG: { /* the last entry the first sequence with keys uses */
        size_t b = 0;
        while (b < P->B && P->lk[b] == 0) b++;
        if (b == P->B) { /* no keys anywhere: padded lengths all 0; give the first sequence one */
            b = 0;
            P->kv_lens[0] = 1;
        }
        const size_t len = P->kv_lens ? P->kv_lens[b] : P->Lk;
        P->table[b * P->max_pages + (len - 1) / P->page_size] =
            api == BAD_TABLE_HIGH ? (int32_t)P->n_pages : -1;
        break;
    }
    case BAD_CU_Q_DEC:
    case BAD_CU_KV_DEC: { /* sequence 1 ends before it starts (batch >= 2) */
        size_t *cu = api == BAD_CU_Q_DEC ? P->cu_q : P->cu_kv;
        if (cu[1] >= 1)
            cu[2] = cu[1] - 1;
        else
            cu[1] = 1, cu[2] = 0;
        break;
    }
    case BAD_CU_Q_0:
        P->cu_q[0] = 1;
        break;
    case BAD_Q_LENS:
        P->q_lens[P->B - 1] = P->Lq + 1;
        break;
    case BAD_KV_LENS:
        P->kv_lens[0] = P->Lk + 1;
        break;
    case BAD_CU_KV_LONG:
        P->cu_kv[P->B] = P->cu_kv[P->B - 1] + P->Lk + 1;
        break;
    case BAD_Q_BOTH:
        p->cu_q = P->cu_spare;
        break;
    case BAD_CU_KV_PAGED:
        p->cu_kv = P->cu_spare;
        break;
    case BAD_PAGE_SIZE_0:
        p->page_size = 0;
        break;
    case BAD_N_PAGES_0:
        p->n_pages = 0;
        break;
    case BAD_PAGES_SHORT:
        p->page_size = 1, p->max_pages = P->Lk - 1;
        break; /* kv_len >= 2, every sequence */
    case BAD_Q8_FLOAT_K:
        p->q8_scores = 1;
        break;
    case BAD_Q8_2:
        p->q8_scores = 2;
        break;
    case BAD_QK_STRIDE:
        k->token_stride += 1;
        break;
    case BAD_QV_DIM:
        p->v_dim = P->Dv + 1;
        break;
    case BAD_Q_Q8:
        q->dtype = SDPA_Q8_0;
        break;
    case BAD_O_Q4:
        o->dtype = SDPA_Q4_0;
        break;
    case BAD_LSE_MASK: { /* lse on the mask's first element, rounded down to a float */
        const uintptr_t a = (uintptr_t)P->mask_t.data;
        p->mask = &P->mask_t;
        p->lse = (float *)(void *)(a - a % 4);
        break;
    }
    default: {
        static const int lse_targets[] = {
            BAD_LSE_TABLE, BAD_LSE_Q_LENS, BAD_LSE_KV_LENS, BAD_LSE_CU_Q,
            BAD_LSE_CU_KV, BAD_LSE_SINKS,  BAD_LSE_SLOPES,  -1,
            BAD_LSE_WS};
        const bool on_lse = api <= BAD_LSE_WS;
        int which = 0;
        if (on_lse)
            while (lse_targets[which] != api) which++;
        else
            which = api == BAD_O_WS ? 8 : api - BAD_O_TABLE;
        place_over_array(P, p, o, which, on_lse);
        break;
    }
    }
}

/* A refused mask_scales call (kind ms, README): the problem has the factors, and a mask but for
   BAD_MS_NO_MASK. */
static void make_invalid_scales(problem *P, sdpa_params *p, sdpa_tensor *o, int ms)
{
    p->mask_scales = P->scales;
    switch (ms) {
    case BAD_MS_NAN:
    case BAD_MS_PINF:
    case BAD_MS_NINF: /* one head's factor */
        P->scales[P->Hq - 1] = ms == BAD_MS_NAN    ? fz_bits_f32(0x7fc00000u)
                               : ms == BAD_MS_PINF ? INFINITY
                                                   : -INFINITY;
        break;
    case BAD_MS_NO_MASK:
        p->mask = NULL;
        break;
    default:
        place_over_array(P, p, o, 9, ms == BAD_MS_LSE);
        break;
    }
}

/* A refused call: kind per README; P was allocated for it (o inside q's buffer for kind 10).
   With nth > 0 a team of nth threads makes it too: every thread refuses it as the serial call
   did, and nothing is written. */
static void run_invalid(size_t impl_i, const sdpa_impl *impl, problem *P, const sdpa_params *base,
                        int kind, size_t nth)
{
    sdpa_params p = *base;
    sdpa_tensor q = view_tensor(&P->q), k = view_tensor(&P->k), v = view_tensor(&P->v),
                o = view_tensor(&P->o);
    switch (kind) {
    case 0:
        p.batch = 0;
        break;
    case 1:
        p.q_heads = 0;
        break;
    case 2:
        p.kv_heads = 0;
        break;
    case 3:
        p.q_len = 0;
        break;
    case 4:
        p.kv_len = 0;
        break;
    case 5:
        p.head_dim = 0;
        break;
    case 6:
        if (p.kv_heads >= 2)
            p.q_heads = p.q_heads - 1;
        else
            p.q_heads = 1, p.kv_heads = 2;
        break;
    case 7:
        p.scale = fz_bits_f32(0x7fc00000u);
        break;
    case 8:
        p.scale = INFINITY;
        break;
    case 9:
        p.scale = -INFINITY;
        break;
    case 10: /* o's [0][0][0][0] on q's, with o's strides: q's buffer has room for o either side */
        o.data = q.data;
        break;
    case 11: /* rows of o as the library counts them: packed, the tokens of every sequence */
        if (P->Dv >= 2 && (P->cu_q ? P->cu_q[P->B] : P->Lq) >= 2)
            o.token_stride = 1;
        else if (P->Hq >= 2)
            o.head_stride = 0;
        else if (!P->cu_q && P->B >= 2)
            o.batch_stride = 0;
        else
            p.lse = (float *)o.data; /* a single row cannot overlap itself: lse over o instead */
        break;
    case 12:
        p.lse = (float *)o.data;
        break;
    case 13:
        q.dtype = SDPA_F16;
        break;
    case 14:
        k.dtype = (sdpa_dtype)99;
        break;
    case 15:
        v.data = NULL;
        break;
    case 16:
        p.softcap = fz_bits_f32(0x7fc00000u);
        break;
    case 17:
        p.softcap = P->softcap > 0 ? -P->softcap : -1.0f;
        break;
    case 18:
        p.softcap = INFINITY;
        break;
    case 19:
    case 20: /* one head's slope; the array was allocated for these kinds */
        P->slopes[P->Hq - 1] = kind == 19 ? fz_bits_f32(0x7fc00000u) : -INFINITY;
        p.alibi_slopes = P->slopes;
        break;
    case 21:
    case 22:
        P->sinks[0] = kind == 21 ? fz_bits_f32(0x7fc00000u) : INFINITY;
        p.sinks = P->sinks;
        break;
    case 23:
        P->mask_t.data = NULL;
        p.mask = &P->mask_t;
        break;
    case 24: /* the mask over o's buffer, which was made large enough */
        P->mask_t.data = P->o.buf + P->o.origin * 4;
        P->mask_t.dtype = SDPA_F32;
        P->mask_t.batch_stride = P->o.st[0], P->mask_t.head_stride = P->o.st[1],
        P->mask_t.token_stride = P->o.st[2];
        p.mask = &P->mask_t;
        break;
    case 25:
        P->mask_t.dtype = (sdpa_dtype)99;
        p.mask = &P->mask_t;
        break;
    default:
        if (kind >= FZ_INVALID_SCALES_FIRST)
            make_invalid_scales(P, &p, &o, kind - FZ_INVALID_SCALES_FIRST);
        else
            make_invalid_api(P, &p, &q, &k, &o, kind - FZ_INVALID_API_FIRST);
        break;
    }
    reset_outputs(P);
    const snapshot snap = take_snapshot(P);
    char msg[256] = "";
    const sdpa_status sv = sdpa_validate(&p, &q, &k, &v, &o, msg, sizeof msg);
    fz_counts.forward_calls++;
    const sdpa_status s = sdpa_impl_forward(impl, &p, &q, &k, &v, &o);
    if (s == SDPA_OK) fz_fail(impl_i, "invalid call (%s) accepted", invalid_names[kind]);
    if (sv != s)
        fz_fail(impl_i, "invalid call (%s): sdpa_validate says %s, sdpa_impl_forward %s",
                invalid_names[kind], sdpa_status_str(sv), sdpa_status_str(s));
    if (msg[0] == 0 || strcmp(msg, "ok") == 0)
        fz_fail(impl_i, "invalid call (%s): sdpa_validate's message is \"%s\"", invalid_names[kind],
                msg);
    const char *ch = changed(P, &snap, false);
    if (ch)
        fz_fail(impl_i, "invalid call (%s, refused: %s): %s was written", invalid_names[kind],
                sdpa_status_str(s), ch);
    size_t bytes = 0;
    const sdpa_status sw = sdpa_impl_workspace_size(impl, &p, &q, &k, &v, &o, &bytes);
    if (sw != sv)
        fz_fail(impl_i, "invalid call (%s): sdpa_impl_workspace_size says %s, sdpa_validate %s",
                invalid_names[kind], sdpa_status_str(sw), sdpa_status_str(sv));
    if (nth) {
        char how[96];
        snprintf(how, sizeof how, "invalid call (%s), team of %zu", invalid_names[kind], nth);
        const sdpa_status st = run_team(impl_i, impl, &p, &q, &k, &v, &o, nth, how);
        if (st != s)
            fz_fail(impl_i, "%s: the team says %s, sdpa_impl_forward %s", how, sdpa_status_str(st),
                    sdpa_status_str(s));
        ch = changed(P, &snap, false);
        if (ch) fz_fail(impl_i, "%s: %s was written", how, ch);
    }
    free_snapshot((snapshot *)&snap);
}

/* ------------------------------------------------------------------------------------------ */
/* sdpa_merge against a float64 merge                                                           */
/* ------------------------------------------------------------------------------------------ */
/*
 * Row r of n parts, each an output o_i[r] (dv floats) and its lse_i[r]: lse = log sum_i
 * e^lse_i, o = sum_i e^(lse_i - lse) o_i, in double. A part of lse -inf saw nothing and is never
 * read (its o rows hold NaN); a row whose parts are all -inf gives zeros and -inf; a NaN lse
 * makes the row NaN. A +inf lse is left unchecked (sdpa.h says nothing of it). A non-finite
 * o_ic of a part that counts makes o_c non-finite.
 * Tolerance: with M the largest lse (exact, a float), each weight e^(lse_i - M) is formed from
 * the f32 difference (one rounding, 2^-24 |lse_i - M|) and expf (a few ULPs, and an absolute
 * 2^-149 below the normal range), so within e^(+-delta_i) of w_i, delta_i = 2^-23 |lse_i - M| +
 * 2^-21; the computed sum is at least 1 (M's own weight is exp(0)); then as for a row of the
 * forward call, the parts standing for keys:
 *   |o_c - ref_c| <= (1 + 2^-10) sum_i e_i |o_ic - ref_c| / max(1, L_min)
 *                    + C 2^-24 (n + 8) sum_i min(1, w_i e^delta_i) |o_ic| / max(1, L_min) + C (n +
 * 8) 2^-149, e_i = min(1, w_i (e^delta_i - 1)) + 2^-149, |lse - ref| <= max_i delta_i + C 2^-24 (n
 * + 8 + |ref|).
 */
enum {
    MERGE_PARTS_0,
    MERGE_ROWS_0,
    MERGE_DV_0,
    MERGE_O_PARTS_NULL,
    MERGE_LSE_PARTS_NULL,
    MERGE_O_NULL,
    MERGE_PART_NULL,
    MERGE_LSE_PART_NULL,
    MERGE_STRIDE,
    MERGE_OUT_STRIDE,
    MERGE_O_OVER_PART,
    MERGE_IN_PLACE_STRIDE,
    MERGE_LSE_OVER_O,
    MERGE_LSE_OVER_LSE_PART,
    MERGE_LSE_OVER_PART,
    MERGE_O_OVER_LSE_PART,
    MERGE_OVERFLOW,
    N_MERGE_BAD
};
_Static_assert(N_MERGE_BAD == FZ_N_MERGE_REFUSED, "the merge refusals of fuzz_forward.h");

static const char *const merge_bad_names[N_MERGE_BAD] = {"n_parts 0",
                                                         "rows 0",
                                                         "dv 0",
                                                         "o_parts NULL",
                                                         "lse_parts NULL",
                                                         "o NULL",
                                                         "a part's o NULL",
                                                         "a part's lse NULL",
                                                         "o_stride < dv",
                                                         "o_out_stride < dv",
                                                         "o over a part",
                                                         "o a part's rows with another stride",
                                                         "lse over o",
                                                         "lse over a part's lse",
                                                         "lse over a part's o",
                                                         "o over a part's lse",
                                                         "an extent overflows"};

/* One lse of class cls (README) for a part's row. */
static float merge_lse(unsigned cls, uint64_t *st)
{
    const double u = fz_unit(st);
    switch (cls & 3) {
    case 0:
        return (float)(16.0 * u - 8.0);
    case 1:
        return u < 0.15 ? -INFINITY : (float)(200.0 * u - 100.0);
    case 2: {
        const unsigned c = (unsigned)(fz_next(st) % 12);
        const float sg = (fz_next(st) & 1) ? -1.0f : 1.0f;
        return c < 3    ? -INFINITY
               : c == 3 ? fz_bits_f32(0x7fc00000u)
               : c == 4 ? INFINITY
               : c == 5 ? sg * 1e30f
               : c == 6 ? sg * FLT_MAX
               : c == 7 ? (float)(-90.0 - 30.0 * u)
                        : (float)(400.0 * u - 200.0);
    }
    default:
        return (float)(4.0 * u - 2.0);
    }
}

/* An sdpa_merge call (README: merge bytes), or a refused one, checked; run once per input. */
static void fuzz_merge(const fz_spec *s, size_t dv)
{
    const unsigned m = s->merge ? s->merge - 1u : 0u;
    const int bad = s->merge_refuse ? (int)((s->merge_refuse - 1u) % N_MERGE_BAD) : -1;
    const size_t n = 1 + (m & 7);
    size_t rows = 1 + s->merge_rows % 64;
    if (bad == MERGE_LSE_OVER_LSE_PART && rows < 2)
        rows = 2; /* one row over the same row is in place */
    static const size_t pads[4] = {0, 1, 3, 8};
    const bool o_in = m & 8, with_lse = !(s->merge_layout & 16), l_in = (m & 16) && with_lse;
    const size_t os = dv + pads[s->merge_layout & 3];
    const size_t oos = o_in ? os : dv + pads[(s->merge_layout >> 2) & 3];
    const size_t k_in = (size_t)(s->merge_rows >> 6) % n; /* the part merged in place */
    const unsigned lse_cls = (m >> 5) & 3;
    const bool nonfinite_o = m & 128;
    uint64_t st = ((uint64_t)s->seed << 8) ^ 0x3e46e5e1u;
    const size_t M0 = FZ_MARGIN;
    /* every buffer with margins; a part's lse with room for an output extent over it */
    const size_t ob = (rows - 1) * (os + 1) + dv + 2 * M0, oob = (rows - 1) * oos + dv + 2 * M0;
    const size_t lb = (bad == MERGE_O_OVER_LSE_PART ? oob : rows) + 2 * M0;
    float **ob_p = fz_xmalloc(n * sizeof *ob_p), **lb_p = fz_xmalloc(n * sizeof *lb_p);
    const float **op = fz_xmalloc(n * sizeof *op), **lp = fz_xmalloc(n * sizeof *lp);
    const float nan = fz_bits_f32(0x7fc00000u);
    for (size_t i = 0; i < n; i++) {
        ob_p[i] = fz_xmalloc(ob * sizeof(float)), lb_p[i] = fz_xmalloc(lb * sizeof(float));
        for (size_t e = 0; e < ob; e++) ob_p[i][e] = nan; /* padding and margins: never read */
        for (size_t e = 0; e < lb; e++) lb_p[i][e] = nan;
        op[i] = ob_p[i] + M0, lp[i] = lb_p[i] + M0;
        const int ex = (int)(fz_next(&st) % 21) - 10;
        for (size_t r = 0; r < rows; r++) {
            const float l = lse_cls == 3 && r % 3 == 0 ? -INFINITY : merge_lse(lse_cls, &st);
            lb_p[i][M0 + r] = l;
            for (size_t c = 0; c < dv; c++) {
                float x = (float)ldexp(2.0 * fz_unit(&st) - 1.0, ex);
                if (nonfinite_o && fz_next(&st) % 64 == 0) {
                    static const uint32_t sp[3] = {0x7fc00000u, 0x7f800000u, 0xff800000u};
                    x = fz_bits_f32(sp[fz_next(&st) % 3]);
                }
                ob_p[i][M0 + r * os + c] = l == -INFINITY ? nan : x;
            }
        }
    }
    /* the oracle, from the parts as they are before the call */
    unsigned char *kind = fz_xmalloc(rows), *col = fz_xmalloc(rows * dv);
    double *ref = fz_xmalloc(rows * dv * sizeof(double)),
           *tol = fz_xmalloc(rows * dv * sizeof(double));
    double *lref = fz_xmalloc(rows * sizeof(double)), *ltol = fz_xmalloc(rows * sizeof(double));
    double *w = fz_xmalloc(n * sizeof(double)), *ew = fz_xmalloc(n * sizeof(double)),
           *wp = fz_xmalloc(n * sizeof(double));
    for (size_t r = 0; r < rows && bad < 0; r++) {
        bool any_nan = false, any_pinf = false;
        double M = -INFINITY;
        for (size_t i = 0; i < n; i++) {
            const double l = lp[i][r];
            if (l != l)
                any_nan = true;
            else if (l == INFINITY)
                any_pinf = true;
            else if (l > M)
                M = l;
        }
        kind[r] = any_nan ? ROW_NAN : any_pinf ? ROW_SKIP : M == -INFINITY ? ROW_ZERO : ROW_VALUE;
        if (kind[r] != ROW_VALUE) continue;
        double L = 0, Lmin = 0, Lhi = 0, Llo = 0, dmax = 0;
        for (size_t i = 0; i < n; i++) {
            const double l = lp[i][r];
            if (l == -INFINITY) {
                w[i] = ew[i] = wp[i] = 0;
                continue;
            }
            const double xs = l - M, d = 0x1p-23 * fabs(xs) + 0x1p-21;
            w[i] = exp(xs);
            L += w[i], Lmin += exp(xs - d), Lhi += exp(xs + d), Llo += exp(xs - d);
            ew[i] = fmin(1.0, exp(xs + log(expm1(d)))) + 0x1p-149;
            wp[i] = fmin(1.0, exp(xs + d));
            if (d > dmax) dmax = d;
        }
        const double Lden = fmax(1.0, Lmin);
        lref[r] = M + log(L);
        ltol[r] = fmax(log(Lhi / L), log(L / Llo)) + dmax +
                  FZ_C * 0x1p-24 * ((double)n + 8.0 + fabs(lref[r]));
        for (size_t c = 0; c < dv; c++) {
            double acc = 0, mag = 0, wpv = 0;
            bool nonfinite = false;
            for (size_t i = 0; i < n; i++) {
                if (lp[i][r] == -INFINITY) continue;
                const double x = op[i][r * os + c];
                if (!isfinite(x))
                    nonfinite = true;
                else
                    acc += w[i] * x, mag += fabs(x), wpv += wp[i] * fabs(x);
            }
            const size_t e = r * dv + c;
            col[e] = nonfinite ? COL_NONFINITE : mag > 0x1p126 ? COL_MAY_NONFINITE : COL_FINITE;
            ref[e] = acc / L;
            double dev = 0;
            for (size_t i = 0; i < n && !nonfinite; i++)
                if (lp[i][r] != -INFINITY) dev += ew[i] * fabs(op[i][r * os + c] - ref[e]);
            tol[e] = (1 + 0x1p-10) * dev / Lden +
                     FZ_C * 0x1p-24 * ((double)n + 8.0) * (wpv / Lden) +
                     FZ_C * ((double)n + 8.0) * 0x1p-149;
        }
    }
    /* the outputs: separate sentinel-filled buffers, or a part's own (in place) */
    float *o_own = fz_xmalloc(oob * sizeof(float)),
          *l_own = fz_xmalloc((rows + 2 * M0) * sizeof(float));
    fill_sentinel(o_own, oob);
    fill_sentinel(l_own, rows + 2 * M0);
    float *obuf = o_in ? ob_p[k_in] : o_own, *lbuf = l_in ? lb_p[k_in] : l_own;
    const size_t obn = o_in ? ob : oob, lbn = l_in ? lb : rows + 2 * M0;
    float *o = obuf + M0, *lse = with_lse ? lbuf + M0 : NULL;
    /* what every buffer holds before the call */
    float **pre_o = fz_xmalloc(n * sizeof *pre_o), **pre_l = fz_xmalloc(n * sizeof *pre_l);
    for (size_t i = 0; i < n; i++)
        pre_o[i] = dup_bytes(ob_p[i], ob * 4), pre_l[i] = dup_bytes(lb_p[i], lb * 4);
    float *pre_oo = dup_bytes(o_own, oob * 4), *pre_ll = dup_bytes(l_own, (rows + 2 * M0) * 4);
    /* a refused call: one argument spoiled */
    size_t a_n = n, a_rows = rows, a_dv = dv, a_os = os, a_oos = oos;
    const float *const *a_op = op, *const *a_lp = lp;
    float *a_o = o, *a_lse = lse;
    sdpa_status want = SDPA_ERR_INVALID_ARGUMENT;
    const float *saved_o = op[n - 1], *saved_l = lp[n - 1];
    switch (bad) {
    case MERGE_PARTS_0:
        a_n = 0;
        break;
    case MERGE_ROWS_0:
        a_rows = 0;
        break;
    case MERGE_DV_0:
        a_dv = 0;
        break;
    case MERGE_O_PARTS_NULL:
        a_op = NULL;
        break;
    case MERGE_LSE_PARTS_NULL:
        a_lp = NULL;
        break;
    case MERGE_O_NULL:
        a_o = NULL;
        break;
    case MERGE_PART_NULL:
        op[n - 1] = NULL;
        break;
    case MERGE_LSE_PART_NULL:
        lp[n - 1] = NULL;
        break;
    case MERGE_STRIDE:
        a_os = dv - 1;
        break;
    case MERGE_OUT_STRIDE:
        a_oos = dv - 1;
        break;
    case MERGE_O_OVER_PART:
        a_o = ob_p[0] + M0 + 1, a_oos = os;
        break;
    case MERGE_IN_PLACE_STRIDE:
        a_o = ob_p[0] + M0, a_oos = os + 1;
        break;
    case MERGE_LSE_OVER_O:
        a_lse = o;
        break;
    case MERGE_LSE_OVER_LSE_PART:
        a_lse = lb_p[0] + M0 + 1;
        break;
    case MERGE_LSE_OVER_PART:
        a_lse = ob_p[0] + M0;
        break;
    case MERGE_O_OVER_LSE_PART:
        a_o = lb_p[0] + M0;
        break;
    case MERGE_OVERFLOW:
        a_rows = SIZE_MAX / 2, want = SDPA_ERR_OVERFLOW;
        break;
    default:
        break;
    }
    if (bad >= 0)
        fz_counts.merge_refused++;
    else
        fz_counts.merge_calls++;
    const sdpa_status got = sdpa_merge(a_n, a_rows, a_dv, a_op, a_os, a_lp, a_o, a_oos, a_lse);
    op[n - 1] = saved_o, lp[n - 1] = saved_l;
    unsigned char *own_o = fz_xcalloc(obn), *own_l = fz_xcalloc(lbn);
    if (bad >= 0) {
        if (got != want)
            fz_fail(FZ_WHO_MERGE, "refused call (%s): %s, want %s", merge_bad_names[bad],
                    sdpa_status_str(got), sdpa_status_str(want));
    } else if (got != SDPA_OK) {
        fz_fail(FZ_WHO_MERGE, "%zu parts, %zu rows, dv %zu: a valid call was refused: %s", n, rows,
                dv, sdpa_status_str(got));
    } else {
        int reported = 0;
        for (size_t r = 0; r < rows; r++) {
            bool wrong = false;
            for (size_t c = 0; c < dv; c++) {
                own_o[M0 + r * oos + c] = 1;
                const float g = o[r * oos + c];
                const size_t e = r * dv + c;
                if (wrong || kind[r] == ROW_SKIP) continue;
                if (kind[r] == ROW_NAN)
                    wrong = !isnan(g);
                else if (kind[r] == ROW_ZERO)
                    wrong = g != 0.0f;
                else if (col[e] == COL_NONFINITE)
                    wrong = isfinite(g);
                else if (!(isfinite(g) ? fabs((double)g - ref[e]) <= tol[e]
                                       : col[e] == COL_MAY_NONFINITE))
                    wrong = true;
                if (wrong && reported++ < 3)
                    fz_fail(FZ_WHO_MERGE,
                            "%zu parts, row %zu of %zu, dv %zu: o[%zu] = %.9g, float64 %.9g, tol "
                            "%.3g (row %s)",
                            n, r, rows, dv, c, g, kind[r] == ROW_VALUE ? ref[e] : 0.0,
                            kind[r] == ROW_VALUE ? tol[e] : 0.0,
                            kind[r] == ROW_NAN    ? "NaN"
                            : kind[r] == ROW_ZERO ? "zeros"
                                                  : "of values");
            }
            if (!lse) continue;
            own_l[M0 + r] = 1;
            const float g = lse[r];
            const bool lwrong = kind[r] == ROW_NAN     ? !isnan(g)
                                : kind[r] == ROW_ZERO  ? g != -INFINITY
                                : kind[r] == ROW_VALUE ? !(fabs((double)g - lref[r]) <= ltol[r])
                                                       : false;
            if (lwrong && reported++ < 3)
                fz_fail(FZ_WHO_MERGE,
                        "%zu parts, row %zu of %zu: lse = %.9g, float64 %.9g, tol %.3g", n, r, rows,
                        g,
                        kind[r] == ROW_VALUE  ? lref[r]
                        : kind[r] == ROW_ZERO ? -INFINITY
                                              : NAN,
                        kind[r] == ROW_VALUE ? ltol[r] : 0.0);
        }
    }
    /* nothing else may change: the parts (but the rows merged in place), the outputs' margins
       and padding, and everything of a refused call */
    const char *what = NULL;
    for (size_t e = 0; e < obn && !what; e++)
        if (!own_o[e] && !same_float(obuf[e], o_in ? pre_o[k_in][e] : pre_oo[e]))
            what = "o's buffer outside its rows";
    for (size_t e = 0; e < lbn && !what; e++)
        if (!own_l[e] && !same_float(lbuf[e], l_in ? pre_l[k_in][e] : pre_ll[e]))
            what = "lse's buffer outside its rows";
    for (size_t i = 0; i < n && !what; i++) {
        if (!(o_in && i == k_in) && memcmp(ob_p[i], pre_o[i], ob * 4)) what = "a part's o";
        if (!(l_in && i == k_in) && memcmp(lb_p[i], pre_l[i], lb * 4)) what = "a part's lse";
    }
    if (what)
        fz_fail(FZ_WHO_MERGE, "%s%s: %s was written", bad >= 0 ? "refused call " : "valid call",
                bad >= 0 ? merge_bad_names[bad] : "", what);
    for (size_t i = 0; i < n; i++) free(ob_p[i]), free(lb_p[i]), free(pre_o[i]), free(pre_l[i]);
    free(ob_p), free(lb_p), free(op), free(lp), free(pre_o), free(pre_l), free(pre_oo),
        free(pre_ll);
    free(kind), free(col), free(ref), free(tol), free(lref), free(ltol), free(w), free(ew),
        free(wp);
    free(o_own), free(l_own), free(own_o), free(own_l);
}

/* ------------------------------------------------------------------------------------------ */
/* One input                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Would the planner split a sequence of this call into KV chunks (its public tunables, for the
   counts only)? */
static bool planner_splits(const problem *P)
{
    static size_t rows_target, split_min;
    if (!rows_target) {
        sdpa_tunable t[32];
        const size_t n = sdpa_planner_tunables(0, t, 32);
        for (size_t i = 0; i < n && i < 32; i++) {
            if (strcmp(t[i].name, "rows_target") == 0) rows_target = t[i].value;
            if (strcmp(t[i].name, "split_min_kv") == 0) split_min = t[i].value;
        }
        if (!rows_target) rows_target = 64, split_min = 2048;
    }
    size_t qb = P->G >= rows_target ? 1 : rows_target / P->G;
    if (qb > P->Lq) qb = P->Lq;
    for (size_t b = 0; b < P->B; b++)
        if (P->lq[b] >= 1 && P->lq[b] <= qb && P->lk[b] >= split_min) return true;
    return false;
}

static void problem_free(problem *P)
{
    free(P->q.buf), free(P->k.buf), free(P->v.buf), free(P->o.buf);
    free(P->q.sh), free(P->k.sh), free(P->v.sh);
    free(P->qd), free(P->kd), free(P->vd), free(P->lse);
    free(P->slopes), free(P->sinks), free(P->scales), free(P->mask.buf), free(P->maskd);
    free(P->lq), free(P->lk), free(P->q_lens), free(P->kv_lens), free(P->cu_q), free(P->cu_kv),
        free(P->cu_spare);
    free(P->table), free(P->arena);
}

/* Sizes, lengths, the packed offsets and the block table of an (effective) spec: everything
   but the buffers. */
static void problem_shape(problem *P, const fz_spec *spec)
{
    memset(P, 0, sizeof *P);
    const int invalid = spec->invalid, api = invalid - FZ_INVALID_API_FIRST;
    size_t B = spec->batch, Hkv = spec->kv_heads, G = spec->group, Lq = spec->q_len;
    const size_t Lk = spec->kv_len, D = spec->head_dim,
                 Dv = spec->v_dim ? spec->v_dim : spec->head_dim;
    shrink_to_budget(&B, &Hkv, &G, &Lq, Lk, D, Dv);
    if ((api == BAD_CU_Q_DEC || api == BAD_CU_KV_DEC) && B < 2)
        B = 2; /* a decrease takes two sequences */
    P->B = B, P->Hkv = Hkv, P->G = G, P->Hq = Hkv * G, P->Lq = Lq, P->Lk = Lk, P->D = D, P->Dv = Dv;
    P->causal = spec->causal;
    P->scale = decode_scale(spec, D);
    P->window = spec->window;
    if (spec->misc & 4) /* the widest windows: SIZE_MAX or PTRDIFF_MAX, less w / 2 */
        P->window = (spec->window & 1 ? (size_t)PTRDIFF_MAX : SIZE_MAX) - spec->window / 2;
    P->softcap = decode_softcap(spec);
    P->q8 = spec->q8_scores && spec->k_format;
    uint64_t ls = ((uint64_t)spec->seed << 8) ^ 0x1e9c7a5bu;
    P->lq = fz_xmalloc(B * sizeof(size_t));
    P->lk = fz_xmalloc(B * sizeof(size_t));
    for (size_t b = 0; b < B; b++) P->lq[b] = Lq, P->lk[b] = Lk;
    if (spec->q_form) draw_lengths(spec->q_lens_class, Lq, B, &ls, P->lq);
    if (spec->kv_form) draw_lengths(spec->kv_lens_class, Lk, B, &ls, P->lk);
    if (spec->q_form == 1) P->q_lens = dup_bytes(P->lq, B * sizeof(size_t));
    if (spec->q_form == 2) P->cu_q = cumulative(P->lq, B);
    if (spec->kv_form == 1) P->kv_lens = dup_bytes(P->lk, B * sizeof(size_t));
    if (spec->kv_form == 2) P->cu_kv = cumulative(P->lk, B);
    if (api == BAD_Q_BOTH || api == BAD_CU_KV_PAGED)
        P->cu_spare = cumulative(api == BAD_Q_BOTH ? P->lq : P->lk, B);
    if (spec->paged & 1) build_table(P, spec->paged, spec->page_size ? spec->page_size : 1, &ls);
}

/* The views' layouts of a shaped problem: packed sequences are tokens of batch 0 (with
   spec->slack unused tokens after them), pages stand for the key side's batches. */
static void problem_views(problem *P, const fz_spec *spec)
{
    const size_t B = P->B, Hq = P->Hq, Hkv = P->Hkv, Lq = P->Lq, Lk = P->Lk, D = P->D, Dv = P->Dv;
    const size_t slack = spec->slack & 3;
    size_t qn0 = B, qn2 = Lq, kn0 = B, kn2 = Lk;
    if (P->cu_q) qn0 = 1, qn2 = (P->cu_q[B] ? P->cu_q[B] : 1) + slack;
    if (P->table)
        kn0 = P->n_pages, kn2 = P->page_size;
    else if (P->cu_kv)
        kn0 = 1, kn2 = (P->cu_kv[B] ? P->cu_kv[B] : 1) + slack;
    const sdpa_dtype kdt =
        spec->k_format ? fz_formats[spec->k_format % 7] : float_types[spec->k_dtype % 3];
    const sdpa_dtype vdt =
        spec->v_format ? fz_formats[spec->v_format % 7] : float_types[spec->v_dtype % 3];
    view_layout(&P->q, qn0, Hq, qn2, D, SDPA_F32, spec->layout[0], true);
    view_layout(&P->k, kn0, Hkv, kn2, D, kdt, spec->layout[1], true);
    view_layout(&P->v, kn0, Hkv, kn2, Dv, vdt, spec->layout[2], true);
    view_layout(&P->o, qn0, Hq, qn2, Dv, SDPA_F32, spec->layout[3], false);
}

/* The buffers, their values and the variants' arrays of a shaped problem. */
static void problem_fill(problem *P, const fz_spec *spec)
{
    const int invalid = spec->invalid, api = invalid - FZ_INVALID_API_FIRST;
    const size_t B = P->B, Hq = P->Hq, Lq = P->Lq, Lk = P->Lk;
    problem_views(P, spec);
    if (spec->alibi_kind % 4 || invalid == 19 || invalid == 20) {
        P->slopes = fz_xcalloc(Hq * sizeof(float));
        make_slopes(spec, Hq, P->slopes);
    }
    if (spec->sink_kind % 4 || invalid == 21 || invalid == 22) {
        P->sinks = fz_xmalloc(Hq * sizeof(float));
        make_sinks(spec, Hq, P->sinks);
    }
    if (spec->scales_kind & 3) { /* fz_effective: only with a mask, or for a refusal */
        P->scales = fz_xmalloc(Hq * sizeof(float));
        make_scales(spec, Hq, P->scales);
    }
    P->has_mask = spec->mask || (invalid >= 23 && invalid <= 25);
    const size_t rows = B * Hq * Lq;
    if (invalid == 10) P->q.origin += (ptrdiff_t)P->o.n_elems, P->q.n_elems += 2 * P->o.n_elems;
    view_alloc(&P->q, 0);
    view_alloc(&P->k, 0);
    view_alloc(&P->v, 0);
    size_t o_min = 0;
    if (invalid == 11 || invalid == 12)
        o_min = (size_t)P->o.origin + rows + FZ_MARGIN; /* room for lse over o */
    if (invalid == 24) { /* room for a mask of o's strides and kv_len elements a row */
        o_min = (size_t)P->o.origin + Lk + FZ_MARGIN;
        const size_t mn[3] = {B, Hq, Lq};
        for (int a = 0; a < 3; a++)
            if (P->o.st[a] > 0) o_min += (mn[a] - 1) * (size_t)P->o.st[a];
    }
    view_alloc(&P->o, o_min);
    if (P->has_mask) {
        mask_layout(&P->mask, B, Hq, Lq, Lk, float_types[(spec->mask ? spec->mask - 1u : 0u) % 3],
                    spec->mask_layout);
        /* room for lse (rows floats) from the mask's first element */
        view_alloc(&P->mask, api == BAD_LSE_MASK
                                 ? (size_t)P->mask.origin + rows * 4 / P->mask.es + FZ_MARGIN
                                 : 0);
        P->mask_t = view_tensor(&P->mask);
    }
    if (spec->lse || invalid == 11 || invalid == 12) {
        P->lse_elems = rows + 2 * FZ_MARGIN;
        P->lse = fz_xmalloc(P->lse_elems * sizeof(float));
    }

    /* values in the rows some row reads (every row, but for ragged and paged calls), in order */
    needs nd = need_maps(P);
    view *in[3] = {&P->q, &P->k, &P->v};
    const unsigned char *need[3] = {nd.q, nd.k, nd.v};
    for (int t = 0; t < 3; t++) {
        view *x = in[t];
        uint64_t st = ((uint64_t)spec->seed << 8) ^ (uint64_t)(t + 1) * 0x9e3779b97f4a7c15u;
        for (size_t b = 0; b < x->n[0]; b++)
            for (size_t h = 0; h < x->n[1]; h++)
                for (size_t j = 0; j < x->n[2]; j++) {
                    const ptrdiff_t e = view_index(x, b, h, j, 0);
                    if (!need[t][e]) continue;
                    for (size_t c = 0; c < x->D; c++)
                        view_store(x, e + (ptrdiff_t)c,
                                   fill_value(spec->fill[t], spec->fill_param[t], &st));
                }
    }
    for (unsigned i = 0; i < spec->n_inject; i++)
        apply_inject(in[spec->inject[i].tensor % 3], &spec->inject[i]);
    if (P->has_mask) {
        fill_mask(P, spec, nd.m);
        P->maskd = view_dense(&P->mask);
    }
    if (spec->poison) poison_keys(P, spec->poison);
    poison_unread(P, &nd);
    view_quantize(&P->k);
    view_quantize(&P->v);
    if (P->has_mask) { /* as poisoned */
        free(P->maskd);
        P->maskd = view_dense(&P->mask);
    }
}

int sdpa_fuzz_one(const uint8_t *data, size_t size)
{
    fz_spec spec;
    fz_decode(data, size, &spec);
    fz_effective(&spec);
    fz_failed = 0;
    fz_log_lines = 0;
    fz_counts.inputs++;

    problem P;
    problem_shape(&P, &spec);
    problem_fill(&P, &spec);
    const int invalid = spec.invalid;

    sdpa_params base;
    memset(&base, 0, sizeof base);
    base.batch = P.B, base.q_heads = P.Hq, base.kv_heads = P.Hkv, base.q_len = P.Lq,
    base.kv_len = P.Lk;
    base.head_dim = P.D;
    base.v_dim = spec.v_dim ? P.Dv : 0;
    base.scale = P.scale;
    base.causal = P.causal;
    base.lse = P.lse ? P.lse + FZ_MARGIN : NULL;
    base.window = P.window;
    base.softcap = P.softcap;
    base.alibi_slopes = P.slopes;
    base.sinks = P.sinks;
    base.mask = P.has_mask ? &P.mask_t : NULL;
    base.mask_scales = P.has_mask ? P.scales : NULL;
    base.q_lens = P.q_lens, base.kv_lens = P.kv_lens;
    base.cu_q = P.cu_q, base.cu_kv = P.cu_kv;
    base.block_table = P.table;
    if (P.table)
        base.page_size = P.page_size, base.max_pages = P.max_pages, base.n_pages = P.n_pages;
    base.q8_scores = P.q8;

    oracle O;
    memset(&O, 0, sizeof O);
    const size_t rows = P.B * P.Hq * P.Lq;
    if (invalid < 0) {
        fz_counts.valid_calls++;
        if (planner_splits(&P)) fz_counts.split_calls++;
        if (P.cu_q || P.cu_kv || P.q_lens || P.kv_lens) fz_counts.ragged_calls++;
        if (P.table) fz_counts.paged_calls++;
        if (P.k.blk > 1 || P.v.blk > 1) fz_counts.quant_calls++;
        if (P.q8) fz_counts.q8_calls++;
        if (P.k.dt > SDPA_Q4_0 || P.v.dt > SDPA_Q4_0) fz_counts.newfmt_calls++;
        if (base.mask_scales) fz_counts.scaled_calls++;
        P.qd = view_dense(&P.q);
        P.kd = view_dense(&P.k);
        P.vd = view_dense(&P.v);
        oracle_run(&P, &O);
        for (size_t r = 0; r < rows; r++) {
            const int kd = O.row_kind[r];
            if (kd == ROW_VALUE)
                fz_counts.rows_value++;
            else if (kd == ROW_NAN)
                fz_counts.rows_nan++;
            else if (kd == ROW_ZERO)
                fz_counts.rows_zero++;
            else if (kd == ROW_SKIP)
                fz_counts.rows_unchecked++;
        }
    } else {
        fz_counts.invalid_calls++;
    }

    snapshot snap;
    if (invalid < 0) snap = take_snapshot(&P);
    const size_t n_impl = sdpa_impl_count();
    for (size_t i = 0; i < n_impl && i < SDPA_FUZZ_MAX_IMPLS; i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (!sdpa_impl_supported(impl) || !sdpa_test_selected(sdpa_impl_name(impl))) continue;
        if (invalid < 0)
            run_valid(i, impl, &P, &base, &spec, &O, &snap);
        else
            run_invalid(i, impl, &P, &base, invalid,
                        spec.team ? 1 + (spec.team - 1u) % FZ_MAX_TEAM : 0);
    }
    if (invalid < 0) oracle_free(&O), free_snapshot(&snap);
    if (spec.merge || spec.merge_refuse) fuzz_merge(&spec, P.Dv);
    problem_free(&P);
    return fz_failed;
}

static const char *const value_names[16] = {"NaN", "+inf",  "-inf", "huge",     "denormal", "tiny",
                                            "0",   "-0",    "raw",  "2^k",      "FLT_MAX",  "sNaN",
                                            "+-1", "large", "-NaN", "small int"};
static const char *const shape_names[4] = {"element", "row", "rows", "column"};

static void print_sizes(FILE *f, const char *what, const size_t *x, size_t n)
{
    fprintf(f, " %s", what);
    for (size_t i = 0; i < n && i < 64; i++) fprintf(f, "%s%zu", i ? "," : " ", x[i]);
    if (n > 64) fprintf(f, ",...");
}

void sdpa_fuzz_describe(const uint8_t *data, size_t size, FILE *f)
{
    fz_spec s;
    fz_decode(data, size, &s);
    fz_effective(&s);
    problem P;
    problem_shape(&P, &s);
    problem_views(&P, &s);
    const size_t B = P.B, Hkv = P.Hkv, G = P.G, Lq = P.Lq, Lk = P.Lk, D = P.D, Dv = P.Dv;
    fprintf(f,
            "batch %zu, heads %zu/%zu, q_len %zu, kv_len %zu, head_dim %zu, v_dim %zu%s, "
            "k %s, v %s, scale %.9g%s%s%s\n",
            B, Hkv * G, Hkv, Lq, Lk, D, Dv, s.v_dim ? "" : " (0)", dt_name(P.k.dt), dt_name(P.v.dt),
            (double)P.scale, s.causal ? ", causal" : "", s.lse ? ", lse" : "",
            P.q8 ? ", q8_scores" : "");
    const char *tn[4] = {"q", "k", "v", "o"};
    const view *vs[4] = {&P.q, &P.k, &P.v, &P.o};
    for (int t = 0; t < 4; t++) {
        const view *v = vs[t];
        fprintf(f, "  %s: [%zu][%zu][%zu][%zu], strides (%td, %td, %td)", tn[t], v->n[0], v->n[1],
                v->n[2], v->D, v->st[0], v->st[1], v->st[2]);
        if (t < 3) fprintf(f, ", fill class %u param %u", s.fill[t], s.fill_param[t]);
        fputc('\n', f);
    }
    fprintf(f, "  workspace mode %u%s, pool of %u threads%s, seed %u%s\n", s.workspace,
            (s.misc & 2) ? " (misaligned)" : "", s.threads, (s.misc & 1) ? " (n_threads + 2)" : "",
            (unsigned)s.seed, s.invalid >= 0 ? ", REFUSED CALL" : "");
    if (s.invalid >= 0)
        fprintf(f, "  refused call kind %d: %s\n", s.invalid,
                invalid_names[s.invalid % FZ_N_INVALID]);
    if (P.q_lens || P.cu_q || P.kv_lens || P.cu_kv) {
        fprintf(f, " ");
        if (P.q_lens) print_sizes(f, "q_lens", P.q_lens, B);
        if (P.cu_q)
            print_sizes(f, "cu_q", P.cu_q, B + 1), fprintf(f, " (+%u unused tokens)", s.slack);
        if (P.kv_lens) print_sizes(f, "kv_lens", P.kv_lens, B);
        if (P.cu_kv)
            print_sizes(f, "cu_kv", P.cu_kv, B + 1), fprintf(f, " (+%u unused tokens)", s.slack);
        fputc('\n', f);
    }
    if (P.table) {
        fprintf(f, "  paged: page_size %zu, max_pages %zu, n_pages %zu%s%s%s, table", P.page_size,
                P.max_pages, P.n_pages, (s.paged & 2) ? ", shared pages" : "",
                (s.paged & 4) ? ", junk in unused entries" : "", (s.paged & 8) ? ", shuffled" : "");
        for (size_t e = 0; e < B * P.max_pages && e < 64; e++)
            fprintf(f, "%s%d", e ? "," : " ", (int)P.table[e]);
        fprintf(f, "%s\n", B * P.max_pages > 64 ? ",..." : "");
    }
    if (P.window) fprintf(f, "  window %zu\n", P.window);
    if (s.softcap_kind)
        fprintf(f, "  softcap %.9g (class %u)\n", (double)P.softcap, s.softcap_kind);
    const size_t Hq = Hkv * G;
    float *arr = fz_xmalloc(Hq * sizeof(float));
    if (s.alibi_kind) {
        for (size_t h = 0; h < Hq; h++) arr[h] = 0.0f;
        make_slopes(&s, Hq, arr);
        fprintf(f, "  alibi slopes (class %u):", s.alibi_kind);
        for (size_t h = 0; h < Hq; h++) fprintf(f, " %.9g", (double)arr[h]);
        fputc('\n', f);
    }
    if (s.sink_kind) {
        make_sinks(&s, Hq, arr);
        fprintf(f, "  sinks (class %u):", s.sink_kind);
        for (size_t h = 0; h < Hq; h++) fprintf(f, " %.9g", (double)arr[h]);
        fputc('\n', f);
    }
    if (s.mask) {
        view v;
        mask_layout(&v, B, Hq, Lq, Lk, float_types[(s.mask - 1u) % 3], s.mask_layout);
        fprintf(f, "  mask %s, strides (%td, %td, %td), class %u param %u, special %u%s\n",
                dt_name(v.dt), v.st[0], v.st[1], v.st[2], s.mask_class, s.mask_param,
                s.mask_special, (s.scales_kind & 4) ? ", finite entries -|i' - j|" : "");
    }
    if (s.scales_kind & 3) {
        make_scales(&s, Hq, arr);
        fprintf(f, "  mask_scales (class %u):", s.scales_kind & 3);
        for (size_t h = 0; h < Hq; h++) fprintf(f, " %.9g", (double)arr[h]);
        fputc('\n', f);
    }
    if (s.team) fprintf(f, "  team of %u threads\n", 1 + (s.team - 1u) % FZ_MAX_TEAM);
    free(arr);
    if (s.poison) {
        static const char *const what[4] = {"K NaN", "V +inf", "V NaN", "K -inf, V NaN"};
        static const char *const where[4] = {"hidden from every row", "hidden from the first row",
                                             "hidden from the last row", "hidden from some row"};
        fprintf(f, "  poison: %s on keys %s\n", what[(s.poison - 1u) & 3],
                where[((s.poison - 1u) >> 2) & 3]);
    }
    for (unsigned i = 0; i < s.n_inject; i++) {
        const fz_inject *in = &s.inject[i];
        fprintf(f, "  inject %s %s idx %u len %u: %s (%.9g)\n", tn[in->tensor % 3],
                shape_names[in->shape & 3], (unsigned)in->idx, (unsigned)in->len,
                value_names[in->value & 15], (double)inject_value(in));
    }
    if (s.merge || s.merge_refuse)
        fprintf(f, "  sdpa_merge: %u parts, %u rows, dv %zu, mode 0x%02x, layout 0x%02x%s%s\n",
                1 + ((s.merge ? s.merge - 1u : 0u) & 7), 1 + s.merge_rows % 64, Dv, s.merge,
                s.merge_layout, s.merge_refuse ? ", refused: " : "",
                s.merge_refuse ? merge_bad_names[(s.merge_refuse - 1u) % N_MERGE_BAD] : "");
    problem_free(&P);
}
