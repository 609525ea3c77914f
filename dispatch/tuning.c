/* tuning.c -- the planner's block size; introspection: caches, planner and impl tunables, peaks */
#include <stdint.h>

#include "internal.h"

/* Every field of sdpa_tuning (kernel_table.h), one line each, in the struct's order: a new
   field is one more line here. */
#define TUNING_FIELD(field, about)                                                                 \
    {                                                                                              \
#field, offsetof(sdpa_tuning, field), about                                                \
    }
static const struct tuning_field {
    const char *name;
    size_t offset;
    const char *about;
} tuning_fields[] = {
    TUNING_FIELD(decode_max_rows, "rows of the largest unit that takes the decode path"),
    TUNING_FIELD(decode_block, "keys per decode block, at most"),
    TUNING_FIELD(decode_block_few, "keys per decode block when few rows stream both K and V ahead"),
    TUNING_FIELD(decode_pf_keys, "software-prefetch distance of the decode streams, in keys"),
    TUNING_FIELD(decode_pv_kb, "keys per decode P.V sub-block (their V rows stay in L1)"),
    TUNING_FIELD(decode_ilv_turn, "keys per turn of a few-row decode that alternates a block's "
                                  "P.V with the next block's scores (contiguous K/V, page pieces)"),
    TUNING_FIELD(decode_q_block, "keys per block of the block-format decode path, at most"),
    TUNING_FIELD(decode_q_pf_keys,
                 "software-prefetch distance of the block-format decode, in keys"),
    TUNING_FIELD(decode_q_pf_paged, "the same through pages of at most decode_q_pv_kb keys, read "
                                    "a block at a time"),
    TUNING_FIELD(decode_q_pv_kb,
                 "keys per P.V sub-block of the block-format decode (V rows in L1)"),
    TUNING_FIELD(prefill_block,
                 "keys per prefill block, at most (the planner's block may be less)"),
    TUNING_FIELD(prefill_panel, "query rows packed together (a Qᵀ panel or a Q panel)"),
    TUNING_FIELD(prefill_pf_lines, "lines of the driver's next data requested per score tile"),
    TUNING_FIELD(score_mr, "query rows of the prefill score micro-kernel score_<isa>_<mr>x<nr>"),
    TUNING_FIELD(score_nr, "keys of the prefill score micro-kernel"),
    TUNING_FIELD(pv_mr, "query rows of the prefill P.V micro-kernel pv_<isa>_<mr>x<nr>"),
    TUNING_FIELD(pv_nr, "output columns of the prefill P.V micro-kernel"),
    TUNING_FIELD(pv_kb, "keys per prefill P.V sub-block (absent: the whole block)"),
};
#undef TUNING_FIELD

size_t sdpa_tuning_fields(void) { return sizeof tuning_fields / sizeof tuning_fields[0]; }

/* Entry n of a list: written when there is room, counted either way. */
static size_t put(sdpa_tunable *out, size_t cap, size_t n, const char *name, size_t value,
                  const char *about)
{
    if (out && n < cap) {
        out[n].name = name;
        out[n].value = value;
        out[n].about = about;
    }
    return n + 1;
}

size_t sdpa_tuning_list(const sdpa_tuning *t, sdpa_tunable *out, size_t cap)
{
    size_t n = 0;
    if (!t) return 0;
    for (size_t i = 0; i < sdpa_tuning_fields(); i++) {
        const struct tuning_field *f = &tuning_fields[i];
        const size_t v = *(const size_t *)(const void *)((const char *)t + f->offset);
        if (v) n = put(out, cap, n, f->name, v, f->about);
    }
    return n;
}

size_t sdpa_impl_tunables(const sdpa_impl *impl, sdpa_tunable *out, size_t cap)
{
    return impl ? sdpa_tuning_list(&impl->k->tuning, out, cap) : 0;
}

size_t sdpa_plan_block(size_t D, size_t Dv)
{
    /* a block of K and V (f32) plus its score tile should sit in about half of L2 */
    if (D > SIZE_MAX / 16 || Dv > SIZE_MAX / 16) return BLOCK_MIN; /* only from introspection */
    const size_t l2 = sdpa_cached_l2_bytes();
    size_t b = l2 / 2 / (sizeof(float) * (D + Dv + ROWS_TARGET));
    b = b / 16 * 16;
    return b < BLOCK_MIN ? BLOCK_MIN : b > BLOCK_MAX ? BLOCK_MAX : b;
}

size_t sdpa_planner_tunables(size_t head_dim, sdpa_tunable *out, size_t cap)
{
    size_t n = 0;
#define PUT_PARAM(c, name, value, about) n = put(out, cap, n, name, (size_t)(c), about);
    SDPA_PLANNER_PARAMS(PUT_PARAM)
#undef PUT_PARAM
    if (head_dim)
        n = put(out, cap, n, "block", sdpa_plan_block(head_dim, head_dim),
                "keys per block for this head_dim: f32 K and V rows and a score tile of "
                "rows_target rows in half of L2, a multiple of 16 within [block_min, block_max]");
    return n;
}

void sdpa_cache_info_get(sdpa_cache_info *out)
{
    if (!out) return;
    const sdpa_caches *c = &sdpa_cpu_facts()->caches;
    out->l1d_bytes = c->bytes[SDPA_CACHE_L1D];
    out->l2_bytes = c->bytes[SDPA_CACHE_L2];
    out->l3_bytes = c->bytes[SDPA_CACHE_L3];
    out->l1d_source = c->source[SDPA_CACHE_L1D];
    out->l2_source = c->source[SDPA_CACHE_L2];
    out->l3_source = c->source[SDPA_CACHE_L3];
}

const char *sdpa_impl_peak_class(const sdpa_impl *impl) { return impl ? impl->peak_class : ""; }
