#!/usr/bin/env bash
# ggml-build.sh -- builds ggml (core and CPU backend) as static libraries with CMake
# usage: tools/ggml-build.sh SRC DIR NATIVE CC CXX PROCESSOR BASE_OUT CPU_OUT
#   SRC        a ggml source tree (CMakeLists.txt, include/, src/)
#   DIR        the CMake build directory (kept: a second run only rebuilds what changed)
#   NATIVE     ON: ggml's GGML_NATIVE build, tuned for this CPU (benchmarks); OFF: its portable build (tests)
#   CC, CXX    the compilers (the build's own, so that cross builds cross-compile ggml too)
#   PROCESSOR  "-" for a native build, else the target's CMAKE_SYSTEM_PROCESSOR (aarch64, ...)
#   BASE_OUT   where libggml-base.a is copied; CPU_OUT: where libggml-cpu.a is copied
# OpenMP is off: ggml then runs its graphs on its own thread pool with exactly the thread count
# it is given, and the programs linking it need no OpenMP runtime (nor an arm64 one for qemu).
# The CMake log goes to DIR/ggml-build.log; its tail is printed on failure.
set -uo pipefail
[ $# -eq 8 ] || { sed -n '3,12p' "$0" >&2; exit 2; }
src=$1 dir=$2 native=$3 cc=$4 cxx=$5 proc=$6 base_out=$7 cpu_out=$8
log=$dir/ggml-build.log
args=(-S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF
      -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DGGML_NATIVE="$native" -DGGML_OPENMP=OFF
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx")
if [ "$proc" != - ]; then
  args+=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR="$proc")
fi
# CMake refuses a build directory made from another source tree: start afresh when the
# arguments differ from the last build's
if [ -f "$dir/ggml-build.args" ] && [ "$(cat "$dir/ggml-build.args")" != "${args[*]}" ]; then
  rm -rf "$dir"
fi
mkdir -p "$dir" && printf '%s' "${args[*]}" >"$dir/ggml-build.args" || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
if ! { cmake "${args[@]}" >"$log" 2>&1 && cmake --build "$dir" -j "$jobs" >>"$log" 2>&1; }; then
  tail -40 "$log" >&2
  echo "ggml-build: building ggml from $src failed (log: $log)" >&2
  exit 1
fi
base=$(find "$dir" -name libggml-base.a -print -quit)
cpu=$(find "$dir" -name libggml-cpu.a -print -quit)
if [ -z "$base" ] || [ -z "$cpu" ]; then
  echo "ggml-build: no libggml-base.a or libggml-cpu.a in $dir" >&2
  exit 1
fi
cp "$base" "$base_out" && cp "$cpu" "$cpu_out"
