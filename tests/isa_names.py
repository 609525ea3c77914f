#!/usr/bin/env python3
# isa_names.py -- fails when a tracked source outside the registry's places quotes an
# implementation's name
"""Usage: isa_names.py SOURCE_ROOT NAME...

An implementation is described by its registry row (dispatch/registry.c) and lives in its kernel
folder and meson lines; everything else (bench, tools, tests, the public header) loops over the
registry. This lists every tracked file outside those places that has one of NAMEs in quotes
("name" or 'name'), and exits 1 if there is any; 77 (skipped) when the tree is not a git checkout.
"""
import os
import re
import subprocess
import sys

# Where an implementation's name belongs, by path prefix.
ALLOWED = (
    "kernels/",             # the kernel folders
    "dispatch/registry.c",  # the rows
    "docs/", "README.md",   # prose for readers
    "tools/cross/",         # cross files name their target
)


def allowed(path):
    base = os.path.basename(path)
    if base in ("meson.build", "meson_options.txt"):
        return True  # the meson lines of each ISA
    return path.startswith(ALLOWED)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, names = argv[1], argv[2:]
    try:
        files = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                               capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        print("1..0 # SKIP not a git checkout")
        return 77
    quoted = re.compile("([\"'])(" + "|".join(re.escape(n) for n in names) + r")\1")
    found = 0
    for path in files:
        if not path or allowed(path):
            continue
        try:
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                for no, line in enumerate(f, 1):
                    if quoted.search(line):
                        print(f"{path}:{no}: {line.strip()}")
                        found += 1
        except OSError:
            continue  # listed but absent (a sparse or dirty checkout)
    if found:
        print(f"{found} line(s) name an implementation: read it from the registry instead "
              "(sdpa_impl_at, sdpa_impl_requires_key, sdpa_impl_peak_class)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
