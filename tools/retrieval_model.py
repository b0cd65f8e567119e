#!/usr/bin/python3
"""A batched PyTorch decoder that computes exactly the diffattn model math (docs/math.md §2-§5) for
every attention kind, with the tensor names and shapes of our safetensors format, so it can be
trained (float32) and its weights run unchanged by the C++ library.

The per-sequence float64 transcription tools/torch_reference.py is the independent reference;
`check_against_reference()` compares the two on random weights for every kind.

Layout notes (docs/math.md §3): weights are nn.Linear style [out, in], y = x W^T, no biases;
diff/dint/shared_diff heads pair query sub-heads 2h (map 1) and 2h+1 (map 2); GQA only with the
per_head pairing (map m of head h uses key sub-head 2(h/rep)+m); interleaved rotary.
"""

import json
import math
import os

import torch

import torch_reference as R  # shapes, config defaults and constants are shared with it

full_config = R.full_config          # config.json with the docs/math.md §5 defaults filled in
map_width = R.sub_width              # d of one query/key map (docs/math.md §3)
param_shapes = R.model_param_shapes  # tensor name -> file shape, in file order (docs/math.md §5)
lambda_init = R.lambda_init          # docs/math.md §2.5
SUBLN_EPS = R.SUBLN_EPS              # docs/math.md §3.1: 1e-5 whatever rms_norm_eps says


def load_model(kind, dtype, models):
    """(full config, parameters as `dtype`) of the model in models/<kind>/ (our format)."""
    d = os.path.join(models, kind)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    params, _, _ = R.read_safetensors(os.path.join(d, "model.safetensors"))
    return full_config(cfg), {k: t.to(dtype) for k, t in params.items()}


def init_params(cfg, generator, std=0.02):
    """Training initialisation: norms and subln 1; lambda vectors N(0, 0.1) (the official DIFF
    code); every matrix and factor N(0, std); out/down projections N(0, std / sqrt(2 layers))."""
    cfg = full_config(cfg)
    params = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith("norm.weight") or name.endswith("subln.weight"):
            t = torch.ones(shape)
        elif "lambda_q" in name or "lambda_k" in name:
            t = torch.randn(shape, generator=generator) * 0.1
        elif name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
            t = torch.randn(shape, generator=generator) * (std / math.sqrt(2 * cfg["num_hidden_layers"]))
        else:
            t = torch.randn(shape, generator=generator) * std
        params[name] = t
    return params


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


_ROPE_CACHE = {}


