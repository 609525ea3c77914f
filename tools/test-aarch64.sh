#!/usr/bin/env bash
# test-aarch64.sh -- cross-builds libsdpa for aarch64 and runs the whole test suite under qemu on a NEON CPU and SVE CPUs of 128, 512 and 2048 bits
#
# usage: tools/test-aarch64.sh [OUTDIR]
#   Installs whatever of the toolchain, emulator and arm64 libraries is missing (apt-get; sudo only
#   when not root), builds into build-aarch64/, and for every emulated CPU checks that the
#   capability report names the expected implementation (and SVE vector length), then runs
#   `meson test`. With OUTDIR, each run's meson log is copied there as testlog-aarch64-<cpu>.json
#   and the capability checks are written as testlog-aarch64-cpuinfo.json (same format), so a
#   caller can sum them; without it the log paths are printed at the end. Exit status 0 iff all
#   passed. SDPA_EXP_STRIDE_OVERRIDE=N replaces the exp test's per-CPU sampling strides.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
out=${1:-}
build=$top/build-aarch64
cross=$top/tools/cross/aarch64-linux-gnu.ini
[ -n "$out" ] && mkdir -p "$out" && out=$(cd "$out" && pwd)
status=0
start=$(date +%s)

# ---------------------------------------------------------------------------------------------
# Dependencies
# ---------------------------------------------------------------------------------------------
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# libc6:arm64 is the runtime the emulated programs load (see the cross file's exe_wrapper);
# libgomp1:arm64 the OpenMP runtime of the team test, which the cross compiler's OpenMP links.
host_pkgs=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user pkgconf)
arm_pkgs=(libc6:arm64 libcpu-features-dev:arm64 libgomp1:arm64)
missing=()
for p in "${host_pkgs[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${arm_pkgs[@]}"; do installed "$p" || missing+=("$p"); done
bench_pkg=libbenchmark-dev:arm64
if [ ${#missing[@]} -gt 0 ] || ! installed "$bench_pkg"; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    as_root dpkg --add-architecture arm64 || status=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || status=1
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    apt_install "${missing[@]}" || { echo "test-aarch64: could not install ${missing[*]}"; exit 1; }
  fi
  # google/benchmark for arm64 is optional: without it the benchmarks are not cross-built.
  installed "$bench_pkg" || apt_install "$bench_pkg" || true
fi
if installed "$bench_pkg"; then
  bench=enabled
else
  bench=disabled
  echo "test-aarch64: $bench_pkg is not installable here: building with -Dbench=disabled"
fi

# ---------------------------------------------------------------------------------------------
# Cross build
# ---------------------------------------------------------------------------------------------
# GGML_SRC: a ggml tree, cross-built with CMake for the ggml adapter's tests (else skipped)
setup_args=(--cross-file "$cross" -Dbuildtype=release -Db_ndebug=false -Dbench=$bench
            "-Dggml_src=${GGML_SRC:-}")
logdir=${out:-$(mktemp -d)}
slog=$logdir/aarch64-setup.log
blog=$logdir/aarch64-build.log
echo "=== aarch64: configure and build (bench $bench)"
if ! { [ -d "$build" ] && meson setup --reconfigure "$build" "${setup_args[@]}" >"$slog" 2>&1 ||
       meson setup --wipe "$build" "${setup_args[@]}" >"$slog" 2>&1 ||
       meson setup "$build" "${setup_args[@]}" >"$slog" 2>&1; }; then
  cat "$slog"; echo "test-aarch64: configure failed"; exit 1
fi
if ! ninja -C "$build" >"$blog" 2>&1; then
  tail -50 "$blog"; echo "test-aarch64: build failed"; exit 1
fi

# ---------------------------------------------------------------------------------------------
# One test run per emulated CPU
# ---------------------------------------------------------------------------------------------
# tag, QEMU_CPU, implementation that must be active, SVE vector bytes the report must show, the
# exp test's sampling stride, SDPA_TEST_SAMPLE (the heaviest test loops every Nth case), and the
# implementations the registry loops run (SDPA_TEST_IMPLS): scalar and NEON on the Cortex-A72
# only, since their code is the same on every CPU model, and SVE at each vector length. qemu's
# SVE gets slower per element as vectors widen, so the wide runs sample more sparsely.
runs=(
  "cortex-a72 cortex-a72 neon - 37 2 scalar,neon"
  "sve128 max,sve-default-vector-length=16 sve 16 37 2 sve"
  "sve512 max,sve-default-vector-length=64 sve 64 401 6 sve"
  "sve2048 max,sve-default-vector-length=256 sve 256 1601 24 sve"
)
export ASAN_OPTIONS=detect_leaks=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
unset SDPA_ISA
checks=()
logs=()
record_check() { # name ok(0/1)
  local r=OK
  [ "$2" = 1 ] || { r=FAIL; status=1; }
  checks+=("{\"name\": \"$1\", \"result\": \"$r\"}")
}

for run in "${runs[@]}"; do
  read -r tag qcpu want_impl want_vb stride sample impls <<<"$run"
  export QEMU_CPU=$qcpu SDPA_EXP_STRIDE=${SDPA_EXP_STRIDE_OVERRIDE:-$stride} SDPA_TEST_SAMPLE=$sample
  export SDPA_TEST_IMPLS=$impls
  # the fuzz driver's generated inputs (tests/fuzz): a few minutes' worth under emulation
  export SDPA_FUZZ_EXECS=$(( ${SDPA_FUZZ_EXECS_AARCH64:-300} / sample ))
  echo "=== aarch64 $tag (QEMU_CPU=$qcpu)"
  report=$(qemu-aarch64 -L / "$build/tools/sdpa-cpuinfo" 2>/dev/null)
  active=$(awk '/^active$/ {a = 1; next} a && $1 == "name" {print $2; exit}' <<<"$report")
  vb=$(awk '$1 == "sve_vector_bytes" {print $2; exit}' <<<"$report")
  ok=1
  [ "$active" = "$want_impl" ] || ok=0
  echo "sdpa-cpuinfo: active $active (want $want_impl)"
  record_check "aarch64 $tag: sdpa-cpuinfo reports $want_impl active" $ok
  if [ "$want_vb" != - ]; then
    ok=1
    [ "$vb" = "$want_vb" ] || ok=0
    echo "sdpa-cpuinfo: SVE vector length $vb bytes (want $want_vb)"
    record_check "aarch64 $tag: sdpa-cpuinfo reports $want_vb-byte SVE vectors" $ok
  fi
  t0=$(date +%s)
  json=$build/meson-logs/testlog-aarch64-$tag.json
  rm -f "$json"
  meson test -C "$build" --no-rebuild --print-errorlogs --num-processes "$(nproc)" \
    --timeout-multiplier 4 --logbase "testlog-aarch64-$tag" || status=1
  [ -f "$json" ] || { echo "test-aarch64: $tag produced no test log"; status=1; }
  echo "aarch64 $tag: $(( $(date +%s) - t0 )) s"
  logs+=("$json")
done
unset QEMU_CPU SDPA_TEST_SAMPLE SDPA_FUZZ_EXECS SDPA_TEST_IMPLS

printf '%s\n' "${checks[@]}" >"$build/meson-logs/testlog-aarch64-cpuinfo.json"
logs+=("$build/meson-logs/testlog-aarch64-cpuinfo.json")
if [ -n "$out" ]; then
  for f in "${logs[@]}"; do cp "$f" "$out/" || status=1; done
else
  printf '%s\n' "${logs[@]}"
fi
echo "aarch64: $(( $(date +%s) - start )) s in all, status $status"
exit $status
