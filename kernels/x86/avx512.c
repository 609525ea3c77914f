/* avx512.c -- AVX-512 (F/BW/DQ/VL) + FMA + F16C kernels: the three primitives, exp, and the fused rows kernel */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernel_table.h"
#include "prefetch.h"

/* Micro-kernels are written as loops over small compile-time bounds; forcing them inline with
   constant bounds lets the compiler unroll them and keep every accumulator in a register. */
#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Lanes [0, n) of a 16-lane vector (n may be >= 16 or 0). Every tail in this file is handled
   by masked loads and stores, which neither read nor write (nor fault on) masked-off lanes. */
AI __mmask16 lanes(size_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }
static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* 16 (or fewer, by mask) elements of a K/V row converted exactly to f32. f16 goes through the
   hardware converter (exact: every binary16 is a binary32); bf16 is the upper half of an f32. */
AI __m512 load_f16(const uint16_t *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

AI __m512 load_bf16(const uint16_t *p, __mmask16 m)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* Row j of a K/V view as a typed pointer offset, in elements (strides may be negative). */
static inline ptrdiff_t row_off(ptrdiff_t stride, size_t j) { return (ptrdiff_t)j * stride; }

/* Convert rows [j0, j0 + nb) of a K/V view (n elements each) to f32 rows of stride ld. */
static void convert_rows(const void *src, sdpa_dtype t, ptrdiff_t stride, size_t j0, size_t nb,
                         size_t n, float *dst, size_t ld)
{
    for (size_t j = 0; j < nb; j++) {
        const ptrdiff_t o = row_off(stride, j0 + j);
        float *d = dst + j * ld;
        for (size_t c = 0; c < n; c += 16) {
            const __mmask16 m = lanes(n - c);
            __m512 x;
            if (t == SDPA_F16)
                x = load_f16((const uint16_t *)src + o + (ptrdiff_t)c, m);
            else if (t == SDPA_BF16)
                x = load_bf16((const uint16_t *)src + o + (ptrdiff_t)c, m);
            else
                x = _mm512_maskz_loadu_ps(m, (const float *)src + o + (ptrdiff_t)c);
            _mm512_mask_storeu_ps(d + c, m, x);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* exp                                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* e^r for |r| <= ln2/2: the degree-7 Taylor polynomial in Horner form (both exps below). */
AI __m512 exp512_poly(__m512 r)
{
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
}

/* exp(x) for 16 lanes.
   - Range reduction (Cody-Waite): x = n*ln2 + r with n = nearest integer to x*log2(e), found by
     adding 1.5*2^23 inside an FMA (the sum's low mantissa bits are then n); ln2 is split into a
     head with 16 significant bits (so n*LN2_HI is exact for |n| < 2^8) and a tail, so that r is
     computed with an error far below one ulp; |r| <= ln2/2.
   - exp(r) by its Taylor polynomial of degree 7 in Horner form: the truncation error
     (ln2/2)^8/8! ~ 5e-9 is 0.1 ulp relative; the rounding of the last two FMA steps dominates.
   - 2^n is built in the exponent bits, in two factors 2^n1 * 2^n2 (n1 = floor(n/2)) so that
     each is a normal float for every n in [-159, 128]: p * 2^n1 is exact, and the single final
     rounding then produces correctly scaled subnormal results (x in about [-103.97, -87.34])
     rather than flushing them to zero.
   - x is clamped to [-110, 89]: below, exp underflows to +0; above, it overflows to +inf (the
     clamps keep n within the range the exponent construction handles). MAXPS/MINPS return their
     second operand when either is NaN, so x is put second and a NaN input propagates. */
AI __m512 exp512(__m512 x)
{
    const __m512 magic = _mm512_set1_ps(12582912.0f); /* 1.5 * 2^23 */
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693145751953125f);       /* 0x3f317200 */
    const __m512 ln2_lo = _mm512_set1_ps(1.428606820309417232e-6f); /* ln2 - ln2_hi */
    x = _mm512_max_ps(_mm512_set1_ps(-110.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    const __m512 t = _mm512_fmadd_ps(x, log2e, magic);
    const __m512 n = _mm512_sub_ps(t, magic);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);

    const __m512 p = exp512_poly(r);

    const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic));
    const __m512i n1 = _mm512_srai_epi32(ni, 1);
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

/* Measured over every float in [-104, 0] against the double-precision exp (error in ulps of the
   exact result, the ulp taken as at least 2^-149): max 0.9371 ulp, at x = -5.89112377.
   Stated bound: */
#define EXP_AVX512_MAX_ULP 1.0

static void exp_f32_avx512(const float *x, float *y, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp512(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = lanes(n - i);
        _mm512_mask_storeu_ps(y + i, m, exp512(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* exp of one scalar through the same vector code, so alpha matches the p values bit for bit. */
static inline float exp1(float x) { return _mm512_cvtss_f32(exp512(_mm512_set1_ps(x))); }

/* The fused kernel's exp, for x <= 0 (or NaN): the same reduction and polynomial, but 2^n in a
   single factor, with x clamped at -88 so that n >= -127 and n = -127 builds the factor +0.
   Results below about 2^-126 are therefore flushed to 0 (exp(-inf) = 0 exactly) instead of
   rounded to a subnormal: six fewer operations, and a flushed p is below 2^-126 while the sum
   l it joins is at least 1 (the row maximum contributes exp(0) = 1), so the kernel's output
   cannot tell. */
AI __m512 exp512_ftz(__m512 x)
{
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    x = _mm512_max_ps(_mm512_set1_ps(-88.0f), x);
    const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic);
    const __m512 n = _mm512_sub_ps(t, magic);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606820309417232e-6f), r);
    const __m512 p = exp512_poly(r);
    /* t's low mantissa bits hold n and the magic constant's bits all shift out */
    const __m512i e = _mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(t), 23),
                                       _mm512_set1_epi32(127 << 23));
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* ------------------------------------------------------------------------------------------ */
/* Dot products of one query with 16 keys                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Folds a[0..16) (16-lane partial sums) into one vector whose lane i is the full sum of a[i'],
   with a 4-level tree of lane shuffles and adds (45 ops for 16 sums, instead of 16 separate
   horizontal reductions). The tree leaves sum i in output lane 4*(i%4) + i/4; callers pass
   the inputs in the transposed order perm16(i) so that the result comes out in natural order. */
AI __m512 fold2_512(__m512 x, __m512 y) /* 256-bit halves: x's sums in lanes 0-7, y's in 8-15 */
{
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
}
AI __m512 fold2_256(__m512 x, __m512 y) /* 128-bit quarters */
{
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}
AI __m512 fold2_128(__m512 x, __m512 y) /* pairs within 128-bit lanes */
{
    return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE));
}
AI __m512 fold2_64(__m512 x, __m512 y) /* single floats within 128-bit lanes */
{
    return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xDD));
}
AI __m512 reduce16(const __m512 *a)
{
    __m512 t[8], u[4], w[2];
    UNROLL for (int i = 0; i < 8; i++) t[i] = fold2_512(a[2 * i], a[2 * i + 1]);
    UNROLL for (int i = 0; i < 4; i++) u[i] = fold2_256(t[2 * i], t[2 * i + 1]);
    UNROLL for (int i = 0; i < 2; i++) w[i] = fold2_128(u[2 * i], u[2 * i + 1]);
    return fold2_64(w[0], w[1]);
}
#define PERM16(i) ((((i) & 3) << 2) | ((i) >> 2))

/* a[perm(i)] += dot(q[0..16*NC), k row i) over NC chunks of 16, the last masked by mlast: the
   query chunks stay in registers and one pointer walks the 16 key rows. */
AI void dot16_acc(int NC, __m512 *a, const float *q, const float *k, ptrdiff_t ks,
                  __mmask16 mlast)
{
    __m512 qv[8];
    UNROLL for (int t = 0; t < NC; t++)
        qv[t] = t < NC - 1 ? _mm512_loadu_ps(q + 16 * t) : _mm512_maskz_loadu_ps(mlast, q + 16 * t);
    UNROLL for (int i = 0; i < 16; i++) {
        const float *kr = k + i * ks;
        __m512 s0 = a[PERM16(i)], s1 = _mm512_setzero_ps();
        /* two chains per key: latency over the chunks halves, the 16 keys overlap the rest */
        UNROLL for (int t = 0; t < NC; t++) {
            const __m512 kv = t < NC - 1 ? _mm512_loadu_ps(kr + 16 * t)
                                         : _mm512_maskz_loadu_ps(mlast, kr + 16 * t);
            if (t & 1)
                s1 = _mm512_fmadd_ps(qv[t], kv, s1);
            else
                s0 = _mm512_fmadd_ps(qv[t], kv, s0);
        }
        a[PERM16(i)] = _mm512_add_ps(s0, s1);
    }
}

