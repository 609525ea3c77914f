/* sdpa_ggml.h -- libsdpa inside a ggml graph: ggml_flash_attn_ext's op, computed by libsdpa */
#ifndef SDPA_GGML_H
#define SDPA_GGML_H

/*
 * A header-only adapter for engines built on ggml (llama.cpp and others). It is compiled only
 * by a program that includes ggml too; libsdpa itself never depends on ggml.
 *
 *   struct ggml_tensor *o = sdpa_ggml_flash_attn_ext(ctx, q, k, v, mask, scale, max_bias,
 *                                                     softcap);
 *
 * takes ggml_flash_attn_ext's arguments and returns a tensor of its output shape and layout,
 * [Dv, n_head, n_q, ne3] F32 contiguous, computed by libsdpa when the graph runs on ggml's CPU
 * backend: its threads call sdpa_forward_team(ith, nth) together, so libsdpa uses ggml's
 * threads and no pool of its own. sdpa_ggml_flash_attn_ext_sinks adds the sinks that
 * ggml_flash_attn_ext_add_sinks would. The inputs are ggml's:
 *   q    [Dk, n_q, n_head, ne3] F32
 *   k    [Dk, n_kv, n_head_kv, ne3] and v [Dv, n_kv, n_head_kv, ne3] (v not transposed), each
 *        f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl (ggml's blocks are libsdpa's,
 *        byte for byte): any byte strides nb[1..3] (permuted views, views into a KV cache)
 *        with contiguous rows; n_head a multiple of n_head_kv (GQA); v's n_kv may exceed k's
 *   mask NULL, or F16 [>= n_kv, >= n_q, m2, m3] with contiguous rows (so padded rows, and a
 *        mask wider than n_kv, are fine), broadcast as ggml does: head h reads mask plane
 *        h % m2 and batch b plane b % m3 (n_head % m2 == 0, ne3 % m3 == 0)
 *   sinks NULL, or F32 [n_head] contiguous
 * and they mean what they mean to ggml:
 *   s = softcap ? |softcap| tanh(scale q.k / |softcap|) : scale q.k, plus slope_h * mask,
 * where slope_h is 1, or with max_bias > 0 ggml's ALiBi slope of head h (computed here as
 * ggml computes it: m0 = 2^(-max_bias / n), m1 = 2^(-max_bias / 2 / n), n the largest power of
 * two <= n_head, slope_h = m0^(h + 1) for h < n and m1^(2 (h - n) + 1) after), which libsdpa
 * applies through sdpa_params.mask_scales; a -inf mask entry hides the key; a row that sees
 * no key gives zeros; a sink adds e^(sink_h - max) to the row's denominator.
 *
 * The results differ from ggml's own op by rounding only: libsdpa keeps q in f32 for every K
 * type (ggml rounds q to f16 for an f16 K and to 8 bits for a block format; opts->q8_scores
 * asks libsdpa for 8 bits too), accumulates in f32, and gives the same bits for any thread
 * count.
 *
 * Refused at graph-build time (NULL returned, the reason in sdpa_ggml_last_error() and in
 * opts->msg): whatever ggml's op would assert on (mismatched shapes or broadcasts, a non-F16
 * mask, max_bias > 0 without a mask, a sinks tensor of the wrong type or length), and what
 * libsdpa cannot express: Q other than F32; K or V in another type (the K-quants, ...); a
 * v tensor with a head count other than k's or fewer rows than k; rows that are not
 * contiguous; scale 0 (libsdpa's 0 means 1/sqrt(Dk), ggml's is 0); n_kv 0; anything
 * sdpa_validate refuses (a NaN or infinite scale or softcap, strides of a block format that do
 * not fall on a block, sizes that overflow, ...), with its message. Nothing is ever computed
 * wrongly: should a call still fail when the graph runs (a sink of +inf, say, which libsdpa
 * refuses and ggml accepts), every element of the output is NaN.
 *
 * How it sits in the graph. Two ggml_custom_4d ops:
 *   1. a state tensor [bytes] I8 (n_tasks 1: thread 0 works, the others return): a header,
 *      libsdpa's team state (sdpa_team_bytes, zeroed on every compute, since a graph
 *      allocator may hand the memory to other tensors between computes), the ALiBi slopes and
 *      the sinks in the order the calls below read them, and the workspace;
 *   2. the output, computed by every thread of the graph (n_tasks GGML_N_TASKS_MAX) calling
 *      sdpa_forward_team with the same arguments, its own ith and ggml's nth.
 * ggml runs a node only once every thread has finished the one before, so op 2 sees what op 1
 * wrote; ggml_graph_compute needs nothing else. The scalars travel in the ops' userdata
 * pointers (scale and softcap in op 2's, max_bias and flags in op 1's: no heap, nothing to
 * free), which needs 64-bit pointers (a 32-bit build refuses). The workspace is sized for
 * SDPA_GGML_MAX_THREADS threads (define it before including, or opts->max_threads) on the
 * implementation active at graph-build time; with more threads than that, or another
 * implementation that needs more, libsdpa allocates the larger workspace itself in each call.
 *
 * Broadcasts one libsdpa view cannot say (mask planes reused by heads h % m2 or batches
 * b % m3 with 1 < m < count) are split into several team calls, each over an arithmetic
 * progression of heads (or batches) that reads one mask plane; one call per head where the
 * grouping of heads into KV heads allows no progression. The calls run one after the other
 * on the same team state.
 */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "sdpa.h"

