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
    per-row correctness, and (want_maps) the attention measures [rows, layers, heads, 5]."""
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


def row_measures(maps, b, n, answer, noise):
    """docs/retrieval.md "Attention measure": for query row n of episode b, per layer and head,
    [answer, noise, negative mass, negative fraction, row sum] of the combined map."""
    out = []
    for m in maps:  # layer
        row = m[b, :, n, :n + 1]  # [H, n+1]: the keys row n may see
        S = row.sum(-1)
        ans = row[:, answer].sum(-1) / S
        noi = row[:, noise].sum(-1) / S
        neg = row.clamp(max=0).sum(-1).neg() / S
        negf = (row < 0).to(row.dtype).mean(-1)
        out.append(torch.stack([ans, noi, neg, negf, S], dim=-1))
    return torch.stack(out)  # [layers, H, 5]


MEASURE_NAMES = ["answer", "noise", "negative_mass", "negative_fraction", "row_sum"]


def summarise_measures(rows):
    """rows: list of [layers, H, 5] -> per layer and head the mean of each measure."""
    t = torch.stack(rows).mean(0)  # [layers, H, 5]
    layers = []
    for li in range(t.shape[0]):
        heads = [{nm: round(float(t[li, h, k]), 10) for k, nm in enumerate(MEASURE_NAMES)}
                 for h in range(t.shape[1])]
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
    """The result tables of docs/retrieval.md, from the files this script and the trainer wrote."""
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
    out += ["", "Attention at the question rows (all depths, %d rows; mean over heads, and the "
            "layer's retrieval head = the head with the largest answer mass):" % (
                ATT_EPISODES * len(DEPTHS)), "",
            "| kind | layer | answer (head mean) | noise (head mean) | retrieval head | its answer "
            "| its noise | negative mass (head mean) | negative fraction | row sum |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    best = {}
    for k in kinds:
        with open(os.path.join(data, "expected_%s.json" % k)) as f:
            att = json.load(f)["attention"]
        layers = att["all_depths"]["per_layer_head"]
        top = None
        for li, heads in enumerate(layers):
            hm = {m: sum(h[m] for h in heads) / len(heads) for m in MEASURE_NAMES}
            bh = max(range(len(heads)), key=lambda h: heads[h]["answer"])
            if top is None or heads[bh]["answer"] > top[2]:
                top = (li, bh, heads[bh]["answer"])
            out.append("| %s | %d | %.3f | %.3f | %d | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
                k, li, hm["answer"], hm["noise"], bh, heads[bh]["answer"], heads[bh]["noise"],
                hm["negative_mass"], hm["negative_fraction"], hm["row_sum"]))
        best[k] = (top, att)
    out += ["", "By depth of the asked needle, for each model's retrieval head (the layer and head "
            "with the largest answer mass over all depths), answer / noise:", "",
            "| kind | layer.head | " + " | ".join("%d%%" % round(100 * d) for d in DEPTHS) + " |",
            "|---|---|" + "---|" * len(DEPTHS)]
    for k in kinds:
        (li, h, _), att = best[k]
        row = []
        for d in DEPTHS:
            m = att["att_L%d_depth%d" % (TRAIN_LEN, round(100 * d))][
                "per_layer_head"][li][h]
            row.append("%.3f / %.3f" % (m["answer"], m["noise"]))
        out.append("| %s | %d.%d | " % (k, li, h) + " | ".join(row) + " |")
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