/* out lane i = dot(q[0..d), k row i) for the 16 f32 key rows at k + i * ks. */
static __m512 score_avx512_1x16(const float *q, const float *k, ptrdiff_t ks, size_t d)
{
    __m512 a[16];
    UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
    size_t c = 0;
    for (; d - c > 128; c += 128) dot16_acc(8, a, q + c, k + c, ks, 0xFFFF);
    const size_t rem = d - c, nc = (rem + 15) / 16;
    const __mmask16 ml = lanes(rem - 16 * (nc - 1));
    switch (nc) {
    case 1: dot16_acc(1, a, q + c, k + c, ks, ml); break;
    case 2: dot16_acc(2, a, q + c, k + c, ks, ml); break;
    case 3: dot16_acc(3, a, q + c, k + c, ks, ml); break;
    case 4: dot16_acc(4, a, q + c, k + c, ks, ml); break;
    case 5: dot16_acc(5, a, q + c, k + c, ks, ml); break;
    case 6: dot16_acc(6, a, q + c, k + c, ks, ml); break;
    case 7: dot16_acc(7, a, q + c, k + c, ks, ml); break;
    default: dot16_acc(8, a, q + c, k + c, ks, ml); break;
    }
    return reduce16(a);
}

/* One dot product (for key counts that do not fill a group of 16). */
static inline float dot1_f32(const float *q, const float *k, size_t d)
{
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    size_t c = 0;
    for (; c + 32 <= d; c += 32) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(k + c), a);
        b = _mm512_fmadd_ps(_mm512_loadu_ps(q + c + 16), _mm512_loadu_ps(k + c + 16), b);
    }
    for (; c < d; c += 16) {
        const __mmask16 m = lanes(d - c);
        a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + c), _mm512_maskz_loadu_ps(m, k + c), a);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}

/* ------------------------------------------------------------------------------------------ */
/* The three primitives                                                                        */
/* ------------------------------------------------------------------------------------------ */

static void score_f32_avx512(const float *q, const float *k, size_t k_stride, size_t n, size_t d,
                             float scale, float *s)
{
    const __m512 sc = _mm512_set1_ps(scale);
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(s + j, _mm512_mul_ps(score_avx512_1x16(q, k + j * k_stride,
                                                        (ptrdiff_t)k_stride, d), sc));
    for (; j < n; j++) s[j] = dot1_f32(q, k + j * k_stride, d) * scale;
}

/* The online-softmax step over s[0..n), where only s[0..valid) are real scores and the rest
   count as -inf (p written as 0); the public primitive is valid = n. */
static float softmax_lim(float *s, size_t n, size_t valid, float *m, float *l)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    /* MAXPS returns its second operand when either is NaN: with the running max second, NaN
       scores are skipped here (the max stays a number) and reach l through their p below. */
    for (size_t i = 0; i < valid; i += 16)
        mx = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, lanes(valid - i), s + i), mx);
    const float bm = _mm512_reduce_max_ps(mx);
    const float mo = *m;
    const float mn = bm > mo ? bm : mo;
    /* While every score is -inf, subtract 0 instead of -inf: p = exp(-inf) = 0, no NaN. */
    const __m512 msub = _mm512_set1_ps(mn == -INFINITY ? 0.0f : mn);
    __m512 sum = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= valid; i += 16) {
        const __m512 p = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + i), msub));
        _mm512_storeu_ps(s + i, p);
        sum = _mm512_add_ps(sum, p);
    }
    if (i < valid) {
        const __mmask16 mv = lanes(valid - i), mn16 = lanes(n - i);
        /* lanes past valid but before n become 0 */
        const __m512 p = _mm512_maskz_mov_ps(mv, exp512(_mm512_sub_ps(
                                                     _mm512_maskz_loadu_ps(mv, s + i), msub)));
        _mm512_mask_storeu_ps(s + i, mn16, p);
        sum = _mm512_add_ps(sum, p);
        i += 16;
    }
    for (; i < n; i += 16) _mm512_mask_storeu_ps(s + i, lanes(n - i), _mm512_setzero_ps());
    const float alpha = mn == -INFINITY ? 1.0f : exp1(mo - mn);
    *l = alpha * *l + _mm512_reduce_add_ps(sum);
    *m = mn;
    return alpha;
}

static float softmax_online_f32_avx512(float *s, size_t n, float *m, float *l)
{
    return softmax_lim(s, n, n, m, l);
}

static void accumulate_f32_avx512(float *o, float alpha, const float *p, const float *v,
                                  size_t v_stride, size_t n, size_t dv)
{
    const __m512 al = _mm512_set1_ps(alpha);
    for (size_t c = 0; c < dv; c += 64) {
        __mmask16 mk[4];
        __m512 a[4];
        UNROLL for (int t = 0; t < 4; t++) {
            mk[t] = c + 16 * t < dv ? lanes(dv - c - 16 * t) : 0;
            a[t] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[t], o + c + 16 * t), al);
        }
        for (size_t j = 0; j < n; j++) {
            const __m512 pj = _mm512_set1_ps(p[j]);
            const float *vr = v + j * v_stride + c;
            UNROLL for (int t = 0; t < 4; t++)
                a[t] = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(mk[t], vr + 16 * t), a[t]);
        }
        UNROLL for (int t = 0; t < 4; t++) _mm512_mask_storeu_ps(o + c + 16 * t, mk[t], a[t]);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Fused rows kernel                                                                           */
/* ------------------------------------------------------------------------------------------ */
/*
 * Two paths, chosen by the number of rows R:
 *
 * Few rows (decode, R <= DEC_MAX_ROWS): the work is bound by reading K and V once, and on the
 * machines measured the core overlaps little of its arithmetic with the memory stream, so
 * every operation per key counts. Per block of keys: scores in tiles of RP rows x 16/RP keys
 * (RP = R rounded up to 1, 2, 4 or 8), each K chunk loaded and converted once, in a register,
 * and used by every row, the 16 dot products of a tile reduced by one shuffle tree; then one
 * online-softmax step per row for the whole block; then P·V with each V vector converted once
 * in a register and used by every row, the accumulators of R rows x NV column vectors in
 * registers. K and V are requested ahead of their use, in address order (dec_pf).
 * (bf16 rows were once split even/odd, one integer operation converting 16 elements, with q
 * and acc kept in the same order: no faster in cache, and about a quarter slower streaming
 * from memory in the benchmark than the widening conversion, so it went.)
 *
 * Many rows (prefill): two GEMMs per key block, computed transposed so that nothing but Q is
 * ever transposed: Sᵀ[j][r] = sum_c K[j][c] * Qᵀ[c][r] (keys broadcast, 16 query rows per
 * vector, Qᵀ packed once per call in panels of 64 rows), the online softmax then runs along
 * the key axis with 16 rows per vector (no horizontal reductions; causal masks are per-lane
 * compares), and O[r][:] += Pᵀ[j][r] * V[j][:] broadcasts P against V rows (f32 V used in
 * place, f16/bf16 V converted once per block).
 */

#define DEC_MAX_ROWS 8
/* Decode-path tuning, measured on K/V far larger than the caches: */
#define DEC_PF 32 /* keys of software-prefetch distance (16..256 tried; 32..64 best) */
#define DEC_PVG 32 /* keys per P·V group, whose V rows stay in L1 across column passes */
#define DEC_BLOCK 256 /* keys per block on the few-rows path */
#define DEC_BLOCK_TWO 64 /* keys per block with one or two rows (see dec_pf) */
#define BIG_BLOCK 512 /* keys per block on the many-rows path */
#define PANEL 64      /* query rows per Qᵀ panel (4 vectors) */
#define SC_MR 6       /* keys per score micro-tile: 6 x 4 vectors = 24 accumulators */
#define PV_MR 6       /* rows per PV micro-tile: 6 rows x 4 vectors (64 columns) */
#define PV_KB 64      /* keys per PV sub-block: 64 keys x 64 columns of V stay in L1 */

