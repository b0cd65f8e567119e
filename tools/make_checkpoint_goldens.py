#!/usr/bin/python3
"""Build tests/data/checkpoints/: tiny random DiffLlama, Motif and Motif-2 (grouped differential
attention) checkpoint directories laid out as the Hugging Face Hub ships them, with float64
goldens from tools/checkpoint_reference.py.

    nice /usr/bin/python3 tools/make_checkpoint_goldens.py   (from anywhere; Debian python3-torch)

Writes tests/data/checkpoints/<name>/{config.json, generation_config.json, model.safetensors |
model-0000k-of-0000n.safetensors + model.safetensors.index.json, golden.safetensors},
tests/data/checkpoints/README.md, and tests/data/checkpoints/refused/ (tiny directories with
one thing wrong each, plus control_valid). Deterministic (seeded). Every run re-checks:
  * the directory reads back through the reference loader (shard rules, names, shapes) and
    the golden is computed from the stored (rounded) values;
  * the upstream-structured attention of checkpoint_reference.py equals an explicit per-pair
    (Motif-2: per-group) loop written from docs/checkpoints.md (to 1e-12);
  * greedy steps equal the rows of one full forward over prompt + continuation (causality);
  * every convention flip listed by `flips` changes the logits by more than FLIP_MIN;
  * the reference refuses every config of REFUSED_CONFIGS and every refused/ directory.
"""

import json
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_reference as CR  # noqa: E402
import torch_reference as TR  # noqa: E402

DT = torch.float64
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "checkpoints")
FLIP_MIN = 1e-2      # asserted logit change of a convention flip: 100x the float32 tolerance 1e-4
MARGIN_MIN = 1e-3    # every greedy step's top-1 minus top-2 logit (so float32 agrees on argmax)
D, V, I_SIZE, L = 32, 80, 48, 2

from make_golden_models import CHECKS, check, maxabs  # noqa: E402  (the same self-check log)


# ============================================================================================
# The directories
# ============================================================================================
def diffllama_config(**kw):
    """config.json as transformers 4.x save_pretrained writes it for DiffLlamaForCausalLM."""
    c = {"architectures": ["DiffLlamaForCausalLM"], "attention_bias": False,
         "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "head_dim": 8,
         "hidden_act": "silu", "hidden_size": D, "initializer_range": 0.02,
         "intermediate_size": I_SIZE, "lambda_std_dev": 0.1, "max_position_embeddings": 64,
         "model_type": "diffllama", "num_attention_heads": 4, "num_hidden_layers": L,
         "num_key_value_heads": 4, "rms_norm_eps": 1e-05, "rope_scaling": None,
         "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32",
         "transformers_version": "4.57.1", "use_cache": True, "vocab_size": V}
    c.update(kw)
    return {k: c[k] for k in sorted(c) if c[k] is not DROP}


def motif_config(**kw):
    """config.json of a Motif-2.6B style checkpoint (remote-code MotifConfig)."""
    c = {"architectures": ["MotifForCausalLM"], "attention_dropout": 0.0,
         "attn_rms_norm_eps": 1e-05,
         "auto_map": {"AutoConfig": "configuration_motif.MotifConfig",
                      "AutoModelForCausalLM": "modeling_motif.MotifForCausalLM"},
         "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "poly_norm", "hidden_size": D,
         "initializer_range": 0.02, "intermediate_size": I_SIZE, "max_position_embeddings": 64,
         "max_window_layers": L, "model_type": "Motif", "num_attention_heads": 4,
         "num_hidden_layers": L, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
         "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": None,
         "tie_word_embeddings": False, "torch_dtype": "float32",
         "transformers_version": "4.46.3", "use_bias": False, "use_cache": True,
         "use_sliding_window": False, "vocab_size": V}
    c.update(kw)
    return {k: c[k] for k in sorted(c) if c[k] is not DROP}


def motif2_config(**kw):
    """config.json of a Motif-2-12.7B style checkpoint: Motif's keys plus num_noise_heads, k_ratio
    and head_dim (grouped differential attention)."""
    c = motif_config(num_attention_heads=10, num_noise_heads=2, num_key_value_heads=4, head_dim=8,
                     k_ratio=1, transformers_version="4.51.3", rope_theta=50000.0)
    c.update(kw)
    return {k: c[k] for k in sorted(c) if c[k] is not DROP}


DROP = object()  # marks a key left out of config.json

# name: config, seed, prompt length T, new tokens K, dtype, shards, eos plan, init knobs, text
DIRS = [
    ("diffllama_mha_f32",
     diffllama_config(head_dim=DROP, num_key_value_heads=DROP, rms_norm_eps=DROP,
                      hidden_act=DROP),
     1101, 14, 8, "F32", 1, "none", {},
     "DiffLlama MHA (H = Hkv = 4, hd = 8), F32, one file, untied. config.json leaves out "
     "head_dim, num_key_value_heads, rms_norm_eps and hidden_act: they take the "
     "DiffLlamaConfig defaults hidden/H = 8, H = 4, 1e-5 and silu"),
    ("diffllama_gqa_bf16_tied_sharded",
     diffllama_config(num_attention_heads=8, num_key_value_heads=4, head_dim=8,
                      tie_word_embeddings=True, torch_dtype="bfloat16", eos_token_id=3),
     1102, 12, 8, "BF16", 3, "list_hit", {},
     "DiffLlama GQA (H = 8, Hkv = 4, rep 2) with head_dim 8 != hidden/H = 4 (q_proj 32->64, "
     "o_proj 64->32), every tensor BF16, tied embeddings (no lm_head.weight), three shards + "
     "index; generation_config.json eos_token_id is a list whose second id ends the greedy "
     "continuation early, config.json's eos_token_id (a different id) must not be used"),
    ("diffllama_llama3",
     diffllama_config(num_key_value_heads=2,
                      rope_scaling={"factor": 4.0, "high_freq_factor": 4.0,
                                    "low_freq_factor": 1.0,
                                    "original_max_position_embeddings": 8,
                                    "rope_type": "llama3"}),
     1103, 24, 8, "F32", 1, "none", {},
     "DiffLlama GQA (H = 4, Hkv = 2) with rope_scaling llama3 (factor 4, low 1, high 4, "
     "original_max_position_embeddings 8): of the 4 frequencies 1, 0.1, 0.01, 0.001 "
     "(wavelengths 6.3, 63, 628, 6283) the first is smoothed and the other three divided by 4; "
     "24 prompt tokens so the scaling shows"),
    ("diffllama_v5_rope_parameters",
     diffllama_config(rope_theta=DROP, rope_scaling=DROP, torch_dtype=DROP, dtype="float32",
                      rope_parameters={"rope_theta": 500.0, "rope_type": "default"},
                      rms_norm_eps=1e-06, transformers_version="5.0.0"),
     1104, 16, 8, "F32", 2, "none", {"v_scale": 0.003},
     "DiffLlama as transformers 5 writes it: rope_parameters {rope_theta 500, rope_type "
     "default} and no top-level rope_theta / rope_scaling, dtype instead of torch_dtype; two "
     "shards. rms_norm_eps 1e-6 with tiny v_proj weights (std 0.003/sqrt(D)) so the per-pair "
     "norm's eps (= rms_norm_eps) matters"),
    ("motif_mha_f32",
     motif_config(),
     2101, 14, 8, "F32", 1, "none", {"inv_freq": True},
     "Motif MHA (H = Hkv = 4, hd = 8), F32, one file, untied, rms_norm_eps 1e-6 and "
     "attn_rms_norm_eps 1e-5; carries model.layers.i.self_attn.rotary_emb.inv_freq buffers "
     "that must be ignored"),
    ("motif_gqa_bf16_sharded",
     motif_config(num_attention_heads=8, num_key_value_heads=4, torch_dtype="bfloat16",
                  rms_norm_eps=1e-05, attn_rms_norm_eps=1e-06, eos_token_id=5),
     2102, 13, 8, "BF16", 2, "list_hit", {"v_scale": 0.003, "gate_scale": 0.06},
     "Motif GQA (H = 8, Hkv = 4, rep 2, hd = 4), BF16 except lambda_* stored F32, two shards; "
     "eos list hit early. rms_norm_eps 1e-5 and attn_rms_norm_eps 1e-6 (swapped from the "
     "usual) with tiny v_proj and gate_proj weights so that subln's eps and PolyNorm's fixed "
     "eps 1e-6 matter"),
    ("motif2_gda_r4_f32",
     motif2_config(),
     3101, 14, 8, "F32", 1, "none", {"inv_freq": True},
     "Motif-2 grouped differential attention as Motif-2-12.7B lays it out (4 signal heads per noise "
     "head): H = 10 query heads in 2 groups of 5 (4 signal + 1 noise), Hkv = 4 (2 kv pairs, a group "
     "each), head_dim 8 given (q_proj 32->80, o_proj 128->32), k_ratio 1, rope_theta 50000, F32, one "
     "file, untied, inv_freq buffers to ignore"),
    ("motif2_gda_r2_bf16_tied_sharded",
     motif2_config(num_attention_heads=12, num_noise_heads=4, num_key_value_heads=4, head_dim=4,
                   tie_word_embeddings=True, torch_dtype="bfloat16", rms_norm_eps=1e-05,
                   attn_rms_norm_eps=1e-06, eos_token_id=5, k_ratio=DROP),
     3105, 13, 8, "BF16", 3, "list_hit", {"v_scale": 0.003, "gate_scale": 0.06},
     "Motif-2 with 2 signal heads per noise head: H = 12 in 4 groups of 3, Hkv = 4 (2 kv pairs, "
     "each serving 2 groups: GQA over the groups), head_dim 4 with hidden/H not an integer, tied "
     "embeddings, BF16 except lambda_* F32, three shards; eos list hit early; rms_norm_eps 1e-5 and "
     "attn_rms_norm_eps 1e-6 with tiny v_proj and gate_proj weights so subln's eps and PolyNorm's "
     "matter; no k_ratio key"),
    ("motif2_gda_r3_kv2_f32_sharded",
     motif2_config(num_attention_heads=8, num_noise_heads=2, num_key_value_heads=2, head_dim=6,
                   rope_theta=10000.0),
     3103, 15, 8, "F32", 2, "none", {},
     "Motif-2 with 3 signal heads per noise head: H = 8 in 2 groups of 4, Hkv = 2 (one kv pair "
     "for both groups), head_dim 6, F32, two shards, untied"),
    ("diffllama_text",
     diffllama_config(vocab_size=821, bos_token_id=810, eos_token_id=811, num_key_value_heads=2,
                      max_position_embeddings=128),
     1107, 26, 12, "F32", 1, "none",
     {"tokenizer": "tiny_llama3", "prompt_case": "training sentence"},
     "DiffLlama GQA with a tokenizer: tests/data/text/tiny_llama3's tokenizer.json and "
     "tokenizer_config.json (byte-level BPE, 810 tokens + Llama 3's 11 special tokens, "
     "vocab_size 821). The prompt is the ids @huggingface/tokenizers gives for the corpus text "
     "'training sentence' (tests/data/text/tokenizer_goldens.json, <|begin_of_text|> first); "
     "golden metadata carries the prompt text and the continuation decoded to text by this "
     "script's own byte-level decoder. Random weights: the text is not meant to read well"),
]


