/* peak_avx512.c -- AVX-512F peak kernels (built with -mavx512f only): 512-bit FMA chains, 512-bit
 * read sum, the decode's read pattern, conversion ceiling and arithmetic floor */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* The inner loop of a decode score tile at 4 query rows per KV head, alone, on K in L1: per 16
   elements of K one conversion to f32 (fmt: 0 f16, 1 bf16, 2 q8_0's int8 times its scale, 3
   q4_0's nibbles less 8 times its scale; a 4 KiB buffer of each) feeding 4 FMAs, 16
   accumulators. Its FMA rate against the peak is the most a decode kernel can reach in that
   format with that conversion, before any other work. Returns the FMA flops. */
#define MIX_Q 4096
static uint16_t mix_h[MIX_Q] __attribute__((aligned(64)));
static int8_t mix_b[MIX_Q] __attribute__((aligned(64)));

static inline __m512 mix_conv(int fmt, size_t i, int half)
{
    const __m512 d = _mm512_set1_ps(0.0078125f);
    if (fmt == 0) return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(mix_h + i)));
    if (fmt == 1)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)(mix_h + i))), 16));
    if (fmt == 2)
        return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                    _mm_load_si128((const __m128i *)(mix_b + i)))));
    /* q4_0: 16 bytes hold 32 nibbles, the low ones elements 0-15, the high ones 16-31 */
    const __m512i x = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(mix_b + i / 2)));
    const __m512i n = half ? _mm512_srli_epi32(x, 4) : _mm512_and_si512(x, _mm512_set1_epi32(15));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(n, _mm512_set1_epi32(8))));
}

#define MIX_ROWS4(k, a0, a1, a2, a3)                                                               \
    a0 = _mm512_fmadd_ps(q0, k, a0), a1 = _mm512_fmadd_ps(q1, k, a1),                              \
    a2 = _mm512_fmadd_ps(q2, k, a2), a3 = _mm512_fmadd_ps(q3, k, a3)

static inline double mix_run(int fmt, uint64_t iters, float *sink)
{
    const __m512 q0 = _mm512_set1_ps(0.5f), q1 = _mm512_set1_ps(0.25f), q2 = _mm512_set1_ps(0.125f),
                 q3 = _mm512_set1_ps(0.0625f);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    __m512 a8 = a0, a9 = a0, a10 = a0, a11 = a0, a12 = a0, a13 = a0, a14 = a0, a15 = a0;
    for (uint64_t it = 0; it < iters; it++)
        for (size_t i = 0; i < MIX_Q; i += 64) {
            const __m512 k0 = mix_conv(fmt, i, 0), k1 = mix_conv(fmt, i + 16, 1);
            const __m512 k2 = mix_conv(fmt, i + 32, 0), k3 = mix_conv(fmt, i + 48, 1);
            MIX_ROWS4(k0, a0, a1, a2, a3);
            MIX_ROWS4(k1, a4, a5, a6, a7);
            MIX_ROWS4(k2, a8, a9, a10, a11);
            MIX_ROWS4(k3, a12, a13, a14, a15);
        }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), a10),
                                       _mm512_add_ps(_mm512_add_ps(a11, a12),
                                                     _mm512_add_ps(_mm512_add_ps(a13, a14), a15))));
    *sink = _mm512_reduce_add_ps(s);
    return (double)iters * (MIX_Q / 16) * 4.0 * 16.0 * 2.0;
}

/* fmt 4: f16 as in mix_run, and after every 128 elements of each of its 4 keys (a decode score
   tile at d = 128: 128 FMAs) the tile's end as the decode has it: the 16 sums folded into one
   vector by a 4-level tree of lane shuffles and adds, its lanes stored 4 per query row by masked
   stores, the accumulators zeroed. Against fmt 0 it prices that end alone. */
static float mix_s[4][MIX_Q / 32] __attribute__((aligned(64)));

static inline __m512 tree_fold(__m512 x, __m512 y, int level)
{
    switch (level) { /* a constant at each call: halves, quarters, pairs, single floats */
    case 0:
        return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
    case 1:
        return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
    case 2:
        return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE));
    default:
        return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xDD));
    }
}

