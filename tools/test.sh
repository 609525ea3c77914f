#!/usr/bin/env bash
# test.sh -- the whole test suite: native build, consumers of the installed library, the same under ASan+UBSan, the concurrency tests under TSan, and aarch64 under qemu; prints "N passed, N failed"
# usage: tools/test.sh            (SDPA_SKIP_AARCH64=1 leaves out the emulated aarch64 part)
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
tools/deps.sh || { echo "0 passed, 1 failed"; exit 1; }
logs=$top/build-logs
rm -rf "$logs" && mkdir -p "$logs"
status=0

configure() { # name builddir [meson setup args...]
  local name=$1 dir=$2; shift 2
  echo "=== $name: configure and build"
  if ! { [ -d "$dir" ] && meson setup --reconfigure "$dir" "$@" >"$logs/$name-setup.log" 2>&1 || meson setup --wipe "$dir" "$@" >"$logs/$name-setup.log" 2>&1 || meson setup "$dir" "$@" >"$logs/$name-setup.log" 2>&1; }; then
    cat "$logs/$name-setup.log"; echo "$name: configure failed"; status=1; return 1
  fi
}

run_suite() { # name builddir [meson setup args...]
  local name=$1 dir=$2; shift 2
  configure "$name" "$dir" "$@" || return
  if ! ninja -C "$dir" >"$logs/$name-build.log" 2>&1; then
    tail -50 "$logs/$name-build.log"; echo "$name: build failed"; status=1; return
  fi
  echo "=== $name: test"
  meson test -C "$dir" --print-errorlogs --num-processes "$(nproc)" || status=1
  cp "$dir/meson-logs/testlog.json" "$logs/testlog-$name.json" 2>/dev/null || status=1
}

run_suite native build-test -Dbuildtype=release -Db_ndebug=false -Dbench=enabled

# The fused-attention and API suites once more with each implementation forced through SDPA_ISA
# (every test also asserts that sdpa_forward runs the active one); unsupported ones are skipped.
if [ -x build-test/tools/sdpa-cpuinfo ]; then
  for isa in $(build-test/tools/sdpa-cpuinfo --json | python3 -c 'import json, sys
for i in json.load(sys.stdin)["implementations"]:
    if i["supported"]: print(i["name"])'); do
    echo "=== native, SDPA_ISA=$isa: forward and api suites"
    SDPA_ISA=$isa meson test -C build-test --no-rebuild --print-errorlogs --num-processes "$(nproc)" \
      --suite forward --suite api --logbase "testlog-isa-$isa" >"$logs/isa-$isa.log" 2>&1 || { cat "$logs/isa-$isa.log"; status=1; }
    grep -E "^(Ok|Fail|Skipped):" "$logs/isa-$isa.log" | tr -s ' ' | paste -sd' '
    cp "build-test/meson-logs/testlog-isa-$isa.json" "$logs/" || status=1
  done
fi
# The installed library as three consumers build it: pkg-config, CMake and a meson subproject.
echo "=== consumers: install, then pkg-config, CMake and meson-subproject builds"
tools/test-consumers.sh "$logs" || status=1

UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  run_suite asan build-asan -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
  -Db_lundef=false -Dbench=disabled

# The concurrency tests (suite 'threads') once more, in a gcc ThreadSanitizer build of only what
# they need: a race report stops the test (halt_on_error) and fails it. TSan slows them down
# many times, so their heaviest loops run every 4th case (SDPA_TEST_SAMPLE). tools/tsan-run.sh
# reruns a test with ASLR off when the TSan runtime cannot start under this kernel's layout.
run_tsan() {
  local dir=build-tsan start targets
  start=$(date +%s)
  CC=gcc configure tsan "$dir" -Db_sanitize=thread -Dbuildtype=debugoptimized -Dbench=disabled || return
  targets=$(meson introspect "$dir" --tests | python3 -c 'import json, os, sys
d = os.path.realpath(sys.argv[1])
for t in json.load(sys.stdin):
    if any(s.split(":")[-1] == "threads" for s in t["suite"]):
        print(os.path.relpath(os.path.realpath(t["cmd"][0]), d))' "$dir")
  if [ -z "$targets" ]; then echo "tsan: no test in suite threads"; status=1; return; fi
  # shellcheck disable=SC2086 # one target per word
  if ! ninja -C "$dir" $targets >"$logs/tsan-build.log" 2>&1; then
    tail -50 "$logs/tsan-build.log"; echo "tsan: build failed"; status=1; return
  fi
  echo "=== tsan: test (suite threads)"
  # meson names the log after the wrapper: testlog-tsan-run.sh.json
  rm -f "$dir/meson-logs/testlog-tsan-run.sh.json"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 SDPA_TEST_SAMPLE=4 \
    meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$(nproc)" --suite threads \
    --wrapper "$(printf %q "$top/tools/tsan-run.sh")" || status=1
  cp "$dir/meson-logs/testlog-tsan-run.sh.json" "$logs/testlog-tsan.json" 2>/dev/null || status=1
  echo "tsan part took $(( $(date +%s) - start )) s"
}
run_tsan

if [ "$(uname -m)" = x86_64 ] && [ "${SDPA_SKIP_AARCH64:-0}" != 1 ] && [ -x tools/test-aarch64.sh ]; then
  echo "=== aarch64 under qemu"
  start=$(date +%s)
  tools/test-aarch64.sh "$logs" || status=1
  echo "aarch64 part took $(( $(date +%s) - start )) s"
fi

# a step that failed before producing a test log counts as one failure; the summary line is last
python3 tools/testsummary.py --extra-failed "$status" "$logs"/testlog-*.json
