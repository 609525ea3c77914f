/* floor_loop.h -- the loop of bench_floor_<isa> (bench.h), written once for both x86 widths: a
 * peak_<isa>.c includes it after defining, for its ISA,
 *   FLOOR_FN          the function's name
 *   FLOOR_VEC, FLOOR_W        the f32 vector type and its lanes
 *   FLOOR_ZERO(), FLOOR_SET1(x), FLOOR_LOAD(p), FLOOR_STORE(p, x), FLOOR_FMA(a, b, c),
 *   FLOOR_ADD(a, b), FLOOR_SUM(x)   (a, b, c: a * b + c; FLOOR_SUM: the lanes' sum)
 *   FLOOR_CVT(p, bf16)        FLOOR_W 16-bit elements at p as f32 (f16, or bf16 when bf16)
 *   FLOOR_NA                  score accumulators (registers left beside the rows' q)
 *   FLOOR_NV1, _NV2, _NV4, _NV7   vectors per P·V pass at 1, 2, 4 and 7 rows
 *
 * Per key, each FLOOR_W elements of its K row converted once feeding R FMAs, and each of its V
 * row likewise, with nothing else: no reductions, no softmax, no bookkeeping. Keys go in turns
 * of min(page, 32): a turn's K rows, then its V rows in passes of FLOOR_W * NV columns, each
 * pass loading and storing its R * NV accumulators, as a P·V tile does. At a page's start the
 * first line of the next page's K and V rows is requested (the scattered read's trick), and
 * while a turn's K rows are converted, every line of the K and V rows FLOOR_PF keys ahead in the
 * same page, into L2 (the fastest distance and hint tried). */
#include <stddef.h>
#include <stdint.h>

#define FLOOR_PF 64

static inline __attribute__((always_inline)) float floor_run(const uint16_t *const *kp,
                                                             const uint16_t *const *vp, size_t page,
                                                             size_t n, size_t d, const int bf16,
                                                             const int R, const int NV)
{
    const size_t T = page < 32 ? page : 32;
    FLOOR_VEC q[8], sk = FLOOR_ZERO();
    float acc[8 * 128] __attribute__((aligned(64))) = {0};
    for (int r = 0; r < 8; r++) q[r] = FLOOR_SET1(0.125f * (float)(r + 1));
    for (size_t j = 0; j < n; j += T) {
        const size_t pg = j / page, o = j - pg * page, nt = n - j < T ? n - j : T;
        const uint16_t *k = kp[pg] + o * d, *v = vp[pg] + o * d;
        if (o == 0 && (pg + 1) * page < n) {
            _mm_prefetch((const char *)kp[pg + 1], _MM_HINT_T0);
            _mm_prefetch((const char *)vp[pg + 1], _MM_HINT_T0);
        }
        FLOOR_VEC a[FLOOR_NA];
        for (int i = 0; i < FLOOR_NA; i++) a[i] = FLOOR_ZERO();
        for (size_t i = 0; i < nt; i++)
            for (size_t c = 0; c < d; c += FLOOR_W) {
                if ((c & 31) == 0 && o + i + FLOOR_PF < page && j + i + FLOOR_PF < n) {
                    _mm_prefetch((const char *)(k + (i + FLOOR_PF) * d + c), _MM_HINT_T1);
                    _mm_prefetch((const char *)(v + (i + FLOOR_PF) * d + c), _MM_HINT_T1);
                }
                const FLOOR_VEC x = FLOOR_CVT(k + i * d + c, bf16);
                for (int r = 0; r < R; r++) {
                    const int ix = (int)((c / FLOOR_W * (size_t)R + (size_t)r) % FLOOR_NA);
                    a[ix] = FLOOR_FMA(q[r], x, a[ix]);
                }
            }
        for (int i = 0; i < FLOOR_NA; i++) sk = FLOOR_ADD(sk, a[i]);
        for (size_t c0 = 0; c0 < d; c0 += FLOOR_W * (size_t)NV) {
            FLOOR_VEC b[8][8];
            for (int r = 0; r < R; r++)
                for (int t = 0; t < NV; t++) b[r][t] = FLOOR_LOAD(acc + r * 128 + c0 + FLOOR_W * t);
            for (size_t i = 0; i < nt; i++)
                for (int t = 0; t < NV; t++) {
                    const FLOOR_VEC x = FLOOR_CVT(v + i * d + c0 + FLOOR_W * (size_t)t, bf16);
                    for (int r = 0; r < R; r++) b[r][t] = FLOOR_FMA(q[r], x, b[r][t]);
                }
            for (int r = 0; r < R; r++)
                for (int t = 0; t < NV; t++) FLOOR_STORE(acc + r * 128 + c0 + FLOOR_W * t, b[r][t]);
        }
    }
    float s = FLOOR_SUM(sk);
    for (size_t i = 0; i < (size_t)R * 128; i++) s += acc[i];
    return s;
}

float FLOOR_FN(const uint16_t *const *kp, const uint16_t *const *vp, size_t page, size_t n,
               size_t d, int bf16, int rows)
{
    if (d != 128 || page == 0) return 0; /* the bench's head size: whole passes for every NV */
#define FLOOR_ROWS(B)                                                                              \
    switch (rows) {                                                                                \
    case 1:                                                                                        \
        return floor_run(kp, vp, page, n, d, B, 1, FLOOR_NV1);                                     \
    case 2:                                                                                        \
        return floor_run(kp, vp, page, n, d, B, 2, FLOOR_NV2);                                     \
    case 4:                                                                                        \
        return floor_run(kp, vp, page, n, d, B, 4, FLOOR_NV4);                                     \
    default:                                                                                       \
        return floor_run(kp, vp, page, n, d, B, 7, FLOOR_NV7);                                     \
    }
    if (bf16) FLOOR_ROWS(1) /* one instance per type and row count: constant loops */
    FLOOR_ROWS(0)
#undef FLOOR_ROWS
}
