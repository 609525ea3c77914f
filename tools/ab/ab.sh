#!/usr/bin/env bash
# ab.sh -- two libsdpa builds timed in turn in one process, on the same buffers: builds, renames,
# links and runs tools/ab/ab.c
# usage: tools/ab/ab.sh A B [--workdir DIR] [--keep] [harness options]   (--help: all options)
set -euo pipefail
export LC_ALL=C # sort and comm must agree on the order
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CC=${CC:-cc}

usage() {
  cat <<'EOF'
usage: tools/ab/ab.sh A B [options]

A and B are each one of
  a git revision of this repository   exported (git archive) and built: meson -Dbuildtype=release
                                      -Dtests=false -Dbench=disabled, ninja libsdpa.a
  a meson build directory             its libsdpa.a as it is (run ninja there first)
  a libsdpa.a                         as it is
Every global symbol of A's archive is renamed a_<name>, of B's b_<name>, and both are linked into
one harness (tools/ab/ab.c) that calls sdpa_impl_forward of A and of B in turn (single-threaded
unless --threads), on the same buffers, each decode call after a 512 MiB read (timed: the
bandwidth of the moment).

options of this script:
  --workdir DIR      build and link there, and keep it: revisions already built there are reused
  --keep             keep the temporary work directory (printed at the end)
options of the harness:
  --quick            5 timed calls per build and row instead of 15
  --calls N          N timed calls per build and row
  --row-seconds S    fewer calls (not below 5) in a row whose N pairs would take over S seconds,
                     judged by the untimed first calls (default 60; 0: no limit)
  --csv FILE         every timed call: row, pair, build, wall and CPU ms, and the read
                     bandwidth before it (GB/s, decode)
  --filter REGEX     rows whose kind/impl/shape matches (extended regex), e.g. '^decode/.*_f16$'
  --impl LIST        implementations, comma-separated (default: every one both builds run here)
  --order abba|abab  the order within each pair of calls (default abba: AB BA AB BA ...)
  --read-mib N       size of the read before each decode call (default 512)
  --threads N        every call on N threads, a pool of the harness (default 1)
  --tolerance X      largest |B - A| of an output still counted as agreement (default 1e-5)
  --list             print the rows that would run, and exit
The exit status is 1 when a row failed or the outputs of A and B differ.
EOF
  exit "${1:-2}"
}

die() { echo "ab: $*" >&2; exit 1; }

