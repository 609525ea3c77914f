/* quant.c -- storage-type sizes and the q8_0 / q4_0 conversions of the public API */
#include <math.h>
#include <string.h>

#include "convert.h"
#include "sdpa.h"

size_t sdpa_dtype_block(sdpa_dtype t) { return sdpa_block_elems(t); }
size_t sdpa_dtype_size(sdpa_dtype t) { return sdpa_block_bytes(t); }

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

sdpa_status sdpa_quantize_q8_0(const float *x, size_t n, void *dst)
{
    if (!x || !dst || n % SDPA_QK != 0 || !finite_all(x, n)) return SDPA_ERR_INVALID_ARGUMENT;
    /* every scale must fit f16 before anything is written */
    for (size_t b = 0; b < n; b += SDPA_QK) {
        float amax = 0.0f;
        for (size_t i = 0; i < SDPA_QK; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        if ((sdpa_f32_to_f16(amax / 127.0f) & 0x7c00u) == 0x7c00u) return SDPA_ERR_INVALID_ARGUMENT;
    }
    unsigned char *y = dst;
    for (size_t b = 0; b < n; b += SDPA_QK, y += SDPA_Q8_0_BYTES) {
        float amax = 0.0f;
        for (size_t i = 0; i < SDPA_QK; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        const float d = amax / 127.0f, inv = d != 0.0f ? 1.0f / d : 0.0f;
        /* 1 / d overflows only where d (a subnormal below 2^-128) is stored as an f16 0: quants
           0 then, where x * inf would leave the int8 conversion undefined */
        const float id = isfinite(inv) ? inv : 0.0f;
        const uint16_t h = sdpa_f32_to_f16(d);
        y[0] = (unsigned char)(h & 0xff), y[1] = (unsigned char)(h >> 8);
        for (size_t i = 0; i < SDPA_QK; i++)
            y[2 + i] = (unsigned char)(int8_t)roundf(x[b + i] * id);
    }
    return SDPA_OK;
}

sdpa_status sdpa_quantize_q4_0(const float *x, size_t n, void *dst)
{
    if (!x || !dst || n % SDPA_QK != 0 || !finite_all(x, n)) return SDPA_ERR_INVALID_ARGUMENT;
    for (size_t b = 0; b < n; b += SDPA_QK) {
        float amax = 0.0f, m = 0.0f;
        for (size_t i = 0; i < SDPA_QK; i++)
            if (amax < fabsf(x[b + i])) amax = fabsf(x[b + i]), m = x[b + i];
        if ((sdpa_f32_to_f16(m / -8.0f) & 0x7c00u) == 0x7c00u) return SDPA_ERR_INVALID_ARGUMENT;
    }
    unsigned char *y = dst;
    for (size_t b = 0; b < n; b += SDPA_QK, y += SDPA_Q4_0_BYTES) {
        float amax = 0.0f, m = 0.0f;
        for (size_t i = 0; i < SDPA_QK; i++)
            if (amax < fabsf(x[b + i])) amax = fabsf(x[b + i]), m = x[b + i];
        const float d = m / -8.0f, inv = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = sdpa_f32_to_f16(d);
        y[0] = (unsigned char)(h & 0xff), y[1] = (unsigned char)(h >> 8);
        if (!isfinite(inv)) {
            /* d (a subnormal below 2^-128) is stored as an f16 0; ggml's x / d is then inf or
               NaN, which x86's float-to-int conversion makes 0x80000000: every nibble 0 */
            memset(y + 2, 0, SDPA_QK / 2);
            continue;
        }
        const float id = inv;
        for (size_t i = 0; i < SDPA_QK / 2; i++) {
            const int lo = (int)(int8_t)(x[b + i] * id + 8.5f);
            const int hi = (int)(int8_t)(x[b + SDPA_QK / 2 + i] * id + 8.5f);
            y[2 + i] = (unsigned char)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
        }
    }
    return SDPA_OK;
}

static sdpa_status dequantize(sdpa_dtype t, const void *src, size_t n, float *y)
{
    if (!src || !y || n % SDPA_QK != 0) return SDPA_ERR_INVALID_ARGUMENT;
    const size_t bb = sdpa_block_bytes(t);
    for (size_t b = 0; b < n / SDPA_QK; b++)
        sdpa_dequant_block(t, (const char *)src + b * bb, y + b * SDPA_QK);
    return SDPA_OK;
}

sdpa_status sdpa_dequantize_q8_0(const void *src, size_t n, float *y)
{
    return dequantize(SDPA_Q8_0, src, n, y);
}
sdpa_status sdpa_dequantize_q4_0(const void *src, size_t n, float *y)
{
    return dequantize(SDPA_Q4_0, src, n, y);
}
