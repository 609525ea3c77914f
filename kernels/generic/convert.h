/* convert.h -- exact scalar f16/bf16 <-> f32 conversions, shared by every implementation and by tests */
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
    if (exp == 0x1fu) {                 /* inf or NaN: keep the payload, quiet stays quiet */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {              /* normal: rebias 15 -> 127 */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {              /* signed zero */
        bits = sign;
    } else {                            /* subnormal: normalise the mantissa */
        uint32_t e = 113u;              /* 127 - 15 + 1 */
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
    if (ax < 0x38800000u) {                                     /* below 2^-14: subnormal */
        if (ax < 0x33000000u) return sign;                      /* below half the least subnormal */
        uint32_t man = (ax & 0x7fffffu) | 0x800000u;
        unsigned shift = 126u - (ax >> 23);                     /* 14..24 */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = ax - 0x38000000u;                              /* rebias 127 -> 15 */
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

/* The storage types (sdpa_dtype). The block formats
   (ggml's block_q8_0 and block_q4_0) hold SDPA_QK elements per block: an f16 scale d, then
   32 signed bytes (x = d q) or 16 bytes of nibbles (element i < 16 the low nibble of byte i,
   element 16 + i its high nibble; x = d (n - 8)). */
#define SDPA_QK 32
enum { SDPA_Q8_0_BYTES = 34, SDPA_Q4_0_BYTES = 18 };

/* Elements per block (1 for the element types), 0 for an unknown type. */
static inline size_t sdpa_block_elems(sdpa_dtype dtype)
{
    switch (dtype) {
    case SDPA_F32: case SDPA_F16: case SDPA_BF16: return 1;
    case SDPA_Q8_0: case SDPA_Q4_0: return SDPA_QK;
    }
    return 0;
}
/* Bytes per block (per element for the element types), 0 for an unknown type. */
static inline size_t sdpa_block_bytes(sdpa_dtype dtype)
{
    switch (dtype) {
    case SDPA_F32: return 4;
    case SDPA_F16: case SDPA_BF16: return 2;
    case SDPA_Q8_0: return SDPA_Q8_0_BYTES;
    case SDPA_Q4_0: return SDPA_Q4_0_BYTES;
    }
    return 0;
}
static inline int sdpa_dtype_quantized(sdpa_dtype dtype)
{
    return dtype == SDPA_Q8_0 || dtype == SDPA_Q4_0;
}
/* The byte offset of element offset off (a multiple of the block: validated for every offset a
   K/V view forms) in a view of this type. */
static inline ptrdiff_t sdpa_off_bytes(sdpa_dtype dtype, ptrdiff_t off)
{
    return sdpa_dtype_quantized(dtype) ? off / SDPA_QK * (ptrdiff_t)sdpa_block_bytes(dtype)
                                       : off * (ptrdiff_t)sdpa_block_bytes(dtype);
}

/* One block of q8_0 or q4_0 at b, exactly to f32: y[i] = d q_i (an f16 times a small integer:
   exact in f32). */
static inline void sdpa_dequant_block(sdpa_dtype dtype, const void *b, float *y)
{
    const unsigned char *p = (const unsigned char *)b;
    const float d = sdpa_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    if (dtype == SDPA_Q8_0) {
        for (int i = 0; i < SDPA_QK; i++) y[i] = d * (float)(int8_t)p[2 + i];
    } else {
        for (int i = 0; i < SDPA_QK / 2; i++) {
            y[i] = d * (float)((int)(p[2 + i] & 15) - 8);
            y[i + SDPA_QK / 2] = d * (float)((int)(p[2 + i] >> 4) - 8);
        }
    }
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
        for (size_t i = 0; i < n / SDPA_QK; i++) sdpa_dequant_block(dtype, s + i * bb, dst + i * SDPA_QK);
    } else {
        const uint16_t *s = (const uint16_t *)src + (ptrdiff_t)j * stride;
        if (dtype == SDPA_F16)
            for (size_t i = 0; i < n; i++) dst[i] = sdpa_f16_to_f32(s[i]);
        else
            for (size_t i = 0; i < n; i++) dst[i] = sdpa_bf16_to_f32(s[i]);
    }
}

#endif /* SDPA_CONVERT_H */
