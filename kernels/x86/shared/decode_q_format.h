/* decode_q_format.h -- the block formats in registers for decode_q.h: loads, conversions */
/*
 * Each block's f16 scale and its quants, converted exactly: an element of q8_0, q4_0, q5_0 or
 * iq4_nl is d q, exact in f32 (an f16 times an integer of at most 8 bits); one of q4_1 or q5_1
 * is d n + m rounded once, what one fused multiply-add gives. Every format but q8_0 (read from
 * memory) is decoded once per block into int8 quants in registers, then converted by shared
 * arithmetic. 256-bit forms for both ISAs, and 512-bit ones (a block in two vectors) where the
 * including file is compiled for AVX-512.
 */
#ifndef SDPA_DECODE_Q_FORMAT_H
#define SDPA_DECODE_Q_FORMAT_H

#include <immintrin.h>
#include <string.h>

#include "convert.h"
#include "kernel_util.h"

/* The bits of a block's f16 scale at p (little-endian). */
SDPA_INLINE short qd_f16_bits(const unsigned char *p)
{
    short h;
    memcpy(&h, p, sizeof h);
    return h;
}

/* A block's f16 scale at p, exactly to f32, in every lane. */
SDPA_INLINE __m256 qd_f16x8(const unsigned char *p)
{
    return _mm256_cvtph_ps(_mm_set1_epi16(qd_f16_bits(p)));
}

/* The 32 nibbles of the 16 bytes at p as bytes, in element order (element i < 16 the low
   nibble of byte i, element 16 + i its high nibble). */
SDPA_INLINE __m256i qd_nibbles32(const unsigned char *p)
{
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)p), m = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
}

/* The 32 bits of the little-endian u32 at p (q5_0, q5_1: bit i the 5th bit of element i). */
static inline uint32_t qd_u32(const unsigned char *p)
{
    uint32_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

/* 16 in byte i where bit i of h is set, 0 elsewhere: with AVX-512 a masked move; on AVX2 byte
   i takes h's byte i / 8 (a shuffle of h in every lane), tests bit i % 8 and turns the test's
   0xff into 16. */
SDPA_INLINE __m256i qd_high_bits32(uint32_t h)
{
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    return _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(16));
#else
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                         2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i t = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(t, bit), _mm256_set1_epi8(16));
#endif
}

/* The 32 quants n of the q5_0 or q5_1 block at b, with their 5th bit, unsigned (0..31). */
SDPA_INLINE __m256i qd_quants32_n5(sdpa_dtype kt, const unsigned char *b)
{
    const size_t h = kt == SDPA_Q5_1 ? 4 : 2; /* the 5th bits' offset; the nibbles follow */
    return _mm256_or_si256(qd_nibbles32(b + h + 4), qd_high_bits32(qd_u32(b + h)));
}

/* The 32 integer quants of a block as int8, element order (sdpa_block_quants'). */
SDPA_INLINE __m256i qd_quants32(sdpa_dtype type, const unsigned char *b)
{
    if (type == SDPA_Q8_0) return _mm256_loadu_si256((const __m256i *)(const void *)(b + 2));
    if (type == SDPA_Q4_1) return qd_nibbles32(b + 4);
    if (type == SDPA_Q5_1) return qd_quants32_n5(type, b);
    if (type == SDPA_Q5_0) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
        /* n - 16 where the 5th bit is clear, n where it is set */
        const __m256i n = qd_nibbles32(b + 6);
        return _mm256_mask_sub_epi8(n, (__mmask32)~qd_u32(b + 2), n, _mm256_set1_epi8(16));
#else
        return _mm256_sub_epi8(qd_quants32_n5(type, b), _mm256_set1_epi8(16));
#endif
    }
    if (type == SDPA_IQ4_NL) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)sdpa_iq4nl_values);
        return _mm256_shuffle_epi8(_mm256_set_m128i(v, v), qd_nibbles32(b + 2));
    }
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
        if (type == SDPA_F32)
            memcpy(t, (const float *)row + c, n * sizeof *t);
        else
            sdpa_row_to_f32((const uint16_t *)row + c, type, 0, 0, n, t);
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

/* Row j of a view at base: j times the stride's bytes (a block format's strides are whole
   blocks), so that the division by the block size is the stride's, the same for every row. */
static inline const unsigned char *qd_row(const void *base, sdpa_dtype type, ptrdiff_t stride,
                                          size_t j)
{
    return (const unsigned char *)base + (ptrdiff_t)j * sdpa_off_bytes(type, stride);
}

