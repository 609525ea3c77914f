#!/usr/bin/env bash
# test.sh -- the whole test suite: native build, the same under ASan+UBSan, and aarch64 under qemu; prints "N passed, N failed"
# usage: tools/test.sh            (SDPA_SKIP_AARCH64=1 leaves out the emulated aarch64 part)
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
tools/deps.sh || { echo "0 passed, 1 failed"; exit 1; }
logs=$top/build-logs
rm -rf "$logs" && mkdir -p "$logs"
status=0

run_suite() { # name builddir [meson setup args...]
  local name=$1 dir=$2; shift 2
  echo "=== $name: configure and build"
  if ! { [ -d "$dir" ] && meson setup --reconfigure "$dir" "$@" >"$logs/$name-setup.log" 2>&1 || meson setup --wipe "$dir" "$@" >"$logs/$name-setup.log" 2>&1 || meson setup "$dir" "$@" >"$logs/$name-setup.log" 2>&1; }; then
    cat "$logs/$name-setup.log"; echo "$name: configure failed"; status=1; return
  fi
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
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  run_suite asan build-asan -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
  -Db_lundef=false -Dbench=disabled

if [ "$(uname -m)" = x86_64 ] && [ "${SDPA_SKIP_AARCH64:-0}" != 1 ] && [ -x tools/test-aarch64.sh ]; then
  echo "=== aarch64 under qemu"
  start=$(date +%s)
  tools/test-aarch64.sh "$logs" || status=1
  echo "aarch64 part took $(( $(date +%s) - start )) s"
fi

# a step that failed before producing a test log counts as one failure; the summary line is last
python3 tools/testsummary.py --extra-failed "$status" "$logs"/testlog-*.json
