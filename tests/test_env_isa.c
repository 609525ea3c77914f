/* test_env_isa.c -- SDPA_ISA in the environment forces an implementation at load time, or is
 * refused */
#include "testlib.h"

/* Exit status (meson's exitcode protocol): 0 pass, 1 fail, 77 skip. Registered once per
   implementation name known at configure time, with SDPA_ISA set to it, and once with a name
   that does not exist. Forcing one this CPU cannot run must be refused (checked) and is then
   reported as skipped: the forced implementation itself was not exercised. */
int main(void)
{
    const char *name = getenv("SDPA_ISA");
    const sdpa_impl *active = sdpa_active();
    const sdpa_selection why = sdpa_selection_reason();
    const sdpa_impl *best = NULL;
    for (size_t i = 0; i < sdpa_impl_count() && !best; i++)
        if (sdpa_impl_supported(sdpa_impl_at(i))) best = sdpa_impl_at(i);
    printf("SDPA_ISA=%s: active %s, reason: %s\n", name ? name : "(unset)", sdpa_impl_name(active),
           sdpa_selection_str(why));

    if (!name || !*name || strcmp(name, "auto") == 0) {
        if (active != best || why != SDPA_SELECTED_AUTO) {
            printf("FAIL: without a forced name the active one must be the best supported (%s), "
                   "automatically\n",
                   sdpa_impl_name(best));
            return 1;
        }
        return 0;
    }
    const sdpa_impl *want = sdpa_impl_find(name);
    if (want && sdpa_impl_supported(want)) {
        if (active != want || why != SDPA_SELECTED_ENV) {
            printf("FAIL: SDPA_ISA=%s: want %s active by SDPA_SELECTED_ENV\n", name, name);
            return 1;
        }
        printf("ok: %s forced by the environment\n", name);
        return 0;
    }
    if (active != best || why != SDPA_SELECTED_ENV_REFUSED) {
        printf(
            "FAIL: SDPA_ISA=%s (%s): want it refused (SDPA_SELECTED_ENV_REFUSED) and %s active\n",
            name, want ? "unsupported here" : "unknown", sdpa_impl_name(best));
        return 1;
    }
    if (want) {
        printf("SKIP: %s is not supported by this CPU; the refusal was checked\n", name);
        return 77;
    }
    printf("ok: unknown name refused, %s active\n", sdpa_impl_name(best));
    return 0;
}