/* Scores of decode row r at S + r * DEC_LDS: a constant stride, so that the P·V loop reaches
   every row's p through one pointer and constant offsets (a stride known only at run time took
   a pointer per row, more than the registers left beside the accumulators); 16 floats more
   than a block, so that the rows do not share 4 KiB offsets. */
#define DEC_LDS (DEC_BLOCK + 16)
static size_t dec_block(size_t block) { return min_sz(block ? block : 1, DEC_BLOCK); }
static size_t big_block(size_t block) { return min_sz(block ? block : 1, BIG_BLOCK); }

/* Per-call row state: m, l, alpha and the per-block key limit, padded to a multiple of 16. */
static size_t state_floats(size_t rows) { return 4 * round16(rows); }

static size_t dec_ws(size_t rows, size_t d, size_t dv, size_t block)
{
    /* alpha | scores | q packed by lines (padded to 8 rows) */
    (void)block, (void)dv;
    return state_floats(rows) + rows * DEC_LDS + DEC_MAX_ROWS * (d + 32);
}

static size_t big_ws(size_t rows, size_t d, size_t dv, size_t block)
{
    const size_t nb = big_block(block);
    return state_floats(rows) + round16(rows) * d + nb * PANEL + nb * round16(d) +
           nb * round16(dv) + PANEL;
}

static size_t ws_floats_avx512(size_t rows, size_t d, size_t dv, size_t block)
{
    return rows <= DEC_MAX_ROWS ? dec_ws(rows, d, dv, block) : big_ws(rows, d, dv, block);
}

/* ---- few rows ---------------------------------------------------------------------------- */

/* The decode loop's two prefetch streams while one phase runs, each requested in address
   order (sdpa_pf_rows) a fixed number of lines per step of the phase's work: s[0] is the
   phase's own array DEC_PF keys ahead, s[1] the other array one phase ahead (while the score
   loop reads a block's K rows it requests the block's V rows, and while the P·V loop reads
   them, the next block's K rows), so that the next phase starts on rows already in cache and
   two streams of requests are in flight at all times. s[1] is used with one or two rows (R <=
   2), and then with blocks of DEC_BLOCK_TWO keys: the phases are short, so both arrays stream
   at once almost all the time. Measured from memory, one thread, D128 f16, builds timed in
   turn in one process, each call after a 512 MiB read (medians of 16 calls): 32/32 heads 75-77
   % of the read bandwidth against 65-68 % with blocks of 256, and 60-61 % with blocks of 64 but
   no s[1]; 32/16 69 against 53 %; in cache 32/32 7.9 against 8.4 ns per key. With three or
   more rows it gained nothing at any block size (32 to 256 keys; 24/8 64 against 63 %, 32/8
   62-64 against 63 %, 32/4 38 against 39 %), and with blocks of 256 it made 32/8 slower from
   memory and from the outer caches alike (a whole block of the other array requested ahead,
   each line requested twice: 58-64 against 70-71 % of the read bandwidth, and 16.2 against
   13.8 ns per key with 8 MiB of K/V in L3), so there s[1] is empty and requests nothing
   (dec_pf_mode 2). */
typedef struct dec_pf {
    sdpa_pf_rows s[2];
    int          per[2]; /* lines per step */
} dec_pf;

/* keys rows of each stream over `steps` steps (rounded up: a stream never falls behind) */
static inline void dec_pf_rate(dec_pf *p, size_t keys, size_t steps)
{
    for (int i = 0; i < 2; i++) p->per[i] = steps ? (int)((keys * p->s[i].L + steps - 1) / steps) : 0;
}

AI void dec_pf_step(dec_pf *p)
{
    sdpa_pf_rows_next(&p->s[0], p->per[0]);
    sdpa_pf_rows_next(&p->s[1], p->per[1]);
}

/* How a run of steps may request its lines when its rows have L lines each: 1 when both
   streams have such rows laid end to end (no gap: the next line is always the one after) and
   at least `lines` lines left each, 2 when the first does and the second is empty (one
   stream), else 0 (the general cursor, dec_pf_step). In modes 1 and 2 a step requests its
   lines with a pointer bump (dec_pf_simple), the general cursor's bookkeeping costing more
   than the requests themselves when the data is already in cache. */
static inline int dec_pf_mode(const dec_pf *p, size_t L, size_t lines)
{
    if (p->s[0].skip != 0 || p->s[0].L != L || p->s[0].n < lines) return 0;
    if (p->s[1].n == 0) return 2;
    return p->s[1].skip == 0 && p->s[1].L == L && p->s[1].n >= lines ? 1 : 0;
}

/* `per` lines of the first stream (and of the second when `two`) from line offset `at` (in
   lines) of the plain run starting at the streams' current lines. */
AI void dec_pf_simple(const dec_pf *p, int per, size_t at, int two)
{
    UNROLL for (int i = 0; i < per; i++) {
        __builtin_prefetch(p->s[0].p + 64 * (at + (size_t)i), 0, SDPA_PF_STREAM_LOCALITY);
        if (two) __builtin_prefetch(p->s[1].p + 64 * (at + (size_t)i), 0, SDPA_PF_STREAM_LOCALITY);
    }
}

/* Advances the first stream of a plain run (and the second when `two`) by `lines` lines (the
   line-in-row count only matters for rows with a gap, which a plain run never has). */
static inline void dec_pf_skip(dec_pf *p, size_t lines, int two)
{
    for (int i = 0; i < 1 + two; i++) {
        p->s[i].p += 64 * lines;
        p->s[i].n -= lines;
    }
}

/* Rows [j, min(j + n, jend)) of a K/V view as a prefetch stream (empty when j >= jend). */
static inline sdpa_pf_rows dec_rows(const void *base, ptrdiff_t stride, size_t es, size_t rb,
                                    size_t j, size_t n, size_t jend)
{
    n = j < jend ? min_sz(n, jend - j) : 0;
    if (!n) j = 0; /* an empty stream still points at a row of the view */
    return sdpa_pf_rows_begin((const char *)base + row_off(stride, j) * (ptrdiff_t)es,
                              stride * (ptrdiff_t)es, rb, n);
}

/* 16 (or fewer, by mask) elements at element offset off of a K/V view of type t. Every caller
   passes t as a compile-time constant, so each instance is a single load-and-convert. */
AI __m512 load_kv(const void *base, sdpa_dtype t, ptrdiff_t off, __mmask16 m)
{
    /* a full chunk as a plain load, which the conversion can take as its memory operand */
    if (__builtin_constant_p(m) && m == 0xFFFF) {
        if (t == SDPA_F32) return _mm512_loadu_ps((const float *)base + off);
        if (t == SDPA_F16)
            return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + off)));
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + off)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
    if (t == SDPA_F32) return _mm512_maskz_loadu_ps(m, (const float *)base + off);
    if (t == SDPA_F16) return load_f16((const uint16_t *)base + off, m);
    return load_bf16((const uint16_t *)base + off, m);
}

/* One 16-element chunk (columns [c, c + 16), mask m) of the RP x NK score tile: each key chunk
   is converted once, in a register, and feeds all RP rows; a[PERM16(r * NK + i)] holds the
   16-lane partial sums of row r and key i. */
AI void score_dec_step(int RP, int NK, sdpa_dtype kt, __m512 *a, const float *const *qr,
                       const void *k, const ptrdiff_t *ko, size_t c, __mmask16 m,
                       dec_pf *pf)
{
    const size_t es = kt == SDPA_F32 ? 4 : 2;
    if (((c * es) & 63) == 0) dec_pf_step(pf); /* once per line of the rows */
    __m512 qv[DEC_MAX_ROWS];
    UNROLL for (int r = 0; r < RP; r++) qv[r] = _mm512_maskz_loadu_ps(m, qr[r] + c);
    UNROLL for (int i = 0; i < NK; i++) {
        const __m512 kv = load_kv(k, kt, ko[i] + (ptrdiff_t)c, m);
        UNROLL for (int r = 0; r < RP; r++)
            a[PERM16(r * NK + i)] = _mm512_fmadd_ps(qv[r], kv, a[PERM16(r * NK + i)]);
    }
}

