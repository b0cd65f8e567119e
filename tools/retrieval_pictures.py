#!/usr/bin/python3
"""The pictures of the retrieval report (tools/retrieval_report.py draws them with this module;
docs/retrieval.md shows them). Everything drawn is diffattn-analyze's output: the maps of one
episode (`--maps`) and the figures of the attention sets (`--json`, with their standard errors).

    question_rows.png   each model's retrieval head at the question row of one episode: the
                        combined row over the keys, signed, on a symmetric-log axis (negative
                        entries below 0), with map 1 and the subtracted map 2 beside it
    maps_<kind>.png     one model's retrieval head on that episode: A1, A2 (DINT: I) and the
                        combined map over every row, then the question row on its own
    heads_<kind>.png    the combined question row of every layer and head of one model
    depth.png           the |P| answer and noise share of each retrieval head against depth,
                        bars of two standard errors
"""

import json
import os

import numpy as np

MAP_NAMES = ["a1", "a2", "integral", "combined"]
LINTHRESH = 1e-4  # below this |value| the question-row axes and the combined maps are linear
COLOURS = {"softmax": "#444444", "diff": "#1f77b4", "dint_causal_softmax": "#2ca02c",
           "dint_causal_mean": "#98df8a", "shared_diff": "#9467bd", "diff_v2": "#d62728"}


class Episode:
    """The pictured episode: its tokens, the asked needle, the other needles, the question row."""

    def __init__(self, episode, context_len, depth_percent):
        self.tokens = episode["tokens"]
        self.answer = list(episode["answer"][0])
        self.question = episode["score_pos"][0]
        noise = set(episode["noise"])
        self.needles = [j for j in range(1, context_len + 1) if j not in noise and j not in self.answer]
        self.context_len = context_len
        self.depth_percent = depth_percent  # the set's depth (the needle's own is rounded to a position)

    def key_ticks(self):
        """Tick positions and labels of the key axis: BOS, the context, the question's key token
        (the row itself; QRY just before it)."""
        L = self.context_len
        ticks = [0] + list(range(16, L, 16)) + [L + 2]
        labels = ["BOS"] + [str(t) for t in range(16, L, 16)] + ["KEY"]
        return ticks, labels


def read_maps(folder, n_tokens):
    """The maps of every row of the pictured episode: [layer][head] -> {name: N x N array (NaN
    where the causal row cannot see), "weight": [N] the row's lambda or gate}."""
    out = None
    for n in range(n_tokens):
        with open(os.path.join(folder, "tokens_row%d.json" % n)) as f:
            row = json.load(f)
        if out is None:
            out = [[{k: np.full((n_tokens, n_tokens), np.nan) for k in MAP_NAMES}
                    for _ in hs] for hs in row["layers"]]
            for hs in out:
                for m in hs:
                    m["weight"] = np.full(n_tokens, np.nan)
        for li, hs in enumerate(row["layers"]):
            for entry in hs:
                m = out[li][entry["head"]]
                for k in MAP_NAMES:
                    if entry[k]:
                        m[k][n, :len(entry[k])] = entry[k]
                m["weight"][n] = entry["weight"]
    return out


def has_map(m, name):
    return not np.isnan(m[name][0, 0])


def question_parts(kind, m, n):
    """The question row's parts, each as it enters the combined row (docs/math.md §2): A1, minus
    weight times A2, plus lambda times I, and the combined row; [(label, values, style)]."""
    keys = n + 1
    w = m["weight"][n]
    parts = []
    if kind == "softmax":
        parts.append(("A (= combined)", m["a1"][n, :keys], "combined"))
        return parts
    parts.append(("A1", m["a1"][n, :keys], "a1"))
    parts.append(("-%s A2" % ("g" if kind == "diff_v2" else "λ"), -w * m["a2"][n, :keys], "a2"))
    if has_map(m, "integral"):
        parts.append(("+λ I", w * m["integral"][n, :keys], "integral"))
    parts.append(("combined", m["combined"][n, :keys], "combined"))
    return parts


STYLE = {"a1": dict(color="#1f77b4", lw=1.0, alpha=0.8),
         "a2": dict(color="#d62728", lw=1.0, alpha=0.8),
         "integral": dict(color="#2ca02c", lw=1.0, alpha=0.8)}


def symlog_axis(ax):
    ax.set_yscale("symlog", linthresh=LINTHRESH, linscale=0.5)
    ax.set_ylim(-1.5, 1.5)
    ax.set_yticks([-1, -1e-2, -1e-4, 0, 1e-4, 1e-2, 1])
    ax.set_yticklabels(["-1", "-0.01", "", "0", "", "0.01", "1"])
    ax.axhline(0, color="gray", lw=0.6)


def mark_keys(ax, ep, vertical=True):
    """The asked needle (orange band) and the other needles (purple dashes) on the key axis."""
    for j in ep.answer:
        (ax.axvspan if vertical else ax.axhspan)(j - 0.5, j + 0.5, color="orange", alpha=0.35, lw=0)
    for j in ep.needles:
        (ax.axvline if vertical else ax.axhline)(j, color="#9467bd", lw=0.8, ls="--", alpha=0.7)


