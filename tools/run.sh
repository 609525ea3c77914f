#!/usr/bin/env bash
# run.sh -- the main job: installs what is missing, builds, prints the CPU capability report and a short per-ISA benchmark
# usage: tools/run.sh [--full]   (--full: every benchmark, longer, JSON and Markdown table in build/bench-results/)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
if [ -d build ]; then meson setup --reconfigure build -Dbuildtype=release >/dev/null
else meson setup build -Dbuildtype=release >/dev/null; fi
ninja -C build >/dev/null
echo "================ capability report ================"
build/tools/sdpa-cpuinfo
echo
echo "================ benchmark ================"
mkdir -p build/bench-results
if [ "${1:-}" = --full ]; then
  build/bench/sdpa-bench --benchmark_out=build/bench-results/bench.json --benchmark_out_format=json
else
  build/bench/sdpa-bench --short --benchmark_out=build/bench-results/bench.json --benchmark_out_format=json
fi
python3 tools/bench_table.py build/bench-results/bench.json --png build/bench-results/bench.png