static double mix_tree_run(uint64_t iters, float *sink)
{
    const __m512 q0 = _mm512_set1_ps(0.5f), q1 = _mm512_set1_ps(0.25f), q2 = _mm512_set1_ps(0.125f),
                 q3 = _mm512_set1_ps(0.0625f);
    for (uint64_t it = 0; it < iters; it++)
        for (size_t t = 0; t < MIX_Q / 512; t++) { /* tiles of 4 keys x 128 elements */
            /* unrolled whole, so that the accumulators stay in registers */
            __m512 a[16];
            _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
            _Pragma("GCC unroll 8") for (size_t i = 512 * t; i < 512 * (t + 1); i += 64)
            {
                const __m512 k0 = mix_conv(0, i, 0), k1 = mix_conv(0, i + 16, 0);
                const __m512 k2 = mix_conv(0, i + 32, 0), k3 = mix_conv(0, i + 48, 0);
                MIX_ROWS4(k0, a[0], a[1], a[2], a[3]);
                MIX_ROWS4(k1, a[4], a[5], a[6], a[7]);
                MIX_ROWS4(k2, a[8], a[9], a[10], a[11]);
                MIX_ROWS4(k3, a[12], a[13], a[14], a[15]);
            }
            __m512 h[8], q[4], p[2];
            _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) h[i] =
                tree_fold(a[2 * i], a[2 * i + 1], 0);
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) q[i] =
                tree_fold(h[2 * i], h[2 * i + 1], 1);
            _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) p[i] =
                tree_fold(q[2 * i], q[2 * i + 1], 2);
            const __m512 sums = tree_fold(p[0], p[1], 3);
            /* lanes [4r, 4r + 4) to row r's keys [4t, 4t + 4) */
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
                _mm512_mask_storeu_ps(mix_s[r] + 4 * t - 4 * r, (__mmask16)(0xFu << (4 * r)), sums);
        }
    *sink = mix_s[0][0] + mix_s[3][MIX_Q / 32 - 1];
    return (double)iters * (MIX_Q / 16) * 4.0 * 16.0 * 2.0;
}

/* fmt 5: the P·V inner loop of a q4_0 V at 4 query rows, alone, V in L1 (32 keys of 128
   elements): per key and pair of blocks (64 columns, 16 accumulators) each block's table of its
   16 values d (n - 8) made from its scale (broadcast, convert, multiply: the kernels' way of
   giving the exact values), two permutes by the nibbles, and each row's weight broadcast into 4
   FMAs a block. Against fmt 0 it prices the tables: the most a 4-bit V's P·V reaches of the
   FMA peak with them. */
#define MIX_PV_KEYS 32
static unsigned char mix_v[MIX_PV_KEYS][72] __attribute__((aligned(64)));
static float mix_p[4][MIX_PV_KEYS] __attribute__((aligned(64)));
static float mix_o[4][128] __attribute__((aligned(64)));

static double mix_pv_run(uint64_t iters, float *sink)
{
    static const float iota8[16]
        __attribute__((aligned(64))) = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
    const __m512 it = _mm512_load_ps(iota8);
    for (uint64_t n = 0; n < iters; n++)
        for (size_t c0 = 0; c0 < 128; c0 += 64) {
            __m512 a[16];
            _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) a[i] =
                _mm512_load_ps(mix_o[i / 4] + c0 + 16 * (i % 4));
            for (size_t j = 0; j < MIX_PV_KEYS; j++) {
                __m512 x[4];
                _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++)
                {
                    const unsigned char *b = mix_v[j] + 18 * (c0 / 32 + (size_t)e);
                    uint16_t h;
                    memcpy(&h, b, 2);
                    const __m512 t =
                        _mm512_mul_ps(_mm512_cvtph_ps(_mm256_set1_epi16((short)h)), it);
                    const __m512i q = _mm512_cvtepu8_epi32(
                        _mm_loadu_si128((const __m128i *)(const void *)(b + 2)));
                    x[2 * e] = _mm512_permutexvar_ps(q, t);
                    x[2 * e + 1] = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), t);
                }
                _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
                {
                    const __m512 p = _mm512_set1_ps(mix_p[r][j]);
                    _Pragma("GCC unroll 4") for (int h = 0; h < 4; h++) a[4 * r + h] =
                        _mm512_fmadd_ps(p, x[h], a[4 * r + h]);
                }
            }
            _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++)
                _mm512_store_ps(mix_o[i / 4] + c0 + 16 * (i % 4), a[i]);
        }
    *sink = mix_o[0][0] + mix_o[3][127];
    return (double)iters * MIX_PV_KEYS * 4.0 * 128.0 * 2.0;
}