/* The fast path of a full score tile (NK keys), one 64-byte line of each K row per step. The
   slow path (score_dec_step) keeps a row offset per key and a pointer per query row: more
   integers than registers, and the spills and reloads it then makes compete with the FMAs for
   issue ports. Here q is packed (qp, see pack_q_lines) and every K row is kc + i * ksb, whole
   lines of each row; a last partial line (masked, zero-padded q) is done without requests. */
AI void score_dec_fast(int RP, int NK, int kt, int plain, const float *qp, size_t d,
                       const char *kc, ptrdiff_t ksb, dec_pf *pf, __m512 *a)
{
    const size_t es = kt == SDPA_F32 ? 4 : 2, E = 64 / es; /* elements per line */
    const size_t lines = d / E;
    for (size_t g = 0; g < lines; g++, kc += 64, qp += RP * E) {
        if (plain)
            dec_pf_simple(pf, NK, g * (size_t)NK, plain == 1);
        else
            dec_pf_step(pf);
        UNROLL for (size_t h = 0; h < E / 16; h++) {
            __m512 qv[DEC_MAX_ROWS];
            UNROLL for (int r = 0; r < RP; r++) qv[r] = _mm512_load_ps(qp + (size_t)r * E + 16 * h);
            UNROLL for (int i = 0; i < NK; i++) {
                const __m512 kv = load_kv(kc + i * ksb, (sdpa_dtype)kt, (ptrdiff_t)(16 * h), 0xFFFF);
                UNROLL for (int r = 0; r < RP; r++)
                    a[PERM16(r * NK + i)] = _mm512_fmadd_ps(qv[r], kv, a[PERM16(r * NK + i)]);
            }
        }
    }
    /* the partial last line */
    for (size_t c = lines * E; c < d; c += 16, qp += 16) {
        const __mmask16 m = lanes(d - c);
        UNROLL for (int i = 0; i < NK; i++) {
            const __m512 kv = load_kv(kc + i * ksb, (sdpa_dtype)kt, (ptrdiff_t)(c - lines * E), m);
            UNROLL for (int r = 0; r < RP; r++)
                a[PERM16(r * NK + i)] = _mm512_fmadd_ps(_mm512_load_ps(qp + (size_t)r * E), kv,
                                                        a[PERM16(r * NK + i)]);
        }
    }
}

/* q rows [0, R) padded to RP (repeating the last), packed line by line for score_dec_fast: the E
   elements of line g of row r at qp[(g * RP + r) * E], the partial last line zero-padded. */
static void pack_q_lines(const float *const *qr, size_t RP, size_t d, size_t E, float *qp)
{
    const size_t lines = (d + E - 1) / E;
    for (size_t g = 0; g < lines; g++)
        for (size_t r = 0; r < RP; r++)
            for (size_t e = 0; e < E; e++) {
                const size_t c = g * E + e;
                qp[(g * RP + r) * E + e] = c < d ? qr[r][c] : 0.0f;
            }
}

/* Scores of rows [0, R) (padded to RP in {1, 2, 4, 8}: the padding rows repeat the last real
   row and are computed but never stored) against the keys [0, nk) of the block starting at key
   j0, into S[r][0..nk). RP * NK = 16 dot products per tile, so a single shuffle tree reduces
   them all and lane r * NK + i of its result is row r's score for key i: no horizontal sum per
   key, and (unlike a per-row pass) K is read and converted once for all rows. A tail tile
   repeats its last key (in bounds) in the missing lanes and stores only the real ones. */
AI void score_dec_block(int RP, int kt, const float *const *qr, size_t R, size_t d,
                        const void *k, ptrdiff_t ks, size_t j0, size_t nk, float *S, size_t lds,
                        dec_pf *pfs, const float *qp)
{
    const int NK = 16 / RP;
    const size_t es = kt == SDPA_F32 ? 4 : 2;
    const ptrdiff_t ksb = ks * (ptrdiff_t)es;
    /* the streams' lines of a tile's NK keys, spread over its steps (one per line of K) */
    const size_t steps = (d * es + 63) / 64, fsteps = d * es / 64;
    dec_pf pf = *pfs, pff = pf;
    dec_pf_rate(&pf, NK, steps);
    dec_pf_rate(&pff, NK, fsteps);
    for (size_t j = 0; j < nk; j += NK) {
        const size_t nv = min_sz(NK, nk - j);
        if (nv == (size_t)NK && fsteps) {
            __m512 a[16];
            UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
            const char *kc = (const char *)k + row_off(ks, j0 + j) * (ptrdiff_t)es;
            /* rows of whole lines (L = fsteps), end to end: NK lines of each live stream a step */
            const size_t tl = (size_t)NK * fsteps;
            const int pm = dec_pf_mode(&pf, fsteps, tl);
            if (pm == 1) {
                score_dec_fast(RP, NK, kt, 1, qp, d, kc, ksb, &pf, a);
                dec_pf_skip(&pf, tl, 1);
            } else if (pm == 2) {
                score_dec_fast(RP, NK, kt, 2, qp, d, kc, ksb, &pf, a);
                dec_pf_skip(&pf, tl, 0);
            } else {
                pff.s[0] = pf.s[0];
                pff.s[1] = pf.s[1];
                score_dec_fast(RP, NK, kt, 0, qp, d, kc, ksb, &pff, a);
                pf.s[0] = pff.s[0];
                pf.s[1] = pff.s[1];
            }
            const __m512 sv = reduce16(a);
            UNROLL for (int r = 0; r < RP; r++)
                if ((size_t)r < R)
                    _mm512_mask_storeu_ps(S + (size_t)r * lds + j - (size_t)r * NK,
                                          (__mmask16)(((1u << NK) - 1u) << (r * NK)), sv);
            continue;
        }
        ptrdiff_t ko[16];
        UNROLL for (int i = 0; i < NK; i++) ko[i] = row_off(ks, j0 + j + min_sz((size_t)i, nv - 1));
        __m512 a[16];
        UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
        size_t c = 0;
        _Pragma("GCC unroll 2")
        for (; c + 16 <= d; c += 16) score_dec_step(RP, NK, (sdpa_dtype)kt, a, qr, k, ko, c, 0xFFFF, &pf);
        if (c < d) score_dec_step(RP, NK, (sdpa_dtype)kt, a, qr, k, ko, c, lanes(d - c), &pf);
        const __m512 s = reduce16(a);
        const unsigned keys = (1u << nv) - 1u;
        /* row r's lanes [r * NK, r * NK + nv) go to S[r][j..); the pointer stays inside S */
        UNROLL for (int r = 0; r < RP; r++)
            if ((size_t)r < R)
                _mm512_mask_storeu_ps(S + (size_t)r * lds + j - (size_t)r * NK,
                                      (__mmask16)(keys << (r * NK)), s);
    }
    pfs->s[0] = pf.s[0];
    pfs->s[1] = pf.s[1];
}

#define SCORE_DEC_KT(RP)                                                                    \
    if (kt == SDPA_F32)                                                                     \
        score_dec_block(RP, SDPA_F32, qr, R, d, k, ks, j0, nk, S, lds, pf, qp);                      \
    else if (kt == SDPA_F16)                                                                \
        score_dec_block(RP, SDPA_F16, qr, R, d, k, ks, j0, nk, S, lds, pf, qp);                      \
    else                                                                                    \
        score_dec_block(RP, SDPA_BF16, qr, R, d, k, ks, j0, nk, S, lds, pf, qp);

static void score_avx512_decode(const float *const *qr, size_t R, size_t d, const void *k,
                                int kt, ptrdiff_t ks, size_t j0, size_t nk, float *S, size_t lds,
                                dec_pf *pf, const float *qp)
{
    if (R == 1) {
        SCORE_DEC_KT(1)
    } else if (R == 2) {
        SCORE_DEC_KT(2)
    } else if (R <= 4) {
        SCORE_DEC_KT(4)
    } else {
        SCORE_DEC_KT(8)
    }
}

/* NV vectors of a V row from element off (masks mk), converted. */
AI void pv_dec_load(int NV, __m512 *x, const void *v, int vt, ptrdiff_t off, const __mmask16 *mk)
{
    UNROLL for (int t = 0; t < NV; t++) x[t] = load_kv(v, (sdpa_dtype)vt, off + 16 * t, mk[t]);
}

