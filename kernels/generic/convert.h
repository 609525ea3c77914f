/* convert.h -- exact scalar f16/bf16 <-> f32 conversions, shared by every implementation and by
 * tests */
#ifndef SDPA_CONVERT_H
#define SDPA_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sdpa.h"

/* IEEE binary16 -> binary32, exact for every input (subnormals, infinities, NaN payloads). */
static inline float sdpa_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1fu) { /* inf or NaN: keep the payload, quiet stays quiet */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) { /* normal: rebias 15 -> 127 */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) { /* signed zero */
        bits = sign;
    } else {               /* subnormal: normalise the mantissa */
        uint32_t e = 113u; /* 127 - 15 + 1 */
        while ((man & 0x400u) == 0) {
            man <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* bfloat16 -> binary32: the upper half of the float's bits, exact. */
static inline float sdpa_bf16_to_f32(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* binary32 -> binary16, round to nearest even; overflow to inf, NaN stays NaN. */
static inline uint16_t sdpa_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x1ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                   /* below 2^-14: subnormal */
        if (ax < 0x33000000u) return sign;                    /* below half the least subnormal */
        uint32_t man = (ax & 0x7fffffu) | 0x800000u;
        unsigned shift = 126u - (ax >> 23); /* 14..24 */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = ax - 0x38000000u; /* rebias 127 -> 15 */
    uint32_t half = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
    return (uint16_t)(sign | half);
}

/* binary32 -> bfloat16, round to nearest even; NaN stays NaN. */
static inline uint16_t sdpa_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* The storage types (sdpa_dtype). The block formats are ggml's block_q8_0, block_q4_0,
   block_q4_1, block_q5_0, block_q5_1 and block_iq4_nl, SDPA_QK elements per block, each an f16
   scale d first. Every block decodes to 32 integer quants q_i (int8) and x_i = d q_i, or
   x_i = d q_i + m for the two types with an f16 minimum m (q4_1, q5_1); see sdpa_block_quants. */
#define SDPA_QK 32
enum {
    SDPA_Q8_0_BYTES = 34, /* d, 32 int8 quants */
    SDPA_Q4_0_BYTES = 18, /* d, 16 bytes of nibbles (element i low, 16 + i high nibble of byte i) */
    SDPA_Q4_1_BYTES = 20, /* d, m, 16 bytes of nibbles */
    SDPA_Q5_0_BYTES = 22, /* d, 32 high bits (u32 little-endian, bit i element i), nibbles */
    SDPA_Q5_1_BYTES = 24, /* d, m, 32 high bits, nibbles */
    SDPA_IQ4_NL_BYTES = 18 /* d, nibbles indexing sdpa_iq4nl_values */
};

/* iq4_nl's 16 quant values (ggml's kvalues_iq4nl): a nibble n stands for the quant
   sdpa_iq4nl_values[n]. */
static const int8_t sdpa_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

/* Elements per block (1 for the element types), 0 for an unknown type. */
static inline size_t sdpa_block_elems(sdpa_dtype dtype)
{
    switch (dtype) {
    case SDPA_F32:
    case SDPA_F16:
    case SDPA_BF16:
        return 1;
    case SDPA_Q8_0:
    case SDPA_Q4_0:
    case SDPA_Q4_1:
    case SDPA_Q5_0:
    case SDPA_Q5_1:
    case SDPA_IQ4_NL:
        return SDPA_QK;
    }
    return 0;
}
/* The type's name as ggml spells it ("f32", "q4_1", "iq4_nl", ...); NULL for an unknown type. */
static inline const char *sdpa_dtype_str(sdpa_dtype dtype)
{
    switch (dtype) {
    case SDPA_F32:
        return "f32";
    case SDPA_F16:
        return "f16";
    case SDPA_BF16:
        return "bf16";
    case SDPA_Q8_0:
        return "q8_0";
    case SDPA_Q4_0:
        return "q4_0";
    case SDPA_Q4_1:
        return "q4_1";
    case SDPA_Q5_0:
        return "q5_0";
    case SDPA_Q5_1:
        return "q5_1";
    case SDPA_IQ4_NL:
        return "iq4_nl";
    }
    return NULL;
}
/* Bytes per block (per element for the element types), 0 for an unknown type. */
static inline size_t sdpa_block_bytes(sdpa_dtype dtype)
{
    switch (dtype) {
    case SDPA_F32:
        return 4;
    case SDPA_F16:
    case SDPA_BF16:
        return 2;
    case SDPA_Q8_0:
        return SDPA_Q8_0_BYTES;
    case SDPA_Q4_0:
        return SDPA_Q4_0_BYTES;
    case SDPA_Q4_1:
        return SDPA_Q4_1_BYTES;
    case SDPA_Q5_0:
        return SDPA_Q5_0_BYTES;
    case SDPA_Q5_1:
        return SDPA_Q5_1_BYTES;
    case SDPA_IQ4_NL:
        return SDPA_IQ4_NL_BYTES;
    }
    return 0;
}
static inline int sdpa_dtype_quantized(sdpa_dtype dtype)
{
    return sdpa_block_elems(dtype) == SDPA_QK;
}
/* The block formats whose elements are d q + m (an f16 minimum m after d): q4_1 and q5_1. */
static inline int sdpa_dtype_has_min(sdpa_dtype dtype)
{
    return dtype == SDPA_Q4_1 || dtype == SDPA_Q5_1;
}
/* The byte offset of element offset off (a multiple of the block: validated for every offset a
   K/V view forms) in a view of this type. */
static inline ptrdiff_t sdpa_off_bytes(sdpa_dtype dtype, ptrdiff_t off)
{
    return sdpa_dtype_quantized(dtype) ? off / SDPA_QK * (ptrdiff_t)sdpa_block_bytes(dtype)
                                       : off * (ptrdiff_t)sdpa_block_bytes(dtype);
}

/* A little-endian f16 at p, exactly to f32. */
static inline float sdpa_f16_at(const unsigned char *p)
{
    return sdpa_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* One block at b: its scale *d, its minimum *m (0 for the types without one) and its 32
   integer quants q[i] in element order, so that element i is d q[i] (+ m):
     q8_0: the int8 q;          q4_0: n - 8;          q4_1: n (0..15), m;
     q5_0: n - 16, n = nibble + 16 (bit i of qh);      q5_1: n (0..31), m;
     iq4_nl: sdpa_iq4nl_values[nibble]. */
static inline void sdpa_block_quants(sdpa_dtype dtype, const void *blk, int8_t *q, float *d,
                                     float *m)
{
    const unsigned char *p = (const unsigned char *)blk;
    *d = sdpa_f16_at(p);
    *m = 0.0f;
    if (dtype == SDPA_Q8_0) {
        for (int i = 0; i < SDPA_QK; i++) q[i] = (int8_t)p[2 + i];
        return;
    }
    uint32_t qh = 0;
    const unsigned char *qs = p + 2;
    if (dtype == SDPA_Q4_1 || dtype == SDPA_Q5_1) *m = sdpa_f16_at(p + 2), qs += 2;
    if (dtype == SDPA_Q5_0 || dtype == SDPA_Q5_1) {
        qh = (uint32_t)qs[0] | (uint32_t)qs[1] << 8 | (uint32_t)qs[2] << 16 | (uint32_t)qs[3] << 24;
        qs += 4;
    }
    const int bias = dtype == SDPA_Q4_0 ? 8 : dtype == SDPA_Q5_0 ? 16 : 0;
    for (int i = 0; i < SDPA_QK; i++) {
        int n = (i < SDPA_QK / 2 ? qs[i] : qs[i - SDPA_QK / 2] >> 4) & 15;
        n |= (int)((qh >> i) & 1u) << 4;
        q[i] = dtype == SDPA_IQ4_NL ? sdpa_iq4nl_values[n] : (int8_t)(n - bias);
    }
}

/* One block of a block format at b, exactly to f32: y[i] = d q_i, exact (an f16 times an
   integer of at most 8 bits), or for q4_1 and q5_1 y[i] = d q_i + m rounded once to nearest
   even (d q_i is exact, so a fused multiply-add gives the same bits). */
static inline void sdpa_dequant_block(sdpa_dtype dtype, const void *b, float *y)
{
    int8_t q[SDPA_QK];
    float d, m;
    sdpa_block_quants(dtype, b, q, &d, &m);
    if (sdpa_dtype_has_min(dtype))
        for (int i = 0; i < SDPA_QK; i++) y[i] = d * (float)q[i] + m;
    else
        for (int i = 0; i < SDPA_QK; i++) y[i] = d * (float)q[i];
}

/* Row j of a K or V view converted exactly to f32: dst[0..n) = src[j * stride + 0..n) (n and
   stride multiples of SDPA_QK for the block formats). */
static inline void sdpa_row_to_f32(const void *src, sdpa_dtype dtype, ptrdiff_t stride, size_t j,
                                   size_t n, float *dst)
{
    if (dtype == SDPA_F32) {
        const float *s = (const float *)src + (ptrdiff_t)j * stride;
        memcpy(dst, s, n * sizeof *dst);
    } else if (sdpa_dtype_quantized(dtype)) {
        const char *s = (const char *)src + sdpa_off_bytes(dtype, (ptrdiff_t)j * stride);
        const size_t bb = sdpa_block_bytes(dtype);
        for (size_t i = 0; i < n / SDPA_QK; i++)
            sdpa_dequant_block(dtype, s + i * bb, dst + i * SDPA_QK);
    } else {
        const uint16_t *s = (const uint16_t *)src + (ptrdiff_t)j * stride;
        if (dtype == SDPA_F16)
            for (size_t i = 0; i < n; i++) dst[i] = sdpa_f16_to_f32(s[i]);
        else
            for (size_t i = 0; i < n; i++) dst[i] = sdpa_bf16_to_f32(s[i]);
    }
}

#endif /* SDPA_CONVERT_H */
