#!/usr/bin/python3
"""The retrieval report: the README's accuracy and attention tables and pictures, measured by
diffattn-analyze on the shipped models (run by scripts/retrieval-report.sh, docs/retrieval.md).

    /usr/bin/python3 tools/retrieval_report.py --analyze build/release/examples/diffattn-analyze

1. writes the report's episodes (tools/retrieval_episodes.py, seed 1901, `report` counts) to the
   work folder;
2. runs `diffattn-analyze --episodes` on every shipped model: accuracy per set and the attention
   measure of every attention episode; its printed output is kept as OUT/analyze_<kind>.txt;
3. runs `diffattn-analyze --tokens ... --rows all --maps` on one attention episode (the first of
   att_L64_depth50) for every model: the full maps of every row;
4. draws with matplotlib, from those JSON files only:
     OUT/maps.png          each model's retrieval head: A1, A2 (DINT: the integral I) and the
                           combined map, next to each other
     OUT/maps_<kind>.png   every layer and head of one model
     OUT/depth.png         answer and noise mass of each model's retrieval head against depth
   and writes OUT/figures.json (every number of every picture and table) and OUT/tables.md.
Nothing here computes a figure: every number comes from the C++ program's output.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import retrieval_episodes as E  # noqa: E402
import retrieval_kinds as K  # noqa: E402

ROOT = K.ROOT
KINDS = K.NAMES
MEASURES = ["answer", "noise", "negative_mass", "negative_fraction", "row_sum", "answer_raw",
            "noise_raw"]
PICTURED_SET, PICTURED_EPISODE = "att_L64_depth50", 0
COMMAND = "scripts/retrieval-report.sh"


def run(cmd, log_path=None):
    """Runs cmd in the project folder, its absolute paths made relative to it (for the logs)."""
    cmd = [rel(c) if os.path.isabs(c) else c for c in cmd]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    if res.returncode != 0:
        sys.exit("retrieval_report: %s failed (%d):\n%s" % (" ".join(cmd[:4]), res.returncode,
                                                             res.stderr))
    if log_path:
        with open(log_path, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.write(res.stdout)
    return res.stdout


def rel(path):
    return os.path.relpath(os.path.abspath(path), ROOT)


def spans(positions):
    """Half-open spans "a:b" of sorted positions, comma-separated (diffattn-analyze's syntax)."""
    out, start = [], None
    for i, p in enumerate(positions):
        if start is None:
            start = p
        if i + 1 == len(positions) or positions[i + 1] != p + 1:
            out.append("%d:%d" % (start, p + 1))
            start = None
    return ",".join(out)


def retrieval_head(summary):
    """(layer, head) with the largest mean answer mass over all attention rows."""
    best = None
    for li, heads in enumerate(summary["per_layer_head"]):
        for h, m in enumerate(heads):
            if best is None or m["answer"] > best[2]:
                best = (li, h, m["answer"])
    return best[0], best[1]


def read_maps(folder, n_tokens, layers, heads):
    """The full maps [layer][head][name] -> N x N array (NaN where the causal row cannot see)."""
    names = ["a1", "a2", "integral", "combined"]
    maps = [[{k: np.full((n_tokens, n_tokens), np.nan) for k in names} for _ in range(heads)]
            for _ in range(layers)]
    weights = [[None] * heads for _ in range(layers)]
    for n in range(n_tokens):
        with open(os.path.join(folder, "tokens_row%d.json" % n)) as f:
            row = json.load(f)
        for li, hs in enumerate(row["layers"]):
            for entry in hs:
                h = entry["head"]
                for k in names:
                    vals = entry[k]
                    if vals:
                        maps[li][h][k][n, :len(vals)] = vals
                weights[li][h] = entry["weight"]
    return maps, weights


def accuracy_tables(acc, per_cell):
    cells = ["N%d_R%d" % c for c in E.CELLS]
    out = ["| kind | L | " + " | ".join(c.replace("_", " ") for c in cells) + " | mean |",
           "|---|---|" + "---|" * (len(cells) + 1)]
    for f in E.LENGTH_FACTORS:
        L = E.TRAIN_LEN * f
        for k in KINDS:
            vals = [acc[k]["acc_L%d_%s" % (L, c)]["accuracy"] for c in cells]
            out.append("| %s | %d (%dx) | " % (k, L, f) + " | ".join("%.3f" % v for v in vals) +
                       " | %.3f |" % (sum(vals) / len(vals)))
    out.append("")
    out.append("Episodes per cell: %s at L = 64, 256, 1024 (R = 2 cells score twice as many "
               "rows); chance is 1/N. Standard error of a cell: sqrt(p(1-p)/rows), at most "
               "%.3f at L = 1024." % (" / ".join(str(per_cell[f]) for f in E.LENGTH_FACTORS),
                                      0.5 / per_cell[16] ** 0.5))
    return out


def attention_tables(att, heads_of):
    depth_names = ["att_L%d_depth%d" % (E.TRAIN_LEN, round(100 * d)) for d in E.DEPTHS]
    out = ["Answer / noise mass of each model's retrieval head, by depth of the asked needle "
           "(normalised by the row sum, negative entries signed):", "",
           "| kind | layer.head | " + " | ".join("%d%%" % round(100 * d) for d in E.DEPTHS) + " |",
           "|---|---|" + "---|" * len(E.DEPTHS)]
    for k in KINDS:
        li, h = heads_of[k]
        out.append("| %s | %d.%d | " % (k, li, h) + " | ".join(
            "%.3f / %.3f" % (att[k][s]["per_layer_head"][li][h]["answer"],
                             att[k][s]["per_layer_head"][li][h]["noise"]) for s in depth_names) + " |")
    out += ["", "The same rows without dividing by the row sum (raw masses of the combined map, "
            "as the papers' table may count them), and the row sum:", "",
            "| kind | layer.head | answer raw | noise raw | row sum | negative mass | negative fraction |",
            "|---|---|---|---|---|---|---|"]
    for k in KINDS:
        li, h = heads_of[k]
        m = att[k]["all"]["per_layer_head"][li][h]
        out.append("| %s | %d.%d | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
            k, li, h, m["answer_raw"], m["noise_raw"], m["row_sum"], m["negative_mass"],
            m["negative_fraction"]))
    out += ["", "Per layer, mean over the layer's heads (all depths):", "",
            "| kind | layer | answer | noise | negative mass | row sum |", "|---|---|---|---|---|---|"]
    for k in KINDS:
        for li, m in enumerate(att[k]["all"]["per_layer"]):
            out.append("| %s | %d | %.3f | %.3f | %.3f | %.3f |" % (
                k, li, m["answer"], m["noise"], m["negative_mass"], m["row_sum"]))
    return out


