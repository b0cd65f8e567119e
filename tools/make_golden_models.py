#!/usr/bin/python3
"""Build the golden files of the diffattn test-suite from the independent float64 PyTorch
reference in tools/torch_reference.py.

    /usr/bin/python3 tools/make_golden_models.py          (run from the repository root or not)

Writes
    tests/data/models/<name>/{config.json, model.safetensors, golden.safetensors}
    tests/data/models/README.md
    tests/data/kernels/<case>.safetensors
    tests/data/kernels/README.md
Everything is seeded and deterministic. The self-checks below run every time; any failure
aborts with an AssertionError before (or while) files are written.
"""

import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as R  # noqa: E402

DT = torch.float64
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(ROOT, "tests", "data", "models")
KERNELS_DIR = os.path.join(ROOT, "tests", "data", "kernels")

CHECKS = []  # (name, ok, detail) for the summary


def check(name, ok, detail=""):
    CHECKS.append((name, bool(ok), detail))
    assert ok, "self-check failed: %s %s" % (name, detail)


def maxabs(a, b):
    return float((a - b).abs().max())


# ============================================================================================
# Model zoo
# ============================================================================================
def base_cfg(attention, D, H, **kw):
    c = {
        "attention": attention,
        "hidden_size": D,
        "num_attention_heads": H,
        "num_key_value_heads": H,
        "num_hidden_layers": 2,
        "intermediate_size": {16: 43, 32: 86, 64: 171}[D],
        "vocab_size": 61,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "causal": True,
    }
    if attention in ("diff", "dint"):
        c["diff_gqa_pairing"] = "per_head"
    if attention == "dint":
        c["dint_integral"] = "causal_softmax"
    c.update(kw)
    return c


# name, config.json content, seed (weights and tokens), T, stored dtype, what it covers
MODELS = [
    ("softmax", base_cfg("softmax", 16, 2), 101, 13, "F32",
     "baseline softmax attention (3.2), H=2, d=8, no GQA"),
    ("softmax_gqa", base_cfg("softmax", 16, 4, num_key_value_heads=2, rms_norm_eps=1e-6),
     102, 12, "F32", "softmax attention with GQA rep=2, 2 kv heads (head h uses kv head h/2); "
     "rms_norm_eps 1e-6 with tiny embeddings (std 0.002) so the value of rms_norm_eps matters"),
    ("diff", base_cfg("diff", 16, 2), 201, 17, "F32",
     "DIFF (3.1), H=2, d=4, v width 2d=8, subln, (1-lambda_init), lambda_init(depth)"),
    ("diff_gqa_per_head", base_cfg("diff", 16, 4, num_key_value_heads=2,
                                   diff_gqa_pairing="per_head"), 202, 15, "F32",
     "DIFF with GQA rep=2 (H=4, 2 kv heads, d=2), pairing per_head (K1 = key sub-head 2g, K2 = 2g+1, "
     "g = h/2)"),
    ("diff_gqa_per_subhead", base_cfg("diff", 16, 4, num_key_value_heads=2,
                                      diff_gqa_pairing="per_subhead"), 202, 15, "F32",
     "SAME weights and tokens as diff_gqa_per_head, pairing per_subhead (both maps of head h "
     "use key sub-head h) -> different logits"),
    ("diff_tied", base_cfg("diff", 16, 2, tie_word_embeddings=True), 203, 11, "F32",
     "DIFF with tie_word_embeddings true (no lm_head.weight tensor)"),
    ("diff_bf16", base_cfg("diff", 16, 2), 204, 14, "BF16",
     "DIFF with every tensor stored as BF16; golden logits use the BF16 values exactly"),
    ("diff_rope_theta", base_cfg("diff", 16, 1, rope_theta=100.0), 205, 19, "F32",
     "DIFF with rope_theta = 100 (non-default); a single head (H=1) so d=8 and rotary has 4 "
     "frequency pairs"),
    ("diff_encoder", base_cfg("diff", 16, 2, causal=False, rms_norm_eps=1e-3), 206, 13, "F32",
     "DIFF bidirectional encoder (causal false, mask none); rms_norm_eps 1e-3 so using it for "
     "subln (which must use 1e-5) is caught"),
    ("dint_causal_softmax", {"attention": "dint", "hidden_size": 16, "num_attention_heads": 2,
                             "num_hidden_layers": 2, "intermediate_size": 43,
                             "vocab_size": 61, "tie_word_embeddings": False},
     301, 16, "F32",
     "DINT causal_softmax; MINIMAL config.json: num_key_value_heads, rms_norm_eps, rope_theta, "
     "dint_integral, diff_gqa_pairing and causal are omitted and must take their documented defaults "
     "(H, 1e-5, 10000, causal_softmax, per_head, true)"),
    ("dint_causal_mean", base_cfg("dint", 16, 2, dint_integral="causal_mean"), 302, 14, "F32",
     "DINT causal_mean"),
    ("dint_global_mean_encoder", base_cfg("dint", 16, 2, dint_integral="global_mean",
                                          causal=False), 303, 12, "F32",
     "DINT global_mean in encoder mode (causal false), the only place it is allowed"),
    ("dint_gqa_per_head", base_cfg("dint", 16, 4, num_key_value_heads=2,
                                   dint_integral="causal_softmax"), 304, 18, "F32",
     "DINT causal_softmax with GQA rep=2 (H=4, 2 kv heads, d=2), pairing per_head"),
    ("shared_diff", base_cfg("shared_diff", 16, 2, shared_diff_rank=3), 401, 15, "F32",
     "Shared DIFF (3.3), rank 3, H=2, d=4, shared bases + per-head low-rank factors"),
    ("diff_v2", base_cfg("diff_v2", 16, 4, num_key_value_heads=2, head_dim=6), 501, 16, "F32",
     "DIFF V2 (3.4): 2H=8 query heads of head_dim 6, Hkv=2 (query head t uses kv head t/4), "
     "per-token sigmoid lambda from lambda_proj [4,16], o_proj 24->16, no subln"),
]


# embedding std overrides (default 1.0, 0.5 when tied)
EMBED_STD = {"softmax_gqa": 0.002}

# mutations that must change the logits by more than 1e-4 (others are only reported)
MUST_DETECT_EPS = {"softmax_gqa": "rms_norm_eps=1e-5", "diff_encoder": "subln eps=rms_norm_eps"}


