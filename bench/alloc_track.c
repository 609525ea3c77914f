/* alloc_track.c -- counts the heap a libsdpa call uses, by wrapping the allocator at link time */
/*
 * With BENCH_WRAP_ALLOC the executable is linked with -Wl,--wrap=malloc,... so every call to
 * these functions from the statically linked objects (libsdpa's and the bench's C files) lands
 * here first. Between bench_heap_track_begin and _end the live bytes are counted (by
 * malloc_usable_size, so a little above what was asked) and their peak is the call's workspace.
 * Without the wrap (another linker) the peak is reported as -1, unknown.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "bench.h"

#ifdef BENCH_WRAP_ALLOC
#include <malloc.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t s);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
void __wrap_free(void *p);

static atomic_bool tracking;
static atomic_llong live, peak;

static void account(void *p, long long sign)
{
    if (!p || !atomic_load_explicit(&tracking, memory_order_relaxed)) return;
    long long now = atomic_fetch_add(&live, sign * (long long)malloc_usable_size(p)) +
                    sign * (long long)malloc_usable_size(p);
    long long old = atomic_load(&peak);
    while (now > old && !atomic_compare_exchange_weak(&peak, &old, now)) {
    }
}

void *__wrap_malloc(size_t n)
{
    void *p = __real_malloc(n);
    account(p, 1);
    return p;
}

void *__wrap_calloc(size_t n, size_t s)
{
    void *p = __real_calloc(n, s);
    account(p, 1);
    return p;
}

void *__wrap_realloc(void *p, size_t n)
{
    account(p, -1);
    void *r = __real_realloc(p, n);
    account(r ? r : p, 1);
    return r;
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
    void *p = __real_aligned_alloc(a, n);
    account(p, 1);
    return p;
}

int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
    int r = __real_posix_memalign(p, a, n);
    if (r == 0) account(*p, 1);
    return r;
}

void __wrap_free(void *p)
{
    account(p, -1);
    __real_free(p);
}

void bench_heap_track_begin(void)
{
    atomic_store(&live, 0);
    atomic_store(&peak, 0);
    atomic_store(&tracking, true);
}

long long bench_heap_track_end(void)
{
    atomic_store(&tracking, false);
    return atomic_load(&peak);
}
#else
void bench_heap_track_begin(void) {}

long long bench_heap_track_end(void) { return -1; }
#endif