#ifndef SDPA_GGML_MAX_THREADS
#define SDPA_GGML_MAX_THREADS 16
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Optional settings; zero-initialise. */
typedef struct sdpa_ggml_opts {
    struct ggml_tensor *sinks; /* NULL, or F32 [n_head]: as ggml_flash_attn_ext_add_sinks */
    int max_threads;           /* the thread count the workspace is sized for; 0: the default */
    int q8_scores;             /* sdpa_params.q8_scores: 1 for int8 Q.K on a block-format K */
    char *msg;                 /* NULL, or where the reason of a refusal goes ("ok" if none) */
    size_t msg_len;
} sdpa_ggml_opts;

#if defined(__cplusplus)
#define SDPA_GGML_TLS_ thread_local
#elif defined(_MSC_VER)
#define SDPA_GGML_TLS_ __declspec(thread)
#else
#define SDPA_GGML_TLS_ _Thread_local
#endif

/* The reason the calling thread's last refused build (in this translation unit) was refused,
   "ok" after one that was not; never NULL. */
static inline char *sdpa_ggml_last_error_buf_(void)
{
    static SDPA_GGML_TLS_ char buf[256] = "ok";
    return buf;
}
static inline const char *sdpa_ggml_last_error(void) { return sdpa_ggml_last_error_buf_(); }

/* ---------------------------------------------------------------------------------------- */
/* Internals. A plan: ggml's shapes as libsdpa views, and the calls a mask broadcast needs.  */
/* The same function makes it at graph-build time and, from the same tensors, at compute    */
/* time, so both sides agree on the calls and on the order of the slopes and sinks.          */
/* ---------------------------------------------------------------------------------------- */
enum { SDPA_GGML_ALL_ = 0, SDPA_GGML_RES_KV_, SDPA_GGML_RES_Q_, SDPA_GGML_EACH_ };
/* the state's header flags (op 1 sets READY once it has written the state) */
enum {
    SDPA_GGML_HAS_MASK_ = 1,
    SDPA_GGML_HAS_SINKS_ = 2,
    SDPA_GGML_Q8_ = 4,
    SDPA_GGML_SLOPES_ = 8,
    SDPA_GGML_READY_ = 16
};
#define SDPA_GGML_ALIGN_ ((size_t)64)

typedef struct sdpa_ggml_plan_ {
    size_t D, Dv, N, H, B, KV, Hk, G; /* ggml's shapes: Dk, Dv, n_q, n_head, ne3, n_kv, ... */
    sdpa_dtype kt, vt;
    ptrdiff_t qs[4], ks[4], vs[4], ms[4]; /* strides of dims 1..3, in elements */
    size_t qb[4], kb[4], vb[4], mb[4];    /* the same in bytes */
    size_t m2, m3;                        /* the mask's planes (0 without a mask) */
    size_t bcalls, hcalls, hmode, nq, nk; /* calls over batches, over heads; heads per call */
} sdpa_ggml_plan_;

static inline int sdpa_ggml_fail_(char *msg, size_t len, const char *what)
{
    if (msg && len) snprintf(msg, len, "sdpa_ggml: %s", what);
    return -1;
}