def init_params(cfg, seed, embed_std=None):
    """Random weights, float64, so activations are O(1) and attention maps are not degenerate."""
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(*shape, generator=g, dtype=DT) * std

    shapes = R.model_param_shapes(cfg)
    fc = R.full_config(cfg)
    D = fc["hidden_size"]
    params = {}
    for name, shape in shapes.items():
        leaf = name.split("self_attn.")[-1] if "self_attn." in name else name
        if name == "model.embed_tokens.weight":
            if embed_std is None:
                embed_std = 1.0 if not fc["tie_word_embeddings"] else 0.5
            w = normal(shape, embed_std)
        elif name.endswith("norm.weight") or leaf == "subln.weight":
            # includes subln.weight, input/post_attention_layernorm, model.norm
            w = 1.0 + normal(shape, 0.1)
        elif leaf.startswith("lambda_q") or leaf.startswith("lambda_k"):
            w = normal(shape, 0.2)
        elif leaf in ("q_proj.weight", "k_proj.weight", "q_base.weight", "k_base.weight"):
            w = normal(shape, 1.2 / math.sqrt(D))
        elif leaf.endswith("_a") and "self_attn." in name:  # [H, D, r]
            w = normal(shape, 1.0 / math.sqrt(D))
        elif leaf.endswith("_b") and "self_attn." in name:  # [H, d, r]
            w = normal(shape, 0.6 / math.sqrt(shape[-1]))
        else:  # v_proj, out_proj, o_proj, lambda_proj, mlp.*, lm_head: 1/sqrt(fan_in)
            w = normal(shape, 1.0 / math.sqrt(shape[1]))
        params[name] = w
    tokens = torch.randint(0, fc["vocab_size"], (64,), generator=g)
    return params, tokens


def round_to(params, dtype):
    tdt = {"F32": torch.float32, "BF16": torch.bfloat16}[dtype]
    return {k: v.to(tdt).to(DT) for k, v in params.items()}


# ============================================================================================
# Self-checks on the attention maps of a real forward
# ============================================================================================
def attention_map_checks(model_name, cfg):
    fc = R.full_config(cfg)
    a = fc["attention"]
    stats = {"rows": 0}

    def hook(layer, x, y, det):
        if a not in ("diff", "dint", "shared_diff"):
            if a == "diff_v2":
                lt = det["lam_tok"]
                check("%s L%d lambda_tok in (0,1) and varied" % (model_name, layer),
                      bool(((lt > 0) & (lt < 1)).all()) and float(lt.std()) > 0.05)
            return
        lam = det["lam"]
        allowed = det["allowed"]
        li = R.lambda_init(layer)
        for h in range(len(det["q1s"])):
            q1, k1, q2, k2, v = (det["q1s"][h], det["k1s"][h], det["q2s"][h], det["k2s"][h],
                                 det["vs"][h])
            dm = R.diff_matrix(q1, k1, q2, k2, lam, allowed)
            check("%s L%d h%d DIFF rows sum to 1-lambda" % (model_name, layer, h),
                  maxabs(dm.sum(1), (1 - lam).expand(dm.shape[0])) < 1e-12)
            a1 = R.softmax_matrix(q1, k1, allowed)
            # attention maps are not degenerate: max weight well below 1 on later rows
            stats["rows"] += dm.shape[0]
            stats.setdefault("maxw", []).append(float(a1[4:].max(1).values.mean()))
            if a == "dint":
                mode = fc["dint_integral"]
                m = R.dint_matrix(q1, k1, q2, k2, lam, mode, allowed)
                check("%s L%d h%d DINT rows sum to 1" % (model_name, layer, h),
                      maxabs(m.sum(1), torch.ones(m.shape[0], dtype=DT)) < 1e-12)
                o1 = a1 @ v
                gv = R.integral_matrix(a1, mode, allowed) @ v
                if mode == "causal_mean":
                    run_mean = torch.cumsum(o1, 0) / torch.arange(1, o1.shape[0] + 1,
                                                                  dtype=DT).unsqueeze(1)
                    check("%s L%d h%d causal_mean G V = running mean of O1" %
                          (model_name, layer, h), maxabs(gv, run_mean) < 1e-12)
                if mode == "global_mean":
                    check("%s L%d h%d global_mean 1 g V = mean of O1 rows" %
                          (model_name, layer, h),
                          maxabs(gv, o1.mean(0, keepdim=True).expand_as(gv)) < 1e-12)
        stats.setdefault("lams", []).append((layer, float(lam), li))

    return hook, stats


def official_style_diff(x, p, cfg, depth):
    """A second, vectorised transcription of the diff/dint module written the way the official
    code is structured (used only to cross-check the per-head loop of torch_reference):
      per_subhead: plain-PyTorch MultiheadDiffAttn: repeat_kv over the 2Hkv key sub-heads and the
                   Hkv value heads, one batched softmax over 2H sub-heads, view(H, 2, ...).
      per_head:    FlashAttention modules: q viewed [T, H, 2, d], k [T, Hkv, 2, d], two GQA
                   attentions (map 1 with q[:, :, 0], k[:, :, 0]; map 2 with index 1)."""
    fc = R.full_config(cfg)
    T, D = x.shape
    H, Hkv = fc["num_attention_heads"], fc["num_key_value_heads"]
    rep, d = H // Hkv, R.sub_width(fc)
    pos = torch.arange(T)
    q = R.rope((x @ p["q_proj.weight"].T).view(T, 2 * H, d), pos, fc["rope_theta"])
    k = R.rope((x @ p["k_proj.weight"].T).view(T, 2 * Hkv, d), pos, fc["rope_theta"])
    v = (x @ p["v_proj.weight"].T).view(T, Hkv, 2 * d)
    lam = (torch.exp((p["lambda_q1"] * p["lambda_k1"]).sum()) -
           torch.exp((p["lambda_q2"] * p["lambda_k2"]).sum()) + R.lambda_init(depth))
    bias = torch.zeros(T, T, dtype=DT)
    if fc["causal"]:
        bias = torch.triu(torch.full((T, T), float("-inf"), dtype=DT), 1)
    vr = v.repeat_interleave(rep, dim=1).transpose(0, 1)  # [H, T, 2d]
    if fc["diff_gqa_pairing"] == "per_subhead":
        kr = k.repeat_interleave(rep, dim=1)  # [T, 2H, d]
        w = torch.softmax(torch.einsum("tad,sad->ats", q, kr) / math.sqrt(d) + bias, dim=-1)
        w = w.view(H, 2, T, T)
    else:
        q4 = q.view(T, H, 2, d)
        k4 = k.view(T, Hkv, 2, d).repeat_interleave(rep, dim=1)  # [T, H, 2, d]
        w = torch.softmax(torch.einsum("thmd,shmd->hmts", q4, k4) / math.sqrt(d) + bias, dim=-1)
    a1, a2 = w[:, 0], w[:, 1]
    att = a1 - lam * a2
    if fc["attention"] == "dint":
        mode = fc["dint_integral"]
        if mode == "global_mean":
            integ = a1.mean(dim=1, keepdim=True).expand_as(a1)
        else:
            cnt = torch.arange(1, T + 1, dtype=DT).view(1, T, 1)
            G = torch.cumsum(a1, dim=1) / cnt
            integ = G if mode == "causal_mean" else torch.softmax(G + bias, dim=-1)
        att = att + lam * integ
    o = att @ vr  # [H, T, 2d]
    o = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + 1e-5) * p["subln.weight"]
    if fc["attention"] == "diff":
        o = o * (1 - R.lambda_init(depth))
    return o.transpose(0, 1).reshape(T, H * 2 * d) @ p["out_proj.weight"].T


