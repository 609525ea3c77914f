/* fuzz_forward.c -- differential fuzz target: bytes -> an attention call, run on every implementation, checked against float64 */
/*
 * One input decodes to one call of sdpa_impl_forward (README.md gives the byte format). The
 * call runs on every implementation this CPU supports, serially and through bench/pool.h's
 * pool in shuffled order; the two results must be the same bits, and the serial one must match
 * the float64 oracle below, which uses no library code. Inputs built to be refused must be
 * refused, with the same status from sdpa_validate and a message, and must write nothing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fuzz_forward.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

/* One failed check of implementation `impl` (registry index). */
__attribute__((format(printf, 2, 3))) static void fz_fail(size_t impl, const char *fmt, ...)
{
    fz_failed++;
    if (impl < SDPA_FUZZ_MAX_IMPLS) fz_counts.failures[impl]++;
    FILE *f = fz_log_set ? fz_log_file : stderr;
    if (!f || fz_log_lines >= fz_log_max) return;
    fz_log_lines++;
    fprintf(f, "%sFAIL [%s] ", fz_log_prefix, sdpa_impl_name(sdpa_impl_at(impl)));
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    if (fz_log_lines == fz_log_max) fprintf(f, "%s(further failures of this input not printed)\n", fz_log_prefix);
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
    if (e == 31) return m ? fz_bits_f32(((uint32_t)(h & 0x8000) << 16) | 0x7fc00000u | ((uint32_t)m << 13))
                          : sign * INFINITY;
    if (e == 0) return sign * ldexpf((float)m, -24);
    return sign * ldexpf((float)(1024 + m), e - 25);
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
        h = (uint16_t)nearbyintf(a * 0x1p24f); /* subnormal steps of 2^-24; 1024 is the least normal */
    } else {
        int e;
        const float m = frexpf(a, &e);       /* a = m 2^e, m in [0.5, 1) */
        const float r = nearbyintf(m * 2048.0f); /* 11 significant bits */
        int ee = e - 1;                      /* a ~ (r / 1024) 2^ee */
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
#define FZ_MAX_Q_LEN 40
#define FZ_MAX_KV_LEN 2200
#define FZ_MAX_DIM 160
#define FZ_INVALID_BASE 240 /* byte 19 >= this: a refused call of kind byte - 240 */
#define FZ_HEADER 31
#define FZ_N_INVALID_PLAIN 16   /* refused calls of byte 19 */
#define FZ_N_INVALID_VARIANT 10 /* refused calls of the variants' last byte */

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
    s->fill[0] = s->fill[1] = s->fill[2] = 3; /* zeros */
}

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
    if (s->invalid < 0 && refuse) s->invalid = FZ_N_INVALID_PLAIN + (refuse - 1) % FZ_N_INVALID_VARIANT;
}

static bool has_variant_bytes(const fz_spec *s)
{
    return s->window || s->softcap_kind % 8 || s->softcap_param || s->alibi_kind % 4 || s->alibi_param ||
           s->sink_kind % 4 || s->sink_param || s->mask || s->mask_layout || s->mask_class % 8 || s->mask_param ||
           s->mask_special || s->poison || s->invalid >= FZ_N_INVALID_PLAIN;
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
    i = wr8(out, cap, i, s->invalid < 0 || s->invalid >= FZ_N_INVALID_PLAIN ? 0 : FZ_INVALID_BASE + (unsigned)s->invalid);
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
            s->invalid >= FZ_N_INVALID_PLAIN ? 1 + (unsigned)(s->invalid - FZ_N_INVALID_PLAIN) % FZ_N_INVALID_VARIANT : 0);
    return i;
}

/* ------------------------------------------------------------------------------------------ */
/* Problem: sizes (shrunk to a work budget), views, values                                       */
/* ------------------------------------------------------------------------------------------ */

/* The oracle and every run cost about rows * kv_len * (head_dim + v_dim) multiply-adds: the
   budget keeps one input to a few milliseconds; kv_len, which decides the split, is kept. */
#define FZ_BUDGET ((size_t)1 << 22)
#define FZ_MARGIN 16 /* sentinel elements before and after every view */

typedef struct view {
    size_t n[3], D;   /* [batch][head][token], D contiguous */
    ptrdiff_t st[3];  /* strides, elements */
    ptrdiff_t origin; /* element index of [0][0][0][0] in buf */
    size_t n_elems, es;
    sdpa_dtype dt;
    unsigned char *buf;
} view;

/* A view's origin and buffer length from its counts, row length D and strides: the lowest element
   reached lies FZ_MARGIN elements in, and FZ_MARGIN more follow the highest. */
static void view_place(view *v)
{
    ptrdiff_t lo = 0, hi = (ptrdiff_t)v->D - 1;
    for (int a = 0; a < 3; a++) {
        const ptrdiff_t reach = (ptrdiff_t)(v->n[a] - 1) * v->st[a];
        if (reach < 0) lo += reach;
        else hi += reach;
    }
    v->origin = FZ_MARGIN - lo;
    v->n_elems = (size_t)(hi - lo + 1) + 2 * FZ_MARGIN;
}

/* Lays out a view from a selector byte: bits 0-1 the axis order (innermost first: token, head,
   batch / head, token, batch / token, batch, head / batch, token, head), bits 2-4 a negative
   stride for token, head, batch, bits 5-6 padding of 0, 1, 3 or 8 elements after each step,
   bit 7 (inputs only) broadcast: a zero stride for batch and for each axis whose sign bit is set. */
static void view_layout(view *v, size_t B, size_t H, size_t T, size_t D, sdpa_dtype dt, uint8_t sel, bool may_broadcast)
{
    static const int orders[4][3] = {{2, 1, 0}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}}; /* axes 0 b, 1 h, 2 t */
    static const size_t pads[4] = {0, 1, 3, 8};
    memset(v, 0, sizeof *v);
    v->n[0] = B, v->n[1] = H, v->n[2] = T, v->D = D, v->dt = dt;
    v->es = dt == SDPA_F32 ? 4 : 2;
    const unsigned signs = (sel >> 2) & 7; /* bit 0 token, bit 1 head, bit 2 batch */
    const bool bcast = may_broadcast && (sel & 0x80);
    const size_t pad = pads[(sel >> 5) & 3];
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
    view_place(v);
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

static void view_alloc(view *v, size_t min_elems)
{
    if (v->n_elems < min_elems) v->n_elems = min_elems;
    v->buf = fz_xmalloc(v->n_elems * v->es);
    memset(v->buf, 0, v->n_elems * v->es);
}

static ptrdiff_t view_index(const view *v, size_t b, size_t h, size_t t, size_t c)
{
    return v->origin + (ptrdiff_t)b * v->st[0] + (ptrdiff_t)h * v->st[1] + (ptrdiff_t)t * v->st[2] + (ptrdiff_t)c;
}

static void view_store(view *v, ptrdiff_t i, float x)
{
    if (v->dt == SDPA_F32) memcpy(v->buf + (size_t)i * 4, &x, 4);
    else {
        const uint16_t h = v->dt == SDPA_F16 ? f16_encode(x) : bf16_encode(x);
        memcpy(v->buf + (size_t)i * 2, &h, 2);
    }
}

