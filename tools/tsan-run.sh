#!/usr/bin/env bash
# tsan-run.sh -- runs one ThreadSanitizer-built test, again with ASLR off if TSan cannot start under this kernel
# usage: tools/tsan-run.sh program [args...]   (as meson test --wrapper)
#
# Some kernels randomise mmap over more bits than gcc's TSan runtime expects, and the runtime
# then stops before main with "unexpected memory mapping" (or cannot map its shadow memory).
# Whether it does depends on where this run's mappings fell, so the check is made on every run:
# such a start is retried under `setarch <arch> -R`; anything else the test printed or returned
# (a data race report, exit 66) is passed through as it was.
set -u
err=$(mktemp) || exit 1
trap 'rm -f "$err"' EXIT
"$@" 2>"$err"
rc=$?
if [ "$rc" -ne 0 ] && grep -qE "ThreadSanitizer: unexpected memory mapping|ThreadSanitizer can not mmap the shadow memory" "$err"; then
  echo "tsan-run: ThreadSanitizer could not start with ASLR on ($(grep -m1 ThreadSanitizer "$err")); again under setarch $(uname -m) -R" >&2
  if ! setarch "$(uname -m)" -R true 2>/dev/null; then
    echo "tsan-run: setarch $(uname -m) -R is not permitted here: cannot run under ThreadSanitizer" >&2
    exit "$rc"
  fi
  setarch "$(uname -m)" -R "$@" 2>"$err"
  rc=$?
fi
cat "$err" >&2
exit "$rc"
