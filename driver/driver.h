/* driver.h -- what the driver's stages share: the plan, sequence table, work items, checked sums */
#ifndef SDPA_DRIVER_H
#define SDPA_DRIVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../dispatch/internal.h"
#include "convert.h"

/* Checked arithmetic: false when the result does not fit. */
static inline bool mul_sz(size_t a, size_t b, size_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}
static inline bool add_sz(size_t a, size_t b, size_t *r)
{
    return !__builtin_add_overflow(a, b, r);
}

/* The planner's parameters (ROWS_TARGET, SPLIT_*, BLOCK_*, STREAM_BYTES) and those of paged
   units the kernel does not page itself (PAGE_PF_KEYS, STAGE_*: sdpa_run_keys runs them,
   sdpa_make_plan sizes their staging) are listed, with what each is, in SDPA_PLANNER_PARAMS
   (internal.h), which sdpa_planner_tunables reports. */

typedef struct seqinfo {
    size_t lq, lk; /* the sequence's query and key counts */
    size_t q0, k0; /* packed (cu_q / cu_kv): its first token in the views; else 0 */
    size_t n_qblk, n_chunks;
    size_t item0; /* its first work item */
    size_t part0; /* split (n_chunks > 1): its first partial-state slot */
    size_t grp0;  /* split: its first merge group (one per KV head) */
} seqinfo;

typedef struct plan {
    const sdpa_kernels *k;
    size_t B, Hq, Hkv, G, Lq, Lk, D, Dv;
    float scale;
    bool causal;
    size_t window;        /* 0: off */
    bool mods;            /* softcap, ALiBi or a mask: the kernels' modifier path */
    const sdpa_params *p; /* the call (modifier, sink and layout arrays, the mask view) */
    const sdpa_tensor *q, *kt, *vt, *o;
    float *lse;
    size_t qb, chunk, block, R, n_items, n_groups, max_chunks;
    int stream;        /* sdpa_rows.stream: K and V exceed the last-level cache */
    size_t ws_stride;  /* floats of per-thread scratch: qp [R*D] | limits | state | prefetch hints |
                          variant rows | paged rebase rows | merge pointers | kernel scratch |
                          score multipliers */
    size_t lim_off;    /* where the key limits (size_t) start in it */
    size_t state_off;  /* where m, l, acc start (unsplit problems) */
    size_t pf_off;     /* where the prefetch hints (2R spans) start */
    size_t mul_off;    /* where the rows' score multipliers (R floats, see scale_row) start */
    size_t kws_off;    /* where the kernel's scratch starts */
    size_t var_off;    /* where the rows' window starts, positions, mask rows and slopes start */
    size_t reb_off;    /* where a paged run's rebased limits, starts, positions, mask rows start */
    size_t mptr_off;   /* where the merge's part pointers (3 max_chunks) start */
    size_t stage_off;  /* where the staged copy of short pages' K and V rows starts */
    size_t stage_keys; /* keys per staged copy; 0: K/V always handed to the kernel in place */
    bool quant;        /* K or V in a block format (sdpa_dtype_quantized) */
    size_t qq_off;     /* fast scores (q8_scores): the rows' int8 quants [R*D], then their block
                          scales [R*D/32] */
    size_t ptab_off;   /* from stage_off: the page lists of a unit the kernel pages itself */
    size_t partial_off; /* where the split-K partial states start, after the workspaces */
    size_t seq_off;     /* where the sequence table starts, after the partial states */
    size_t done_off;    /* where the merge groups' finished-chunk counters start, after it */
    float *ws;          /* n_threads * ws_stride floats, 64-byte aligned */
    float *partial;     /* per split item, m[R] l[R] acc[R * Dv] */
    seqinfo *seq;       /* [B] */
    atomic_uint *done;  /* [n_groups]: chunks of the group whose partial state is written */
} plan;

static inline size_t round16(size_t n) { return (n + 15) / 16 * 16; }

/* Fast scores' slot (q8_scores) for R rows of head dim D, in floats: the int8 quants, R*D bytes
   rounded up to 16 floats, then the R*D/32 block scales. Both the size and the scales' offset
   come from here, so that the scales always lie inside the slot. */
static inline size_t qq_scales_off(size_t R, size_t D) { return round16(R * D / 4); }
static inline size_t qq_floats(size_t R, size_t D)
{
    return qq_scales_off(R, D) + round16(R * D / SDPA_QK);
}

/* Row (h, i) of sequence b in an f32 view of the query side (q or o): packed sequences start
   at token q0 of batch 0. */
static inline float *f32_row(const plan *pl, const sdpa_tensor *t, const seqinfo *sq, size_t b,
                             size_t h, size_t i)
{
    const ptrdiff_t bo = pl->p->cu_q ? 0 : (ptrdiff_t)b * t->batch_stride;
    return (float *)t->data + bo + (ptrdiff_t)h * t->head_stride +
           (ptrdiff_t)(sq->q0 + i) * t->token_stride;
}

/* One work item: query rows [i0, i0 + qn) of every head of KV head kvh's group in sequence b,
   against KV chunk `chunk` of it. */
typedef struct item {
    const seqinfo *sq;
    size_t b, kvh, i0, qn, chunk;
    size_t local; /* the item's index within its sequence */
} item;

/* The stages' entry points, each described where it is defined. */
/* plan.c */
sdpa_status sdpa_make_plan(const sdpa_impl *impl, const sdpa_params *p, const sdpa_tensor *q,
                           const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_tensor *o,
                           size_t threads, plan *pl, size_t *floats);
bool sdpa_walk_seqs(plan *pl, size_t *n_items, size_t *n_parts, size_t *n_groups);
size_t sdpa_seq_of(const plan *pl, size_t t);
item sdpa_item_at(const plan *pl, size_t t);
/* keys.c */
void sdpa_run_keys(const plan *pl, const item *it, sdpa_rows *w, size_t c0, size_t c1, float *reb,
                   float *stage);
/* run.c */
sdpa_status sdpa_setup_call(const sdpa_impl *impl, const sdpa_params *p, const sdpa_tensor *q,
                            const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_tensor *o,
                            size_t threads, plan *pl, size_t *bytes);
float *sdpa_caller_workspace(const sdpa_params *p, size_t bytes);
void sdpa_attach_workspace(plan *pl, float *ws);
void sdpa_plan_views(plan *pl, float *ws);
void sdpa_run_item(void *arg, size_t t, size_t thread); /* an sdpa_task_fn over a plan */
/* finish.c */
void sdpa_finish_row(const plan *pl, const seqinfo *sq, size_t b, size_t h, size_t i, float m,
                     float l, const float *acc);
/* KV head kvh of split sequence b, on thread's scratch */
void sdpa_merge_group(const plan *pl, size_t b, size_t kvh, size_t thread);

#endif /* SDPA_DRIVER_H */
