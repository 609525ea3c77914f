/* test_bad_input.c -- invalid calls are refused with a status and a message, and write nothing */
#include "attn.h"

#include <stdint.h>

/* A valid baseline call on small dense tensors, which each case then breaks in one way. */
enum { B = 2, HQ = 4, HK = 2, LQ = 3, LK = 5, D = 8, DV = 8 };

typedef struct call {
    sdpa_params p;
    sdpa_tensor q, k, v, o;
    bool no_params, no_q, no_k, no_v, no_o;
} call;

static float qbuf[B * HQ * LQ * D], kbuf[B * HK * LK * D], vbuf[B * HK * LK * DV];
static float obuf[B * HQ * LQ * DV + 64]; /* room for the aliasing strides below */
static float lsebuf[B * HQ * LQ + 16];

static sdpa_tensor dense(void *data, size_t h, size_t t, size_t d)
{
    sdpa_tensor x = {data, SDPA_F32, (ptrdiff_t)(h * t * d), (ptrdiff_t)(t * d), (ptrdiff_t)d};
    return x;
}

static call baseline(void)
{
    call c;
    memset(&c, 0, sizeof c);
    c.p.batch = B, c.p.q_heads = HQ, c.p.kv_heads = HK, c.p.q_len = LQ, c.p.kv_len = LK,
    c.p.head_dim = D;
    c.p.lse = lsebuf;
    c.q = dense(qbuf, HQ, LQ, D);
    c.k = dense(kbuf, HK, LK, D);
    c.v = dense(vbuf, HK, LK, DV);
    c.o = dense(obuf, HQ, LQ, DV);
    return c;
}

typedef void (*breaker)(call *c);

typedef struct bad_case {
    const char *name;
    breaker make;
    bool may_be_ok; /* valid requests the build may not serve: OK or SDPA_ERR_UNSUPPORTED */
} bad_case;

#define BREAK(fn, body)                                                                            \
    static void fn(call *c) { body; }

BREAK(null_params, c->no_params = true)
BREAK(null_q, c->no_q = true)
BREAK(null_k, c->no_k = true)
BREAK(null_v, c->no_v = true)
BREAK(null_o, c->no_o = true)
BREAK(null_q_data, c->q.data = NULL)
BREAK(null_k_data, c->k.data = NULL)
BREAK(null_v_data, c->v.data = NULL)
BREAK(null_o_data, c->o.data = NULL)
BREAK(zero_batch, c->p.batch = 0)
BREAK(zero_q_heads, c->p.q_heads = 0)
BREAK(zero_kv_heads, c->p.kv_heads = 0)
BREAK(zero_q_len, c->p.q_len = 0)
BREAK(zero_kv_len, c->p.kv_len = 0)
BREAK(zero_head_dim, c->p.head_dim = 0)
BREAK(heads_not_dividing, c->p.q_heads = 3)
BREAK(more_kv_heads, (c->p.q_heads = 2, c->p.kv_heads = 4))
BREAK(batch_overflow, c->p.batch = SIZE_MAX / 2)
BREAK(heads_overflow, (c->p.q_heads = SIZE_MAX / 2 + 1, c->p.kv_heads = 1))
BREAK(q_len_overflow, c->p.q_len = SIZE_MAX / 4)
BREAK(kv_len_overflow, c->p.kv_len = SIZE_MAX / 3)
BREAK(head_dim_overflow, c->p.head_dim = SIZE_MAX / 2)
BREAK(v_dim_overflow, c->p.v_dim = SIZE_MAX - 1)
BREAK(stride_overflow, c->k.token_stride = PTRDIFF_MAX / 2)
BREAK(negative_stride_overflow, c->v.batch_stride = PTRDIFF_MIN / 2 + 1)
BREAK(scale_nan, c->p.scale = NAN)
BREAK(scale_inf, c->p.scale = INFINITY)
BREAK(scale_minus_inf, c->p.scale = -INFINITY)
BREAK(unknown_dtype_k, c->k.dtype = (sdpa_dtype)99)
BREAK(unknown_dtype_v, c->v.dtype = (sdpa_dtype)-1)
BREAK(unknown_dtype_q, c->q.dtype = (sdpa_dtype)77)
BREAK(q_q8_0, c->q.dtype = SDPA_Q8_0)
BREAK(o_q4_0, c->o.dtype = SDPA_Q4_0)
BREAK(unknown_dtype_o, c->o.dtype = (sdpa_dtype)100)
BREAK(q_f16, c->q.dtype = SDPA_F16)
BREAK(q_bf16, c->q.dtype = SDPA_BF16)
BREAK(o_f16, c->o.dtype = SDPA_F16)
BREAK(o_token_stride_0, c->o.token_stride = 0)
BREAK(o_token_stride_overlaps, c->o.token_stride = DV - 1)
BREAK(o_token_stride_negative_overlaps, (c->o.data = obuf + 32, c->o.token_stride = -(DV - 2)))
BREAK(o_head_stride_0, c->o.head_stride = 0)
BREAK(o_batch_stride_0, c->o.batch_stride = 0)
BREAK(o_heads_alias_tokens,
      (c->o.head_stride = DV, c->o.token_stride = DV, c->o.batch_stride = HQ * LQ * DV))
