#!/usr/bin/env bash
# test.sh -- the test suite: native, consumers, ASan+UBSan, TSan, aarch64 under qemu; prints each stage's wall time and "N passed, N failed, N skipped"
# usage: tools/test.sh           the whole suite (CI): every class below
#        tools/test.sh --quick   the inner loop: the native build and suite (exp/tanh sweeps
#                                sampled), ASan+UBSan over the scalar reference and the driver,
#                                and the library compiled unoptimised
#   SDPA_SKIP_AARCH64=1 leaves out the emulated aarch64 stage.
#   GGML_SRC=<ggml source tree> builds ggml (core and CPU backend) in the native and aarch64
#   builds and runs the ggml adapter's tests against it (suite 'ggml'); unset, they are
#   reported skipped.
#
# Stages of the whole suite, in order:
#   native    release build, every test on every implementation this CPU runs; the exp and
#             tanh sweeps exhaustive (the only place they are)
#   consumers the native build installed into a temporary prefix, then consumed by pkg-config,
#             CMake and a meson subproject
#   asan      ASan+UBSan build of everything; the sweeps and heaviest loops sampled
#   tsan      the 'threads' suite under gcc's ThreadSanitizer
#   aarch64   cross build, the suite under qemu on NEON and SVE 128/512/2048 (sampled)
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: tools/test.sh [--quick]"; echo "0 passed, 1 failed"; exit 2 ;;
esac
tools/deps.sh || { echo "0 passed, 1 failed"; exit 1; }
logs=$top/build-logs
rm -rf "$logs" && mkdir -p "$logs"
status=0
stage_names=()
stage_secs=()
t_all=$(date +%s)
jobs=$(nproc)

stage_begin() { stage_t0=$(date +%s); echo "=== $1"; }
stage_end() { stage_names+=("$1"); stage_secs+=($(( $(date +%s) - stage_t0 ))); }

configure() { # name builddir [meson setup args...]
  local name=$1 dir=$2; shift 2
  if ! { [ -d "$dir" ] && meson setup --reconfigure "$dir" "$@" >"$logs/$name-setup.log" 2>&1 ||
         meson setup --wipe "$dir" "$@" >"$logs/$name-setup.log" 2>&1 ||
         meson setup "$dir" "$@" >"$logs/$name-setup.log" 2>&1; }; then
    cat "$logs/$name-setup.log"; echo "$name: configure failed"; status=1; return 1
  fi
}

# the slowest translation units of a build, from its .ninja_log (seconds, wall)
slowest_tus() { # builddir
  [ -f "$1/.ninja_log" ] || return 0
  awk -F'\t' 'NR > 1 && $4 ~ /\.o$/ { printf "%.1f %s\n", ($2 - $1) / 1000, $4 }' "$1/.ninja_log" |
    sort -rn | head -3 | sed 's/^/  slowest: /'
}

build() { # name builddir [ninja targets...]
  local name=$1 dir=$2; shift 2
  if ! ninja -C "$dir" -j "$jobs" "$@" >"$logs/$name-build.log" 2>&1; then
    tail -50 "$logs/$name-build.log"; echo "$name: build failed"; status=1; return 1
  fi
  slowest_tus "$dir"
}

run_tests() { # name builddir [meson test args...]
  local name=$1 dir=$2 log; shift 2
  rm -f "$dir/meson-logs/testlog-$name".*json "$dir/meson-logs/testlog-$name"-*.json
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs" --logbase "testlog-$name" \
    "$@" || status=1
  # meson appends a --wrapper's name to the log's: testlog-<name>[-<wrapper>].json
  log=$(ls "$dir/meson-logs/testlog-$name".json "$dir/meson-logs/testlog-$name"-*.json 2>/dev/null | head -1)
  if [ -n "$log" ]; then cp "$log" "$logs/testlog-$name.json" || status=1
  else echo "$name: no test log"; status=1; fi
}

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1

# --- native ----------------------------------------------------------------------------------
stage_begin native
ggml_arg=-Dggml_src=${GGML_SRC:-}
if configure native build-test -Dbuildtype=release -Db_ndebug=false -Dbench=enabled "$ggml_arg" &&
   build native build-test; then
  if [ $quick = 1 ]; then
    # the sweeps sampled: every 7th float for exp, every 29th for tanh
    SDPA_EXP_STRIDE=7 run_tests native build-test
  else
    run_tests native build-test
  fi
