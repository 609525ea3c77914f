#!/usr/bin/env bash
# deps.sh -- installs the Debian packages libsdpa's build, tests and benchmarks need, only those missing
# usage: tools/deps.sh [extra-package ...]
set -euo pipefail
pkgs=(meson ninja-build gcc g++ make cmake pkg-config python3 libcpu-features-dev
      libbenchmark-dev libopenblas-dev python3-matplotlib clang-format "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "deps: installing ${missing[*]}" >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
