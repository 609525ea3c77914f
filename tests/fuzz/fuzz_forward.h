/* fuzz_forward.h -- the differential fuzz target of sdpa_impl_forward: its byte format, entry point
 * and counters */
#ifndef SDPA_FUZZ_FORWARD_H
#define SDPA_FUZZ_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Decodes one problem from data[0..size) (any bytes decode to a problem: missing bytes read as
   0), runs it on every implementation this CPU supports, serially, on a shuffled pthread pool
   and, when the input asks, by a team of pthreads (sdpa_impl_forward_team), and checks every
   result against a float64 oracle; the same for an sdpa_merge call when the input has one.
   Returns the number of failed checks (0: all held). The byte format and the tolerance are in
   tests/fuzz/README.md. */
int sdpa_fuzz_one(const uint8_t *data, size_t size);

/* Prints what data[0..size) decodes to (sizes after the budget, strides, values), for reports. */
void sdpa_fuzz_describe(const uint8_t *data, size_t size, FILE *f);

/* Where failures are printed (default stderr; NULL: nowhere) with each line starting with
   prefix (e.g. "# " for TAP), and how many lines one input may print at most. */
void sdpa_fuzz_set_log(FILE *f, const char *prefix, int max_lines_per_input);

#define SDPA_FUZZ_MAX_IMPLS 16

/* What the target has done since the process started (or the last reset). */
typedef struct sdpa_fuzz_counts {
    unsigned long inputs;         /* sdpa_fuzz_one calls */
    unsigned long valid_calls;    /* inputs whose call the library must accept */
    unsigned long invalid_calls;  /* inputs built to be refused */
    unsigned long split_calls;    /* valid inputs the planner splits into KV chunks */
    unsigned long rows_value;     /* rows checked against the float64 values */
    unsigned long rows_nan;       /* rows that must be NaN */
    unsigned long rows_zero;      /* rows that must be zeros with lse -inf */
    unsigned long rows_unchecked; /* rows beyond what the library promises (README) */
    unsigned long forward_calls;  /* sdpa_impl_forward calls made */
    unsigned long ragged_calls;   /* valid inputs with padded or packed sequences */
    unsigned long paged_calls;    /* valid inputs with paged K/V */
    unsigned long quant_calls;    /* valid inputs with K or V in a block format */
    unsigned long q8_calls;       /* of those, with q8_scores */
    unsigned long newfmt_calls;   /* of those, with K or V in q4_1, q5_0, q5_1 or iq4_nl */
    unsigned long merge_calls;    /* sdpa_merge calls checked against float64 */
    unsigned long merge_refused;  /* sdpa_merge calls built to be refused */
    unsigned long scaled_calls;   /* valid inputs with mask_scales */
    unsigned long team_calls;     /* sdpa_impl_forward_team calls (one per team) checked */
    unsigned long failures[SDPA_FUZZ_MAX_IMPLS]; /* failed checks, per registry index */
    double worst_ratio; /* the largest |error| / tolerance met on a checked value */
} sdpa_fuzz_counts;

const sdpa_fuzz_counts *sdpa_fuzz_counts_get(void);
void sdpa_fuzz_counts_reset(void);

/* ------------------------------------------------------------------------------------------ */
/* The problem an input describes, as the encoder takes it (the decoder maps bytes to these     */
/* fields by the rules in README.md; the encoder writes bytes that decode back to them).        */
/* ------------------------------------------------------------------------------------------ */
enum { FZ_Q = 0, FZ_K = 1, FZ_V = 2 };

/* what an injection writes */
typedef enum fz_value {
    FZV_NAN = 0,
    FZV_PINF,
    FZV_NINF,
    FZV_HUGE,
    FZV_DENORMAL,
    FZV_TINY,
    FZV_ZERO,
    FZV_NZERO,
    FZV_RAW,
    FZV_POW2,
    FZV_FLTMAX,
    FZV_NAN_PAYLOAD,
    FZV_ONE,
    FZV_LARGE,
    FZV_NEG_NAN,
    FZV_SMALL_INT
} fz_value;

/* where it writes */
typedef enum fz_shape {
    FZS_ELEMENT = 0, /* one element: flat index idx over [batch][head][token][dim] */
    FZS_ROW,         /* every dim of token row idx (over [batch][head][token]) */
    FZS_ROWS,        /* every dim of len + 1 consecutive tokens from row idx */
    FZS_COLUMN       /* element (token, dim) = idx over [token][dim], tokens token..token+len, in
                        every batch and head */
} fz_shape;

typedef struct fz_inject {
    uint8_t tensor; /* FZ_Q, FZ_K, FZ_V */
    uint8_t shape;  /* fz_shape */
    uint8_t value;  /* fz_value */
    uint8_t param;  /* the value's parameter (README) */
    uint32_t idx;
    uint16_t len;
    uint32_t raw; /* FZV_RAW: the f32 bits */
} fz_inject;

#define FZ_MAX_INJECT 32