static inline int sdpa_ggml_dtype_(enum ggml_type t, sdpa_dtype *out)
{
    switch (t) {
    case GGML_TYPE_F32:
        *out = SDPA_F32;
        return 0;
    case GGML_TYPE_F16:
        *out = SDPA_F16;
        return 0;
    case GGML_TYPE_BF16:
        *out = SDPA_BF16;
        return 0;
    case GGML_TYPE_Q8_0:
        *out = SDPA_Q8_0;
        return 0;
    case GGML_TYPE_Q4_0:
        *out = SDPA_Q4_0;
        return 0;
    case GGML_TYPE_Q4_1:
        *out = SDPA_Q4_1;
        return 0;
    case GGML_TYPE_Q5_0:
        *out = SDPA_Q5_0;
        return 0;
    case GGML_TYPE_Q5_1:
        *out = SDPA_Q5_1;
        return 0;
    case GGML_TYPE_IQ4_NL:
        *out = SDPA_IQ4_NL;
        return 0;
    default:
        return -1;
    }
}

/* Byte strides nb[1..3] of t as element strides (a block format's: blocks times 32); -1 when
   a row is not contiguous or a stride does not fall on an element (or block). */
static inline int sdpa_ggml_strides_(const struct ggml_tensor *t, ptrdiff_t *es, size_t *bs)
{
    const size_t ts = ggml_type_size(t->type), blk = (size_t)ggml_blck_size(t->type);
    if (t->nb[0] != ts) return -1;
    for (int d = 1; d < 4; d++) {
        if (t->nb[d] % ts != 0 || t->nb[d] / ts > (size_t)PTRDIFF_MAX / blk) return -1;
        es[d] = (ptrdiff_t)(t->nb[d] / ts * blk);
        bs[d] = t->nb[d];
    }
    return 0;
}

static inline int sdpa_ggml_plan_make_(sdpa_ggml_plan_ *pl, const struct ggml_tensor *q,
                                       const struct ggml_tensor *k, const struct ggml_tensor *v,
                                       const struct ggml_tensor *mask,
                                       const struct ggml_tensor *sinks, char *msg, size_t len)
{
    char why[200];
    memset(pl, 0, sizeof *pl);
    if (!q || !k || !v) return sdpa_ggml_fail_(msg, len, "q, k and v must not be NULL");
    if (q->type != GGML_TYPE_F32) {
        snprintf(why, sizeof why, "q is %s; libsdpa reads an f32 Q", ggml_type_name(q->type));
        return sdpa_ggml_fail_(msg, len, why);
    }
    if (sdpa_ggml_dtype_(k->type, &pl->kt) || sdpa_ggml_dtype_(v->type, &pl->vt)) {
        snprintf(why, sizeof why,
                 "k is %s and v %s; libsdpa reads f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                 "q5_1 and iq4_nl",
                 ggml_type_name(k->type), ggml_type_name(v->type));
        return sdpa_ggml_fail_(msg, len, why);
    }
    for (int d = 0; d < 4; d++)
        if (q->ne[d] <= 0 || k->ne[d] <= 0 || v->ne[d] <= 0)
            return sdpa_ggml_fail_(msg, len, "q, k and v must not be empty (n_kv 0 included)");
    pl->D = (size_t)q->ne[0], pl->N = (size_t)q->ne[1], pl->H = (size_t)q->ne[2];
    pl->B = (size_t)q->ne[3], pl->KV = (size_t)k->ne[1], pl->Hk = (size_t)k->ne[2];
    pl->Dv = (size_t)v->ne[0];
    if ((size_t)k->ne[0] != pl->D) return sdpa_ggml_fail_(msg, len, "k->ne[0] != q->ne[0]");
    if (k->ne[3] != q->ne[3] || v->ne[3] != q->ne[3])
        return sdpa_ggml_fail_(msg, len, "q, k and v differ in ne[3]");
    if (pl->H % pl->Hk != 0)
        return sdpa_ggml_fail_(msg, len, "q's head count is not a multiple of k's");
    if (v->ne[2] != k->ne[2])
        return sdpa_ggml_fail_(msg, len, "v's head count differs from k's (libsdpa: one for both)");
    if (v->ne[1] < k->ne[1]) return sdpa_ggml_fail_(msg, len, "v has fewer rows (n_kv) than k");
    pl->G = pl->H / pl->Hk;
    if (sdpa_ggml_strides_(q, pl->qs, pl->qb) || sdpa_ggml_strides_(k, pl->ks, pl->kb) ||
        sdpa_ggml_strides_(v, pl->vs, pl->vb))
        return sdpa_ggml_fail_(msg, len,
                               "q, k and v need contiguous rows (nb[0] the type's size) and "
                               "strides that fall on an element (a block, for block formats)");
    pl->bcalls = pl->hcalls = 1, pl->hmode = SDPA_GGML_ALL_, pl->nq = pl->H, pl->nk = pl->Hk;
    if (mask) {
        if (mask->type != GGML_TYPE_F16) return sdpa_ggml_fail_(msg, len, "the mask must be F16");
        if (mask->ne[2] <= 0 || mask->ne[3] <= 0 || pl->H % (size_t)mask->ne[2] != 0 ||
            pl->B % (size_t)mask->ne[3] != 0)
            return sdpa_ggml_fail_(msg, len,
                                   "the mask's ne[2] must divide n_head and its ne[3] q's ne[3]");
        if ((size_t)mask->ne[0] < pl->KV || (size_t)mask->ne[1] < pl->N)
            return sdpa_ggml_fail_(msg, len, "the mask has fewer than n_kv columns or n_q rows");
        if (sdpa_ggml_strides_(mask, pl->ms, pl->mb))
            return sdpa_ggml_fail_(msg, len, "the mask's rows must be contiguous");
        pl->m2 = (size_t)mask->ne[2], pl->m3 = (size_t)mask->ne[3];
        if (pl->m3 > 1 && pl->m3 < pl->B) pl->bcalls = pl->m3;
        if (pl->m2 > 1 && pl->m2 < pl->H) {
            /* heads r, r + m2, r + 2 m2, ... read plane r: a view when their KV heads form a
               progression too (each its own, or whole groups), else one call per head */
            if (pl->m2 % pl->G == 0)
                pl->hmode = SDPA_GGML_RES_KV_, pl->hcalls = pl->m2,
                pl->nq = pl->nk = pl->H / pl->m2;
            else if (pl->G % pl->m2 == 0)
                pl->hmode = SDPA_GGML_RES_Q_, pl->hcalls = pl->m2, pl->nq = pl->H / pl->m2,
                pl->nk = pl->Hk;
            else
                pl->hmode = SDPA_GGML_EACH_, pl->hcalls = pl->H, pl->nq = pl->nk = 1;
        }
    }
    if (sinks) {
        if (sinks->type != GGML_TYPE_F32 || (size_t)sinks->ne[0] != pl->H ||
            sinks->nb[0] != sizeof(float))
            return sdpa_ggml_fail_(msg, len, "sinks must be F32 [n_head], contiguous");
    }
    return 0;
}