def vectorised_softmax_like(x, p, cfg):
    """Vectorised transcription of softmax (3.2) and diff_v2 (3.4) for cross-checking."""
    fc = R.full_config(cfg)
    T, D = x.shape
    H, Hkv = fc["num_attention_heads"], fc["num_key_value_heads"]
    d = R.sub_width(fc)
    nq = 2 * H if fc["attention"] == "diff_v2" else H
    pos = torch.arange(T)
    q = R.rope((x @ p["q_proj.weight"].T).view(T, nq, d), pos, fc["rope_theta"])
    k = R.rope((x @ p["k_proj.weight"].T).view(T, Hkv, d), pos, fc["rope_theta"])
    v = (x @ p["v_proj.weight"].T).view(T, Hkv, d)
    k = k.repeat_interleave(nq // Hkv, dim=1)
    v = v.repeat_interleave(nq // Hkv, dim=1).transpose(0, 1)
    bias = torch.zeros(T, T, dtype=DT)
    if fc["causal"]:
        bias = torch.triu(torch.full((T, T), float("-inf"), dtype=DT), 1)
    w = torch.softmax(torch.einsum("tad,sad->ats", q, k) / math.sqrt(d) + bias, dim=-1)
    o = w @ v  # [nq, T, d]
    if fc["attention"] == "diff_v2":
        lt = torch.sigmoid(x @ p["lambda_proj.weight"].T).T.unsqueeze(-1)  # [H, T, 1]
        o = o.view(H, 2, T, d)
        o = o[:, 0] - lt * o[:, 1]
        return o.transpose(0, 1).reshape(T, H * d) @ p["o_proj.weight"].T
    return o.transpose(0, 1).reshape(T, H * d) @ p["out_proj.weight"].T


def official_style_check(name, params64, cfg):
    def hook(layer, x, y, det):
        lp = R.layer_params(params64, layer)
        if cfg["attention"] in ("diff", "dint"):
            ref = official_style_diff(x, lp, cfg, layer)
        else:
            ref = vectorised_softmax_like(x, lp, cfg)
        check("%s L%d module == official-style vectorised transcription" % (name, layer),
              maxabs(ref, y) < 1e-12, "%.2e" % maxabs(ref, y))
    return hook


def shared_diff_factor_check(params64, cfg, tokens):
    """(X a) b^T + X base^T must equal X (base^T + a b^T) on real inputs."""
    fc = R.full_config(cfg)
    x = params64["model.embed_tokens.weight"][tokens]
    x = R.rms_norm(x, params64["model.layers.0.input_layernorm.weight"], fc["rms_norm_eps"])
    p = R.layer_params(params64, 0)
    worst = 0.0
    for h in range(fc["num_attention_heads"]):
        for nm, base in (("q1", "q_base.weight"), ("q2", "q_base.weight"),
                         ("k1", "k_base.weight"), ("k2", "k_base.weight")):
            merged = x @ (p[base].T + p[nm + "_a"][h] @ p[nm + "_b"][h].T)
            factored = x @ p[base].T + (x @ p[nm + "_a"][h]) @ p[nm + "_b"][h].T
            worst = max(worst, maxabs(merged, factored))
    check("shared_diff merged == factored projections", worst < 1e-12, "max %.2e" % worst)


# ============================================================================================
# Global self-checks
# ============================================================================================
def official_param_count_checks():
    # MultiheadDiffAttn(embed_dim=1024, depth=0, num_heads=8[, num_kv_heads=4])
    for hkv, expect in ((8, 4194688), (4, 3146112)):
        cfg = {"attention": "diff", "hidden_size": 1024, "num_attention_heads": 8,
               "num_key_value_heads": hkv}
        n = R.count_params(R.attention_param_shapes(cfg))
        check("official MultiheadDiffAttn(1024, 8 heads, %d kv) params = %d" % (hkv, expect),
              n == expect, "got %d" % n)
    # dint has the same parameters as diff (the papers: no new learnable parameters)
    c = {"attention": "dint", "hidden_size": 1024, "num_attention_heads": 8}
    check("dint params = diff params", R.count_params(R.attention_param_shapes(c)) == 4194688)


def rope_checks():
    g = torch.Generator().manual_seed(7)
    d = 8
    q = torch.randn(d, generator=g, dtype=DT)
    k = torch.randn(d, generator=g, dtype=DT)

    def dot(m, n):
        qm = R.rope(q.view(1, d), torch.tensor([m]), 10000.0)[0]
        kn = R.rope(k.view(1, d), torch.tensor([n]), 10000.0)[0]
        return float(qm @ kn)
    check("rope: position 0 is the identity",
          maxabs(R.rope(q.view(1, d), torch.tensor([0]), 10000.0)[0], q) == 0.0)
    check("rope: q.k depends only on the offset",
          abs(dot(3, 1) - dot(7, 5)) < 1e-12 and abs(dot(2, 9) - dot(12, 19)) < 1e-12)
    check("rope: norm preserved",
          abs(float(R.rope(q.view(1, d), torch.tensor([5]), 100.0)[0].norm() - q.norm()))
          < 1e-12)
    # pair 0 rotates by angle pos (theta^0 = 1) in the (x0, x1) plane, counter-clockwise
    e0 = torch.zeros(1, d, dtype=DT)
    e0[0, 0] = 1.0
    r = R.rope(e0, torch.tensor([1]), 10000.0)[0]
    check("rope: interleaved pair (0,1), x0'=cos, x1'=sin",
          abs(float(r[0]) - math.cos(1.0)) < 1e-15 and abs(float(r[1]) - math.sin(1.0)) < 1e-15)
    e2 = torch.zeros(1, d, dtype=DT)
    e2[0, 2] = 1.0
    r = R.rope(e2, torch.tensor([3]), 10000.0)[0]
    ang = 3 * 10000.0 ** (-2.0 / d)
    check("rope: pair 1 angle pos*theta^(-2/d)", abs(float(r[2]) - math.cos(ang)) < 1e-15
          and abs(float(r[3]) - math.sin(ang)) < 1e-15)


def mask_checks():
    m = R.make_mask(2, 5, True)
    check("causal mask with offset S-N",
          m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]])
    z = R.masked_softmax(torch.randn(3, 4, dtype=DT), torch.zeros(3, 4, dtype=torch.bool))
    check("row with no allowed key -> zeros", float(z.abs().max()) == 0.0)
    try:
        R.integral_matrix(torch.ones(3, 3, dtype=DT) / 3, "global_mean", R.make_mask(3, 3, True))
        ok = False
    except ValueError:
        ok = True
    check("global_mean with causal mask is an error", ok)


