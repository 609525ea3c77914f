#!/usr/bin/env python3
"""testsummary.py -- sums meson testlog.json files into one closing line 'N passed, N failed, N skipped'."""
import json
import sys


def main(argv):
    extra_failed = 0
    files = []
    it = iter(argv)
    for a in it:
        if a == "--extra-failed":
            extra_failed = int(next(it))
        else:
            files.append(a)
    passed = failed = skipped = 0
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                lines = [ln for ln in f if ln.strip()]
        except OSError as e:
            print(f"testsummary: {path}: {e}")
            failed += 1
            continue
        for ln in lines:
            r = json.loads(ln).get("result", "")
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
                print(f"FAILED ({path}): {json.loads(ln).get('name')} -> {r}")
    failed += extra_failed
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