/* K's (v = 0) or V's row j of the view w: its own, or on a paged unit (w->pages, whose pages
   hold a power of two keys: decode_q.h takes whole blocks of such units only) the row in the
   page holding key j, found by a shift. */
static inline const unsigned char *qd_key_row(const sdpa_rows *w, int v, sdpa_dtype type, size_t j)
{
    const ptrdiff_t stride = v ? w->v_stride : w->k_stride;
    const sdpa_pages *pg = w->pages;
    if (!pg) return qd_row(v ? w->v : w->k, type, stride, j);
    const unsigned s = (unsigned)__builtin_ctzll((unsigned long long)pg->size);
    const size_t p = j >> s;
    return qd_row((v ? pg->v : pg->k)[p - pg->first], type, stride, j - (p << s));
}

/* The bytes from one row of K (v = 0) or V to the next on an unpaged unit: row j is at
   base + j times this (a block format's strides are whole blocks). The score tiles walk their
   requests by it, the P·V its rows and requests: finding each row through qd_key_row (the page
   test, a signed division by the block size, a multiply) cost more than the requests it fed. */
static inline ptrdiff_t qd_stride_bytes(const sdpa_rows *w, int v, sdpa_dtype type)
{
    return sdpa_off_bytes(type, v ? w->v_stride : w->k_stride);
}

/* Requests the lines of the row at r (`bytes` long): those of its first byte, of every 64 after
   it, and of its last byte. A fixed pattern, though it may ask for the last line twice: a loop
   over exactly the row's lines, whose trip count follows the row's alignment, mispredicts. */
SDPA_INLINE void qd_request_row(const unsigned char *r, size_t bytes)
{
    __builtin_prefetch(r, 0, 3);
    if (bytes > 64) __builtin_prefetch(r + 64, 0, 3);
    for (size_t o = 128; o < bytes; o += 64) __builtin_prefetch(r + o, 0, 3);
    __builtin_prefetch(r + bytes - 1, 0, 3);
}

/* The lines of a span still to request, first to last: requests spread among the arithmetic
   rather than issued at once (a burst holds the core's few line-fill buffers while no
   arithmetic runs). Empty when l > last. */
typedef struct qd_req {
    uintptr_t l, last;
} qd_req;

SDPA_INLINE qd_req qd_req_span(const unsigned char *r, size_t len)
{
    const qd_req c = {(uintptr_t)r & ~(uintptr_t)63, (uintptr_t)r + len - 1};
    return c;
}

/* A cursor with no lines. */
SDPA_INLINE qd_req qd_req_empty(void)
{
    const qd_req c = {1, 0};
    return c;
}

/* Requests the next k lines of c (fewer at its end). */
SDPA_INLINE void qd_req_take(qd_req *c, int k)
{
    for (int i = 0; i < k && c->l <= c->last; i++, c->l += 64)
        __builtin_prefetch((const void *)c->l, 0, 3);
}

/* Lines left in c. */
SDPA_INLINE size_t qd_req_left(const qd_req *c)
{
    return c->l <= c->last ? (size_t)((c->last - c->l) / 64 + 1) : 0;
}

/* Requests each line of the bytes [r, r + len) once. Rows of a block format are rarely a whole
   number of lines long (q8_0: 136 bytes a row at d = 128), so that requesting row by row asks
   for the line two rows share twice, and a second request for a line still in flight from
   memory costs about as much as the first. */
SDPA_INLINE void qd_request_span(const unsigned char *r, size_t len)
{
    qd_req c = qd_req_span(r, len);
    qd_req_take(&c, (int)qd_req_left(&c));
}

/* Requests the m rows from r, sb bytes apart, of `bytes` each (m >= 1): rows laid end to end as
   one span, others row by row. */
SDPA_INLINE void qd_request_rows(const unsigned char *r, ptrdiff_t sb, size_t m, size_t bytes)
{
    if (sb == (ptrdiff_t)bytes)
        qd_request_span(r, m * bytes);
    else
        for (size_t i = 0; i < m; i++, r += sb) qd_request_row(r, bytes);
}

/* A block's scale d in every lane, and c: for q4_1 and q5_1 the minimum m, for q4_0, q5_0 and
   iq4_nl -0 (qd_x8 takes fma(q, d, c): d q + -0 is d q, its sign of zero too); unused for
   q8_0. */
