/* kernel_def.h -- an implementation's kernel table, defined from functions named <op>_<isa> and its
 * tuning macros */
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
#ifndef DECODE_PV_KB
#define DECODE_PV_KB 0
#endif
#ifndef DECODE_ILV_TURN
#define DECODE_ILV_TURN 0
#endif
#ifndef DECODE_Q_BLOCK
#define DECODE_Q_BLOCK 0
#endif
#ifndef DECODE_Q_PF_KEYS
#define DECODE_Q_PF_KEYS 0
#endif
#ifndef DECODE_Q_PF_PAGED
#define DECODE_Q_PF_PAGED 0
#endif
#ifndef DECODE_Q_PV_KB
#define DECODE_Q_PV_KB 0
#endif
#ifndef PREFILL_BLOCK
#define PREFILL_BLOCK 0
#endif
#ifndef PREFILL_PANEL
#define PREFILL_PANEL 0
#endif
#ifndef PREFILL_PF_LINES
#define PREFILL_PF_LINES 0
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
#define QUANT_ROWS                                                                                 \
    0 /* units with block-format K or V read in place: none (sdpa_kernels.quant_rows) */
#endif

/* The entry and scratch size of an implementation with a decode and a prefill path, defined
   elsewhere as sdpa_decode_<isa> and sdpa_prefill_<isa> (and their _ws_ sizes): exported, as
   sdpa_rows_<isa> and sdpa_ws_floats_<isa>, for SDPA_DEFINE_KERNELS_EXPORTED. */
#define SDPA_DEFINE_PATHS(isa)                                                                     \
    void sdpa_rows_##isa(const sdpa_rows *w);                                                      \
    size_t sdpa_ws_floats_##isa(size_t rows, size_t d, size_t dv, size_t block);                   \
    void sdpa_rows_##isa(const sdpa_rows *w)                                                       \
    {                                                                                              \
        if (w->rows <= DECODE_MAX_ROWS)                                                            \
            sdpa_decode_##isa(w);                                                                  \
        else                                                                                       \
            sdpa_prefill_##isa(w);                                                                 \
    }                                                                                              \
    size_t sdpa_ws_floats_##isa(size_t rows, size_t d, size_t dv, size_t block)                    \
    {                                                                                              \
        return rows <= DECODE_MAX_ROWS ? sdpa_decode_ws_##isa(rows, d, dv, block)                  \
                                       : sdpa_prefill_ws_##isa(rows, d, dv, block);                \
    }

/* The function fields of a table, from functions named <pfx><op>_<isa>: pfx empty for the
   defining file's own (static) ones, sdpa_ for exported ones. */
#define SDPA_KERNEL_FNS(pfx, isa)                                                                  \
    .score_f32 = pfx##score_f32_##isa, .softmax_online_f32 = pfx##softmax_online_f32_##isa,        \
    .accumulate_f32 = pfx##accumulate_f32_##isa, .exp_f32 = pfx##exp_f32_##isa,                    \
    .rows = pfx##rows_##isa, .ws_floats = pfx##ws_floats_##isa

/* The other fields: the exp's stated bound, tanh, and what the tuning macros say. */
#define SDPA_KERNEL_PARAMS(exp_ulp)                                                                \
    .exp_max_ulp = (exp_ulp), .tanh_f32 = sdpa_tanh_f32, .tanh_max_ulp = SDPA_TANH_MAX_ULP,        \
    .paged_rows = PAGED_ROWS, .quant_rows = QUANT_ROWS, .dequant = DEQUANT_FN,                     \
    .tuning = {.decode_max_rows = DECODE_MAX_ROWS,                                                 \
               .decode_block = DECODE_BLOCK,                                                       \
               .decode_block_few = DECODE_BLOCK_FEW,                                               \
               .decode_pf_keys = DECODE_PF_KEYS,                                                   \
               .decode_pv_kb = DECODE_PV_KB,                                                       \
               .decode_ilv_turn = DECODE_ILV_TURN,                                                 \
               .decode_q_block = DECODE_Q_BLOCK,                                                   \
               .decode_q_pf_keys = DECODE_Q_PF_KEYS,                                               \
               .decode_q_pf_paged = DECODE_Q_PF_PAGED,                                             \
               .decode_q_pv_kb = DECODE_Q_PV_KB,                                                   \
               .prefill_block = PREFILL_BLOCK,                                                     \
               .prefill_panel = PREFILL_PANEL,                                                     \
               .prefill_pf_lines = PREFILL_PF_LINES,                                               \
               .score_mr = SCORE_MR,                                                               \
               .score_nr = SCORE_NR,                                                               \
               .pv_mr = PV_MR,                                                                     \
               .pv_nr = PV_NR,                                                                     \
               .pv_kb = PV_KB}

/* const sdpa_kernels sdpa_kernels_<isa>, from score_f32_<isa>, softmax_online_f32_<isa>,
   accumulate_f32_<isa>, exp_f32_<isa>, rows_<isa> and ws_floats_<isa>, the exp's stated bound
   and the tuning macros. */
#define SDPA_DEFINE_KERNELS(isa, exp_ulp)                                                          \
    const sdpa_kernels sdpa_kernels_##isa = {SDPA_KERNEL_FNS(, isa), SDPA_KERNEL_PARAMS(exp_ulp)}

/* The same from the exported sdpa_score_f32_<isa>, ..., sdpa_rows_<isa>, sdpa_ws_floats_<isa>,
   which an implementation derived from this one takes (SDPA_DEFINE_KERNELS_FROM). */
#define SDPA_DEFINE_KERNELS_EXPORTED(isa, exp_ulp)                                                 \
    const sdpa_kernels sdpa_kernels_##isa = {SDPA_KERNEL_FNS(sdpa_, isa),                          \
                                             SDPA_KERNEL_PARAMS(exp_ulp)}

/* const sdpa_kernels sdpa_kernels_<isa> derived from the implementation <parent>: its parent's
   table (the parent's exported functions, SDPA_DEFINE_KERNELS_EXPORTED, and the tuning macros
   of the parent's header, which the defining file includes) with the fields that differ given
   as designated initializers after the bound, e.g. .rows = rows_<isa>: a later initializer of
   a field wins (C11 6.7.9), and the compiler's warning about exactly that is off here. */
#if defined(__clang__)
#define SDPA_OVERRIDE_INIT_BEGIN                                                                   \
    _Pragma("clang diagnostic push") _Pragma("clang diagnostic ignored "                           \
                                             "\"-Winitializer-overrides\"")
#define SDPA_OVERRIDE_INIT_END _Pragma("clang diagnostic pop")
#elif defined(__GNUC__)
#define SDPA_OVERRIDE_INIT_BEGIN                                                                   \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Woverride-init\"")
#define SDPA_OVERRIDE_INIT_END _Pragma("GCC diagnostic pop")
#else
#define SDPA_OVERRIDE_INIT_BEGIN
#define SDPA_OVERRIDE_INIT_END
#endif
#define SDPA_DEFINE_KERNELS_FROM(isa, parent, exp_ulp, ...)                                        \
    SDPA_OVERRIDE_INIT_BEGIN                                                                       \
    const sdpa_kernels sdpa_kernels_##isa = {SDPA_KERNEL_FNS(sdpa_, parent),                       \
                                             SDPA_KERNEL_PARAMS(exp_ulp), __VA_ARGS__};            \
    SDPA_OVERRIDE_INIT_END                                                                         \
    extern const sdpa_kernels sdpa_kernels_##isa

#endif /* SDPA_KERNEL_DEF_H */