def rope_tables(T, d, theta, dtype):
    """cos, sin [T, d/2]; angles in float64 (pos * theta^(-2i/d)), rounded once (docs/model.md)."""
    key = (T, d, float(theta), dtype)
    if key not in _ROPE_CACHE:
        i = torch.arange(d // 2, dtype=torch.float64)
        inv = float(theta) ** (-2.0 * i / d)
        ang = torch.arange(T, dtype=torch.float64).unsqueeze(1) * inv.unsqueeze(0)
        _ROPE_CACHE[key] = (torch.cos(ang).to(dtype), torch.sin(ang).to(dtype))
    return _ROPE_CACHE[key]


def rope(x, theta):
    """x [B, T, maps, d]: interleaved pairs (2i, 2i+1) turned by pos * theta^(-2i/d)
    (docs/math.md §3.1)."""
    T, d = x.shape[1], x.shape[-1]
    cos, sin = rope_tables(T, d, theta, x.dtype)
    cos = cos[:, None, :]
    sin = sin[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def causal_softmax(scores):
    """Row softmax over keys j <= n (scores [..., T, T])."""
    T = scores.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)


def heads_first(x):
    """[B, T, maps, d] -> [B, maps, T, d]"""
    return x.transpose(1, 2)


def attention(x, p, cfg, depth, want_maps=False):
    """One attention module (docs/math.md §3) on x [B, T, D] (after input_layernorm).
    p: this layer's self_attn tensors by leaf name. Returns (y [B, T, D], maps or None); maps is
    the combined attention map of each head [B, H, T, T] (softmax: A; diff/shared_diff: A1 - lambda
    A2; dint: A1 - lambda A2 + lambda I; diff_v2: A_2h - sigmoid(l) A_2h+1) whose product with the
    head's values is the head's output before subln / out_proj."""
    a = cfg["attention"]
    B, T, D = x.shape
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    rep = H // Hkv
    d = map_width(cfg)
    theta = cfg["rope_theta"]
    s = 1.0 / math.sqrt(d)
    maps = None

    if a == "softmax":
        q = heads_first(rope((x @ p["q_proj.weight"].T).view(B, T, H, d), theta))
        k = heads_first(rope((x @ p["k_proj.weight"].T).view(B, T, Hkv, d), theta))
        v = heads_first((x @ p["v_proj.weight"].T).view(B, T, Hkv, d))
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        A = causal_softmax(s * (q @ k.transpose(-1, -2)))
        o = (A @ v).transpose(1, 2).reshape(B, T, H * d)
        return o @ p["out_proj.weight"].T, (A if want_maps else None)

    if a == "diff_v2":
        nq = 2 * H
        q = heads_first(rope((x @ p["q_proj.weight"].T).view(B, T, nq, d), theta))
        k = heads_first(rope((x @ p["k_proj.weight"].T).view(B, T, Hkv, d), theta))
        v = heads_first((x @ p["v_proj.weight"].T).view(B, T, Hkv, d))
        g = nq // Hkv
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        A = causal_softmax(s * (q @ k.transpose(-1, -2)))  # [B, 2H, T, T]
        o = A @ v  # [B, 2H, T, d]
        lam = torch.sigmoid(x @ p["lambda_proj.weight"].T).transpose(1, 2)  # [B, H, T]
        o = o[:, 0::2] - lam.unsqueeze(-1) * o[:, 1::2]  # [B, H, T, d]
        if want_maps:
            maps = A[:, 0::2] - lam.unsqueeze(-1) * A[:, 1::2]
        o = o.transpose(1, 2).reshape(B, T, H * d)
        return o @ p["o_proj.weight"].T, maps

    # diff, dint, shared_diff
    lam = (torch.exp(torch.dot(p["lambda_q1"], p["lambda_k1"]))
           - torch.exp(torch.dot(p["lambda_q2"], p["lambda_k2"])) + lambda_init(depth))
    if a in ("diff", "dint"):
        if cfg["diff_gqa_pairing"] != "per_head" and rep != 1:
            raise ValueError("only the per_head pairing is implemented for GQA")
        q = rope((x @ p["q_proj.weight"].T).view(B, T, 2 * H, d), theta)
        k = rope((x @ p["k_proj.weight"].T).view(B, T, 2 * Hkv, d), theta)
        v = heads_first((x @ p["v_proj.weight"].T).view(B, T, Hkv, 2 * d))
        q1, q2 = heads_first(q[:, :, 0::2]), heads_first(q[:, :, 1::2])
        k1, k2 = heads_first(k[:, :, 0::2]), heads_first(k[:, :, 1::2])
        k1, k2 = k1.repeat_interleave(rep, dim=1), k2.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    elif a == "shared_diff":
        def proj(base, nm):  # docs/math.md §3.3: X (base^T + a[h] b[h]^T), per head
            w = base.T.unsqueeze(0) + p[nm + "_a"] @ p[nm + "_b"].transpose(1, 2)  # [H, D, d]
            return heads_first(rope(torch.einsum("btc,hcd->bthd", x, w), theta))
        q1, q2 = proj(p["q_base.weight"], "q1"), proj(p["q_base.weight"], "q2")
        k1, k2 = proj(p["k_base.weight"], "k1"), proj(p["k_base.weight"], "k2")
        v = heads_first((x @ p["v_proj.weight"].T).view(B, T, H, 2 * d))
    else:
        raise ValueError(a)
    A1 = causal_softmax(s * (q1 @ k1.transpose(-1, -2)))
    A2 = causal_softmax(s * (q2 @ k2.transpose(-1, -2)))
    comb = A1 - lam * A2
    if a == "dint":
        mode = cfg["dint_integral"]
        cnt = torch.arange(1, T + 1, dtype=x.dtype).view(T, 1)
        G = torch.cumsum(A1, dim=-2) / cnt  # mean of rows 0..n (docs/math.md §2.3)
        if mode == "causal_softmax":
            I = causal_softmax(G)
        elif mode == "causal_mean":
            I = G
        else:
            raise ValueError("only the causal integrals are implemented: %s" % mode)
        comb = comb + lam * I
    o = comb @ v  # [B, H, T, 2d]
    o = rms_norm(o, p["subln.weight"], SUBLN_EPS)
    if a in ("diff", "shared_diff"):
        o = o * (1.0 - lambda_init(depth))
    o = o.transpose(1, 2).reshape(B, T, H * 2 * d)
    return o @ p["out_proj.weight"].T, (comb if want_maps else None)


def forward(tokens, params, cfg, want_maps=False, positions=None):
    """tokens LongTensor [B, T] -> logits [B, T, V] (and the list of per-layer maps).
    positions [B, R] (optional): compute the logits of these rows only -> [B, R, V]."""
    cfg = full_config(cfg)
    eps = cfg["rms_norm_eps"]
    x = params["model.embed_tokens.weight"][tokens]
    all_maps = []
    for i in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % i
        att = {k[len(pre) + 10:]: v for k, v in params.items() if k.startswith(pre + "self_attn.")}
        y, maps = attention(rms_norm(x, params[pre + "input_layernorm.weight"], eps), att, cfg, i,
                            want_maps)
        all_maps.append(maps)
        x = x + y
        h = rms_norm(x, params[pre + "post_attention_layernorm.weight"], eps)
        mlp = (torch.nn.functional.silu(h @ params[pre + "mlp.gate_proj.weight"].T)
               * (h @ params[pre + "mlp.up_proj.weight"].T))
        x = x + mlp @ params[pre + "mlp.down_proj.weight"].T
    if positions is not None:
        x = torch.gather(x, 1, positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
    x = rms_norm(x, params["model.norm.weight"], eps)
    head = params["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else params["lm_head.weight"]
    logits = x @ head.T
    return (logits, all_maps) if want_maps else logits


def check_against_reference(cfg, seed=7, T=23, B=3):
    """Max |logit difference| between this batched model and tools/torch_reference.py (float64)
    on random weights of the given config. Returns the float64 difference."""
    g = torch.Generator().manual_seed(seed)
    params = {k: v.to(torch.float64) for k, v in init_params(cfg, g, std=0.3).items()}
    for k in params:  # make norms and lambdas non-trivial
        if k.endswith("norm.weight") or "lambda_" in k:
            params[k] = params[k] + 0.1 * torch.randn(params[k].shape, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)
    with torch.no_grad():
        ours = forward(tokens, params, cfg)
        worst = 0.0
        for b in range(B):
            ref = R.model_forward(tokens[b], params, cfg)
            worst = max(worst, float((ours[b] - ref).abs().max()))
    return worst