/* acc[r][c0..) = alpha[r] * acc (alpha != NULL) + sum_{j in [ja, jb), j < nk[r]} S[r][j] *
   V[j][c0..) for r < R (nk non-decreasing in r), NV column vectors (masked past dv), V converted
   in registers, each converted vector feeding all R rows. Keys a row does not see are skipped
   rather than weighted by 0 (an inf or NaN there stays out of that row). */
AI void pv_dec_tile_p(int R, int NV, int full, int plain, float *acc, size_t dv, size_t c0,
                      const float *alpha, const float *S, const void *v, int vt, ptrdiff_t vs,
                      size_t j0, size_t ja, size_t jb, const size_t *nk, dec_pf *pfp)
{
    const size_t lds = DEC_LDS;
    dec_pf pf[1] = {*pfp}; /* a local copy, kept in registers */
    const size_t ev = vt == SDPA_F32 ? 4 : 2;
    const int PER = NV * (int)ev / 4;
    const size_t kmax = min_sz(jb, nk[R - 1]) - ja;
    __m512 a[DEC_MAX_ROWS][8];
    __mmask16 mk[8];
    /* full: all NV vectors lie inside dv, so every load is a plain one */
    UNROLL for (int t = 0; t < NV; t++)
        mk[t] = full ? (__mmask16)0xFFFF : c0 + 16 * t < dv ? lanes(dv - c0 - 16 * t) : 0;
    UNROLL for (int r = 0; r < R; r++) {
        UNROLL for (int t = 0; t < NV; t++)
            a[r][t] = _mm512_maskz_loadu_ps(mk[t], acc + r * dv + c0 + 16 * t);
        if (alpha) {
            const __m512 al = _mm512_set1_ps(alpha[r]);
            UNROLL for (int t = 0; t < NV; t++) a[r][t] = _mm512_mul_ps(a[r][t], al);
        }
    }
    size_t j = ja;
    const size_t jall = min_sz(jb, nk[0]), jmax = min_sz(jb, nk[R - 1]);
    _Pragma("GCC unroll 2")
    for (; j < jall; j++) {
        const ptrdiff_t off = row_off(vs, j0 + j) + (ptrdiff_t)c0;
        if (plain)
            dec_pf_simple(pf, PER, (j - ja) * (size_t)PER, plain == 1);
        else
            dec_pf_step(pf);
        __m512 x[8];
        pv_dec_load(NV, x, v, vt, off, mk);
        UNROLL for (int r = 0; r < R; r++) {
            const __m512 p = _mm512_set1_ps(S[r * lds + j]);
            UNROLL for (int t = 0; t < NV; t++) a[r][t] = _mm512_fmadd_ps(p, x[t], a[r][t]);
        }
    }
    for (; j < jmax; j++) {
        const ptrdiff_t off = row_off(vs, j0 + j) + (ptrdiff_t)c0;
        if (plain)
            dec_pf_simple(pf, PER, (j - ja) * (size_t)PER, plain == 1);
        else
            dec_pf_step(pf);
        __m512 x[8];
        pv_dec_load(NV, x, v, vt, off, mk);
        UNROLL for (int r = 1; r < R; r++) {
            if (j < nk[r]) {
                const __m512 p = _mm512_set1_ps(S[r * lds + j]);
                UNROLL for (int t = 0; t < NV; t++) a[r][t] = _mm512_fmadd_ps(p, x[t], a[r][t]);
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int t = 0; t < NV; t++)
            _mm512_mask_storeu_ps(acc + r * dv + c0 + 16 * t, mk[t], a[r][t]);
    if (plain) dec_pf_skip(pf, PER * kmax, plain == 1);
    *pfp = pf[0];
}

/* Full passes over rows of whole lines laid end to end request PER lines of each stream per
   key (a pass's share of a row, when both streams' rows are dv's size) with a pointer bump;
   the cases (two streams, one, the general cursor) are separate instances so that the plain
   ones keep their few pointers in registers. */
AI void pv_dec_tile(int R, int NV, int full, float *acc, size_t dv, size_t c0, const float *alpha,
                    const float *S, const void *v, int vt, ptrdiff_t vs, size_t j0, size_t ja,
                    size_t jb, const size_t *nk, dec_pf *pf)
{
    const size_t ev = vt == SDPA_F32 ? 4 : 2;
    const size_t PER = (size_t)NV * ev / 4;
    const size_t kmax = min_sz(jb, nk[R - 1]) - ja, L = dv * ev / 64;
    const int pm = full && dv % (16 * (size_t)NV) == 0 && (dv * ev) % 64 == 0
                       ? dec_pf_mode(pf, L, PER * kmax)
                       : 0;
    if (pm == 1)
        pv_dec_tile_p(R, NV, full, 1, acc, dv, c0, alpha, S, v, vt, vs, j0, ja, jb, nk, pf);
    else if (pm == 2)
        pv_dec_tile_p(R, NV, full, 2, acc, dv, c0, alpha, S, v, vt, vs, j0, ja, jb, nk, pf);
    else
        pv_dec_tile_p(R, NV, full, 0, acc, dv, c0, alpha, S, v, vt, vs, j0, ja, jb, nk, pf);
}

/* The value type is a template parameter so that each instance converts with one instruction
   sequence and no per-load branch. Keys go in groups of DEC_PVG, each group's V rows (a few KB)
   staying in L1 while every column chunk passes over them; alpha is applied by the first. NV
   (column vectors per pass) keeps R * NV accumulators at 8..24: at least 8 independent FMA
   chains to cover the FMA latency, few enough to stay in registers. */
#define PV_DEC_VT(R, NV, FULL)                                                              \
    if (vt == SDPA_F32)                                                                     \
        pv_dec_tile(R, NV, FULL, acc, dv, c0, al, S, v, SDPA_F32, vs, j0, ja, jb, nk, pf);   \
    else if (vt == SDPA_F16)                                                                \
        pv_dec_tile(R, NV, FULL, acc, dv, c0, al, S, v, SDPA_F16, vs, j0, ja, jb, nk, pf);   \
    else                                                                                    \
        pv_dec_tile(R, NV, FULL, acc, dv, c0, al, S, v, SDPA_BF16, vs, j0, ja, jb, nk, pf);
#define PV_DEC_CASE(R, NV)                                                                  \
    case R:                                                                                 \
        dec_pf_rate(pf, 1, (dv + 16 * NV - 1) / (16 * NV));                                 \
        for (size_t ja = 0; ja < nk[R - 1]; ja += DEC_PVG) {                                 \
            const float *al = ja == 0 ? alpha : NULL;                                       \
            const size_t jb = min_sz(ja + DEC_PVG, nk[R - 1]);                              \
            for (size_t c0 = 0; c0 < dv; c0 += 16 * NV) {                                    \
                if (c0 + 16 * NV <= dv) {                                                   \
                    PV_DEC_VT(R, NV, 1)                                                     \
                } else {                                                                    \
                    PV_DEC_VT(R, NV, 0)                                                     \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        break;

static void pv_avx512_decode(size_t R, float *acc, size_t dv, const float *alpha, const float *S,
                   const void *v, int vt, ptrdiff_t vs, size_t j0,
                   const size_t *nk, dec_pf *pf)
{
    switch (R) {
        PV_DEC_CASE(1, 8)
        PV_DEC_CASE(2, 8)
        PV_DEC_CASE(3, 4)
        PV_DEC_CASE(4, 4)
        PV_DEC_CASE(5, 4)
        PV_DEC_CASE(6, 4)
        PV_DEC_CASE(7, 2)
        PV_DEC_CASE(8, 2)
    default: break;
    }
}

/* The online-softmax step of one decode row over its n scores s[0..n) (n >= 1), p written in
   place; returns alpha. As softmax_lim, but with the fused kernel's cheaper exp for the p
   values (flushes below 2^-126, where the sum they join is at least 1). */
static float softmax_dec(float *s, size_t n, float *m, float *l)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx0 = ninf, mx1 = ninf;
    size_t i = 0;
    /* MAXPS returns its second operand when either is NaN: NaN scores are skipped here */
    for (; i + 32 <= n; i += 32) {
        mx0 = _mm512_max_ps(_mm512_loadu_ps(s + i), mx0);
        mx1 = _mm512_max_ps(_mm512_loadu_ps(s + i + 16), mx1);
    }
    for (; i < n; i += 16) mx0 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, lanes(n - i), s + i), mx0);
    const float bm = _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1));
    const float mo = *m;
    const float mn = bm > mo ? bm : mo;
    const __m512 msub = _mm512_set1_ps(mn == -INFINITY ? 0.0f : mn);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 p0 = exp512_ftz(_mm512_sub_ps(_mm512_loadu_ps(s + i), msub));
        const __m512 p1 = exp512_ftz(_mm512_sub_ps(_mm512_loadu_ps(s + i + 16), msub));
        _mm512_storeu_ps(s + i, p0);
        _mm512_storeu_ps(s + i + 16, p1);
        s0 = _mm512_add_ps(s0, p0);
        s1 = _mm512_add_ps(s1, p1);
    }
    for (; i < n; i += 16) {
        const __mmask16 mv = lanes(n - i);
        const __m512 p = _mm512_maskz_mov_ps(mv, exp512_ftz(_mm512_sub_ps(_mm512_maskz_loadu_ps(mv, s + i), msub)));
        _mm512_mask_storeu_ps(s + i, mv, p);
        s0 = _mm512_add_ps(s0, p);
    }
    const float alpha = mn == -INFINITY ? 1.0f : exp1(mo - mn);
    *l = alpha * *l + _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    *m = mn;
    return alpha;
}