def draw(out, att, heads_of, maps, weights, episode):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm, SymLogNorm

    seq_norm = LogNorm(vmin=1e-4, vmax=1.0)
    sym_norm = SymLogNorm(linthresh=1e-3, vmin=-1.0, vmax=1.0, base=10)
    answer = episode["answer"][0]
    question = episode["score_pos"][0]

    def panel(ax, m, title, combined):
        data = np.ma.masked_invalid(m)
        im = ax.imshow(data, cmap="RdBu_r" if combined else "viridis",
                       norm=sym_norm if combined else seq_norm, interpolation="nearest")
        for j in answer:
            ax.axvline(j, color="orange", lw=0.6, alpha=0.7)
        ax.axhline(question, color="orange", lw=0.6, alpha=0.7)
        ax.set_title(title, fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        return im

    # Overview: one row per model, its retrieval head: the maps, then the question row.
    fig, axes = plt.subplots(len(KINDS), 5, figsize=(12, len(KINDS) * 2.2),
                             gridspec_kw={"width_ratios": [1, 1, 1, 1, 2.2]}, layout="constrained")
    im_seq = im_c = None
    for r, k in enumerate(KINDS):
        li, h = heads_of[k]
        m = maps[k][li][h]
        w = weights[k][li][h]
        dint = k.startswith("dint")
        im_seq = panel(axes[r, 0], m["a1"], "%s L%d.H%d: %s" % (k, li, h, "A" if k == "softmax" else "A1"),
                       False)
        if k == "softmax":
            axes[r, 1].axis("off")
        else:
            panel(axes[r, 1], m["a2"], "A2", False)
        if dint:
            panel(axes[r, 2], m["integral"], "I (%s)" % k.split("_", 2)[2].replace("_", " "), False)
        else:
            axes[r, 2].axis("off")
        if k == "softmax":
            lab = "combined = A"
        elif k == "diff_v2":
            lab = "A1 - g A2 (g per row)"
        elif dint:
            lab = "A1 - lam A2 + lam I, lam %.2f" % w
        else:
            lab = "A1 - lam A2, lam %.2f" % w
        im_c = panel(axes[r, 3], m["combined"], lab, True)
        # The question row over the keys it sees.
        ax = axes[r, 4]
        n = question
        xs = np.arange(n + 1)
        ax.plot(xs, m["a1"][n, :n + 1], lw=0.8, label="A" if k == "softmax" else "A1")
        if k != "softmax":
            ax.plot(xs, m["a2"][n, :n + 1], lw=0.8, label="A2")
        if dint:
            ax.plot(xs, m["integral"][n, :n + 1], lw=0.8, label="I")
        ax.plot(xs, m["combined"][n, :n + 1], lw=1.2, color="black", label="combined")
        for j in answer:
            ax.axvline(j, color="orange", lw=0.8)
        ax.axhline(0, color="gray", lw=0.4)
        ax.set_title("question row %d (answer key: orange)" % n, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="upper left", ncol=4)
    fig.colorbar(im_seq, ax=axes[:, 0:3], shrink=0.25, location="bottom", label="softmax maps (log)")
    bar = fig.colorbar(im_c, ax=axes[:, 3], shrink=0.9, location="bottom", label="combined (symlog)")
    bar.set_ticks([-1, -0.01, 0, 0.01, 1])
    bar.set_ticklabels(["-1", "-.01", "0", ".01", "1"], fontsize=7)
    fig.suptitle("Retrieval head of each model on one episode (L = %d, asked needle at depth 50%%; "
                 "orange: the answer key's column and the question row)" % E.TRAIN_LEN, fontsize=9)
    fig.savefig(os.path.join(out, "maps.png"), dpi=80)
    plt.close(fig)

    # Every layer and head of each model.
    for k in KINDS:
        layers = len(maps[k])
        heads = len(maps[k][0])
        names = [("a1", "A1" if k != "softmax" else "A")]
        if k != "softmax":
            names.append(("a2", "A2"))
        if k.startswith("dint"):
            names.append(("integral", "I"))
        names.append(("combined", "combined"))
        fig, axes = plt.subplots(layers * heads, len(names),
                                 figsize=(len(names) * 2.0, layers * heads * 2.1), squeeze=False)
        for li in range(layers):
            for h in range(heads):
                for c, (key, title) in enumerate(names):
                    panel(axes[li * heads + h, c], maps[k][li][h][key],
                          "L%d.H%d %s" % (li, h, title), key == "combined")
        fig.suptitle("%s: every layer and head (same episode as maps.png)" % k, fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "maps_%s.png" % k), dpi=80)
        plt.close(fig)

    # Answer and noise mass against depth.
    depth_names = ["att_L%d_depth%d" % (E.TRAIN_LEN, round(100 * d)) for d in E.DEPTHS]
    xs = [100 * d for d in E.DEPTHS]
    fig, axes = plt.subplots(2, 2, figsize=(9, 6), sharex=True)
    for k in KINDS:
        li, h = heads_of[k]
        for row, suffix in enumerate(("", "_raw")):
            figs = [att[k][s]["per_layer_head"][li][h] for s in depth_names]
            axes[row, 0].plot(xs, [f["answer" + suffix] for f in figs], "o-", label="%s (L%d.H%d)" % (k, li, h))
            axes[row, 1].plot(xs, [f["noise" + suffix] for f in figs], "o-")
    axes[0, 0].set_title("attention to the answer / row sum", fontsize=9)
    axes[0, 1].set_title("attention noise / row sum", fontsize=9)
    axes[1, 0].set_title("attention to the answer, raw (not divided)", fontsize=9)
    axes[1, 1].set_title("attention noise, raw", fontsize=9)
    for ax in axes.flat:
        ax.set_xticks(xs)
        ax.axhline(0, color="gray", lw=0.5)
        ax.tick_params(labelsize=8)
    for ax in axes[1]:
        ax.set_xlabel("depth of the asked needle (%)")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Each model's retrieval head (the layer and head with the largest answer mass), "
                 "%d rows per depth" % E.REPORT_ATT_EPISODES, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "depth.png"), dpi=90)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--analyze", required=True, help="the diffattn-analyze program")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "retrieval"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "retrieval-report"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--draw-only", action="store_true",
                    help="redraw from the work folder's JSON files of an earlier run")
    args = ap.parse_args()
    args.analyze, args.out, args.work = (os.path.abspath(p) for p in (args.analyze, args.out, args.work))
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    models = K.MODELS

    v = E.vocab()
    sets = E.make_sets(v, E.TRAIN_LEN, E.REPORT_EPISODES, E.TABLE_SEED,
                       attention_episodes=E.REPORT_ATT_EPISODES)
    doc = E.document(v, E.TRAIN_LEN, sets, E.TABLE_SEED, "tools/retrieval_episodes.py")
    episodes_path = os.path.join(args.work, "episodes.json")
    E.write(episodes_path, doc)
    episode = next(st for st in doc["sets"] if st["name"] == PICTURED_SET)["episodes"][PICTURED_EPISODE]
    print("episodes: %s (seed %d)" % (rel(episodes_path), E.TABLE_SEED), flush=True)

    acc, att, heads_of, maps, weights = {}, {}, {}, {}, {}
    for k in KINDS:
        model = os.path.join(models, k)
        js = os.path.join(args.work, "%s.json" % k)
        if not args.draw_only:
            run([args.analyze, "--model", model, "--episodes", episodes_path, "--json", js,
                 "--threads", str(args.threads)], os.path.join(args.out, "analyze_%s.txt" % k))
        with open(js) as f:
            res = json.load(f)
        acc[k] = {name: {x: s[x] for x in ("correct", "total", "accuracy")}
                  for name, s in res["accuracy"]["sets"].items()}
        att[k] = {name: s for name, s in res["sets"].items()}
        att[k]["all"] = res["summary"]
        heads_of[k] = retrieval_head(res["summary"])
        # The pictured episode, every row, with its maps.
        folder = os.path.join(args.work, "maps_%s" % k)
        if not args.draw_only:
            run([args.analyze, "--model", model, "--tokens", " ".join(map(str, episode["tokens"])),
                 "--rows", "all", "--answer", spans(episode["answer"][0]), "--noise",
                 spans(episode["noise"]), "--maps", folder, "--json", folder + ".json"])
        with open(folder + ".json") as f:
            pictured = json.load(f)
        layers = len(pictured["sequences"][0]["rows"][0]["per_layer_head"])
        heads = len(pictured["sequences"][0]["rows"][0]["per_layer_head"][0])
        maps[k], weights[k] = read_maps(folder, len(episode["tokens"]), layers, heads)
        print("%s: accuracy %d / %d, retrieval head L%d.H%d" % (
            k, res["accuracy"]["correct"], res["accuracy"]["total"], *heads_of[k]), flush=True)

    draw(args.out, att, heads_of, maps, weights, episode)

    def trimmed(per_layer_head):
        return [[{m: h[m] for m in MEASURES} for h in hs] for hs in per_layer_head]

    figures = {
        "command": COMMAND,
        "program": "diffattn-analyze (examples/diffattn_analyze.cpp), float",
        "episodes": {"generator": "tools/retrieval_episodes.py", "seed": E.TABLE_SEED,
                     "per_cell": {"L%d" % (E.TRAIN_LEN * f): n for f, n in E.REPORT_EPISODES.items()},
                     "attention_per_depth": E.REPORT_ATT_EPISODES},
        "measure": "docs/retrieval.md, Attention measure",
        "accuracy_table": acc,
        "attention_table": {k: {"retrieval_head": list(heads_of[k]),
                                "sets": {s: {"rows": a["rows"], "per_layer": trimmed([a["per_layer"]])[0],
                                             "per_layer_head": trimmed(a["per_layer_head"])}
                                         for s, a in att[k].items()}} for k in KINDS},
        "depth.png": {k: {"layer": heads_of[k][0], "head": heads_of[k][1],
                          "depth_percent": [round(100 * d) for d in E.DEPTHS],
                          "answer": [att[k]["att_L64_depth%d" % round(100 * d)]["per_layer_head"]
                                     [heads_of[k][0]][heads_of[k][1]]["answer"] for d in E.DEPTHS],
                          "noise": [att[k]["att_L64_depth%d" % round(100 * d)]["per_layer_head"]
                                    [heads_of[k][0]][heads_of[k][1]]["noise"] for d in E.DEPTHS]}
                      for k in KINDS},
        "maps.png": {"episode": {"set": PICTURED_SET, "index": PICTURED_EPISODE,
                                 "tokens": episode["tokens"], "answer": episode["answer"][0],
                                 "question_row": episode["score_pos"][0]},
                     "note": "maps_<kind>.png draw every layer and head of the same maps; the "
                             "full maps are diffattn-analyze --maps output (build/retrieval-report/"
                             "maps_<kind>/); here each model's retrieval head, rows 0..N-1 over "
                             "their visible keys, 4 significant digits",
                     "maps": {k: {"layer": heads_of[k][0], "head": heads_of[k][1],
                                  "weight": weights[k][heads_of[k][0]][heads_of[k][1]],
                                  **{name: [[float("%.4g" % x) for x in row[:n + 1]]
                                            for n, row in enumerate(
                                                maps[k][heads_of[k][0]][heads_of[k][1]][name])]
                                     for name in ("a1", "a2", "integral", "combined")
                                     if not np.isnan(maps[k][heads_of[k][0]][heads_of[k][1]][name][0, 0])}}
                              for k in KINDS}},
    }
    with open(os.path.join(args.out, "figures.json"), "w") as f:
        json.dump(figures, f, separators=(",", ":"))
        f.write("\n")

    tables = ["<!-- written by %s (tools/retrieval_report.py) from diffattn-analyze's output; "
              "do not edit -->" % COMMAND, "",
              "Retrieval accuracy (argmax at the question rows; C++ float, shipped weights):", ""]
    tables += accuracy_tables(acc, E.REPORT_EPISODES)
    tables += [""] + attention_tables(att, heads_of)
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write("\n".join(tables) + "\n")
    print("wrote %s: maps.png, maps_<kind>.png, depth.png, figures.json, tables.md, "
          "analyze_<kind>.txt" % rel(args.out))


if __name__ == "__main__":
    main()
