#!/usr/bin/env python3
"""bench_table.py -- turns sdpa-bench's JSON output into a Markdown table (and optionally a bar
chart).

Usage:
    sdpa-bench --benchmark_format=json --benchmark_out=run.json ...
    bench_table.py run.json [--png chart.png]

Every ratio comes from the same run: the FMA peaks and the read bandwidth that sdpa-bench
measured at start-up are in the JSON's "context", and each prefill, decode and BLAS benchmark
carries its own percentage, against the limit measured again between its timed iterations
(before each and after the last, averaged: limit_flops, limit_bytes_per_s), for its mean call
and for its fastest call (pct_peak_best, pct_bw_best). "x BLAS" compares a prefill result with
the unfused OpenBLAS baseline on the same shape at 1 thread (the baseline only runs at 1 thread).

"% roofline" (decode) judges a decode row against the lower of its two limits: the read
bandwidth measured with it, and the rate at which its implementation's FMA peak (the start-up
figure for its ISA and thread count) can do the arithmetic of those bytes, 4 flops per K/V
byte for f16 K/V with 4 query heads per KV head. Where the second is lower ("compute" in the
"bound" column), no kernel of that ISA can reach the bandwidth on that shape. The floor rows
(sdpa-bench --benchmark_filter='^floor/': a decode shape's conversions and FMAs alone, from
memory, on an ISA's kernel) are judged the same way, and the target table puts each beside the
decode rows of its ISA's implementations.

The scaling rows (sdpa-bench --benchmark_filter='^scaling/': a decode shape on 1 and 2 threads,
timed in turn in every iteration) give the target table its "2 thr / 1 thr, paired" rows: the
median of the iterations' ratios, against 1.8 where the 2-thread call's roofline (computed as
for a decode row from the row's own counters) is 1.8 times the 1-thread speed or more. The
scaling-floor rows (the floor loop of the same shape, paired the same way) stand beside them in
the "arithmetic alone" column.

The quant rows (sdpa-bench --benchmark_filter='^quant/') get a table of their own: per row the
quantized call's rates from its median call, its "% roofline" computed the same way from its
own counters (decode: the lower of limit_bytes_per_s and the rate at which limit_flops, the FMA
peak sampled with it, does the arithmetic of the format's bytes; prefill: % of limit_flops),
"x f16" (the median over the interleaved passes of f16 time / quantized time; "mean": of the
summed times) and, for fast rows, "x exact" (exact time / fast time). With repetitions, each
value is the median over them.
"""
import argparse
import json
import sys


def parse_name(name):
    """'<kind>/<impl>/<shape>[/threads:N][/real_time|/manual_time]'
    -> (kind, impl, shape, threads)."""
    parts = [p for p in name.split("/") if p not in ("real_time", "manual_time")]
    threads = 1
    if parts and parts[-1].startswith("threads:"):
        threads = int(parts.pop()[len("threads:"):])
    kind = parts[0] if parts else name
    impl = parts[1] if len(parts) > 1 else ""
    shape = "/".join(parts[2:])
    return kind, impl, shape, threads


def fmt(v, digits=1):
    return "" if v is None else f"{v:.{digits}f}"


def fmt_bytes(v):
    if v is None or v < 0:
        return ""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return f"{v / scale:.1f} {unit}"
    return f"{v:.0f} B"


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def roofline(row, b, ctx):
    """Sets row["pct_roof"] and row["bound"] for a decode row (see the module's doc)."""
    row["pct_roof"] = row["bound"] = None
    flop, bps, limit = b.get("FLOP"), b.get("bytes_per_second"), b.get("limit_bytes_per_s")
    # the peak of the implementation's class, as the registry names it (sve: neon)
    cls = ctx.get(f"sdpa_peak_class/{row['impl']}", row["impl"])
    peak = ctx.get(f"fma_peak_flops/{cls}/threads:{row['threads']}")
    if row["kind"] not in ("decode", "floor", "scaling") or not (flop and bps and limit and peak):
        return
    compute_bps = float(peak) / (flop / bps)  # bytes/s at which the FMA peak keeps up
    roof = min(limit, compute_bps)
    row["pct_roof"] = bps * 100.0 / roof
    row["bound"] = "compute" if compute_bps < limit else "memory"


