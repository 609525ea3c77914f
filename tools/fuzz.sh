#!/usr/bin/env bash
# fuzz.sh -- builds the libFuzzer target (clang, ASan+UBSan, coverage) and fuzzes sdpa_impl_forward from tests/fuzz/corpus
# usage: tools/fuzz.sh [SECONDS | -runs=N] [more libFuzzer options...]
#   SECONDS: stop after that long (default 60); -runs=N: stop after N inputs. New inputs libFuzzer
#   finds go to build-libfuzzer/fuzz-corpus (tests/fuzz/corpus is only read); a failing input is
#   saved in build-libfuzzer/fuzz-artifacts/ (replay it with tests/fuzz_driver FILE in any build,
#   or build-libfuzzer/tests/fuzz_libfuzzer FILE). SDPA_FUZZ_KEEP_GOING=1 prints failed checks
#   and goes on instead of stopping at the first.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-libfuzzer
if ! command -v clang >/dev/null; then
  echo "fuzz.sh: clang is needed for libFuzzer (the seeded driver, meson test --suite fuzz, needs none)"
  exit 1
fi
limit=(-max_total_time=60)
if [ $# -gt 0 ]; then
  case $1 in
    ''|*[!0-9]*) limit=() ;;          # libFuzzer options only (e.g. -runs=N)
    *) limit=(-max_total_time="$1"); shift ;;
  esac
fi
# -fsanitize=fuzzer-no-link instruments the library and the target for coverage; only the
# fuzzer executable links libFuzzer's main (tests/meson.build). -O1 because clang 14 with ASan,
# UBSan and coverage is slow on the vector kernels: the first build takes minutes for most of
# them (seconds for most files at -O1), over 20 CPU-minutes for the AVX-512 decode kernel.
setup=(-Doptimization=1 -Ddebug=true -Db_sanitize=address,undefined -Db_lundef=false -Dbench=disabled
       -Dc_args=-fsanitize=fuzzer-no-link)
if [ -d "$build" ]; then
  meson setup --reconfigure "$build" "${setup[@]}" >/dev/null
else
  CC=clang meson setup "$build" "${setup[@]}" >/dev/null
fi
ninja -C "$build" -j"$(nproc)" tests/fuzz_libfuzzer >/dev/null
mkdir -p "$build/fuzz-corpus" "$build/fuzz-artifacts"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1
exec "$build/tests/fuzz_libfuzzer" -max_len=512 -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-artifacts/" "${limit[@]}" "$@" "$build/fuzz-corpus" tests/fuzz/corpus