/* Call c's heads: the first query head, the step between them, the first KV head, the step
   between KV heads, and the mask plane they read (the plane's stride when all heads read
   their own). */
static inline void sdpa_ggml_heads_(const sdpa_ggml_plan_ *pl, size_t rh, size_t *hq0, size_t *hmul,
                                    size_t *hk0, size_t *kmul, size_t *mh0)
{
    switch (pl->hmode) {
    case SDPA_GGML_RES_KV_:
        *hq0 = rh, *hmul = pl->m2, *hk0 = rh / pl->G, *kmul = pl->m2 / pl->G, *mh0 = rh;
        break;
    case SDPA_GGML_RES_Q_:
        *hq0 = rh, *hmul = pl->m2, *hk0 = 0, *kmul = 1, *mh0 = rh;
        break;
    case SDPA_GGML_EACH_:
        *hq0 = rh, *hmul = 1, *hk0 = rh / pl->G, *kmul = 1, *mh0 = rh % pl->m2;
        break;
    default:
        *hq0 = 0, *hmul = 1, *hk0 = 0, *kmul = 1, *mh0 = 0;
        break;
    }
}

/* The query head whose slope and sink sit at index i of the state's arrays (call order). */
static inline size_t sdpa_ggml_head_at_(const sdpa_ggml_plan_ *pl, size_t i)
{
    size_t hq0, hmul, hk0, kmul, mh0;
    sdpa_ggml_heads_(pl, i / pl->nq, &hq0, &hmul, &hk0, &kmul, &mh0);
    return hq0 + hmul * (i % pl->nq);
}

static inline size_t sdpa_ggml_calls_(const sdpa_ggml_plan_ *pl) { return pl->bcalls * pl->hcalls; }

/* Call c of the plan as libsdpa views over the given data. p must hold the call's scalars
   (scale, softcap, q8_scores, workspace); this sets its shapes, mask, mask_scales and sinks
   (slopes and sinks: the state's arrays in call order, or NULL). */