def load_rows(doc):
    """One row per benchmark. With --benchmark_repetitions, the row is the fastest repetition
    (the same statistic as the FMA peak and read bandwidth in the context, each the best of many
    runs: on a shared machine, other load only ever slows a run down), and "median" keeps the
    median of the repetitions' percentages beside it."""
    runs = [b for b in doc.get("benchmarks", []) if b.get("run_type", "iteration") == "iteration"]
    groups = {}
    for b in runs:
        groups.setdefault(b.get("run_name", b["name"]), []).append(b)
    rows = []
    for name, reps in groups.items():
        ok = [b for b in reps if not b.get("error_occurred")]
        b = min(ok, key=lambda x: x["real_time"]) if ok else reps[0]
        kind, impl, shape, threads = parse_name(name)
        row = {"kind": kind, "impl": impl, "shape": shape, "threads": threads, "reps": len(ok),
               "error": b.get("error_message") if b.get("error_occurred") else None}
        flop = b.get("FLOP")
        row["gflops"] = flop / 1e9 if flop is not None else None
        row["pct_peak"] = b.get("pct_peak")
        bps = b.get("bytes_per_second")
        row["gbs"] = bps / 1e9 if bps is not None else None
        row["pct_bw"] = b.get("pct_bw")
        key = "pct_peak" if b.get("pct_peak") is not None else "pct_bw"
        row["pct_median"] = median([x.get(key) for x in ok]) if len(ok) > 1 else None
        row["pct_reps"] = [x.get(key) for x in ok if x.get(key) is not None]
        # the fastest single call over all repetitions, against the limit of its own repetition
        best = [x.get(key + "_best") for x in ok if x.get(key + "_best") is not None]
        row["pct_best_call"] = max(best) if best else None
        mem = b.get("extra_bytes", b.get("ws_bytes"))
        row["mem"] = mem
        roofline(row, b, doc.get("context", {}))
        rows.append(row)
    # x BLAS: libsdpa prefill / OpenBLAS on the same shape (1 thread).
    blas = {r["shape"]: r["gflops"] for r in rows if r["kind"] == "blas" and r["gflops"]}
    for r in rows:
        r["x_blas"] = None
        if (r["kind"] in ("prefill", "blas") and r["threads"] == 1 and r["gflops"]
                and blas.get(r["shape"])):
            r["x_blas"] = r["gflops"] / blas[r["shape"]]
    return rows


def print_context(ctx):
    peaks = sorted((k, v) for k, v in ctx.items() if k.startswith("fma_peak_flops/"))
    if peaks:
        print("FMA peak (measured at start-up): " + ", ".join(
            f"{k.split('/')[1]} {k.split('/')[2]} {float(v) / 1e9:.1f} GFLOP/s" for k, v in peaks))
    bws = sorted((k, v) for k, v in ctx.items() if k.startswith("read_bw_bytes_per_s/"))
    if bws:
        size = int(ctx.get("read_bw_buffer_bytes", "0"))
        streams = ctx.get("read_bw_streams", "1")
        print(f"Read bandwidth at start-up ({ctx.get('read_bw_loads', '?')} loads, {streams} "
              f"stream{'s' if streams != '1' else ''}, {fmt_bytes(size)} buffer): " + ", ".join(
            f"{k.split('/')[1]} {float(v) / 1e9:.2f} GB/s" for k, v in bws))
    if "openblas_core" in ctx:
        print(f"OpenBLAS core: {ctx['openblas_core']} ({ctx.get('openblas_config', '')})")
    if "sdpa_implementations" in ctx:
        print(f"Implementations: {ctx['sdpa_implementations']} "
              f"(active: {ctx.get('sdpa_active', '?')})")
    print()


