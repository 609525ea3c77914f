#!/usr/bin/env python3
"""testsummary.py -- sums meson testlog.json files into one closing line 'N passed, N failed, N skipped'.

A TAP test counts each of its subtests (one per test case and implementation), so an
implementation the CPU cannot run shows up as skipped; any other test counts once by its result.
"""
import json
import re
import sys

TAP_LINE = re.compile(r"^(not ok|ok)\b(.*)$")


def count_tap(stdout):
    passed = failed = skipped = 0
    for ln in stdout.splitlines():
        m = TAP_LINE.match(ln)
        if not m:
            continue
        directive = m.group(2).split("#", 1)[1].strip().upper() if "#" in m.group(2) else ""
        if directive.startswith("SKIP"):
            skipped += 1
        elif m.group(1) == "ok":
            passed += 1
        else:
            failed += 1
    return passed, failed, skipped


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
                records = [json.loads(ln) for ln in f if ln.strip()]
        except (OSError, ValueError) as e:
            print(f"testsummary: {path}: {e}")
            failed += 1
            continue
        for rec in records:
            result, out = rec.get("result", ""), rec.get("stdout") or ""
            if out.lstrip().startswith("TAP version"):
                p, f, s = count_tap(out)
                if result not in ("OK", "SKIP", "EXPECTEDFAIL") and f == 0:
                    f = 1  # crashed or timed out between subtests
                if result == "SKIP" and p + f + s == 0:
                    s = 1
            elif result in ("OK", "EXPECTEDFAIL"):
                p, f, s = 1, 0, 0
            elif result == "SKIP":
                p, f, s = 0, 0, 1
            else:
                p, f, s = 0, 1, 0
            if f:
                print(f"FAILED ({path}): {rec.get('name')} -> {result}")
            passed, failed, skipped = passed + p, failed + f, skipped + s
    failed += extra_failed
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
