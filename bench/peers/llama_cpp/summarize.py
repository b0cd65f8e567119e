#!/usr/bin/env python3
"""Table of the timing rounds (rounds.py OUT/runs.jsonl): medians and spreads, bytes of weights
read per generated token, the share of the streaming-read roofline, and diffattn / llama.cpp ratios
at each weight type.

Usage: /usr/bin/python3 summarize.py OUT [--exclude-gave-up]
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.environ.get("PEER_DIR", os.path.abspath("peer-work")), "llama.cpp", "gguf-py"))
import gguf  # noqa: E402

PEER = os.environ.get("PEER_DIR", os.path.abspath("peer-work"))
D, HKV, HD, L = 2048, 16, 128, 32
TYPES = ["F32", "BF16", "Q8_0", "Q4_0"]


def gguf_bytes(path):
    r = gguf.GGUFReader(path)
    total = sum(int(t.n_bytes) for t in r.tensors)
    types = {}
    for t in r.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + int(t.n_bytes)
    return total, types


def motif_params(path):
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        idx = json.load(f)
    n = 0
    for shard in sorted(set(idx["weight_map"].values())):
        with open(os.path.join(path, shard), "rb") as f:
            hl = int.from_bytes(f.read(8), "little")
            h = json.loads(f.read(hl))
        for k, v in h.items():
            if k != "__metadata__":
                c = 1
                for s in v["shape"]:
                    c *= s
                n += c
    return n


def med(xs):
    return statistics.median(xs) if xs else None


def spread(xs):
    if not xs:
        return ""
    m = statistics.median(xs)
    return f"{min(xs):.3g}-{max(xs):.3g} (±{100 * (max(xs) - min(xs)) / 2 / m:.0f}%)"


def main():
    out = sys.argv[1]
    exclude = "--exclude-gave-up" in sys.argv
    runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl"))]
    if exclude:
        runs = [r for r in runs if r.get("wait", {}).get("quiet") != "gave_up"]
    bw = {t: [r["median_GB_s"] for r in runs if r["program"] == "stream" and r["threads"] == t and "median_GB_s" in r]
          for t in (1, 2)}
    bw_best = {t: [r["best_GB_s"] for r in runs if r["program"] == "stream" and r["threads"] == t and "best_GB_s" in r]
               for t in (1, 2)}
    print("## Streaming-read bandwidth (1 GiB sum), per round: median of 11 passes")
    for t in (1, 2):
        print(f"threads {t}: median over rounds {med(bw[t]):.2f} GB/s, rounds {bw[t]}, best passes {bw_best[t]}")
    print()

    # bytes read per generated token: every weight once (the tied embedding is the head), plus the
    # KV cache at the mean context of a generation of GEN tokens from one token
    gen = max([r.get("gen", 64) for r in runs] or [64])
    ctx = gen / 2
    wbytes = {}
    for t in TYPES:
        p = f"{PEER}/models/llama_2p6b_{t.lower()}.gguf"
        if os.path.exists(p):
            total, types = gguf_bytes(p)
            wbytes[("llama.cpp", t)] = (total, total + ctx * 2 * HKV * HD * 2 * L, types)  # f16 K and V
    for t in TYPES:  # diffattn's stored bytes as the program printed them (DecoderModel::stored_bytes)
        stored = [r["stored_MB"] * 1e6 for r in runs if r["program"] == "diffattn" and r["wtype"] == t
                  and "stored_MB" in r]
        if stored:
            w = stored[0]
            wbytes[("diffattn", t)] = (w, w + ctx * 2 * HKV * HD * 4 * L, {t: w})  # f32 K and V
    print("## Bytes of weights per generated token")
    for k, (w, wk, types) in wbytes.items():
        print(f"{k[0]} {k[1]}: weights {w / 1e9:.3f} GB ({', '.join(f'{a} {b / 1e9:.3f} GB' for a, b in types.items())}),"
              f" with KV at mean context {ctx:.0f}: {wk / 1e9:.3f} GB")
    print()

    rows = {}
    for r in runs:
        if r["program"] == "stream" or r.get("rc") != 0:
            continue
        key = (r["program"], r["wtype"], r["threads"])
        d = rows.setdefault(key, {"pp": [], "tg": [], "tg_dec": [], "rss": [], "load": [], "gave_up": 0, "n": 0})
        d["n"] += 1
        if r.get("wait", {}).get("quiet") == "gave_up":
            d["gave_up"] += 1
        if "pp_tok_s" in r:
            d["pp"].append(r["pp_tok_s"])
        if "tg_tok_s" in r:
            d["tg"].append(r["tg_tok_s"])
        if "tg_tok_s_decode_only" in r:
            d["tg_dec"].append(r["tg_tok_s_decode_only"])
        if r.get("peak_rss_kb"):
            d["rss"].append(r["peak_rss_kb"] / 1024 / 1024)
        if "load_s_est" in r:
            d["load"].append(r["load_s_est"])

    print("## Table (medians over rounds; spread = min-max)")
    print(f"| program | weights | threads | pp512 tok/s | tg{gen} tok/s | GB read / token | roofline share (tg) | peak RSS GiB | runs (gave-up waits) |")
    print("|---|---|---|---|---|---|---|---|---|")
    order = sorted(rows, key=lambda k: (TYPES.index(k[1]), k[0] != "diffattn", k[2]))
    for key in order:
        d = rows[key]
        w, wk, _ = wbytes[(key[0], key[1])]
        tg = med(d["tg"])
        share = tg * wk / 1e9 / med(bw[key[2]]) if tg and bw[key[2]] else None
        extra = f"; decode-only {med(d['tg_dec']):.3g}" if d["tg_dec"] else ""
        print(f"| {key[0]} | {key[1]} | {key[2]} | {med(d['pp']):.3g} [{spread(d['pp'])}] | {tg:.3g} [{spread(d['tg'])}{extra}] |"
              f" {wk / 1e9:.2f} | {100 * share:.0f}% | {med(d['rss']):.2f} [{spread(d['rss'])}] | {d['n']} ({d['gave_up']}) |")
    print()
    print("## diffattn load of its checkpoint (wall time minus the program's own compute times)")
    import re
    for r in runs:
        if r["program"] == "diffattn" and "load_s_est" in r:
            raw = os.path.join(out, "raw", f"r{r['round']}_{r['item']}.txt")
            txt = open(raw).read() if os.path.exists(raw) else ""
            m = re.search(r"File system inputs: (\d+)", txt)
            read_gb = int(m.group(1)) * 512 / 1e9 if m else float("nan")
            print(f"round {r['round']} {r['item']}: load {r['load_s_est']:.1f} s, read from disk {read_gb:.2f} GB"
                  f" ({'cold' if read_gb > 1 else 'page cache'})")
    print()
    print("## Ratios diffattn / llama.cpp at each weight type (medians)")
    for t in (1, 2):
        for w in TYPES:
            dk, lk = ("diffattn", w, t), ("llama.cpp", w, t)
            if dk not in rows or lk not in rows:
                continue
            pp = med(rows[dk]["pp"]) / med(rows[lk]["pp"])
            tg = med(rows[dk]["tg"]) / med(rows[lk]["tg"])
            print(f"threads {t}: {w}: pp512 {pp:.3f}x, tg{gen} {tg:.3f}x")


if __name__ == "__main__":
    main()