static inline void sdpa_ggml_call_(const sdpa_ggml_plan_ *pl, size_t c, char *qd, char *kd,
                                   char *vd, char *md, char *od, const float *slopes,
                                   const float *sinks, sdpa_params *p, sdpa_tensor *tq,
                                   sdpa_tensor *tk, sdpa_tensor *tv, sdpa_tensor *to,
                                   sdpa_tensor *tm)
{
    const size_t rb = c / pl->hcalls, rh = c % pl->hcalls, bmul = pl->bcalls;
    size_t hq0, hmul, hk0, kmul, mh0;
    sdpa_ggml_heads_(pl, rh, &hq0, &hmul, &hk0, &kmul, &mh0);
    const ptrdiff_t os1 = (ptrdiff_t)(pl->Dv * pl->H), os3 = os1 * (ptrdiff_t)pl->N;
    p->batch = pl->B / bmul, p->q_heads = pl->nq, p->kv_heads = pl->nk;
    p->q_len = pl->N, p->kv_len = pl->KV, p->head_dim = pl->D, p->v_dim = pl->Dv;
    tq->data = qd + rb * pl->qb[3] + hq0 * pl->qb[2], tq->dtype = SDPA_F32;
    tq->batch_stride = pl->qs[3] * (ptrdiff_t)bmul, tq->head_stride = pl->qs[2] * (ptrdiff_t)hmul;
    tq->token_stride = pl->qs[1];
    tk->data = kd + rb * pl->kb[3] + hk0 * pl->kb[2], tk->dtype = pl->kt;
    tk->batch_stride = pl->ks[3] * (ptrdiff_t)bmul, tk->head_stride = pl->ks[2] * (ptrdiff_t)kmul;
    tk->token_stride = pl->ks[1];
    tv->data = vd + rb * pl->vb[3] + hk0 * pl->vb[2], tv->dtype = pl->vt;
    tv->batch_stride = pl->vs[3] * (ptrdiff_t)bmul, tv->head_stride = pl->vs[2] * (ptrdiff_t)kmul;
    tv->token_stride = pl->vs[1];
    to->data = od + (rb * (size_t)os3 + hq0 * pl->Dv) * sizeof(float), to->dtype = SDPA_F32;
    to->batch_stride = os3 * (ptrdiff_t)bmul, to->head_stride = (ptrdiff_t)(pl->Dv * hmul);
    to->token_stride = os1;
    p->mask = NULL, p->mask_scales = NULL;
    if (pl->m2) {
        /* a plane per batch and head, or broadcast (stride 0), or the call's own plane */
        const size_t mb0 = pl->bcalls > 1 ? rb : 0;
        tm->data = md + mb0 * pl->mb[3] + mh0 * pl->mb[2], tm->dtype = SDPA_F16;
        tm->batch_stride = pl->m3 == pl->B && pl->m3 > 1 ? pl->ms[3] * (ptrdiff_t)bmul : 0;
        tm->head_stride = pl->hmode == SDPA_GGML_ALL_ && pl->m2 > 1 ? pl->ms[2] : 0;
        tm->token_stride = pl->ms[1];
        p->mask = tm;
        p->mask_scales = slopes ? slopes + rh * pl->nq : NULL;
    }
    p->sinks = sinks ? sinks + rh * pl->nq : NULL;
}

/* The state tensor's layout, from its 64-byte aligned base: header, team state, slopes,
   sinks, workspace. */
typedef struct sdpa_ggml_layout_ {
    size_t team, slopes, sinks, ws;
} sdpa_ggml_layout_;

static inline size_t sdpa_ggml_round_(size_t n)
{
    return (n + SDPA_GGML_ALIGN_ - 1) / SDPA_GGML_ALIGN_ * SDPA_GGML_ALIGN_;
}

static inline sdpa_ggml_layout_ sdpa_ggml_layout_of_(size_t H)
{
    sdpa_ggml_layout_ l;
    l.team = SDPA_GGML_ALIGN_;
    l.slopes = l.team + sdpa_ggml_round_(sdpa_team_bytes());
    l.sinks = l.slopes + sdpa_ggml_round_(H * sizeof(float));
    l.ws = l.sinks + sdpa_ggml_round_(H * sizeof(float));
    return l;
}

static inline char *sdpa_ggml_base_(const struct ggml_tensor *state)
{
    const uintptr_t a = (uintptr_t)state->data;
    return (char *)state->data + ((SDPA_GGML_ALIGN_ - a % SDPA_GGML_ALIGN_) % SDPA_GGML_ALIGN_);
}

#if UINTPTR_MAX >= 0xffffffffffffffffu
#define SDPA_GGML_PTR64_ 1
#else
#define SDPA_GGML_PTR64_ 0
#endif

static inline void *sdpa_ggml_pack_(float lo, uint32_t hi)
{
    uint32_t u;
    memcpy(&u, &lo, sizeof u);
    return (void *)(uintptr_t)((uint64_t)u | (uint64_t)hi << 32);
}