double bench_mix_avx512(int fmt, uint64_t iters, float *sink)
{
    for (size_t i = 0; i < MIX_Q; i++) {
        mix_h[i] = (uint16_t)(0x3800u + (i & 255u));
        mix_b[i] = (int8_t)(i * 37u);
    }
    for (size_t j = 0; j < MIX_PV_KEYS; j++) {
        for (size_t i = 0; i < 72; i++) mix_v[j][i] = (unsigned char)(j * 31u + i * 7u);
        for (size_t b = 0; b < 4; b++) mix_v[j][18 * b] = 0, mix_v[j][18 * b + 1] = 0x20;
        for (int r = 0; r < 4; r++) mix_p[r][j] = 1.0f / 1024;
    }
    memset(mix_o, 0, sizeof mix_o);
    switch (fmt) { /* one instance per format: no branch in the loop */
    case 0:
        return mix_run(0, iters, sink);
    case 1:
        return mix_run(1, iters, sink);
    case 2:
        return mix_run(2, iters, sink);
    case 3:
        return mix_run(3, iters, sink);
    case 4:
        return mix_tree_run(iters, sink);
    default:
        return mix_pv_run(iters / 8, sink);
    }
}

/* The xor of the 64-byte lines of p[0..bytes) (bytes a multiple of 64, p 64-byte aligned) in
   512-bit loads, one per line: a read of any bits (no float arithmetic, so no value is slow),
   as wide as the machine's bandwidth test reads. */
uint64_t bench_xor_avx512(const void *p, size_t bytes)
{
    const __m512i *a = (const __m512i *)p;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 4 <= bytes / 64; i += 4) {
        s0 = _mm512_xor_si512(s0, _mm512_load_si512(a + i));
        s1 = _mm512_xor_si512(s1, _mm512_load_si512(a + i + 1));
        s2 = _mm512_xor_si512(s2, _mm512_load_si512(a + i + 2));
        s3 = _mm512_xor_si512(s3, _mm512_load_si512(a + i + 3));
    }
    for (; i < bytes / 64; i++) s0 = _mm512_xor_si512(s0, _mm512_load_si512(a + i));
    const __m512i s = _mm512_xor_si512(_mm512_xor_si512(s0, s1), _mm512_xor_si512(s2, s3));
    uint64_t t[8];
    _mm512_storeu_si512(t, s);
    return t[0] ^ t[1] ^ t[2] ^ t[3] ^ t[4] ^ t[5] ^ t[6] ^ t[7];
}

/* The decode's arithmetic alone over K/V from memory (bench_floor_avx512, floor_loop.h): per 16
   elements one conversion (f16 `vcvtph2ps`, bf16 widen and shift); 16 score accumulators, P·V
   passes of NV 8, 8, 4, 2 vectors at 1, 2, 4, 7 rows, as the library's P·V tiles choose. */
static inline __m512 floor_cvt(const uint16_t *p, int bf16)
{
    const __m256i h = _mm256_load_si256((const __m256i *)p);
    if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}
#define FLOOR_FN           bench_floor_avx512
#define FLOOR_VEC          __m512
#define FLOOR_W            16
#define FLOOR_ZERO()       _mm512_setzero_ps()
#define FLOOR_SET1(x)      _mm512_set1_ps(x)
#define FLOOR_LOAD(p)      _mm512_load_ps(p)
#define FLOOR_STORE(p, x)  _mm512_store_ps(p, x)
#define FLOOR_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define FLOOR_ADD(a, b)    _mm512_add_ps(a, b)
#define FLOOR_SUM(x)       _mm512_reduce_add_ps(x)
#define FLOOR_CVT(p, b)    floor_cvt(p, b)
#define FLOOR_NA           16
#define FLOOR_NV1          8
#define FLOOR_NV2          8
#define FLOOR_NV4          4
#define FLOOR_NV7          2
#include "floor_loop.h"
