/* decode_q.h -- the x86 decode path for block formats: rows_loop.h's hooks, for avx2 and avx512 */
/*
 * Included once by a kernel file after its ISA header, with defined:
 *   SDPA_QD_FN      the entry to define (void SDPA_QD_FN(const sdpa_rows *w))
 *   SDPA_QD_SOFTMAX(s, nv, nb, m, l)  the ISA's fused online-softmax step (rows_loop.h's
 *                   loop_softmax contract)
 *   SDPA_QD_VNNI    1: int8 dot products by vpdpbusd (AVX512-VNNI + VL), 0: pmaddubsw + pmaddwd
 * and optionally, to spread the path over two translation units (each compiles in half the
 * time): SDPA_QD_PART 1 (only the score instances, external, named with the prefix
 * SDPA_QD_PFX) or 2 (everything else, the score instances declared); SDPA_QD_FN and
 * SDPA_QD_SOFTMAX are needed by part 2 only. Without it, one unit has it all.
 * Few rows read K and V once, in place: each block of a key row is converted once, in
 * registers, and feeds every row (decode_q_tiles.h). A quantized value enters exactly as sdpa.h
 * states it (decode_q_format.h). Fast scores (sdpa_rows.qq) take the exact int32 dot product of
 * a query block's quants with the key block's, a tile of keys at once with the keys in lanes,
 * then scale it by qd * d_k in f32 (and add qd * m_k * sum(q) for q4_1 and q5_1). One function per
 * storage type (the element types share one) and row count, for scores and for P·V, each block's
 * decode inlined into the shared arithmetic. 256-bit vectors on both ISAs: the block is 32
 * elements, one ymm of bytes, and the decode is bound by memory and conversions, not by the vector
 * width (the avx512 files use 512-bit forms where two blocks fill a vector).
 */
/* The path's tuning comes from the ISA header, which reports it (sdpa_tuning.decode_q_*). */
#if !defined(DECODE_Q_BLOCK) || !defined(DECODE_Q_PF_KEYS) || !defined(DECODE_Q_PF_PAGED) ||       \
    !defined(DECODE_Q_PV_KB)
#error "the ISA header defines DECODE_Q_BLOCK, DECODE_Q_PF_KEYS, DECODE_Q_PF_PAGED, DECODE_Q_PV_KB"
#endif
/* The scratch floats of this path: QD_WS_FLOATS(R, d) (decode_q_tiles.h). */
#include "decode_q_tiles.h"

/* --- the hooks of the generic loop (rows_loop.h) ------------------------------------------- */

typedef struct qd_ctx {
    const int32_t *qo; /* fast scores: -qd_fast_off sum(q) of each row's blocks, [rows][d / 32] */
    const float *qm;   /* fast scores, K in q4_1 or q5_1: qd sum(q), the same layout */
    int whole; /* a paged unit's blocks come whole to the hooks, rows found through the pages */
} qd_ctx;

static inline size_t loop_begin(qd_ctx *c, const sdpa_rows *w, float **S, size_t *lds,
                                float **alpha)
{
    const size_t B = w->block == 0 || w->block > DECODE_Q_BLOCK ? DECODE_Q_BLOCK : w->block;
    *lds = sdpa_round16(B);
    *S = w->ws;
    *alpha = *S + w->rows * *lds;
    c->qo = NULL;
    c->qm = NULL;
    /* pages of a power of two keys, at most a P·V sub-block: the tiles read a whole block through
       them (a key's page a shift away, qd_key_row) and request rows ahead across pages, rather
       than a call per page that starts its requests afresh; longer pages keep the call per page,
       whose rows cost no lookup */
    const size_t ps = w->piece_of ? w->piece_of->pages->size : 0;
    c->whole = ps && ps <= DECODE_Q_PV_KB && (ps & (ps - 1)) == 0;
    /* fast scores (qd_scores_fast_*): -qd_fast_off sum(q) of each row's blocks as int32, and
       qd sum(q) for q4_1 and q5_1, both [rows][d / 32], in the scratch past S and alpha */
    if (w->qq) {
        const size_t nbk = w->d / SDPA_QK;
        const int32_t off = qd_fast_off(w->k_type);
        int32_t *qo = (int32_t *)(void *)(*alpha + sdpa_round16(w->rows));
        float *qm = *alpha + sdpa_round16(w->rows) + sdpa_round16(w->rows * nbk);
        for (size_t r = 0; r < w->rows; r++)
            for (size_t b = 0; b < nbk; b++) {
                int32_t sum = 0;
                for (size_t e = 0; e < SDPA_QK; e++) sum += w->qq[r * w->d + b * SDPA_QK + e];
                qo[r * nbk + b] = -off * sum;
                qm[r * nbk + b] = w->qd[r * nbk + b] * (float)sum;
            }
        c->qo = qo;
        c->qm = qm;
    }
    const size_t kend = sdpa_min(w->kv_end, w->kv_limit[w->rows - 1]);
    if (kend > w->kv_begin) { /* w is never paged here: rows_loop.h begins on a page's piece */
        const size_t n = sdpa_min(DECODE_Q_PF_KEYS, kend - w->kv_begin);
        qd_request_rows(qd_key_row(w, 0, w->k_type, w->kv_begin), qd_stride_bytes(w, 0, w->k_type),
                        n, (size_t)sdpa_off_bytes(w->k_type, (ptrdiff_t)w->d));
        qd_request_rows(qd_key_row(w, 1, w->v_type, w->kv_begin), qd_stride_bytes(w, 1, w->v_type),
                        n, (size_t)sdpa_off_bytes(w->v_type, (ptrdiff_t)w->dv));
    }
    return B;
}

