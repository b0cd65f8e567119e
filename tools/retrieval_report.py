#!/usr/bin/python3
"""The retrieval report: the README's and docs/retrieval.md's accuracy and attention tables and
pictures, measured by diffattn-analyze on the shipped models (run by scripts/retrieval-report.sh).

    /usr/bin/python3 tools/retrieval_report.py --analyze build/release/examples/diffattn-analyze

1. writes the report's episodes (tools/retrieval_episodes.py, seed 1901, `report` counts) to the
   work folder;
2. runs `diffattn-analyze --episodes` on every shipped model: accuracy per set and every figure of
   every attention set, each with its standard error; its printed output is kept as
   OUT/analyze_<kind>.txt;
3. runs `diffattn-analyze --tokens ... --rows all --maps` on one attention episode (the first of
   att_L64_depth50) for every model: the full maps of every row;
4. writes OUT/tables.md and OUT/figures.json (every number of every table and picture) and draws
   the pictures (tools/retrieval_pictures.py).
No measure is computed here: every figure and standard error is the C++ program's. The only
arithmetic is the accuracy table's mean over its cells (and that mean's error from the cells').
"""

import argparse
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import retrieval_episodes as E  # noqa: E402
import retrieval_kinds as K  # noqa: E402
import retrieval_pictures as P  # noqa: E402

ROOT = K.ROOT
KINDS = K.NAMES
PICTURED_SET, PICTURED_EPISODE = "att_L64_depth50", 0
COMMAND = "scripts/retrieval-report.sh"
DEPTH_SETS = ["att_L%d_depth%d" % (E.TRAIN_LEN, round(100 * d)) for d in E.DEPTHS]

# The papers' Table 5 (attention to the answer / attention noise, answer at depth 0% .. 100%): the
# Shared DIFF paper's (Transformer, DIFF, Shared DIFF) and the DINT paper's DINT row (its
# Transformer and DIFF rows are the same numbers); /work/shared/papers/.
PAPERS = [
    ("Transformer", [0.03, 0.03, 0.03, 0.07, 0.09], [0.51, 0.54, 0.52, 0.49, 0.49]),
    ("DIFF", [0.27, 0.30, 0.31, 0.32, 0.40], [0.01, 0.02, 0.02, 0.02, 0.01]),
    ("Shared DIFF", [0.33, 0.36, 0.39, 0.41, 0.44], [0.01, 0.01, 0.02, 0.01, 0.01]),
    ("DINT", [0.35, 0.38, 0.40, 0.41, 0.45], [0.01, 0.01, 0.01, 0.01, 0.01]),
]


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
    """(layer, head) with the largest |P| answer share over all attention rows."""
    best = None
    for li, heads in enumerate(summary["per_layer_head"]):
        for h, m in enumerate(heads):
            if best is None or m["answer_share"] > best[2]:
                best = (li, h, m["answer_share"])
    return best[0], best[1]


def se_text(se, digits=3):
    """A standard error: `digits` decimals, one significant digit below 10^-digits, "0" for 0 and
    "<1e-6" below that (a figure equal on every row up to rounding: softmax's row sum)."""
    if se == 0:
        return "0"
    if se < 1e-6:
        return "<1e-6"
    if se < 10 ** -digits:  # one significant digit, written out: 0.0004, not 4e-04
        return "%.*f" % (-math.floor(math.log10(float("%.1g" % se))), se)
    return "%.*f" % (digits, se)


def pm(fig, name, digits=3):
    """"value ± se" of figure `name` of a per-layer(-head) entry of diffattn-analyze's JSON."""
    v, se = fig[name], fig[name + "_se"]
    if v is None:
        return "-"
    return "%.*f ± %s" % (digits, v, se_text(se, digits)) if se is not None else "%.*f" % (digits, v)


def weight_text(kind, fig):
    """The head's lambda (a layer's constant) or, for diff_v2, the mean gate at the question rows."""
    if kind == "softmax":
        return "-"
    if kind == "diff_v2":
        return "mean gate %s" % pm(fig, "weight")
    return "λ %.3f" % fig["weight"]


def head_label(kind, li, h, fig):
    w = weight_text(kind, fig)
    return "L%d.H%d" % (li, h) + ("" if w == "-" else ", " + w)


def headline_tables(att, heads_of):
    """Ours (the |P| shares of each retrieval head by depth) and the papers' Table 5, the README's."""
    depths = " | ".join("%d%%" % round(100 * d) for d in E.DEPTHS)
    out = ["| kind | retrieval head | " + depths + " |", "|---|---|" + "---|" * len(E.DEPTHS)]
    for k in KINDS:
        li, h = heads_of[k]
        cells = []
        for s in DEPTH_SETS:
            f = att[k][s]["per_layer_head"][li][h]
            cells.append("%s / %s" % (pm(f, "answer_share"), pm(f, "noise_share")))
        out.append("| %s | %s | " % (k, head_label(k, li, h, att[k]["all"]["per_layer_head"][li][h])) +
                   " | ".join(cells) + " |")
    papers = ["| papers (3B models, natural text) | " + depths + " |", "|---|" + "---|" * len(E.DEPTHS)]
    for name, answer, noise in PAPERS:
        papers.append("| %s | " % name + " | ".join("%.2f / %.2f" % an for an in zip(answer, noise)) + " |")
    return out, papers