def print_table(rows):
    reps = max([r["reps"] for r in rows] + [1])
    head = ["kind", "implementation", "shape", "threads", "GFLOP/s", "% FMA peak", "GB/s",
            "% bandwidth", "best call %", "x BLAS", "% roofline", "bound", "extra memory"]
    if reps > 1:
        print(f"Each row: the fastest of {reps} repetitions (its mean over the repetition's "
              "calls), its percentage against the limit measured between its own timed "
              "iterations; \"best call %\": the fastest single call of all repetitions against "
              "its repetition's limit; \"median %\": the median of the repetitions' "
              "percentages.\n")
        head.insert(9, "median %")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i < 3 else "---:" for i in range(len(head))) + "|")
    for r in rows:
        if r["error"]:
            cells = [r["kind"], r["impl"], r["shape"], str(r["threads"]), f"error: {r['error']}"]
            cells += [""] * (len(head) - len(cells))
        else:
            cells = [r["kind"], r["impl"], r["shape"], str(r["threads"]), fmt(r["gflops"], 2),
                     fmt(r["pct_peak"]), fmt(r["gbs"], 2), fmt(r["pct_bw"]),
                     fmt(r["pct_best_call"]), fmt(r["x_blas"], 2), fmt(r["pct_roof"]),
                     r["bound"] or "", fmt_bytes(r["mem"])]
            if reps > 1:
                cells.insert(9, fmt(r["pct_median"]))
        print("| " + " | ".join(cells) + " |")


def quant_table(doc):
    """The quant rows: one Markdown table (see the module's doc)."""
    ctx = doc.get("context", {})
    groups = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b.get("run_name", b["name"])
        if parse_name(name)[0] == "quant":
            groups.setdefault(name, []).append(b)
    if not groups:
        return

    def roof(b, prefix, decode):
        """(% roofline, bound) of the call whose counters start with prefix ("" or "f16_")."""
        flop, bps = b.get(prefix + "FLOP"), b.get(prefix + "bytes_per_second")
        limit, peak = b.get("limit_bytes_per_s"), b.get("limit_flops")
        if not peak:
            _, impl, _, threads = parse_name(b.get("run_name", b["name"]))
            cls = ctx.get(f"sdpa_peak_class/{impl}", impl)
            peak = float(ctx.get(f"fma_peak_flops/{cls}/threads:{threads}", 0)) or None
        if not (flop and peak):
            return None, None
        if not decode:
            return flop * 100.0 / peak, "compute"
        if not (bps and limit):
            return None, None
        compute_bps = peak / (flop / bps)  # bytes/s of this format at which the peak keeps up
        return bps * 100.0 / min(limit, compute_bps), "compute" if compute_bps < limit else "memory"

    print("\nQuantized K/V against the f16 call, timed in turn in one process (rates: the median "
          "call's; x f16: median over the passes of f16 time / quantized time).\n")
    head = ["impl", "shape", "fmt", "mode", "threads", "GB/s", "GFLOP/s", "% roofline", "bound",
            "x f16", "x f16 (mean)", "x exact", "target", "f16 % roofline", "pairs"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i < 4 else "---:" for i in range(len(head))) + "|")
    for name, reps in groups.items():
        _, impl, shape, threads = parse_name(name)
        ok = [b for b in reps if not b.get("error_occurred")]
        kind, _, rest = shape.partition("_")
        parts = rest.rsplit("_", 1)
        mode = parts[-1]
        base, fmt_name = parts[0], ""
        for f in ("q8_0", "q4_0", "f16"):
            if base.endswith("_" + f):
                base, fmt_name = base[: -len(f) - 1], f
        if not ok:
            err = reps[0].get("error_message", "error")
            print(f"| {impl} | {kind} {base} | {fmt_name} | {mode} | {threads} | error: {err} |"
                  + " |" * (len(head) - 6))
            continue
        decode = kind == "decode"
        med = lambda key: median([b.get(key) for b in ok])
        pcts = [roof(b, "", decode) for b in ok]
        f16_pcts = [roof(b, "f16_", decode) for b in ok]
        pct = median([p for p, _ in pcts])
        bound = pcts[0][1] or ""
        ratio, ratio_exact = med("ratio"), med("ratio_exact")
        target, target_exact, verdict = med("target"), med("target_exact"), ""
        if target and ratio is not None:
            verdict = f">= {target:.2f} x f16 {'met' if ratio >= target else '**missed**'}"
        elif target_exact and ratio_exact is not None:
            met = "met" if ratio_exact >= target_exact else "**missed**"
            verdict = f">= {target_exact:.2f} x exact {met}"
        gbs = med("bytes_per_second")
        cells = [impl, f"{kind} {base}", fmt_name, mode, str(threads),
                 fmt(gbs / 1e9, 2) if gbs else "", fmt((med("FLOP") or 0) / 1e9, 1), fmt(pct),
                 bound, fmt(ratio, 3), fmt(med("ratio_mean"), 3), fmt(ratio_exact, 3), verdict,
                 fmt(median([p for p, _ in f16_pcts])), fmt(med("pairs"), 0)]
        print("| " + " | ".join(cells) + " |")


