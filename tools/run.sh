#!/usr/bin/env bash
# run.sh -- the main job: installs what is missing, builds, prints the CPU capability report and a short per-ISA benchmark
# usage: tools/run.sh [--full]   (--full: longer runs per benchmark; JSON, table and chart go to build/bench-results/)
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
min_time=0.05                       # short: about a minute on 2 cores
reps=1
# --full: five repetitions each; the table reports the fastest (as the peak and bandwidth are
# the best of their runs) and the median beside it
[ "${1:-}" = --full ] && { min_time=0.1; reps=5; }
build/bench/sdpa-bench --benchmark_min_time=$min_time --benchmark_repetitions=$reps \
  --benchmark_out=build/bench-results/bench.json --benchmark_out_format=json
# Debian's python3 has matplotlib (installed by deps.sh); another python3 first on PATH may not
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3
$py tools/bench_table.py build/bench-results/bench.json --png build/bench-results/bench.png