def head_tables(att, heads_of):
    """Each retrieval head over all depths: the shares, the raw signed masses, each map's masses."""
    out = ["| kind | head | weight | answer share | noise share | negative share | answer mass | "
           "noise + | noise - | row sum | answer / row sum |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    maps = ["| kind | head | A1 answer | A1 noise | A2 answer | A2 noise | I answer | I noise |",
            "|---|---|---|---|---|---|---|---|"]
    for k in KINDS:
        li, h = heads_of[k]
        f = att[k]["all"]["per_layer_head"][li][h]
        out.append("| %s | L%d.H%d | %s | " % (k, li, h, weight_text(k, f)) + " | ".join(
            pm(f, n) for n in ("answer_share", "noise_share", "negative_share", "answer_mass",
                               "noise_positive", "noise_negative", "row_sum",
                               "answer_normalised")) + " |")
        maps.append("| %s | L%d.H%d | " % (k, li, h) + " | ".join(
            pm(f, n) for n in ("a1_answer", "a1_noise", "a2_answer", "a2_noise", "integral_answer",
                               "integral_noise")) + " |")
    return out, maps


def layer_table(att):
    out = ["| kind | layer | weight | answer share | noise share | answer mass | noise mass | row sum |",
           "|---|---|---|---|---|---|---|---|"]
    for k in KINDS:
        for li, f in enumerate(att[k]["all"]["per_layer"]):
            out.append("| %s | %d | %s | " % (k, li, weight_text(k, f)) + " | ".join(
                pm(f, n) for n in ("answer_share", "noise_share", "answer_mass", "noise_mass",
                                   "row_sum")) + " |")
    return out


def accuracy_table(acc):
    """Accuracy ± standard error per cell, and the mean over the cells ± its error (independent cells)."""
    cells = ["N%d_R%d" % c for c in E.CELLS]
    out = ["| kind | L | " + " | ".join(c.replace("_", " ") for c in cells) + " | mean |",
           "|---|---|" + "---|" * (len(cells) + 1)]
    means = {}
    for f in E.LENGTH_FACTORS:
        L = E.TRAIN_LEN * f
        for k in KINDS:
            got = [acc[k]["acc_L%d_%s" % (L, c)] for c in cells]
            mean = sum(g["accuracy"] for g in got) / len(got)
            mean_se = math.sqrt(sum(g["standard_error"] ** 2 for g in got)) / len(got)
            means[(k, L)] = (mean, mean_se)
            out.append("| %s | %d (%dx) | " % (k, L, f) + " | ".join(
                "%.3f ± %s" % (g["accuracy"], se_text(g["standard_error"])) for g in got) +
                " | %.3f ± %s |" % (mean, se_text(mean_se)))
    return out, means


def tables_md(acc, att, heads_of):
    ours, papers = headline_tables(att, heads_of)
    heads, maps = head_tables(att, heads_of)
    accuracy, _ = accuracy_table(acc)
    rows = att[KINDS[0]][DEPTH_SETS[0]]["rows"]
    return ["<!-- written by %s (tools/retrieval_report.py) from diffattn-analyze's output; do not "
            "edit -->" % COMMAND, "",
            "Every cell is a ratio of sums over the question rows it covers ± its standard error "
            "(docs/analysis.md); shares are by absolute weight, |P|.", "",
            "**Headline.** Attention to the answer / attention noise (|P| share) of each model's "
            "retrieval head, by depth of the asked needle, %d question rows per depth:" % rows, ""] + ours + [
            "", "The papers' Table 5 (Shared DIFF and DINT papers), the same two figures:", ""] + papers + [
            "", "**Retrieval heads**, all %d question rows (weight: the layer's lambda, or diff_v2's "
            "mean gate at the question rows; noise + / noise -: the noise mass's positive and "
            "negative parts; answer / row sum: the signed, normalised figure, secondary):" % (
                rows * len(DEPTH_SETS)), ""] + heads + [
            "", "The same heads' softmax maps (A1, A2; DINT's integral I), answer and noise mass:",
            ""] + maps + [
            "", "**Per layer**, its heads pooled (all depths):", ""] + layer_table(att) + [
            "", "**Accuracy** (argmax at the question rows, C++ float, shipped weights) ± "
            "sqrt(p(1-p)/rows) (± 0: every row right, the error rate then below 3 / rows at 95%%); "
            "%s episodes per cell at L = %s (R = 2 cells score twice as many rows, not quite "
            "independent); chance is 1/N; mean: over the cells, its error sqrt(sum se^2) / cells:" % (
                " / ".join(str(E.REPORT_EPISODES[f]) for f in E.LENGTH_FACTORS),
                ", ".join(str(E.TRAIN_LEN * f) for f in E.LENGTH_FACTORS)), ""] + accuracy