static void rows_avx512_decode(const sdpa_rows *w)
{
    const size_t R = w->rows, d = w->d, dv = w->dv;
    const int other = R <= 2; /* the other array's stream, and short blocks (dec_pf) */
    const size_t NB = other ? min_sz(DEC_BLOCK_TWO, dec_block(w->block)) : dec_block(w->block);
    const size_t lds = DEC_LDS;
    float *ml = w->ws;               /* alpha [R] (the state stays in w->m, w->l) */
    float *S = ml + state_floats(R); /* [R][lds] */
    float *qpk = S + R * lds;        /* q packed by lines for score_dec_fast (aligned) */
    const int kt = (int)w->k_type, vt = (int)w->v_type;
    const float *qr[DEC_MAX_ROWS];
    for (size_t r = 0; r < DEC_MAX_ROWS; r++) qr[r] = w->q + min_sz(r, R - 1) * d;
    const size_t RP = R == 1 ? 1 : R == 2 ? 2 : R <= 4 ? 4 : 8;
    pack_q_lines(qr, RP, d, w->k_type == SDPA_F32 ? 16 : 32, qpk);
    const size_t ek = w->k_type == SDPA_F32 ? 4 : 2, ev = w->v_type == SDPA_F32 ? 4 : 2;
    const size_t kend = min_sz(w->kv_end, w->kv_limit[R - 1]); /* keys past it are never read */
    {
        /* the steady-state streams run DEC_PF keys ahead; the call's first keys are requested
           here, at once, so that they too are on their way before they are needed (later
           requests are spread among the arithmetic: a burst of a whole block's lines would
           stall on the few line-fill buffers while no arithmetic runs) */
        sdpa_pf_rows k0 = dec_rows(w->k, w->k_stride, ek, d * ek, w->kv_begin, DEC_PF, kend);
        sdpa_pf_rows v0 = dec_rows(w->v, w->v_stride, ev, dv * ev, w->kv_begin, DEC_PF, kend);
        sdpa_pf_rows_next(&k0, (int)k0.n);
        sdpa_pf_rows_next(&v0, (int)v0.n);
    }

    for (size_t j0 = w->kv_begin; j0 < w->kv_end; j0 += NB) {
        const size_t nb = min_sz(NB, w->kv_end - j0);
        /* keys past the last row's limit are never needed (rows are ordered by limit) */
        const size_t nk = min_sz(nb, w->kv_limit[R - 1] - j0);
        /* the score loop requests K DEC_PF keys ahead (and, for R <= 2, this block's V rows);
           the P·V loop V DEC_PF keys ahead (and, for R <= 2, the next block's K rows); never a
           key at or past kend (see dec_pf) */
        dec_pf pf = {{dec_rows(w->k, w->k_stride, ek, d * ek, j0 + DEC_PF, nk, kend),
                      dec_rows(w->v, w->v_stride, ev, dv * ev, j0, other ? nk : 0, kend)},
                     {0, 0}};
        score_avx512_decode(qr, R, d, w->k, kt, w->k_stride, j0, nk, S, lds, &pf, qpk);
        size_t valid[DEC_MAX_ROWS];
        for (size_t r = 0; r < R; r++) {
            const size_t lim = w->kv_limit[r];
            valid[r] = lim <= j0 ? 0 : min_sz(nk, lim - j0);
            /* a row that sees none of the block keeps its state: alpha 1 */
            ml[r] = valid[r] ? softmax_dec(S + r * lds, valid[r], &w->m[r], &w->l[r]) : 1.0f;
        }
        pf.s[0] = dec_rows(w->v, w->v_stride, ev, dv * ev, j0 + DEC_PF, nk, kend);
        pf.s[1] = dec_rows(w->k, w->k_stride, ek, d * ek, j0 + NB, other ? NB : 0, kend);
        pv_avx512_decode(R, w->acc, dv, ml, S, w->v, vt, w->v_stride, j0, valid, &pf);
    }
}

/* ---- many rows --------------------------------------------------------------------------- */

#define PF_LINES 8 /* hint lines requested per score tile (sdpa_pf_lines) */

/* Sᵀ tile: st[i][0..16*NV) = sum_c k[i][c] * qt[c][0..16*NV) for MR keys i (key index j + i
   within the block). qt is a Qᵀ panel [d][pw]; each step broadcasts MR key elements against NV
   query vectors. With masking on, a key at or past a lane's limit lim[] becomes -inf (whatever
   it computed, NaN included). The tile's maximum joins the panel's running maximum mx (NaN
   scores skipped: MAXPS returns the second operand, the running maximum, for a NaN). */
AI void score_t_tile(int MR, int NV, const float *qt, size_t pw, const float *k, ptrdiff_t ks,
                     size_t d, float *st, size_t j, int masked, const int32_t *lim, float *mx)
{
    __m512 a[SC_MR][4];
    const float *kr[SC_MR];
    UNROLL for (int i = 0; i < MR; i++) {
        kr[i] = k + i * ks;
        UNROLL for (int t = 0; t < NV; t++) a[i][t] = _mm512_setzero_ps();
    }
    _Pragma("GCC unroll 2")
    for (size_t c = 0; c < d; c++) {
        __m512 qv[4];
        UNROLL for (int t = 0; t < NV; t++) qv[t] = _mm512_load_ps(qt + c * pw + 16 * t);
        UNROLL for (int i = 0; i < MR; i++) {
            const __m512 kv = _mm512_set1_ps(kr[i][c]);
            UNROLL for (int t = 0; t < NV; t++) a[i][t] = _mm512_fmadd_ps(kv, qv[t], a[i][t]);
        }
    }
    if (masked) {
        const __m512 ninf = _mm512_set1_ps(-INFINITY);
        UNROLL for (int t = 0; t < NV; t++) {
            const __m512i L = _mm512_loadu_si512(lim + 16 * t);
            UNROLL for (int i = 0; i < MR; i++) {
                const __mmask16 in = _mm512_cmpgt_epi32_mask(L, _mm512_set1_epi32((int32_t)(j + i)));
                a[i][t] = _mm512_mask_mov_ps(ninf, in, a[i][t]);
            }
        }
    }
    UNROLL for (int t = 0; t < NV; t++) {
        __m512 m = _mm512_load_ps(mx + 16 * t);
        UNROLL for (int i = 0; i < MR; i++) {
            _mm512_store_ps(st + i * pw + 16 * t, a[i][t]);
            m = _mm512_max_ps(a[i][t], m);
        }
        _mm512_store_ps(mx + 16 * t, m);
    }
}

#define SCORE_T_NV(MR)                                                                      \
    case MR:                                                                                \
        switch (nv) {                                                                       \
        case 1: score_t_tile(MR, 1, qt, pw, k, ks, d, st, j, 1, lim, mx); break;            \
        case 2: score_t_tile(MR, 2, qt, pw, k, ks, d, st, j, 1, lim, mx); break;            \
        case 3: score_t_tile(MR, 3, qt, pw, k, ks, d, st, j, 1, lim, mx); break;            \
        default: score_t_tile(MR, 4, qt, pw, k, ks, d, st, j, 1, lim, mx); break;           \
        }                                                                                   \
        break;