# ============================================================================================
# Writing models
# ============================================================================================
def write_model(name, cfg, seed, T, dtype, desc):
    d = os.path.join(MODELS_DIR, name)
    os.makedirs(d, exist_ok=True)
    params, tokens_all = init_params(cfg, seed, EMBED_STD.get(name))
    tokens = tokens_all[:T]
    stored = round_to(params, dtype)  # exact values the file holds, as float64
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    order = list(R.model_param_shapes(cfg).keys())
    R.write_safetensors(os.path.join(d, "model.safetensors"),
                        {k: stored[k] for k in order}, default_dtype=dtype,
                        metadata={"format": "pt"})
    # read back: the golden is computed from what the file holds
    p64, dts, _ = R.read_safetensors(os.path.join(d, "model.safetensors"))
    check("%s: file round trip exact" % name,
          set(p64) == set(order) and all(maxabs(p64[k], stored[k]) == 0.0 for k in order)
          and all(v == dtype for v in dts.values()))
    hook, stats = attention_map_checks(name, cfg)
    logits = R.model_forward(tokens, p64, cfg, on_attention=hook)
    check("%s: logits finite" % name, bool(torch.isfinite(logits).all()))
    R.write_safetensors(os.path.join(d, "golden.safetensors"),
                        {"tokens": tokens.to(DT), "logits": logits}, default_dtype="F64",
                        metadata={"model": name, "note": "logits = float64 full forward of "
                                  "tools/torch_reference.py over tokens (positions 0..T-1)"})
    if cfg["attention"] == "shared_diff":
        shared_diff_factor_check(p64, cfg, tokens)
    if cfg["attention"] in ("diff", "dint", "softmax", "diff_v2"):
        R.model_forward(tokens, p64, cfg, on_attention=official_style_check(name, p64, cfg))
    if cfg["attention"] in ("diff", "dint"):
        fc = R.full_config(cfg)
        if fc["num_key_value_heads"] == fc["num_attention_heads"]:
            other = dict(cfg, diff_gqa_pairing="per_subhead"
                         if fc["diff_gqa_pairing"] == "per_head" else "per_head")
            check("%s: rep=1 -> pairings agree" % name,
                  maxabs(R.model_forward(tokens, p64, other), logits) == 0.0)
    # causal prefix property (decoders): logits of a prefix equal the first rows
    if R.full_config(cfg)["causal"]:
        pre = R.model_forward(tokens[:T - 4], p64, cfg)
        check("%s: causal prefix consistency" % name, maxabs(pre, logits[:T - 4]) < 1e-12)
    return {"params": p64, "tokens": tokens, "logits": logits, "stats": stats,
            "raw": params, "nparams": R.count_params(R.model_param_shapes(cfg))}


def sensitivity(name, cfg, info):
    """The golden must discriminate: plausible mistakes change the logits noticeably."""
    fc = R.full_config(cfg)
    muts = []
    a = fc["attention"]
    if a == "dint":
        for mode in ("causal_softmax", "causal_mean", "global_mean"):
            if mode != fc["dint_integral"]:
                c = dict(cfg, dint_integral=mode)
                if mode == "global_mean":
                    c["causal"] = False
                muts.append(("integral=" + mode, c))
        muts.append(("attention=diff", dict(cfg, attention="diff")))
    if fc["num_key_value_heads"] != fc["num_attention_heads"] and a in ("diff", "dint"):
        other = "per_subhead" if fc["diff_gqa_pairing"] == "per_head" else "per_head"
        muts.append(("pairing=" + other, dict(cfg, diff_gqa_pairing=other)))
    if fc["rope_theta"] != 10000.0:
        muts.append(("rope_theta=10000", dict(cfg, rope_theta=10000.0)))
    elif R.sub_width(fc) == 2:
        pass  # one rotary pair whose frequency is theta^0 = 1: theta cannot matter
    else:
        muts.append(("rope_theta=20000", dict(cfg, rope_theta=20000.0)))
    muts.append(("causal flipped", dict(cfg, causal=not fc["causal"])))
    if a == "dint" and fc["dint_integral"] == "global_mean":
        muts = [m for m in muts if m[0] != "causal flipped"]
    eps_muts = []
    if fc["rms_norm_eps"] == 1e-5:
        eps_muts.append(("rms_norm_eps=1e-6", dict(cfg, rms_norm_eps=1e-6)))
    else:
        eps_muts.append(("rms_norm_eps=1e-5", dict(cfg, rms_norm_eps=1e-5)))
    out = []
    for label, c in muts + eps_muts:
        lg = R.model_forward(info["tokens"], info["params"], c)
        out.append((label, maxabs(lg, info["logits"]), label not in dict(eps_muts)
                    or MUST_DETECT_EPS.get(name) == label))
    if a in ("diff", "dint", "shared_diff") and fc["rms_norm_eps"] != R.SUBLN_EPS:
        saved = R.SUBLN_EPS
        R.SUBLN_EPS = fc["rms_norm_eps"]
        try:
            lg = R.model_forward(info["tokens"], info["params"], cfg)
        finally:
            R.SUBLN_EPS = saved
        label = "subln eps=rms_norm_eps"
        out.append((label, maxabs(lg, info["logits"]), MUST_DETECT_EPS.get(name) == label))
    if info.get("bf16"):
        lg = R.model_forward(info["tokens"], info["raw"], cfg)
        out.append(("unrounded F64 weights", maxabs(lg, info["logits"]), True))
    return out


