#!/usr/bin/python3
"""The evaluation set and the expected figures of the retrieval models (docs/retrieval.md).

    /usr/bin/python3 tools/retrieval_figures.py            # episodes + expected figures, all kinds
    /usr/bin/python3 tools/retrieval_figures.py --table    # also the larger PyTorch-only accuracy
                                                           # table of docs/retrieval.md (slower)

Writes
    tests/data/retrieval/episodes.json           the fixed-seed evaluation episodes
    tests/data/retrieval/expected_<kind>.json    accuracy and attention figures per kind,
                                                 computed in float64 from the stored weights
    tests/data/retrieval/table.json              (--table) PyTorch accuracies, more episodes
Formats and definitions: docs/retrieval.md. The models are read from models/retrieval/<kind>/.
"""

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import retrieval_kinds as K  # noqa: E402
import retrieval_model as M  # noqa: E402
from retrieval_kinds import DATA, MODELS  # noqa: E402

from retrieval_episodes import (ACC_EPISODES, ATT_EPISODES, CELLS, DEPTHS,  # noqa: E402
                                EVAL_SEED, LENGTH_FACTORS, TABLE_EPISODES, TRAIN_LEN, make_sets,
                                vocab)
import retrieval_episodes as E  # noqa: E402

# Two rows whose float64 logits differ by less than this at the top are reported as near-ties
# (a float32 implementation may pick either).
NEAR_TIE = 1e-3


def load_model(kind, dtype, models=MODELS):
    return M.load_model(kind, dtype, models)