typedef struct fz_spec {
    unsigned batch, kv_heads, group, q_len, kv_len, head_dim, v_dim; /* v_dim 0: head_dim */
    unsigned causal, lse, workspace /* 0 none, 1 exact size, 2 too small */, threads /* 2, 3 */;
    unsigned k_dtype, v_dtype; /* mod 3: f32, f16, bf16 (fuzz_forward.c float_types) */
    unsigned scale_kind;       /* README: 0 default, 1 raw bits, 2..7 classes */
    uint32_t scale_param;
    uint8_t layout[4]; /* q, k, v, o selectors */
    int invalid;       /* -1: a valid call; else a refused call's kind (< FZ_N_INVALID) */
    uint8_t fill[3], fill_param[3]; /* q, k, v value classes */
    uint32_t seed;
    unsigned n_inject;
    fz_inject inject[FZ_MAX_INJECT];
    /* The attention variants, read after the injections (0 everywhere: a plain call, so inputs
       written before they existed decode as they did). Values per README.md. */
    unsigned window;      /* 0 off, else the window w */
    uint8_t softcap_kind; /* 0 off, else a class (mod 8) of c from softcap_param */
    uint32_t softcap_param;
    uint8_t alibi_kind, alibi_param; /* 0 off, else a class (mod 4) of the slopes */
    uint8_t sink_kind, sink_param;   /* 0 off, else a class (mod 4) of the sinks */
    uint8_t mask;                    /* 0 off, else mask dtype (mask - 1) % 3 */
    uint8_t mask_layout;             /* broadcast, token stride, axis order, signs */
    uint8_t mask_class, mask_param;  /* the mask's value class (mod 8) and its parameter */
    uint8_t mask_special;            /* 0 none, else a few NaN, +inf, -NaN entries or -inf rows */
    uint8_t poison;                  /* 0 none, else non-finite K/V written on hidden keys */
    /* The API fields, read after the variants (0 everywhere: the call as before). README.md. */
    /* 0 the float type of the dtype byte, 1 q8_0, 2 q4_0, 3 q4_1, 4 q5_0, 5 q5_1, 6 iq4_nl (3 to 6
       from the block-format byte after the API fields, which overrides the API's format bits) */
    uint8_t k_format, v_format;
    uint8_t q8_scores;       /* 1: fast scores (a block-format K only) */
    uint8_t misc;            /* bit 0 n_threads above the pool's, bit 1 misaligned workspace,
                                bit 2 the window near SIZE_MAX or PTRDIFF_MAX */
    uint8_t q_form, kv_form; /* 0 one length for all, 1 padded (lens), 2 packed (cu) */
    uint8_t slack;           /* packed: unused tokens after the last sequence, 0..3 */
    uint8_t q_lens_class, kv_lens_class; /* the sequences' lengths (mod 8) */
    uint8_t paged;                       /* bit 0 paged K/V; the table's flags (README) */
    unsigned page_size;                  /* 1..256 */
    uint8_t merge, merge_rows, merge_layout, merge_refuse; /* an sdpa_merge call (0: none) */
    /* mask_scales and the team, read after the block formats (0: the call as before). */
    uint8_t scales_kind;  /* bits 0-1 class (0 off), bit 2 the mask's finite entries -|i' - j| */
    uint8_t scales_param; /* the factors' parameter */
    uint8_t team;         /* 0: no team run, else one of nth = 1 + (team - 1) % 4 threads */
} fz_spec;

/* A spec of a small dense valid call (batch 1, one head, q_len 1, kv_len 1, head_dim 1, every
   value 0, default scale), to be edited. */
void fz_spec_init(fz_spec *s);
/* Writes the bytes of s to out (at most cap) and returns their number (FZ_MAX_BYTES fits any). */
size_t fz_encode(const fz_spec *s, uint8_t *out, size_t cap);
/* The spec data[0..size) decodes to (before the work budget shrinks its sizes). */
void fz_decode(const uint8_t *data, size_t size, fz_spec *s);

#define FZ_VARIANT_BYTES 18 /* the variant fields after the injections */
#define FZ_API_BYTES     11 /* the API fields after the variants */
#define FZ_FORMAT_BYTES  1  /* the block formats of K and V after the API fields */
#define FZ_TEAM_BYTES    4  /* mask_scales, the team and their refusals after the block formats */
#define FZ_MAX_BYTES                                                                               \
    (31 + FZ_MAX_INJECT * 12 + FZ_VARIANT_BYTES + FZ_API_BYTES + FZ_FORMAT_BYTES + FZ_TEAM_BYTES)
#define FZ_MAX_TEAM  4 /* threads of a team */
#define FZ_N_FORMATS 6 /* k_format and v_format 1..6 */

/* Refused calls (fz_spec.invalid): kinds 0..15 from the header, 16..25 from the variants,
   26..61 from the API bytes, 62..67 from the mask_scales bytes; and refused sdpa_merge calls
   (README). */
#define FZ_N_INVALID_PLAIN      16
#define FZ_N_INVALID_VARIANT    10
#define FZ_INVALID_API_FIRST    (FZ_N_INVALID_PLAIN + FZ_N_INVALID_VARIANT)
#define FZ_N_INVALID_API        36
#define FZ_INVALID_SCALES_FIRST (FZ_INVALID_API_FIRST + FZ_N_INVALID_API)
#define FZ_N_INVALID_SCALES     6
#define FZ_N_INVALID            (FZ_INVALID_SCALES_FIRST + FZ_N_INVALID_SCALES)
#define FZ_N_MERGE_REFUSED      17

/* Raw f32 bits of a float, for FZV_RAW and scale_kind 1. */
uint32_t fz_f32_bits(float f);

#endif /* SDPA_FUZZ_FORWARD_H */