BREAK(o_batch_aliases_heads, c->o.batch_stride = DV * LQ)
BREAK(o_negative_head_alias,
      (c->o.data = obuf + 64, c->o.head_stride = -DV, c->o.token_stride = DV))
BREAK(o_overlaps_q, c->o.data = qbuf)

static const bad_case cases[] = {
    {"params NULL", null_params, false},
    {"q NULL", null_q, false},
    {"k NULL", null_k, false},
    {"v NULL", null_v, false},
    {"o NULL", null_o, false},
    {"q data NULL", null_q_data, false},
    {"k data NULL", null_k_data, false},
    {"v data NULL", null_v_data, false},
    {"o data NULL", null_o_data, false},
    {"batch 0", zero_batch, false},
    {"q_heads 0", zero_q_heads, false},
    {"kv_heads 0", zero_kv_heads, false},
    {"q_len 0", zero_q_len, false},
    {"kv_len 0", zero_kv_len, false},
    {"head_dim 0", zero_head_dim, false},
    {"q_heads 3 not a multiple of kv_heads 2", heads_not_dividing, false},
    {"kv_heads 4 > q_heads 2", more_kv_heads, false},
    {"batch SIZE_MAX/2", batch_overflow, false},
    {"q_heads SIZE_MAX/2+1", heads_overflow, false},
    {"q_len SIZE_MAX/4", q_len_overflow, false},
    {"kv_len SIZE_MAX/3", kv_len_overflow, false},
    {"head_dim SIZE_MAX/2", head_dim_overflow, false},
    {"v_dim SIZE_MAX-1", v_dim_overflow, false},
    {"k token_stride PTRDIFF_MAX/2", stride_overflow, false},
    {"v batch_stride PTRDIFF_MIN/2", negative_stride_overflow, false},
    {"scale NaN", scale_nan, false},
    {"scale +inf", scale_inf, false},
    {"scale -inf", scale_minus_inf, false},
    {"k dtype 99", unknown_dtype_k, false},
    {"v dtype -1", unknown_dtype_v, false},
    {"q dtype 77", unknown_dtype_q, false},
    {"q q8_0 (block formats are for k and v)", q_q8_0, true},
    {"o q4_0", o_q4_0, true},
    {"o dtype 100", unknown_dtype_o, false},
    {"q f16", q_f16, true},
    {"q bf16", q_bf16, true},
    {"o f16", o_f16, true},
    {"o token_stride 0 (rows alias)", o_token_stride_0, false},
    {"o token_stride dv-1 (rows overlap)", o_token_stride_overlaps, false},
    {"o token_stride -(dv-2) (rows overlap backwards)", o_token_stride_negative_overlaps, false},
    {"o head_stride 0", o_head_stride_0, false},
    {"o batch_stride 0", o_batch_stride_0, false},
    {"o head_stride == token_stride (head 1 is token 1 of head 0)", o_heads_alias_tokens, false},
    {"o batch_stride aliases heads", o_batch_aliases_heads, false},
    {"o negative head_stride aliasing tokens", o_negative_head_alias, false},
    {"o overlaps q", o_overlaps_q, false},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static bool untouched(void)
{
    for (size_t i = 0; i < sizeof obuf / sizeof obuf[0]; i++)
        if (!tl_is_sentinel(obuf[i])) return false;
    for (size_t i = 0; i < sizeof lsebuf / sizeof lsebuf[0]; i++)
        if (!tl_is_sentinel(lsebuf[i])) return false;
    return true;
}

static sdpa_status call_forward(const sdpa_impl *impl, call *c)
{
    const sdpa_params *p = c->no_params ? NULL : &c->p;
    const sdpa_tensor *q = c->no_q ? NULL : &c->q, *k = c->no_k ? NULL : &c->k,
                      *v = c->no_v ? NULL : &c->v, *o = c->no_o ? NULL : &c->o;
    return impl ? sdpa_impl_forward(impl, p, q, k, v, o) : sdpa_forward(p, q, k, v, o);
}

/* Each broken call: non-OK, sdpa_validate agrees and explains, o and lse untouched. impl NULL:
   through sdpa_forward (the active implementation). */
static void check_cases(const sdpa_impl *impl)
{
    for (size_t i = 0; i < N_CASES; i++) {
        call c = baseline();
        cases[i].make(&c);
        tl_fill_sentinel(obuf, sizeof obuf / sizeof obuf[0]);
        tl_fill_sentinel(lsebuf, sizeof lsebuf / sizeof lsebuf[0]);
        sdpa_status st = call_forward(impl, &c);
        if (cases[i].may_be_ok && st == SDPA_OK) continue; /* served: fine, nothing more to check */
        if (cases[i].may_be_ok)
            CHECK(st == SDPA_ERR_UNSUPPORTED, "%s: status %d (%s), want OK or SDPA_ERR_UNSUPPORTED",
                  cases[i].name, (int)st, sdpa_status_str(st));
        else
            CHECK(st != SDPA_OK, "%s: accepted (SDPA_OK)", cases[i].name);
        CHECK(untouched(), "%s: status %s but the output or lse buffer was written", cases[i].name,
              sdpa_status_str(st));
        char msg[256];
        memset(msg, 0, sizeof msg);
        const sdpa_params *p = c.no_params ? NULL : &c.p;
        sdpa_status sv = sdpa_validate(p, c.no_q ? NULL : &c.q, c.no_k ? NULL : &c.k,
                                       c.no_v ? NULL : &c.v, c.no_o ? NULL : &c.o, msg, sizeof msg);
        CHECK(sv == st, "%s: sdpa_validate says %d (%s), the call said %d (%s)", cases[i].name,
              (int)sv, sdpa_status_str(sv), (int)st, sdpa_status_str(st));
        CHECK(msg[0] != '\0' && strcmp(msg, "ok") != 0, "%s: sdpa_validate message is \"%s\"",
              cases[i].name, msg);
        CHECK(untouched(), "%s: sdpa_validate wrote the output", cases[i].name);
        /* validate with no message buffer must not crash and says the same */
        CHECK(sdpa_validate(p, c.no_q ? NULL : &c.q, c.no_k ? NULL : &c.k, c.no_v ? NULL : &c.v,
                            c.no_o ? NULL : &c.o, NULL, 0) == st,
              "%s: sdpa_validate without a message buffer disagrees", cases[i].name);
    }
    /* and the unbroken baseline is accepted, with "ok" */
    call c = baseline();
    char msg[64];
    sdpa_status sv = sdpa_validate(&c.p, &c.q, &c.k, &c.v, &c.o, msg, sizeof msg);
    CHECK(sv == SDPA_OK, "baseline: sdpa_validate says %s (%s)", sdpa_status_str(sv), msg);
    tl_fill_sentinel(obuf, sizeof obuf / sizeof obuf[0]);
    sdpa_status st = call_forward(impl, &c);
    CHECK(st == SDPA_OK, "baseline: status %s", sdpa_status_str(st));
    /* a message buffer of 1 byte gets just the terminator */
    msg[0] = 'x';
    c.p.batch = 0;
    sdpa_validate(&c.p, &c.q, &c.k, &c.v, &c.o, msg, 1);
    CHECK(msg[0] == '\0', "sdpa_validate with msg_len 1 wrote '%c', want the terminator only",
          msg[0]);
}

static void test_impl_forward(const sdpa_impl *impl) { check_cases(impl); }

/* sdpa_impl_forward with NULL or an unsupported implementation refuses and writes nothing. */
static void test_bad_impl(void)
{
    tl_start("forward on a NULL or unsupported implementation", "none");
    call c = baseline();
    tl_fill_sentinel(obuf, sizeof obuf / sizeof obuf[0]);
    tl_fill_sentinel(lsebuf, sizeof lsebuf / sizeof lsebuf[0]);
    sdpa_status st = sdpa_impl_forward(NULL, &c.p, &c.q, &c.k, &c.v, &c.o);
    CHECK(st != SDPA_OK && untouched(), "NULL impl: status %s", sdpa_status_str(st));
    for (size_t i = 0; i < sdpa_impl_count(); i++) {
        const sdpa_impl *impl = sdpa_impl_at(i);
        if (sdpa_impl_supported(impl)) continue;
        st = sdpa_impl_forward(impl, &c.p, &c.q, &c.k, &c.v, &c.o);
        CHECK(st == SDPA_ERR_UNSUPPORTED && untouched(),
              "unsupported %s: status %s, want SDPA_ERR_UNSUPPORTED", sdpa_impl_name(impl),
              sdpa_status_str(st));
    }
    /* the primitives on NULL do nothing (and the softmax returns 1) */
    float s[4];
    tl_fill_sentinel(s, 4);
    float q[4] = {1, 2, 3, 4}, m = -INFINITY, l = 0;
    sdpa_impl_score_f32(NULL, q, q, 4, 1, 4, 1.0f, s);
    CHECK(tl_is_sentinel(s[0]), "score on NULL impl wrote %g", s[0]);
    CHECK(sdpa_impl_softmax_online_f32(NULL, q, 4, &m, &l) == 1.0f && m == -INFINITY && l == 0.0f,
          "softmax on NULL impl changed the state");
    sdpa_impl_exp_f32(NULL, q, s, 4);
    CHECK(tl_is_sentinel(s[0]), "exp on NULL impl wrote %g", s[0]);
    tl_end();
}

static void test_status_strings(void)
{
    tl_start("status and selection strings", "none");
    for (int s = SDPA_OK; s <= SDPA_ERR_UNKNOWN_IMPL + 3; s++) {
        const char *str = sdpa_status_str((sdpa_status)s);
        CHECK(str && str[0], "sdpa_status_str(%d) is empty", s);
    }
    CHECK(sdpa_status_str((sdpa_status)-1) && sdpa_status_str((sdpa_status)-1)[0],
          "sdpa_status_str(-1) is empty");
    for (int r = SDPA_SELECTED_AUTO; r <= SDPA_SELECTED_FORCED + 2; r++) {
        const char *str = sdpa_selection_str((sdpa_selection)r);
        CHECK(str && str[0], "sdpa_selection_str(%d) is empty", r);
    }
    tl_end();
}

int main(void)
{
    tl_header("invalid calls");
    tl_for_each_impl("bad input via sdpa_impl_forward", test_impl_forward);
    tl_start("bad input via sdpa_forward (active)", sdpa_impl_name(sdpa_active()));
    check_cases(NULL);
    tl_end();
    test_bad_impl();
    test_status_strings();
    return tl_finish();
}