def rounded(x, digits=7):
    """x with every float rounded to `digits` significant digits (figures.json: the C++ program
    runs in float, so further digits carry no information)."""
    if isinstance(x, float):
        return float("%.*g" % (digits, x))
    if isinstance(x, dict):
        return {k: rounded(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v, digits) for v in x]
    return x


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

    v = E.vocab()
    sets = E.make_sets(v, E.TRAIN_LEN, E.REPORT_EPISODES, E.TABLE_SEED,
                       attention_episodes=E.REPORT_ATT_EPISODES)
    doc = E.document(v, E.TRAIN_LEN, sets, E.TABLE_SEED, "tools/retrieval_episodes.py")
    episodes_path = os.path.join(args.work, "episodes.json")
    E.write(episodes_path, doc)
    episode = next(st for st in doc["sets"] if st["name"] == PICTURED_SET)["episodes"][PICTURED_EPISODE]
    print("episodes: %s (seed %d)" % (rel(episodes_path), E.TABLE_SEED), flush=True)

    acc, att, heads_of, maps = {}, {}, {}, {}
    for k in KINDS:
        model = os.path.join(K.MODELS, k)
        js = os.path.join(args.work, "%s.json" % k)
        if not args.draw_only:
            run([args.analyze, "--model", model, "--episodes", episodes_path, "--json", js,
                 "--threads", str(args.threads)], os.path.join(args.out, "analyze_%s.txt" % k))
        with open(js) as f:
            res = json.load(f)
        acc[k] = {name: {x: s[x] for x in ("correct", "total", "accuracy", "standard_error")}
                  for name, s in res["accuracy"]["sets"].items()}
        att[k] = {name: {x: s[x] for x in ("rows", "per_layer", "per_layer_head")}
                  for name, s in res["sets"].items()}
        att[k]["all"] = {x: res["summary"][x] for x in ("rows", "per_layer", "per_layer_head")}
        heads_of[k] = retrieval_head(res["summary"])
        # The pictured episode, every row, with its maps.
        folder = os.path.join(args.work, "maps_%s" % k)
        if not args.draw_only:
            run([args.analyze, "--model", model, "--tokens", " ".join(map(str, episode["tokens"])),
                 "--rows", "all", "--answer", spans(episode["answer"][0]), "--noise",
                 spans(episode["noise"]), "--maps", folder, "--json", folder + ".json"])
        maps[k] = P.read_maps(folder, len(episode["tokens"]))
        print("%s: accuracy %d / %d, retrieval head L%d.H%d" % (
            k, res["accuracy"]["correct"], res["accuracy"]["total"], *heads_of[k]), flush=True)

    pictured = P.Episode(episode, E.TRAIN_LEN, round(100 * next(
        st["depth"] for st in doc["sets"] if st["name"] == PICTURED_SET)))
    drawn = P.draw_all(args.out, KINDS, att, heads_of, maps, pictured, DEPTH_SETS,
                       [round(100 * d) for d in E.DEPTHS])
    _, accuracy_means = accuracy_table(acc)
    figures = {
        "command": COMMAND,
        "program": "diffattn-analyze (examples/diffattn_analyze.cpp), float",
        "definitions": "docs/analysis.md, The measures; every figure a ratio of sums over rows, "
                       "*_se its standard error; numbers to 7 significant digits (maps: 4)",
        "episodes": {"generator": "tools/retrieval_episodes.py", "seed": E.TABLE_SEED,
                     "per_cell": {"L%d" % (E.TRAIN_LEN * f): n for f, n in E.REPORT_EPISODES.items()},
                     "attention_per_depth": E.REPORT_ATT_EPISODES},
        "accuracy_table": {"sets": acc, "mean_over_cells": {
            "%s L%d" % key: {"accuracy": m, "standard_error": se}
            for key, (m, se) in accuracy_means.items()}},
        "attention_table": {k: {"retrieval_head": list(heads_of[k]), "sets": att[k]} for k in KINDS},
        "papers_table5": [{"model": n, "answer": a, "noise": z} for n, a, z in PAPERS],
        "pictures": drawn,
    }
    with open(os.path.join(args.out, "figures.json"), "w") as f:
        json.dump(rounded(figures), f, separators=(",", ":"))
        f.write("\n")
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write("\n".join(tables_md(acc, att, heads_of)) + "\n")
    print("wrote %s: tables.md, figures.json, %s, analyze_<kind>.txt" % (
        rel(args.out), ", ".join(sorted(drawn))))


if __name__ == "__main__":
    main()