# ============================================================================================
# Kernel goldens
# ============================================================================================
def kernel_inputs(seed, S, d, dv):
    g = torch.Generator().manual_seed(seed)
    t = {}
    for nm in ("q1", "k1", "q2", "k2"):
        t[nm] = torch.randn(S, d, generator=g, dtype=DT) * 1.2
    t["v"] = torch.randn(S, dv, generator=g, dtype=DT)
    return t


def scalars(lam, scale):
    return {"lambda": torch.tensor([lam], dtype=DT), "scale": torch.tensor([scale], dtype=DT)}


def kernel_causal_cache(name, seed, S, N, d, dv, lam):
    """Causal mask, N new queries after S-N cached rows."""
    t = kernel_inputs(seed, S, d, dv)
    q1, k1, q2, k2, v = t["q1"], t["k1"], t["q2"], t["k2"], t["v"]
    s = 1.0 / math.sqrt(d)
    C = S - N
    full_mask = R.make_mask(S, S, True)
    last_mask = R.make_mask(N, S, True)
    out = dict(t)
    out.update(scalars(lam, s))
    # full-sequence outputs (N = S)
    out["softmax_full"] = R.softmax_attention(q1, k1, v, full_mask, s)
    out["diff_full"] = R.diff_attention(q1, k1, q2, k2, v, lam, full_mask, s)
    for mode in ("causal_softmax", "causal_mean"):
        out["dint_%s_full" % mode] = R.dint_attention(q1, k1, q2, k2, v, lam, mode, full_mask, s)
    # last N rows with a KV cache of C keys (queries = rows C..S-1 of q1/q2)
    a1_full = R.softmax_matrix(q1, k1, full_mask, s)
    hist = a1_full[:C]  # A1 rows of the cached queries
    out["softmax"] = R.softmax_attention(q1[C:], k1, v, last_mask, s)
    out["diff"] = R.diff_attention(q1[C:], k1, q2[C:], k2, v, lam, last_mask, s)
    for mode in ("causal_softmax", "causal_mean"):
        out["dint_" + mode] = R.dint_attention(q1[C:], k1, q2[C:], k2, v, lam, mode, last_mask,
                                               s, a1_history=hist)
    for nm in ("softmax", "diff", "dint_causal_softmax", "dint_causal_mean"):
        check("kernel %s: %s with cache == last rows of full" % (name, nm),
              maxabs(out[nm], out[nm + "_full"][C:]) < 1e-13)
    # docs/math.md §6 incremental state of the cached rows
    check("kernel %s: cached A1 rows vanish beyond column C" % name,
          float(hist[:, C:].abs().max()) == 0.0 if C > 0 else True)
    colsum = hist.sum(0)[:C]
    o1sum = (hist @ v).sum(0)
    out["hist_rows"] = torch.tensor([float(C)], dtype=DT)
    out["hist_a1_colsum"] = colsum
    out["hist_o1_sum"] = o1sum
    # recompute the last rows from the state alone (independent of the literal G)
    a1 = R.softmax_matrix(q1[C:], k1, last_mask, s)
    a2 = R.softmax_matrix(q2[C:], k2, last_mask, s)
    o1, o2 = a1 @ v, a2 @ v
    cnt = (C + torch.arange(1, N + 1, dtype=DT)).unsqueeze(1)
    run_o1 = (o1sum.unsqueeze(0) + torch.cumsum(o1, 0)) / cnt
    cm = o1 - lam * o2 + lam * run_o1
    check("kernel %s: causal_mean from (O1 sum, count) state" % name,
          maxabs(cm, out["dint_causal_mean"]) < 1e-13)
    padded = torch.zeros(S, dtype=DT)
    padded[:C] = colsum
    G = (padded.unsqueeze(0) + torch.cumsum(a1, 0)) / cnt
    cs = o1 - lam * o2 + lam * (R.masked_softmax(G, last_mask) @ v)
    check("kernel %s: causal_softmax from (A1 column sums, count) state" % name,
          maxabs(cs, out["dint_causal_softmax"]) < 1e-13)
    for mode in ("causal_softmax", "causal_mean"):
        m = R.dint_matrix(q1, k1, q2, k2, lam, mode, full_mask, s)
        check("kernel %s: dint %s rows sum to 1" % (name, mode),
              maxabs(m.sum(1), torch.ones(S, dtype=DT)) < 1e-13)
    meta = {"case": name, "mask": "causal", "S": S, "N": N, "d": d, "dv": dv, "lambda": lam,
            "scale": s, "cached_rows": C}
    return out, meta


def kernel_none_full(name, seed, S, d, dv, lam):
    t = kernel_inputs(seed, S, d, dv)
    q1, k1, q2, k2, v = t["q1"], t["k1"], t["q2"], t["k2"], t["v"]
    s = 1.0 / math.sqrt(d)
    mask = R.make_mask(S, S, False)
    out = dict(t)
    out.update(scalars(lam, s))
    out["softmax"] = R.softmax_attention(q1, k1, v, mask, s)
    out["diff"] = R.diff_attention(q1, k1, q2, k2, v, lam, mask, s)
    out["dint_global_mean"] = R.dint_attention(q1, k1, q2, k2, v, lam, "global_mean", mask, s)
    o1 = R.softmax_attention(q1, k1, v, mask, s)
    o2 = R.softmax_attention(q2, k2, v, mask, s)
    ident = o1 - lam * o2 + lam * o1.mean(0, keepdim=True)
    check("kernel %s: global_mean identity" % name, maxabs(ident, out["dint_global_mean"]) < 1e-13)
    check("kernel %s: diff identity O1 - lambda O2" % name,
          maxabs(o1 - lam * o2, out["diff"]) < 1e-13)
    meta = {"case": name, "mask": "none", "S": S, "N": S, "d": d, "dv": dv, "lambda": lam,
            "scale": s}
    return out, meta