def run_set(params, cfg, st, want_maps, batch):
    """Forward every episode of a set (all have the same length). Returns predicted ids, margins,
    per-row correctness, and (want_maps) each row's sums [layers, heads, len(SUMS)]."""
    eps = st["episodes"]
    preds, margins, right, measures = [], [], [], []
    for i in range(0, len(eps), batch):
        chunk = eps[i:i + batch]
        tok = torch.tensor([e["tokens"] for e in chunk])
        sp = torch.tensor([e["score_pos"] for e in chunk])
        with torch.no_grad():
            if want_maps:
                logits, maps = M.forward(tok, params, cfg, want_maps=True)
                lg = torch.gather(logits, 1, sp.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
            else:
                lg = M.forward(tok, params, cfg, positions=sp)
        top2 = lg.topk(2, dim=-1)
        for b, e in enumerate(chunk):
            for r in range(len(e["score_pos"])):
                p = int(top2.indices[b, r, 0])
                preds.append(p)
                margins.append(float(top2.values[b, r, 0] - top2.values[b, r, 1]))
                right.append(p == e["targets"][r])
                if want_maps:
                    measures.append(row_measures(maps, b, e["score_pos"][r], e["answer"][r],
                                                 e["noise"]))
    return preds, margins, right, measures


# The sums of one combined row c over its visible keys j <= n (docs/analysis.md, "The measures").
SUMS = ["row_sum", "abs_sum", "answer_mass", "answer_abs", "noise_mass", "noise_abs",
        "noise_positive", "noise_negative", "negative_abs", "negatives", "visible", "one"]

# The figures of the expected files: (numerator, denominator) sums, the figure of many rows being
# sum(numerator) / sum(denominator) over the rows (docs/analysis.md, "Averaging and standard errors").
FIGURES = {
    "answer_share": ("answer_abs", "abs_sum"),
    "noise_share": ("noise_abs", "abs_sum"),
    "negative_share": ("negative_abs", "abs_sum"),
    "answer_mass": ("answer_mass", "one"),
    "noise_mass": ("noise_mass", "one"),
    "noise_positive": ("noise_positive", "one"),
    "noise_negative": ("noise_negative", "one"),
    "row_sum": ("row_sum", "one"),
    "answer_normalised": ("answer_mass", "row_sum"),
    "noise_normalised": ("noise_mass", "row_sum"),
    "negative_fraction": ("negatives", "visible"),
}


def row_measures(maps, b, n, answer, noise):
    """For query row n of episode b, per layer and head, the SUMS of the combined map's row."""
    out = []
    for m in maps:  # layer
        c = m[b, :, n, :n + 1]  # [H, n+1]: the keys row n may see
        a, z = c[:, answer], c[:, noise]
        sums = {"row_sum": c.sum(-1), "abs_sum": c.abs().sum(-1),
                "answer_mass": a.sum(-1), "answer_abs": a.abs().sum(-1),
                "noise_mass": z.sum(-1), "noise_abs": z.abs().sum(-1),
                "noise_positive": z.clamp(min=0).sum(-1), "noise_negative": z.clamp(max=0).sum(-1),
                "negative_abs": -c.clamp(max=0).sum(-1),
                "negatives": (c < 0).to(c.dtype).sum(-1),
                "visible": torch.full_like(c[:, 0], n + 1), "one": torch.ones_like(c[:, 0])}
        out.append(torch.stack([sums[k] for k in SUMS], dim=-1))
    return torch.stack(out)  # [layers, H, len(SUMS)]


def ratio_of_sums(x, y):
    """sum x / sum y over rows, and its standard error sqrt(sum (x - R y)^2 / (n (n-1))) / mean y
    (two passes: an independent transcription of analysis/ratio_of_sums.hpp)."""
    n = x.shape[0]
    r = x.sum(0) / y.sum(0)
    se = ((x - r * y) ** 2).sum(0).div(n * (n - 1)).sqrt() / y.mean(0)
    return r, se


def summarise_measures(rows):
    """rows: list of [layers, H, len(SUMS)] -> per layer and head each figure and its _se."""
    t = torch.stack(rows)  # [rows, layers, H, len(SUMS)]
    layers = []
    for li in range(t.shape[1]):
        heads = []
        for h in range(t.shape[2]):
            fig = {}
            for nm, (num, den) in FIGURES.items():
                r, se = ratio_of_sums(t[:, li, h, SUMS.index(num)], t[:, li, h, SUMS.index(den)])
                fig[nm] = round(float(r), 10)
                fig[nm + "_se"] = round(float(se), 10)
            heads.append(fig)
        layers.append(heads)
    return layers


def expected_for(kind, sets, models):
    cfg, params = load_model(kind, torch.float64, models)
    out = {"kind": kind, "model": "models/retrieval/%s" % kind, "precision": "float64",
           "near_tie": NEAR_TIE, "accuracy": {}, "attention": {}}
    all_att = []
    for st in sets:
        L = st["context_len"]
        batch = max(1, 4096 // (L + 16)) if st["purpose"] == "accuracy" else 8
        att = st["purpose"] == "attention"
        preds, margins, right, meas = run_set(params, cfg, st, att, batch)
        out["accuracy"][st["name"]] = {
            "correct": int(sum(right)), "total": len(right),
            "accuracy": round(sum(right) / len(right), 10),
            "predicted": preds, "margin": [round(m, 6) for m in margins],
            "near_ties": int(sum(m < NEAR_TIE for m in margins))}
        if att:
            out["attention"][st["name"]] = {"depth": st["depth"], "rows": len(meas),
                                            "per_layer_head": summarise_measures(meas)}
            all_att += meas
    out["attention"]["all_depths"] = {"depth": None, "rows": len(all_att),
                                      "per_layer_head": summarise_measures(all_att)}
    return out


def table(kind, train_len, seed, models):
    """PyTorch float32 accuracies on larger fixed-seed sets (not stored)."""
    cfg, params = load_model(kind, torch.float32, models)
    sets = make_sets(vocab(), train_len, TABLE_EPISODES, seed, with_attention=False)
    res = {}
    for st in sets:
        L = st["context_len"]
        _, _, right, _ = run_set(params, cfg, st, False, max(1, 8192 // (L + 16)))
        res[st["name"]] = round(sum(right) / len(right), 4)
    return res


def run(kinds, models=MODELS, data=DATA, with_table=False, log=print):
    """Write the episodes, the expected figures of each kind and (with_table) the table."""
    v = vocab()
    train_len = TRAIN_LEN
    sets = make_sets(v, train_len, ACC_EPISODES, EVAL_SEED)
    os.makedirs(data, exist_ok=True)
    E.write(os.path.join(data, "episodes.json"), E.document(v, train_len, sets, EVAL_SEED))
    for kind in kinds:
        exp = expected_for(kind, sets, models)
        with open(os.path.join(data, "expected_%s.json" % kind), "w") as f:
            json.dump(exp, f, separators=(",", ":"))
            f.write("\n")
        accs = {k: v["accuracy"] for k, v in exp["accuracy"].items()}
        log("%s %s" % (kind, json.dumps(accs)))
    if with_table:
        path = os.path.join(data, "table.json")
        old = {}
        if os.path.exists(path):
            with open(path) as f:
                old = json.load(f).get("accuracy", {})
        for kind in kinds:
            old[kind] = table(kind, train_len, E.TABLE_SEED, models)
            log("%s table %s" % (kind, json.dumps(old[kind])))
        with open(path, "w") as f:
            json.dump({"precision": "float32", "seed": E.TABLE_SEED,
                       "episodes_per_cell": {"L%d" % (train_len * k): n
                                             for k, n in TABLE_EPISODES.items()},
                       "accuracy": {k: old[k] for k in sorted(old)}}, f, indent=1)
            f.write("\n")


def markdown(kinds, models=MODELS, data=DATA):
    """The training and PyTorch accuracy tables of docs/retrieval.md, from the files this script and
    the trainer wrote (the attention tables are the C++ report's, docs/retrieval/tables.md)."""
    out = []
    cells = ["N%d_R%d" % c for c in CELLS]
    out += ["| kind | parameters | wall time (s) | final loss | accuracy at L = %d (min / mean "
            "over the cells) | solved |" % TRAIN_LEN, "|---|---|---|---|---|---|"]
    for k in kinds:
        with open(os.path.join(models, k, "loss.json")) as f:
            lj = json.load(f)
        acc = lj["accuracy_train_len"]
        out.append("| %s | %d | %.0f | %.2e | %.3f / %.3f | %s |" % (
            k, lj["params"], lj["wall_seconds"], lj["curve"][-1]["loss"], min(acc.values()),
            sum(acc.values()) / len(acc), "yes" if min(acc.values()) >= 0.9 else "**no**"))
    tab_path = os.path.join(data, "table.json")
    if os.path.exists(tab_path):
        with open(tab_path) as f:
            tab = json.load(f)
        for fct in LENGTH_FACTORS:
            L = TRAIN_LEN * fct
            out += ["", "PyTorch float32 accuracy at L = %d (%d episodes per cell, seed %d):" % (
                L, TABLE_EPISODES[fct], tab["seed"]), "",
                "| kind | " + " | ".join(c.replace("_", " ") for c in cells) + " |",
                "|---|" + "---|" * len(cells)]
            for k in kinds:
                if k in tab["accuracy"]:
                    out.append("| %s | " % k + " | ".join(
                        "%.3f" % tab["accuracy"][k]["acc_L%d_%s" % (L, c)] for c in cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", nargs="*", default=K.NAMES)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--markdown", action="store_true",
                    help="only print the result tables of docs/retrieval.md from the files")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(args.kinds, args.models, args.data))
        return
    torch.set_num_threads(args.threads)
    run(args.kinds, args.models, args.data, args.table, lambda m: print(m, flush=True))


if __name__ == "__main__":
    main()