static inline void sdpa_ggml_unpack_(const void *ud, float *lo, uint32_t *hi)
{
    const uint64_t x = (uint64_t)(uintptr_t)ud;
    const uint32_t u = (uint32_t)x;
    memcpy(lo, &u, sizeof u);
    *hi = (uint32_t)(x >> 32);
}

/* ggml's ALiBi slope of head h of n_head, as ggml computes it (in float, with powf). */
static inline float sdpa_ggml_slope_(size_t h, size_t n_head, float max_bias)
{
    size_t n = 1;
    while (n * 2 <= n_head) n *= 2;
    const float m0 = powf(2.0f, -(max_bias) / (float)(uint32_t)n);
    const float m1 = powf(2.0f, -(max_bias / 2.0f) / (float)(uint32_t)n);
    return h < n ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n) + 1));
}

/* Op 1: the state. Sources q, k, v, then the mask and the sinks when the flags say so. */
static inline void sdpa_ggml_prepare_(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
    (void)nth;
    if (ith != 0) return;
    float max_bias;
    uint32_t flags;
    sdpa_ggml_unpack_(ud, &max_bias, &flags);
    const struct ggml_tensor *mask = flags & SDPA_GGML_HAS_MASK_ ? dst->src[3] : NULL;
    const struct ggml_tensor *sinks = flags & SDPA_GGML_HAS_SINKS_ ? dst->src[mask ? 4 : 3] : NULL;
    sdpa_ggml_plan_ pl;
    char *base = sdpa_ggml_base_(dst);
    const sdpa_ggml_layout_ l = sdpa_ggml_layout_of_(dst->src[0]->ne[2]);
    memset(base, 0, l.slopes); /* the header and an idle team state */
    if (sdpa_ggml_plan_make_(&pl, dst->src[0], dst->src[1], dst->src[2], mask, sinks, NULL, 0))
        return; /* cannot happen (the build made the same plan); op 2 finds no READY flag */
    if (mask && max_bias > 0.0f) {
        float *s = (float *)(void *)(base + l.slopes);
        for (size_t i = 0; i < pl.H; i++)
            s[i] = sdpa_ggml_slope_(sdpa_ggml_head_at_(&pl, i), pl.H, max_bias);
        flags |= SDPA_GGML_SLOPES_;
    }
    if (sinks) {
        float *s = (float *)(void *)(base + l.sinks);
        for (size_t i = 0; i < pl.H; i++)
            s[i] = ((const float *)sinks->data)[sdpa_ggml_head_at_(&pl, i)];
    }
    flags |= SDPA_GGML_READY_;
    memcpy(base, &flags, sizeof flags);
}

/* Op 2: the attention, on every thread. Sources q, k, v, the state, then the mask. */
static inline void sdpa_ggml_attend_(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
    float scale, softcap;
    uint32_t cap_bits;
    sdpa_ggml_unpack_(ud, &scale, &cap_bits);
    memcpy(&softcap, &cap_bits, sizeof softcap);
    const struct ggml_tensor *state = dst->src[3];
    char *base = sdpa_ggml_base_(state);
    uint32_t flags;
    memcpy(&flags, base, sizeof flags);
    const struct ggml_tensor *mask = flags & SDPA_GGML_HAS_MASK_ ? dst->src[4] : NULL;
    sdpa_ggml_plan_ pl;
    sdpa_status st = SDPA_ERR_INVALID_ARGUMENT;
    if ((flags & SDPA_GGML_READY_) &&
        !sdpa_ggml_plan_make_(&pl, dst->src[0], dst->src[1], dst->src[2], mask, NULL, NULL, 0)) {
        const sdpa_ggml_layout_ l = sdpa_ggml_layout_of_(pl.H);
        const char *end = (const char *)state->data + ggml_nbytes(state);
        sdpa_params p;
        sdpa_tensor tq, tk, tv, to, tm;
        memset(&p, 0, sizeof p);
        p.scale = scale, p.softcap = softcap;
        p.q8_scores = flags & SDPA_GGML_Q8_ ? 1 : 0;
        p.workspace = base + l.ws;
        p.workspace_bytes = end > base + l.ws ? (size_t)(end - (base + l.ws)) : 0;
        const float *slopes =
            flags & SDPA_GGML_SLOPES_ ? (const float *)(const void *)(base + l.slopes) : NULL;
        const float *sinks =
            flags & SDPA_GGML_HAS_SINKS_ ? (const float *)(const void *)(base + l.sinks) : NULL;
        const size_t n = sdpa_ggml_calls_(&pl);
        st = SDPA_OK;
        for (size_t c = 0; c < n && st == SDPA_OK; c++) {
            sdpa_ggml_call_(&pl, c, (char *)dst->src[0]->data, (char *)dst->src[1]->data,
                            (char *)dst->src[2]->data, mask ? (char *)mask->data : NULL,
                            (char *)dst->data, slopes, sinks, &p, &tq, &tk, &tv, &to, &tm);
            st = sdpa_forward_team(&p, &tq, &tk, &tv, &to, base + l.team, (size_t)ith, (size_t)nth);
        }
    }
    if (st != SDPA_OK) {
        /* refused on every thread alike: the output says so rather than hold stale data */
        const size_t rows = (size_t)ggml_nrows(dst), Dv = (size_t)dst->ne[0];
        float *o = (float *)dst->data;
        for (size_t r = (size_t)ith; r < rows; r += (size_t)nth)
            for (size_t e = 0; e < Dv; e++) o[r * Dv + e] = NAN;
    }
}