/* An element type (f32, f16, bf16) as one of three constants: its shapes then hold none of the
   block formats' paths. */
static inline sdpa_dtype qd_el(sdpa_dtype t)
{
    return t == SDPA_F32 ? SDPA_F32 : t == SDPA_F16 ? SDPA_F16 : SDPA_BF16;
}

/* One function per shape (the storage type, or an element type; the row count), called once per
   block, for loop_scores and loop_values. */
typedef void qd_scores_fn(const sdpa_rows *w, const int32_t *qo, const float *qm, size_t j0,
                          size_t nb, float *S, size_t lds);
typedef void qd_values_fn(const sdpa_rows *w, float *acc, const float *al, const float *P,
                          size_t lds, size_t j0, size_t n, size_t kend);
#ifndef SDPA_QD_PART
#define SDPA_QD_PART 0
#define SDPA_QD_PFX
#define QD_SCORES_LINK SDPA_NOINLINE
#else
#define QD_SCORES_LINK __attribute__((noinline)) /* external: the other part calls them */
#endif
#define QD_CAT2(a, b) a##b
#define QD_CAT(a, b)  QD_CAT2(a, b)
#define QD_PN(x)      QD_CAT(SDPA_QD_PFX, x) /* an instance's name */
#define QD_SCORES_HEAD(N, R)                                                                       \
    void QD_PN(qd_scores_##N##_##R)(const sdpa_rows *w, const int32_t *qo, const float *qm,        \
                                    size_t j0, size_t nb, float *S, size_t lds)
#define QD_SCORES_FN(N, KT, R)                                                                     \
    QD_SCORES_LINK QD_SCORES_HEAD(N, R) { qd_scores_r(R, KT, w, qo, qm, j0, nb, S, lds); }
#define QD_SCORES_DECL(N, KT, R) QD_SCORES_HEAD(N, R);
#define QD_VALUES_FN(N, VT, R)                                                                     \
    SDPA_NOINLINE void QD_PN(qd_values_##N##_##R)(const sdpa_rows *w, float *acc, const float *al, \
                                                  const float *P, size_t lds, size_t j0, size_t n, \
                                                  size_t kend)                                     \
    {                                                                                              \
        qd_values_r(R, VT, w, acc, al, P, lds, j0, n, kend);                                       \
    }
#define QD_FNS(F, N, T)                                                                            \
    F(N, T, 1) F(N, T, 2) F(N, T, 3) F(N, T, 4) F(N, T, 5) F(N, T, 6) F(N, T, 7) F(N, T, 8)
/* X(F, name, type) for every block format in table order, then for the element types (EL) */
/* clang-format off */
#define QD_FORMATS(X, F, EL)                                                                       \
    X(F, q8, SDPA_Q8_0) X(F, q4, SDPA_Q4_0) X(F, q41, SDPA_Q4_1) X(F, q50, SDPA_Q5_0)              \
    X(F, q51, SDPA_Q5_1) X(F, iq4, SDPA_IQ4_NL) X(F, el, EL)
