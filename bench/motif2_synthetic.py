#!/usr/bin/python3
"""A Motif-2-12.7B-shape checkpoint of random weights, run by diffattn-forward: load time, peak
resident memory, prefill and decode tokens/s (docs/benchmarks.md, "Grouped differential attention
(Motif-2)").

    bench/motif2_synthetic.py [--layers L] [--vocab V] [--dir DIR] [--forward BIN]
                              [--prompt N] [--generate K] [--threads T] [--keep] [-- FLAGS...]

Writes DIR (default /tmp/motif2-synthetic-L<L>) as the Hub ships a Motif-2 checkpoint: config.json
(MotifForCausalLM, hidden 4096, 40 query heads of which 8 noise heads, 16 kv heads, head_dim 128,
intermediate 16384, PolyNorm MLP, untied), BF16 shards (one per layer, one for the embedding,
one for the final norm and lm_head; lambda_* F32, as mlx-motif stores them) with
model.safetensors.index.json. Random weights (numpy, seeded), scaled 1/sqrt(fan_in) so that the
activations stay O(1). A directory this script wrote for the same shape is reused unless it is
missing or different (config.json compared).

Then runs BIN (default build/release/examples/diffattn-forward) once:
    BIN --model DIR --tokens <N ids> --generate K --threads T FLAGS...
and reports what it prints (load: ms; forward: prefill ms and tokens/s; generation time) with the
child's peak RSS (getrusage of the waited-for child). Decode tokens/s is (K - 1) / (generation time
- forward time): the generation's own time minus one prefill of the same tokens (its KV-cache
prefill, which costs what the timed forward costs), over the K - 1 one-token steps after it.
FLAGS go to diffattn-forward unchanged (e.g. --precision double, --kv-cache bf16, or the quantized
weights the lead adds: --weights bf16|q8_0|q4_0).

--layers: 40 is the released model, ~51 GB of float weights once loaded; on a smaller machine run
fewer (the per-layer figures scale), and say so. --vocab: default 219520 (Motif's tokenizer).
Nothing is asserted: this is a measurement.
"""

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HIDDEN, HEADS, NOISE, KV, HEAD_DIM, FFN = 4096, 40, 8, 16, 128, 16384


def config(layers, vocab):
    """config.json of the synthetic checkpoint (Motif-2-12.7B's shape, docs/checkpoints.md)."""
    return {"architectures": ["MotifForCausalLM"], "model_type": "Motif", "hidden_size": HIDDEN,
            "num_attention_heads": HEADS, "num_noise_heads": NOISE, "num_key_value_heads": KV,
            "head_dim": HEAD_DIM, "k_ratio": 1, "intermediate_size": FFN,
            "num_hidden_layers": layers, "vocab_size": vocab, "hidden_act": "poly_norm",
            "rms_norm_eps": 1e-06, "attn_rms_norm_eps": 1e-05, "rope_theta": 500000.0,
            "max_position_embeddings": 16384, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "use_bias": False}


def layer_shapes(i):
    """(name, shape, dtype) of layer i's tensors."""
    p = "model.layers.%d." % i
    signal = HEADS - NOISE
    return [(p + "input_layernorm.weight", [HIDDEN], "BF16"),
            (p + "self_attn.q_proj.weight", [HEADS * HEAD_DIM, HIDDEN], "BF16"),
            (p + "self_attn.k_proj.weight", [KV * HEAD_DIM, HIDDEN], "BF16"),
            (p + "self_attn.v_proj.weight", [KV * HEAD_DIM, HIDDEN], "BF16"),
            (p + "self_attn.o_proj.weight", [HIDDEN, 2 * signal * HEAD_DIM], "BF16"),
            (p + "self_attn.lambda_q1", [HEAD_DIM], "F32"),
            (p + "self_attn.lambda_k1", [HEAD_DIM], "F32"),
            (p + "self_attn.lambda_q2", [HEAD_DIM], "F32"),
            (p + "self_attn.lambda_k2", [HEAD_DIM], "F32"),
            (p + "self_attn.subln.weight", [2 * HEAD_DIM], "BF16"),
            (p + "post_attention_layernorm.weight", [HIDDEN], "BF16"),
            (p + "mlp.gate_proj.weight", [FFN, HIDDEN], "BF16"),
            (p + "mlp.up_proj.weight", [FFN, HIDDEN], "BF16"),
            (p + "mlp.down_proj.weight", [HIDDEN, FFN], "BF16"),
            (p + "mlp.act_fn.weight", [3], "BF16"),
            (p + "mlp.act_fn.bias", [1], "BF16")]


def values(rng, name, shape):
    """float32 values of one tensor: norms near 1, lambda vectors small, PolyNorm's weights near
    its init (1/3 each, bias 0), matrices N(0, 1/fan_in)."""
    count = int(np.prod(shape))
    if name.endswith("norm.weight") or name.endswith("subln.weight"):
        return 1.0 + 0.05 * rng.standard_normal(count, dtype=np.float32)
    if ".lambda_" in name:
        return 0.1 * rng.standard_normal(count, dtype=np.float32)
    if name.endswith("act_fn.weight"):
        return np.full(count, 1.0 / 3.0, dtype=np.float32)
    if name.endswith("act_fn.bias"):
        return np.zeros(count, dtype=np.float32)
    scale = np.float32(1.0 / np.sqrt(shape[-1]))
    out = np.empty(count, dtype=np.float32)
    step = 1 << 24
    for begin in range(0, count, step):  # in pieces: no second full-size temporary
        piece = rng.standard_normal(min(step, count - begin), dtype=np.float32)
        piece *= scale
        out[begin:begin + len(piece)] = piece
    return out