[ $# -ge 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; } && usage 0
[ $# -ge 2 ] || usage
args=("$1" "$2")
shift 2
workdir="" keep=0 pass=()
while [ $# -gt 0 ]; do
  case $1 in
    --workdir) [ $# -ge 2 ] || usage; workdir=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage 0 ;;
    *) pass+=("$1"); shift ;;
  esac
done

if [ -n "$workdir" ]; then
  mkdir -p "$workdir"
  work=$(cd "$workdir" && pwd)
  keep=1
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/sdpa-ab.XXXXXX")
fi
cleanup() {
  if [ "$keep" = 1 ]; then echo "ab: work directory kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

cpuf=$($CC -print-file-name=libcpu_features.a)
# as the project's meson.build finds it: a static library in the compiler's own search path
[ "$cpuf" != libcpu_features.a ] ||
  die "no static libcpu_features.a where $CC looks (tools/deps.sh installs it)"

# the source directory a meson build directory was configured from, or nothing
meson_source() {
  local info=$1/meson-info/meson-info.json
  [ -f "$info" ] || return 0
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["directories"]["source"])' \
    "$info"
}

# Sets archive[i], src[i] and label[i] for argument i (0: A, 1: B).
archive=() src=() label=()
resolve() {
  local arg=$1 i=$2 sha dir
  if [ -f "$arg" ]; then
    archive[i]=$(realpath "$arg")
    src[i]=$(meson_source "$(dirname "${archive[i]}")")
    label[i]="${archive[i]} (modified $(date -r "$arg" '+%F %T'))"
  elif [ -d "$arg" ]; then
    [ -f "$arg/libsdpa.a" ] || die "$arg: no libsdpa.a there (a meson build directory, built?)"
    archive[i]=$(realpath "$arg/libsdpa.a")
    src[i]=$(meson_source "$arg")
    label[i]="${archive[i]} (modified $(date -r "$arg/libsdpa.a" '+%F %T'))"
  elif [ -n "${sha_of[i]}" ]; then
    sha=${sha_of[i]}
    dir=$work/rev-$sha
    if [ ! -f "$dir/build/libsdpa.a" ]; then
      rm -rf "$dir"
      mkdir -p "$dir/src"
      echo "ab: building $arg ($(git -C "$root" rev-parse --short "$sha")) in $dir" >&2
      git -C "$root" archive "$sha" | tar -x -C "$dir/src"
      if ! { meson setup "$dir/build" "$dir/src" -Dbuildtype=release -Dtests=false \
               -Dbench=disabled &&
             ninja -C "$dir/build" libsdpa.a; } >"$dir/build.log" 2>&1; then
        tail -n 30 "$dir/build.log" >&2
        die "$arg: the build failed (log: $dir/build.log)"
      fi
    fi
    archive[i]=$dir/build/libsdpa.a
    src[i]=$dir/src
    label[i]="$arg = $(git -C "$root" log -1 --format='%h %s' "$sha" | cut -c1-72)"
  else
    die "$arg: neither a file, a directory nor a revision of $root"
  fi
}

# Copies archive $1 to $3 with every global it defines renamed $2<name> (definitions and the
# references between its objects alike: the per-ISA objects are inside, linked whole), so that
# two builds link into one program and each calls only its own code. File-scope statics are
# renamed too, though they cannot collide, so that every symbol of either build in the program
# says which build it belongs to; a local that shares its name with an outside reference (to
# libc, cpu_features) keeps it, as renaming it would rename the reference.
rename() {
  local in=$1 p=$2 out=$3 bad
  nm --defined-only -g "$in" | awk 'NF == 3 { print $3 }' | sort -u >"$out.names"
  grep -qx sdpa_impl_forward "$out.names" || die "$in: defines no sdpa_impl_forward"
  nm -u "$in" | awk 'NF == 2 { print $2 }' | sort -u | comm -23 - "$out.names" >"$out.outside"
  nm --defined-only "$in" | awk 'NF == 3 { print $3 }' | sort -u | comm -23 - "$out.outside" |
    awk -v p="$p" '{ print $1, p $1 }' >"$out.map"
  objcopy --redefine-syms="$out.map" "$in" "$out"
  bad=$(nm --defined-only -g "$out" |
        awk -v p="$p" 'NF == 3 && index($3, p) != 1 { print $3 }' | sort -u)
  [ -z "$bad" ] || die "$out: globals left without the prefix $p: $bad"
  bad=$(nm -u "$out" | awk 'NF == 2 { print $2 }' | sort -u | comm -12 - "$out.names")
  [ -z "$bad" ] || die "$out: references left under their old names: $bad"
}

# Revisions are resolved to commits before anything is built: a branch may move meanwhile.
sha_of=("" "")
for i in 0 1; do
  [ -e "${args[i]}" ] ||
    sha_of[i]=$(git -C "$root" rev-parse --verify --quiet "${args[i]}^{commit}") || true
done

prefix=(a_ b_)
lib=("$work/liba.a" "$work/libb.a")
inc=()
for i in 0 1; do
  resolve "${args[i]}" "$i"
  rename "${archive[i]}" "${prefix[i]}" "${lib[i]}"
  # each side is compiled against its own build's header; without a known source tree, this one's
  if [ -n "${src[i]}" ] && [ -f "${src[i]}/include/sdpa.h" ]; then
    inc[i]=${src[i]}/include
  else
    inc[i]=$root/include
    echo "ab: ${args[i]}: source tree unknown, its calls are compiled against" \
      "$root/include/sdpa.h" >&2
  fi
done
cmp -s "${inc[0]}/sdpa.h" "${inc[1]}/sdpa.h" ||
  echo "ab: A and B have different sdpa.h; each side is compiled against its own" >&2

cflags=(-std=c11 -O2 -Wall -Wextra)
$CC "${cflags[@]}" -DAB_SIDE_PREFIX=a_ -I"${inc[0]}" -c "$here/ab.c" -o "$work/side_a.o"
$CC "${cflags[@]}" -DAB_SIDE_PREFIX=b_ -I"${inc[1]}" -c "$here/ab.c" -o "$work/side_b.o"
# the harness: convert.h and the sdpa.h it includes, of this tree (it calls no function of it)
$CC "${cflags[@]}" -I"$root/kernels/generic" -I"$root/include" -c "$here/ab.c" -o "$work/ab.o"
$CC -o "$work/ab" "$work/ab.o" "$work/side_a.o" "$work/side_b.o" "${lib[0]}" "${lib[1]}" "$cpuf" \
  -lm -lpthread

# No library global may be in the program under its own name (each build runs its own code),
# nor any sdpa_ symbol at all: the harness defines none.
sort -u "${lib[0]}.names" "${lib[1]}.names" >"$work/names"
left=$(nm "$work/ab" | awk '{ print $NF }' | sort -u | comm -12 - "$work/names")
[ -z "$left" ] || die "$work/ab: library globals under their own names: $left"
left=$(nm "$work/ab" | awk '$NF ~ /^sdpa_/ { print $NF }' | sort -u)
[ -z "$left" ] || die "$work/ab: symbols without a build's prefix: $left"
na=$(nm "$work/ab" | awk '$NF ~ /^a_/' | wc -l)
nb=$(nm "$work/ab" | awk '$NF ~ /^b_/' | wc -l)
echo "ab: $work/ab linked: $na symbols a_*, $nb b_*, no library symbol under its own name" >&2

set +e
"$work/ab" --label-a "${label[0]}" --label-b "${label[1]}" ${pass[@]+"${pass[@]}"}
exit $?