# ============================================================================================
# Weights
# ============================================================================================
def init_params(rc, seed, knobs):
    """float64 weights with visible effects: norm weights 1 + N(0, 0.2), lambda vectors
    N(0, 0.3), PolyNorm weights far from 1/3 and different per power."""
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(*shape, generator=g, dtype=DT) * std

    params = {}
    for name, shape in CR.expected_shapes(rc).items():
        leaf = name.split(".")[-2] if name.endswith(".weight") or name.endswith(".bias") \
            else name.split(".")[-1]
        if name == "model.embed_tokens.weight":
            w = normal(shape, 0.5 if rc["tie_word_embeddings"] else 1.0)
        elif name.endswith("norm.weight") or leaf == "subln":
            w = 1.0 + normal(shape, 0.2)
        elif leaf.startswith("lambda_"):
            w = normal(shape, 0.3)
        elif name.endswith("act_fn.weight"):
            w = torch.tensor([0.25, 0.5, 0.9], dtype=DT) + normal(shape, 0.05)
        elif name.endswith("act_fn.bias"):
            w = normal(shape, 0.1)
        elif leaf in ("q_proj", "k_proj"):
            w = normal(shape, 1.2 / math.sqrt(shape[1]))
        elif leaf == "v_proj":
            w = normal(shape, knobs.get("v_scale", 1.0) / math.sqrt(shape[1]))
        elif leaf == "gate_proj":
            w = normal(shape, knobs.get("gate_scale", 1.0) / math.sqrt(shape[1]))
        else:
            w = normal(shape, 1.0 / math.sqrt(shape[1]))
        params[name] = w
    return params, g


def stored_dtypes(rc, dtype):
    """Per-tensor dtype: everything `dtype`; Motif keeps lambda_* in F32 (as mlx-motif does)."""
    out = {}
    for name in CR.expected_shapes(rc):
        lam = name.split(".")[-1].startswith("lambda_")
        out[name] = "F32" if (dtype == "BF16" and rc["family"] == "motif" and lam) else dtype
    return out


def round_to(params, dtypes):
    tdt = {"F32": torch.float32, "BF16": torch.bfloat16, "F64": torch.float64}
    return {k: v.to(tdt[dtypes[k]]).to(DT) for k, v in params.items()}


# ============================================================================================
# Writing a directory
# ============================================================================================
def nbytes(t, dtype):
    return t.numel() * {"F64": 8, "F32": 4, "BF16": 2, "F16": 2}[dtype]