def kernel_padding(name, seed, S, d, dv, lam, valid_len):
    t = kernel_inputs(seed, S, d, dv)
    q1, k1, q2, k2, v = t["q1"], t["k1"], t["q2"], t["k2"], t["v"]
    s = 1.0 / math.sqrt(d)
    out = dict(t)
    out.update(scalars(lam, s))
    out["valid_len"] = torch.tensor([float(valid_len)], dtype=DT)
    for mk, causal in (("none", False), ("causal", True)):
        mask = R.make_mask(S, S, causal, valid_len)
        out["softmax_" + mk] = R.softmax_attention(q1, k1, v, mask, s)
        out["diff_" + mk] = R.diff_attention(q1, k1, q2, k2, v, lam, mask, s)
        modes = ("global_mean",) if not causal else ("causal_softmax", "causal_mean")
        for mode in modes:
            out["dint_%s_%s" % (mode, mk)] = R.dint_attention(q1, k1, q2, k2, v, lam, mode, mask,
                                                              s)
        # padded values must not matter
        v2 = v.clone()
        v2[valid_len:] = 1e6
        check("kernel %s: padded keys ignored (%s)" % (name, mk),
              maxabs(R.diff_attention(q1, k1, q2, k2, v2, lam, mask, s), out["diff_" + mk])
              < 1e-12)
    meta = {"case": name, "S": S, "N": S, "d": d, "dv": dv, "lambda": lam, "scale": s,
            "valid_len": valid_len}
    return out, meta


def kernel_scale(name, seed, S, d, dv, lam, scale):
    t = kernel_inputs(seed, S, d, dv)
    q1, k1, q2, k2, v = t["q1"], t["k1"], t["q2"], t["k2"], t["v"]
    mask = R.make_mask(S, S, True)
    out = dict(t)
    out.update(scalars(lam, scale))
    out["softmax"] = R.softmax_attention(q1, k1, v, mask, scale)
    out["diff"] = R.diff_attention(q1, k1, q2, k2, v, lam, mask, scale)
    out["dint_causal_softmax"] = R.dint_attention(q1, k1, q2, k2, v, lam, "causal_softmax", mask,
                                                  scale)
    check("kernel %s: non-default scale changes the output" % name,
          maxabs(out["softmax"], R.softmax_attention(q1, k1, v, mask)) > 1e-3)
    meta = {"case": name, "mask": "causal", "S": S, "N": S, "d": d, "dv": dv, "lambda": lam,
            "scale": scale}
    return out, meta


def write_kernels():
    os.makedirs(KERNELS_DIR, exist_ok=True)
    cases = [
        kernel_causal_cache("causal_cache", 11, S=8, N=5, d=8, dv=16, lam=0.55),
        kernel_causal_cache("causal_decode", 12, S=9, N=1, d=4, dv=8, lam=0.3),
        kernel_none_full("none_full", 13, S=7, d=8, dv=12, lam=0.8),
        kernel_padding("padding", 14, S=6, d=4, dv=8, lam=0.45, valid_len=4),
        kernel_scale("scale", 15, S=5, d=8, dv=16, lam=0.65, scale=0.7),
    ]
    for out, meta in cases:
        R.write_safetensors(os.path.join(KERNELS_DIR, meta["case"] + ".safetensors"), out,
                            default_dtype="F64",
                            metadata={k: json.dumps(v) if not isinstance(v, str) else v
                                      for k, v in meta.items()})
        back, _, _ = R.read_safetensors(os.path.join(KERNELS_DIR, meta["case"] + ".safetensors"))
        check("kernel %s: file round trip" % meta["case"],
              all(maxabs(back[k], out[k].reshape(back[k].shape)) == 0.0 for k in out))
    return cases