/* Stand-in addresses for a build-time sdpa_validate of the calls: one region per distinct
   buffer (views of one tensor share it, at their offsets), none at or near 0, the output
   apart from every input. Only compared, never dereferenced. */
static inline char *sdpa_ggml_fake_(const struct ggml_tensor *t, const struct ggml_tensor **roots,
                                    size_t *bases, size_t *n, size_t *next)
{
    const struct ggml_tensor *r = t->view_src ? t->view_src : t;
    size_t i = 0;
    while (i < *n && roots[i] != r) i++;
    if (i == *n) {
        roots[i] = r, bases[i] = *next, (*n)++;
        *next += (ggml_nbytes(r) + 2 * 4096) / 4096 * 4096;
    }
    return (char *)(uintptr_t)(bases[i] + (t->view_src ? t->view_offs : 0));
}

/* The general form: opts may be NULL. Returns NULL when refused (see the top of this file). */
static inline struct ggml_tensor *
sdpa_ggml_flash_attn_ext_opts(struct ggml_context *ctx, struct ggml_tensor *q,
                              struct ggml_tensor *k, struct ggml_tensor *v,
                              struct ggml_tensor *mask, float scale, float max_bias, float softcap,
                              const sdpa_ggml_opts *opts)
{
    char *msg = sdpa_ggml_last_error_buf_();
    const size_t len = 256;
    struct ggml_tensor *sinks = opts ? opts->sinks : NULL;
    const int q8 = opts ? opts->q8_scores : 0;
    int threads = opts && opts->max_threads > 0 ? opts->max_threads : SDPA_GGML_MAX_THREADS;
    struct ggml_tensor *out = NULL;
    sdpa_ggml_plan_ pl;
    snprintf(msg, len, "ok");
    if (!SDPA_GGML_PTR64_) {
        sdpa_ggml_fail_(msg, len, "needs 64-bit pointers (the scalars travel in userdata)");
    } else if (!ctx) {
        sdpa_ggml_fail_(msg, len, "ctx is NULL");
    } else if (sdpa_ggml_plan_make_(&pl, q, k, v, mask, sinks, msg, len) == 0) {
        if (max_bias > 0.0f && !mask) {
            sdpa_ggml_fail_(msg, len, "max_bias > 0 (ALiBi) needs a mask");
        } else if (scale == 0.0f) {
            sdpa_ggml_fail_(msg, len, "scale 0: libsdpa reads 0 as 1/sqrt(Dk)");
        } else {
            /* every call validated now, on stand-in addresses, so that the graph never
               holds one libsdpa refuses; the workspace sized for `threads` */
            const struct ggml_tensor *roots[8];
            size_t bases[8], nroots = 0, next = (size_t)1 << 20;
            char *qd = sdpa_ggml_fake_(q, roots, bases, &nroots, &next);
            char *kd = sdpa_ggml_fake_(k, roots, bases, &nroots, &next);
            char *vd = sdpa_ggml_fake_(v, roots, bases, &nroots, &next);
            char *md = mask ? sdpa_ggml_fake_(mask, roots, bases, &nroots, &next) : NULL;
            char *od = (char *)(uintptr_t)next;
            float slopes[1] = {1.0f}, zeros[1] = {0.0f};
            float *sl = NULL, *sk = NULL;
            /* the arrays' values matter to validation (finite), their length does not here:
               one call's heads read nq entries from the start */
            float *buf = NULL;
            if (pl.nq > 1) {
                buf = (float *)malloc(pl.nq * sizeof(float));
                if (buf)
                    for (size_t i = 0; i < pl.nq; i++) buf[i] = 1.0f;
            }
            sl = mask && max_bias > 0.0f ? (pl.nq > 1 ? buf : slopes) : NULL;
            sk = sinks ? (pl.nq > 1 ? buf : zeros) : NULL;
            sdpa_params p;
            sdpa_tensor tq, tk, tv, to, tm;
            memset(&p, 0, sizeof p);
            p.scale = scale, p.softcap = softcap < 0.0f ? -softcap : softcap;
            p.q8_scores = q8;
            sdpa_status st = pl.nq > 1 && !buf ? SDPA_ERR_NO_MEMORY : SDPA_OK;
            const size_t n = sdpa_ggml_calls_(&pl);
            for (size_t c = 0; c < n && st == SDPA_OK; c++) {
                sdpa_ggml_call_(&pl, c, qd, kd, vd, md, od, NULL, NULL, &p, &tq, &tk, &tv, &to,
                                &tm);
                p.mask_scales = sl, p.sinks = sk;
                char why[200];
                st = sdpa_validate(&p, &tq, &tk, &tv, &to, why, sizeof why);
                if (st != SDPA_OK) {
                    snprintf(msg, len, "sdpa_ggml: libsdpa refuses the call: %s", why);
                    break;
                }
            }
            /* for the active implementation: another one selected (sdpa_select) after the
               build may need more (the scalar reference 25 times more at decode), which it
               then allocates itself during each call */
            size_t ws = 0;
            if (st == SDPA_OK) {
                p.n_threads = (size_t)threads;
                if (sdpa_workspace_size(&p, &tq, &tk, &tv, &to, &ws) != SDPA_OK) ws = 0;
            }
            free(buf);
            if (st == SDPA_OK) {
                const sdpa_ggml_layout_ l = sdpa_ggml_layout_of_(pl.H);
                uint32_t flags = (mask ? SDPA_GGML_HAS_MASK_ : 0) |
                                 (sinks ? SDPA_GGML_HAS_SINKS_ : 0) | (q8 ? SDPA_GGML_Q8_ : 0);
                struct ggml_tensor *args[5] = {q, k, v, NULL, NULL};
                int na = 3;
                if (mask) args[na++] = mask;
                if (sinks) args[na++] = sinks;
                struct ggml_tensor *state = ggml_custom_4d(
                    ctx, GGML_TYPE_I8, (int64_t)(l.ws + ws + SDPA_GGML_ALIGN_), 1, 1, 1, args, na,
                    sdpa_ggml_prepare_, 1, sdpa_ggml_pack_(max_bias, flags));
                float cap = softcap < 0.0f ? -softcap : softcap;
                uint32_t cap_bits;
                memcpy(&cap_bits, &cap, sizeof cap_bits);
                struct ggml_tensor *args2[5] = {q, k, v, state, mask};
                out =
                    ggml_custom_4d(ctx, GGML_TYPE_F32, (int64_t)pl.Dv, (int64_t)pl.H, (int64_t)pl.N,
                                   (int64_t)pl.B, args2, mask ? 5 : 4, sdpa_ggml_attend_,
                                   GGML_N_TASKS_MAX, sdpa_ggml_pack_(scale, cap_bits));
            }
        }
    }
    if (opts && opts->msg && opts->msg_len) snprintf(opts->msg, opts->msg_len, "%s", msg);
    return out;
}