/* Every tile shape other than the full unmasked one (key tails, narrow panels, the diagonal). */
static void score_avx512_6x64(size_t mr, size_t nv, const float *qt, size_t pw, const float *k,
                             ptrdiff_t ks, size_t d, float *st, size_t j, const int32_t *lim,
                             float *mx)
{
    switch (mr) {
        SCORE_T_NV(1)
        SCORE_T_NV(2)
        SCORE_T_NV(3)
        SCORE_T_NV(4)
        SCORE_T_NV(5)
        SCORE_T_NV(6)
    default: break;
    }
}

/* The whole Sᵀ of a panel: keys [0, nk) (rows k, stride ks) against its pw rows, masked by the
   rows' limits lim[], with the row maxima left in mx[0..pw) (-inf where nothing is seen). */
static void score_t(const float *qt, size_t pw, const float *k, ptrdiff_t ks, size_t d,
                    size_t nk, float *st, const int32_t *lim, float *mx, sdpa_pf_cursor *pf)
{
    const size_t nv = pw / 16;
    /* limits are non-decreasing over the panel: keys below the first row's need no mask */
    const size_t jfree = (size_t)lim[0];
    for (size_t t = 0; t < pw; t += 16) _mm512_store_ps(mx + t, _mm512_set1_ps(-INFINITY));
    size_t j = 0;
    if (nv == PANEL / 16)
        for (; j + SC_MR <= nk && j + SC_MR <= jfree; j += SC_MR)
        {
            score_t_tile(SC_MR, PANEL / 16, qt, pw, k + (ptrdiff_t)j * ks, ks, d, st + j * pw, j, 0, lim,
                         mx);
            sdpa_pf_lines(pf, PF_LINES);
        }
    for (; j < nk; j += SC_MR) {
        /* on the diagonal, a 16-row vector whose last row's limit is at or before key j sees
           none of the tile: skipped (its softmax stops at that limit and never reads here) */
        size_t t0 = 0;
        while ((size_t)lim[16 * t0 + 15] <= j) t0++; /* ends: the panel's last limit is nk */
        score_avx512_6x64(min_sz(SC_MR, nk - j), nv - t0, qt + 16 * t0, pw,
                         k + (ptrdiff_t)j * ks, ks, d, st + j * pw + 16 * t0, j, lim + 16 * t0,
                         mx + 16 * t0);
        sdpa_pf_lines(pf, PF_LINES);
    }
}

/* O tile: acc[i][c0..c0+64) (= alpha[i] * acc first when alpha != NULL) += sum_j P[j][i] *
   V[j][c0..) for MR rows i and keys j < nk[i] (non-decreasing in i); columns past dv masked
   off. A row's excluded keys are skipped, not multiplied by p = 0, so that an inf or NaN in a
   value row that only later rows see cannot reach it. */