def group_runs(doc, kind):
    """{run name: [its repetitions without error]} of the rows of one kind."""
    groups = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        if parse_name(name)[0] == kind:
            groups.setdefault(name, []).append(b)
    return groups


def target_rows(doc, rows):
    """The decode-roofline targets, each (row, impl, threads, value, target, unit[, floor]): decode and
    quantized decode as % of their roofline (fast scores: of their own, the score half of the
    FLOPs at the int8 dot rate), fast over exact, paged against the scattered read (16-key pages)
    and against the contiguous call (128-key pages), 2 threads over 1 (from the paired scaling
    rows where the run has them), the prefill variants over the plain call. Rows the run did not measure are left out. floor: the % roofline of the
    decode row's arithmetic alone (a floor row of its ISA, shape and threads), where it ran."""
    out = []
    def what(shape):
        return "f16 MHA" if "Hkv32" in shape else ("bf16 GQA" if shape.endswith("bf16") else
                                                    "f16 GQA")
    ctx = doc.get("context", {})
    floor = {(r["impl"], r["shape"], r["threads"]): r["pct_roof"] for r in rows
             if r["kind"] == "floor" and r["pct_roof"] is not None}
    for r in rows:
        if r["kind"] == "decode" and r["pct_roof"] is not None and r["impl"] != "scalar":
            cls = ctx.get(f"sdpa_peak_class/{r['impl']}", r["impl"])
            out.append((f"decode {what(r['shape'])}", r["impl"], r["threads"], r["pct_roof"], 85.0,
                        "%", floor.get((cls, r["shape"], r["threads"]))))
    speed = {}  # (impl, shape) -> {threads: (bytes/s, % roofline)}
    for r in rows:
        if r["kind"] == "decode" and r["gbs"] and r["pct_roof"] is not None:
            speed.setdefault((r["impl"], r["shape"]), {})[r["threads"]] = (r["gbs"], r["pct_roof"])
    for name, reps in group_runs(doc, "quant").items():
        _, impl, shape, threads = parse_name(name)
        if not shape.startswith("decode_"):
            continue
        fmt_mode = shape.split("_D128_", 1)[-1]
        if fmt_mode.startswith("f16"):
            continue
        med = lambda key: median([b.get(key) for b in reps])
        if fmt_mode.endswith("_exact"):
            out.append((f"decode {fmt_mode}", impl, threads, med("pct_roofline"), 80.0, "%"))
        else:
            own = med("own_pct_roofline")
            if own is not None:
                out.append((f"decode {fmt_mode} (own roofline)", impl, threads, own, 80.0, "%"))
            rx = med("ratio_exact")
            if rx is not None:
                out.append((f"decode {fmt_mode} x exact", impl, threads, rx, 1.0, "x"))
    lay = {}
    for name, reps in group_runs(doc, "layout").items():
        _, impl, shape, threads = parse_name(name)
        lay[(impl, shape, threads)] = max(b.get("bytes_per_second_best", 0) for b in reps)
    for (impl, shape, threads), bps in sorted(lay.items()):
        if shape == "paged16" and lay.get(("read", "scatter16", threads)):
            out.append(("paged16 / scattered read", impl, threads,
                        bps / lay[("read", "scatter16", threads)], 0.85, "x"))
        if shape == "paged128" and lay.get((impl, "padded", threads)):
            out.append(("paged128 / contiguous", impl, threads,
                        bps / lay[(impl, "padded", threads)], 0.90, "x"))
    # 2 threads over 1: 1.8 where the 2-thread roofline is 1.8 times the 1-thread speed or more,
    # else never slower. The paired rows (scaling/: both calls timed in turn, the median of the
    # iterations' ratios) stand in for the ratio of the two decode rows, which ran minutes apart.
    paired, floor_x = {}, {}
    for name, reps in group_runs(doc, "scaling-floor").items():
        _, isa, shape, _ = parse_name(name)
        ok = [b.get("ratio_median") for b in reps if b.get("ratio_median")]
        if ok:
            floor_x[(isa, shape)] = median(ok)
    for name, reps in group_runs(doc, "scaling").items():
        _, impl, shape, threads = parse_name(name)
        ok = [b for b in reps if not b.get("error_occurred") and b.get("ratio_median")]
        if not ok or threads != 2:
            continue
        row = {"kind": "scaling", "impl": impl, "threads": 2}
        b = ok[0]
        roofline(row, b, ctx)
        if row["pct_roof"] and b.get("bytes_per_second_1"):
            room = b["bytes_per_second"] / (row["pct_roof"] / 100.0) / b["bytes_per_second_1"]
            paired[(impl, shape)] = (median([x["ratio_median"] for x in ok]), room)
    for (impl, shape), (ratio, room) in sorted(paired.items()):
        cls = ctx.get(f"sdpa_peak_class/{impl}", impl)
        out.append((f"decode {what(shape)} 2 thr / 1 thr, paired", impl, 2, ratio,
                    1.8 if room >= 1.8 else 1.0, "x", floor_x.get((cls, shape))))
    for (impl, shape), by in speed.items():
        if 1 in by and 2 in by and impl != "scalar" and (impl, shape) not in paired:
            room = (by[2][0] / (by[2][1] / 100.0)) / by[1][0] if by[2][1] else 0
            out.append((f"decode {what(shape)} 2 thr / 1 thr", impl, 2, by[2][0] / by[1][0],
                        1.8 if room >= 1.8 else 1.0, "x"))
    for name, reps in group_runs(doc, "variant").items():
        _, impl, shape, threads = parse_name(name)
        tgt = median([b.get("target") for b in reps])
        if tgt and shape.startswith("prefill"):
            out.append((f"prefill {shape.rsplit('_', 1)[-1]} / plain", impl, threads,
                        median([b.get("ratio_cpu") for b in reps]), tgt, "x"))
    return out


