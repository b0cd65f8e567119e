#!/usr/bin/env python3
"""Prints the ratios the performance issue asks about, all from one (merged) benchmark JSON.

  python3 tools/bench_summary.py docs/bench/latest.json [--markdown]

Every figure is computed from entries of the same run (docs/benchmarks.md says how to read them):
  targets   the issue's targets, each with this run's worst figure over N >= 1024 and met / NO
  kernels   softmax d128 GFLOP/s over Eigen GEMM of equal flops, 1 and 2 threads (vs_gemm);
            DIFF's time per useful flop over softmax d128's; DINT / DIFF time per mode;
            2 threads / 1 thread speed-ups; the tiled kernels against the plain reference
  layers    Shared DIFF's factored q/k projection time over DIFF's dense one, per rank r
  model     forward tokens/s, 1 and 2 threads; the model's matrix products' rate over Eigen GEMM
            and their share of the forward time
  decode    tokens/s with the KV cache and by recompute
  memory    peak extra heap of the long-context DINT forward against the 16 MB target
Missing entries (a filtered or quick run) print as "-". Nothing is asserted: the exit code is 0
whatever the figures are.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402


class Table:
    def __init__(self, title, columns, note=""):
        self.title, self.columns, self.note, self.rows = title, columns, note, []

    def add(self, label, values):
        """A row; rows with no figure at all (a filtered or quick run) are left out."""
        if any(v is not None for v in values):
            self.rows.append((label, values))

    def render(self, markdown=False):
        if not self.rows:
            return ""
        cells = [[label] + [("-" if v is None else v) for v in values] for label, values in self.rows]
        header = [""] + [str(c) for c in self.columns]
        lines = []
        if markdown:
            lines.append("**%s**%s" % (self.title, (" " + self.note) if self.note else ""))
            lines.append("")
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "|".join(["---"] + ["---:"] * len(self.columns)) + "|")
            for row in cells:
                lines.append("| " + " | ".join(row) + " |")
        else:
            widths = [max(len(str(r[i])) for r in cells + [header]) for i in range(len(header))]
            lines.append(self.title + (("  (" + self.note + ")") if self.note else ""))
            lines.append("  " + "  ".join(str(h).rjust(w) if i else str(h).ljust(w) for i, (h, w) in enumerate(zip(header, widths))))
            for row in cells:
                lines.append("  " + "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
        return "\n".join(lines) + "\n"


def f2(x):
    return None if x is None else "%.2f" % x


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def best_seconds(r):
    """The fastest single call of a benchmark, in seconds (run_and_report's best_ms), or None."""
    ms = r.get("best_ms") if r is not None else None
    return None if ms is None else ms / 1e3


def kernel_figure(records, family, n, d, mask, threads=1, field="GFLOPs"):
    """One field of bench_kernels' <family>/N/d/mask/threads, or None: "seconds" (mean time),
    "best_seconds" (fastest call) or a counter."""
    r = bench_json.find(records, family, N=n, d=d, mask=mask, threads=threads)
    if r is None:
        return None
    if field == "seconds":
        return r.seconds
    return best_seconds(r) if field == "best_seconds" else r.get(field)


# The two readings of every timing (bench_common.hpp, run_and_report): "typical" from the mean time
# of the benchmark loop, "best" from its fastest call.
READINGS = {"typical": {"seconds": "seconds", "GFLOPs": "GFLOPs", "vs_gemm": "vs_gemm"},
            "best": {"seconds": "best_seconds", "GFLOPs": "GFLOPs_best", "vs_gemm": "vs_gemm_best"}}


def add_target_row(t, label, value_lists, pick, fmt, met):
    """One target's row: for each list of figures (one per reading), the median and the worst
    (pick: min or max, whichever is worse) in `fmt`; then the number of points; then, per reading,
    whether the median / the worst meet it ("yes/NO"; "info" when met is None). Missing figures
    (None) are left out; a row with none at all is not added."""
    cells, verdicts, points = [], [], 0
    for values in value_lists:
        values = [v for v in values if v is not None]
        if not values:
            cells += [None, None]
            verdicts.append("-")
            continue
        points = max(points, len(values))
        mid, bad = statistics.median(values), pick(values)
        cells += [fmt % mid, fmt % bad]
        verdicts.append("%s/%s" % ("yes" if met(mid) else "NO", "yes" if met(bad) else "NO") if met else "info")
    if points:
        t.add(label, cells + [str(points)] + verdicts)


def targets_section(records):
    """Issue 5's targets, each with the median and worst figure of this run over the points it
    covers (N >= 1024 for the kernels) and whether each meets it, in both readings.

    The issue states two targets in GFLOP/s on its own machine (Zen 4, where Eigen SGEMM ran ~100
    GFLOP/s per thread): >= 90 on 1 thread and >= 175 on 2. Their machine-independent reading is
    against the GEMM of the same binary and run: vs_gemm >= 0.90 on 1 thread, and >= 1.75 times the
    1-thread GEMM rate on 2 threads. Both readings are printed; "met" uses the GEMM one.
    """
    big = sorted({r.params["N"] for r in records if r.family in ("softmax", "diff") and r.params.get("N", 0) >= 1024})

    def row(t, label, figures, pick, fmt, met):
        """figures(reading) -> the figure at every point the target covers, in each reading."""
        add_target_row(t, label, [figures(READINGS[reading]) for reading in ("typical", "best")], pick, fmt, met)

    t = Table("Targets (issue 5)", ["typical median", "worst", "best median", "worst", "points",
                                    "met typical", "met best"],
              "over the points each target covers, N >= 1024 (both masks unless named). typical: from each "
              "benchmark's mean time; best: from its fastest call, the reading least disturbed by other "
              "load on a shared machine (docs/benchmarks.md). met: median/worst. Absolute GFLOP/s targets "
              "were set on a Zen 4 whose SGEMM ran ~100 GFLOP/s per thread: they are judged as ratios to this "
              "run's SGEMM")
    if big:
        masks = ("causal", "none")

        def get(family, n, d, mask, threads, field, reading):
            return kernel_figure(records, family, n, d, mask, threads, reading[field])

        row(t, "softmax d128, 1 thr: GFLOP/s (90 on the issue's machine)",
            lambda rd: [get("softmax", n, 128, m, 1, "GFLOPs", rd) for n in big for m in masks], min, "%.1f", None)
        row(t, "softmax d128, 1 thr: vs_gemm >= 0.90",
            lambda rd: [get("softmax", n, 128, m, 1, "vs_gemm", rd) for n in big for m in masks], min, "%.2f",
            lambda v: v >= 0.90)
        row(t, "softmax d128, 2 thr: GFLOP/s (175 on the issue's machine)",
            lambda rd: [get("softmax", n, 128, m, 2, "GFLOPs", rd) for n in big for m in masks], min, "%.1f", None)
        row(t, "softmax d128, 2 thr / 1-thr GEMM rate >= 1.75",
            lambda rd: [ratio(get("softmax", n, 128, m, 2, "GFLOPs", rd), get("gemm", n, 128, m, 1, "GFLOPs", rd))
                        for n in big for m in masks], min, "%.2f", lambda v: v >= 1.75)
        # DIFF at equal useful flops: time per flop = 1 / GFLOP/s.
        row(t, "DIFF time per flop / softmax d128's <= 1.5 (d 64 and 128)",
            lambda rd: [ratio(get("softmax", n, 128, m, 1, "GFLOPs", rd), get("diff", n, d, m, 1, "GFLOPs", rd))
                        for n in big for m in masks for d in (64, 128)], max, "%.2f", lambda v: v <= 1.5)
        for mode, mask, limit in (("causal_mean", "causal", 1.05), ("global_mean", "none", 1.05),
                                  ("causal_softmax", "causal", 2.5)):
            row(t, "DINT %s / DIFF time <= %.2f (%s, d 64 and 128)" % (mode, limit, mask),
                lambda rd, mode=mode, mask=mask: [ratio(get("dint_" + mode, n, d, mask, 1, "seconds", rd),
                                                        get("diff", n, d, mask, 1, "seconds", rd))
                                                  for n in big for d in (64, 128)],
                max, "%.2f", lambda v, limit=limit: v <= limit)
        row(t, "2 threads / 1 thread >= 1.85 (the headline kernels)",
            lambda rd: [ratio(get(family, n, d, mask, 1, "seconds", rd), get(family, n, d, mask, 2, "seconds", rd))
                        for family, d, mask in SCALING_KERNELS for n in big],
            min, "%.2f", lambda v: v >= 1.85)
        row(t, "  (Eigen SGEMM's own: 2 threads / 1 thread)",
            lambda rd: [ratio(get("gemm", n, 128, "causal", 1, "seconds", rd), get("gemm", n, 128, "causal", 2, "seconds", rd))
                        for n in big],
            min, "%.2f", None)
    diff = [r for r in records if r.family == "proj_diff"]

    def factored(rd):
        values = []
        for r in records:
            p = r.params
            if r.family != "proj_shared_diff" or "D" not in p or "H" not in p:
                continue
            if p.get("r", 0) * 2 >= p["D"] // p["H"] // 2:
                continue  # the target concerns r < d/2
            base = bench_json.find(diff, "proj_diff", N=p.get("N"), D=p.get("D"), H=p.get("H"))
            seconds = (lambda x: x.seconds) if rd["seconds"] == "seconds" else best_seconds
            values.append(ratio(seconds(r), seconds(base) if base else None))
        return values

    row(t, "Shared DIFF factored / DIFF projection time < 1 (r < d/2)", factored, max, "%.2f", lambda v: v < 1)
    mem = [r.get("peak_extra_heap_bytes") for r in records if r.family == "memory" and r.params.get("N") == 65536]
    row(t, "DINT forward, N 65536: peak extra MB < 16",
        lambda rd: [m / 1048576.0 for m in mem if m is not None] if rd is READINGS["typical"] else [], max, "%.2f",
        lambda v: v < 16)
    row(t, "model forward products: vs_gemm >= 0.70",
        lambda rd: [r.get(rd["vs_gemm"]) for r in records if r.family == "model_matmuls"], min, "%.2f",
        lambda v: v >= 0.70)
    return [t]


# The kernels whose 2-thread speed-up the ">= 1.85x" concerns.
SCALING_KERNELS = (("softmax", 128, "causal"), ("softmax", 128, "none"), ("diff", 64, "causal"),
                   ("dint_causal_softmax", 64, "causal"), ("dint_causal_mean", 64, "causal"),
                   ("dint_global_mean", 64, "none"))


# Paired benchmarks (bench_kernels' pair/what:<what>/N/d/mask): issue 5's ratio targets, each from
# its two sides timed call for call in alternation. (label, (what, d, mask) points, limit, at least?,
# counters of the pairs and of the best readings)
RATIO = ("ratio", "ratio_best")
VS_GAUGE = ("ratio_vs_gauge", "ratio_vs_gauge_best")
SCALING_PAIRS = tuple(("scaling_" + family, d, mask) for family, d, mask in SCALING_KERNELS)  # the headline kernels'
PAIR_TARGETS = (
    ("softmax d128, 1 thr: vs_gemm >= 0.90", (("gemm_vs_softmax", 128, m) for m in ("causal", "none")), 0.90, True,
     RATIO),
    ("softmax d128, 2 thr / 1-thr GEMM rate >= 1.75",
     (("gemm_vs_softmax_2thr", 128, m) for m in ("causal", "none")), 1.75, True, RATIO),
    ("DIFF time per flop / softmax d128's <= 1.5 (d 64 and 128)",
     (("diff_vs_softmax", d, m) for d in (64, 128) for m in ("causal", "none")), 1.5, False, RATIO),
    ("DINT causal_mean / DIFF time <= 1.05 (causal, d 64 and 128)",
     (("dint_causal_mean_vs_diff", d, "causal") for d in (64, 128)), 1.05, False, RATIO),
    ("DINT global_mean / DIFF time <= 1.05 (none, d 64 and 128)",
     (("dint_global_mean_vs_diff", d, "none") for d in (64, 128)), 1.05, False, RATIO),
    ("DINT causal_softmax / DIFF time <= 2.50 (causal, d 64 and 128)",
     (("dint_causal_softmax_vs_diff", d, "causal") for d in (64, 128)), 2.5, False, RATIO),
    ("2 threads / 1 thread >= 1.85 (the headline kernels)", SCALING_PAIRS, 1.85, True, RATIO),
    ("  (the same over the FMA gauge's in the same rounds)", SCALING_PAIRS, None, True, VS_GAUGE),
    ("  (Eigen SGEMM's own: 2 threads / 1 thread)", (("scaling_gemm", 128, "causal"),), None, True, RATIO),
    ("  (register-only FMA work: 2 threads / 1 thread)", (("scaling_fma", 128, "causal"),), None, True, RATIO),
    ("  (the FMA gauge in the kernels' rounds: 2 threads / 1 thread)", SCALING_PAIRS, None, True,
     ("gauge", "gauge_best")),
)


def pair_sections(records):
    """Issue 5's ratio targets from the paired benchmarks, and the pairs per N."""
    pairs = [r for r in records if r.family == "pair"]
    if not pairs:
        return []
    sizes = sorted({r.params["N"] for r in pairs if "N" in r.params})

    def find(what, n, d, mask):
        return bench_json.find(pairs, "pair", what=what, N=n, d=d, mask=mask)

    t = Table("Targets (issue 5) from paired benchmarks", ["pairs median", "worst", "best median", "worst", "points",
                                                          "met pairs", "met best"],
              "N %s; each point from one benchmark whose two sides alternate call by call, so both meet the "
              "same machine: pairs = the median over its pairs of the per-pair ratio, best = the ratio of the "
              "two sides' fastest calls; median and worst over the points; met: median/worst "
              "(docs/benchmarks.md)" % "-".join(str(n) for n in (sizes[0], sizes[-1])))
    for label, spec, limit, at_least, counters in PAIR_TARGETS:
        spec = list(spec)
        found = [find(w, n, d, m) for w, d, m in spec for n in sizes]
        met = None if limit is None else (lambda v, limit=limit: v >= limit) if at_least else \
            (lambda v, limit=limit: v <= limit)
        add_target_row(t, label, [[r.get(counter) for r in found if r is not None] for counter in counters],
                       min if at_least else max, "%.2f", met)

    per_n = Table("Paired benchmarks", ["N=%d" % n for n in sizes],
                  "median of the per-pair ratios, with the fastest calls' ratio in brackets; what each ratio is: "
                  "docs/benchmarks.md")
    def cells(what, d, mask, counters):
        """One cell per N: the pairs' figure with the fastest calls' in brackets (None where missing)."""
        found = [find(what, n, d, mask) for n in sizes]
        return [None if r is None or r.get(counters[0]) is None else
                "%.2f (%.2f)" % (r.get(counters[0]), r.get(counters[1], float("nan"))) for r in found]

    for what, d, mask in sorted({(r.params.get("what"), r.params.get("d"), r.params.get("mask")) for r in pairs}):
        per_n.add("%s d%s %s" % (what, d, mask), cells(what, d, mask, RATIO))
        over_gauge = cells(what, d, mask, VS_GAUGE)  # pairs that carried the FMA gauge in every round
        if any(over_gauge):
            per_n.add("    over the FMA gauge", over_gauge)
    return [t, per_n]


def kernel_sections(records):
    """Per-N tables of the kernels. Each row is in the best reading (fastest calls), with the typical
    reading (mean times) on the line under it."""
    tables = []
    kernel_n = sorted({r.params["N"] for r in records
                       if r.family in ("softmax", "diff", "gemm") and "N" in r.params})
    if not kernel_n:
        return tables

    def get(family, n, d, mask, threads, field, rd):
        return kernel_figure(records, family, n, d, mask, threads, rd[field])

    def add(t, label, cells):
        """cells(rd) -> one cell per N. Files without best_ms (older runs): the typical row only."""
        best = cells(READINGS["best"])
        if any(v is not None for v in best):
            t.add(label, best)
            t.add("    typical", cells(READINGS["typical"]))
        else:
            t.add(label + " (typical)", cells(READINGS["typical"]))

    cols = ["N=%d" % n for n in kernel_n]
    note = "; each row from the fastest calls, with the mean times' figure under it"

    t = Table("softmax vs Eigen GEMM (vs_gemm)", cols,
              "GFLOP/s over a square Eigen SGEMM of equal flops on the same threads; useful flops QK^T + PV, "
              "causal counted half; the issue's target concerns N >= 1024" + note)
    for mask in ("causal", "none"):
        for threads in (1, 2):
            add(t, "softmax d128 %s, %d thr" % (mask, threads),
                lambda rd: [f2(get("softmax", n, 128, mask, threads, "vs_gemm", rd)) for n in kernel_n])
    for mask in ("causal", "none"):
        add(t, "softmax d64 %s, 1 thr" % mask,
            lambda rd: [f2(get("softmax", n, 64, mask, 1, "vs_gemm", rd)) for n in kernel_n])

    def rate(g):
        return "%.1f" % g if g else None
    for mask in ("causal", "none"):
        add(t, "softmax d128 %s GFLOP/s, 1 thr" % mask,
            lambda rd: [rate(get("softmax", n, 128, mask, 1, "GFLOPs", rd)) for n in kernel_n])
        add(t, "GEMM GFLOP/s, 1 thr", lambda rd: [rate(get("gemm", n, 128, mask, 1, "GFLOPs", rd)) for n in kernel_n])
    tables.append(t)

    t = Table("DIFF time per useful flop / softmax d128's", cols,
              "= softmax d128 GFLOP/s / DIFF GFLOP/s, same N and mask; > 1: DIFF slower per flop. "
              "DIFF d = 64 is the head a softmax d = 128 model of equal width has" + note)
    for d in (64, 128):
        for mask in ("causal", "none"):
            add(t, "DIFF d%d / softmax d128, %s" % (d, mask),
                lambda rd: [f2(ratio(get("softmax", n, 128, mask, 1, "GFLOPs", rd), get("diff", n, d, mask, 1, "GFLOPs", rd)))
                            for n in kernel_n])
    tables.append(t)

    t = Table("DINT time / DIFF time", cols, "same N, d, mask, 1 thread; > 1: DINT slower" + note)
    for d in (64, 128):
        for mode, mask in (("causal_mean", "causal"), ("global_mean", "none"), ("causal_softmax", "causal"),
                           ("causal_mean", "none"), ("causal_softmax", "none")):
            add(t, "DINT %s / DIFF, d%d %s" % (mode, d, mask),
                lambda rd: [f2(ratio(get("dint_" + mode, n, d, mask, 1, "seconds", rd), get("diff", n, d, mask, 1, "seconds", rd)))
                            for n in kernel_n])
    tables.append(t)

    t = Table("2 threads vs 1 thread", cols, "time(1 thread) / time(2 threads); ideal 2.00" + note)
    for family, d, mask in SCALING_KERNELS + (("gemm", 128, "causal"),):
        add(t, "%s d%d %s" % (family, d, mask),
            lambda rd: [f2(ratio(get(family, n, d, mask, 1, "seconds", rd), get(family, n, d, mask, 2, "seconds", rd)))
                        for n in kernel_n])
    tables.append(t)

    t = Table("tiled kernel vs plain reference", cols,
              "time(reference) / time(kernel), 1 thread; reference only where its N x N maps fit" + note)
    for family in ("softmax", "diff", "dint_causal_softmax"):
        for d in (64, 128):
            add(t, "%s d%d causal" % (family, d),
                lambda rd: [f2(ratio(get("reference_" + family, n, d, "causal", 1, "seconds", rd),
                                     get(family, n, d, "causal", 1, "seconds", rd))) for n in kernel_n])
    tables.append(t)
    return tables


def projection_section(records):
    diff = [r for r in records if r.family == "proj_diff"]
    shared = sorted((r for r in records if r.family == "proj_shared_diff"), key=lambda r: r.params.get("r", 0))
    if not diff and not shared:
        return []
    t = Table("Shared DIFF factored q/k projection vs DIFF's dense one", ["r", "d/2", "time ratio", "best", "ms", "DIFF ms"],
              "time(Shared DIFF, factored) / time(DIFF, X Wq^T and X Wk^T); < 1: factored faster")
    for r in shared:
        p = r.params
        base = bench_json.find(diff, "proj_diff", N=p.get("N"), D=p.get("D"), H=p.get("H"))
        d = p["D"] // p["H"] // 2 if "D" in p and "H" in p else None
        t.add("N %s, D %s, H %s" % (p.get("N"), p.get("D"), p.get("H")),
              [str(p.get("r")), str(d // 2) if d else None, f2(ratio(r.seconds, base.seconds if base else None)),
               f2(ratio(best_seconds(r), best_seconds(base))),
               "%.2f" % (r.seconds * 1e3), "%.2f" % (base.seconds * 1e3) if base else None])
    return [t]


def model_section(records):
    tables = []
    fwd = [r for r in records if r.family == "model_forward"]
    if fwd:
        keys = sorted({(r.params["config"], r.params["kind"], r.params["N"]) for r in fwd},
                      key=lambda k: (k[0] != "small", k[2], k[1]))
        t = Table("Model forward", ["tok/s 1 thr", "tok/s 2 thr", "2thr/1thr", "best", "GFLOP/s", "vs_gemm",
                                    "matmuls vs_gemm", "best", "matmul share"],
                  "matmuls: every product of one forward run alone through the same library calls "
                  "(the model has no timing hook); share = their time / the forward's time, 1 thread; "
                  "best: the same ratio from the fastest calls")
        for config, kind, n in keys:
            one = bench_json.find(fwd, "model_forward", config=config, kind=kind, N=n, threads=1)
            two = bench_json.find(fwd, "model_forward", config=config, kind=kind, N=n, threads=2)
            mm = bench_json.find(records, "model_matmuls", config=config, kind=kind, N=n, threads=1)
            t1 = one.get("tokens/s") if one else None
            t2 = two.get("tokens/s") if two else None
            t.add("%s %s N %d" % (config, kind, n),
                  ["%.0f" % t1 if t1 else None, "%.0f" % t2 if t2 else None, f2(ratio(t2, t1)),
                   f2(ratio(best_seconds(one), best_seconds(two))),
                   "%.1f" % one.get("GFLOPs") if one else None, f2(one.get("vs_gemm")) if one else None,
                   f2(mm.get("vs_gemm")) if mm else None, f2(mm.get("vs_gemm_best")) if mm else None,
                   "%.0f%%" % (100 * mm.seconds / one.seconds) if mm and one else None])
        tables.append(t)
    layers = [r for r in records if r.family in ("attention", "layer")]
    if layers:
        keys = sorted({(r.family, r.params["config"], r.params["kind"], r.params["N"]) for r in layers},
                      key=lambda k: (k[0], k[1] != "small", k[3], k[2]))
        t = Table("Attention module / decoder layer", ["tok/s 1 thr", "tok/s 2 thr", "2thr/1thr", "best", "GFLOP/s 1 thr"])
        for family, config, kind, n in keys:
            one = bench_json.find(layers, family, config=config, kind=kind, N=n, threads=1)
            two = bench_json.find(layers, family, config=config, kind=kind, N=n, threads=2)
            t1 = one.get("tokens/s") if one else None
            t2 = two.get("tokens/s") if two else None
            t.add("%s %s %s N %d" % (family, config, kind, n),
                  ["%.0f" % t1 if t1 else None, "%.0f" % t2 if t2 else None, f2(ratio(t2, t1)),
                   f2(ratio(best_seconds(one), best_seconds(two))), "%.1f" % one.get("GFLOPs") if one else None])
        tables.append(t)
    return tables


def decode_section(records):
    dec = [r for r in records if r.family in ("decode_cached", "decode_recompute")]
    if not dec:
        return []
    keys = sorted({(r.params["kind"], r.params["context"], r.params["threads"]) for r in dec})
    t = Table("Decode (small model)", ["cached tok/s", "recompute tok/s", "cache speed-up"])
    for kind, context, threads in keys:
        c = bench_json.find(dec, "decode_cached", kind=kind, context=context, threads=threads)
        r = bench_json.find(dec, "decode_recompute", kind=kind, context=context, threads=threads)
        tc = c.get("tokens/s") if c else None
        tr = r.get("tokens/s") if r else None
        t.add("%s context %d, %d thr" % (kind, context, threads),
              ["%.1f" % tc if tc else None, "%.2f" % tr if tr else None, "%.0fx" % ratio(tc, tr) if tc and tr else None])
    return [t]


def memory_section(records):
    mem = [r for r in records if r.family == "memory"]
    if not mem:
        return []
    mb = 1024.0 * 1024.0
    t = Table("Peak extra memory, one-head DINT forward", ["N", "d", "peak extra heap", "maxrss delta", "target", "s"],
              "beyond inputs and outputs; the target (< 16 MB) is stated for N = 65536")
    for r in mem:
        p = r.params
        name = r.name.split("/")[1] if "/" in r.name else r.name
        peak = r.get("peak_extra_heap_bytes")
        t.add("%s (%s, %s thr)" % (name, p.get("mask"), p.get("threads")),
              [str(p.get("N")), str(p.get("d")), "%.3f MB" % (peak / mb) if peak is not None else None,
               "%.3f MB" % (r.get("maxrss_delta_bytes", 0) / mb),
               ("< %.0f MB: %s" % (r.get("limit_bytes", 0) / mb, "yes" if r.get("within_limit") else "NO")),
               "%.2f" % r.seconds if r.seconds is not None else None])
    return [t]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="benchmark JSON file(s), e.g. docs/bench/latest.json")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    args = parser.parse_args(argv)
    records = bench_json.load(args.inputs)
    if not records:
        print("bench_summary: no benchmark entries in %s" % ", ".join(args.inputs))
        return 0
    ctx = bench_json.context(args.inputs[0])
    head = "diffattn benchmark summary: %s, %s CPUs, %s run" % (
        str(ctx.get("date", "?"))[:19], ctx.get("num_cpus", "?"), ctx.get("diffattn_mode", "?"))
    if ctx.get("load_avg"):
        head += ", load avg %s" % ", ".join("%.1f" % x for x in ctx["load_avg"])
    print(head)
    print()
    for table in (targets_section(records) + pair_sections(records) + kernel_sections(records) + projection_section(records) + model_section(records)
                  + decode_section(records) + memory_section(records)):
        text = table.render(args.markdown)
        if text:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
