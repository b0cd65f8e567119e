#!/usr/bin/env python3
"""Draws GFLOP/s against N for each kernel, next to the Eigen GEMM line, as an SVG (matplotlib).

  /usr/bin/python3 tools/bench_chart.py docs/bench/latest.json.xz -o docs/bench/kernels.svg

Input: the JSON of bench_kernels (or a merged file, tools/bench_json.py; plain or .xz). One panel
per head dim (rows: d 64, d 128) and mask (columns: causal, none); x: N on a log2 axis, y: GFLOP/s
(the GFLOPs_best counter, the fastest call, where the run has it, else GFLOPs, the loop's mean;
useful flops, causal counted half, see docs/benchmarks.md), one y scale for all panels. Solid
lines: 1 thread; dashed: 2 threads (for the families that have them); dotted, pale: the plain
reference. The black line is Eigen SGEMM of equal flops. Needs Debian's python3-matplotlib
(scripts/install-deps.sh --bench).
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

# Text stays text (a smaller file whose labels can be searched), and element ids come from a fixed
# salt, so the same data gives the same file.
plt.rcParams["svg.fonttype"] = "none"
plt.rcParams["svg.hashsalt"] = "diffattn"

# family -> (label, colour); order = legend order
SERIES = [
    ("gemm", "Eigen GEMM (equal flops)", "#000000"),
    ("softmax", "softmax", "#1f77b4"),
    ("diff", "DIFF", "#d62728"),
    ("dint_causal_softmax", "DINT causal_softmax", "#2ca02c"),
    ("dint_causal_mean", "DINT causal_mean", "#9467bd"),
    ("dint_global_mean", "DINT global_mean", "#ff7f0e"),
    ("reference_softmax", "reference softmax", "#7fb3d9"),
    ("reference_diff", "reference DIFF", "#eb9293"),
    ("reference_dint_causal_softmax", "reference DINT causal_softmax", "#95d095"),
]


def fmt_n(n):
    return "%dk" % (n // 1024) if n >= 1024 and n % 1024 == 0 else str(n)


def collect(records):
    """{(d, mask): {(family, threads): [(N, GFLOP/s), ...]}}, and the counter the rates came from:
    GFLOPs_best (the fastest call) when every record has it, else GFLOPs (the loop's mean)."""
    families = {s[0] for s in SERIES}
    counter = "GFLOPs_best" if all(r.get("GFLOPs_best") is not None for r in records if r.get("GFLOPs") is not None) \
        else "GFLOPs"
    panels = {}
    for r in records:
        p = r.params
        if r.family not in families or not all(k in p for k in ("N", "d", "mask", "threads")):
            continue
        g = r.get(counter)
        if g is not None:
            panels.setdefault((p["d"], p["mask"]), {}).setdefault((r.family, p["threads"]), {})[p["N"]] = float(g)
    return {k: {s: sorted(v.items()) for s, v in d.items()} for k, d in panels.items()}, counter


def subtitle(ctx, counter, extra):
    parts = []
    if ctx.get("date"):
        parts.append(str(ctx["date"])[:16].replace("T", " "))
    if ctx.get("num_cpus"):
        parts.append("%s CPUs at %s MHz" % (ctx["num_cpus"], ctx.get("mhz_per_cpu", "?")))
    if ctx.get("diffattn_mode"):
        parts.append("%s run" % ctx["diffattn_mode"])
    if ctx.get("load_avg"):
        parts.append("load avg %s" % ", ".join("%.1f" % x for x in ctx["load_avg"]))
    parts.append("fastest call of each benchmark" if counter == "GFLOPs_best" else "mean over each benchmark's loop")
    if extra:
        parts.append(extra)
    return "; ".join(parts)


def style(family, threads):
    """Line style of one series: (linestyle, linewidth)."""
    if family.startswith("reference_"):
        return ":", 1.4
    return ("--" if threads > 1 else "-"), (2.4 if family == "gemm" else 1.6)


def render(records, ctx, out_path, extra=""):
    panels, counter = collect(records)
    if not panels:
        raise SystemExit("bench_chart: no kernel benchmarks (family/N:/d:/mask:/threads:) with a GFLOPs counter")
    dims = sorted({k[0] for k in panels})
    masks = [m for m in ("causal", "none") if any(k[1] == m for k in panels)]
    all_n = sorted({n for s in panels.values() for pts in s.values() for n, _ in pts})

    fig, axes = plt.subplots(len(dims), len(masks), figsize=(4.6 * len(masks) + 3.2, 3.3 * len(dims) + 0.9),
                             sharex=True, sharey=True, squeeze=False)
    lines = {}  # (SERIES index, threads) -> (legend text, a line), for a legend in SERIES order
    for row, d in enumerate(dims):
        for col, mask in enumerate(masks):
            ax = axes[row][col]
            series = panels.get((d, mask), {})
            for index, (family, label, colour) in enumerate(SERIES):
                for threads in sorted(t for f, t in series if f == family):
                    pts = series[(family, threads)]
                    linestyle, width = style(family, threads)
                    text = label if family.startswith("reference_") else \
                        "%s, %d thread%s" % (label, threads, "s" if threads > 1 else "")
                    (line,) = ax.plot([n for n, _ in pts], [g for _, g in pts], linestyle=linestyle, linewidth=width,
                                      color=colour, marker="o", markersize=3, label=text)
                    lines.setdefault((index, threads), (text, line))
            ax.set_xscale("log", base=2)
            ax.set_xticks(all_n)
            ax.set_xticklabels([fmt_n(n) for n in all_n])
            ax.minorticks_off()
            ax.grid(True, color="#e3e3e3", linewidth=0.8)
            ax.set_title("d %d, mask %s" % (d, mask), fontsize=10, loc="left", fontweight="bold")
            if row == len(dims) - 1:
                ax.set_xlabel("N (tokens)")
            if col == 0:
                ax.set_ylabel("GFLOP/s")
    ymax = max(g for s in panels.values() for pts in s.values() for _, g in pts)
    axes[0][0].set_ylim(0, ymax * 1.05)  # shared by every panel
    fig.suptitle("diffattn single-head kernels: GFLOP/s against N (float, S = N)", x=0.01, ha="left",
                 fontweight="bold")
    fig.text(0.01, 1 - 0.42 / fig.get_figheight(), subtitle(ctx, counter, extra), fontsize=8, color="#444")
    legend = [lines[k] for k in sorted(lines)]
    fig.legend([line for _, line in legend], [text for text, _ in legend], loc="upper left", alignment="left",
               bbox_to_anchor=(1 - 3.1 / fig.get_figwidth(), 0.9), fontsize=8, frameon=False, title_fontsize=7,
               title="Useful flops: QK^T + PV per map, 2 per\nmultiply-add, causal halved; DINT counted\nas DIFF. "
               "GEMM: square Eigen SGEMM of a\nsoftmax map's flops (2 threads: 2 row\npanels). See docs/benchmarks.md.")
    fig.tight_layout(rect=(0, 0, 1 - 3.2 / fig.get_figwidth(), 1 - 0.5 / fig.get_figheight()))
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    fig.savefig(out_path, format="svg", metadata={"Date": None})
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="benchmark JSON file(s), plain or .xz")
    parser.add_argument("-o", "--output", required=True, help="SVG file to write")
    parser.add_argument("--note", default="", help="extra text for the subtitle")
    args = parser.parse_args(argv)
    records = bench_json.load(args.inputs)
    render(records, bench_json.context(args.inputs[0]), args.output, args.note)
    print("bench_chart: wrote %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