/* ggml_flash_attn_ext(ctx, q, k, v, mask, scale, max_bias, softcap), computed by libsdpa. */
static inline struct ggml_tensor *
sdpa_ggml_flash_attn_ext(struct ggml_context *ctx, struct ggml_tensor *q, struct ggml_tensor *k,
                         struct ggml_tensor *v, struct ggml_tensor *mask, float scale,
                         float max_bias, float softcap)
{
    return sdpa_ggml_flash_attn_ext_opts(ctx, q, k, v, mask, scale, max_bias, softcap, NULL);
}

/* The same followed by ggml_flash_attn_ext_add_sinks(result, sinks). */
static inline struct ggml_tensor *sdpa_ggml_flash_attn_ext_sinks(
    struct ggml_context *ctx, struct ggml_tensor *q, struct ggml_tensor *k, struct ggml_tensor *v,
    struct ggml_tensor *mask, struct ggml_tensor *sinks, float scale, float max_bias, float softcap)
{
    sdpa_ggml_opts o;
    memset(&o, 0, sizeof o);
    o.sinks = sinks;
    return sdpa_ggml_flash_attn_ext_opts(ctx, q, k, v, mask, scale, max_bias, softcap, &o);
}

#ifdef __cplusplus
}
#endif
#endif /* SDPA_GGML_H */
