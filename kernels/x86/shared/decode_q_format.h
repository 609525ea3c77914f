/* decode_q_format.h -- q8_0 / q4_0 format blocks in registers, for decode_q.h */
/*
 * Each format block's f16 scale and its 32 quants (convert.h), converted exactly: a quantized
 * value enters as d * q, exact in f32 (an f16 times an integer of at most 8 bits). 256-bit
 * forms for both ISAs, and 512-bit ones (a format block in two vectors) where the including
 * file is compiled for AVX-512. Below, "block" is a format block.
 * SDPA_QD_VNNI (0 or 1) must be defined: it selects qd_dot's instruction.
 */
#ifndef SDPA_DECODE_Q_FORMAT_H
#define SDPA_DECODE_Q_FORMAT_H

#include <immintrin.h>
#include <string.h>

#include "convert.h"
#include "kernel_util.h"

/* A block's f16 scale at p (little-endian), exactly to f32, in every lane. */
SDPA_INLINE __m256 qd_f16x8(const unsigned char *p)
{
    short h;
    memcpy(&h, p, sizeof h);
    return _mm256_cvtph_ps(_mm_set1_epi16(h));
}

/* The 32 quants of a block as int8, element order (q4_0: nibble - 8). */
SDPA_INLINE __m256i qd_quants32(sdpa_dtype type, const unsigned char *b)
{
    if (type == SDPA_Q8_0) return _mm256_loadu_si256((const __m256i *)(const void *)(b + 2));
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)(b + 2));
    const __m128i m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, m), e);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m), e);
    return _mm256_set_m128i(hi, lo);
}

/* Eight elements from element c of a row of an element type (f32, f16, bf16), exactly to f32;
   n < 8: the first n, the rest 0, nothing read past them. */
SDPA_INLINE __m256 qd_load_float(sdpa_dtype type, const void *row, size_t c, size_t n)
{
    if (n < 8) {
        float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (type == SDPA_F32) memcpy(t, (const float *)row + c, n * sizeof *t);
        else sdpa_row_to_f32((const uint16_t *)row + c, type, 0, 0, n, t);
        return _mm256_loadu_ps(t);
    }
    if (type == SDPA_F32) return _mm256_loadu_ps((const float *)row + c);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + c));
    if (type == SDPA_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Sum of lanes of each of eight vectors: lane i of the result is a[i]'s sum. */
SDPA_INLINE __m256 qd_reduce8(const __m256 a[8])
{
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20),
                         _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* Eight int32 lanes whose sum is the dot product of 32 unsigned bytes u (<= 128) with 32
   signed bytes s: exact (pmaddubsw's pair sums stay below 2^15 with u <= 128, |s| <= 127). */
SDPA_INLINE __m256i qd_dot(__m256i u, __m256i s)
{
#if SDPA_QD_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

static inline const unsigned char *qd_row(const void *base, sdpa_dtype type, ptrdiff_t stride,
                                          size_t j)
{
    return (const unsigned char *)base + sdpa_off_bytes(type, sdpa_row_off(stride, j));
}

/* Requests the lines of row j (n elements): those of its first byte, of every 64 after it, and
   of its last byte. */
SDPA_INLINE void qd_request(const void *base, sdpa_dtype type, ptrdiff_t stride, size_t j, size_t n)
{
    const unsigned char *r = qd_row(base, type, stride, j);
    const size_t bytes = (size_t)sdpa_off_bytes(type, (ptrdiff_t)n);
    __builtin_prefetch(r, 0, 3);
    if (bytes > 64) __builtin_prefetch(r + 64, 0, 3);
    for (size_t o = 128; o < bytes; o += 64) __builtin_prefetch(r + o, 0, 3);
    __builtin_prefetch(r + bytes - 1, 0, 3);
}

/* A block's quants ready for qd_x8: q8_0, the block's address; q4_0, its low and high nibbles
   (elements 0-15 and 16-31) as bytes. */
typedef struct qd_src {
    const unsigned char *b;
    __m128i lo, hi;
} qd_src;

SDPA_INLINE qd_src qd_prepare(sdpa_dtype type, const unsigned char *b)
{
    qd_src s;
    s.b = b;
    if (type == SDPA_Q4_0) {
        const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)(b + 2));
        const __m128i m = _mm_set1_epi8(15);
        s.lo = _mm_and_si128(raw, m);
        s.hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m);
    } else {
        s.lo = s.hi = _mm_setzero_si128();
    }
    return s;
}

/* Elements [8 t, 8 t + 8) of the block as f32: d q, or for q4_0 d n - 8 d (both products and
   their difference exact in f32, so one fused step gives d (n - 8) exactly). */
SDPA_INLINE __m256 qd_x8(sdpa_dtype type, const qd_src *s, int t, __m256 d, __m256 d8)
{
    if (type == SDPA_Q8_0)
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                 (const __m128i *)(const void *)(s->b + 2 + 8 * t)))),
                             d);
    const __m128i n = t < 2 ? s->lo : s->hi;
    const __m128i h = t & 1 ? _mm_srli_si128(n, 8) : n;
    return _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(h)), d, d8);
}

/* n elements (a multiple of 32) of a q8_0 or q4_0 row to f32, exactly (sdpa_kernels.dequant). */
SDPA_INLINE void qd_dequant_t(sdpa_dtype type, const unsigned char *src, float *dst, size_t n)
{
    const size_t bb = sdpa_block_bytes(type);
    for (size_t b = 0; b < n / SDPA_QK; b++, src += bb, dst += SDPA_QK) {
        const __m256 d = qd_f16x8(src), d8 = _mm256_mul_ps(d, _mm256_set1_ps(8.0f));
        const qd_src s = qd_prepare(type, src);
        SDPA_UNROLL for (int t = 0; t < 4; t++)
            _mm256_storeu_ps(dst + 8 * t, qd_x8(type, &s, t, d, d8));
    }
}
static inline void qd_dequant(sdpa_dtype type, const void *src, float *dst, size_t n)
{
    if (type == SDPA_Q8_0)
        qd_dequant_t(SDPA_Q8_0, (const unsigned char *)src, dst, n);
    else
        qd_dequant_t(SDPA_Q4_0, (const unsigned char *)src, dst, n);
}

#ifdef __AVX512F__
/* --- 512-bit forms (the avx512 files): a block is two vectors ----------------------------- */

SDPA_INLINE __m512 qd_f16x16(const unsigned char *p)
{
    short h;
    memcpy(&h, p, sizeof h);
    return _mm512_cvtph_ps(_mm256_set1_epi16(h));
}

/* Elements [16 h, 16 h + 16) of the block as f32 (qd_x8's arithmetic). */
SDPA_INLINE __m512 qd_x16(sdpa_dtype type, const qd_src *s, int h, __m512 d, __m512 d8)
{
    if (type == SDPA_Q8_0)
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                 (const __m128i *)(const void *)(s->b + 2 + 16 * h)))),
                             d);
    return _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(h ? s->hi : s->lo)), d, d8);
}
#endif

#endif /* SDPA_DECODE_Q_FORMAT_H */
