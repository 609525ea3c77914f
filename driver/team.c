/* team.c -- sdpa_forward_team: one call run by a team of threads that are already running */
#define _GNU_SOURCE /* syscall(), for the futex */
#include <limits.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "driver.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* The team state. Every field is zero when the team is idle (between calls), so a zeroed
   buffer is a valid first state. Counters and the barrier sit on their own cache lines, as
   every thread writes them. */
typedef struct team_state {
    atomic_size_t next_item; /* the next work item to claim */
    char pad0[64 - sizeof(atomic_size_t)];
    atomic_uint arrived;  /* threads at the barrier */
    atomic_uint gen;      /* barriers passed, mod 2^32 */
    atomic_uint sleepers; /* threads asleep on gen (futex), or about to be */
    char pad2[64 - 3 * sizeof(atomic_uint)];
    /* written by thread 0 before the first barrier, read by all after it */
    float *ws;
    void *own;
    int status;
} team_state;

size_t sdpa_team_bytes(void) { return sizeof(team_state); }

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A waiter spins this many rounds (a few microseconds), then yields this many times, then
   sleeps (where the system has a futex). The spin covers a teammate a little behind; the yields
   one that lost its core for a moment; the sleep a team with more threads than free cores,
   whose waiters would otherwise hold the cores the threads they wait for need. */
enum { SPIN_ROUNDS = 200, YIELD_ROUNDS = 16 };

#if defined(__linux__)
static void gen_sleep(atomic_uint *gen, unsigned g)
{
    /* returns at once unless *gen is still g; a spurious return is harmless (the caller loops) */
    syscall(SYS_futex, (void *)gen, FUTEX_WAIT_PRIVATE, g, NULL, NULL, 0);
}
static void gen_wake(atomic_uint *gen)
{
    syscall(SYS_futex, (void *)gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#endif

/* Waits until all nth threads have arrived. The last to arrive resets the count and opens the
   next generation; what every thread wrote before arriving is visible to every thread after.
   A sleeper counts itself in sleepers before its last look at gen, and the opener looks at
   sleepers after moving gen (both sequentially consistent): either the opener sees the sleeper
   and wakes it, or the sleeper sees the new generation and does not sleep. */
static void barrier(team_state *t, size_t nth)
{
    const unsigned g = atomic_load_explicit(&t->gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&t->arrived, 1, memory_order_acq_rel) + 1 == nth) {
        atomic_store_explicit(&t->arrived, 0, memory_order_relaxed);
        atomic_fetch_add(&t->gen, 1);
#if defined(__linux__)
        if (atomic_load(&t->sleepers)) gen_wake(&t->gen);
#endif
        return;
    }
    for (unsigned spin = 0; atomic_load_explicit(&t->gen, memory_order_acquire) == g; spin++) {
        if (spin < SPIN_ROUNDS) {
            cpu_relax();
        } else if (spin < SPIN_ROUNDS + YIELD_ROUNDS) {
            sched_yield();
        } else {
#if defined(__linux__)
            atomic_fetch_add(&t->sleepers, 1);
            if (atomic_load(&t->gen) == g) gen_sleep(&t->gen, g);
            atomic_fetch_sub(&t->sleepers, 1);
#else
            sched_yield();
#endif
        }
    }
}

/* Runs tasks [0, n) of fn claimed one at a time from *next. */
static void claim_all(atomic_size_t *next, size_t n, sdpa_task_fn fn, plan *pl, size_t ith)
{
    for (size_t t; (t = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) < n;)
        fn(pl, t, ith);
}

sdpa_status sdpa_impl_forward_team(const sdpa_impl *impl, const sdpa_params *p,
                                   const sdpa_tensor *q, const sdpa_tensor *k, const sdpa_tensor *v,
                                   const sdpa_tensor *o, void *team, size_t ith, size_t nth)
{
    /* every check below gives the same answer on every thread of a team that agrees on nth */
    if (!team || (uintptr_t)team % alignof(size_t) != 0 || nth == 0 || ith >= nth)
        return SDPA_ERR_INVALID_ARGUMENT;
    if (p && p->parallel_for) return SDPA_ERR_INVALID_ARGUMENT;
    plan pl;
    size_t bytes;
    sdpa_status s = sdpa_setup_call(impl, p, q, k, v, o, nth, &pl, &bytes);
    if (s != SDPA_OK) return s;
    team_state *t = team;

    if (ith == 0) {
        t->status = SDPA_OK;
        t->own = NULL;
        t->ws = sdpa_caller_workspace(p, bytes);
        if (!t->ws) {
            t->own = aligned_alloc(64, (bytes + 63) / 64 * 64);
            t->ws = t->own;
            if (!t->own) t->status = SDPA_ERR_NO_MEMORY;
        }
        if (t->ws) sdpa_attach_workspace(&pl, t->ws);
        atomic_store_explicit(&t->next_item, 0, memory_order_relaxed);
    }
    barrier(t, nth);
    s = (sdpa_status)t->status;
    if (s != SDPA_OK) {
        /* no teammate reads the state once past this barrier: the next call may rewrite it */
        barrier(t, nth);
        return s;
    }
    if (ith != 0) {
        /* the layout is the same on every thread; the sequence table and counters are thread 0's */
        sdpa_plan_views(&pl, t->ws);
    }
    claim_all(&t->next_item, pl.n_items, sdpa_run_item, &pl, ith); /* merges included */
    void *own = t->own;
    barrier(t, nth); /* every row written; none reads the workspace any more */
    if (ith == 0) free(own);
    return SDPA_OK;
}

sdpa_status sdpa_forward_team(const sdpa_params *p, const sdpa_tensor *q, const sdpa_tensor *k,
                              const sdpa_tensor *v, const sdpa_tensor *o, void *team, size_t ith,
                              size_t nth)
{
    return sdpa_impl_forward_team(sdpa_active(), p, q, k, v, o, team, ith, nth);
}
