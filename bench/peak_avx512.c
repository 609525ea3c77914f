/* peak_avx512.c -- AVX-512F peak kernels (built with -mavx512f only): 512-bit FMA chains, 512-bit
 * read sum */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h"

/* 16 independent chains of _mm512_fmadd_ps: enough for two 512-bit FMA pipes at 4-6 cycles of
   latency, and with the two constants well inside the 32 zmm registers. */
double bench_fma_avx512(uint64_t iters, float *sink)
{
    const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    __m512 a0 = _mm512_set1_ps(1.05f), a1 = _mm512_set1_ps(1.1f), a2 = _mm512_set1_ps(1.2f);
    __m512 a3 = _mm512_set1_ps(1.3f), a4 = _mm512_set1_ps(1.4f), a5 = _mm512_set1_ps(1.5f);
    __m512 a6 = _mm512_set1_ps(1.6f), a7 = _mm512_set1_ps(1.7f), a8 = _mm512_set1_ps(1.8f);
    __m512 a9 = _mm512_set1_ps(1.9f), a10 = _mm512_set1_ps(2.0f), a11 = _mm512_set1_ps(2.1f);
    __m512 a12 = _mm512_set1_ps(2.2f), a13 = _mm512_set1_ps(2.3f), a14 = _mm512_set1_ps(2.4f);
    __m512 a15 = _mm512_set1_ps(2.5f);
    for (uint64_t i = 0; i < iters; i++) {
        a0 = _mm512_fmadd_ps(a0, b, c);
        a1 = _mm512_fmadd_ps(a1, b, c);
        a2 = _mm512_fmadd_ps(a2, b, c);
        a3 = _mm512_fmadd_ps(a3, b, c);
        a4 = _mm512_fmadd_ps(a4, b, c);
        a5 = _mm512_fmadd_ps(a5, b, c);
        a6 = _mm512_fmadd_ps(a6, b, c);
        a7 = _mm512_fmadd_ps(a7, b, c);
        a8 = _mm512_fmadd_ps(a8, b, c);
        a9 = _mm512_fmadd_ps(a9, b, c);
        a10 = _mm512_fmadd_ps(a10, b, c);
        a11 = _mm512_fmadd_ps(a11, b, c);
        a12 = _mm512_fmadd_ps(a12, b, c);
        a13 = _mm512_fmadd_ps(a13, b, c);
        a14 = _mm512_fmadd_ps(a14, b, c);
        a15 = _mm512_fmadd_ps(a15, b, c);
    }
    __m512 s0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    __m512 s1 = _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7));
    __m512 s2 = _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11));
    __m512 s3 = _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15));
    *sink = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    return (double)iters * 16.0 * 16.0 * 2.0;
}

/* The same sum read as two streams at once, the halves of p[0..n) side by side (4 lines of
   each per step): on some machines one core pulls more from memory through two streams than
   through one, and the bandwidth a kernel is judged against must be the most it can get. */
float bench_read2_avx512(const float *p, size_t n)
{
    const size_t h = n / 128 * 64; /* p[0..h) and p[h..2h), whole 256-byte steps */
    const float *q = p + h;
    __m512 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm512_setzero_ps();
    for (size_t i = 0; i < h; i += 64)
        for (int k = 0; k < 4; k++) {
            s[k] = _mm512_add_ps(s[k], _mm512_load_ps(p + i + 16 * k));
            s[4 + k] = _mm512_add_ps(s[4 + k], _mm512_load_ps(q + i + 16 * k));
        }
    for (int k = 1; k < 8; k++) s[0] = _mm512_add_ps(s[0], s[k]);
    float sum = _mm512_reduce_add_ps(s[0]);
    for (size_t i = 2 * h; i < n; i++) sum += p[i];
    return sum;
}

/* p is 64-byte aligned (bench_alloc_*): every load is one whole cache line. */
float bench_read_avx512(const float *p, size_t n)
{
    __m512 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 128 <= n; i += 128)
        for (int k = 0; k < 8; k++) s[k] = _mm512_add_ps(s[k], _mm512_load_ps(p + i + 16 * k));
    for (int k = 1; k < 8; k++) s[0] = _mm512_add_ps(s[0], s[k]);
    float sum = _mm512_reduce_add_ps(s[0]);
    for (; i < n; i++) sum += p[i];
    return sum;
}

/* One pass over 16-bit K and V rows (rows x row_elems each, row_elems a multiple of 32, rows end
   to end) in the decode kernel's block order: `block` rows of K, then the same rows of V, every
   element converted (vcvtph2ps) and summed, no other arithmetic. order 0 reads each row start to
   end, so the loads run in address order; order 1 reads tiles of 4 rows a 64-byte line of each
   row in turn (the order of a 4-key score tile). pf > 0 requests each row's lines pf rows ahead,
   in address order, with prefetcht0 as the kernel does. The gap between this and the fused
   decode over the same bytes is the share of the bandwidth lost to the kernel's arithmetic; the
   gap between this and the plain read is the share lost to the order of the reads alone. */
/* s[0] += the line's first 16 elements, s[1] += its last 16, converted */
static inline void add_line(__m512 *s, const uint16_t *line)
{
    s[0] = _mm512_add_ps(s[0], _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)line)));
    s[1] = _mm512_add_ps(s[1], _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(line + 16))));
}

float bench_kv_walk_avx512(const uint16_t *k, const uint16_t *v, size_t rows, size_t row_elems,
                           size_t block, int order, size_t pf)
{
    const size_t lines = row_elems / 32;
    __m512 s[4];
    for (int i = 0; i < 4; i++) s[i] = _mm512_setzero_ps();
    for (size_t j0 = 0; j0 < rows; j0 += block) {
        const size_t j1 = j0 + block < rows ? j0 + block : rows;
        for (int a = 0; a < 2; a++) {
            const uint16_t *base = a ? v : k;
            for (size_t j = j0; j < j1; j += 4) {
                const size_t nr = j1 - j < 4 ? j1 - j : 4;
                if (pf)
                    for (size_t r = 0; r < nr && j + r + pf < rows; r++)
                        for (size_t g = 0; g < lines; g++)
                            _mm_prefetch((const char *)(base + (j + r + pf) * row_elems + 32 * g),
                                         _MM_HINT_T0);
                const uint16_t *row = base + j * row_elems;
                if (order == 0) {
                    for (size_t r = 0; r < nr; r++)
                        for (size_t g = 0; g < lines; g++)
                            add_line(&s[0], row + r * row_elems + 32 * g);
                } else {
                    for (size_t g = 0; g < lines; g++)
                        for (size_t r = 0; r < nr; r++)
                            add_line(&s[2], row + r * row_elems + 32 * g);
                }
            }
        }
    }
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
}