def write_weights(d, tensors, dtypes, shards):
    """One model.safetensors, or `shards` files model-0000k-of-0000n.safetensors with
    contiguous runs of tensors of about equal size and the index transformers writes."""
    names = list(tensors)
    if shards == 1:
        TR.write_safetensors(os.path.join(d, CR.SINGLE_FILE), tensors, dtypes,
                             metadata={"format": "pt"})
        return [CR.SINGLE_FILE]
    total = sum(nbytes(tensors[n], dtypes[n]) for n in names)
    groups, cur, acc = [], [], 0
    for n in names:
        cur.append(n)
        acc += nbytes(tensors[n], dtypes[n])
        if acc >= total * (len(groups) + 1) / shards and len(groups) < shards - 1:
            groups.append(cur)
            cur = []
    groups.append(cur)
    check("%s: %d non-empty shards" % (os.path.basename(d), shards),
          len(groups) == shards and all(groups))
    files, weight_map = [], {}
    for k, grp in enumerate(groups):
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        TR.write_safetensors(os.path.join(d, fn), {n: tensors[n] for n in grp}, dtypes,
                             metadata={"format": "pt"})
        files.append(fn)
        weight_map.update({n: fn for n in grp})
    index = {"metadata": {"total_size": total},
             "weight_map": {n: weight_map[n] for n in sorted(weight_map)}}
    with open(os.path.join(d, CR.INDEX_FILE), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return files


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


# ============================================================================================
# Per-pair loop (docs/checkpoints.md) and the convention flips
# ============================================================================================
def default_conv(rc):
    fam = rc["family"]
    return {
        # which heads form pair j, separately for queries, keys and value halves
        "pairing": dict.fromkeys("qkv", "halves" if fam == "diffllama" else "stripe"),
        "kv_map": "div",               # query head t -> kv head t // rep
        "rotary": "rotate_half",
        "rope": rc["rope"],
        "subln_weight": fam == "motif",
        "subln_eps": rc["groupnorm_eps"] if fam == "diffllama" else rc["attn_rms_norm_eps"],
        "depth_offset": 0 if fam == "diffllama" else -1,
        "one_minus_init": True,
        "lambda_vectors": True,
        "scale_width": 1,              # scores scaled by 1/sqrt(scale_width * hd)
    }


def pair_heads(conv, j, P, rep, Hkv):
    """(query head of map 1, of map 2), (kv head of map 1, of map 2), (kv heads of the value
    halves) of differential pair j. 'halves' (DiffLlama): query heads j and j + P, kv heads
    t / rep of those; 'stripe' (Motif): query heads 2j and 2j + 1, kv heads 2g and 2g + 1 with
    g = j / rep."""
    def kv(t):
        return t // rep if conv["kv_map"] == "div" else t % Hkv

    g = j // rep if conv["kv_map"] == "div" else j % (Hkv // 2)
    halves = {"q": (j, j + P), "k": (kv(j), kv(j + P)), "v": (kv(j), kv(j + P))}
    stripe = {"q": (2 * j, 2 * j + 1), "k": (2 * g, 2 * g + 1), "v": (2 * g, 2 * g + 1)}
    return tuple((halves if conv["pairing"][part] == "halves" else stripe)[part]
                 for part in "qkv")


def interleaved_rope(x, positions, freqs):
    """The other rotary layout: pairs (2i, 2i+1) rotate by pos * freqs[i]. x: [T, heads, d]."""
    ang = positions.to(DT).unsqueeze(1) * freqs.unsqueeze(0)
    cos, sin = torch.cos(ang).unsqueeze(1), torch.sin(ang).unsqueeze(1)
    y = torch.empty_like(x)
    y[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    y[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return y


def conv_projections(conv, x, p, rc, layer_idx, positions):
    """What both loops start from, under the conventions `conv`: q [T, H, hd], k and v
    [T, Hkv, hd] (rotary on q and k), lambda_init and lambda, the causal mask, the score scale."""
    T = x.shape[0]
    H, Hkv, hd = rc["num_attention_heads"], rc["num_key_value_heads"], rc["head_dim"]
    q = TR.linear(x, p["self_attn.q_proj.weight"]).view(T, H, hd)
    k = TR.linear(x, p["self_attn.k_proj.weight"]).view(T, Hkv, hd)
    v = TR.linear(x, p["self_attn.v_proj.weight"]).view(T, Hkv, hd)
    freqs = CR.inv_freq(conv["rope"])
    if conv["rotary"] == "rotate_half":
        cos, sin = CR.rope_cos_sin(positions, freqs)
        q = CR.apply_rope(q.transpose(0, 1), cos, sin).transpose(0, 1)
        k = CR.apply_rope(k.transpose(0, 1), cos, sin).transpose(0, 1)
    else:
        q, k = interleaved_rope(q, positions, freqs), interleaved_rope(k, positions, freqs)
    init = CR.lambda_init(layer_idx + conv["depth_offset"])
    lam = CR.lambda_full(CR._attn(p), init) if conv["lambda_vectors"] \
        else torch.tensor(init, dtype=DT)
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
    scale = 1.0 / math.sqrt(conv["scale_width"] * hd)
    return q, k, v, init, lam, allowed, scale


def conv_head_norm(conv, o, p, init):
    """A head's output after the per-pair norm under `conv`: RMSNorm over 2hd (eps, weight or
    not), then (1 - lambda_init) or not."""
    o = CR.rms_norm_noweight(o, conv["subln_eps"])
    if conv["subln_weight"]:
        o = o * p["self_attn.subln.weight"]
    return o * (1 - init) if conv["one_minus_init"] else o


def loop_attention(conv):
    """Differential attention written pair by pair from docs/checkpoints.md, with every
    convention a parameter."""
    def attn(x, p, rc, layer_idx, positions):
        H, Hkv = rc["num_attention_heads"], rc["num_key_value_heads"]
        P, rep = H // 2, H // Hkv
        q, k, v, init, lam, allowed, scale = conv_projections(conv, x, p, rc, layer_idx, positions)
        outs = []
        for j in range(P):
            (qa, qb), (ka, kb), (va, vb) = pair_heads(conv, j, P, rep, Hkv)
            a1 = TR.masked_softmax(scale * q[:, qa] @ k[:, ka].T, allowed)
            a2 = TR.masked_softmax(scale * q[:, qb] @ k[:, kb].T, allowed)
            val = torch.cat([v[:, va], v[:, vb]], dim=-1)
            outs.append(conv_head_norm(conv, (a1 - lam * a2) @ val, p, init))
        return TR.linear(torch.cat(outs, dim=-1), p["self_attn.o_proj.weight"])
    return attn


def diffllama_two_call_attention(x, p, rc, layer_idx, positions):
    """DiffLlama as the transformers 5 modular file computes it: the kv heads split into two
    halves, each tiled twice (`repeat(1, 2, 1, 1)`) into its own value tensor, two attention
    calls over all H query heads with repeat_kv keys, outputs concatenated on the feature axis,
    then heads [0, H/2) minus lambda times heads [H/2, H). Equal to the 4.x eager layout when
    Hkv is even (which 5.x requires)."""
    T = x.shape[0]
    H, Hkv, hd = rc["num_attention_heads"], rc["num_key_value_heads"], rc["head_dim"]
    q, k, v = CR._project(x, p, rc, positions)
    v1, v2 = (h.repeat(2, 1, 1) for h in torch.chunk(v, 2, dim=0))
    o = torch.cat([CR._gqa_attention(q, k, v1, hd), CR._gqa_attention(q, k, v2, hd)], dim=-1)
    o1, o2 = torch.chunk(o, 2, dim=0)
    init = CR.layer_lambda_init(rc, layer_idx)
    o = o1 - CR.lambda_full(CR._attn(p), init) * o2
    o = (1 - init) * CR.rms_norm_noweight(o, rc["groupnorm_eps"])
    return TR.linear(o.transpose(0, 1).reshape(T, -1), p["self_attn.o_proj.weight"])


def mlp_variant(kind, eps=CR.POLYNORM_EPS):
    def f(x, p, rc):
        gate = TR.linear(x, p["mlp.gate_proj.weight"])
        up = TR.linear(x, p["mlp.up_proj.weight"])
        if kind == "swiglu":
            act = torch.nn.functional.silu(gate)
        else:
            w = p["mlp.act_fn.weight"]
            w = w.flip(0) if kind == "polynorm_reversed" else w
            act = CR.polynorm(gate, w, p["mlp.act_fn.bias"], eps)
        return TR.linear(act * up, p["mlp.down_proj.weight"])
    return f


def flips(name, rc):
    """(label, conv changes, mlp replacement or None, other) for this directory; `asserted`
    says whether the change must exceed FLIP_MIN."""
    fam = rc["family"]
    own = "halves" if fam == "diffllama" else "stripe"
    other_pairing = "stripe" if fam == "diffllama" else "halves"
    gqa = rc["num_attention_heads"] != rc["num_key_value_heads"]
    out = [
        ("pairing %s (the other family's) for queries, keys and values" % other_pairing,
         {"pairing": dict.fromkeys("qkv", other_pairing)}, None, True),
        ("value halves paired %s (queries and keys right)" % other_pairing,
         {"pairing": {"q": own, "k": own, "v": other_pairing}}, None, True),
        ("key heads paired %s (queries and values right)" % other_pairing,
         {"pairing": {"q": own, "k": other_pairing, "v": own}}, None, True),
        ("rotary interleaved pairs instead of rotate_half", {"rotary": "interleaved"}, None,
         True),
        ("lambda_init depth %s" % ("i - 1" if fam == "diffllama" else "i (no shift)"),
         {"depth_offset": -1 if fam == "diffllama" else 0}, None, True),
        ("no (1 - lambda_init) factor", {"one_minus_init": False}, None, True),
        ("lambda = lambda_init (lambda vectors ignored)", {"lambda_vectors": False}, None, True),
        ("score scale 1/sqrt(2 hd)", {"scale_width": 2}, None, True),
    ]
    if gqa:
        out.append(("kv head t % Hkv instead of t / rep", {"kv_map": "mod"}, None, True))
    if rc["rope"]["rope_type"] == "llama3":
        plain = dict(rc["rope"], rope_type="default")
        out.append(("llama3 rope scaling not applied", {"rope": plain}, None, True))
    if rc["rope"]["rope_theta"] != 10000.0:
        out.append(("rope_theta 10000 (config's %g ignored)" % rc["rope"]["rope_theta"],
                    {"rope": dict(rc["rope"], rope_theta=10000.0)}, None, True))
    if fam == "diffllama":
        tiny_v = name == "diffllama_v5_rope_parameters"
        if rc["groupnorm_eps"] != 1e-5:
            out.append(("per-pair norm eps 1e-5 instead of rms_norm_eps %g"
                        % rc["groupnorm_eps"], {"subln_eps": 1e-5}, None, tiny_v))
        else:
            out.append(("per-pair norm eps 1e-6 instead of rms_norm_eps 1e-5",
                        {"subln_eps": 1e-6}, None, False))
    else:
        tiny = name == "motif_gqa_bf16_sharded"
        out += [
            ("subln weight ignored (weightless norm)", {"subln_weight": False}, None, True),
            ("subln eps rms_norm_eps %g instead of attn_rms_norm_eps %g"
             % (rc["rms_norm_eps"], rc["attn_rms_norm_eps"]),
             {"subln_eps": rc["rms_norm_eps"]}, None, tiny),
            ("MLP SwiGLU instead of PolyNorm", {}, mlp_variant("swiglu"), True),
            ("PolyNorm weights reversed (w0 with z, w2 with z^3)", {},
             mlp_variant("polynorm_reversed"), True),
        ]
        alt_eps = rc["rms_norm_eps"] if rc["rms_norm_eps"] != CR.POLYNORM_EPS \
            else rc["attn_rms_norm_eps"]
        out.append(("PolyNorm eps %g instead of 1e-6" % alt_eps, {},
                    mlp_variant("polynorm", alt_eps), tiny))
    return out


# ============================================================================================
# Motif-2: the per-group loop (docs/checkpoints.md) and its convention flips
# ============================================================================================
def gda_default_conv(rc):
    return {
        "noise": "last",             # the noise head's place in its group of q_proj heads
        "q_layout": "groups",        # q_proj heads group by group; origin_first: signal heads, then noise heads
        "kv_split": "stripe",        # map 1 reads kv head 2c, map 2 kv head 2c + 1; halves: c, c + Hkv/2
        "value_order": "maps",       # the value of kv pair c is [v(2c) ; v(2c + 1)]; swapped: the reverse
        "broadcast": "interleave",   # signal head a subtracts noise head a // gr; tile: a % Hn
        "kv_of_group": "div",        # group g reads kv pair g // (Hn / pairs); mod: g % pairs
        "out_layout": "head_major",  # o_proj input: head a at [2hd a, 2hd (a + 1)); half_major: halves apart
        "rotary": "rotate_half",
        "rope": rc["rope"],
        "subln_weight": True,
        "subln_eps": rc["attn_rms_norm_eps"],
        "depth_offset": -1,
        "one_minus_init": True,
        "lambda_vectors": True,
        "scale_width": 1,
    }


def gda_loop_attention(conv):
    """Grouped differential attention written group by group from docs/checkpoints.md
    ('Motif-2'), every convention a parameter: group g's gr signal heads and its noise head over
    kv pair c(g); signal head a = g gr + i outputs A1_a V_c - lambda A2 V_c (the noise head's
    output of the group `broadcast` names), then subln, (1 - lambda_init), o_proj."""
    def attn(x, p, rc, layer_idx, positions):
        H, Hn, Hkv, hd = rc["num_attention_heads"], rc["num_noise_heads"], \
            rc["num_key_value_heads"], rc["head_dim"]
        gr, pairs = H // Hn - 1, Hkv // 2
        q, k, v, init, lam, allowed, scale = conv_projections(conv, x, p, rc, layer_idx, positions)

        def q_head(g, i):  # i < gr: signal head i of group g; i == gr: its noise head
            if conv["q_layout"] == "origin_first":
                return g * gr + i if i < gr else Hn * gr + g
            place = i if conv["noise"] == "last" else (i + 1) % (gr + 1)
            return g * (gr + 1) + place

        def kv_pair(g):
            return g // (Hn // pairs) if conv["kv_of_group"] == "div" else g % pairs

        def kv_heads(c):  # (map 1's kv head, map 2's kv head) of pair c
            return (2 * c, 2 * c + 1) if conv["kv_split"] == "stripe" else (c, c + pairs)

        def value(c):
            a, b = kv_heads(c)
            if conv["value_order"] == "swapped":
                a, b = b, a
            return torch.cat([v[:, a], v[:, b]], dim=-1)

        noise_out = []
        for g in range(Hn):
            c = kv_pair(g)
            a2 = TR.masked_softmax(scale * q[:, q_head(g, gr)] @ k[:, kv_heads(c)[1]].T, allowed)
            noise_out.append(a2 @ value(c))
        outs = []
        for a in range(Hn * gr):
            g, i = a // gr, a % gr
            c = kv_pair(g)
            a1 = TR.masked_softmax(scale * q[:, q_head(g, i)] @ k[:, kv_heads(c)[0]].T, allowed)
            noise = noise_out[g if conv["broadcast"] == "interleave" else a % Hn]
            outs.append(conv_head_norm(conv, a1 @ value(c) - lam * noise, p, init))
        if conv["out_layout"] == "half_major":
            outs = [o[:, :hd] for o in outs] + [o[:, hd:] for o in outs]
        return TR.linear(torch.cat(outs, dim=-1), p["self_attn.o_proj.weight"])
    return attn


def gda_flips(name, rc):
    """flips() for a Motif-2 directory: (label, conv changes, mlp replacement or None,
    asserted), each one a change in this geometry."""
    H, Hn, Hkv = rc["num_attention_heads"], rc["num_noise_heads"], rc["num_key_value_heads"]
    pairs = Hkv // 2
    out = [
        ("noise head first in its group of q_proj heads (instead of last)", {"noise": "first"},
         None, True),
        ("q_proj read signal heads first, then noise heads (mlx fuse_qkv's permuted order)",
         {"q_layout": "origin_first"}, None, True),
        ("value halves swapped ([v(2c+1) ; v(2c)])", {"value_order": "swapped"}, None, True),
        ("noise outputs tiled over the signal heads (a % Hn instead of a / gr)",
         {"broadcast": "tile"}, None, True),
        ("o_proj input: first halves of every head, then second halves",
         {"out_layout": "half_major"}, None, True),
        ("rotary interleaved pairs instead of rotate_half", {"rotary": "interleaved"}, None, True),
        ("lambda_init depth i (no shift)", {"depth_offset": 0}, None, True),
        ("no (1 - lambda_init) factor", {"one_minus_init": False}, None, True),
        ("lambda = lambda_init (lambda vectors ignored)", {"lambda_vectors": False}, None, True),
        ("score scale 1/sqrt(2 hd)", {"scale_width": 2}, None, True),
        ("subln weight ignored (weightless norm)", {"subln_weight": False}, None, True),
        ("MLP SwiGLU instead of PolyNorm", {}, mlp_variant("swiglu"), True),
        ("PolyNorm weights reversed (w0 with z, w2 with z^3)", {},
         mlp_variant("polynorm_reversed"), True),
    ]
    if pairs > 1:
        out.append(("kv heads split in halves (map 1 kv head c, map 2 c + Hkv/2) instead of "
                    "even / odd", {"kv_split": "halves"}, None, True))
    if pairs > 1 and Hn // pairs > 1:
        out.append(("group g reads kv pair g % pairs instead of g / (Hn / pairs)",
                    {"kv_of_group": "mod"}, None, True))
    if rc["rope"]["rope_theta"] != 10000.0:
        out.append(("rope_theta 10000 (config's %g ignored)" % rc["rope"]["rope_theta"],
                    {"rope": dict(rc["rope"], rope_theta=10000.0)}, None, True))
    tiny = name == "motif2_gda_r2_bf16_tied_sharded"
    if rc["rms_norm_eps"] != rc["attn_rms_norm_eps"]:
        out.append(("subln eps rms_norm_eps %g instead of attn_rms_norm_eps %g"
                    % (rc["rms_norm_eps"], rc["attn_rms_norm_eps"]),
                    {"subln_eps": rc["rms_norm_eps"]}, None, tiny))
    alt_eps = rc["rms_norm_eps"] if rc["rms_norm_eps"] != CR.POLYNORM_EPS \
        else rc["attn_rms_norm_eps"]
    out.append(("PolyNorm eps %g instead of 1e-6" % alt_eps, {}, mlp_variant("polynorm", alt_eps),
                tiny))
    return out


def tie_flip(params, rc):
    """Untied checkpoints: logits with embed_tokens as the head (a reader that always ties)."""
    p = dict(params)
    p["lm_head.weight"] = params["model.embed_tokens.weight"]
    return p


# ============================================================================================
# Goldens
# ============================================================================================
def pick_prompt(g, T, K, params, rc):
    """A prompt whose greedy continuation has every top-1/top-2 gap >= MARGIN_MIN."""
    for attempt in range(50):
        prompt = torch.randint(0, rc["vocab_size"], (T,), generator=g)
        gen, rows = CR.greedy(prompt, params, rc, K, set())
        top2 = rows.topk(2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        if margin >= MARGIN_MIN:
            return prompt, gen, margin, attempt
    raise AssertionError("no prompt with greedy margins >= %g" % MARGIN_MIN)


def tokenizer_case(knobs):
    """(text, ids with the post-processor's specials) of a corpus case, as the JavaScript
    reference tokenized it (tests/data/text/tokenizer_goldens.json)."""
    with open(os.path.join(ROOT, "tests", "data", "text", "tokenizer_goldens.json")) as f:
        goldens = json.load(f)
    case = next(c for c in goldens["cases"] if c["name"] == knobs["prompt_case"])
    return case["text"], case["expected"][knobs["tokenizer"]]["with_special"]


def byte_level_decode(tokenizer_dir, ids, skip_special=True):
    """The text of `ids` by tokenizer.json's byte-level vocabulary: GPT-2's byte <-> character
    table inverted, added tokens as written (special ones left out), invalid UTF-8 as U+FFFD.
    Written from the byte-level scheme, independently of the C++ decoder."""
    with open(os.path.join(tokenizer_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok["added_tokens"]}
    out = b""
    for i in ids:
        if i in added:
            if not (skip_special and added[i]["special"]):
                out += added[i]["content"].encode("utf-8")
        elif i in by_id:
            out += bytes(chars[c] for c in by_id[i])
    return out.decode("utf-8", errors="replace")


def plan_eos(plan, gen, vocab):
    """(generation_config eos, config.json eos) ids. 'none': ids never generated; 'list_hit':
    a list whose second id is the first-time token at step s >= 3 (generation stops there),
    config.json names a different id that does not appear before that step."""
    unused = [t for t in reversed(range(vocab)) if t not in gen]  # high ids, away from bos 1
    if plan == "none":
        return unused[0], unused[0]
    s = next(i for i in range(3, len(gen)) if gen[i] not in gen[:i])
    return [unused[0], gen[s]], unused[1]


def build(name, cfg, seed, T, K, dtype, shards, eos_plan, knobs, desc):
    d = os.path.join(OUT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    rc = CR.resolve_config(cfg)
    raw, g = init_params(rc, seed, knobs)
    dtypes = stored_dtypes(rc, dtype)
    stored = round_to(raw, dtypes)
    # prompt and eos are chosen from the stored values, before anything is written
    prompt_text = None
    if "prompt_case" in knobs:  # a text prompt, tokenized by the JavaScript reference
        prompt_text, ids = tokenizer_case(knobs)
        prompt = torch.tensor(ids)
        check("%s: prompt length" % name, len(ids) == T)
        gen_free, rows = CR.greedy(prompt, stored, rc, K, set())
        top2 = rows.topk(2, dim=-1).values
        margin, attempt = float((top2[:, 0] - top2[:, 1]).min()), 0
        check("%s: greedy margins >= %g" % (name, MARGIN_MIN), margin >= MARGIN_MIN, "%.3g" % margin)
    else:
        prompt, gen_free, margin, attempt = pick_prompt(g, T, K, stored, rc)
    gen_eos, cfg_eos = plan_eos(eos_plan, gen_free, rc["vocab_size"])
    cfg = dict(cfg, eos_token_id=cfg_eos)
    write_json(os.path.join(d, "config.json"), cfg)
    write_json(os.path.join(d, "generation_config.json"),
               {"_from_model_config": True, "bos_token_id": cfg["bos_token_id"],
                "eos_token_id": gen_eos, "transformers_version": cfg["transformers_version"]})
    tensors = dict(stored)
    if knobs.get("inv_freq"):
        # the buffers some checkpoints carry (mlx-motif sanitize() drops them): placed after
        # each layer's o_proj, float32 values of the real frequencies
        tensors, fq = {}, CR.inv_freq(rc["rope"])
        for k, v in stored.items():
            tensors[k] = v
            if k.endswith("self_attn.o_proj.weight"):
                b = k.replace("o_proj.weight", "rotary_emb.inv_freq")
                tensors[b] = fq
                dtypes[b] = "F32"
    files = write_weights(d, tensors, dtypes, shards)
    if "tokenizer" in knobs:
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(ROOT, "tests", "data", "text", knobs["tokenizer"], fn), os.path.join(d, fn))

    # ---- read back through the reference loader: the golden uses what the files hold ----
    rc2, p64, dts = CR.load_checkpoint(d)
    check("%s: loader round trip exact" % name,
          rc2 == rc and set(p64) == set(stored)
          and all(maxabs(p64[k], stored[k]) == 0.0 for k in stored)
          and all(dts[k] == dtypes[k] for k in stored))
    eos = CR.read_generation_config(d)
    check("%s: eos ids from generation_config.json" % name,
          eos == (set(gen_eos) if isinstance(gen_eos, list) else {gen_eos}))
    logits = CR.forward(prompt, p64, rc2)
    check("%s: logits finite" % name, bool(torch.isfinite(logits).all()))
    gen, gen_rows = CR.greedy(prompt, p64, rc2, K, eos)
    stopped = len(gen) < K or gen[-1] in eos
    check("%s: eos plan %s" % (name, eos_plan),
          stopped == (eos_plan == "list_hit") and gen == gen_free[:len(gen)])
    full = CR.forward(torch.tensor([int(t) for t in prompt] + gen), p64, rc2)
    check("%s: greedy steps = rows of one full forward (causal)" % name,
          maxabs(full[T - 1:T - 1 + len(gen)], gen_rows) < 1e-12 and
          maxabs(full[:T], logits) < 1e-12)

    # ---- the upstream-structured attention equals the per-pair (per-group) loop of the docs ----
    grouped = rc2["grouped"]
    conv0 = gda_default_conv(rc2) if grouped else default_conv(rc2)
    loop_fn = gda_loop_attention if grouped else loop_attention
    loop = CR.forward(prompt, p64, rc2, attention=loop_fn(conv0))
    check("%s: upstream structure == per-%s loop" % (name, "group" if grouped else "pair"),
          maxabs(loop, logits) < 1e-12, "%.2e" % maxabs(loop, logits))
    if rc2["family"] == "diffllama":
        two = CR.forward(prompt, p64, rc2, attention=diffllama_two_call_attention)
        check("%s: transformers 4 eager == transformers 5 two-call layout" % name,
              maxabs(two, logits) < 1e-12, "%.2e" % maxabs(two, logits))

    # ---- convention flips ----
    sens = []
    H, Hkv = rc2["num_attention_heads"], rc2["num_key_value_heads"]

    def heads(conv):
        return [pair_heads(conv, j, H // 2, H // Hkv, Hkv) for j in range(H // 2)]

    for label, change, mlp_fn, asserted in (gda_flips if grouped else flips)(name, rc2):
        if not grouped and change and set(change) <= {"pairing", "kv_map"} \
                and heads(dict(conv0, **change)) == heads(conv0):
            continue  # the same heads in this geometry: nothing to detect here
        alt = CR.forward(prompt, p64, rc2, attention=loop_fn(dict(conv0, **change)),
                         mlp_fn=mlp_fn)
        sens.append((label, maxabs(alt, logits), asserted))
    if not rc2["tie_word_embeddings"]:
        sens.append(("embed_tokens used as lm_head (tied assumed)",
                     maxabs(CR.forward(prompt, tie_flip(p64, rc2), rc2), logits), True))
    if dtype != "F64" and dtype != "F32":
        sens.append(("unrounded float64 weights instead of the stored %s" % dtype,
                     maxabs(CR.forward(prompt, raw, rc2), logits), True))
    eos_note = None
    if stopped:
        # a reader taking eos from config.json instead would not stop here
        alt_gen, _ = CR.greedy(prompt, p64, rc2, K, {cfg_eos})
        check("%s: config.json eos would give another continuation" % name, alt_gen != gen)
        eos_note = "eos from config.json (%d) instead of generation_config.json %s: %d tokens " \
            "generated instead of %d" % (cfg_eos, json.dumps(gen_eos), len(alt_gen), len(gen))
    for label, diff, asserted in sens:
        if asserted:
            check("%s: sensitive to %s" % (name, label), diff > FLIP_MIN, "%.3g" % diff)

    meta = {"family": rc2["family"], "max_new_tokens": str(K),
            "eos_token_ids": json.dumps(sorted(eos)), "stopped_on_eos": str(stopped).lower(),
            "note": "float64 reference tools/checkpoint_reference.py; logits of a full forward "
                    "over tokens at positions 0..T-1; generated = greedy continuation, "
                    "generated_logits[n] = last-row logits that chose generated[n]"}
    if prompt_text is not None:
        meta["prompt_text"] = prompt_text
        meta["generated_text"] = byte_level_decode(d, gen)
    TR.write_safetensors(os.path.join(d, "golden.safetensors"),
                         {"tokens": prompt.to(DT), "logits": logits,
                          "generated": torch.tensor(gen, dtype=DT), "generated_logits": gen_rows},
                         default_dtype="F64", metadata=meta)
    nparams = sum(t.numel() for t in stored.values())
    return {"rc": rc2, "T": T, "K": K, "gen": gen, "stopped": stopped, "margin": margin,
            "sens": sens, "files": files, "dtype": dtype, "desc": desc, "nparams": nparams,
            "logits": logits, "eos": sorted(eos), "cfg_eos": cfg_eos, "attempt": attempt,
            "eos_note": eos_note}


# ============================================================================================
# Global checks (independent of any directory)
# ============================================================================================
def llama3_checks():
    rope = CR.resolve_rope({"rope_scaling": {"rope_type": "llama3", "factor": 4.0,
                                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                             "original_max_position_embeddings": 8}}, 8)
    f = CR.inv_freq(rope)
    base = torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=DT)
    # wavelength 2 pi (between 8/4 and 8/1): smoothed with s = (8 / 2pi - 1) / 3
    s = (8 / (2 * math.pi) - 1) / 3
    want = torch.tensor([(1 - s) * 1.0 / 4 + s * 1.0, 0.1 / 4, 0.01 / 4, 0.001 / 4], dtype=DT)
    check("llama3 frequencies by hand", maxabs(f, want) < 1e-15, "%s" % f.tolist())
    wl = 2 * math.pi / base
    for bound in (2.0, 8.0):
        check("llama3: no wavelength within 1e-3 of the band edge %g" % bound,
              float(((wl - bound).abs() / bound).min()) > 1e-3)


def rope_checks():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 3, 8, generator=g, dtype=DT)
    fq = CR.inv_freq({"rope_type": "default", "rope_theta": 10000.0, "dim": 8})
    cos, sin = CR.rope_cos_sin(torch.tensor([0, 1, 2]), fq)
    y = CR.apply_rope(x, cos, sin)
    check("rope: position 0 identity", maxabs(y[:, 0], x[:, 0]) == 0.0)
    a = 2 * float(fq[1])
    check("rope: element 1 rotates with element 1 + dim/2",
          abs(float(y[0, 2, 1]) - (float(x[0, 2, 1]) * math.cos(a)
                                   - float(x[0, 2, 5]) * math.sin(a))) < 1e-15 and
          abs(float(y[0, 2, 5]) - (float(x[0, 2, 5]) * math.cos(a)
                                   + float(x[0, 2, 1]) * math.sin(a))) < 1e-15)


def tiny_config(family, **kw):
    """The base of the must-refuse directories: D = 8, H = Hkv = 2, hd = 4, one layer, V = 16;
    Motif-2 ("motif2"): H = 3 in one group (2 signal heads + 1 noise head), Hkv = 2, hd = 4."""
    make = {"diffllama": diffllama_config, "motif": motif_config, "motif2": motif2_config}[family]
    c = make(hidden_size=8, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=1,
             intermediate_size=8, vocab_size=16, max_position_embeddings=32)
    if family == "diffllama":
        c["head_dim"] = 4
    if family == "motif2":
        c.update(num_attention_heads=3, num_noise_heads=1, head_dim=4)
    c.update(kw)
    return {k: c[k] for k in sorted(c) if c[k] is not DROP}


LLAMA3 = {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8}

# case, config.json, what is wrong: every one must be refused while reading config.json
REFUSED_CONFIGS = [
    ("unknown_model_type", tiny_config("diffllama", model_type="llama",
                                       architectures=["LlamaForCausalLM"]),
     "model_type llama, architectures LlamaForCausalLM: neither family"),
    ("diffllama_other_architecture",
     tiny_config("diffllama", architectures=["DiffLlamaForSequenceClassification"]),
     "model_type diffllama with architectures DiffLlamaForSequenceClassification"),
    ("rope_type_yarn", tiny_config("diffllama", rope_scaling={"rope_type": "yarn",
                                                              "factor": 2.0}),
     "rope_scaling rope_type yarn"),
    ("rope_type_linear_legacy_key", tiny_config("diffllama", rope_scaling={"type": "linear",
                                                                           "factor": 2.0}),
     "rope_scaling with the legacy key type = linear"),
    ("llama3_without_factor",
     tiny_config("diffllama", rope_scaling={k: v for k, v in LLAMA3.items() if k != "factor"}),
     "llama3 rope_scaling without factor"),
    ("llama3_omax_conflict",
     tiny_config("diffllama", rope_scaling=LLAMA3, original_max_position_embeddings=16),
     "llama3 original_max_position_embeddings 16 at the top level, 8 in rope_scaling"),
    ("rope_theta_conflict",
     tiny_config("diffllama", rope_scaling=None,
                 rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
     "rope_theta 10000 at the top level, 500 in rope_parameters"),
    ("partial_rotary_factor", tiny_config("diffllama", partial_rotary_factor=0.5),
     "partial_rotary_factor 0.5"),
    ("diffllama_attention_bias", tiny_config("diffllama", attention_bias=True),
     "attention_bias true"),
    ("diffllama_hidden_act_gelu", tiny_config("diffllama", hidden_act="gelu"),
     "hidden_act gelu"),
    ("diffllama_odd_kv_heads", tiny_config("diffllama", num_key_value_heads=1),
     "num_key_value_heads 1 (odd)"),
    ("diffllama_odd_heads", tiny_config("diffllama", num_attention_heads=3,
                                        num_key_value_heads=3),
     "num_attention_heads 3 (odd)"),
    ("diffllama_kv_not_dividing", tiny_config("diffllama", num_attention_heads=6,
                                              num_key_value_heads=4),
     "num_key_value_heads 4 does not divide num_attention_heads 6"),
    ("motif_use_bias", tiny_config("motif", use_bias=True), "use_bias true"),
    ("motif_qkv_bias", tiny_config("motif", qkv_bias=True), "qkv_bias true"),
    ("motif_hidden_act_silu", tiny_config("motif", hidden_act="silu"), "hidden_act silu"),
    ("motif_without_hidden_act", tiny_config("motif", hidden_act=DROP), "hidden_act absent"),
    ("motif2_without_head_dim", tiny_config("motif2", head_dim=DROP),
     "num_noise_heads without head_dim (vLLM MotifAttention raises)"),
    ("motif2_zero_noise_heads", tiny_config("motif2", num_noise_heads=0), "num_noise_heads 0"),
    ("motif2_noise_heads_not_dividing", tiny_config("motif2", num_attention_heads=4,
                                                    num_noise_heads=3),
     "num_noise_heads 3 does not divide num_attention_heads 4"),
    ("motif2_only_noise_heads", tiny_config("motif2", num_noise_heads=3),
     "num_noise_heads 3 = num_attention_heads: no signal head"),
    ("motif2_odd_kv_heads", tiny_config("motif2", num_key_value_heads=1),
     "num_key_value_heads 1 (odd: no kv pair)"),
    ("motif2_kv_pairs_not_dividing_groups",
     tiny_config("motif2", num_attention_heads=6, num_noise_heads=2, num_key_value_heads=6),
     "3 kv pairs for 2 groups (num_noise_heads 2 not a multiple of num_key_value_heads / 2)"),
    ("motif2_k_ratio_2", tiny_config("motif2", k_ratio=2), "k_ratio 2 (no released semantics)"),
    ("motif_head_dim_mismatch", tiny_config("motif", head_dim=8),
     "head_dim 8 != hidden_size / num_attention_heads = 4"),
    ("motif_without_attn_rms_norm_eps", tiny_config("motif", attn_rms_norm_eps=DROP),
     "attn_rms_norm_eps absent"),
    ("motif_without_rms_norm_eps", tiny_config("motif", rms_norm_eps=DROP),
     "rms_norm_eps absent"),
]


def refuses(fn, arg):
    """True when fn(arg) raises checkpoint_reference.Refused."""
    try:
        fn(arg)
    except CR.Refused:
        return True
    return False


def config_checks():
    """Defaults and refusals of resolve_config (docs/checkpoints.md)."""
    base = diffllama_config()
    rc = CR.resolve_config({k: v for k, v in base.items()
                            if k not in ("head_dim", "num_key_value_heads", "rms_norm_eps",
                                         "hidden_act", "rope_theta", "rope_scaling",
                                         "tie_word_embeddings", "attention_bias")})
    check("diffllama defaults", rc["head_dim"] == D // 4 and rc["num_key_value_heads"] == 4
          and rc["rms_norm_eps"] == 1e-5 and rc["rope"]["rope_theta"] == 10000.0
          and rc["tie_word_embeddings"] is False)
    both = {k: v for k, v in base.items() if k != "rope_theta"}
    both.update(rope_scaling={"rope_type": "default", "rope_theta": 50.0},
                rope_parameters={"rope_type": "default", "rope_theta": 70.0})
    check("rope_scaling wins over rope_parameters (transformers 5)",
          CR.resolve_config(both)["rope"]["rope_theta"] == 50.0)
    legacy = {k: v for k, v in LLAMA3.items() if k != "rope_type"}
    legacy["type"] = "llama3"
    check("legacy 'type' key read as rope_type",
          CR.resolve_rope({"rope_scaling": legacy}, 8)["rope_type"] == "llama3")
    check("llama3 without original_max_position_embeddings falls back to "
          "max_position_embeddings",
          CR.resolve_rope({"max_position_embeddings": 64,
                           "rope_scaling": {k: v for k, v in LLAMA3.items()
                                            if k != "original_max_position_embeddings"}},
                          8)["original_max_position_embeddings"] == 64)
    for fam in ("diffllama", "motif", "motif2"):
        CR.resolve_config(tiny_config(fam))  # the bases themselves are fine
    for case, cfg, why in REFUSED_CONFIGS:
        check("refused: %s (%s)" % (case, why), refuses(CR.resolve_config, cfg))


# ============================================================================================
# Must-refuse directories
# ============================================================================================
def _tiny_weights(family, tie=False):
    rc = CR.resolve_config(tiny_config(family, tie_word_embeddings=tie))
    params, _ = init_params(rc, 7, {})
    return rc, {k: v.float().double() for k, v in params.items()}


def _shard_two(d, tensors, first, extra_map=None, drop_from_map=(), second_extra=None):
    """Two shards: `first` names in shard 1, the rest in shard 2; index from the actual
    placement, then edited (extra_map entries added, names dropped)."""
    f1 = "model-00001-of-00002.safetensors"
    f2 = "model-00002-of-00002.safetensors"
    s1 = {k: v for k, v in tensors.items() if k in first}
    s2 = {k: v for k, v in tensors.items() if k not in first}
    s2.update(second_extra or {})
    TR.write_safetensors(os.path.join(d, f1), s1, metadata={"format": "pt"})
    TR.write_safetensors(os.path.join(d, f2), s2, metadata={"format": "pt"})
    wm = {k: f1 for k in s1}
    wm.update({k: f2 for k in s2 if k not in wm})
    wm.update(extra_map or {})
    for k in drop_from_map:
        wm.pop(k)
    write_json(os.path.join(d, CR.INDEX_FILE),
               {"metadata": {"total_size": 4 * sum(t.numel() for t in tensors.values())},
                "weight_map": {k: wm[k] for k in sorted(wm)}})


def refused_file_cases():
    """(case, family, writer(d, tensors), what is wrong): config.json is valid, the files not."""
    lam = "model.layers.0.self_attn.lambda_q1"
    emb = "model.embed_tokens.weight"

    def single(mutate):
        def w(d, t):
            t = dict(t)
            mutate(t)
            TR.write_safetensors(os.path.join(d, CR.SINGLE_FILE), t, metadata={"format": "pt"})
        return w

    def both_present(d, t):
        single(lambda x: None)(d, t)
        _shard_two(d, t, {emb})

    def missing_shard_file(d, t):
        _shard_two(d, t, {emb})
        os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))

    return [
        ("missing_tensor", "diffllama", single(lambda t: t.pop(lam)),
         "model.safetensors lacks model.layers.0.self_attn.lambda_q1"),
        ("extra_tensor_subln_in_diffllama", "diffllama",
         single(lambda t: t.update({"model.layers.0.self_attn.subln.weight":
                                    torch.ones(8, dtype=DT)})),
         "a DiffLlama checkpoint with self_attn.subln.weight (DiffLlama's norm has no weight)"),
        ("misshapen_tensor", "diffllama",
         single(lambda t: t.update({lam: torch.zeros(5, dtype=DT)})),
         "lambda_q1 of shape [5] instead of [4]"),
        ("motif_missing_act_fn_bias", "motif",
         single(lambda t: t.pop("model.layers.0.mlp.act_fn.bias")),
         "Motif checkpoint without mlp.act_fn.bias"),
        ("motif2_missing_subln", "motif2",
         single(lambda t: t.pop("model.layers.0.self_attn.subln.weight")),
         "Motif-2 checkpoint without self_attn.subln.weight"),
        ("motif2_o_proj_misshapen", "motif2",
         single(lambda t: t.update({"model.layers.0.self_attn.o_proj.weight":
                                    torch.zeros(8, 12, dtype=DT)})),
         "Motif-2 o_proj of shape [8, 12] (num_attention_heads x head_dim) instead of [8, 16] "
         "(2 x signal heads x head_dim)"),
        ("tied_with_lm_head", "diffllama_tied",
         single(lambda t: t.update({"lm_head.weight": t[emb].clone()})),
         "tie_word_embeddings true and an lm_head.weight tensor"),
        ("single_file_and_index", "diffllama", both_present,
         "model.safetensors and model.safetensors.index.json both present"),
        ("index_shard_path_escapes", "diffllama",
         lambda d, t: _shard_two(d, t, {emb}, extra_map={"model.norm.weight":
                                                        "../model-00002-of-00002.safetensors"}),
         "weight_map names ../model-00002-of-00002.safetensors"),
        ("index_shard_file_missing", "diffllama", missing_shard_file,
         "weight_map names model-00002-of-00002.safetensors, which does not exist"),
        ("index_tensor_not_listed", "diffllama",
         lambda d, t: _shard_two(d, t, {emb}, drop_from_map=[lam]),
         "shard 2 holds lambda_q1, which the weight_map does not list"),
        ("index_tensor_listed_for_other_shard", "diffllama",
         lambda d, t: _shard_two(d, t, {emb}, extra_map={lam: "model-00001-of-00002.safetensors"}),
         "weight_map lists lambda_q1 in shard 1, it is in shard 2"),
        ("index_tensor_in_two_shards", "diffllama",
         lambda d, t: _shard_two(d, t, {emb}, second_extra={emb: t[emb]}),
         "embed_tokens in both shards"),
        ("index_lists_absent_tensor", "diffllama",
         lambda d, t: _shard_two(d, {k: v for k, v in t.items() if k != lam}, {emb},
                                 extra_map={lam: "model-00002-of-00002.safetensors"}),
         "weight_map lists lambda_q1, no shard holds it"),
    ]


def write_refused():
    base = os.path.join(OUT, "refused")
    if os.path.isdir(base):
        shutil.rmtree(base)
    os.makedirs(base)
    rows = []
    for case, cfg, why in REFUSED_CONFIGS:
        d = os.path.join(base, case)
        os.makedirs(d)
        write_json(os.path.join(d, "config.json"), cfg)
        check("refused dir %s: config refused" % case, refuses(CR.resolve_config, cfg))
        # weights of the unmutated base, so only config.json is wrong
        _, t = _tiny_weights("motif2" if case.startswith("motif2") else
                             "motif" if case.startswith("motif") else "diffllama")
        TR.write_safetensors(os.path.join(d, CR.SINGLE_FILE), t, metadata={"format": "pt"})
        rows.append((case, "ConfigError", why))
    for case, fam, writer, why in refused_file_cases():
        d = os.path.join(base, case)
        os.makedirs(d)
        tie = fam == "diffllama_tied"
        fam = "diffllama" if tie else fam
        write_json(os.path.join(d, "config.json"), tiny_config(fam, tie_word_embeddings=tie))
        rc, t = _tiny_weights(fam, tie)
        writer(d, t)
        check("refused dir %s: files refused" % case, refuses(CR.load_checkpoint, d))
        rows.append((case, "FileError", why))
    # a valid tiny directory next to them, so a test can tell "refused" from "unreadable"
    d = os.path.join(base, "control_valid")
    os.makedirs(d)
    write_json(os.path.join(d, "config.json"), tiny_config("diffllama"))
    _, t = _tiny_weights("diffllama")
    TR.write_safetensors(os.path.join(d, CR.SINGLE_FILE), t, metadata={"format": "pt"})
    CR.load_checkpoint(d)
    lines = ["# Checkpoint directories a reader must refuse",
             "",
             "Written by tools/make_checkpoint_goldens.py; rules in docs/checkpoints.md",
             "('Refused', 'Files'). Each is a tiny DiffLlama or Motif checkpoint (hidden 8, 2 heads of",
             "width 4, one layer, vocab 16, F32; `motif2_*`: Motif-2, 3 query heads in one group of 2",
             "signal heads and a noise head, 2 kv heads, head_dim 4) with one thing wrong; the reference loader",
             "(tools/checkpoint_reference.py `load_checkpoint`) refuses every one of them, and reads",
             "`control_valid`, the unmutated DiffLlama base. Suggested exception: ConfigError when",
             "config.json is at fault, FileError when the files are.",
             "",
             "| directory | error | what is wrong |",
             "|---|---|---|"]
    lines += ["| `%s` | %s | %s |" % r for r in rows]
    lines += ["| `control_valid` | (none) | nothing: must load |", ""]
    with open(os.path.join(base, "README.md"), "w") as f:
        f.write("\n".join(lines))
    return len(rows)


# ============================================================================================
# README
# ============================================================================================
def readme(results):
    L_ = []
    w = L_.append
    w("# Golden checkpoints (DiffLlama, Motif, Motif-2)")
    w("")
    w("Tiny random checkpoints laid out exactly as the Hugging Face Hub ships them, for the")
    w("released-checkpoint readers of docs/checkpoints.md (docs/math.md §8). Regenerate")
    w("(deterministic, seeded; a few seconds) with")
    w("")
    w("    nice /usr/bin/python3 tools/make_checkpoint_goldens.py")
    w("")
    w("(Debian python3 + python3-torch; no `transformers`, no `safetensors` package). The")
    w("goldens come from the float64 transcription `tools/checkpoint_reference.py`, written from")
    w("the upstream sources named in docs/checkpoints.md, never from the C++ code.")
    w("")
    w("Each directory holds")
    w("- `config.json`: the upstream keys (DiffLlama: model_type `diffllama`, architectures")
    w("  `[\"DiffLlamaForCausalLM\"]`; Motif: architectures `[\"MotifForCausalLM\"]`,")
    w("  model_type `Motif`, auto_map of the remote code; Motif-2: Motif's keys with")
    w("  `num_noise_heads`, `head_dim` and `k_ratio` 1, grouped differential attention);")
    w("- `generation_config.json`: bos/eos ids (eos an int, or a list);")
    w("- `model.safetensors`, or shards `model-0000k-of-0000n.safetensors` with")
    w("  `model.safetensors.index.json` ({\"metadata\": {\"total_size\"}, \"weight_map\"});")
    w("- `golden.safetensors` (all F64): `tokens` [T] (ids stored as doubles), `logits` [T, V]")
    w("  (full causal forward at positions 0..T-1, from the exact stored values, BF16 included),")
    w("  `generated` [n] (greedy continuation: argmax of the last row, lowest id on ties, stop")
    w("  after emitting an eos id of generation_config.json, at most `max_new_tokens`),")
    w("  `generated_logits` [n, V] (the last-row logits that chose each generated token, i.e.")
    w("  rows T-1 .. T+n-2 of a full forward over tokens + generated: what an incremental")
    w("  KV-cache decode must reproduce). `__metadata__`: family, max_new_tokens, eos_token_ids")
    w("  (JSON list), stopped_on_eos.")
    w("")
    w("`refused/` holds tiny directories a reader must refuse, one fault each (its README).")
    w("")
    w("All: hidden_size %d, 2 layers, vocab %d, intermediate_size %d, rope_theta 10000 unless" %
      (D, V, I_SIZE))
    w("stated. lambda_init: DiffLlama layer i uses 0.8 - 0.6 exp(-0.3 i) (0.2, 0.35551); Motif")
    w("and Motif-2 use 0.8 - 0.6 exp(-0.3 (i - 1)) (-0.0099071, 0.2). The `H` column is the")
    w("config's `num_attention_heads` (Motif-2: every query head, noise heads included; `Hn` the")
    w("noise heads).")
    w("")
    w("| directory | family | H | Hn | Hkv | hd | T | new | stored | files | params | covers |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        rc = r["rc"]
        stop = ", ends on eos" if r["stopped"] else ""
        w("| `%s` | %s | %d | %s | %d | %d | %d | %d%s | %s | %s | %d | %s |" % (
            name, "motif-2" if rc["grouped"] else rc["family"], rc["num_attention_heads"],
            rc.get("num_noise_heads", "-"), rc["num_key_value_heads"],
            rc["head_dim"], r["T"], len(r["gen"]), stop, r["dtype"], len(r["files"]),
            r["nparams"], r["desc"]))
    w("")
    w("## Sensitivity: what a wrong convention does to the logits")
    w("")
    w("Max |logit change| over [T, V] when the golden model is run with one convention")
    w("flipped (tools/make_checkpoint_goldens.py `flips`). Each one not marked 'not asserted'")
    w("is asserted > %g, i.e. 100 times the float32 tolerance, so a reader that gets that" % FLIP_MIN)
    w("convention wrong fails the golden. Logits are O(1)-O(10).")
    w("")
    for name, r in results.items():
        w("`%s`:" % name)
        for label, diff, asserted in r["sens"]:
            w("- %s: %.3g%s" % (label, diff, "" if asserted else " (not asserted)"))
        if r["eos_note"]:
            w("- " + r["eos_note"] + " (asserted)")
        w("")
    w("Why some are not asserted: an eps only matters when the normalised vector is tiny; the")
    w("directories built for it (`diffllama_v5_rope_parameters`, `motif_gqa_bf16_sharded`,")
    w("`motif2_gda_r2_bf16_tied_sharded`,")
    w("tiny v_proj / gate_proj weights) assert it, the others report it.")
    w("")
    w("Suggested tolerances: float64 reader 1e-9 absolute on logits; float32 reader 1e-4")
    w("(BF16 weights are widened exactly, so they add no error). Greedy continuations were")
    w("chosen so that every step's top-1 minus top-2 logit is >= %g (smallest margin per" %
      MARGIN_MIN)
    w("directory: %s)." % ", ".join("%s %.3g" % (n, r["margin"]) for n, r in results.items()))
    w("")
    w("Weight initialisation (seeded torch.Generator, float64, then rounded to the stored")
    w("dtype): embeddings N(0, 1) (N(0, 0.5) tied); every RMSNorm weight and subln 1 + N(0, 0.2);")
    w("lambda_* N(0, 0.3); mlp.act_fn.weight [0.25, 0.5, 0.9] + N(0, 0.05), act_fn.bias")
    w("N(0, 0.1); q_proj, k_proj N(0, 1.2/sqrt(fan_in)); every other matrix N(0, 1/sqrt(fan_in))")
    w("(v_proj, gate_proj scaled down where stated). Prompt tokens uniform in [0, vocab).")
    w("")
    return "\n".join(L_)


# ============================================================================================
def main():
    torch.set_grad_enabled(False)
    llama3_checks()
    rope_checks()
    config_checks()
    os.makedirs(OUT, exist_ok=True)
    results = {}
    for spec in DIRS:
        results[spec[0]] = build(*spec)
    n_refused = write_refused()
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(readme(results))
    for name, r in results.items():
        print("%-32s %-9s T=%2d gen=%s%s margin %.3g params %d" % (
            name, r["rc"]["family"], r["T"], r["gen"], " (eos)" if r["stopped"] else "",
            r["margin"], r["nparams"]))
        for label, diff, asserted in r["sens"]:
            print("    %-60s %.3g%s" % (label, diff, "" if asserted else "  (not asserted)"))
    total = sum(os.path.getsize(os.path.join(dp, fn))
                for dp, _, fs in os.walk(OUT) for fn in fs)
    print("%d must-refuse directories under refused/" % n_refused)
    print("== self-checks: %d passed, %d failed ==" % (sum(ok for _, ok, _ in CHECKS),
                                                       sum(not ok for _, ok, _ in CHECKS)))
    print("total size of tests/data/checkpoints: %d bytes" % total)


if __name__ == "__main__":
    main()
