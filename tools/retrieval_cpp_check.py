#!/usr/bin/python3
"""Check that the C++ library runs the retrieval models as the PyTorch model does: run
`diffattn-forward --model models/retrieval/<kind> --tokens ... --logits FILE` on a few episodes of
tests/data/retrieval/episodes.json and compare every logit with the float64 PyTorch forward
(tools/retrieval_model.py) of the same stored weights.

    /usr/bin/python3 tools/retrieval_cpp_check.py [--exe build/release/examples/diffattn-forward]
                                                  [--precision float|double] [--per-set 1]

Prints the largest |difference| per kind and fails (exit 1) above the tolerance: 64 float eps
(or 1e-9 in double) times max(1, max |logit|), the bound tests/model/test_golden_models.cpp uses;
in double plus half a float ulp (2^-24 relative), because diffattn-forward writes F32 logits.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import retrieval_kinds as K  # noqa: E402
import retrieval_model as M  # noqa: E402
import torch_reference as R  # noqa: E402

ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "release", "examples",
                                                  "diffattn-forward"))
    ap.add_argument("--precision", default="float", choices=["float", "double"])
    ap.add_argument("--per-set", type=int, default=1, help="episodes per episode set")
    ap.add_argument("--kinds", nargs="*", default=K.NAMES)
    ap.add_argument("--models", default=K.MODELS)
    ap.add_argument("--data", default=K.DATA)
    args = ap.parse_args()
    with open(os.path.join(args.data, "episodes.json")) as f:
        sets = json.load(f)["sets"]
    episodes = [e for st in sets for e in st["episodes"][:args.per_set]]
    eps = (1e-9 + 2.0 ** -24) if args.precision == "double" else 64 * torch.finfo(torch.float32).eps
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.safetensors")
        for kind in args.kinds:
            cfg, params = M.load_model(kind, torch.float64, args.models)
            worst = worst_rel = 0.0
            for e in episodes:
                subprocess.run([args.exe, "--model", os.path.join(args.models, kind), "--tokens",
                                " ".join(map(str, e["tokens"])), "--logits", out,
                                "--precision", args.precision],
                               check=True, stdout=subprocess.DEVNULL)
                cpp = R.read_safetensors(out)[0]["logits"]
                with torch.no_grad():
                    ref = M.forward(torch.tensor([e["tokens"]]), params, cfg)[0]
                diff = float((cpp - ref).abs().max())
                worst = max(worst, diff)
                worst_rel = max(worst_rel, diff / max(1.0, float(ref.abs().max())))
            ok = worst_rel <= eps
            bad += not ok
            print("%-20s %d episodes (T up to %d): max |C++ - PyTorch| %.3g, relative %.3g "
                  "(tolerance %.3g) %s" % (kind, len(episodes), max(len(e["tokens"]) for e in episodes),
                                           worst, worst_rel, eps, "ok" if ok else "FAIL"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