def print_targets(targets):
    if not targets:
        return
    print("\nDecode at the roofline: each target of the run, one row per implementation and thread "
          "count (% roofline as in the main table; x: a ratio of two calls of the run).\n")
    floors = any(len(t) > 6 and t[6] is not None for t in targets)
    print("| row | impl | threads | value | target | |" + (" arithmetic alone |" if floors else ""))
    print("|---|---|---:|---:|---:|---|" + ("---:|" if floors else ""))
    for what, impl, threads, v, t, unit, *rest in targets:
        if v is None:
            continue
        val = f"{v:.1f} %" if unit == "%" else f"{v:.2f}"
        tgt = f">= {t:.0f} %" if unit == "%" else f">= {t:.2f}"
        fl = ""
        if floors:
            fl = " |" if not rest or rest[0] is None else (
                f" {rest[0]:.1f} % |" if unit == "%" else f" {rest[0]:.2f} |")
        print(f"| {what} | {impl} | {threads} | {val} | {tgt} | {'met' if v >= t else '**missed**'} |"
              + fl)


# Bar colours, each a pair: lighter for 1 thread and darker for 2, so that the two bars of an
# implementation read as a pair. The implementations take the hues in the registry's order, as
# the run lists them; its last row, the portable reference, is grey, and a row of no
# implementation (the BLAS baseline) green.
IMPL_COLOURS = [("#9ecae1", "#2171b5"), ("#fdae6b", "#d94801"), ("#bcbddc", "#6a51a3"),
                ("#fa9fb5", "#c51b8a"), ("#fdd0a2", "#a63603"), ("#c7e9c0", "#006d2c")]