AI void pv_t_tile(int MR, int full, float *acc, size_t dv, size_t c0, const float *alpha,
                  const float *P, size_t pw, const float *v, ptrdiff_t vs, const size_t *nk)
{
    __m512 a[PV_MR][4];
    __mmask16 mk[4];
    /* full: all 64 columns inside dv, every load a plain one */
    UNROLL for (int t = 0; t < 4; t++)
        mk[t] = full ? (__mmask16)0xFFFF : c0 + 16 * t < dv ? lanes(dv - c0 - 16 * t) : 0;
    UNROLL for (int i = 0; i < MR; i++) {
        UNROLL for (int t = 0; t < 4; t++)
            a[i][t] = _mm512_maskz_loadu_ps(mk[t], acc + i * dv + c0 + 16 * t);
        if (alpha) {
            const __m512 al = _mm512_set1_ps(alpha[i]);
            UNROLL for (int t = 0; t < 4; t++) a[i][t] = _mm512_mul_ps(a[i][t], al);
        }
    }
    /* pointers stepped per key (no index multiply), the bound in a register: the integer
       work shares ports with the 512-bit FMAs */
    const float *vp = v + c0, *pp = P;
    size_t j = 0;
    const size_t n0 = nk[0], n1 = nk[MR - 1];
    _Pragma("GCC unroll 2")
    for (; j < n0; j++, vp += vs, pp += pw) {
        __m512 x[4];
        UNROLL for (int t = 0; t < 4; t++)
            x[t] = full ? _mm512_loadu_ps(vp + 16 * t) : _mm512_maskz_loadu_ps(mk[t], vp + 16 * t);
        UNROLL for (int i = 0; i < MR; i++) {
            const __m512 p = _mm512_set1_ps(pp[i]);
            UNROLL for (int t = 0; t < 4; t++) a[i][t] = _mm512_fmadd_ps(p, x[t], a[i][t]);
        }
    }
    for (; j < n1; j++) { /* the diagonal: some rows stop earlier */
        __m512 x[4];
        UNROLL for (int t = 0; t < 4; t++)
            x[t] = _mm512_maskz_loadu_ps(mk[t], v + (ptrdiff_t)j * vs + (ptrdiff_t)(c0 + 16 * t));
        UNROLL for (int i = 1; i < MR; i++) {
            if (j < nk[i]) {
                const __m512 p = _mm512_set1_ps(P[j * pw + i]);
                UNROLL for (int t = 0; t < 4; t++) a[i][t] = _mm512_fmadd_ps(p, x[t], a[i][t]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++)
        UNROLL for (int t = 0; t < 4; t++)
            _mm512_mask_storeu_ps(acc + i * dv + c0 + 16 * t, mk[t], a[i][t]);
}

static void pv_avx512_6x64(size_t mr, float *acc, size_t dv, size_t c0, const float *alpha,
                     const float *P, size_t pw, const float *v, ptrdiff_t vs, const size_t *nk)
{
    if (mr == PV_MR && c0 + 64 <= dv) {
        pv_t_tile(PV_MR, 1, acc, dv, c0, alpha, P, pw, v, vs, nk);
        return;
    }
    switch (mr) {
    case 1: pv_t_tile(1, 0, acc, dv, c0, alpha, P, pw, v, vs, nk); break;
    case 2: pv_t_tile(2, 0, acc, dv, c0, alpha, P, pw, v, vs, nk); break;
    case 3: pv_t_tile(3, 0, acc, dv, c0, alpha, P, pw, v, vs, nk); break;
    case 4: pv_t_tile(4, 0, acc, dv, c0, alpha, P, pw, v, vs, nk); break;
    case 5: pv_t_tile(5, 0, acc, dv, c0, alpha, P, pw, v, vs, nk); break;
    case 6: pv_t_tile(6, 0, acc, dv, c0, alpha, P, pw, v, vs, nk); break;
    default: break;
    }
}

/* The online softmax of one 16-row vector of a panel's Sᵀ (stride pw), keys [0, nk), whose
   masked entries are already -inf and whose block maxima are bm (16 lanes). m, l, alpha: 16
   lanes in memory, updated. */
static void softmax_t16(float *st, size_t pw, size_t nk, const float *bm, float *m, float *l,
                        float *alpha)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __m512 mo = _mm512_loadu_ps(m);
    /* NaN-free: bm skipped NaN scores and m is never NaN */
    const __m512 mn = _mm512_max_ps(_mm512_load_ps(bm), mo);
    /* a lane that has seen only -inf subtracts 0: p = exp(-inf) = 0, alpha 1, no NaN */
    const __mmask16 dead = _mm512_cmpeq_ps_mask(mn, ninf);
    const __m512 msub = _mm512_mask_mov_ps(mn, dead, _mm512_setzero_ps());
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    size_t j = 0;
    for (; j + 2 <= nk; j += 2) {
        const __m512 p0 = exp512_ftz(_mm512_sub_ps(_mm512_load_ps(st + j * pw), msub));
        const __m512 p1 = exp512_ftz(_mm512_sub_ps(_mm512_load_ps(st + (j + 1) * pw), msub));
        _mm512_store_ps(st + j * pw, p0);
        _mm512_store_ps(st + (j + 1) * pw, p1);
        s0 = _mm512_add_ps(s0, p0);
        s1 = _mm512_add_ps(s1, p1);
    }
    if (j < nk) {
        const __m512 p0 = exp512_ftz(_mm512_sub_ps(_mm512_load_ps(st + j * pw), msub));
        _mm512_store_ps(st + j * pw, p0);
        s0 = _mm512_add_ps(s0, p0);
    }
    const __m512 al = _mm512_mask_mov_ps(exp512_ftz(_mm512_sub_ps(mo, mn)), dead,
                                         _mm512_set1_ps(1.0f));
    _mm512_storeu_ps(alpha, al);
    _mm512_storeu_ps(l, _mm512_add_ps(_mm512_mul_ps(al, _mm512_loadu_ps(l)), _mm512_add_ps(s0, s1)));
    _mm512_storeu_ps(m, mn);
}

/* In-register transpose of a 16 x 16 block: r[i] lane c becomes r[c] lane i. 32-bit, then 64-bit
   unpacks within 128-bit lanes leave u[4g + j] lane k holding column 4k + j of rows 4g..4g+3;
   two rounds of 128-bit lane shuffles then gather each column's four row groups. */
AI void transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    UNROLL for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    UNROLL for (int g = 0; g < 16; g += 4) {
        const __m512d a = _mm512_castps_pd(t[g]), b = _mm512_castps_pd(t[g + 1]);
        const __m512d c = _mm512_castps_pd(t[g + 2]), e = _mm512_castps_pd(t[g + 3]);
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
    }
    UNROLL for (int j = 0; j < 4; j++) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

/* Qᵀ panels from the packed rows q[R][d]: panel p0 (width pw = min(PANEL, Rp - p0)) is
   qt[p0 * d + c * pw + r], rows R..Rp zero. 16 x 16 blocks through registers: every load and
   store a whole line (a strided scalar copy touched a new line per element). */
static void pack_qt(const float *q, size_t R, size_t d, size_t Rp, float *qt)
{
    for (size_t p0 = 0; p0 < Rp; p0 += PANEL) {
        const size_t pw = min_sz(PANEL, Rp - p0);
        float *qp = qt + p0 * d;
        for (size_t rb = 0; rb < pw; rb += 16) {
            const size_t r0 = p0 + rb;
            for (size_t c = 0; c < d; c += 16) {
                const __mmask16 mc = lanes(d - c);
                __m512 x[16];
                UNROLL for (int i = 0; i < 16; i++)
                    x[i] = r0 + i < R ? _mm512_maskz_loadu_ps(mc, q + (r0 + i) * d + c)
                                      : _mm512_setzero_ps();
                transpose16(x);
                const size_t nc = min_sz(16, d - c);
                UNROLL for (int i = 0; i < 16; i++)
                    if ((size_t)i < nc) _mm512_store_ps(qp + (c + i) * pw + rb, x[i]);
            }
        }
    }
}

static void rows_avx512_prefill(const sdpa_rows *w)
{
    const size_t R = w->rows, d = w->d, dv = w->dv, Rp = round16(R);
    const size_t dp = round16(d), dvp = round16(dv);
    const size_t NB = big_block(w->block);
    float *mw = w->ws, *lw = mw + Rp, *aw = lw + Rp;
    int32_t *lim = (int32_t *)(void *)(aw + Rp);
    float *qt = mw + state_floats(R); /* panels [R/64][d][64], the last one narrower */
    float *st = qt + Rp * d;          /* [NB][PANEL] */
    float *kc = st + NB * PANEL;      /* [NB][dp] */
    float *vc = kc + NB * dp;         /* [NB][dvp] */
    float *bm = vc + NB * dvp;        /* [PANEL] block maxima of a panel's rows */
    sdpa_pf_cursor pfc = sdpa_pf_begin(w);

    /* Pack Qᵀ once per call (padding rows are zero), load the row state (padding rows: dead). */
    pack_qt(w->q, R, d, Rp, qt);
    for (size_t r = 0; r < Rp; r++) {
        mw[r] = r < R ? w->m[r] : -INFINITY;
        lw[r] = r < R ? w->l[r] : 0.0f;
    }

    /* blocks in decreasing order when the driver asks (sdpa_rows.reverse) */
    const size_t nblk = (w->kv_end - w->kv_begin + NB - 1) / NB;
    for (size_t bi = 0; bi < nblk; bi++) {
        const size_t j0 = w->kv_begin + (w->reverse ? nblk - 1 - bi : bi) * NB;
        const size_t nb = min_sz(NB, w->kv_end - j0);
        for (size_t r = 0; r < Rp; r++) {
            /* padding rows copy the last real row's limit, keeping limits non-decreasing */
            const size_t L = w->kv_limit[r < R ? r : R - 1];
            lim[r] = (int32_t)(L <= j0 ? 0 : min_sz(nb, L - j0));
        }
        const float *kr, *vr;
        ptrdiff_t ks, vs;
        /* the last row sees the most keys: nothing past its limit is converted or read */
        const size_t nmax = (size_t)lim[R - 1];
        if (w->k_type == SDPA_F32) {
            kr = (const float *)w->k + row_off(w->k_stride, j0);
            ks = w->k_stride;
        } else {
            convert_rows(w->k, w->k_type, w->k_stride, j0, nmax, d, kc, dp);
            kr = kc;
            ks = (ptrdiff_t)dp;
        }
        if (w->v_type == SDPA_F32) {
            vr = (const float *)w->v + row_off(w->v_stride, j0);
            vs = w->v_stride;
        } else {
            convert_rows(w->v, w->v_type, w->v_stride, j0, nmax, dv, vc, dvp);
            vr = vc;
            vs = (ptrdiff_t)dvp;
        }

        for (size_t p0 = 0; p0 < Rp; p0 += PANEL) {
            const size_t pw = min_sz(PANEL, Rp - p0);
            const size_t rl = min_sz(R, p0 + pw) - 1; /* the panel's last real row */
            const size_t np = (size_t)lim[rl];          /* keys any row of the panel sees */
            if (np == 0) continue;                      /* nothing seen: state unchanged */
            score_t(qt + p0 * d, pw, kr, ks, d, np, st, lim + p0, bm, &pfc);
            /* a vector's keys stop at its last row's limit: P past a row's limit is never read */
            for (size_t t = 0; t < pw; t += 16)
                softmax_t16(st + t, pw, min_sz(np, (size_t)lim[p0 + t + 15]), bm + t, mw + p0 + t,
                            lw + p0 + t, aw + p0 + t);
            /* P·V over the panel's real rows, keys in L1-sized sub-blocks */
            const size_t nrow = rl + 1 - p0;
            for (size_t kb = 0; kb < np; kb += PV_KB) {
                for (size_t c0 = 0; c0 < dv; c0 += 64) {
                    for (size_t i = 0; i < nrow; i += PV_MR) {
                        const size_t mr = min_sz(PV_MR, nrow - i);
                        size_t nk[PV_MR]; /* keys of this sub-block each row sees */
                        for (size_t t = 0; t < mr; t++) {
                            const size_t li = (size_t)lim[p0 + i + t];
                            nk[t] = li <= kb ? 0 : min_sz(PV_KB, li - kb);
                        }
                        /* no key seen at all: kb > 0, or kb == 0 and alpha = 1, p = 0 */
                        if (nk[mr - 1] == 0) continue;
                        pv_avx512_6x64(mr, w->acc + (p0 + i) * dv, dv, c0, kb == 0 ? aw + p0 + i : NULL,
                                 st + kb * pw + i, pw, vr + (ptrdiff_t)kb * vs, vs, nk);
                    }
                }
            }
        }
    }
    for (size_t r = 0; r < R; r++) {
        w->m[r] = mw[r];
        w->l[r] = lw[r];
    }
}

static void rows_avx512(const sdpa_rows *w)
{
    if (w->rows <= DEC_MAX_ROWS)
        rows_avx512_decode(w);
    else
        rows_avx512_prefill(w);
}

const sdpa_kernels sdpa_kernels_avx512 = {
    .score_f32 = score_f32_avx512,
    .softmax_online_f32 = softmax_online_f32_avx512,
    .accumulate_f32 = accumulate_f32_avx512,
    .exp_f32 = exp_f32_avx512,
    .exp_max_ulp = EXP_AVX512_MAX_ULP,
    .rows = rows_avx512,
    .ws_floats = ws_floats_avx512,
};
