/* quant.c -- storage-type sizes and the block formats' conversions of the public API */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "convert.h"
#include "sdpa.h"

size_t sdpa_dtype_block(sdpa_dtype t) { return sdpa_block_elems(t); }
size_t sdpa_dtype_size(sdpa_dtype t) { return sdpa_block_bytes(t); }

const char *sdpa_dtype_name(sdpa_dtype t)
{
    const char *s = sdpa_dtype_str(t);
    return s ? s : "unknown";
}

size_t sdpa_dtype_bytes(sdpa_dtype t, size_t n)
{
    const size_t be = sdpa_block_elems(t), bb = sdpa_block_bytes(t);
    size_t r;
    if (be == 0 || n % be != 0 || __builtin_mul_overflow(n / be, bb, &r)) return 0;
    return r;
}

/* Whether every x[i] is finite (the quantizers refuse anything else). */
static bool finite_all(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* 1 / d, or 0 where d is 0 (ggml's id = d ? 1 / d : 0); may be inf (d below 2^-128). */
static float recip(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

/* x converted to an integer as ggml's (int8_t) cast of a float does on x86: truncated, and
   0 for inf and NaN (cvttss2si's 0x80000000, whose low byte is 0). Only values in [-1, 32]
   reach it otherwise. */
static int trunc_x86(float x) { return isfinite(x) ? (int)x : 0; }

/* The element of largest magnitude, the first one on a tie (signed). */
static float signed_amax(const float *x)
{
    float amax = 0.0f, m = 0.0f;
    for (size_t i = 0; i < SDPA_QK; i++)
        if (amax < fabsf(x[i])) amax = fabsf(x[i]), m = x[i];
    return m;
}

static void put_f16(unsigned char *p, float v)
{
    const uint16_t h = sdpa_f32_to_f16(v);
    p[0] = (unsigned char)(h & 0xff), p[1] = (unsigned char)(h >> 8);
}
static bool f16_overflows(float v) { return (sdpa_f32_to_f16(v) & 0x7c00u) == 0x7c00u; }

/* The nibbles (low 4 bits of n[i]) and, with qh, the 5th bits of 32 integers into a block's
   qs (16 bytes) and qh (4 bytes, little-endian, bit i element i). */
static void pack_nibbles(const int *n, unsigned char *qs, unsigned char *qh)
{
    uint32_t h = 0;
    for (size_t i = 0; i < SDPA_QK / 2; i++)
        qs[i] = (unsigned char)((n[i] & 15) | (n[i + SDPA_QK / 2] & 15) << 4);
    for (size_t i = 0; i < SDPA_QK; i++) h |= (uint32_t)((n[i] >> 4) & 1) << i;
    if (qh)
        for (size_t i = 0; i < 4; i++) qh[i] = (unsigned char)(h >> (8 * i));
}

/* One block's scale (and minimum) as the quantizer of type t computes them: what the f16
   overflow check and the packing both use. */
typedef struct qscale {
    float d, m;
} qscale;

/* iq4_nl: the index of the table value nearest v, the upper one on a tie (ggml's
   best_index_int8). */
static int iq4nl_index(float v)
{
    const int8_t *t = sdpa_iq4nl_values;
    if (v <= t[0]) return 0;
    if (v >= t[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < t[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - t[hi - 1] < t[hi] - v ? hi - 1 : hi;
}

/* iq4_nl's scale: nearest table values for the scale m / -127, then the least-squares scale
   with weights x^2 (n receives the indices); d = 0 for a block below 1e-15. */
static float iq4nl_scale(const float *x, int *n)
{
    float amax = 0.0f, mx = 0.0f;
    for (size_t i = 0; i < SDPA_QK; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), mx = x[i];
    if (amax < 1e-15f) {
        for (size_t i = 0; i < SDPA_QK; i++) n[i] = 0;
        return 0.0f;
    }
    const float id = 1.0f / (mx / (float)sdpa_iq4nl_values[0]);
    float sumqx = 0.0f, sumq2 = 0.0f;
    for (size_t i = 0; i < SDPA_QK; i++) {
        n[i] = iq4nl_index(id * x[i]);
        const float q = (float)sdpa_iq4nl_values[n[i]], w = x[i] * x[i];
        sumqx += w * q * x[i];
        sumq2 += w * q * q;
    }
    return sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
}

/* One block of x into type t's integers n[32] (before packing) and scale: ggml's reference
   quantizers, see sdpa.h. */
static qscale quantize_block(sdpa_dtype t, const float *x, int *n)
{
    qscale s = {0.0f, 0.0f};
    if (t == SDPA_IQ4_NL) {
        s.d = iq4nl_scale(x, n);
        return s;
    }
    if (t == SDPA_Q8_0) {
        float amax = 0.0f;
        for (size_t i = 0; i < SDPA_QK; i++) amax = fmaxf(amax, fabsf(x[i]));
        s.d = amax / 127.0f;
        const float id = recip(s.d);
        /* 1 / d overflows only where d (below 2^-128) is stored as an f16 0: quants 0 then */
        for (size_t i = 0; i < SDPA_QK; i++) n[i] = isfinite(id) ? (int)roundf(x[i] * id) : 0;
        return s;
    }
    if (t == SDPA_Q4_0 || t == SDPA_Q5_0) {
        const int top = t == SDPA_Q4_0 ? 15 : 31;
        const float half = t == SDPA_Q4_0 ? 8.5f : 16.5f;
        s.d = signed_amax(x) / (t == SDPA_Q4_0 ? -8.0f : -16.0f);
        const float id = recip(s.d);
        for (size_t i = 0; i < SDPA_QK; i++) {
            const int v = isfinite(id) ? trunc_x86(x[i] * id + half) : 0;
            n[i] = v < top ? v : top;
        }
        return s;
    }
    /* q4_1, q5_1 */
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (size_t i = 0; i < SDPA_QK; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    const int top = t == SDPA_Q4_1 ? 15 : 31;
    s.d = (hi - lo) / (float)top;
    s.m = lo;
    const float id = recip(s.d);
    for (size_t i = 0; i < SDPA_QK; i++) {
        const int v = trunc_x86((x[i] - lo) * id + 0.5f);
        n[i] = t == SDPA_Q4_1 && v > 15 ? 15 : v; /* q5_1's cast has no clamp: v <= 31 there */
    }
    return s;
}

/* The header bytes (d, m, qh) and where the nibbles or bytes start, per type. */
static void pack_block(sdpa_dtype t, const qscale *s, const int *n, unsigned char *y)
{
    put_f16(y, s->d);
    switch (t) {
    case SDPA_Q8_0:
        for (size_t i = 0; i < SDPA_QK; i++) y[2 + i] = (unsigned char)(int8_t)n[i];
        break;
    case SDPA_Q4_0:
    case SDPA_IQ4_NL:
        pack_nibbles(n, y + 2, NULL);
        break;
    case SDPA_Q4_1:
        put_f16(y + 2, s->m), pack_nibbles(n, y + 4, NULL);
        break;
    case SDPA_Q5_0:
        pack_nibbles(n, y + 6, y + 2);
        break;
    case SDPA_Q5_1:
        put_f16(y + 2, s->m), pack_nibbles(n, y + 8, y + 4);
        break;
    default:
        break;
    }
}

sdpa_status sdpa_quantize(sdpa_dtype t, const float *x, size_t n, void *dst)
{
    if (!sdpa_dtype_quantized(t) || !x || !dst || n % SDPA_QK != 0 || !finite_all(x, n))
        return SDPA_ERR_INVALID_ARGUMENT;
    int q[SDPA_QK];
    /* every scale and minimum must fit f16 before anything is written */
    for (size_t b = 0; b < n; b += SDPA_QK) {
        const qscale s = quantize_block(t, x + b, q);
        if (f16_overflows(s.d) || f16_overflows(s.m)) return SDPA_ERR_INVALID_ARGUMENT;
    }
    unsigned char *y = dst;
    const size_t bb = sdpa_block_bytes(t);
    for (size_t b = 0; b < n; b += SDPA_QK, y += bb) {
        const qscale s = quantize_block(t, x + b, q);
        pack_block(t, &s, q, y);
    }
    return SDPA_OK;
}

sdpa_status sdpa_dequantize(sdpa_dtype t, const void *src, size_t n, float *y)
{
    if (!sdpa_dtype_quantized(t) || !src || !y || n % SDPA_QK != 0)
        return SDPA_ERR_INVALID_ARGUMENT;
    const size_t bb = sdpa_block_bytes(t);
    for (size_t b = 0; b < n / SDPA_QK; b++)
        sdpa_dequant_block(t, (const char *)src + b * bb, y + b * SDPA_QK);
    return SDPA_OK;
}

#define SDPA_QUANT_API(name, type)                                                                 \
    sdpa_status sdpa_quantize_##name(const float *x, size_t n, void *dst)                          \
    {                                                                                              \
        return sdpa_quantize(type, x, n, dst);                                                     \
    }                                                                                              \
    sdpa_status sdpa_dequantize_##name(const void *src, size_t n, float *y)                        \
    {                                                                                              \
        return sdpa_dequantize(type, src, n, y);                                                   \
    }
SDPA_QUANT_API(q8_0, SDPA_Q8_0)
SDPA_QUANT_API(q4_0, SDPA_Q4_0)
SDPA_QUANT_API(q4_1, SDPA_Q4_1)
SDPA_QUANT_API(q5_0, SDPA_Q5_0)
SDPA_QUANT_API(q5_1, SDPA_Q5_1)
SDPA_QUANT_API(iq4_nl, SDPA_IQ4_NL)