fi
stage_end native

if [ $quick = 1 ]; then
  # --- quick sanitizer pass: the scalar reference and the driver (validation, planning,
  # paging, staging, merging) under ASan+UBSan, the heaviest loops sampled ------------------
  stage_begin "asan (scalar)"
  if configure asan-scalar build-asan-scalar -Dbuildtype=debugoptimized \
       -Db_sanitize=address,undefined -Db_lundef=false -Dbench=disabled -Dsimd=false &&
     build asan-scalar build-asan-scalar; then
    SDPA_TEST_SAMPLE=4 SDPA_EXP_STRIDE=37 run_tests asan-scalar build-asan-scalar --no-suite slow
  fi
  stage_end "asan (scalar)"

  # --- the SIMD kernels compiled unoptimised, as the full suite's ASan and consumer builds
  # compile them: an intrinsic's immediate given by a loop index is a constant only once the
  # loop is unrolled, so only this build refuses it ----------------------------------------
  stage_begin "compile -O0"
  if configure debug build-debug -Dbuildtype=debug -Dtests=false -Dbench=disabled; then
    build debug build-debug libsdpa.a
  fi
  stage_end "compile -O0"
else
  # --- consumers ----------------------------------------------------------------------------
  stage_begin consumers
  tools/test-consumers.sh "$logs" build-test || status=1
  stage_end consumers

  # --- ASan+UBSan ---------------------------------------------------------------------------
  # The exhaustive exp and tanh sweeps ran natively; here they sample every 37th float (exp)
  # and every 149th (tanh), and the heaviest forward loops every 2nd case.
  stage_begin asan
  if configure asan build-asan -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
       -Db_lundef=false -Dbench=disabled && build asan build-asan; then
    SDPA_EXP_STRIDE=37 SDPA_TEST_SAMPLE=2 run_tests asan build-asan
  fi
  stage_end asan

  # --- TSan: the concurrency tests (suite 'threads') in a gcc ThreadSanitizer build of only
  # what they need; a race report stops the test (halt_on_error) and fails it. TSan slows them
  # many times, so their heaviest loops run every 4th case. tools/tsan-run.sh reruns a test
  # with ASLR off when the TSan runtime cannot start under this kernel's layout.
  stage_begin tsan
  if CC=gcc configure tsan build-tsan -Db_sanitize=thread -Dbuildtype=debugoptimized -Dbench=disabled; then
    targets=$(meson introspect build-tsan --tests | python3 -c 'import json, os, sys
d = os.path.realpath(sys.argv[1])
for t in json.load(sys.stdin):
    if any(s.split(":")[-1] == "threads" for s in t["suite"]):
        print(os.path.relpath(os.path.realpath(t["cmd"][0]), d))' build-tsan)
    if [ -z "$targets" ]; then
      echo "tsan: no test in suite threads"; status=1
    # shellcheck disable=SC2086 # one target per word
    elif build tsan build-tsan $targets; then
      TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 SDPA_TEST_SAMPLE=4 \
        run_tests tsan build-tsan --suite threads --wrapper "$(printf %q "$top/tools/tsan-run.sh")"
    fi
  fi
  stage_end tsan

  # --- aarch64 under qemu -------------------------------------------------------------------
  if [ "$(uname -m)" = x86_64 ] && [ "${SDPA_SKIP_AARCH64:-0}" != 1 ]; then
    stage_begin aarch64
    tools/test-aarch64.sh "$logs" || status=1
    stage_end aarch64
  fi
fi

echo "=== wall time per stage"
for i in "${!stage_names[@]}"; do
  printf '  %-14s %5d s\n' "${stage_names[$i]}" "${stage_secs[$i]}"
done
printf '  %-14s %5d s\n' total $(( $(date +%s) - t_all ))
# a step that failed before producing a test log counts as one failure; the summary line is last
python3 tools/testsummary.py --extra-failed "$status" "$logs"/testlog-*.json