/* clang-format on */
#if SDPA_QD_PART == 1
QD_FORMATS(QD_FNS, QD_SCORES_FN, qd_el(w->k_type))
#else
#if SDPA_QD_PART == 2
QD_FORMATS(QD_FNS, QD_SCORES_DECL, 0)
#else
QD_FORMATS(QD_FNS, QD_SCORES_FN, qd_el(w->k_type))
#endif
QD_FORMATS(QD_FNS, QD_VALUES_FN, qd_el(w->v_type))
#define QD_ROW(F, N, T)                                                                            \
    {QD_PN(F##_##N##_1), QD_PN(F##_##N##_2), QD_PN(F##_##N##_3), QD_PN(F##_##N##_4),               \
     QD_PN(F##_##N##_5), QD_PN(F##_##N##_6), QD_PN(F##_##N##_7), QD_PN(F##_##N##_8)},
/* [q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, an element type][rows - 1] */
static qd_scores_fn *const qd_scores_fns[7][8] = {QD_FORMATS(QD_ROW, qd_scores, 0)};
static qd_values_fn *const qd_values_fns[7][8] = {QD_FORMATS(QD_ROW, qd_values, 0)};
#undef QD_ROW
#undef QD_FORMATS
#undef QD_FNS
#undef QD_VALUES_FN

/* The row of a table for a storage type, and the column for R >= 1 rows (more as 8). */
static inline size_t qd_type_ix(sdpa_dtype t)
{
    switch (t) {
    case SDPA_Q8_0:
        return 0;
    case SDPA_Q4_0:
        return 1;
    case SDPA_Q4_1:
        return 2;
    case SDPA_Q5_0:
        return 3;
    case SDPA_Q5_1:
        return 4;
    case SDPA_IQ4_NL:
        return 5;
    default:
        return 6;
    }
}
static inline size_t qd_rows_ix(size_t R) { return (R < 8 ? R : 8) - 1; }

static inline void loop_scores(qd_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               float *S, size_t lds)
{
    (void)r0; /* all rows: the tiles are shaped by the row count */
    qd_scores_fns[qd_type_ix(w->k_type)][qd_rows_ix(w->rows)](w, c->qo, c->qm, j0, nb, S, lds);
}

static inline float loop_softmax(qd_ctx *c, size_t r, float *s, size_t nv, size_t nb, float *m,
                                 float *l)
{
    (void)c, (void)r;
    return SDPA_QD_SOFTMAX(s, nv, nb, m, l);
}

static inline void loop_values(qd_ctx *c, const sdpa_rows *w, size_t r0, size_t j0, size_t nb,
                               const float *alpha, const float *S, size_t lds)
{
    (void)c;
    const size_t R = w->rows - r0, dv = w->dv;
    const size_t kend = sdpa_min(w->kv_end, w->kv_limit[w->rows - 1]);
    static const float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    float *acc = w->acc + r0 * dv;
    S += r0 * lds;
    alpha += r0;
    qd_values_fn *const *fns = qd_values_fns[qd_type_ix(w->v_type)];
    /* rows [a, R) over block keys [ka, kb) (SDPA_PV_TILES) */
#define QD_VALUES_RUN(a, ka, kb)                                                                   \
    fns[qd_rows_ix(R - (a))](w, acc + (a)*dv, (ka) ? ones : alpha + (a), S + (a)*lds + (ka), lds,  \
                             j0 + (ka), (kb) - (ka), kend)
    SDPA_PV_TILES(w, w->kv_limit + r0, 0, R, j0, nb, QD_VALUES_RUN);
#undef QD_VALUES_RUN
}

#define SDPA_LOOP_FN              SDPA_QD_FN
#define SDPA_LOOP_CTX             qd_ctx
#define SDPA_LOOP_SCORES_PAGED(c) ((c)->whole)
#define SDPA_LOOP_VALUES_PAGED(c) ((c)->whole)
#define SDPA_LOOP_AHEAD_ROWS      1 /* a long page's piece requests the next page's rows itself */
#include "rows_loop.h"
#endif /* SDPA_QD_PART != 1 */
#undef QD_SCORES_FN
#undef QD_SCORES_DECL
#undef QD_SCORES_HEAD