static float view_load(const view *v, ptrdiff_t i)
{
    if (v->dt == SDPA_F32) {
        float x;
        memcpy(&x, v->buf + (size_t)i * 4, 4);
        return x;
    }
    uint16_t h;
    memcpy(&h, v->buf + (size_t)i * 2, 2);
    return v->dt == SDPA_F16 ? f16_decode(h) : bf16_decode(h);
}

static sdpa_tensor view_tensor(const view *v)
{
    sdpa_tensor t;
    t.data = v->buf + v->origin * (ptrdiff_t)v->es;
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
    case 0: return (float)(2.0 * fz_unit(s) - 1.0);
    case 1: return (float)ldexp(2.0 * fz_unit(s) - 1.0, (int)(param % 64) - 32);
    case 2: return (float)((int)(fz_next(s) % 9) - 4);
    case 3: return 0.0f;
    case 4: {
        const int E = 1 + (int)(param % 60);
        const int e = (int)(fz_next(s) % (uint64_t)(2 * E + 1)) - E;
        const double m = 1.0 + fz_unit(s);
        return (float)((fz_next(s) & 1) ? -ldexp(m, e) : ldexp(m, e));
    }
    case 5: return (float)ldexp(2.0 * fz_unit(s) - 1.0, (int)(param % 12));
    case 6: return 0.5f * (float)((int)(param % 9) - 4);
    default: return (float)fz_unit(s);
    }
}

/* The value an injection writes (README). */
static float inject_value(const fz_inject *in)
{
    const float sign = (in->param & 128) ? -1.0f : 1.0f;
    const unsigned p = in->param & 127;
    switch (in->value & 15) {
    case FZV_NAN: return fz_bits_f32(0x7fc00000u);
    case FZV_PINF: return INFINITY;
    case FZV_NINF: return -INFINITY;
    case FZV_HUGE: return sign * (float)fmin(FLT_MAX, 1e30 * pow((double)FLT_MAX / 1e30, p / 127.0));
    case FZV_DENORMAL: return sign * ldexpf((float)(p + 1), -149);
    case FZV_TINY: return sign * ldexpf(1.0f, -126 + (int)(p % 27));
    case FZV_ZERO: return 0.0f;
    case FZV_NZERO: return -0.0f;
    case FZV_RAW: return fz_bits_f32(in->raw);
    case FZV_POW2: return sign * ldexpf(1.0f, (int)p - 64);
    case FZV_FLTMAX: return sign * FLT_MAX;
    case FZV_NAN_PAYLOAD: return fz_bits_f32(0x7f800000u | (uint32_t)(in->param + 1)); /* signalling */
    case FZV_ONE: return sign;
    case FZV_LARGE: return sign * ldexpf(1.0f, 20 + (int)(p % 40));
    case FZV_NEG_NAN: return fz_bits_f32(0xffc00000u);
    default: return (float)((int)(in->param % 9) - 4);
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
                for (size_t t = t0; t < T && t <= t0 + in->len; t++) view_store(v, view_index(v, b, h, t, c), x);
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
                for (size_t c = 0; c < D; c++) d[((b * H + h) * T + t) * D + c] = view_load(v, view_index(v, b, h, t, c));
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
    case 2: return ldexpf(1.0f, (int)(p % 201) - 100);
    case 3: return -ldexpf(1.0f, (int)(p % 201) - 100);
    case 4: return (float)((1.0 + (p % 1000) / 1000.0) / sqrt((double)D));
    case 5: return (float)(-(0.5 + (p % 1000) / 1000.0) / sqrt((double)D));
    case 6: return 1.0f;
    case 7: return (float)(4.0 * (double)p * 0x1p-32 * ((p & 1) ? -1.0 : 1.0));
    default: return 0.0f;
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
    case 2: return ldexpf(1.0f, (int)(p % 277) - 149);
    case 3: return 1.0f + (float)(p % 1000) / 10.0f;
    case 4: return (float)(p % 1000 + 1) * 0.004f;
    case 5: return fz_bits_f32(1 + p % 0x7fffffu); /* subnormal */
    case 6: return (float)((double)FLT_MAX * (0.5 + (p % 1000) / 2000.0));
    case 7: return ldexpf(1.0f, (int)(p % 41) - 20);
    default: return 0.0f;
    }
}

/* ALiBi slopes [Hq] from their class (README); writes nothing for class 0. The standard ones are
   computed here from their definition, not by sdpa_alibi_slopes. */
static void make_slopes(const fz_spec *s, size_t Hq, float *out)
{
    uint64_t st = ((uint64_t)s->seed << 8) ^ 0x51ed270b27u;
    const unsigned p = s->alibi_param;
    size_t n2 = 1;
    while (n2 * 2 <= Hq) n2 *= 2;
    for (size_t h = 0; h < Hq; h++) {
        const double u = fz_unit(&st);
        switch (s->alibi_kind % 4) {
        case 1: {
            const double mb = 1.0 + p % 16;
            out[h] = (float)(h < n2 ? exp2(-mb * (double)(h + 1) / (double)n2)
                                    : exp2(-mb * (double)(2 * (h - n2) + 1) / (double)(2 * n2)));
            break;
        }
        case 2: out[h] = (float)ldexp(u, (int)(p % 16) - 8); break;
        case 3: {
            const unsigned c = (unsigned)(fz_next(&st) % 6);
            out[h] = c == 0 ? 0.0f : c == 1 ? (float)(-2.0 * u) : c == 2 ? ldexpf(1.0f, (int)(fz_next(&st) % 31))
                   : c == 3 ? 1e-30f : c == 4 ? (float)u : (float)ldexp(1.0 + u, (int)(fz_next(&st) % 100) - 60);
            break;
        }
        default: break;
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
        case 1: out[h] = (float)ldexp(8.0 * u, (int)(p % 6) - 2); break;
        case 2: {
            const unsigned c = (unsigned)(fz_next(&st) % 6);
            out[h] = c == 0 ? -INFINITY : c == 1 ? (float)ldexp(1.0 + u, (int)(fz_next(&st) % 100))
                   : c == 2 ? -(float)ldexp(1.0 + u, (int)(fz_next(&st) % 100)) : c == 3 ? 0.0f
                   : c == 4 ? (float)(80.0 + 20.0 * u) : (float)(4.0 * u);
            break;
        }
        default: out[h] = -INFINITY; break;
        }
    }
}

typedef struct problem {
    size_t B, Hq, Hkv, G, Lq, Lk, D, Dv;
    bool causal;
    float scale;
    view q, k, v, o;
    float *qd, *kd, *vd; /* dense copies of what q, k, v hold */
    size_t lse_elems;    /* lse buffer: FZ_MARGIN sentinels, rows, FZ_MARGIN sentinels */
    float *lse;
    /* the variants */
    size_t window;
    float softcap;
    float *slopes, *sinks; /* [Hq] or NULL */
    bool has_mask;
    view mask;             /* [B][Hq][Lq][Lk] */
    sdpa_tensor mask_t;    /* the view as passed (a refused call may change it) */
    float *maskd;          /* dense copy of what the mask holds */
} problem;