SDPA_INLINE void qd_scales8(sdpa_dtype type, const unsigned char *b, __m256 *d, __m256 *c)
{
    *d = qd_f16x8(b);
    *c = sdpa_dtype_has_min(type) ? qd_f16x8(b + 2) : _mm256_set1_ps(-0.0f);
}

/* A block's quants ready for qd_x8: q8_0, the block's address; the other formats, their int8
   quants (qd_quants32's; q4_0's n - 8 made here from 128-bit halves), elements 0-15 and
   16-31. */
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
        const __m128i m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
        s.lo = _mm_sub_epi8(_mm_and_si128(raw, m), e);
        s.hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m), e);
    } else if (type == SDPA_Q8_0) {
        s.lo = s.hi = _mm_setzero_si128();
    } else {
        const __m256i q = qd_quants32(type, b);
        s.lo = _mm256_castsi256_si128(q);
        s.hi = _mm256_extracti128_si256(q, 1);
    }
    return s;
}

/* Elements [8 t, 8 t + 8) of the block as f32, d and c from qd_scales8: for q8_0 d q; for the
   others fma(q, d, c), exactly d q (+ m) with ggml's sign of zero (d n - 8 d would give +0
   where ggml's d (n - 8) is -0). */
SDPA_INLINE __m256 qd_x8(sdpa_dtype type, const qd_src *s, int t, __m256 d, __m256 c)
{
    if (type == SDPA_Q8_0)
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                 (const __m128i *)(const void *)(s->b + 2 + 8 * t)))),
                             d);
    const __m128i n = t < 2 ? s->lo : s->hi;
    const __m128i h = t & 1 ? _mm_srli_si128(n, 8) : n;
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h)), d, c);
}

/* n elements (a multiple of 32) of a row of a block format to f32, exactly
   (sdpa_kernels.dequant). */
SDPA_INLINE void qd_dequant_t(sdpa_dtype type, const unsigned char *src, float *dst, size_t n)
{
    const size_t bb = sdpa_block_bytes(type);
    for (size_t b = 0; b < n / SDPA_QK; b++, src += bb, dst += SDPA_QK) {
        __m256 d, c;
        qd_scales8(type, src, &d, &c);
        const qd_src s = qd_prepare(type, src);
        SDPA_UNROLL for (int t = 0; t < 4; t++)
            _mm256_storeu_ps(dst + 8 * t, qd_x8(type, &s, t, d, c));
    }
}
static inline void qd_dequant(sdpa_dtype type, const void *src, float *dst, size_t n)
{
    const unsigned char *s = (const unsigned char *)src;
#define QD_DEQUANT(T) qd_dequant_t(T, s, dst, n) /* one instance per format */
    switch (type) {
        SDPA_CASE(QD_DEQUANT, SDPA_Q8_0)
        SDPA_CASE(QD_DEQUANT, SDPA_Q4_0)
        SDPA_CASE(QD_DEQUANT, SDPA_Q4_1)
        SDPA_CASE(QD_DEQUANT, SDPA_Q5_0)
        SDPA_CASE(QD_DEQUANT, SDPA_Q5_1)
        SDPA_CASE(QD_DEQUANT, SDPA_IQ4_NL)
    default:
        break;
    }
#undef QD_DEQUANT
}

#ifdef __AVX512F__
/* --- 512-bit forms (the avx512 files): a block is two vectors ----------------------------- */

SDPA_INLINE __m512 qd_f16x16(const unsigned char *p)
{
    return _mm512_cvtph_ps(_mm256_set1_epi16(qd_f16_bits(p)));
}

/* qd_scales8 over 16 lanes. */
SDPA_INLINE void qd_scales16(sdpa_dtype type, const unsigned char *b, __m512 *d, __m512 *c)
{
    *d = qd_f16x16(b);
    *c = sdpa_dtype_has_min(type) ? qd_f16x16(b + 2) : _mm512_set1_ps(-0.0f);
}

/* Elements [16 h, 16 h + 16) of the block as f32 (qd_x8's arithmetic). */
SDPA_INLINE __m512 qd_x16(sdpa_dtype type, const qd_src *s, int h, __m512 d, __m512 c)
{
    if (type == SDPA_Q8_0)
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                 (const __m128i *)(const void *)(s->b + 2 + 16 * h)))),
                             d);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(h ? s->hi : s->lo)), d, c);
}

