#!/usr/bin/python3
"""Train the tiny retrieval models of docs/retrieval.md (issue 19), one per attention kind, with
the same width, depth, data and steps, and write them in our model format (docs/math.md §5).

    /usr/bin/python3 tools/train_retrieval.py                 # all six kinds, one after another
    /usr/bin/python3 tools/train_retrieval.py --kinds diff    # only some (names as in KINDS)
    /usr/bin/python3 tools/train_retrieval.py --threads 2     # more torch threads (default 1)
    /usr/bin/python3 tools/train_retrieval.py --steps 200 --out /tmp/x   # a quick trial run

Writes models/retrieval/<kind>/{config.json, model.safetensors (F32), loss.json, MODEL_CARD.md}.
Every kind trains on the same batches (one data seed) from its own fixed weight seed.
Then run tools/retrieval_figures.py for the evaluation set and the expected figures.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import retrieval_kinds as K  # noqa: E402  the kinds and their configs (shared with the report tools)
import retrieval_model as M  # noqa: E402
import retrieval_task as task  # noqa: E402
import torch_reference as R  # noqa: E402
from retrieval_kinds import KINDS  # noqa: E402

OUT_DIR = K.MODELS

# The task and the schedule (docs/retrieval.md "Training").
from retrieval_episodes import TASK, TRAIN_LEN  # noqa: E402
SCHED = {
    "steps": 1500, "batch": 64, "lr": 3e-3, "warmup": 100, "final_lr_frac": 0.05,
    "weight_decay": 0.01, "betas": [0.9, 0.98], "grad_clip": 1.0, "init_std": 0.02,
    "train_len": TRAIN_LEN,   # context length L at the end of the curriculum
    "curriculum": [[0.0, 16], [0.1, 32], [0.25, 48], [0.4, 64]],  # [from fraction, L]
    "needles": [1, 6],        # N uniform in this range, per batch; every needle is asked
    "data_seed": 1, "weight_seed": 2, "eval_seed": 3, "eval_episodes": 500,
}


def context_len(step, sched):
    frac = step / sched["steps"]
    L = sched["curriculum"][0][1]
    for f, l in sched["curriculum"]:
        if frac >= f:
            L = l
    return L


def lr_at(step, sched):
    if step < sched["warmup"]:
        return sched["lr"] * (step + 1) / sched["warmup"]
    t = (step - sched["warmup"]) / max(1, sched["steps"] - sched["warmup"])
    lo = sched["final_lr_frac"]
    return sched["lr"] * (lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * t)))


def batch_stream(vocab, sched):
    """The same batches for every kind: (L, N, tokens, score_pos, targets) per step."""
    rng = np.random.default_rng(sched["data_seed"])
    lo, hi = sched["needles"]
    for step in range(sched["steps"]):
        L = context_len(step, sched)
        N = int(rng.integers(lo, hi + 1))
        N = min(N, L // vocab.needle_len)
        tok, sp, tg = task.make_batch(rng, vocab, sched["batch"], L, N, N)
        yield step, L, N, torch.from_numpy(tok), torch.from_numpy(sp), torch.from_numpy(tg)



def accuracy(params, cfg, vocab, L, N, R_, episodes, seed, batch=100):
    rng = np.random.default_rng(seed)
    right = total = 0
    with torch.no_grad():
        while total < episodes * R_:
            b = min(batch, episodes - total // R_)
            tok, sp, tg = task.make_batch(rng, vocab, b, L, N, R_)
            lg = M.forward(torch.from_numpy(tok), params, cfg, positions=torch.from_numpy(sp))
            right += int((lg.argmax(-1) == torch.from_numpy(tg)).sum())
            total += tg.size
    return right / total


def train(kind, sched, vocab, threads, log):
    torch.set_num_threads(threads)
    cfg = K.model_config(kind, vocab.size)
    fc = M.full_config(cfg)
    g = torch.Generator().manual_seed(sched["weight_seed"])
    params = M.init_params(fc, g, sched["init_std"])
    for t in params.values():
        t.requires_grad_(True)
    decay = [t for n, t in params.items() if t.dim() >= 2]
    no_decay = [t for n, t in params.items() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": sched["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=sched["lr"], betas=tuple(sched["betas"]))
    curve = []
    t0 = time.time()
    run_loss = run_acc = 0.0
    run_n = 0
    every = 50
    for step, L, N, tok, sp, tg in batch_stream(vocab, sched):
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, sched)
        lg = M.forward(tok, params, fc, positions=sp)
        loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tg.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), sched["grad_clip"])
        opt.step()
        run_loss += float(loss)
        run_acc += float((lg.argmax(-1) == tg).float().mean())
        run_n += 1
        if (step + 1) % every == 0 or step + 1 == sched["steps"]:
            rec = {"step": step + 1, "context_len": L, "loss": run_loss / run_n,
                   "acc": run_acc / run_n, "lr": lr_at(step, sched),
                   "seconds": round(time.time() - t0, 1)}
            curve.append(rec)
            log("%s step %5d L %3d loss %.4f acc %.3f lr %.2e %6.1fs" % (
                kind, rec["step"], L, rec["loss"], rec["acc"], rec["lr"], rec["seconds"]))
            run_loss = run_acc = 0.0
            run_n = 0
    wall = time.time() - t0
    params = {k: v.detach() for k, v in params.items()}
    return cfg, params, curve, wall


def write_model(kind, out_dir, cfg, params, curve, wall, sched, vocab, threads, log):
    d = os.path.join(out_dir, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    ordered = {n: params[n] for n in M.param_shapes(cfg)}
    R.write_safetensors(os.path.join(d, "model.safetensors"), ordered,
                        metadata={"format": "pt", "task": "docs/retrieval.md"})
    L = sched["train_len"]
    acc = {}
    for N in (1, 2, 4, 6):
        for R_ in (1, 2):
            if R_ <= N:
                acc["N%d_R%d" % (N, R_)] = accuracy(params, cfg, vocab, L, N, R_,
                                                     sched["eval_episodes"], sched["eval_seed"])
    nparams = sum(t.numel() for t in params.values())
    with open(os.path.join(d, "loss.json"), "w") as f:
        json.dump({"kind": kind, "wall_seconds": round(wall, 1), "threads": threads,
                   "schedule": sched, "task": TASK, "params": nparams,
                   "accuracy_train_len": acc, "curve": curve}, f, indent=1)
        f.write("\n")
    log("%s accuracy at L=%d: %s" % (kind, L, json.dumps(acc)))
    with open(os.path.join(d, "MODEL_CARD.md"), "w") as f:
        f.write(model_card(kind, cfg, nparams, curve, wall, sched, acc, threads))
    return acc


def model_card(kind, cfg, nparams, curve, wall, sched, acc, threads):
    mean_acc = sum(acc.values()) / len(acc)
    solved = min(acc.values()) >= 0.9
    last = curve[-1]
    lines = [
        "# Retrieval model: %s" % kind, "",
        "A tiny decoder trained on the synthetic multi-needle key-value retrieval task of",
        "docs/retrieval.md by `tools/train_retrieval.py` (PyTorch %s, float32, CPU, %d thread%s)." % (
            torch.__version__.split("+")[0], threads, "" if threads == 1 else "s"),
        "Weights: `model.safetensors` (F32, names and math as docs/math.md §3-§5); loss curve:",
        "`loss.json`.", "",
        "| | |", "|---|---|",
        "| attention | `%s`%s |" % (cfg["attention"],
                                   " (`dint_integral` %s)" % cfg["dint_integral"]
                                   if cfg["attention"] == "dint" else ""),
        "| sizes | D %d, %d layers, %d heads (%d kv), map width d %d, SwiGLU %d, vocab %d |" % (
            cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], M.map_width(cfg), cfg["intermediate_size"],
            cfg["vocab_size"]),
        "| parameters | %d |" % nparams,
        "| task | %s needles (%s), %d noise / %d key / %d value tokens, "
        "N in %d..%d needles, every needle asked |" % (
            TASK["style"], "one token PAIR(key, value)" if TASK["style"] == "pair"
            else "NDL key value", TASK["n_noise"], TASK["n_keys"], TASK["n_values"],
            sched["needles"][0], sched["needles"][1]),
        "| training length | context L = %d (curriculum %s) |" % (
            sched["train_len"], ", ".join("L %d from %d%%" % (l, round(100 * f))
                                          for f, l in sched["curriculum"])),
        "| steps | %d x batch %d, AdamW lr %g (warmup %d, cosine to %g x), seeds data %d "
        "weights %d |" % (sched["steps"], sched["batch"], sched["lr"], sched["warmup"],
                          sched["final_lr_frac"], sched["data_seed"], sched["weight_seed"]),
        "| wall time | %.0f s (one thread, on a 2-core machine shared with other work) |" % wall,
        "| final loss | %.2e (mean of the last %d steps), training accuracy %.3f |" % (
            last["loss"], 50, last["acc"]),
        "| accuracy at L = %d | %s (PyTorch float32, %d episodes per cell, seed %d) |" % (
            sched["train_len"], ", ".join("%s %.3f" % (k, v) for k, v in acc.items()),
            sched["eval_episodes"], sched["eval_seed"]),
        "| solved (>= 0.9 in every cell) | %s |" % ("yes" if solved else "**no**"),
        "",
        "Accuracy is per question: the argmax of the next-token logits at the question's key",
        "token equals the asked value. Mean over the cells: %.3f." % mean_acc,
        "The figures at 4x and 16x the training length and the attention masses are in",
        "docs/retrieval.md and tests/data/retrieval/expected_%s.json; as the C++ program" % kind,
        "measures them on more episodes (scripts/retrieval-report.sh), in",
        "docs/retrieval/tables.md.", "",
    ]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", nargs="*", default=list(KINDS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--set", nargs="*", default=[], help="schedule overrides key=json")
    ap.add_argument("--cards-only", action="store_true",
                    help="rewrite MODEL_CARD.md of trained models from their loss.json")
    ap.add_argument("--no-figures", action="store_true",
                    help="skip tools/retrieval_figures.py (episodes, expected figures, table)")
    args = ap.parse_args()
    sched = dict(SCHED)
    if args.steps:
        sched["steps"] = args.steps
    for kv in args.set:
        k, v = kv.split("=", 1)
        sched[k] = json.loads(v)
    vocab = task.Vocab(TASK["n_noise"], TASK["n_keys"], TASK["n_values"], TASK["style"])

    def log(msg):
        print(msg, flush=True)

    if args.cards_only:
        for kind in args.kinds:
            d = os.path.join(args.out, kind)
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            with open(os.path.join(d, "loss.json")) as f:
                lj = json.load(f)
            with open(os.path.join(d, "MODEL_CARD.md"), "w") as f:
                f.write(model_card(kind, cfg, lj["params"], lj["curve"], lj["wall_seconds"],
                                   lj["schedule"], lj["accuracy_train_len"], lj["threads"]))
        return
    for kind in args.kinds:
        cfg, params, curve, wall = train(kind, sched, vocab, args.threads, log)
        write_model(kind, args.out, cfg, params, curve, wall, sched, vocab, args.threads, log)
    if not args.no_figures:
        import retrieval_figures  # the trainer's last step; retrieval_figures needs nothing of this file
        data = K.DATA if args.out == OUT_DIR else os.path.join(args.out, "data")
        retrieval_figures.run(args.kinds, args.out, data, with_table=True, log=log)


if __name__ == "__main__":
    main()
