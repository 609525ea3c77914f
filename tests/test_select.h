/* test_select.h -- SDPA_TEST_IMPLS: which implementations a test binary's registry loops run */
#ifndef SDPA_TEST_SELECT_H
#define SDPA_TEST_SELECT_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* SDPA_TEST_IMPLS=name,name (unset or empty: every one) limits the registry loops to those
   implementations, the others reported as skipped: for emulated runs, where another CPU
   model's run already covers the same code (NEON under every SVE length, say). */
static inline bool sdpa_test_selected(const char *name)
{
    const char *sel = getenv("SDPA_TEST_IMPLS");
    if (!sel || !*sel) return true;
    const size_t n = strlen(name);
    for (const char *p = sel; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        p += len + (e != NULL);
    }
    return false;
}

#endif /* SDPA_TEST_SELECT_H */
