/* kernel_def.h -- an implementation's kernel table, defined from functions named <op>_<isa> and its tuning macros */
#ifndef SDPA_KERNEL_DEF_H
#define SDPA_KERNEL_DEF_H

#include "kernel_table.h"
#include "tanh.h"

/* Tuning macros an implementation does not define name parameters it does not have (0). */
#ifndef DECODE_MAX_ROWS
#define DECODE_MAX_ROWS 0
#endif
#ifndef DECODE_BLOCK
#define DECODE_BLOCK 0
#endif
#ifndef DECODE_BLOCK_FEW
#define DECODE_BLOCK_FEW 0
#endif
#ifndef DECODE_PF_KEYS
#define DECODE_PF_KEYS 0
#endif
#ifndef DECODE_PV_GROUP
#define DECODE_PV_GROUP 0
#endif
#ifndef PREFILL_BLOCK
#define PREFILL_BLOCK 0
#endif
#ifndef PREFILL_PANEL
#define PREFILL_PANEL 0
#endif
#ifndef SCORE_MR
#define SCORE_MR 0
#endif
#ifndef SCORE_NR
#define SCORE_NR 0
#endif
#ifndef PV_MR
#define PV_MR 0
#endif
#ifndef PV_NR
#define PV_NR 0
#endif
#ifndef PV_KB
#define PV_KB 0
#endif
#ifndef PAGED_ROWS
#define PAGED_ROWS 0 /* units with sdpa_rows.pages: none (see sdpa_kernels.paged_rows) */
#endif

#ifndef DEQUANT_FN
#define DEQUANT_FN NULL /* sdpa_kernels.dequant: none, the driver converts */
#endif
#ifndef QUANT_ROWS
#define QUANT_ROWS 0 /* units with block-format K or V read in place: none (sdpa_kernels.quant_rows) */
#endif

/* The entry and scratch size of an implementation with a decode and a prefill path, defined
   elsewhere as sdpa_decode_<isa> and sdpa_prefill_<isa> (and their _ws_ sizes). */
#define SDPA_DEFINE_PATHS(isa)                                                                    \
    static void rows_##isa(const sdpa_rows *w)                                                    \
    {                                                                                             \
        if (w->rows <= DECODE_MAX_ROWS)                                                           \
            sdpa_decode_##isa(w);                                                                 \
        else                                                                                      \
            sdpa_prefill_##isa(w);                                                                \
    }                                                                                             \
    static size_t ws_floats_##isa(size_t rows, size_t d, size_t dv, size_t block)                 \
    {                                                                                             \
        return rows <= DECODE_MAX_ROWS ? sdpa_decode_ws_##isa(rows, d, dv, block)                 \
                                       : sdpa_prefill_ws_##isa(rows, d, dv, block);               \
    }

/* const sdpa_kernels sdpa_kernels_<isa>, from score_f32_<isa>, softmax_online_f32_<isa>,
   accumulate_f32_<isa>, exp_f32_<isa>, rows_<isa> and ws_floats_<isa>, the exp's stated bound
   and the tuning macros. */
#define SDPA_DEFINE_KERNELS(isa, exp_ulp)                                                         \
    const sdpa_kernels sdpa_kernels_##isa = {                                                     \
        .score_f32 = score_f32_##isa,                                                             \
        .softmax_online_f32 = softmax_online_f32_##isa,                                           \
        .accumulate_f32 = accumulate_f32_##isa,                                                   \
        .exp_f32 = exp_f32_##isa,                                                                 \
        .exp_max_ulp = (exp_ulp),                                                                 \
        .tanh_f32 = sdpa_tanh_f32,                                                                \
        .tanh_max_ulp = SDPA_TANH_MAX_ULP,                                                        \
        .rows = rows_##isa,                                                                       \
        .ws_floats = ws_floats_##isa,                                                             \
        .paged_rows = PAGED_ROWS,                                                                 \
        .quant_rows = QUANT_ROWS,                                                                 \
        .dequant = DEQUANT_FN,                                                                    \
        .tuning = {.decode_max_rows = DECODE_MAX_ROWS,                                            \
                   .decode_block = DECODE_BLOCK,                                                  \
                   .decode_block_few = DECODE_BLOCK_FEW,                                          \
                   .decode_pf_keys = DECODE_PF_KEYS,                                              \
                   .decode_pv_group = DECODE_PV_GROUP,                                            \
                   .prefill_block = PREFILL_BLOCK,                                                \
                   .prefill_panel = PREFILL_PANEL,                                                \
                   .score_mr = SCORE_MR,                                                          \
                   .score_nr = SCORE_NR,                                                          \
                   .pv_mr = PV_MR,                                                                \
                   .pv_nr = PV_NR,                                                                \
                   .pv_kb = PV_KB},                                                               \
    }

#endif /* SDPA_KERNEL_DEF_H */
