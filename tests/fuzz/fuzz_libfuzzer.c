/* fuzz_libfuzzer.c -- the libFuzzer entry point of the fuzz target (built by tools/fuzz.sh with
 * clang) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_forward.h"

/* A failed check aborts, so that libFuzzer saves the input as a crash, unless
   SDPA_FUZZ_KEEP_GOING=1 (then failures are printed and counted, and the run goes on). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int keep_going = -1;
    if (keep_going < 0) {
        const char *e = getenv("SDPA_FUZZ_KEEP_GOING");
        keep_going = e && *e == '1';
        sdpa_fuzz_set_log(stderr, "", 8);
    }
    if (sdpa_fuzz_one(data, size) != 0 && !keep_going) {
        fprintf(stderr, "sdpa fuzz: a check failed\n");
        abort();
    }
    return 0;
}
