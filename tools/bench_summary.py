#!/usr/bin/env python3
"""The project's standing performance goals, judged from one (merged) benchmark JSON.

  python3 tools/bench_summary.py docs/bench/latest.json.xz [--markdown]

The goals (docs/benchmarks.md says how each figure is measured):
  - softmax d128's rate over Eigen SGEMM of equal flops: >= 0.90 on 1 thread; on 2 threads
    >= 1.75 x the 1-thread SGEMM rate
  - DIFF's time per useful flop over softmax d128's: <= 1.5
  - DINT over DIFF, time: causal_mean <= 1.05, global_mean <= 1.05, causal_softmax <= 2.5
  - the headline kernels' 2-thread speed-up over the FMA gauge's in the same rounds: >= 0.925
    (1.85x on a machine whose second core gives 2x)
  - decode tokens/s with the KV cache and its share of the memory roofline (reported, no limit);
    with an f32 and an f16 cache in turns (decode_paired), the shares and the f16 cache's speed-up
  - peak extra heap of the long-context DINT forward: < 16 MB
Each goal in three readings where the run has them: "typical" (each benchmark's mean time),
"best" (its fastest call) and "pairs" (bench_kernels' pair/... benchmarks, whose two sides
alternate call by call: the steadiest reading on a shared machine, and the one a goal is judged
by when the run has it, else best). Figures are "median (worst)" over the points: N >= 1024 for
the kernels, N 1024-4096 for the pairs. Then the goals per N, the pairs per N, decode, memory and
a few figures with no goal. Missing entries (a filtered or quick run) print as "-"; nothing is
asserted. Comparing two runs is Google Benchmark's compare.py's job (scripts/bench.sh --compare).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

READINGS = ("typical", "best")
MASKS = ("causal", "none")


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
        if markdown:
            lines = ["**%s**%s" % (self.title, (" (" + self.note + ")") if self.note else ""), "",
                     "| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * len(self.columns)) + "|"]
            lines += ["| " + " | ".join(row) + " |" for row in cells]
        else:
            widths = [max(len(str(r[i])) for r in cells + [header]) for i in range(len(header))]
            lines = [self.title + (("  (" + self.note + ")") if self.note else "")]
            lines += ["  " + "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                      for row in [header] + cells]
        return "\n".join(lines) + "\n"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def figure(r, what, reading):
    """One figure of a record in a reading: "seconds" (the mean time per call, or the fastest
    call's), or a counter (GFLOPs, vs_gemm: the best reading has it as <counter>_best)."""
    if r is None:
        return None
    if what == "seconds":
        if reading == "typical":
            return r.seconds
        return None if r.get("best_ms") is None else r.get("best_ms") / 1e3
    return r.get(what if reading == "typical" else what + "_best")


def kernel(records, family, n, d, mask, threads, what, reading):
    return figure(bench_json.find(records, family, N=n, d=d, mask=mask, threads=threads), what, reading)


# The kernels whose 2-thread speed-up the scaling goal concerns, and their pairs.
SCALING_KERNELS = (("softmax", 128, "causal"), ("softmax", 128, "none"), ("diff", 64, "causal"),
                   ("dint_causal_softmax", 64, "causal"), ("dint_causal_mean", 64, "causal"),
                   ("dint_global_mean", 64, "none"))
SCALING_PAIRS = tuple(("scaling_" + family, d, mask) for family, d, mask in SCALING_KERNELS)
RATIO, VS_GAUGE, GAUGE = ("ratio", "ratio_best"), ("ratio_vs_gauge", "ratio_vs_gauge_best"), ("gauge", "gauge_best")


def speedup(family, d, mask):
    return lambda R, n, rd: ratio(kernel(R, family, n, d, mask, 1, "seconds", rd), kernel(R, family, n, d, mask, 2, "seconds", rd))


class Goal:
    """A goal: `limit` (None: reported only) that the figure must reach (`at_least`) or stay under.
    rows: (label, f(records, N, reading)) per kernel configuration, the separate benchmarks'
    figure at one N; pairs: the (what, d, mask) of its paired benchmarks and the two counters
    (pairs' median, fastest calls') they report it in."""

    def __init__(self, label, limit, at_least, rows=(), pairs=(), counters=RATIO):
        self.label, self.limit, self.at_least = label, limit, at_least
        self.rows, self.pairs, self.counters = list(rows), list(pairs), counters

    def met(self, v):
        return v >= self.limit if self.at_least else v <= self.limit

    def worst(self, values):
        return min(values) if self.at_least else max(values)


def dint_goal(mode, mask, limit):
    def row(d):
        return lambda R, n, rd: ratio(kernel(R, "dint_" + mode, n, d, mask, 1, "seconds", rd),
                                      kernel(R, "diff", n, d, mask, 1, "seconds", rd))
    return Goal("DINT %s / DIFF, time (%s)" % (mode, mask), limit, False,
                [("d%d %s" % (d, mask), row(d)) for d in (64, 128)],
                [("dint_%s_vs_diff" % mode, d, mask) for d in (64, 128)])


GOALS = [
    Goal("softmax d128 / Eigen SGEMM, 1 thread", 0.90, True,
         [("%s" % m, lambda R, n, rd, m=m: kernel(R, "softmax", n, 128, m, 1, "vs_gemm", rd)) for m in MASKS],
         [("gemm_vs_softmax", 128, m) for m in MASKS]),
    Goal("softmax d128 on 2 threads / 1-thread SGEMM", 1.75, True,
         [("%s" % m, lambda R, n, rd, m=m: ratio(kernel(R, "softmax", n, 128, m, 2, "GFLOPs", rd),
                                                 kernel(R, "gemm", n, 128, m, 1, "GFLOPs", rd))) for m in MASKS],
         [("gemm_vs_softmax_2thr", 128, m) for m in MASKS]),
    Goal("DIFF / softmax d128, time per useful flop", 1.5, False,
         [("DIFF d%d %s" % (d, m), lambda R, n, rd, d=d, m=m: ratio(kernel(R, "softmax", n, 128, m, 1, "GFLOPs", rd),
                                                                    kernel(R, "diff", n, d, m, 1, "GFLOPs", rd)))
          for d in (64, 128) for m in MASKS],
         [("diff_vs_softmax", d, m) for d in (64, 128) for m in MASKS]),
    dint_goal("causal_mean", "causal", 1.05),
    dint_goal("global_mean", "none", 1.05),
    dint_goal("causal_softmax", "causal", 2.5),
    Goal("2-thread speed-up / the FMA gauge's", 0.925, True, pairs=SCALING_PAIRS, counters=VS_GAUGE),
    Goal("  2-thread speed-up, headline kernels", None, True,
         [("%s d%d %s" % k, speedup(*k)) for k in SCALING_KERNELS], SCALING_PAIRS),
    Goal("  the FMA gauge's, in the same rounds", None, True, pairs=SCALING_PAIRS, counters=GAUGE),
    Goal("  Eigen SGEMM's", None, True, [("gemm d128 causal", speedup("gemm", 128, "causal"))],
         [("scaling_gemm", 128, "causal")]),
]


def median_worst(goal, values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.median(values), goal.worst(values)


def goals_table(records):
    big = sorted({r.params["N"] for r in records if r.family in ("softmax", "diff") and r.params.get("N", 0) >= 1024})
    pairs = [r for r in records if r.family == "pair"]
    pair_n = sorted({r.params["N"] for r in pairs if "N" in r.params})
    t = Table("Standing goals", ["goal", "typical", "best", "pairs", "points", "met"],
              "median (worst) over the points: kernels N >= 1024, pairs N %s; met: median/worst in the reading "
              "named, the pairs where the run has them, else the fastest calls"
              % ("-".join(str(n) for n in (pair_n[0], pair_n[-1])) if pair_n else "-"))
    for goal in GOALS:
        readings = {rd: median_worst(goal, [f(records, n, rd) for _, f in goal.rows for n in big]) for rd in READINGS}
        found = [bench_json.find(pairs, "pair", what=w, N=n, d=d, mask=m) for w, d, m in goal.pairs for n in pair_n]
        found = [r for r in found if r is not None]
        readings["pairs"] = median_worst(goal, [r.get(goal.counters[0]) for r in found])
        points = "%d/%d" % (sum(1 for _, f in goal.rows for n in big if f(records, n, "typical") is not None), len(found))
        judged = next((rd for rd in ("pairs", "best", "typical") if readings[rd][0] is not None), None)
        met = "info"
        if goal.limit is not None and judged:
            mid, bad = readings[judged]
            met = "%s/%s (%s)" % ("yes" if goal.met(mid) else "NO", "yes" if goal.met(bad) else "NO", judged)
        limit = "info" if goal.limit is None else "%s %.3g" % (">=" if goal.at_least else "<=", goal.limit)
        cells = [None if mid is None else "%.2f (%.2f)" % (mid, bad) for mid, bad in
                 (readings["typical"], readings["best"], readings["pairs"])]
        if any(cells):
            t.add(goal.label, [limit] + cells + [points, met])
    for label, value, fmt, limit in decode_goal_rows(records) + memory_goal_rows(records):
        met = "info" if limit is None else "%s (typical)" % ("yes" if value < limit else "NO")
        t.add(label, ["info" if limit is None else "< %g" % limit, fmt % value, None, None, "1/0", met])
    return t


def decode_goal_rows(records):
    """Decode tokens/s with the cache at the longest context of the run, per kind and threads."""
    cached = [r for r in records if r.family == "decode_cached"]
    if not cached:
        return []
    longest = max(r.params.get("context", 0) for r in cached)
    rows = []
    for kind in sorted({r.params.get("kind") for r in cached}):
        for threads in (1, 2):
            r = bench_json.find(cached, "decode_cached", kind=kind, context=longest, threads=threads)
            if r is not None and r.get("tokens/s") is not None:
                rows.append(("decode %s tok/s, context %d, %d thr" % (kind, longest, threads), r.get("tokens/s"),
                             "%.1f", None))
            if r is not None and r.get("roofline_share") is not None:  # target >= 0.85 (issue 20), reported
                rows.append(("decode %s share of the memory roofline, context %d, %d thr" % (kind, longest, threads),
                             r.get("roofline_share"), "%.2f", None))
    return rows


def memory_goal_rows(records):
    """Peak extra heap of the long-context DINT forward, MB, per mode."""
    return [("DINT %s forward N %s: peak extra MB" % (r.name.split("/")[1].replace("dint_", ""), r.params.get("N")),
             r.get("peak_extra_heap_bytes") / 1048576.0, "%.2f", 16)
            for r in records if r.family == "memory" and r.get("peak_extra_heap_bytes") is not None and "/" in r.name]


def goals_per_n(records):
    sizes = sorted({r.params["N"] for r in records if r.family in ("softmax", "diff", "gemm") and "N" in r.params})
    t = Table("The goals per N", ["N=%d" % n for n in sizes],
              "separate benchmarks: the fastest calls' figure, with the mean times' in brackets")
    for goal in GOALS:
        for label, f in goal.rows:
            cells = []
            for n in sizes:
                best, typical = f(records, n, "best"), f(records, n, "typical")
                cells.append(None if typical is None else "%.2f" % typical if best is None else "%.2f (%.2f)" % (best, typical))
            t.add("%s: %s" % (goal.label.strip(), label), cells)
    return t


def pairs_per_n(records):
    pairs = [r for r in records if r.family == "pair"]
    sizes = sorted({r.params["N"] for r in pairs if "N" in r.params})
    t = Table("Paired benchmarks", ["N=%d" % n for n in sizes],
              "median of the per-pair ratios, with the fastest calls' ratio in brackets; what each pair is: "
              "docs/benchmarks.md")

    def cells(what, d, mask, counters):
        found = [bench_json.find(pairs, "pair", what=what, N=n, d=d, mask=mask) for n in sizes]
        return [None if r is None or r.get(counters[0]) is None else
                "%.2f (%.2f)" % (r.get(counters[0]), r.get(counters[1], float("nan"))) for r in found]

    for what, d, mask in sorted({(r.params.get("what"), r.params.get("d"), r.params.get("mask")) for r in pairs}):
        t.add("%s d%s %s" % (what, d, mask), cells(what, d, mask, RATIO))
        t.add("    over the FMA gauge", cells(what, d, mask, VS_GAUGE))  # the pairs that carried it
    return t


def decode_table(records):
    dec = [r for r in records if r.family in ("decode_cached", "decode_recompute")]
    t = Table("Decode (small model)", ["cached tok/s", "roofline share", "recompute tok/s", "cache speed-up"])
    for kind, context, threads in sorted({(r.params["kind"], r.params["context"], r.params["threads"]) for r in dec}):
        c = bench_json.find(dec, "decode_cached", kind=kind, context=context, threads=threads)
        r = bench_json.find(dec, "decode_recompute", kind=kind, context=context, threads=threads)
        tc, tr = (x.get("tokens/s") if x else None for x in (c, r))
        share = c.get("roofline_share") if c else None
        t.add("%s context %d, %d thr" % (kind, context, threads),
              ["%.1f" % tc if tc else None, "%.2f" % share if share else None, "%.2f" % tr if tr else None,
               "%.0fx" % (tc / tr) if tc and tr else None])
    return t


def paired_decode_table(records):
    """bench_decode's decode_paired: an f32 and an f16 cache decoding in turns (issue 20's f16 target)."""
    paired = [r for r in records if r.family == "decode_paired"]
    t = Table("Decode, f32 and f16 caches in turns (small model)",
              ["f32 share", "f16 share", "f16 / f32 tok/s", "bound", "f32 tok/s", "f16 tok/s"],
              "medians over the steps; bound: the f32 step's bytes over the f16 step's")
    for r in sorted(paired, key=lambda r: (r.params["kind"], r.params["context"], r.params["threads"])):
        figures = [("f32_share", "%.2f"), ("f16_share", "%.2f"), ("f16_over_f32", "%.2f"),
                   ("f16_over_f32_bound", "%.2f"), ("f32_tokens/s", "%.1f"), ("f16_tokens/s", "%.1f")]
        t.add("%s context %d, %d thr" % (r.params["kind"], r.params["context"], r.params["threads"]),
              [None if r.get(name) is None else fmt % r.get(name) for name, fmt in figures])
    return t


def memory_table(records):
    mb = 1048576.0
    t = Table("Peak extra memory, one-head DINT forward", ["N", "d", "peak extra heap", "maxrss delta", "limit", "s"],
              "beyond inputs and outputs; the goal (< 16 MB) is stated for N = 65536")
    for r in (r for r in records if r.family == "memory"):
        p, peak = r.params, r.get("peak_extra_heap_bytes")
        t.add("%s (%s, %s thr)" % (r.name.split("/")[1] if "/" in r.name else r.name, p.get("mask"), p.get("threads")),
              [str(p.get("N")), str(p.get("d")), None if peak is None else "%.3f MB" % (peak / mb),
               "%.3f MB" % (r.get("maxrss_delta_bytes", 0) / mb),
               "< %.0f MB: %s" % (r.get("limit_bytes", 0) / mb, "yes" if r.get("within_limit") else "NO"),
               None if r.seconds is None else "%.2f" % r.seconds])
    return t


def other_table(records):
    """Figures the README quotes that no standing goal covers."""
    t = Table("Also measured (no standing goal)", ["typical", "best"])
    fwd = [r for r in records if r.family == "model_forward"]
    for config, kind, n in sorted({(r.params["config"], r.params["kind"], r.params["N"]) for r in fwd}):
        one = bench_json.find(fwd, "model_forward", config=config, kind=kind, N=n, threads=1)
        two = bench_json.find(fwd, "model_forward", config=config, kind=kind, N=n, threads=2)
        mm = bench_json.find(records, "model_matmuls", config=config, kind=kind, N=n, threads=1)
        fmt = lambda v: None if v is None else "%.2f" % v  # noqa: E731
        t.add("model %s %s N %d: products / SGEMM" % (config, kind, n), [fmt(figure(mm, "vs_gemm", rd)) for rd in READINGS])
        t.add("model %s %s N %d: 2-thread speed-up" % (config, kind, n),
              [fmt(ratio(figure(one, "seconds", rd), figure(two, "seconds", rd))) for rd in READINGS])
    dense = [r for r in records if r.family == "proj_diff"]
    for r in sorted((r for r in records if r.family == "proj_shared_diff"), key=lambda r: r.params.get("r", 0)):
        p = r.params
        base = bench_json.find(dense, "proj_diff", N=p.get("N"), D=p.get("D"), H=p.get("H"))
        t.add("Shared DIFF factored / dense q,k projection, N %s D %s H %s r %s" % (p.get("N"), p.get("D"), p.get("H"), p.get("r")),
              ["%.2f" % v if v else None for v in (ratio(figure(r, "seconds", rd), figure(base, "seconds", rd)) for rd in READINGS)])
    return t


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="benchmark JSON file(s), plain or .xz, e.g. docs/bench/latest.json.xz")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    args = parser.parse_args(argv)
    records = bench_json.load(args.inputs)
    if not records:
        print("bench_summary: no benchmark entries in %s" % ", ".join(args.inputs))
        return 0
    ctx = bench_json.context(args.inputs[0])
    head = "diffattn benchmark goals: %s, %s CPUs, %s run" % (
        str(ctx.get("date", "?"))[:19], ctx.get("num_cpus", "?"), ctx.get("diffattn_mode", "?"))
    if ctx.get("load_avg"):
        head += ", load avg %s" % ", ".join("%.1f" % x for x in ctx["load_avg"])
    print(head)
    print()
    for table in (goals_table(records), goals_per_n(records), pairs_per_n(records), decode_table(records),
                  paired_decode_table(records), memory_table(records), other_table(records)):
        text = table.render(args.markdown)
        if text:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