# ============================================================================================
# README files
# ============================================================================================
def models_readme(results):
    lines = [
        "# Golden models",
        "",
        "Tiny random models with float64 golden logits from the independent PyTorch reference",
        "`tools/torch_reference.py` (a literal transcription of docs/math.md §2-5, attention",
        "matrices materialised, float64 throughout). Regenerate (deterministic, seeded) with",
        "",
        "    /usr/bin/python3 tools/make_golden_models.py",
        "",
        "(Debian's python3 with python3-torch 1.13; no other package). The script also writes",
        "`tests/data/kernels/` and runs its self-checks every time.",
        "",
        "Each directory holds",
        "- `config.json`: the docs/math.md §5 keys;",
        "- `model.safetensors`: the weights (F32, except `diff_bf16`: BF16), names as docs/math.md §3 and 5;",
        "- `golden.safetensors`: `tokens` (F64, shape [T], integer token ids stored as doubles)",
        "  and `logits` (F64, shape [T, vocab_size]): a full forward over the T tokens at",
        "  positions 0..T-1, computed in float64 from the exact values stored in",
        "  model.safetensors (so for `diff_bf16` from the BF16 values).",
        "",
        "All models: D=16, 2 layers, vocab 61, intermediate_size 43 (= 8/3 D rounded), rms_norm_eps",
        "1e-5 unless stated, rope_theta 10000 unless stated, lambda_init uses depth = layer index",
        "(0.2 for layer 0, 0.8-0.6exp(-0.3) = 0.35551 for layer 1).",
        "",
        "| model | attention | D | H | Hkv | T | dtype | params | covers |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, cfg, seed, T, dtype, desc) in MODELS:
        fc = R.full_config(cfg)
        lines.append("| `%s` | %s | %d | %d | %d | %d | %s | %d | %s |" % (
            name, fc["attention"], fc["hidden_size"], fc["num_attention_heads"],
            fc["num_key_value_heads"], T, dtype, results[name]["nparams"], desc))
    lines += [
        "",
        "Sensitivity (max |logit change| when the golden model is run with a plausible mistake;",
        "all are asserted > 1e-4, so the goldens discriminate, except the ones marked 'not",
        "asserted': a wrong rms_norm_eps is only visible at ~1e-5 in most models, which is why",
        "softmax_gqa and diff_encoder exist):",
        "",
    ]
    for (name, cfg, seed, T, dtype, desc) in MODELS:
        s = ", ".join("%s: %.3g%s" % (lab, d, "" if must else " (not asserted)")
                      for lab, d, must in results[name]["sens"])
        lines.append("- `%s`: %s" % (name, s))
    lines += [
        "",
        "Suggested tolerances: the logits are O(1)-O(10); a float32 implementation should agree to",
        "about 1e-4 absolute (and the float64 one to about 1e-9).",
        "",
        "Weight initialisation (seeded torch.Generator, float64 then rounded to the stored dtype):",
        "embeddings N(0,1) (N(0,0.5) when tied); every RMSNorm weight (input/post-attention/final",
        "norms and subln) 1 + N(0,0.1); lambda_q1/k1/q2/k2 N(0,0.2); q_proj, k_proj, q_base, k_base",
        "N(0, 1.2/sqrt(D)); shared_diff factors *_a N(0,1/sqrt(D)) and *_b N(0,0.6/sqrt(r)); every",
        "other matrix N(0, 1/sqrt(fan_in)). Tokens uniform in [0, vocab).",
        "",
        "Choices made where the math contract (docs/math.md) is silent are listed in tools/GOLDEN_NOTES.md.",
        "",
    ]
    return "\n".join(lines)


KERNELS_README = """# Kernel goldens (single head)

Written by `tools/make_golden_models.py` (see tests/data/models/README.md), from the float64
reference `tools/torch_reference.py`. Every tensor is **F64**; shapes are row-major
`[rows, cols]`. Scalars are stored as F64 tensors of shape [1] (`lambda`, `scale`, and where
present `valid_len`, `hist_rows`) and repeated, as JSON text, in the `__metadata__` of each file.
Every file holds the inputs `q1, k1, q2, k2` ([S, d]) and `v` ([S, dv]). Softmax attention
(docs/math.md §2.1) uses `q = q1`, `k = k1`. `scale` is the score scale s (1/sqrt(d) everywhere except
`scale.safetensors`). DINT uses gamma = lambda (docs/math.md §2.3).

## causal_cache.safetensors  (S = 8, N = 5, d = 8, dv = 16, lambda = 0.55, causal)
The sequence has S = 8 rows; the first C = S - N = 3 are "cached". `q1, q2` hold ALL S query
rows (the cached rows are needed by the causal DINT modes); the N new queries are rows 3..7.
- `softmax_full, diff_full, dint_causal_softmax_full, dint_causal_mean_full` [S, dv]: outputs
  of one causal pass over all S rows (N = S, offset 0).
- `softmax, diff, dint_causal_softmax, dint_causal_mean` [N, dv]: outputs for queries
  `q1[3:], q2[3:]` against all S keys with the causal offset S - N = 3 (query n sees keys
  j <= n + 3). They equal rows 3..7 of the `*_full` outputs (checked to 1e-13).
- docs/math.md §6 incremental state after the C cached rows, for a kernel that takes a history:
  `hist_rows` [1] = 3 (rows seen so far), `hist_a1_colsum` [C] = column sums of the A1 rows
  0..C-1 (A1 of a cached row m has zeros beyond key m, so only C columns), `hist_o1_sum` [dv] =
  sum of the O1 = A1 V rows 0..C-1. (Producing this state by running the kernel on the first C
  rows with S = N = C and then feeding the last N rows must reproduce `dint_*`.)

## causal_decode.safetensors  (S = 9, N = 1, d = 4, dv = 8, lambda = 0.3, causal)
Same layout as causal_cache with C = 8 cached rows and a single new query (row 8):
`softmax, diff, dint_causal_softmax, dint_causal_mean` are [1, dv]; `*_full` are [9, dv];
`hist_rows` = 8, `hist_a1_colsum` [8], `hist_o1_sum` [8].

## none_full.safetensors  (S = N = 7, d = 8, dv = 12, lambda = 0.8, mask none)
`softmax, diff, dint_global_mean` [7, 12]. dv = 12 != 2d on purpose (V width is free).

## padding.safetensors  (S = N = 6, d = 4, dv = 8, lambda = 0.45, valid_len = 4)
Key padding: only keys 0..3 exist (`valid_len` [1] = 4); rows of `v`, `k1`, `k2` beyond are
filler that must be ignored. Outputs [6, 8]:
- mask none + padding: `softmax_none, diff_none, dint_global_mean_none`
- causal + padding (query n sees j <= n and j < 4): `softmax_causal, diff_causal,
  dint_causal_softmax_causal, dint_causal_mean_causal` (the softmax of G is restricted to the
  same allowed keys; G averages rows 0..n of A1 whose padded columns are 0).

## scale.safetensors  (S = N = 5, d = 8, dv = 16, lambda = 0.65, causal, scale = 0.7)
Non-default score scale s = 0.7 (not 1/sqrt(8)): `softmax, diff, dint_causal_softmax` [5, 16].
"""


NOTES = """# Choices made by the golden generator where the math contract (docs/math.md) is silent or ambiguous

(tools/torch_reference.py + tools/make_golden_models.py; written independently of the C++ code.)

1. RoPE rotation direction: pair (x[2i], x[2i+1]) -> (x0 cos a - x1 sin a, x0 sin a + x1 cos a),
   a = pos * theta^(-2i/d) (the flash-attn `interleaved=True` convention used by the official
   DIFF code). the contract gives pairs and angle but not the sign; the opposite sign gives different
   logits. The frequency exponent uses d = the rotated sub-head width (d of docs/math.md §3.1/3.3,
   D/H for softmax, head_dim for diff_v2).
2. RoPE is applied in encoder mode (causal: false) too, positions 0..T-1.
3. subln weight is initialised 1 + N(0,0.1) (not 1) so a wrong/ignored subln weight is caught;
   subln eps is always 1e-5, independent of rms_norm_eps (docs/math.md §3.1 / 4).
4. shared_diff: rotary is applied to Q1, Q2, K1, K2 of every head after the (base + low-rank)
   projection; v_proj is D -> D viewed as H heads of 2d; num_key_value_heads must equal H.
5. diff_v2: lambda_proj.weight has shape [H, D] and is applied to the attention module's input
   (i.e. after input_layernorm); query head t uses kv head t // (2H/Hkv); scale 1/sqrt(head_dim).
6. DINT causal_softmax: G rows are divided by the number of rows so far (history included), the
   softmax of G is over exactly the keys the mask allows that query (causal AND key padding); it
   is computed with the row max subtracted. G's masked entries are not used.
7. global_mean is rejected (ValueError) for a causal mask or a non-empty history; it is allowed
   with key padding (the padded columns of A1 are zero so g is zero there).
8. Golden tokens are stored as F64 (the contract's reader accepts F32/F16/BF16/F64 only, no integer
   dtype); logits as F64 [T, V]. Kernel scalars are F64 tensors of shape [1] (not 0-d) and are
   repeated in `__metadata__` as JSON strings.
9. model.safetensors carries `__metadata__` {"format": "pt"}; tensors are written in the order
   embed_tokens, then per layer input_layernorm, self_attn.*, post_attention_layernorm, mlp.*,
   then model.norm, lm_head. The header is padded with spaces to a multiple of 8.
10. config.json always contains tie_word_embeddings (the contract gives no default for it); the
   `dint_causal_softmax` model deliberately omits every key that has a documented default
   (num_key_value_heads, rms_norm_eps, rope_theta, dint_integral, diff_gqa_pairing, causal).
   Other models write `diff_gqa_pairing` only for diff/dint, `dint_integral` only for dint,
   `shared_diff_rank` only for shared_diff and `head_dim` only for diff_v2.
11. rope_theta is written as a float (10000.0), head_dim/shared_diff_rank as ints.
12. BF16 model: weights are drawn in float64 and rounded to BF16 with round-to-nearest-even
   (torch's conversion); the golden uses exactly those BF16 values.
13. A query row allowed no key gives a zero row (softmax denominators 0 -> 0); in DINT its G row
   still averages earlier rows but its softmax_M(G) is also zero (no allowed key).
14. Model size: every model has hidden_size 16 (not 32/64): 15 models at D=32 with 2 layers,
   vocab 61 and intermediate 8/3 D would be ~1.7 MB in F32; at D=16 the whole tests/data/models
   + kernels is ~0.66 MB. d (query/key map width) is 4 for diff/dint/shared_diff with H=2, 8 for
   softmax H=2 and for diff_rope_theta (H=1), 6 for diff_v2 (head_dim).
15. The GQA diff/dint models need H=4 with 2 kv heads (so kv-group indexing h/rep vs h%Hkv is
   observable); at D=16 that makes d=2: a single rotary pair whose frequency is theta^0 = 1,
   so rope_theta has no effect on those three models (it is covered elsewhere).
16. lambda_q1/k1/q2/k2 are drawn N(0, 0.2) (the brief suggested 0.1) so lambda differs from
   lambda_init by a visible amount; lambda is sometimes negative or near 0 (allowed by the contract).
17. global_mean with key padding averages all N query rows of A1 (padded key columns are 0).
18. The DINT causal modes are only produced with a causal mask; their value under mask none is
   not part of any golden (the contract only defines global_mean there).
19. diff_v2 models use head_dim 6 (not D/H or D/2H) so code deriving head_dim from D is caught;
   H=4, Hkv=2, so 4 query heads share each kv head.
"""


# ============================================================================================
def main():
    torch.set_grad_enabled(False)
    mask_checks()
    rope_checks()
    official_param_count_checks()
    os.makedirs(MODELS_DIR, exist_ok=True)
    results = {}
    for (name, cfg, seed, T, dtype, desc) in MODELS:
        info = write_model(name, cfg, seed, T, dtype, desc)
        info["bf16"] = dtype == "BF16"
        info["sens"] = sensitivity(name, cfg, info)
        for lab, dff, must in info["sens"]:
            if must:
                check("%s: golden sensitive to %s" % (name, lab), dff > 1e-4, "%.3g" % dff)
        results[name] = info
    a = results["diff_gqa_per_head"]["logits"]
    b = results["diff_gqa_per_subhead"]["logits"]
    check("per_head and per_subhead goldens differ", maxabs(a, b) > 1e-3, "%.3g" % maxabs(a, b))
    cases = write_kernels()
    with open(os.path.join(MODELS_DIR, "README.md"), "w") as f:
        f.write(models_readme(results))
    with open(os.path.join(KERNELS_DIR, "README.md"), "w") as f:
        f.write(KERNELS_README)
    with open(os.path.join(ROOT, "tools", "GOLDEN_NOTES.md"), "w") as f:
        f.write(NOTES)

    # ---- summary ----
    print("== models ==")
    for (name, cfg, seed, T, dtype, desc) in MODELS:
        r = results[name]
        lg = r["logits"]
        st = r["stats"]
        lam = ", ".join("L%d lambda=%.4f (init %.4f)" % x for x in st.get("lams", [])[::1])
        maxw = ("mean max A1 weight %.2f" % (sum(st["maxw"]) / len(st["maxw"]))
                if "maxw" in st else "")
        print("%-26s %-11s T=%2d %s params=%6d |logits| max %.2f std %.2f %s %s" % (
            name, cfg["attention"], T, dtype, r["nparams"], float(lg.abs().max()),
            float(lg.std()), maxw, lam))
        print("    sensitivity: " + ", ".join("%s %.3g" % x[:2] for x in r["sens"]))
    print("== kernels ==")
    for out, meta in cases:
        print("%-14s %s" % (meta["case"], ", ".join("%s%s" % (k, list(v.shape))
                                                   for k, v in out.items())))
    total = 0
    for base in (MODELS_DIR, KERNELS_DIR):
        for dp, _, fs in os.walk(base):
            for fn in fs:
                total += os.path.getsize(os.path.join(dp, fn))
    print("== self-checks: %d passed, %d failed ==" % (sum(ok for _, ok, _ in CHECKS),
                                                       sum(not ok for _, ok, _ in CHECKS)))
    print("total size of tests/data/models + tests/data/kernels: %d bytes" % total)


if __name__ == "__main__":
    main()