REFERENCE_COLOURS = ("#bdbdbd", "#525252")
BASELINE_COLOURS = ("#a1d99b", "#238b45")


def registry_order(ctx):
    """The run's implementations, in the registry's order (best first, the reference last)."""
    return [n.split("(")[0] for n in ctx.get("sdpa_implementations", "").split(",") if n]


def impl_colours(impl, order):
    if impl not in order:
        return BASELINE_COLOURS
    i = order.index(impl)
    return REFERENCE_COLOURS if i == len(order) - 1 else IMPL_COLOURS[i % len(IMPL_COLOURS)]


def stamp_text(ctx):
    """The machine, the commit and the date the chart's run was made on."""
    import os
    import subprocess
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    # the commit the bench was built from (its JSON context); a run from an older bench has
    # none, and then the checkout's commit stands in, said to be the table's
    commit = ctx.get("libsdpa_commit", "")
    if not commit:
        try:
            commit = subprocess.run(["git", "describe", "--always", "--dirty"],
                                    capture_output=True, text=True, check=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
            commit += " (the table's checkout; the run did not record its build)"
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown commit"
    host = f"{cpu or 'unknown CPU'}, {ctx.get('num_cpus', '?')} CPUs"
    return f"{host} | libsdpa {commit} | {ctx.get('date', '')}"


def target_panel(ax, targets, order):
    """One horizontal bar per target row: its value (% roofline, or a ratio as a percentage),
    a black tick at its target, red when missed, and a grey diamond at the row's arithmetic
    alone (the floor rows) where the run measured it."""
    labels, vals, tgts, floors = [], [], [], []
    for what, impl, threads, v, t, unit, *rest in targets:
        k = 1.0 if unit == "%" else 100.0
        labels.append(f"{what} | {impl} | {threads} thr" + ("" if unit == "%" else " (x100)"))
        vals.append(v * k)
        tgts.append(t * k)
        floors.append(rest[0] * k if rest and rest[0] is not None else None)
    ys = list(range(len(labels)))[::-1]
    fl = [(f, y) for f, y in zip(floors, ys) if f is not None]
    if fl:
        ax.scatter([f for f, _ in fl], [y for _, y in fl], marker="D", s=14, color="#636363",
                   zorder=4, label="arithmetic alone")
    colours = [impl_colours(t[1], order)[min(t[2], 2) - 1] for t in targets]
    ax.barh(ys, vals, color=colours, edgecolor=["black" if v >= t else "red" for v, t in
                                               zip(vals, tgts)], linewidth=0.6)
    ax.scatter(tgts, ys, marker="|", s=120, color="black", zorder=3, label="target")
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=6)
    ax.set_xlabel("% of the roofline, or ratio x 100 (tick: the target; red edge: missed; "
                  "diamond: the arithmetic alone)")
    ax.set_title("decode at the roofline: the targets", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")


def write_png(rows, path, ctx=None, targets=None):
    """Per shape and implementation, the % of its limit (prefill: of the FMA peak; decode: of
    its roofline), 1 and 2 threads side by side, with a 100 % line and, with repetitions, the
    spread (min to max) of the repetitions' percentages."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"bench_table.py: matplotlib is not installed (Debian: python3-matplotlib); "
              f"skipping {path}", file=sys.stderr)
        return
    ctx = ctx or {}
    order = registry_order(ctx)
    panels = [("prefill", "pct_peak", "% of the FMA peak"),
              ("decode", "pct_roof", "% of the roofline (read bandwidth or FMA peak)")]
    targets = [t for t in (targets or []) if t[3] is not None]
    if targets:
        fig = plt.figure(figsize=(15, 5.5 + 0.17 * len(targets)))
        grid = fig.add_gridspec(2, 2, height_ratios=[5.5, 0.17 * len(targets) + 0.8])
        axes = [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])]
        target_panel(fig.add_subplot(grid[1, :]), targets, order)
    else:
        fig, axes = plt.subplots(1, len(panels), figsize=(15, 5.5))
    for ax, (kind, key, label) in zip(axes, panels):
        sel = [r for r in rows if (r["kind"] == kind or (kind == "prefill" and r["kind"] == "blas"))
               and r.get(key) is not None]
        shapes = list(dict.fromkeys(r["shape"] for r in sel))
        # series grouped by implementation in the registry's order, 1 thread then 2
        series = sorted(dict.fromkeys((r["impl"], r["threads"]) for r in sel),
                        key=lambda s: (order.index(s[0]) if s[0] in order else len(order), s[1]))
        width = 0.8 / max(1, len(series))
        for si, (impl, threads) in enumerate(series):
            xs, ys, lo, hi = [], [], [], []
            for xi, shape in enumerate(shapes):
                for r in sel:
                    if r["shape"] == shape and (r["impl"], r["threads"]) == (impl, threads):
                        y = r[key]
                        # the spread of the repetitions, scaled like the row (decode: its
                        # roofline percentage is its bandwidth percentage times a factor)
                        base = r.get("pct_peak") if kind != "decode" else r.get("pct_bw")
                        reps = [v * (y / base) for v in r.get("pct_reps", [])] if base else []
                        xs.append(xi + si * width)
                        ys.append(y)
                        lo.append(y - min(reps) if len(reps) > 1 else 0)
                        hi.append(max(reps) - y if len(reps) > 1 else 0)
            pair = impl_colours(impl, order)
            ax.bar(xs, ys, width, label=f"{impl}, {threads} thread{'s' if threads > 1 else ''}",
                   color=pair[min(threads, 2) - 1], edgecolor="black", linewidth=0.3,
                   yerr=[lo, hi] if any(lo) or any(hi) else None, capsize=2,
                   error_kw={"elinewidth": 0.8})
        ax.axhline(100, color="black", linestyle="--", linewidth=1)
        ax.text(len(shapes) - 0.5, 101, "100 %", ha="right", va="bottom", fontsize=8)
        ax.set_ylim(0, 135)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))])
        ax.set_xticklabels([s.replace("_", "\n", 2) for s in shapes], fontsize=7)
        ax.set_ylabel(label)
        ax.set_title(kind)
        ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.suptitle("libsdpa: % of the limits measured in the same run", fontsize=11)
    fig.text(0.5, 0.005, stamp_text(ctx), ha="center", va="bottom", fontsize=8, color="#444444")
    fig.tight_layout(rect=(0, 0.03, 1, 0.96))
    fig.savefig(path, dpi=120)
    print(f"bench_table.py: wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("json", nargs="?",
                    help="sdpa-bench --benchmark_format=json output (default: stdin)")
    ap.add_argument("--png", metavar="FILE", help="also write a bar chart (needs matplotlib)")
    args = ap.parse_args()
    if args.json:
        with open(args.json, encoding="utf-8") as f:
            doc = json.load(f)
    else:
        doc = json.load(sys.stdin)
    rows = [r for r in load_rows(doc) if r["kind"] != "quant"]
    print_context(doc.get("context", {}))
    if rows:
        print_table(rows)
    quant_table(doc)
    targets = target_rows(doc, rows)
    print_targets(targets)
    if args.png:
        write_png(rows, args.png, doc.get("context", {}), targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
