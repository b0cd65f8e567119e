#!/usr/bin/env python3
"""Renders GFLOP/s against N for each kernel, next to the Eigen GEMM line, as an SVG.

  python3 tools/bench_chart.py docs/bench/latest.json -o docs/bench/kernels.svg

Input: the JSON of bench_kernels (or a merged file, tools/bench_json.py). One panel per head dim
(rows: d 64, d 128) and mask (columns: causal, none); x: N on a log2 axis, y: GFLOP/s (the
GFLOPs_best counter, the fastest call, where the run has it, else GFLOPs, the loop's mean;
useful flops, causal counted half, see docs/benchmarks.md), one y scale for all panels. Solid lines: 1 thread; dashed: 2 threads (drawn for the families that have them);
dotted grey-ish: the plain reference. The black line is Eigen SGEMM of equal flops.
No dependencies beyond the standard library (a hand-written SVG).
"""
import argparse
import math
import os
import sys
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

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

PANEL_W, PANEL_H = 430, 270
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 62, 18, 34, 42
LEGEND_W = 300
TITLE_H = 58


def nice_step(span, target_ticks=5):
    raw = span / max(1, target_ticks)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def fmt_n(n):
    return "%dk" % (n // 1024) if n >= 1024 and n % 1024 == 0 else str(n)


def collect(records):
    """{(d, mask): {(family, threads): [(N, GFLOP/s), ...]}}, and the counter the rates came from:
    GFLOPs_best (the fastest call) when every record has it, else GFLOPs (the loop's mean)."""
    panels = {}
    counter = "GFLOPs_best" if all(r.get("GFLOPs_best") is not None for r in records if r.get("GFLOPs") is not None) \
        else "GFLOPs"
    for r in records:
        if r.family not in dict((s[0], s) for s in SERIES):
            continue
        p = r.params
        if not all(k in p for k in ("N", "d", "mask", "threads")):
            continue
        g = r.get(counter)
        if g is None:
            continue
        key = (p["d"], p["mask"])
        series = panels.setdefault(key, {}).setdefault((r.family, p["threads"]), {})
        series[p["N"]] = float(g)  # the last run of a name wins
    return {k: {s: sorted(v.items()) for s, v in d.items()} for k, d in panels.items()}, counter


def render(records, ctx, title_extra=""):
    panels, counter = collect(records)
    if not panels:
        raise SystemExit("bench_chart: no kernel benchmarks (family/N:/d:/mask:/threads:) with a GFLOPs counter")
    dims = sorted({k[0] for k in panels})
    masks = [m for m in ("causal", "none") if any(k[1] == m for k in panels)]
    all_n = sorted({n for s in panels.values() for pts in s.values() for n, _ in pts})
    ymax_data = max(g for s in panels.values() for pts in s.values() for _, g in pts)
    step = nice_step(ymax_data * 1.05)
    ymax = step * math.ceil(ymax_data * 1.05 / step)
    lx0, lx1 = math.log2(all_n[0]), math.log2(all_n[-1])
    if lx1 == lx0:
        lx0, lx1 = lx0 - 0.5, lx1 + 0.5

    width = len(masks) * PANEL_W + LEGEND_W
    height = TITLE_H + len(dims) * PANEL_H + 10
    out = []
    out.append('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
               'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">' % (width, height, width, height))
    out.append('<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>' % (width, height))
    title = "diffattn single-head kernels: GFLOP/s against N (float, S = N)"
    out.append('<text x="12" y="22" font-size="16" font-weight="bold">%s</text>' % escape(title))
    sub = []
    if ctx.get("date"):
        sub.append(str(ctx["date"])[:16].replace("T", " "))
    if ctx.get("host_name"):
        sub.append(str(ctx["host_name"]))
    if ctx.get("num_cpus"):
        sub.append("%s CPUs at %s MHz" % (ctx["num_cpus"], ctx.get("mhz_per_cpu", "?")))
    if ctx.get("diffattn_mode"):
        sub.append("%s run" % ctx["diffattn_mode"])
    if ctx.get("load_avg"):
        sub.append("load avg %s" % ", ".join("%.1f" % x for x in ctx["load_avg"]))
    sub.append("fastest call of each benchmark" if counter == "GFLOPs_best" else "mean over each benchmark's loop")
    if title_extra:
        sub.append(title_extra)
    out.append('<text x="12" y="42" fill="#444">%s</text>' % escape("; ".join(sub)))

    used = set()
    for row, d in enumerate(dims):
        for col, mask in enumerate(masks):
            px, py = col * PANEL_W, TITLE_H + row * PANEL_H
            x0, x1 = px + MARGIN_L, px + PANEL_W - MARGIN_R
            y0, y1 = py + PANEL_H - MARGIN_B, py + MARGIN_T  # y0 bottom

            def sx(n):
                return x0 + (math.log2(n) - lx0) / (lx1 - lx0) * (x1 - x0)

            def sy(g):
                return y0 - g / ymax * (y0 - y1)

            out.append('<text x="%.1f" y="%.1f" font-weight="bold">d %d, mask %s</text>' % (x0, py + 22, d, mask))
            # grid and axes
            t = 0.0
            while t <= ymax + 1e-9:
                y = sy(t)
                out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e3e3e3"/>' % (x0, y, x1, y))
                out.append('<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%g</text>' % (x0 - 5, y + 4, t))
                t += step
            for n in all_n:
                x = sx(n)
                out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#f0f0f0"/>' % (x, y0, x, y1))
                out.append('<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>' % (x, y0 + 16, fmt_n(n)))
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>'
                       % (x0, y1, x1 - x0, y0 - y1))
            out.append('<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">N (tokens)</text>'
                       % ((x0 + x1) / 2, y0 + 32))
            out.append('<text transform="translate(%.1f,%.1f) rotate(-90)" text-anchor="middle" fill="#333">'
                       'GFLOP/s</text>' % (px + 16, (y0 + y1) / 2))
            series = panels.get((d, mask), {})
            for family, label, colour in SERIES:
                for threads in sorted({t for (f, t) in series if f == family}):
                    pts = series[(family, threads)]
                    used.add((family, threads))
                    dash = ""
                    width_px = 2.4 if family == "gemm" else 1.8
                    if threads > 1:
                        dash = ' stroke-dasharray="7,4"'
                    if family.startswith("reference_"):
                        dash = ' stroke-dasharray="2,3"'
                        width_px = 1.6
                    coords = " ".join("%.1f,%.1f" % (sx(n), sy(g)) for n, g in pts)
                    out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="%.1f"%s>'
                               '<title>%s</title></polyline>'
                               % (coords, colour, width_px, dash, escape("%s, %d thread(s)" % (label, threads))))
                    for n, g in pts:
                        out.append('<circle cx="%.1f" cy="%.1f" r="2.6" fill="%s"><title>%s</title></circle>'
                                   % (sx(n), sy(g), colour,
                                      escape("%s, %d thread(s), N %d: %.1f GFLOP/s" % (label, threads, n, g))))

    # legend
    lx = len(masks) * PANEL_W + 8
    ly = TITLE_H + MARGIN_T
    out.append('<text x="%d" y="%d" font-weight="bold">Series</text>' % (lx, ly))
    ly += 18
    for family, label, colour in SERIES:
        for threads in sorted({t for (f, t) in used if f == family}):
            dash = ' stroke-dasharray="7,4"' if threads > 1 else ""
            if family.startswith("reference_"):
                dash = ' stroke-dasharray="2,3"'
            out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.2"%s/>'
                       % (lx, ly - 4, lx + 28, ly - 4, colour, dash))
            text = label + ("" if family.startswith("reference_") else ", %d thread%s" % (threads, "s" if threads > 1 else ""))
            out.append('<text x="%d" y="%d">%s</text>' % (lx + 34, ly, escape(text)))
            ly += 18
    notes = ["Useful flops: QK^T + PV per map,", "2 per multiply-add, causal halved;",
             "DINT counted as DIFF. GEMM: square", "Eigen SGEMM of a softmax map's flops", "(2 threads: 2 row panels).",
             "See docs/benchmarks.md."]
    ly += 8
    for line in notes:
        out.append('<text x="%d" y="%d" fill="#555" font-size="11">%s</text>' % (lx, ly, escape(line)))
        ly += 15
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="benchmark JSON file(s)")
    parser.add_argument("-o", "--output", required=True, help="SVG file to write")
    parser.add_argument("--note", default="", help="extra text for the subtitle")
    args = parser.parse_args(argv)
    records = bench_json.load(args.inputs)
    ctx = bench_json.context(args.inputs[0])
    svg = render(records, ctx, args.note)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        f.write(svg)
    print("bench_chart: wrote %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