/* The mask's view from its selector (README): bit 0 batch stride 0, bit 1 head stride 0, bits
   2-4 the token stride (kv_len, kv_len + 3, 0, -kv_len, -(kv_len + 8), a positive shift below
   kv_len (rows overlap), its negative, kv_len + 8), bit 5 the head axis inside the batch axis or
   (set) outside it, bits 6-7 negative head and batch strides. */
static void mask_layout(view *v, size_t B, size_t H, size_t T, size_t L, sdpa_dtype dt, uint8_t sel)
{
    memset(v, 0, sizeof *v);
    v->n[0] = B, v->n[1] = H, v->n[2] = T, v->D = L, v->dt = dt;
    v->es = dt == SDPA_F32 ? 4 : 2;
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
    view_place(v);
}

/* Keys [*lo, *hi) that query row i may see by causal and the window (bottom-right aligned). */
static void key_range(const problem *P, size_t i, size_t *lo, size_t *hi)
{
    const long long ip = (long long)i + (long long)P->Lk - (long long)P->Lq, Lk = (long long)P->Lk;
    long long a = 0, b = Lk;
    if (P->causal && ip + 1 < b) b = ip + 1;
    if (P->window) {
        const long long w = (long long)P->window;
        if (ip - w + 1 > a) a = ip - w + 1;
        if (ip + w < b) b = ip + w;
    }
    if (a > Lk) a = Lk;
    if (b < a) b = a;
    *lo = (size_t)a, *hi = (size_t)b;
}

/* One mask entry of class cls (README) at query row position ip, key j. */
static float mask_value(unsigned cls, unsigned p, long long ip, size_t j, uint64_t *st)
{
    const double u = 2.0 * fz_unit(st) - 1.0;
    switch (cls % 8) {
    case 0: return 0.0f;
    case 1: return (float)ldexp(u, (int)(p % 8) - 2);
    case 2: return (fz_next(st) & 255) < p ? -INFINITY : (float)u;
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
        return c == 0 ? -INFINITY : c == 1 ? 0.0f : c == 2 ? (float)(8.0 * u) : (float)(-100.0 * fabs(u));
    }
    }
}

/* Fills the mask view: the class over every entry in order (broadcast entries keep the last
   write), then mask_special's few NaN, +inf, -NaN entries or rows of -inf. */