def encoded(x, dtype):
    """The bytes of float32 values `x` stored as dtype: F32 as is, BF16 rounded to nearest even."""
    if dtype == "F32":
        return x.astype("<f4").tobytes()
    out = np.empty(len(x), dtype="<u2")
    step = 1 << 24
    for begin in range(0, len(x), step):  # in pieces: the embedding's temporaries stay small
        bits = x[begin:begin + step].astype("<f4").view("<u4")
        out[begin:begin + len(bits)] = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return out.tobytes()


def write_shard(path, tensors):
    """A safetensors file of [(name, shape, dtype, bytes)], in that order."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, dtype, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for _, _, _, data in tensors:
            f.write(data)
    return offset


def write_checkpoint(directory, layers, vocab, seed=2025):
    cfg = config(layers, vocab)
    config_path = os.path.join(directory, "config.json")
    if os.path.exists(config_path):
        with open(config_path) as f:
            if json.load(f) == cfg and os.path.exists(os.path.join(directory, "model.safetensors.index.json")):
                print("reusing %s" % directory, flush=True)
                return
        shutil.rmtree(directory)
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    shards = [[("model.embed_tokens.weight", [vocab, HIDDEN], "BF16")]]
    shards += [layer_shapes(i) for i in range(layers)]
    shards.append([("model.norm.weight", [HIDDEN], "BF16"), ("lm_head.weight", [vocab, HIDDEN], "BF16")])
    weight_map, total = {}, 0
    start = time.time()
    for k, shard in enumerate(shards):
        file_name = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards))
        tensors = []
        for name, shape, dtype in shard:
            x = values(rng, name, shape)
            if name == "model.embed_tokens.weight":
                x *= np.float32(np.sqrt(HIDDEN))  # rows of norm ~1, as trained embeddings roughly are
            tensors.append((name, shape, dtype, encoded(x, dtype)))
            del x
            weight_map[name] = file_name
        total += write_shard(os.path.join(directory, file_name), tensors)
        print("  wrote %s (%.1f GB so far, %.0f s)" % (file_name, total / 1e9, time.time() - start), flush=True)
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    with open(config_path, "w") as f:  # last: a directory with config.json is complete
        json.dump(cfg, f, indent=2)


def run(binary, directory, prompt, generate, threads, extra):
    tokens = " ".join(str((1009 * i + 17) % 30000) for i in range(prompt))
    command = [binary, "--model", directory, "--tokens", tokens, "--generate", str(generate),
               "--threads", str(threads)] + extra
    print("running: %s" % " ".join(command[:4] + ["'<%d ids>'" % prompt] + command[5:]), flush=True)
    start = time.time()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.time() - start
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode != 0:
        sys.stdout.write(done.stdout)
        raise SystemExit("diffattn-forward failed with status %d" % done.returncode)
    out = done.stdout

    def number(pattern):
        m = re.search(pattern, out, re.M)
        return float(m.group(1)) if m else float("nan")

    load_ms = number(r"^load: ([0-9.]+) ms")
    forward_ms = number(r"^forward: ([0-9.]+) ms")
    generation_ms = number(r"^generation time: ([0-9.]+) ms")
    produced = len(re.search(r"^generated:(.*)$", out, re.M).group(1).split())
    decode = (produced - 1) / ((generation_ms - forward_ms) / 1e3) if produced > 1 else float("nan")
    return {"load_s": load_ms / 1e3, "peak_rss_GB": peak_kb * 1024 / 1e9,
            "prefill_tokens_per_s": prompt / (forward_ms / 1e3), "prefill_ms": forward_ms,
            "decode_tokens_per_s": decode, "generated": produced, "wall_s": wall,
            "parameters": int(number(r"^parameters: ([0-9]+)")),
            "isa": re.search(r"^vector ISA: (.*)$", out, re.M).group(1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--vocab", type=int, default=219520)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--forward", default=os.path.join(ROOT, "build", "release", "examples", "diffattn-forward"))
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens (the prefill)")
    parser.add_argument("--generate", type=int, default=16, help="tokens to generate (the decode)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the directory (default: kept anyway "
                        "when it was reused; a new one is removed after the run)")
    parser.add_argument("extra", nargs="*", help="after --: flags for diffattn-forward")
    args = parser.parse_args()
    directory = args.dir or "/tmp/motif2-synthetic-L%d-V%d" % (args.layers, args.vocab)
    existed = os.path.exists(os.path.join(directory, "config.json"))
    write_checkpoint(directory, args.layers, args.vocab)
    r = run(args.forward, directory, args.prompt, args.generate, args.threads, args.extra)
    print("motif2 synthetic: %d layers of 40 (%d parameters), vocab %d, %d prompt tokens, %d generated, "
          "%d threads, %s, flags %s" % (args.layers, r["parameters"], args.vocab, args.prompt, r["generated"],
                                        args.threads, r["isa"], " ".join(args.extra) or "(none)"))
    print("  load %.1f s, peak RSS %.2f GB, prefill %.1f tokens/s (%.0f ms), decode %.2f tokens/s" %
          (r["load_s"], r["peak_rss_GB"], r["prefill_tokens_per_s"], r["prefill_ms"], r["decode_tokens_per_s"]))
    print(json.dumps(dict(r, layers=args.layers, vocab=args.vocab, prompt=args.prompt, threads=args.threads,
                          flags=args.extra)))
    if not existed and not args.keep:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