def question_row_panel(ax, kind, m, ep, legend=True, parts_drawn=True):
    """The question row on a signed symmetric-log axis; returns the numbers drawn."""
    n = ep.question
    xs = np.arange(n + 1)
    drawn = {}
    for label, values, style in question_parts(kind, m, n):
        drawn[label] = [float("%.4g" % v) for v in values]
        if style == "combined":
            ax.vlines(xs, 0, values, color="black", lw=0.9)
            ax.plot(xs, values, "o", color="black", ms=2.2, label=label)
        elif parts_drawn:
            ax.plot(xs, values, label=label, **STYLE[style])
    symlog_axis(ax)
    mark_keys(ax, ep)
    ticks, labels = ep.key_ticks()
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_xlim(-1, n + 1)
    ax.tick_params(axis="y", labelsize=7)
    if legend:
        ax.legend(fontsize=7, loc="lower left", ncol=4, framealpha=0.9)
    return drawn


def draw_maps(out, kind, li, h, m, ep, title):
    """maps_<kind>.png: the retrieval head's maps over every row, then its question row."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm, SymLogNorm

    names = [("a1", "A" if kind == "softmax" else "A1")]
    if has_map(m, "a2"):
        names.append(("a2", "A2"))
    if has_map(m, "integral"):
        names.append(("integral", "I"))
    if kind != "softmax":
        names.append(("combined", "combined map"))
    fig = plt.figure(figsize=(9, 3.0 + 9.0 / max(3, len(names))), layout="constrained")
    grid = fig.add_gridspec(2, len(names), height_ratios=[9.0 / max(3, len(names)), 3.0])
    ticks, labels = ep.key_ticks()
    for c, (key, label) in enumerate(names):
        ax = fig.add_subplot(grid[0, c])
        combined = key == "combined"
        norm = (SymLogNorm(linthresh=LINTHRESH, linscale=0.5, vmin=-1, vmax=1, base=10) if combined
                else LogNorm(vmin=1e-4, vmax=1))
        im = ax.imshow(np.ma.masked_invalid(m[key]), cmap="RdBu_r" if combined else "viridis",
                       norm=norm, interpolation="nearest")
        ax.axhline(ep.question, color="orange", lw=0.8)
        for j in ep.answer:
            ax.axvline(j, color="orange", lw=0.8)
        ax.set_title(label, fontsize=9)
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, fontsize=6)
        ax.set_yticks(ticks)
        ax.set_yticklabels(labels, fontsize=6)
        ax.set_xlabel("key position", fontsize=7)
        if c == 0:
            ax.set_ylabel("query position", fontsize=7)
        bar = fig.colorbar(im, ax=ax, location="bottom", shrink=0.9, pad=0.02)
        bar.ax.tick_params(labelsize=6)
        if combined:
            bar.set_ticks([-1, -1e-2, -1e-4, 0, 1e-4, 1e-2, 1])
            bar.set_ticklabels(["-1", "-.01", "", "0", "", ".01", "1"])
    ax = fig.add_subplot(grid[1, :])
    drawn = question_row_panel(ax, kind, m, ep)
    ax.set_title("the question row (%d, the KEY token) on its own; orange: the asked needle, purple: "
                 "the other needles;\naxis linear within ±1e-4, logarithmic beyond" % ep.question,
                 fontsize=8)
    ax.set_xlabel("key position", fontsize=8)
    ax.set_ylabel("weight on the key (signed)", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(os.path.join(out, "maps_%s.png" % kind), dpi=100)
    plt.close(fig)
    return drawn


def draw_question_rows(out, kinds, heads_of, maps, labels, ep):
    """question_rows.png: one panel per model, its retrieval head's question row."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(kinds) // 2, 2, figsize=(10, 8.2), sharex=True, sharey=True,
                             layout="constrained")
    for ax, k in zip(axes.flat, kinds):
        li, h = heads_of[k]
        question_row_panel(ax, k, maps[k][li][h], ep, legend=True)
        ax.set_title("%s, %s" % (k, labels[k]), fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("key position", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("weight (signed)", fontsize=8)
    fig.suptitle("The question row of each model's retrieval head on one episode (L = %d, the asked "
                 "needle at depth %d%%: orange; the other needles: purple).\nBlack: the combined row "
                 "the values are weighted by; axis linear within ±1e-4, logarithmic beyond" % (
                     ep.context_len, ep.depth_percent), fontsize=9)
    fig.savefig(os.path.join(out, "question_rows.png"), dpi=90)
    plt.close(fig)


def draw_heads(out, kind, maps_k, ep, weights_text):
    """heads_<kind>.png: the combined question row of every layer and head."""
    import matplotlib.pyplot as plt

    layers, heads = len(maps_k), len(maps_k[0])
    fig, axes = plt.subplots(layers, heads, figsize=(2.6 * heads + 1, 2.3 * layers + 0.6), sharex=True,
                             sharey=True, squeeze=False, layout="constrained")
    for li in range(layers):
        for h in range(heads):
            ax = axes[li, h]
            question_row_panel(ax, kind, maps_k[li][h], ep, legend=False, parts_drawn=False)
            ax.set_title("L%d.H%d%s" % (li, h, weights_text(li, h)), fontsize=8)
    fig.suptitle("%s: the combined question row of every layer and head (the episode of "
                 "maps_%s.png; orange: the asked needle)" % (kind, kind), fontsize=9)
    fig.savefig(os.path.join(out, "heads_%s.png" % kind), dpi=90)
    plt.close(fig)


def draw_depth(out, kinds, att, heads_of, labels, depth_sets, depth_percent):
    """depth.png: answer and noise share (|P|) of each retrieval head against depth, ±2 se."""
    import matplotlib.pyplot as plt

    panels = [("answer_share", "attention to the answer (|P| share)"),
              ("noise_share", "attention noise (|P| share)")]
    fig = plt.figure(figsize=(10, 4.9), layout="constrained")
    grid = fig.add_gridspec(2, len(panels), height_ratios=[1, 0.16])
    axes = [fig.add_subplot(grid[0, c]) for c in range(len(panels))]
    legend_axes = fig.add_subplot(grid[1, :])
    legend_axes.axis("off")
    drawn = {}
    for i, k in enumerate(kinds):
        li, h = heads_of[k]
        figs = [att[k][s]["per_layer_head"][li][h] for s in depth_sets]
        xs = np.array(depth_percent, dtype=float) + (i - (len(kinds) - 1) / 2) * 1.2  # apart
        drawn[k] = {"layer": li, "head": h}
        for ax, (name, _) in zip(axes, panels):
            ys = [f[name] for f in figs]
            se = [f[name + "_se"] for f in figs]
            ax.errorbar(xs, ys, yerr=[2 * e for e in se], fmt="o-", ms=3, lw=1, capsize=2,
                        color=COLOURS.get(k), label="%s (%s)" % (k, labels[k]))
            drawn[k][name] = ys
            drawn[k][name + "_se"] = se
    for ax, (name, title) in zip(axes, panels):
        ax.set_title(title, fontsize=9)
        ax.set_xticks(depth_percent)
        ax.set_xlabel("depth of the asked needle (%)", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of the row's absolute weight", fontsize=8)
    handles, names = axes[0].get_legend_handles_labels()
    legend_axes.legend(handles, names, fontsize=7, loc="center", ncol=3, frameon=False)
    fig.suptitle("Each model's retrieval head: ratio of sums over %d question rows per depth, bars "
                 "±2 standard errors" % att[kinds[0]][depth_sets[0]]["rows"], fontsize=9)
    fig.savefig(os.path.join(out, "depth.png"), dpi=90)
    plt.close(fig)
    return drawn


def draw_all(out, kinds, att, heads_of, maps, ep, depth_sets, depth_percent):
    """Every picture; returns the numbers each draws (figures.json's "pictures")."""
    import matplotlib
    matplotlib.use("Agg")

    def weight_label(k, li, h, at_row):
        f = att[k]["all"]["per_layer_head"][li][h]
        if k == "softmax":
            return ""
        if k == "diff_v2":
            return (", gate %.2f at this row" % maps[k][li][h]["weight"][ep.question] if at_row else
                    ", mean gate %.2f" % f["weight"])
        return ", λ %.3f" % f["weight"]

    labels = {k: "L%d.H%d%s" % (*heads_of[k], weight_label(k, *heads_of[k], True)) for k in kinds}
    mean_labels = {k: "L%d.H%d%s" % (*heads_of[k], weight_label(k, *heads_of[k], False)) for k in kinds}
    drawn = {"question_rows.png": {"episode": {"tokens": ep.tokens, "answer": ep.answer,
                                               "needles": ep.needles, "question_row": ep.question},
                                   "rows": {}}}
    for k in kinds:
        li, h = heads_of[k]
        m = maps[k][li][h]
        rows = draw_maps(out, k, li, h, m, ep, "%s: retrieval head %s on one episode (L = %d, "
                         "asked needle at depth %d%%)" % (k, labels[k], ep.context_len,
                                                          ep.depth_percent))
        drawn["question_rows.png"]["rows"][k] = {"layer": li, "head": h, "parts": rows}
        drawn["maps_%s.png" % k] = {
            "layer": li, "head": h, "weight_per_row": [float("%.4g" % w) for w in m["weight"]],
            "maps": {name: [[float("%.4g" % x) for x in row[:n + 1]] for n, row in enumerate(m[name])]
                     for name in MAP_NAMES if has_map(m, name)}}
        draw_heads(out, k, maps[k], ep, lambda a, b, k=k: weight_label(k, a, b, True))
        drawn["heads_%s.png" % k] = {"L%d.H%d" % (a, b): [float("%.4g" % x) for x in
                                                        maps[k][a][b]["combined"][ep.question, :ep.question + 1]]
                                     for a in range(len(maps[k])) for b in range(len(maps[k][0]))}
    draw_question_rows(out, kinds, heads_of, maps, labels, ep)
    drawn["depth.png"] = draw_depth(out, kinds, att, heads_of, mean_labels, depth_sets, depth_percent)
    return drawn
