#!/usr/bin/env bash
# test-consumers.sh -- installs libsdpa into a temporary prefix and builds and runs three consumers
# against it: a Makefile with pkg-config, a CMake project with find_package(sdpa), and a meson
# project with libsdpa as a subproject (dependency('sdpa')); each runs a decode and checks it
#
# usage: tools/test-consumers.sh [OUTDIR [BUILDDIR]]
#   With BUILDDIR (a configured, built tree of this source), installs that build into the
#   prefix (meson install --destdir) instead of configuring and building one of its own.
#   Writes OUTDIR/testlog-consumers.json (meson's test-log format, one record per check) for
#   tools/testsummary.py. Exit status 0 iff every check passed. Needs meson, ninja, make, cmake,
#   pkg-config and a C compiler (tools/deps.sh installs them).
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
out=${1:-$top/build-logs}
from=${2:-}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
checks=()
check() { # name command...
  local name=$1; shift
  if "$@" >"$work/$name.log" 2>&1; then
    checks+=("{\"name\": \"consumer: $name\", \"result\": \"OK\"}"); echo "ok: $name"
  else
    checks+=("{\"name\": \"consumer: $name\", \"result\": \"FAIL\"}"); echo "FAILED: $name"
    tail -30 "$work/$name.log"; status=1
  fi
}

prefix=$work/prefix
if [ -n "$from" ]; then
  # the build's own prefix, moved under $work/dest: the CMake package is relocatable, and
  # pkg-config is pointed at the moved tree through PKG_CONFIG_SYSROOT_DIR
  from=$(cd "$from" && pwd)
  build_prefix=$(cd "$from" && meson introspect --buildoptions | python3 -c 'import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
  prefix=$work/dest$build_prefix
  install_lib() { meson install -C "$from" --no-rebuild --destdir "$work/dest"; }
  sysroot=$work/dest
  optdir=$from
else
  install_lib() {
    meson setup "$work/build" --prefix="$prefix" -Dtests=false -Dbench=disabled &&
      ninja -C "$work/build" install
  }
  sysroot=
  optdir=$work/build
fi
check install install_lib
libdir=$(cd "$optdir" && meson introspect --buildoptions | python3 -c 'import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))')

# each consumer in a directory of its own, with the one decode.c they share
for c in make cmake meson; do
  cp -r tests/consumers/$c "$work/$c" && cp tests/consumers/decode.c "$work/$c/"
done

pkgconfig_consumer() {
  PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$sysroot make -C "$work/make" &&
    "$work/make/decode"
}
check pkg-config pkgconfig_consumer

cmake_consumer() {
  cmake -S "$work/cmake" -B "$work/cmake/build" -DCMAKE_PREFIX_PATH="$prefix" &&
    cmake --build "$work/cmake/build" && "$work/cmake/build/decode"
}
check cmake cmake_consumer

# The subproject is this source tree (tracked files only, as a fresh clone has them). It must
# build its library alone: no test, benchmark or tool of libsdpa's in the consumer's build.
meson_consumer() {
  mkdir -p "$work/meson/subprojects/libsdpa" &&
    git ls-files -z | (cd "$top" && xargs -0 cp --parents -t "$work/meson/subprojects/libsdpa") &&
    meson setup "$work/meson/build" "$work/meson" &&
    ninja -C "$work/meson/build" &&
    meson test -C "$work/meson/build" --print-errorlogs &&
    meson introspect "$work/meson/build" --targets | python3 -c 'import json, sys
names = sorted(t["name"] for t in json.load(sys.stdin))
extra = [n for n in names if n not in ("decode", "sdpa") and not n.startswith("sdpa_")]
print("targets:", " ".join(names))
sys.exit(1 if extra else 0)' &&
    meson introspect "$work/meson/build" --tests | python3 -c 'import json, sys
tests = [t["name"] for t in json.load(sys.stdin)]
print("tests:", " ".join(tests))
sys.exit(0 if tests == ["decode"] else 1)'
}
check meson-subproject meson_consumer

printf '%s\n' "${checks[@]}" >"$out/testlog-consumers.json"
exit $status
