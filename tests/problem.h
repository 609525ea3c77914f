/* problem.h -- the ragged, paged and block-format problem the per-feature forward tests share:
 * builder, run, check against the float64 oracle */
#ifndef SDPA_TEST_PROBLEM_H
#define SDPA_TEST_PROBLEM_H

#include "attn.h"
#include "test_pools.h"

/*
 * A problem is a batch of sequences (lq_b queries, lk_b keys) held as logical data
 * [b][head][token][dim] (the values as stored: f16/bf16 converted exactly, block formats
 * quantized and dequantized by the reference codec below, written from the formulas sdpa.h
 * publishes, never the library's: a table with a row per block format, its bytes, quantizer
 * and decoder), seen by the call through one of the forms of sdpa_params:
 *
 *   queries  each (q_len each), padded (q_lens, the view [B][Hq][q_len][D]) or packed (cu_q,
 *            token-major [tokens][Hq][D], batch_stride garbage: it must be unused)
 *   keys     dense, strided token-major, reversed (kv_len each), padded (kv_lens), packed (cu_kv,
 *            head-major [Hkv][tokens][D]) or paged (a block table over pages
 *            [n_pages][Hkv][page][D], shuffled or in order)
 *
 * Storage a sequence does not own (keys past lk_b, page rows past it, spare pages, mask entries
 * past a sequence's lengths) holds NaN (a block with a NaN scale): a read of it reaches an
 * output as NaN. o and lse are sentinel-filled: every element outside the sequences' rows must
 * stay so. The reference is attn_oracle64 (attn.h); the check's tolerance of an output element
 * is attn_row_tol times sum_j w_j |v_jc| / l, plus what the modifiers add, 2 ds (sum w|v| / l +
 * |o|) with ds = 3 u (|softcap(s)| + |bias| + |mask|) + (2 tanh_ulp + 2) u c (test_variants.c
 * derives them); q8_scores adds sdpa.h's bound and a float64 model of the stated algorithm
 * (test_quant.c derives them).
 */

static bench_pool *g_pool[2]; /* 2 threads, and 3 threads in shuffled order: made by the test */

#define F32  SDPA_F32
#define F16  SDPA_F16
#define BF16 SDPA_BF16
#define Q8   SDPA_Q8_0
#define Q4   SDPA_Q4_0
#define Q41  SDPA_Q4_1
#define Q50  SDPA_Q5_0
#define Q51  SDPA_Q5_1
#define IQ4  SDPA_IQ4_NL

enum { QK = 32, Q8_BYTES = 34, Q4_BYTES = 18, QMAX_BYTES = 34 /* the largest block */ };

/* ------------------------------------------------------------------------------------------ */
/* The reference block codec, from the formulas alone                                          */
/* ------------------------------------------------------------------------------------------ */

/* binary32 -> binary16, round to nearest even (nearbyint in double, the default rounding
   mode), overflow (>= 65520) to inf. */
static inline uint16_t ref_f16(float x)
{
    const uint16_t sign = signbit(x) ? 0x8000u : 0u;
    const double a = fabs((double)x);
    if (isnan(x)) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x1p-14) return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p24)); /* 1024: 2^-14 */
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int E = e - 1;
    double m = nearbyint(ldexp(a, 10 - E)); /* [1024, 2048] */
    if (m == 2048.0) m = 1024.0, E++;
    return (uint16_t)(sign | (uint16_t)((E + 15) << 10) | (uint16_t)(m - 1024.0));
}

/* binary16 -> its value, exactly. */
static inline double ref_f16_value(uint16_t h)
{
    const int ex = (h >> 10) & 31, man = h & 1023;
    double v = ex == 31  ? (man ? NAN : INFINITY)
               : ex == 0 ? ldexp(man, -24)
                         : ldexp(1024 + man, ex - 25);
    return h & 0x8000u ? -v : v;
}

/* round half away from zero (exact in double for every float) */
static inline int ref_round(float t)
{
    const double a = floor(fabs((double)t) + 0.5);
    return (int)(t < 0 ? -a : a);
}

static inline void ref_put16(unsigned char *p, uint16_t h)
{
    p[0] = (unsigned char)(h & 0xff), p[1] = (unsigned char)(h >> 8);
}
static inline uint16_t ref_get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* 32 integers of 4 or 5 bits into the block's nibbles qs (element i < 16 the low nibble of
   byte i, element 16 + i its high nibble) and, when qh is not NULL, their 5th bits (a
   little-endian u32, bit i element i). */
static inline void ref_pack(const int *n, unsigned char *qs, unsigned char *qh)
{
    uint32_t h = 0;
    for (int i = 0; i < QK / 2; i++)
        qs[i] = (unsigned char)((n[i] & 15) | (n[QK / 2 + i] & 15) << 4);
    for (int i = 0; i < QK; i++) h |= (uint32_t)(n[i] >> 4 & 1) << i;
    if (qh)
        for (int i = 0; i < 4; i++) qh[i] = (unsigned char)(h >> 8 * i);
}

/* Element i's 4-bit nibble, and with qh its 5th bit. */
static inline int ref_unpack(const unsigned char *qs, const unsigned char *qh, int i)
{
    int n = (i < QK / 2 ? qs[i] : qs[i - QK / 2] >> 4) & 15;
    if (qh) n |= (qh[i / 8] >> (i % 8) & 1) << 4;
    return n;
}

/* The element of largest magnitude, the first on a tie, signed. */
static inline float ref_signed_amax(const float *x)
{
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < QK; i++)
        if (amax < fabsf(x[i])) amax = fabsf(x[i]), m = x[i];
    return m;
}