/* A block's 32 elements by table for the 16-value formats (q4_0, q4_1, iq4_nl) and the 32-value
   ones (q5_0, q5_1): the block's values (its d times each quant's value, plus m for q4_1 and
   q5_1: the arithmetic qd_x16 does per element, so the same floats) in one vector, t, or two, t
   and u (values 16-31), and its quant bytes one per 32-bit lane, n; element e < 16 is
   t[n[e] & 15], element 16 + e is t[n[e] >> 4], with a 5th bit (qh's bit e, 16 + e) choosing u.
   One permute per 16 elements replaces a widen, a conversion and a multiply. Other formats:
   qd_x16's forms. */
typedef struct qd_blk16 {
    qd_src s;
    __m512 d, c, t, u;
    __m512i n;
    __mmask32 qh;
} qd_blk16;

SDPA_INLINE int qd_by_table32(sdpa_dtype type) { return type == SDPA_Q5_0 || type == SDPA_Q5_1; }

SDPA_INLINE int qd_by_table(sdpa_dtype type)
{
    return type == SDPA_Q4_0 || type == SDPA_Q4_1 || type == SDPA_IQ4_NL || qd_by_table32(type);
}

SDPA_INLINE qd_blk16 qd_block16(sdpa_dtype type, const unsigned char *b)
{
    qd_blk16 k;
    if (qd_by_table(type)) {
        static const float iota[16]
            __attribute__((aligned(64))) = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        const __m512 d = qd_f16x16(b), i = _mm512_load_ps(iota);
        /* the quants' offset in the block */
        const size_t qs = type == SDPA_Q5_1 ? 8 : type == SDPA_Q5_0 ? 6 : type == SDPA_Q4_1 ? 4 : 2;
        k.n = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + qs)));
        k.qh = (__mmask32)(qd_by_table32(type) ? qd_u32(b + qs - 4) : 0);
        k.u = d;
        if (type == SDPA_Q4_0) /* d (n - 8) */
            k.t = _mm512_mul_ps(_mm512_sub_ps(i, _mm512_set1_ps(8.0f)), d);
        else if (type == SDPA_Q4_1) /* fma(n, d, m) */
            k.t = _mm512_fmadd_ps(i, d, qd_f16x16(b + 2));
        else if (type == SDPA_Q5_0) { /* d (n - 16): fma(n - 16, d, -0) is this product */
            k.t = _mm512_mul_ps(_mm512_sub_ps(i, _mm512_set1_ps(16.0f)), d);
            k.u = _mm512_mul_ps(i, d);
        } else if (type == SDPA_Q5_1) { /* fma(n, d, m) */
            const __m512 m = qd_f16x16(b + 2);
            k.t = _mm512_fmadd_ps(i, d, m);
            k.u = _mm512_fmadd_ps(_mm512_add_ps(i, _mm512_set1_ps(16.0f)), d, m);
        } else /* d v[n]: fma(v, d, -0) is this product */
            k.t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                    (const __m128i *)(const void *)sdpa_iq4nl_values))),
                                d);
        k.s.b = b, k.s.lo = k.s.hi = _mm_setzero_si128();
        k.d = k.c = d;
    } else {
        k.s = qd_prepare(type, b);
        qd_scales16(type, b, &k.d, &k.c);
        k.t = k.u = k.d;
        k.n = _mm512_setzero_si512();
        k.qh = 0;
    }
    return k;
}

/* Elements [16 h, 16 h + 16) of the block (qd_x16's values). */
SDPA_INLINE __m512 qd_get16(sdpa_dtype type, const qd_blk16 *k, int h)
{
    if (qd_by_table32(type)) { /* vpermt2ps reads index bits 0-4: the nibble, 16 by qh's bit */
        const __m512i c = _mm512_set1_epi32(16);
        const __m512i q = h ? _mm512_srli_epi32(k->n, 4) : _mm512_andnot_si512(c, k->n);
        return _mm512_permutex2var_ps(
            k->t,
            _mm512_mask_ternarylogic_epi32(q, (__mmask16)(h ? _kshiftri_mask32(k->qh, 16) : k->qh),
                                           c, c, 0xFE),
            k->u);
    }
    if (qd_by_table(type))
        return _mm512_permutexvar_ps(h ? _mm512_srli_epi32(k->n, 4) : k->n, k->t);
    return qd_x16(type, &k->s, h, k->d, k->c);
}
#endif

#endif /* SDPA_DECODE_Q_FORMAT_H */
