#!/usr/bin/python3
"""The evaluation episode sets of the retrieval models (docs/retrieval.md), with numpy alone.

    /usr/bin/python3 tools/retrieval_episodes.py OUT.json [--seed S] [--per-cell report|table|stored]

writes an episodes file (format diffattn-retrieval-episodes-1) that diffattn-analyze --episodes
reads. The stored test set, tests/data/retrieval/episodes.json, is `--seed 1900 --per-cell stored`
(tools/retrieval_figures.py writes it); `--seed 1901 --per-cell table` has the accuracy episodes of
the PyTorch table (table.json); scripts/retrieval-report.sh measures the README's tables on
`--seed 1901 --per-cell report` (the default: more episodes).
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import retrieval_task as task  # noqa: E402

# The task of the shipped models (tools/train_retrieval.py trains on it) and their training length.
TASK = {"style": "pair", "n_noise": 32, "n_keys": 8, "n_values": 8}
TRAIN_LEN = 64

FORMAT = "diffattn-retrieval-episodes-1"
EVAL_SEED = 1900                             # the stored test set
TABLE_SEED = EVAL_SEED + 1                   # the tables (PyTorch table.json, the C++ report)
LENGTH_FACTORS = (1, 4, 16)
CELLS = [(N, R_) for N in (1, 2, 4, 6) for R_ in (1, 2) if R_ <= N]
ACC_EPISODES = {1: 50, 4: 16, 16: 6}       # per (N, R) cell, by length factor (stored set)
TABLE_EPISODES = {1: 200, 4: 60, 16: 20}     # per cell for the PyTorch table (table.json)
REPORT_EPISODES = {1: 500, 4: 200, 16: 100}  # per cell for the C++ report (the README's tables)
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
ATT_NEEDLES, ATT_EPISODES = 4, 40           # attention set: N = 4, R = 1, per depth
REPORT_ATT_EPISODES = 500                    # ... per depth in the C++ report


def vocab():
    return task.Vocab(TASK["n_noise"], TASK["n_keys"], TASK["n_values"], TASK["style"])


def make_sets(v, train_len, episodes_per_cell, seed, with_attention=True,
              attention_episodes=ATT_EPISODES):
    """The list of episode sets (deterministic in seed and the counts)."""
    sets = []
    rng = np.random.default_rng(seed)
    for f in LENGTH_FACTORS:
        L = train_len * f
        for N, R_ in CELLS:
            eps = [task.make_episode(rng, v, L, N, R_) for _ in range(episodes_per_cell[f])]
            sets.append({"name": "acc_L%d_N%d_R%d" % (L, N, R_), "purpose": "accuracy",
                         "context_len": L, "needles": N, "questions": R_, "depth": None,
                         "episodes": eps})
    if with_attention:
        for dp in DEPTHS:
            eps = [task.make_episode(rng, v, train_len, ATT_NEEDLES, 1, depth=dp)
                   for _ in range(attention_episodes)]
            sets.append({"name": "att_L%d_depth%d" % (train_len, round(100 * dp)),
                         "purpose": "attention", "context_len": train_len,
                         "needles": ATT_NEEDLES, "questions": 1, "depth": dp, "episodes": eps})
    return sets


def stored_episode(e, purpose):
    s = {"tokens": e["tokens"], "score_pos": e["score_pos"], "targets": e["targets"],
         "depth": [round(x, 6) for x in e["depth"]]}
    if purpose == "attention":
        s["answer"] = e["answer"]
        s["noise"] = e["noise"]
    return s


def document(v, train_len, sets, seed, generator="tools/retrieval_figures.py"):
    """The episodes file of `sets` (format diffattn-retrieval-episodes-1, docs/retrieval.md)."""
    return {"format": FORMAT, "generator": generator, "seed": seed,
            "train_len": train_len, "vocab": v.describe(),
            "sets": [{k: (st[k] if k != "episodes" else
                          [stored_episode(e, st["purpose"]) for e in st[k]])
                      for k in ("name", "purpose", "context_len", "needles", "questions", "depth",
                                "episodes")} for st in sets]}


def write(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=TABLE_SEED)
    ap.add_argument("--per-cell", choices=("report", "table", "stored"), default="report")
    args = ap.parse_args()
    v = vocab()
    per_cell = {"report": REPORT_EPISODES, "table": TABLE_EPISODES, "stored": ACC_EPISODES}[args.per_cell]
    att = REPORT_ATT_EPISODES if args.per_cell == "report" else ATT_EPISODES
    sets = make_sets(v, TRAIN_LEN, per_cell, args.seed, attention_episodes=att)
    write(args.out, document(v, TRAIN_LEN, sets, args.seed, "tools/retrieval_episodes.py"))


if __name__ == "__main__":
    main()