/* The quantizers below are ggml's reference quantizers (quantize_row_<type>_ref) on one block,
   as sdpa.h states them. "x / d" is x times the f32 reciprocal id = 1 / d (0 where d is 0);
   where id overflows (d below 2^-128) every stored integer is 0. The products are volatile:
   no FMA contraction. */

/* q8_0: d = max |x| / 127, q = round(x / d), half away from zero. */
static inline void ref_q8_0(const float *x, unsigned char *y)
{
    float amax = 0.0f;
    for (int i = 0; i < QK; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    ref_put16(y, ref_f16(d));
    for (int i = 0; i < QK; i++) {
        volatile float t = x[i] * id;
        y[2 + i] = isinf(id) ? 0 : (unsigned char)(int8_t)ref_round(t);
    }
}

/* q4_0 and q5_0: m the first element of largest magnitude, d = m / -2^(bits-1),
   n = min(2^bits - 1, trunc(x / d + 2^(bits-1) + 0.5)). */
static inline void ref_qx_0(const float *x, unsigned char *y, int bits)
{
    const float half = (float)(1 << (bits - 1)), top = (float)((1 << bits) - 1);
    const float d = ref_signed_amax(x) / -half, id = d != 0.0f ? 1.0f / d : 0.0f;
    int n[QK];
    for (int i = 0; i < QK; i++) {
        volatile float t = x[i] * id;
        volatile float s = t + (half + 0.5f);
        n[i] = isinf(id) ? 0 : (int)fmin(trunc(s), top);
    }
    ref_put16(y, ref_f16(d));
    if (bits == 4)
        ref_pack(n, y + 2, NULL);
    else
        ref_pack(n, y + 6, y + 2);
}
static inline void ref_q4_0(const float *x, unsigned char *y) { ref_qx_0(x, y, 4); }
static inline void ref_q5_0(const float *x, unsigned char *y) { ref_qx_0(x, y, 5); }

/* q4_1 and q5_1: lo = min x, hi = max x, d = (hi - lo) / (2^bits - 1), m = lo,
   n = trunc((x - lo) / d + 0.5) (q4_1 at most 15; q5_1 has no clamp, and needs none). */
static inline void ref_qx_1(const float *x, unsigned char *y, int bits)
{
    float lo = x[0], hi = x[0];
    for (int i = 1; i < QK; i++) lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
    volatile float span = hi - lo;
    const float d = span / (float)((1 << bits) - 1), id = d != 0.0f ? 1.0f / d : 0.0f;
    int n[QK];
    for (int i = 0; i < QK; i++) {
        volatile float dx = x[i] - lo;
        volatile float t = dx * id;
        volatile float s = t + 0.5f;
        n[i] = isinf(id) ? 0 : (int)trunc(s);
        if (bits == 4 && n[i] > 15) n[i] = 15;
    }
    ref_put16(y, ref_f16(d));
    ref_put16(y + 2, ref_f16(lo));
    if (bits == 4)
        ref_pack(n, y + 4, NULL);
    else
        ref_pack(n, y + 8, y + 4);
}
static inline void ref_q4_1(const float *x, unsigned char *y) { ref_qx_1(x, y, 4); }
static inline void ref_q5_1(const float *x, unsigned char *y) { ref_qx_1(x, y, 5); }

/* iq4_nl's 16 values, as sdpa.h lists them */
static const int ref_iq4nl_table[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

/* The index of the table value nearest v, the upper one on a tie. The distances are formed
   in double, exactly: where they are close enough to tie, f32 forms them exactly too. */
static inline int ref_iq4nl_nearest(float v)
{
    if (v <= ref_iq4nl_table[0]) return 0;
    if (v >= ref_iq4nl_table[15]) return 15;
    int k = 0;
    while (!(v < ref_iq4nl_table[k + 1])) k++; /* table[k] <= v < table[k + 1] */
    return (double)v - ref_iq4nl_table[k] < ref_iq4nl_table[k + 1] - (double)v ? k : k + 1;
}

/* iq4_nl: below 1e-15 d = 0 and every nibble 0; else with m the first element of largest
   magnitude, every x takes the table value nearest x / (m / -127), and with weights w = x^2
   d = sum w v x / sum w v^2 (0 when that sum is 0), summed in f32 in element order, each term
   as (w v) x and (w v) v. */
static inline void ref_iq4_nl(const float *x, unsigned char *y)
{
    float amax = 0.0f;
    for (int i = 0; i < QK; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    int n[QK] = {0};
    float d = 0.0f;
    if (!(amax < 1e-15f)) {
        const float d0 = ref_signed_amax(x) / -127.0f, id = 1.0f / d0;
        volatile float sumqx = 0.0f, sumq2 = 0.0f;
        for (int i = 0; i < QK; i++) {
            volatile float t = id * x[i];
            n[i] = ref_iq4nl_nearest(t);
            const float v = (float)ref_iq4nl_table[n[i]];
            volatile float w = x[i] * x[i];
            volatile float wv = w * v;
            volatile float a = wv * x[i], b = wv * v;
            sumqx = sumqx + a;
            sumq2 = sumq2 + b;
        }
        d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
    }
    ref_put16(y, ref_f16(d));
    ref_pack(n, y + 2, NULL);
}

/* Decoders, from the layouts sdpa.h gives: a block's scale d, minimum m (0 where the type has
   none) and 32 integer quants, element i being d n_i + m. */
static inline void ref_dec_q8_0(const unsigned char *y, int *n, double *d, double *m)
{
    *d = ref_f16_value(ref_get16(y)), *m = 0.0;
    for (int i = 0; i < QK; i++) n[i] = (int8_t)y[2 + i];
}
static inline void ref_dec_q4_0(const unsigned char *y, int *n, double *d, double *m)
{
    *d = ref_f16_value(ref_get16(y)), *m = 0.0;
    for (int i = 0; i < QK; i++) n[i] = ref_unpack(y + 2, NULL, i) - 8;
}
static inline void ref_dec_q4_1(const unsigned char *y, int *n, double *d, double *m)
{
    *d = ref_f16_value(ref_get16(y)), *m = ref_f16_value(ref_get16(y + 2));
    for (int i = 0; i < QK; i++) n[i] = ref_unpack(y + 4, NULL, i);
}
static inline void ref_dec_q5_0(const unsigned char *y, int *n, double *d, double *m)
{
    *d = ref_f16_value(ref_get16(y)), *m = 0.0;
    for (int i = 0; i < QK; i++) n[i] = ref_unpack(y + 6, y + 2, i) - 16;
}
static inline void ref_dec_q5_1(const unsigned char *y, int *n, double *d, double *m)
{
    *d = ref_f16_value(ref_get16(y)), *m = ref_f16_value(ref_get16(y + 2));
    for (int i = 0; i < QK; i++) n[i] = ref_unpack(y + 8, y + 4, i);
}
static inline void ref_dec_iq4_nl(const unsigned char *y, int *n, double *d, double *m)
{
    *d = ref_f16_value(ref_get16(y)), *m = 0.0;
    for (int i = 0; i < QK; i++) n[i] = ref_iq4nl_table[ref_unpack(y + 2, NULL, i)];
}

/* The block formats: one row each. A new block format is a row here (and its functions). */
typedef struct ref_format {
    sdpa_dtype t;
    const char *name;
    size_t bytes;
    bool has_min; /* elements d n + m */
    void (*quant)(const float *x, unsigned char *y);
    void (*decode)(const unsigned char *y, int *n, double *d, double *m);
} ref_format;

static const ref_format ref_formats[] = {
    {Q8, "q8_0", 34, false, ref_q8_0, ref_dec_q8_0},
    {Q4, "q4_0", 18, false, ref_q4_0, ref_dec_q4_0},
    {Q41, "q4_1", 20, true, ref_q4_1, ref_dec_q4_1},
    {Q50, "q5_0", 22, false, ref_q5_0, ref_dec_q5_0},
    {Q51, "q5_1", 24, true, ref_q5_1, ref_dec_q5_1},
    {IQ4, "iq4_nl", 18, false, ref_iq4_nl, ref_dec_iq4_nl},
};
enum { N_FORMATS = sizeof ref_formats / sizeof ref_formats[0] };

/* The row of a block format; NULL for f32, f16 and bf16. */
static inline const ref_format *ref_format_of(sdpa_dtype t)
{
    for (size_t i = 0; i < N_FORMATS; i++)
        if (ref_formats[i].t == t) return &ref_formats[i];
    return NULL;
}

static inline bool quantized(sdpa_dtype t) { return ref_format_of(t) != NULL; }

static inline const char *dtn(sdpa_dtype t)
{
    const ref_format *f = ref_format_of(t);
    return f ? f->name : t == F16 ? "f16" : t == BF16 ? "bf16" : t == F32 ? "f32" : "unknown";
}

/* One block's values: x[i] = d n_i exactly (an f16 times an integer of at most 8 bits; -0
   where d is negative and n_i 0, as in f32), or for the types with a minimum d n_i + m rounded
   once to f32 (the sum is exact in double: both terms are multiples of 2^-24 below 2^22). xm,
   when not NULL, gets d n_i (+ m) unrounded: the value the fast scores' integer arithmetic
   stands for. */
static inline void ref_deq(sdpa_dtype t, const unsigned char *y, float *x, double *xm)
{
    const ref_format *f = ref_format_of(t);
    int n[QK];
    double d, m;
    f->decode(y, n, &d, &m);
    for (int i = 0; i < QK; i++) {
        const double v = f->has_min ? d * n[i] + m : d * n[i];
        x[i] = (float)v;
        if (xm) xm[i] = v;
    }
}

static inline size_t ref_block_bytes(sdpa_dtype t)
{
    const ref_format *f = ref_format_of(t);
    return f ? f->bytes : 0;
}
static inline size_t ref_elem_bytes(sdpa_dtype t) { return t == F32 ? 4 : 2; }

/* Bytes of element offset off (a multiple of the block for the block formats). */
static inline ptrdiff_t ref_off_bytes(sdpa_dtype t, ptrdiff_t off)
{
    return quantized(t) ? off / QK * (ptrdiff_t)ref_block_bytes(t)
                        : off * (ptrdiff_t)ref_elem_bytes(t);
}

/* ------------------------------------------------------------------------------------------ */
/* K and V storage: a view [n][h][t][dim] of any type, NaN wherever nothing is stored           */
/* ------------------------------------------------------------------------------------------ */
typedef struct kvbuf {
    sdpa_dtype t;
    size_t dim;
    ptrdiff_t bs, hs, ts; /* elements */
    ptrdiff_t origin;     /* element of [0][0][0][0] in the allocation */
    size_t nelem;
    unsigned char *mem;
} kvbuf;

static inline void kvbuf_init(kvbuf *kb, sdpa_dtype t, size_t dim, size_t n, size_t h, size_t tok,
                              ptrdiff_t bs, ptrdiff_t hs, ptrdiff_t ts)
{
    kb->t = t, kb->dim = dim, kb->bs = bs, kb->hs = hs, kb->ts = ts;
    ptrdiff_t lo = 0, hi = (ptrdiff_t)dim; /* [lo, hi) */
    const ptrdiff_t st[3] = {bs, hs, ts}, cnt[3] = {(ptrdiff_t)n, (ptrdiff_t)h, (ptrdiff_t)tok};
    for (int i = 0; i < 3; i++) {
        const ptrdiff_t reach = (cnt[i] > 0 ? cnt[i] - 1 : 0) * st[i];
        if (reach < 0)
            lo += reach;
        else
            hi += reach;
    }
    kb->origin = QK - lo; /* a spare block either side */
    kb->nelem = (size_t)(hi - lo) + 2 * QK;
    const size_t bytes = (size_t)ref_off_bytes(t, (ptrdiff_t)kb->nelem);
    kb->mem = tl_xmalloc(bytes);
    if (quantized(t)) { /* every block: scale NaN */
        for (size_t b = 0; b < kb->nelem / QK; b++) {
            unsigned char *p = kb->mem + b * ref_block_bytes(t);
            memset(p, 0x11, ref_block_bytes(t));
            p[0] = 0x00, p[1] = 0x7e;
        }
    } else {
        tl_fill_nan(kb->mem, t, kb->nelem);
    }
}

/* Stores dim raw values at element offset off (from [0][0][0][0]); stored[] gets the values
   the view then holds (quantized and dequantized by the reference codec, or rounded), and
   model[], when not NULL, d n + m unrounded (the stored values for the other types). */
static inline void kvbuf_put(kvbuf *kb, ptrdiff_t off, const float *raw, float *stored,
                             double *model)
{
    const ptrdiff_t at = kb->origin + off;
    const ref_format *f = ref_format_of(kb->t);
    if (f) {
        unsigned char *p = kb->mem + ref_off_bytes(kb->t, at);
        for (size_t b = 0; b < kb->dim / QK; b++, p += f->bytes) {
            f->quant(raw + b * QK, p);
            ref_deq(kb->t, p, stored + b * QK, model ? model + b * QK : NULL);
        }
    } else {
        for (size_t c = 0; c < kb->dim; c++) {
            tl_put(kb->mem, kb->t, (size_t)(at + (ptrdiff_t)c), raw[c]);
            stored[c] = tl_stored(kb->t, raw[c]);
            if (model) model[c] = stored[c];
        }
    }
}

static inline sdpa_tensor kvbuf_tensor(const kvbuf *kb, ptrdiff_t bs)
{
    return (sdpa_tensor){kb->mem + ref_off_bytes(kb->t, kb->origin), kb->t, bs, kb->hs, kb->ts};
}

/* ------------------------------------------------------------------------------------------ */
/* A problem                                                                                    */
/* ------------------------------------------------------------------------------------------ */
enum { Q_EACH = 0, Q_PADDED, Q_PACKED };
enum { KV_DENSE = 0, KV_STRIDED, KV_REVERSED, KV_PADDED, KV_PACKED, KV_PAGED };
enum { MAXB = 16, MARGIN = 16 };

typedef struct qcase {
    const char *name;
    size_t B, qh, kvh, d, dv;
    size_t lq[MAXB], lk[MAXB]; /* per sequence; the _EACH and dense forms use the longest */
    int qf, kf;
    size_t page;
    bool inorder; /* KV_PAGED: pages in table order (runs of adjacent pages), else shuffled */
    sdpa_dtype kt, vt;
    bool causal;
    size_t window;
    float softcap;
    bool alibi, mask, sinks;
    sdpa_dtype mt; /* the mask's type: f32 or f16 */
    int fast;      /* q8_scores */
    float krange;  /* raw K and V uniform in [kshift - krange, kshift + krange); 0: 1 */
    float kshift;  /* (a block minimum far from 0: q4_1 and q5_1's m carries the values) */
    bool extreme;  /* Q in [0.6, 1), and K's odd keys f (-1, 15/16, ..., 15/16) in every block
                      (f per key in [0.05, 0.3)): quants at the top of their range against query
                      quants near 127, the int8 dot products' largest partial sums */
} qcase;

typedef struct qprob {
    qcase c;
    size_t Lq, Lk, on, lsen;
    float *q, *k, *v, *mk; /* logical: [B][Hq][Lq][D], [B][Hk][Lk][D], [B][Hk][Lk][Dv], mask */
    double *km;            /* q8_scores: K's d n + m unrounded, like k (attn_problem.kmodel) */
    float *qbuf, *obuf, *lse, *slopes, *sinks;
    kvbuf kb, vb;
    size_t q_lens[MAXB], kv_lens[MAXB], cu_q[MAXB + 1], cu_kv[MAXB + 1];
    int32_t *table;
    size_t n_pages, max_pages;
    uint16_t *mbuf; /* the mask as stored, when f16 */
    sdpa_params p;
    sdpa_tensor tq, tk, tv, to, tm;
    char what[320];
} qprob;

static inline size_t row_off(const qprob *pr, size_t b, size_t h, size_t i, size_t dim)
{
    const qcase *c = &pr->c;
    if (c->qf == Q_PACKED) return ((pr->cu_q[b] + i) * c->qh + h) * dim;
    return ((b * c->qh + h) * pr->Lq + i) * dim;
}

static inline void qprob_init(qprob *pr, const qcase *cin, uint64_t seed)
{
    memset(pr, 0, sizeof *pr);
    pr->c = *cin;
    qcase *c = &pr->c;
    tl_rng r = {seed};
    if (c->dv == 0) c->dv = c->d;
    const size_t B = c->B, Hq = c->qh, Hk = c->kvh, D = c->d, Dv = c->dv;
    for (size_t b = 0; b < B; b++) {
        if (c->lq[b] > pr->Lq) pr->Lq = c->lq[b];
        if (c->lk[b] > pr->Lk) pr->Lk = c->lk[b];
    }
    if (pr->Lq == 0) pr->Lq = 1;
    if (pr->Lk == 0) pr->Lk = 1;
    const size_t Lq = pr->Lq, Lk = pr->Lk;
    for (size_t b = 0; b < B; b++) { /* the forms without lengths: every sequence the longest */
        if (c->qf == Q_EACH) c->lq[b] = Lq;
        if (c->kf <= KV_REVERSED) c->lk[b] = Lk;
        pr->q_lens[b] = c->lq[b], pr->kv_lens[b] = c->lk[b];
        pr->cu_q[b + 1] = pr->cu_q[b] + c->lq[b];
        pr->cu_kv[b + 1] = pr->cu_kv[b] + c->lk[b];
    }
    const float kr = c->krange > 0 ? c->krange : 1.0f;
    pr->q = tl_xmalloc(B * Hq * Lq * D * sizeof(float));
    pr->k = tl_xmalloc(B * Hk * Lk * D * sizeof(float));
    pr->v = tl_xmalloc(B * Hk * Lk * Dv * sizeof(float));
    for (size_t e = 0; e < B * Hq * Lq * D; e++)
        pr->q[e] = c->extreme ? tl_uniform(&r, 0.6f, 1.0f) : tl_uniform(&r, -1.0f, 1.0f);
    for (size_t e = 0; e < B * Hk * Lk * D; e++) pr->k[e] = NAN;
    if (c->fast) {
        pr->km = tl_xmalloc(B * Hk * Lk * D * sizeof(double));
        for (size_t e = 0; e < B * Hk * Lk * D; e++) pr->km[e] = NAN;
    }
    for (size_t e = 0; e < B * Hk * Lk * Dv; e++) pr->v[e] = NAN;

    sdpa_params *p = &pr->p;
    p->batch = B, p->q_heads = Hq, p->kv_heads = Hk, p->q_len = Lq, p->kv_len = Lk, p->head_dim = D;
    p->v_dim = Dv == D && seed % 2 ? 0 : Dv; /* 0 means head_dim */
    p->causal = c->causal, p->window = c->window, p->softcap = c->softcap, p->q8_scores = c->fast;

    /* queries and outputs: [B][Hq][Lq][dim], or token-major [tokens][Hq][dim] when packed */
    const size_t qtok = c->qf == Q_PACKED ? (pr->cu_q[B] ? pr->cu_q[B] : 1) : B * Lq;
    pr->qbuf = tl_xmalloc(qtok * Hq * D * sizeof(float));
    for (size_t e = 0; e < qtok * Hq * D; e++) pr->qbuf[e] = NAN;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++)
                memcpy(pr->qbuf + row_off(pr, b, h, i, D), pr->q + ((b * Hq + h) * Lq + i) * D,
                       D * sizeof(float));
    pr->on = qtok * Hq * Dv;
    pr->obuf = tl_xmalloc((pr->on + 2 * MARGIN) * sizeof(float));
    tl_fill_sentinel(pr->obuf, pr->on + 2 * MARGIN);
    pr->lsen = B * Hq * Lq;
    pr->lse = tl_xmalloc((pr->lsen + 2 * MARGIN) * sizeof(float));
    tl_fill_sentinel(pr->lse, pr->lsen + 2 * MARGIN);
    p->lse = pr->lse + MARGIN;
    if (c->qf == Q_PACKED) {
        p->cu_q = pr->cu_q;
        pr->tq = (sdpa_tensor){pr->qbuf, F32, 987654321, (ptrdiff_t)D, (ptrdiff_t)(Hq * D)};
        pr->to =
            (sdpa_tensor){pr->obuf + MARGIN, F32, 987654321, (ptrdiff_t)Dv, (ptrdiff_t)(Hq * Dv)};
    } else {
        if (c->qf == Q_PADDED) p->q_lens = pr->q_lens;
        pr->tq = (sdpa_tensor){pr->qbuf, F32, (ptrdiff_t)(Hq * Lq * D), (ptrdiff_t)(Lq * D),
                               (ptrdiff_t)D};
        pr->to = (sdpa_tensor){pr->obuf + MARGIN, F32, (ptrdiff_t)(Hq * Lq * Dv),
                               (ptrdiff_t)(Lq * Dv), (ptrdiff_t)Dv};
    }

    /* keys and values: the storage of each form; where[b][h][j] is the element offset of a row */
    float *raw = tl_xmalloc((D > Dv ? D : Dv) * sizeof(float));
    const size_t dims[2] = {D, Dv};
    kvbuf *kvs[2] = {&pr->kb, &pr->vb};
    const sdpa_dtype types[2] = {c->kt, c->vt};
    size_t *perm = NULL, n_pages = 0, max_pages = 0;
    if (c->kf == KV_PAGED) {
        size_t used = 0, mp = 1;
        for (size_t b = 0; b < B; b++) {
            const size_t n = (c->lk[b] + c->page - 1) / c->page;
            used += n;
            if (n > mp) mp = n;
        }
        max_pages = mp + 1, n_pages = used + 3; /* a spare table entry per sequence, spare pages */
        perm = tl_xmalloc(n_pages * sizeof(size_t));
        for (size_t e = 0; e < n_pages; e++) perm[e] = e;
        for (size_t e = n_pages - 1; e > 0 && !c->inorder; e--) {
            const size_t j = tl_below(&r, e + 1), t = perm[e];
            perm[e] = perm[j], perm[j] = t;
        }
        pr->table = tl_xmalloc(B * max_pages * sizeof(int32_t));
        size_t next = 0;
        for (size_t b = 0; b < B; b++)
            for (size_t pg = 0; pg < max_pages; pg++)
                pr->table[b * max_pages + pg] = pg * c->page < c->lk[b] ? (int32_t)perm[next++]
                                                : pg % 2                ? -7
                                                         : (int32_t)(n_pages + 5); /* never used */
        p->block_table = pr->table, p->page_size = c->page, p->max_pages = max_pages,
        p->n_pages = n_pages;
        pr->n_pages = n_pages, pr->max_pages = max_pages;
        p->kv_lens = pr->kv_lens;
    }
    for (int s = 0; s < 2; s++) {
        const ptrdiff_t dm = (ptrdiff_t)dims[s], hk = (ptrdiff_t)Hk, lk = (ptrdiff_t)Lk;
        ptrdiff_t bs = 0;
        switch (c->kf) {
        case KV_PAGED: {
            const ptrdiff_t ps = (ptrdiff_t)c->page;
            kvbuf_init(kvs[s], types[s], dims[s], n_pages, Hk, c->page, hk * ps * dm, ps * dm, dm);
            bs = hk * ps * dm;
            break;
        }
        case KV_PACKED: {
            const ptrdiff_t tok = (ptrdiff_t)(pr->cu_kv[B] ? pr->cu_kv[B] : 1);
            kvbuf_init(kvs[s], types[s], dims[s], 1, Hk, (size_t)tok, 0, tok * dm, dm);
            bs =
                -123456768; /* unused (a multiple of 32, as every stride of a block view must be) */
            break;
        }
        case KV_STRIDED: /* token-major, every stride padded by a block */
            kvbuf_init(kvs[s], types[s], dims[s], B, Hk, Lk, lk * (hk * (dm + 32) + 32) + 64,
                       dm + 32, hk * (dm + 32) + 32);
            bs = kvs[s]->bs;
            break;
        case KV_REVERSED: /* tokens last to first */
            kvbuf_init(kvs[s], types[s], dims[s], B, Hk, Lk, hk * lk * (dm + 32), lk * (dm + 32),
                       -(dm + 32));
            bs = kvs[s]->bs;
            break;
        default:
            kvbuf_init(kvs[s], types[s], dims[s], B, Hk, Lk, hk * lk * dm, lk * dm, dm);
            bs = kvs[s]->bs;
            break;
        }
        float *logical = s == 0 ? pr->k : pr->v;
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < Hk; h++)
                for (size_t j = 0; j < c->lk[b]; j++) {
                    const kvbuf *kb = kvs[s];
                    ptrdiff_t off;
                    if (c->kf == KV_PAGED) {
                        const ptrdiff_t P = pr->table[b * max_pages + j / c->page];
                        off =
                            P * kb->bs + (ptrdiff_t)h * kb->hs + (ptrdiff_t)(j % c->page) * kb->ts;
                    } else if (c->kf == KV_PACKED) {
                        off = (ptrdiff_t)h * kb->hs + (ptrdiff_t)(pr->cu_kv[b] + j) * kb->ts;
                    } else {
                        off = (ptrdiff_t)b * kb->bs + (ptrdiff_t)h * kb->hs + (ptrdiff_t)j * kb->ts;
                    }
                    const float f = c->extreme ? tl_uniform(&r, 0.05f, 0.3f) : 0.0f;
                    for (size_t e = 0; e < dims[s]; e++)
                        raw[e] = s == 0 && c->extreme && j % 2
                                     ? f * (e % 32 ? 15.0f / 16.0f : -1.0f)
                                     : c->kshift + tl_uniform(&r, -kr, kr);
                    const size_t at = ((b * Hk + h) * Lk + j) * dims[s];
                    double *model = s == 0 && pr->km ? pr->km + at : NULL;
                    kvbuf_put(kvs[s], off, raw, logical + at, model);
                }
        if (s == 0)
            pr->tk = kvbuf_tensor(kvs[s], bs);
        else
            pr->tv = kvbuf_tensor(kvs[s], bs);
    }
    if (c->kf == KV_PADDED) p->kv_lens = pr->kv_lens;
    if (c->kf == KV_PACKED) p->cu_kv = pr->cu_kv;
    free(raw), free(perm);

    if (c->mask) { /* f32 or f16 [B][Hq][Lq][Lk] by per-sequence index, -inf holes, NaN outside */
        const size_t n = B * Hq * Lq * Lk;
        pr->mk = tl_xmalloc(n * sizeof(float));
        if (c->mt == F16) pr->mbuf = tl_xmalloc(n * sizeof(uint16_t));
        for (size_t e = 0; e < n; e++) {
            const size_t j = e % Lk, i = e / Lk % Lq, b = e / (Hq * Lq * Lk);
            float x = tl_uniform(&r, 0.0f, 1.0f) < 0.15f ? -INFINITY : tl_uniform(&r, -2.0f, 2.0f);
            if (i % 11 == 3) x = -INFINITY; /* a row that sees nothing */
            if (i >= c->lq[b] || j >= c->lk[b]) x = NAN;
            if (pr->mbuf) tl_put(pr->mbuf, F16, e, x);
            pr->mk[e] = tl_stored(c->mt, x);
        }
        pr->tm = (sdpa_tensor){pr->mbuf ? (void *)pr->mbuf : (void *)pr->mk, c->mt,
                               (ptrdiff_t)(Hq * Lq * Lk), (ptrdiff_t)(Lq * Lk), (ptrdiff_t)Lk};
        p->mask = &pr->tm;
    }
    if (c->alibi) p->alibi_slopes = pr->slopes = tl_alibi_slopes(Hq);
    if (c->sinks) p->sinks = pr->sinks = tl_sinks(&r, Hq);
    static const char *const qn[] = {"q each", "q padded", "q packed"};
    static const char *const kn[] = {"kv dense",  "kv strided", "kv reversed",
                                     "kv padded", "kv packed",  "kv paged"};
    int w = snprintf(pr->what, sizeof pr->what,
                     "%s [B=%zu hq=%zu hkv=%zu d=%zu dv=%zu lq=%zu lk=%zu %s %s", c->name, B, Hq,
                     Hk, D, Dv, Lq, Lk, qn[c->qf], kn[c->kf]);
#define MORE(...)                                                                                  \
    (w += snprintf(pr->what + w, w < (int)sizeof pr->what ? sizeof pr->what - (size_t)w : 0,       \
                   __VA_ARGS__))
    if (c->kf == KV_PAGED) MORE(" page=%zu", c->page);
    if (c->kf == KV_PAGED && c->inorder) MORE(" in order");
    MORE(" k %s v %s%s", dtn(c->kt), dtn(c->vt), c->causal ? " causal" : "");
    if (c->window) MORE(" window=%zu", c->window);
    if (c->softcap != 0) MORE(" softcap=%g", c->softcap);
    if (c->alibi) MORE(" alibi");
    if (c->mask) MORE(" mask %s", dtn(c->mt));
    if (c->sinks) MORE(" sinks");
    if (c->krange > 0 || c->kshift != 0) MORE(" k,v in %g+-%g", c->kshift, kr);
    if (c->extreme) MORE(" extreme quants");
    MORE("%s]", c->fast ? " q8_scores" : "");
#undef MORE
}

static inline void qprob_free(qprob *pr)
{
    free(pr->q), free(pr->k), free(pr->v), free(pr->mk), free(pr->qbuf), free(pr->obuf),
        free(pr->lse);
    free(pr->km);
    free(pr->slopes), free(pr->sinks), free(pr->kb.mem), free(pr->vb.mem), free(pr->table),
        free(pr->mbuf);
}

static inline sdpa_status qprob_run(qprob *pr, const sdpa_impl *impl, bench_pool *pool)
{
    tl_fill_sentinel(pr->obuf, pr->on + 2 * MARGIN);
    tl_fill_sentinel(pr->lse, pr->lsen + 2 * MARGIN);
    return tl_forward_on(impl, &pr->p, pool, &pr->tq, &pr->tk, &pr->tv, &pr->to);
}

/* The float64 oracle of a problem (attn.h), with the model of q8 scores when they are on. */
static inline void qprob_oracle(const qprob *pr, const sdpa_impl *impl, attn_ref *r)
{
    const qcase *c = &pr->c;
    const attn_problem P = {.B = c->B,
                            .Hq = c->qh,
                            .Hk = c->kvh,
                            .Lq = pr->Lq,
                            .Lk = pr->Lk,
                            .D = c->d,
                            .Dv = c->dv,
                            .lq = c->lq,
                            .lk = c->lk,
                            .q = pr->q,
                            .k = pr->k,
                            .v = pr->v,
                            .scale = 1.0 / sqrt((double)c->d),
                            .causal = c->causal,
                            .window = c->window,
                            .softcap = c->softcap,
                            .slopes = pr->slopes,
                            .sinks = pr->sinks,
                            .mask = pr->mk,
                            .mbs = c->qh * pr->Lq * pr->Lk,
                            .mhs = pr->Lq * pr->Lk,
                            .mis = pr->Lk,
                            .tanh_ulp = sdpa_impl_tanh_max_ulp(impl),
                            .q8_model = c->fast != 0,
                            .kmodel = pr->km,
                            .k_min = quantized(c->kt) && ref_format_of(c->kt)->has_min};
    attn_oracle64(&P, r);
}

static double g_worst; /* exact mode: the largest |error| / tolerance, printed per implementation */
static double g_worst_fast;  /* fast mode: the largest |o_fast - o| / its bound */
static double g_fast_err;    /* fast mode: the largest |o_fast - o| met */
static double g_worst_model; /* fast mode: the largest |o_fast - o_model| / its tolerance */

/* o and lse against the oracle (fast: within sdpa.h's bound for q8 scores), and every
   element no sequence owns still a sentinel. */
static inline void qprob_check(const qprob *pr, const attn_ref *r, bool fast)
{
    const qcase *c = &pr->c;
    const size_t Hq = c->qh, Lq = pr->Lq, Dv = c->dv;
    unsigned char *own = tl_xmalloc(pr->on);
    memset(own, 0, pr->on);
    for (size_t b = 0; b < c->B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < c->lq[b]; i++) memset(own + row_off(pr, b, h, i, Dv), 1, Dv);
    const float *o = pr->obuf + MARGIN, *lse = pr->lse + MARGIN;
    bool stop = false;
    for (size_t b = 0; b < c->B && !stop; b++)
        for (size_t h = 0; h < Hq && !stop; h++)
            for (size_t i = 0; i < c->lq[b] && !stop; i++) {
                const size_t row = (b * Hq + h) * Lq + i, at = row_off(pr, b, h, i, Dv);
                const double fast_o = fast ? expm1(2 * r->dq[row]) * r->vmax[row] : 0.0;
                for (size_t e = 0; e < Dv && !stop; e++) {
                    const float got = o[at + e];
                    const double ref = r->o[row * Dv + e];
                    if (r->seen[row] == 0) {
                        stop = !CHECK(got == 0.0f,
                                      "%s: b=%zu h=%zu i=%zu sees no key: o[%zu] = %g, want 0",
                                      pr->what, b, h, i, e, got);
                        continue;
                    }
                    const double tol0 = r->tol[row] * r->wabs[row * Dv + e] +
                                        2 * r->ds[row] * (r->wabs[row * Dv + e] + fabs(ref)) +
                                        FLT_TRUE_MIN;
                    const double tol = tol0 + fast_o, err = fabs(got - ref);
                    if (fast) {
                        if (err / tol > g_worst_fast) g_worst_fast = err / tol;
                        if (err > g_fast_err) g_fast_err = err;
                    } else if (err / tol > g_worst) {
                        g_worst = err / tol;
                    }
                    stop = !CHECK(err <= tol,
                                  "%s: b=%zu h=%zu i=%zu (sees %zu keys) o[%zu] = %.9g, float64 "
                                  "%.9g, |err| %.3g > %.3g%s",
                                  pr->what, b, h, i, r->seen[row], e, got, ref, err, tol,
                                  fast ? " (fast-score bound)" : "");
                    if (!fast || stop) continue;
                    const double refm = r->om[row * Dv + e], errm = fabs(got - refm);
                    const double tolm =
                        tol0 + 2 * r->ds[row] * fabs(refm) + expm1(2 * r->tm[row]) * r->vmax[row];
                    if (errm / tolm > g_worst_model) g_worst_model = errm / tolm;
                    stop = !CHECK(errm <= tolm,
                                  "%s: b=%zu h=%zu i=%zu o[%zu] = %.9g, the float64 model of the "
                                  "q8 scores %.9g (exact "
                                  "%.9g), |err| %.3g > %.3g",
                                  pr->what, b, h, i, e, got, refm, ref, errm, tolm);
                }
                const float gl = lse[row];
                const double rl = r->lse[row];
                if (!stop && r->seen[row] == 0)
                    stop = !CHECK(gl == (float)rl,
                                  "%s: b=%zu h=%zu i=%zu sees no key: lse %g, want %g", pr->what, b,
                                  h, i, gl, rl);
                else if (!stop)
                    stop = !CHECK(fabs(gl - rl) <= r->tol[row] * (1 + fabs(rl)) + 2 * r->ds[row] +
                                                       (fast ? r->dq[row] : 0),
                                  "%s: b=%zu h=%zu i=%zu lse %.9g, float64 %.9g", pr->what, b, h, i,
                                  gl, rl);
                if (!stop && fast && r->seen[row] > 0)
                    stop = !CHECK(
                        fabs(gl - r->lsem[row]) <=
                            r->tol[row] * (1 + fabs(rl)) + 2 * r->ds[row] + r->tm[row],
                        "%s: b=%zu h=%zu i=%zu lse %.9g, the float64 model of the q8 scores %.9g",
                        pr->what, b, h, i, gl, r->lsem[row]);
            }
    size_t bad = 0;
    for (size_t e = 0; e < pr->on + 2 * MARGIN; e++) {
        const bool in = e >= MARGIN && e < MARGIN + pr->on && own[e - MARGIN];
        if (!in && !tl_is_sentinel(pr->obuf[e])) bad++;
    }
    CHECK(bad == 0, "%s: %zu elements of o that no sequence's row owns were written", pr->what,
          bad);
    bad = 0;
    for (size_t e = 0; e < pr->lsen + 2 * MARGIN; e++) {
        bool in = e >= MARGIN && e - MARGIN < pr->lsen;
        if (in) in = (e - MARGIN) % Lq < c->lq[(e - MARGIN) / (Hq * Lq)];
        if (!in && !tl_is_sentinel(pr->lse[e])) bad++;
    }
    CHECK(bad == 0, "%s: %zu lse entries past the sequences' rows were written", pr->what, bad);
    free(own);
}

/* The call serially against the oracle, then on 2 and 3 threads for the same bits; with
   q8_scores also exact mode against the same oracle, and the two must differ somewhere. */
static inline void qprob_case(const sdpa_impl *impl, const qcase *c, uint64_t seed)
{
    qprob pr;
    qprob_init(&pr, c, seed);
    attn_ref r;
    qprob_oracle(&pr, impl, &r);
    const size_t ob = (pr.on + 2 * MARGIN) * sizeof(float),
                 lb = (pr.lsen + 2 * MARGIN) * sizeof(float);
    float *o1 = tl_xmalloc(ob), *l1 = tl_xmalloc(lb);
    for (int fast = c->fast; fast >= 0; fast--) {
        pr.p.q8_scores = fast;
        sdpa_status st = qprob_run(&pr, impl, NULL);
        char msg[256] = "";
        if (st != SDPA_OK) sdpa_validate(&pr.p, &pr.tq, &pr.tk, &pr.tv, &pr.to, msg, sizeof msg);
        if (!CHECK(st == SDPA_OK, "%s%s: status %s (%s)", pr.what, fast ? "" : " exact",
                   sdpa_status_str(st), msg))
            break;
        qprob_check(&pr, &r, fast);
        if (!fast && c->fast) { /* o1 holds the fast output */
            CHECK(memcmp(o1, pr.obuf, ob) != 0,
                  "%s: q8_scores 1 gives the very bits of exact mode (q8_scores 0): ignored?",
                  pr.what);
            continue;
        }
        memcpy(o1, pr.obuf, ob), memcpy(l1, pr.lse, lb);
        for (size_t t = 0; t < 2 && !tl_sampled_out(t + 1); t++) {
            st = qprob_run(&pr, impl, g_pool[t]);
            CHECK(st == SDPA_OK && memcmp(o1, pr.obuf, ob) == 0 && memcmp(l1, pr.lse, lb) == 0,
                  "%s: %zu threads give other bits than one", pr.what,
                  bench_pool_threads(g_pool[t]));
        }
    }
    free(o1), free(l1);
    attn_ref_free(&r);
    qprob_free(&pr);
}

#endif /* SDPA_TEST_PROBLEM_H */
