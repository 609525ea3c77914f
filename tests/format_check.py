#!/usr/bin/env python3
# format_check.py -- fails when a tracked C/C++ source differs from what .clang-format makes of it
"""Usage: format_check.py SOURCE_ROOT

Runs clang-format (the version .clang-format names, 14) in dry-run mode over every tracked
.c, .h and .cc file and lists the files it would change, with the first differing lines; exits
1 if there is any, 77 (skipped) when clang-format or a git checkout is missing.
"""
import difflib
import os
import shutil
import subprocess
import sys


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    exe = shutil.which("clang-format-14") or shutil.which("clang-format")
    if not exe:
        print("clang-format not found: skipped")
        return 77
    try:
        files = subprocess.run(["git", "-C", root, "ls-files", "*.c", "*.h", "*.cc"],
                               check=True, capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        print("not a git checkout: skipped")
        return 77
    bad = 0
    for f in files:
        path = os.path.join(root, f)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        out = subprocess.run([exe, "--style=file", "--assume-filename=" + path],
                             input=text, capture_output=True, text=True, cwd=root).stdout
        if out != text:
            bad += 1
            diff = list(difflib.unified_diff(text.splitlines(), out.splitlines(), f, f, n=0,
                                             lineterm=""))
            print("\n".join(diff[:12]))
    print(f"{len(files)} files checked, {bad} not formatted (clang-format -i fixes them)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