static void fill_mask(problem *P, const fz_spec *s)
{
    view *m = &P->mask;
    uint64_t st = ((uint64_t)s->seed << 8) ^ 0x3a5c0ffeu;
    for (size_t b = 0; b < P->B; b++)
        for (size_t h = 0; h < P->Hq; h++)
            for (size_t i = 0; i < P->Lq; i++) {
                const long long ip = (long long)i + (long long)P->Lk - (long long)P->Lq;
                for (size_t j = 0; j < P->Lk; j++)
                    view_store(m, view_index(m, b, h, i, j), mask_value(s->mask_class, s->mask_param, ip, j, &st));
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
    key_range(P, i, &lo, &hi);
    if (j < lo || j >= hi) return false;
    return !P->maskd || P->maskd[((b * P->Hq + h) * P->Lq + i) * P->Lk + j] != -INFINITY;
}

/* Writes non-finite K or V rows on keys hidden from rows (README: poison): what (p - 1) & 3 is
   K NaN, V +inf, V NaN, or K -inf with V NaN; where ((p - 1) >> 2) & 3 is keys every row of the
   KV head hides, keys the first row of its first head hides, the last row of its last head, or
   keys some row hides. Needs the dense mask; rewrites the dense K and V. */
static void poison_keys(problem *P, uint8_t poison)
{
    const unsigned what = (poison - 1u) & 3, where = ((poison - 1u) >> 2) & 3;
    for (size_t b = 0; b < P->B; b++)
        for (size_t kh = 0; kh < P->Hkv; kh++)
            for (size_t j = 0; j < P->Lk; j++) {
                bool all = true, any = false;
                for (size_t g = 0; g < P->G; g++)
                    for (size_t i = 0; i < P->Lq; i++) {
                        const bool hid = !row_sees(P, b, kh * P->G + g, i, j);
                        all &= hid, any |= hid;
                    }
                bool hit = where == 0 ? all : where == 3 ? any
                         : where == 1 ? !row_sees(P, b, kh * P->G, 0, j)
                                      : !row_sees(P, b, kh * P->G + P->G - 1, P->Lq - 1, j);
                if (!hit) continue;
                if (what == 0 || what == 3)
                    for (size_t c = 0; c < P->D; c++)
                        view_store(&P->k, view_index(&P->k, b, kh, j, c), what == 0 ? NAN : -INFINITY);
                if (what != 0)
                    for (size_t c = 0; c < P->Dv; c++)
                        view_store(&P->v, view_index(&P->v, b, kh, j, c), what == 1 ? INFINITY : NAN);
            }
}

static void shrink_to_budget(size_t *B, size_t *Hkv, size_t *G, size_t *Lq, size_t Lk, size_t D, size_t Dv)
{
    for (;;) {
        const size_t cost = *B * *Hkv * *G * *Lq * Lk * (D + Dv);
        if (cost <= FZ_BUDGET) return;
        if (*Lq > 1) *Lq = (*Lq + 1) / 2;
        else if (*B > 1) (*B)--;
        else if (*G > 1) (*G)--;
        else if (*Hkv > 1) (*Hkv)--;
        else return; /* one row: at most FZ_MAX_KV_LEN * 2 * FZ_MAX_DIM */
    }
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
 *           < -86: the SIMD exp gives 0 below e^-87) e_j = max(e_j, w_j) + 2^-147 (a subnormal
 *           weight's rounding),
 *     Wp_c = sum_j min(1, w_j e^(2 Delta)) |v_jc| / max(1, L e^(-2 Delta)),  a bound of the
 *           computed sum_j w_j |v_jc| / L, in which the f32 accumulation (n products and sums,
 *           the rescaling by alpha, the division) rounds: the second term; the third is the
 *           absolute rounding of products with subnormal values.
 * For well-conditioned rows (Delta << 1) this is about 2 Delta sum_j w_j |v_jc - ref_c| / L: a
 * relative error of 1e-3 to 1e-4 of the weighted |v| fails. It is never looser than the
 * brief's Vmax (C 2^-24 (d + n + 16)(1 + S) + n 2^-125) form for such rows, and stays exact for
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
 * scores are softcap(scale q.k) - slope |i' - j| + mask, and a sink is a key of value 0. Each
 * key's score error delta_j is then its own (the dot product's Delta, through softcap's
 * condition and tanh bound, plus one rounding per addition), and 2 Delta above becomes
 * delta_j + delta_M, delta_M bounding the error of the computed maximum; the shift cancels.
 */
#define FZ_C 8.0

enum { ROW_VALUE = 0, ROW_NAN, ROW_ZERO, ROW_SKIP };
enum { COL_FINITE = 0, COL_NONFINITE = 1, COL_MAY_NONFINITE = 2 };

typedef struct oracle {
    unsigned char *row_kind; /* [rows] */
    double *lse_ref, *lse_tol; /* [rows] */
    double *ref, *tol;         /* [rows * Dv] */
    unsigned char *col;        /* [rows * Dv] COL_* */
} oracle;

/* Keys row i may see by causal and the window (the mask may hide some of them). */
static size_t visible(const problem *P, size_t i)
{
    size_t lo, hi;
    key_range(P, i, &lo, &hi);
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
   gives the final score fin. */
static double score_error(double raw, double e0, double c, double sc, bool alibi, double a, bool masked, double fin)
{
    double e = e0;
    if (c > 0) {
        const double ut = tanh_ulp();
        if (isinf(raw)) e = c * 0x1p-22 * (1.0 + ut) + 0x1p-148;
        else {
            const double x = raw / c;
            /* raw / c as raw * (1 / c): two roundings, and 1 / c loses bits when subnormal */
            const double rel = 0x1p-23 + (c > 0x1p125 ? c * 0x1p-149 : 0.0);
            const double dx = e0 / c + fabs(x) * rel + 0x1p-149;
            const double x0 = fabs(x) > dx ? fabs(x) - dx : 0.0;
            const double ch = cosh(x0), sech2 = isinf(ch) ? 0.0 : 1.0 / (ch * ch);
            const double y = fmin(1.0, fabs(x) + dx);
            /* c tanh moves by at most c sech^2 dx over the argument's error, and stays in [-c, c] */
            e = fmin(2.0 * c, c * dx * sech2) + c * ut * (0x1p-23 * y + 0x1p-149) + 0x1p-24 * c * y + 0x1p-149;
        }
    }
    if (alibi) e = e * (1.0 + 0x1p-23) + 0x1p-23 * (fabs(a) + fabs(sc + a)) + 0x1p-148;
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
    double *sq = fz_xmalloc(D * sizeof(double));
    double *rs = fz_xmalloc(Lk * sizeof(double));
    size_t *seen = fz_xmalloc(Lk * sizeof(size_t));
    for (size_t b = 0; b < P->B; b++)
        for (size_t h = 0; h < P->Hq; h++) {
            const size_t hk = h / P->G;
            const double sink = P->sinks ? (double)P->sinks[h] : -INFINITY;
            for (size_t i = 0; i < P->Lq; i++) {
                const size_t row = (b * P->Hq + h) * P->Lq + i;
                const long long ip = (long long)i + (long long)Lk - (long long)P->Lq;
                const float *q = P->qd + row * D;
                const float *mrow = P->maskd ? P->maskd + row * Lk : NULL;
                double *ref = O->ref + row * Dv, *tol = O->tol + row * Dv;
                unsigned char *col = O->col + row * Dv;
                memset(col, COL_FINITE, Dv);
                for (size_t c = 0; c < Dv; c++) ref[c] = tol[c] = 0.0;
                O->lse_ref[row] = sink; /* what a row that sees nothing gives */
                O->lse_tol[row] = 0.0;
                size_t lo, hi, n = 0;
                key_range(P, i, &lo, &hi);
                for (size_t j = lo; j < hi; j++)
                    if (!mrow || mrow[j] != -INFINITY) seen[n++] = j;
                if (n == 0) {
                    O->row_kind[row] = ROW_ZERO;
                    continue;
                }
                double M = 0; /* max |scale q_c| over the finite q_c */
                bool q_inf = false;
                for (size_t c = 0; c < D; c++) {
                    sq[c] = scale * q[c];
                    if (isfinite(q[c]) && fabs(sq[c]) > M) M = fabs(sq[c]);
                    if (isinf(q[c])) q_inf = true;
                }
                /* an infinite q_c leaves nothing to normalise by: scale q is then formed plainly */
                const bool in_range = q_inf ? M <= 0x1p127 : M == 0 || (M >= 0x1p-252 && M < 0x1p255);
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
                        if (isfinite(q[c]) && q[c] != 0.0f && fabs(sq[c]) * f < 0x1p-126) fragile = true;
                }
                bool nan = false, beyond = false;
                double S = 0, smax = 0; /* smax: the largest finite raw score (beyond float: unchecked) */
                for (size_t x = 0; x < n; x++) {
                    const size_t j = seen[x];
                    const float *k = P->kd + ((b * P->Hkv + hk) * Lk + j) * D;
                    double acc = 0, mag = 0;
                    for (size_t c = 0; c < D; c++) {
                        const double t = (double)q[c] * (double)k[c];
                        acc += t;
                        if (isfinite(t)) mag += fabs(t);
                        if (isinf(k[c]) && isfinite(q[c]) && q[c] != 0.0f && fabs(sq[c]) * f < 0x1p-148)
                            fragile = true;
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
                    if (mrow) t += mrow[j];
                    s[x] = t;
                    if (isnan(t) || t == INFINITY) nan = true;
                }
                if (nan) {
                    O->row_kind[row] = ROW_NAN;
                    continue;
                }
                if (!in_range || S * f > 0x1p126 || smax > 0x1p127 || fragile || beyond) {
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
                const double delta = FZ_C * 0x1p-24 * ((double)D + 16.0) * (1.0 + S);
                bool bad_bound = false;
                for (size_t x = 0; x < n; x++) {
                    dl[x] = s[x] == -INFINITY ? 0.0
                          : score_error(rs[x], delta, cap, wm[x], P->slopes != NULL, dl[x], mrow != NULL, s[x]);
                    if (!isfinite(dl[x]) || fabs(s[x]) + dl[x] >= FLT_MAX) bad_bound = true;
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
                    /* the SIMD exp gives 0 below e^-87 of the keys' maximum */
                    if (s[x] - m - Dx < -86.0) e[x] = fmax(e[x], w[x]) + 0x1p-147;
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
                /* the keys' weights times e^(m - sink) may be subnormal: absolute rounding of acc */
                const bool tiny_keys = sink != -INFINITY && sink - m + dmu > 80.0;
                const double Lden = fmax(1.0, Lmin);
                O->lse_ref[row] = Mx + log(L);
                O->lse_tol[row] = fmax(log(Lhi / L), log(L / Llo)) + 2 * dmu +
                                  FZ_C * 0x1p-24 * ((double)n + 16.0 + fabs(O->lse_ref[row]));
                for (size_t c = 0; c < Dv; c++) {
                    double acc = 0, vsum = 0, wpv = 0, accm = 0;
                    bool nonfinite = false, zero_weight_nonfinite = false;
                    for (size_t x = 0; x < n; x++) {
                        const double vv = P->vd[((b * P->Hkv + hk) * Lk + seen[x]) * Dv + c];
                        if (s[x] == -INFINITY) {
                            if (!isfinite(vv)) zero_weight_nonfinite = true;
                            continue;
                        }
                        if (!isfinite(vv)) {
                            nonfinite = true;
                            continue;
                        }
                        acc += w[x] * vv;
                        vsum += fabs(vv);
                        wpv += wp[x] * fabs(vv);
                        if (tiny_keys) accm += fmin(1.0, exp(s[x] - m + dl[x] + dmu)) * fabs(vv);
                    }
                    if (nonfinite) {
                        col[c] = COL_NONFINITE;
                        continue;
                    }
                    ref[c] = acc / L;
                    double dev = esink * fabs(ref[c]); /* the sink's value is 0 */
                    for (size_t x = 0; x < n; x++) {
                        if (s[x] == -INFINITY) continue;
                        const double vv = P->vd[((b * P->Hkv + hk) * Lk + seen[x]) * Dv + c];
                        dev += e[x] * fabs(vv - ref[c]);
                    }
                    tol[c] = (1 + 0x1p-10) * dev / Lden + FZ_C * 0x1p-24 * ((double)n + 16.0) * (wpv / Lden) +
                             FZ_C * ((double)n + 16.0) * 0x1p-149 + 0x1p-146 * accm;
                    if (zero_weight_nonfinite) col[c] = COL_NONFINITE;
                    else if (vsum > 0x1p126) col[c] = COL_MAY_NONFINITE;
                }
            }
        }
    free(s);
    free(w);
    free(e);
    free(wp);
    free(dl);
    free(wm);
    free(sq);
    free(rs);
    free(seen);
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
static bool same_float(float a, float b) { return fz_f32_bits(a) == fz_f32_bits(b) || (a != a && b != b); }

static void check_result(size_t impl, const char *how, const problem *P, const oracle *O)
{
    const size_t Dv = P->Dv;
    const float *ob = (const float *)(const void *)P->o.buf;
    unsigned char *in_view = fz_xmalloc(P->o.n_elems);
    memset(in_view, 0, P->o.n_elems);
    int reported = 0; /* one message per row kind at most: a wrong row usually is wrong throughout */
    for (size_t b = 0; b < P->B; b++)
        for (size_t h = 0; h < P->Hq; h++)
            for (size_t i = 0; i < P->Lq; i++) {
                const size_t row = (b * P->Hq + h) * P->Lq + i;
                const int kind = O->row_kind[row];
                const float lse = P->lse ? P->lse[FZ_MARGIN + row] : 0.0f;
                bool bad = false;
                for (size_t c = 0; c < Dv; c++) {
                    const ptrdiff_t idx = view_index(&P->o, b, h, i, c);
                    in_view[idx] = 1;
                    const float got = ob[idx];
                    if (bad || kind == ROW_SKIP) continue;
                    if (kind == ROW_NAN) {
                        if (!isnan(got)) {
                            bad = true;
                            if (reported++ < 3)
                                fz_fail(impl, "%s: b=%zu h=%zu i=%zu: a NaN or +inf score is seen, o[%zu]=%.9g, want NaN", how, b,
                                        h, i, c, got);
                        }
                    } else if (kind == ROW_ZERO) {
                        if (got != 0.0f) {
                            bad = true;
                            if (reported++ < 3)
                                fz_fail(impl, "%s: b=%zu h=%zu i=%zu sees no key of score above -inf (%zu keys): o[%zu]=%.9g, want 0",
                                        how, b, h, i, visible(P, i), c, got);
                        }
                    } else {
                        const size_t e = row * Dv + c;
                        if (O->col[e] == COL_NONFINITE) {
                            if (isfinite(got)) {
                                bad = true;
                                if (reported++ < 3)
                                    fz_fail(impl, "%s: b=%zu h=%zu i=%zu: a seen key of finite score has a non-finite v[.][%zu]:"
                                            " o[%zu]=%.9g, want inf or NaN", how, b, h, i, c, c, got);
                            }
                            continue;
                        }
                        if (!isfinite(got) && O->col[e] == COL_MAY_NONFINITE) continue;
                        const double err = fabs((double)got - O->ref[e]);
                        if (isfinite(got) && O->tol[e] > 0 && err / O->tol[e] > fz_counts.worst_ratio)
                            fz_counts.worst_ratio = err / O->tol[e];
                        if (!(err <= O->tol[e])) {
                            bad = true;
                            if (reported++ < 3)
                                fz_fail(impl, "%s: b=%zu h=%zu i=%zu (sees %zu keys): o[%zu]=%.9g, float64 %.9g, |err| %.3g > tol %.3g",
                                        how, b, h, i, visible(P, i), c, got, O->ref[e], err, O->tol[e]);
                        }
                    }
                }
                if (!P->lse || kind == ROW_SKIP || bad) continue;
                if (kind == ROW_NAN && !isnan(lse)) {
                    if (reported++ < 3) fz_fail(impl, "%s: b=%zu h=%zu i=%zu: lse=%.9g, want NaN", how, b, h, i, lse);
                } else if (kind == ROW_ZERO && lse != (float)O->lse_ref[row]) {
                    if (reported++ < 3)
                        fz_fail(impl, "%s: b=%zu h=%zu i=%zu: lse=%.9g, want %.9g (no key: the sink or -inf)", how, b, h, i,
                                lse, O->lse_ref[row]);
                } else if (kind == ROW_VALUE && !(fabs((double)lse - O->lse_ref[row]) <= O->lse_tol[row])) {
                    if (reported++ < 3)
                        fz_fail(impl, "%s: b=%zu h=%zu i=%zu: lse=%.9g, float64 %.9g, tol %.3g", how, b, h, i, lse,
                                O->lse_ref[row], O->lse_tol[row]);
                }
            }
    size_t outside = 0, first = 0;
    for (size_t e = 0; e < P->o.n_elems; e++)
        if (!in_view[e] && fz_f32_bits(ob[e]) != FZ_SENTINEL && outside++ == 0) first = e;
    if (outside)
        fz_fail(impl, "%s: %zu elements of o's buffer outside the view were written (first at element %td of [0][0][0][0])",
                how, outside, (ptrdiff_t)first - P->o.origin);
    if (P->lse) {
        size_t bad = 0;
        for (size_t e = 0; e < P->lse_elems; e++)
            if ((e < FZ_MARGIN || e >= P->lse_elems - FZ_MARGIN) && fz_f32_bits(P->lse[e]) != FZ_SENTINEL) bad++;
        if (bad) fz_fail(impl, "%s: %zu elements around lse were written", how, bad);
    }
    free(in_view);
}

/* ------------------------------------------------------------------------------------------ */
/* Running                                                                                      */
/* ------------------------------------------------------------------------------------------ */
static bench_pool *fz_pools[2]; /* 2 and 3 threads, shuffled claim order, contract checked */

static bench_pool *get_pool(unsigned threads)
{
    bench_pool **slot = &fz_pools[threads == 3 ? 1 : 0];
    if (!*slot) {
        const bench_pool_options o = {.n_threads = threads, .order = BENCH_POOL_SHUFFLE, .check = true,
                                      .seed = 0x5eedf00du + threads};
        *slot = bench_pool_create_opts(&o);
        if (!*slot) {
            fprintf(stderr, "fuzz: cannot create a pool of %u threads\n", threads);
            abort();
        }
    }
    return *slot;
}

typedef struct snapshot {
    void *q, *k, *v, *o, *lse, *mask, *slopes, *sinks;
} snapshot;

static void *dup_bytes(const void *p, size_t n)
{
    void *d = fz_xmalloc(n);
    memcpy(d, p, n);
    return d;
}

static snapshot take_snapshot(const problem *P)
{
    snapshot s;
    s.q = dup_bytes(P->q.buf, P->q.n_elems * P->q.es);
    s.k = dup_bytes(P->k.buf, P->k.n_elems * P->k.es);
    s.v = dup_bytes(P->v.buf, P->v.n_elems * P->v.es);
    s.o = dup_bytes(P->o.buf, P->o.n_elems * 4);
    s.lse = P->lse ? dup_bytes(P->lse, P->lse_elems * 4) : NULL;
    s.mask = P->has_mask ? dup_bytes(P->mask.buf, P->mask.n_elems * P->mask.es) : NULL;
    s.slopes = P->slopes ? dup_bytes(P->slopes, P->Hq * sizeof(float)) : NULL;
    s.sinks = P->sinks ? dup_bytes(P->sinks, P->Hq * sizeof(float)) : NULL;
    return s;
}

static void free_snapshot(snapshot *s)
{
    free(s->q), free(s->k), free(s->v), free(s->o), free(s->lse);
    free(s->mask), free(s->slopes), free(s->sinks);
}

/* Names the buffers that differ from the snapshot (NULL: none). */
static const char *changed(const problem *P, const snapshot *s, bool inputs_only)
{
    if (memcmp(s->q, P->q.buf, P->q.n_elems * P->q.es)) return "q";
    if (memcmp(s->k, P->k.buf, P->k.n_elems * P->k.es)) return "k";
    if (memcmp(s->v, P->v.buf, P->v.n_elems * P->v.es)) return "v";
    if (s->mask && memcmp(s->mask, P->mask.buf, P->mask.n_elems * P->mask.es)) return "mask";
    if (s->slopes && memcmp(s->slopes, P->slopes, P->Hq * sizeof(float))) return "alibi_slopes";
    if (s->sinks && memcmp(s->sinks, P->sinks, P->Hq * sizeof(float))) return "sinks";
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

/* One call of impl on P; workspace mode 1 passes exactly the reported size, 2 half of it. */
static sdpa_status run_call(size_t impl_i, const sdpa_impl *impl, problem *P, const sdpa_params *base, unsigned ws_mode,
                            bench_pool *pool, const char *how)
{
    sdpa_params p = *base;
    if (pool) {
        p.parallel_for = bench_pool_parallel_for;
        p.pool = pool;
        p.n_threads = bench_pool_threads(pool);
    }
    const sdpa_tensor q = view_tensor(&P->q), k = view_tensor(&P->k), v = view_tensor(&P->v), o = view_tensor(&P->o);
    void *ws = NULL;
    if (ws_mode) {
        size_t bytes = 0;
        const sdpa_status s = sdpa_impl_workspace_size(impl, &p, &q, &k, &v, &o, &bytes);
        if (s != SDPA_OK) fz_fail(impl_i, "%s: sdpa_impl_workspace_size: %s", how, sdpa_status_str(s));
        if (ws_mode == 2) bytes /= 2;
        ws = fz_xmalloc(bytes);
        p.workspace = ws;
        p.workspace_bytes = bytes;
    }
    bench_pool_stats before = pool ? bench_pool_get_stats(pool) : (bench_pool_stats){0};
    fz_counts.forward_calls++;
    const sdpa_status s = sdpa_impl_forward(impl, &p, &q, &k, &v, &o);
    if (pool) {
        const bench_pool_stats after = bench_pool_get_stats(pool);
        if (after.bad_thread != before.bad_thread || after.overlaps != before.overlaps || after.miscounts != before.miscounts)
            fz_fail(impl_i, "%s: the pool's contract checks failed (a test harness problem)", how);
    }
    free(ws);
    return s;
}

static void run_valid(size_t impl_i, const sdpa_impl *impl, problem *P, const sdpa_params *base, const fz_spec *spec,
                      const oracle *O)
{
    const snapshot snap = take_snapshot(P);
    char msg[256];
    {
        const sdpa_tensor q = view_tensor(&P->q), k = view_tensor(&P->k), v = view_tensor(&P->v), o = view_tensor(&P->o);
        const sdpa_status s = sdpa_validate(base, &q, &k, &v, &o, msg, sizeof msg);
        if (s != SDPA_OK || strcmp(msg, "ok") != 0) fz_fail(impl_i, "sdpa_validate refused a valid call: %s (%s)", msg, sdpa_status_str(s));
    }
    reset_outputs(P);
    sdpa_status s = run_call(impl_i, impl, P, base, spec->workspace, NULL, "serial");
    if (s != SDPA_OK) {
        fz_fail(impl_i, "serial: a valid call was refused: %s", sdpa_status_str(s));
        free_snapshot((snapshot *)&snap);
        return;
    }
    const char *ch = changed(P, &snap, true);
    if (ch) fz_fail(impl_i, "serial: the input %s was modified", ch);
    check_result(impl_i, "serial", P, O);
    float *o1 = dup_bytes(P->o.buf, P->o.n_elems * 4);
    float *l1 = P->lse ? dup_bytes(P->lse, P->lse_elems * 4) : NULL;
    reset_outputs(P);
    char how[32];
    snprintf(how, sizeof how, "pool of %u", spec->threads);
    s = run_call(impl_i, impl, P, base, spec->workspace, get_pool(spec->threads), how);
    if (s != SDPA_OK) fz_fail(impl_i, "%s: a valid call was refused: %s", how, sdpa_status_str(s));
    else {
        const float *o2 = (const float *)(const void *)P->o.buf;
        for (size_t e = 0; e < P->o.n_elems; e++)
            if (!same_float(o1[e], o2[e])) {
                fz_fail(impl_i, "%s: o differs from the serial run at element %td of [0][0][0][0]: %.9g (0x%08x) vs %.9g (0x%08x)",
                        how, (ptrdiff_t)e - P->o.origin, o2[e], (unsigned)fz_f32_bits(o2[e]), o1[e],
                        (unsigned)fz_f32_bits(o1[e]));
                break;
            }
        for (size_t e = 0; l1 && e < P->lse_elems; e++)
            if (!same_float(l1[e], P->lse[e])) {
                fz_fail(impl_i, "%s: lse differs from the serial run at row %td: %.9g vs %.9g", how, (ptrdiff_t)e - FZ_MARGIN,
                        P->lse[e], l1[e]);
                break;
            }
    }
    free(o1);
    free(l1);
    free_snapshot((snapshot *)&snap);
}

static const char *const invalid_names[FZ_N_INVALID_PLAIN + FZ_N_INVALID_VARIANT] = {
    "batch 0", "q_heads 0", "kv_heads 0", "q_len 0", "kv_len 0", "head_dim 0", "q_heads not a multiple of kv_heads",
    "NaN scale", "+inf scale", "-inf scale", "o overlaps q", "o rows overlap", "lse overlaps o", "q in f16",
    "k of an unknown dtype", "v data NULL", "NaN softcap", "negative softcap", "+inf softcap", "NaN ALiBi slope",
    "infinite ALiBi slope", "NaN sink", "+inf sink", "mask data NULL", "mask overlaps o", "mask of an unknown dtype"};

/* A refused call: kind per README; P was allocated for it (o inside q's buffer for kind 10). */
static void run_invalid(size_t impl_i, const sdpa_impl *impl, problem *P, const sdpa_params *base, int kind)
{
    sdpa_params p = *base;
    sdpa_tensor q = view_tensor(&P->q), k = view_tensor(&P->k), v = view_tensor(&P->v), o = view_tensor(&P->o);
    switch (kind) {
    case 0: p.batch = 0; break;
    case 1: p.q_heads = 0; break;
    case 2: p.kv_heads = 0; break;
    case 3: p.q_len = 0; break;
    case 4: p.kv_len = 0; break;
    case 5: p.head_dim = 0; break;
    case 6:
        if (p.kv_heads >= 2) p.q_heads = p.q_heads - 1;
        else p.q_heads = 1, p.kv_heads = 2;
        break;
    case 7: p.scale = fz_bits_f32(0x7fc00000u); break;
    case 8: p.scale = INFINITY; break;
    case 9: p.scale = -INFINITY; break;
    case 10: /* o placed at q's data, with o's strides: q's buffer was made large enough */
        o.data = P->q.buf + P->o.origin * 4;
        break;
    case 11:
        if (P->Dv >= 2 && P->Lq >= 2) o.token_stride = 1;
        else if (P->Hq >= 2) o.head_stride = 0;
        else if (P->B >= 2) o.batch_stride = 0;
        else p.lse = (float *)o.data; /* a single row cannot overlap itself: lse over o instead */
        break;
    case 12: p.lse = (float *)o.data; break;
    case 13: q.dtype = SDPA_F16; break;
    case 14: k.dtype = (sdpa_dtype)7; break;
    case 15: v.data = NULL; break;
    case 16: p.softcap = fz_bits_f32(0x7fc00000u); break;
    case 17: p.softcap = P->softcap > 0 ? -P->softcap : -1.0f; break;
    case 18: p.softcap = INFINITY; break;
    case 19: case 20: /* one head's slope; the array was allocated for these kinds */
        P->slopes[P->Hq - 1] = kind == 19 ? fz_bits_f32(0x7fc00000u) : -INFINITY;
        p.alibi_slopes = P->slopes;
        break;
    case 21: case 22:
        P->sinks[0] = kind == 21 ? fz_bits_f32(0x7fc00000u) : INFINITY;
        p.sinks = P->sinks;
        break;
    case 23: P->mask_t.data = NULL; p.mask = &P->mask_t; break;
    case 24: /* the mask over o's buffer, which was made large enough */
        P->mask_t.data = P->o.buf + P->o.origin * 4;
        P->mask_t.dtype = SDPA_F32;
        P->mask_t.batch_stride = P->o.st[0], P->mask_t.head_stride = P->o.st[1], P->mask_t.token_stride = P->o.st[2];
        p.mask = &P->mask_t;
        break;
    default: P->mask_t.dtype = (sdpa_dtype)7; p.mask = &P->mask_t; break;
    }
    reset_outputs(P);
    const snapshot snap = take_snapshot(P);
    char msg[256] = "";
    const sdpa_status sv = sdpa_validate(&p, &q, &k, &v, &o, msg, sizeof msg);
    fz_counts.forward_calls++;
    const sdpa_status s = sdpa_impl_forward(impl, &p, &q, &k, &v, &o);
    if (s == SDPA_OK) fz_fail(impl_i, "invalid call (%s) accepted", invalid_names[kind]);
    if (sv != s)
        fz_fail(impl_i, "invalid call (%s): sdpa_validate says %s, sdpa_impl_forward %s", invalid_names[kind],
                sdpa_status_str(sv), sdpa_status_str(s));
    if (msg[0] == 0 || strcmp(msg, "ok") == 0)
        fz_fail(impl_i, "invalid call (%s): sdpa_validate's message is \"%s\"", invalid_names[kind], msg);
    const char *ch = changed(P, &snap, false);
    if (ch) fz_fail(impl_i, "invalid call (%s, refused: %s): %s was written", invalid_names[kind], sdpa_status_str(s), ch);
    size_t bytes = 0;
    const sdpa_status sw = sdpa_impl_workspace_size(impl, &p, &q, &k, &v, &o, &bytes);
    if (sw != sv)
        fz_fail(impl_i, "invalid call (%s): sdpa_impl_workspace_size says %s, sdpa_validate %s", invalid_names[kind],
                sdpa_status_str(sw), sdpa_status_str(sv));
    free_snapshot((snapshot *)&snap);
}

/* Would the planner split this call into KV chunks (its public tunables, for the counts only)? */
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
    return (P->Lq + qb - 1) / qb == 1 && P->Lk >= split_min;
}

static void problem_free(problem *P)
{
    free(P->q.buf), free(P->k.buf), free(P->v.buf), free(P->o.buf);
    free(P->qd), free(P->kd), free(P->vd), free(P->lse);
    free(P->slopes), free(P->sinks), free(P->mask.buf), free(P->maskd);
}

int sdpa_fuzz_one(const uint8_t *data, size_t size)
{
    fz_spec spec;
    fz_decode(data, size, &spec);
    fz_failed = 0;
    fz_log_lines = 0;
    fz_counts.inputs++;

    problem P;
    memset(&P, 0, sizeof P);
    size_t B = spec.batch, Hkv = spec.kv_heads, G = spec.group, Lq = spec.q_len;
    const size_t Lk = spec.kv_len, D = spec.head_dim, Dv = spec.v_dim ? spec.v_dim : spec.head_dim;
    shrink_to_budget(&B, &Hkv, &G, &Lq, Lk, D, Dv);
    P.B = B, P.Hkv = Hkv, P.G = G, P.Hq = Hkv * G, P.Lq = Lq, P.Lk = Lk, P.D = D, P.Dv = Dv;
    P.causal = spec.causal;

    P.scale = decode_scale(&spec, D);
    const int invalid = spec.invalid;
    P.window = spec.window;
    P.softcap = decode_softcap(&spec);
    if (spec.alibi_kind % 4 || invalid == 19 || invalid == 20) {
        P.slopes = fz_xmalloc(Hkv * G * sizeof(float));
        for (size_t h = 0; h < Hkv * G; h++) P.slopes[h] = 0.0f;
        make_slopes(&spec, Hkv * G, P.slopes);
    }
    if (spec.sink_kind % 4 || invalid == 21 || invalid == 22) {
        P.sinks = fz_xmalloc(Hkv * G * sizeof(float));
        make_sinks(&spec, Hkv * G, P.sinks);
    }
    P.has_mask = spec.mask || (invalid >= 23 && invalid <= 25);

    view_layout(&P.q, B, P.Hq, Lq, D, SDPA_F32, spec.layout[0], true);
    view_layout(&P.k, B, Hkv, Lk, D, (sdpa_dtype)spec.k_dtype, spec.layout[1], true);
    view_layout(&P.v, B, Hkv, Lk, Dv, (sdpa_dtype)spec.v_dtype, spec.layout[2], true);
    view_layout(&P.o, B, P.Hq, Lq, Dv, SDPA_F32, spec.layout[3], false);
    view_alloc(&P.q, invalid == 10 ? P.o.n_elems : 0);
    view_alloc(&P.k, 0);
    view_alloc(&P.v, 0);
    size_t o_min = 0;
    if (invalid == 24) { /* room for a mask of o's strides and kv_len elements a row */
        o_min = (size_t)P.o.origin + Lk + FZ_MARGIN;
        for (int a = 0; a < 3; a++)
            if (P.o.st[a] > 0) o_min += (P.o.n[a] - 1) * (size_t)P.o.st[a];
    }
    view_alloc(&P.o, o_min);
    if (P.has_mask) {
        mask_layout(&P.mask, B, P.Hq, Lq, Lk, (sdpa_dtype)((spec.mask ? spec.mask - 1u : 0u) % 3), spec.mask_layout);
        view_alloc(&P.mask, 0);
        P.mask_t = view_tensor(&P.mask);
    }
    const size_t rows = B * P.Hq * Lq;
    if (spec.lse || invalid == 11 || invalid == 12) {
        P.lse_elems = rows + 2 * FZ_MARGIN;
        P.lse = fz_xmalloc(P.lse_elems * sizeof(float));
    }

    view *in[3] = {&P.q, &P.k, &P.v};
    for (int t = 0; t < 3; t++) {
        view *x = in[t];
        uint64_t st = ((uint64_t)spec.seed << 8) ^ (uint64_t)(t + 1) * 0x9e3779b97f4a7c15u;
        for (size_t b = 0; b < x->n[0]; b++)
            for (size_t h = 0; h < x->n[1]; h++)
                for (size_t j = 0; j < x->n[2]; j++)
                    for (size_t c = 0; c < x->D; c++)
                        view_store(x, view_index(x, b, h, j, c), fill_value(spec.fill[t], spec.fill_param[t], &st));
    }
    for (unsigned i = 0; i < spec.n_inject; i++) apply_inject(in[spec.inject[i].tensor % 3], &spec.inject[i]);
    if (P.has_mask) {
        fill_mask(&P, &spec);
        P.maskd = view_dense(&P.mask);
    }
    if (spec.poison) poison_keys(&P, spec.poison);

    sdpa_params base;
    memset(&base, 0, sizeof base);
    base.batch = B, base.q_heads = P.Hq, base.kv_heads = Hkv, base.q_len = Lq, base.kv_len = Lk, base.head_dim = D;
    base.v_dim = spec.v_dim ? Dv : 0;
    base.scale = P.scale;
    base.causal = P.causal;
    base.lse = P.lse ? P.lse + FZ_MARGIN : NULL;
    base.window = P.window;
    base.softcap = P.softcap;
    base.alibi_slopes = P.slopes;
    base.sinks = P.sinks;
    base.mask = P.has_mask ? &P.mask_t : NULL;

    oracle O;
    memset(&O, 0, sizeof O);
    if (invalid < 0) {
        fz_counts.valid_calls++;
        if (planner_splits(&P)) fz_counts.split_calls++;
        P.qd = view_dense(&P.q);
        P.kd = view_dense(&P.k);
        P.vd = view_dense(&P.v);
        oracle_run(&P, &O);
        for (size_t r = 0; r < rows; r++) {
            const int kd = O.row_kind[r];
            if (kd == ROW_VALUE) fz_counts.rows_value++;
            else if (kd == ROW_NAN) fz_counts.rows_nan++;
            else if (kd == ROW_ZERO) fz_counts.rows_zero++;
            else fz_counts.rows_unchecked++;
        }
    } else {
        fz_counts.invalid_calls++;
    }

    const size_t n_impl = sdpa_impl_count();
    for (size_t i = 0; i < n_impl && i < SDPA_FUZZ_MAX_IMPLS; i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (!sdpa_impl_supported(impl)) continue;
        if (invalid < 0) run_valid(i, impl, &P, &base, &spec, &O);
        else run_invalid(i, impl, &P, &base, invalid);
    }
    if (invalid < 0) oracle_free(&O);
    problem_free(&P);
    return fz_failed;
}

static const char *const value_names[16] = {"NaN", "+inf", "-inf", "huge", "denormal", "tiny", "0", "-0", "raw", "2^k",
                                            "FLT_MAX", "sNaN", "+-1", "large", "-NaN", "small int"};
static const char *const shape_names[4] = {"element", "row", "rows", "column"};

void sdpa_fuzz_describe(const uint8_t *data, size_t size, FILE *f)
{
    fz_spec s;
    fz_decode(data, size, &s);
    size_t B = s.batch, Hkv = s.kv_heads, G = s.group, Lq = s.q_len;
    const size_t Lk = s.kv_len, D = s.head_dim, Dv = s.v_dim ? s.v_dim : s.head_dim;
    shrink_to_budget(&B, &Hkv, &G, &Lq, Lk, D, Dv);
    static const char *const dt[3] = {"f32", "f16", "bf16"};
    fprintf(f, "batch %zu, heads %zu/%zu, q_len %zu, kv_len %zu, head_dim %zu, v_dim %zu%s, k %s, v %s, scale %.9g%s%s\n", B,
            Hkv * G, Hkv, Lq, Lk, D, Dv, s.v_dim ? "" : " (0)", dt[s.k_dtype % 3], dt[s.v_dtype % 3],
            (double)decode_scale(&s, D), s.causal ? ", causal" : "", s.lse ? ", lse" : "");
    const char *tn[4] = {"q", "k", "v", "o"};
    const size_t H[4] = {Hkv * G, Hkv, Hkv, Hkv * G}, T[4] = {Lq, Lk, Lk, Lq}, W[4] = {D, D, Dv, Dv};
    for (int t = 0; t < 4; t++) {
        view v;
        view_layout(&v, B, H[t], T[t], W[t], SDPA_F32, s.layout[t], t < 3);
        fprintf(f, "  %s: strides (%td, %td, %td)", tn[t], v.st[0], v.st[1], v.st[2]);
        if (t < 3) fprintf(f, ", fill class %u param %u", s.fill[t], s.fill_param[t]);
        fputc('\n', f);
    }
    fprintf(f, "  workspace mode %u, pool of %u threads, seed %u%s\n", s.workspace, s.threads, (unsigned)s.seed,
            s.invalid >= 0 ? ", REFUSED CALL" : "");
    if (s.invalid >= 0)
        fprintf(f, "  refused call kind %d: %s\n", s.invalid,
                invalid_names[s.invalid % (FZ_N_INVALID_PLAIN + FZ_N_INVALID_VARIANT)]);
    if (s.window) fprintf(f, "  window %u\n", s.window);
    if (s.softcap_kind) fprintf(f, "  softcap %.9g (class %u)\n", (double)decode_softcap(&s), s.softcap_kind);
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
    free(arr);
    if (s.mask) {
        view v;
        mask_layout(&v, B, Hq, Lq, Lk, (sdpa_dtype)((s.mask - 1u) % 3), s.mask_layout);
        fprintf(f, "  mask %s, strides (%td, %td, %td), class %u param %u, special %u\n", dt[(s.mask - 1u) % 3], v.st[0],
                v.st[1], v.st[2], s.mask_class, s.mask_param, s.mask_special);
    }
    if (s.poison) {
        static const char *const what[4] = {"K NaN", "V +inf", "V NaN", "K -inf, V NaN"};
        static const char *const where[4] = {"hidden from every row", "hidden from the first row",
                                             "hidden from the last row", "hidden from some row"};
        fprintf(f, "  poison: %s on keys %s\n", what[(s.poison - 1u) & 3], where[((s.poison - 1u) >> 2) & 3]);
    }
    for (unsigned i = 0; i < s.n_inject; i++) {
        const fz_inject *in = &s.inject[i];
        fprintf(f, "  inject %s %s idx %u len %u: %s (%.9g)\n", tn[in->tensor % 3], shape_names[in->shape & 3],
                (unsigned)in->idx, (unsigned)in->len, value_names[in->value & 15], (double)inject_value(in));
    }
}
