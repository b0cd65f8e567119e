#!/usr/bin/python3
"""Independent float64 PyTorch transcription of the diffattn math contract (docs/math.md §1-5).

This file is written from the math contract (now docs/math.md) and the papers only; it does not look at the C++
code. Every function computes in torch.float64 and materialises attention matrices literally,
so it is slow but easy to check against the formulas. It is used by tools/make_golden_models.py
to produce the golden files under tests/data/.

Conventions (docs/math.md):
  * one sequence at a time; row n of a matrix is token n (0-based);
  * nn.Linear layout: weight [out, in], y = x W^T, no biases;
  * masks are boolean matrices `allowed[n, j]` (True = query n may see key j).
"""

import json
import math
import struct

import torch

DT = torch.float64
SUBLN_EPS = 1e-5  # docs/math.md §3.1 / 4: subln always uses eps 1e-5


# --------------------------------------------------------------------------------------------
# 1. Masks
# --------------------------------------------------------------------------------------------
def make_mask(n_queries, n_keys, causal, valid_len=None):
    """allowed[n, j]: causal => j <= n + (S - N); key padding => j < valid_len."""
    assert n_keys >= n_queries, "S >= N required"
    n = torch.arange(n_queries).unsqueeze(1)
    j = torch.arange(n_keys).unsqueeze(0)
    allowed = torch.ones(n_queries, n_keys, dtype=torch.bool)
    if causal:
        allowed = allowed & (j <= n + (n_keys - n_queries))
    if valid_len is not None:
        allowed = allowed & (j < valid_len)
    return allowed


def masked_softmax(scores, allowed):
    """Row softmax over the allowed keys only (row max subtracted); a row with no allowed key
    gives an all-zero row (never NaN)."""
    scores = scores.to(DT)
    filled = scores.masked_fill(~allowed, float("-inf"))
    row_max = filled.max(dim=-1, keepdim=True).values
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(filled - row_max) * allowed.to(DT)
    denom = e.sum(dim=-1, keepdim=True)
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.where(denom > 0, e / safe, torch.zeros_like(e))


# --------------------------------------------------------------------------------------------
# 2. Single-head kernels (attention matrices materialised)
# --------------------------------------------------------------------------------------------
def default_scale(d):
    return 1.0 / math.sqrt(d)


def softmax_matrix(q, k, allowed, scale=None):
    """2.1: A = softmax(s Q K^T + M)  [N x S]."""
    if scale is None:
        scale = default_scale(q.shape[-1])
    return masked_softmax(scale * (q @ k.T), allowed)


def softmax_attention(q, k, v, allowed, scale=None):
    return softmax_matrix(q, k, allowed, scale) @ v


def diff_matrix(q1, k1, q2, k2, lam, allowed, scale=None):
    """2.2: A1 - lambda A2."""
    a1 = softmax_matrix(q1, k1, allowed, scale)
    a2 = softmax_matrix(q2, k2, allowed, scale)
    return a1 - lam * a2


def diff_attention(q1, k1, q2, k2, v, lam, allowed, scale=None):
    return diff_matrix(q1, k1, q2, k2, lam, allowed, scale) @ v


def integral_matrix(a1, mode, allowed, a1_history=None):
    """The integral term (before multiplying by lambda) of 2.3, literally.

    a1:          [N x S] signal map A1 of the N new query rows.
    a1_history:  [S-N x S] (or None) the A1 rows of the cached query rows (zero where masked);
                 'rows m <= n' includes them (docs/math.md §2.3, KV cache paragraph).
    causal_softmax: G[n] = mean of A1 rows 0..n (history rows included), then a softmax of
                    row n of G restricted to the keys allowed for query n.
    causal_mean:    G itself.
    global_mean:    1 g with g = mean of all N rows of A1 (mask none, no history only).
    """
    n_q, n_k = a1.shape
    if mode == "global_mean":
        if a1_history is not None and a1_history.shape[0] > 0:
            raise ValueError("global_mean is not allowed with a KV cache")
        if n_q != n_k or _is_causal_like(allowed):
            raise ValueError("global_mean needs mask none (key padding is allowed)")
        g = a1.mean(dim=0, keepdim=True)
        return g.expand(n_q, n_k).clone()
    if mode not in ("causal_softmax", "causal_mean"):
        raise ValueError("unknown integral mode " + str(mode))
    if a1_history is None:
        a1_history = torch.zeros(0, n_k, dtype=DT)
    assert a1_history.shape[1] == n_k
    all_rows = torch.cat([a1_history, a1], dim=0)  # every query row the sequence has had
    n_hist = a1_history.shape[0]
    g = torch.zeros(n_q, n_k, dtype=DT)
    for n in range(n_q):
        rows_so_far = n_hist + n + 1
        g[n] = all_rows[:rows_so_far].sum(dim=0) / rows_so_far
    if mode == "causal_mean":
        return g
    return masked_softmax(g, allowed)  # softmax_M(G): only the keys query n may see


def _is_causal_like(allowed):
    # any masked-out entry that is not key padding (i.e. a column that is allowed for some rows
    # but not others) means a causal mask
    col_any = allowed.any(dim=0)
    col_all = allowed.all(dim=0)
    return bool((col_any & ~col_all).any())


def dint_matrix(q1, k1, q2, k2, lam, mode, allowed, scale=None, a1_history=None):
    """2.3: A1 - lambda A2 + lambda * Integral(A1)  (gamma = lambda). Rows sum to 1."""
    a1 = softmax_matrix(q1, k1, allowed, scale)
    a2 = softmax_matrix(q2, k2, allowed, scale)
    return a1 - lam * a2 + lam * integral_matrix(a1, mode, allowed, a1_history)


def dint_attention(q1, k1, q2, k2, v, lam, mode, allowed, scale=None, a1_history=None):
    return dint_matrix(q1, k1, q2, k2, lam, mode, allowed, scale, a1_history) @ v


# 2.5 lambda re-parameterisation
def lambda_init(depth):
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


def lambda_full(lq1, lk1, lq2, lk2, depth):
    return (torch.exp(torch.dot(lq1, lk1)) - torch.exp(torch.dot(lq2, lk2))
            + lambda_init(depth))


# --------------------------------------------------------------------------------------------
# Rotary position embedding (interleaved pairs (0,1),(2,3),...; angle pos * theta^(-2i/d))
# --------------------------------------------------------------------------------------------
def rope(x, positions, theta):
    """x: [T, heads, d] (or [T, d]); positions: [T] integer positions.
    Pair i = (x[2i], x[2i+1]) is rotated by angle a = pos * theta^(-2i/d):
        x[2i]'   = x[2i] cos a - x[2i+1] sin a
        x[2i+1]' = x[2i] sin a + x[2i+1] cos a
    """
    squeeze = x.dim() == 2
    if squeeze:
        x = x.unsqueeze(1)
    d = x.shape[-1]
    assert d % 2 == 0
    i = torch.arange(d // 2, dtype=DT)
    inv_freq = torch.tensor(float(theta), dtype=DT) ** (-2.0 * i / d)
    ang = positions.to(DT).unsqueeze(1) * inv_freq.unsqueeze(0)  # [T, d/2]
    cos = torch.cos(ang).unsqueeze(1)
    sin = torch.sin(ang).unsqueeze(1)
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    y = torch.empty_like(x)
    y[..., 0::2] = x0 * cos - x1 * sin
    y[..., 1::2] = x0 * sin + x1 * cos
    return y.squeeze(1) if squeeze else y


# --------------------------------------------------------------------------------------------
# 4. Layers
# --------------------------------------------------------------------------------------------
def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def linear(x, w):
    return x @ w.T


def swiglu(x, p, prefix):
    gate = linear(x, p[prefix + "mlp.gate_proj.weight"])
    up = linear(x, p[prefix + "mlp.up_proj.weight"])
    return linear(torch.nn.functional.silu(gate) * up, p[prefix + "mlp.down_proj.weight"])


# --------------------------------------------------------------------------------------------
# Config helpers
# --------------------------------------------------------------------------------------------
CONFIG_DEFAULTS = {
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "dint_integral": "causal_softmax",
    "diff_gqa_pairing": "per_head",
    "causal": True,
    "tie_word_embeddings": False,
}


def full_config(cfg):
    c = dict(CONFIG_DEFAULTS)
    c.update(cfg)
    c.setdefault("num_key_value_heads", c["num_attention_heads"])
    return c


def sub_width(cfg):
    """d of one query/key map."""
    a = cfg["attention"]
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    if a == "softmax":
        return D // H
    if a in ("diff", "dint", "shared_diff"):
        return D // H // 2
    if a == "diff_v2":
        return cfg["head_dim"]
    raise ValueError(a)


def attention_param_shapes(cfg):
    """Shapes of every self_attn.* tensor (names relative to 'self_attn.')."""
    cfg = full_config(cfg)
    a = cfg["attention"]
    D, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    assert H % Hkv == 0
    rep = H // Hkv
    d = sub_width(cfg)
    if a in ("diff", "dint"):
        assert D % (2 * H) == 0
        return {
            "q_proj.weight": [D, D],
            "k_proj.weight": [D // rep, D],
            "v_proj.weight": [D // rep, D],
            "out_proj.weight": [D, D],
            "lambda_q1": [d], "lambda_k1": [d], "lambda_q2": [d], "lambda_k2": [d],
            "subln.weight": [2 * d],
        }
    if a == "softmax":
        return {
            "q_proj.weight": [D, D],
            "k_proj.weight": [D // rep, D],
            "v_proj.weight": [D // rep, D],
            "out_proj.weight": [D, D],
        }
    if a == "shared_diff":
        assert Hkv == H, "shared_diff has no key/value grouping"
        r = cfg["shared_diff_rank"]
        s = {"q_base.weight": [d, D], "k_base.weight": [d, D]}
        for nm in ("q1", "q2", "k1", "k2"):
            s[nm + "_a"] = [H, D, r]
            s[nm + "_b"] = [H, d, r]
        s.update({
            "v_proj.weight": [D, D],
            "out_proj.weight": [D, D],
            "lambda_q1": [d], "lambda_k1": [d], "lambda_q2": [d], "lambda_k2": [d],
            "subln.weight": [2 * d],
        })
        return s
    if a == "diff_v2":
        assert (2 * H) % Hkv == 0
        return {
            "q_proj.weight": [2 * H * d, D],
            "k_proj.weight": [Hkv * d, D],
            "v_proj.weight": [Hkv * d, D],
            "o_proj.weight": [D, H * d],
            "lambda_proj.weight": [H, D],
        }
    raise ValueError(a)


def model_param_shapes(cfg):
    cfg = full_config(cfg)
    D, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    shapes = {"model.embed_tokens.weight": [V, D]}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        shapes[p + "input_layernorm.weight"] = [D]
        for k, s in attention_param_shapes(cfg).items():
            shapes[p + "self_attn." + k] = s
        shapes[p + "post_attention_layernorm.weight"] = [D]
        shapes[p + "mlp.gate_proj.weight"] = [I, D]
        shapes[p + "mlp.up_proj.weight"] = [I, D]
        shapes[p + "mlp.down_proj.weight"] = [D, I]
    shapes["model.norm.weight"] = [D]
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [V, D]
    return shapes


def count_params(shapes):
    total = 0
    for s in shapes.values():
        total += math.prod(s)
    return total


# --------------------------------------------------------------------------------------------
# 3. Multi-head attention modules (full forward, positions 0..T-1)
# --------------------------------------------------------------------------------------------
def _diff_like_head_outputs(cfg, q1s, k1s, q2s, k2s, vs, lam, allowed, depth, p, a):
    """Common tail of diff / dint / shared_diff: kernel per head, subln, (1 - lambda_init)."""
    H = cfg["num_attention_heads"]
    d = sub_width(cfg)
    scale = 1.0 / math.sqrt(d)
    heads = []
    for h in range(H):
        if a == "dint":
            o = dint_attention(q1s[h], k1s[h], q2s[h], k2s[h], vs[h], lam,
                               cfg["dint_integral"], allowed, scale)
        else:
            o = diff_attention(q1s[h], k1s[h], q2s[h], k2s[h], vs[h], lam, allowed, scale)
        o = rms_norm(o, p["subln.weight"], SUBLN_EPS)
        if a in ("diff", "shared_diff"):
            o = o * (1.0 - lambda_init(depth))
        heads.append(o)
    return torch.cat(heads, dim=1)  # head h at columns [2dh, 2d(h+1))


def attention_forward(x, p, cfg, depth, return_details=False):
    """x: [T, D] (input of the attention module, i.e. after input_layernorm).
    p: dict of the self_attn tensors (names relative to 'self_attn.'), float64."""
    cfg = full_config(cfg)
    a = cfg["attention"]
    T, D = x.shape
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    rep = H // Hkv
    d = sub_width(cfg)
    theta = cfg["rope_theta"]
    causal = bool(cfg["causal"])
    pos = torch.arange(T)
    allowed = make_mask(T, T, causal)
    details = {}

    if a in ("diff", "dint"):
        if a == "dint" and cfg["dint_integral"] == "global_mean" and causal:
            raise ValueError("dint global_mean requires causal: false")
        q = rope(linear(x, p["q_proj.weight"]).view(T, 2 * H, d), pos, theta)
        k = rope(linear(x, p["k_proj.weight"]).view(T, 2 * Hkv, d), pos, theta)
        v = linear(x, p["v_proj.weight"]).view(T, Hkv, 2 * d)
        lam = lambda_full(p["lambda_q1"], p["lambda_k1"], p["lambda_q2"], p["lambda_k2"], depth)
        q1s, q2s, k1s, k2s, vs = [], [], [], [], []
        for h in range(H):
            g = h // rep
            q1s.append(q[:, 2 * h])
            q2s.append(q[:, 2 * h + 1])
            if cfg["diff_gqa_pairing"] == "per_head":
                k1s.append(k[:, 2 * g])
                k2s.append(k[:, 2 * g + 1])
            elif cfg["diff_gqa_pairing"] == "per_subhead":
                k1s.append(k[:, (2 * h) // rep])
                k2s.append(k[:, (2 * h + 1) // rep])
            else:
                raise ValueError(cfg["diff_gqa_pairing"])
            vs.append(v[:, g])
        out = _diff_like_head_outputs(cfg, q1s, k1s, q2s, k2s, vs, lam, allowed, depth, p, a)
        details.update(lam=lam, q1s=q1s, k1s=k1s, q2s=q2s, k2s=k2s, vs=vs, allowed=allowed)
        y = linear(out, p["out_proj.weight"])

    elif a == "softmax":
        q = rope(linear(x, p["q_proj.weight"]).view(T, H, d), pos, theta)
        k = rope(linear(x, p["k_proj.weight"]).view(T, Hkv, d), pos, theta)
        v = linear(x, p["v_proj.weight"]).view(T, Hkv, d)
        heads = [softmax_attention(q[:, h], k[:, h // rep], v[:, h // rep], allowed)
                 for h in range(H)]
        y = linear(torch.cat(heads, dim=1), p["out_proj.weight"])

    elif a == "shared_diff":
        assert Hkv == H
        v = linear(x, p["v_proj.weight"]).view(T, H, 2 * d)
        lam = lambda_full(p["lambda_q1"], p["lambda_k1"], p["lambda_q2"], p["lambda_k2"], depth)
        q1s, q2s, k1s, k2s, vs = [], [], [], [], []
        for h in range(H):
            def proj(base, nm):
                w = base.T + p[nm + "_a"][h] @ p[nm + "_b"][h].T  # [D, d]
                return rope(x @ w, pos, theta)
            q1s.append(proj(p["q_base.weight"], "q1"))
            q2s.append(proj(p["q_base.weight"], "q2"))
            k1s.append(proj(p["k_base.weight"], "k1"))
            k2s.append(proj(p["k_base.weight"], "k2"))
            vs.append(v[:, h])
        out = _diff_like_head_outputs(cfg, q1s, k1s, q2s, k2s, vs, lam, allowed, depth, p, a)
        details.update(lam=lam, q1s=q1s, k1s=k1s, q2s=q2s, k2s=k2s, vs=vs, allowed=allowed)
        y = linear(out, p["out_proj.weight"])

    elif a == "diff_v2":
        nq = 2 * H
        group = nq // Hkv
        q = rope(linear(x, p["q_proj.weight"]).view(T, nq, d), pos, theta)
        k = rope(linear(x, p["k_proj.weight"]).view(T, Hkv, d), pos, theta)
        v = linear(x, p["v_proj.weight"]).view(T, Hkv, d)
        o = [softmax_attention(q[:, t], k[:, t // group], v[:, t // group], allowed)
             for t in range(nq)]
        lam_tok = torch.sigmoid(linear(x, p["lambda_proj.weight"]))  # [T, H]
        heads = [o[2 * h] - lam_tok[:, h:h + 1] * o[2 * h + 1] for h in range(H)]
        y = linear(torch.cat(heads, dim=1), p["o_proj.weight"])
        details.update(lam_tok=lam_tok)
    else:
        raise ValueError(a)

    if return_details:
        return y, details
    return y


def layer_params(params, i):
    pre = "model.layers.%d.self_attn." % i
    return {k[len(pre):]: v for k, v in params.items() if k.startswith(pre)}


def model_forward(tokens, params, cfg, return_hidden=False, on_attention=None):
    """Full forward of the decoder (or encoder when causal is false). tokens: LongTensor [T].
    params: dict name -> float64 tensor. Returns logits [T, V] (float64).
    on_attention(layer, attn_input, attn_output, details) is called per layer if given
    (used by the self-checks)."""
    cfg = full_config(cfg)
    eps = cfg["rms_norm_eps"]
    x = params["model.embed_tokens.weight"][tokens]
    hidden = [x]
    for i in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % i
        h = rms_norm(x, params[pre + "input_layernorm.weight"], eps)
        a_out, det = attention_forward(h, layer_params(params, i), cfg, depth=i,
                                       return_details=True)
        if on_attention is not None:
            on_attention(i, h, a_out, det)
        y = x + a_out
        h2 = rms_norm(y, params[pre + "post_attention_layernorm.weight"], eps)
        x = y + swiglu(h2, params, pre)
        hidden.append(x)
    xn = rms_norm(x, params["model.norm.weight"], eps)
    head = params["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] \
        else params["lm_head.weight"]
    logits = xn @ head.T
    if return_hidden:
        return logits, hidden
    return logits


# --------------------------------------------------------------------------------------------
# safetensors by hand
# --------------------------------------------------------------------------------------------
_DTYPES = {"F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
           "BF16": (torch.bfloat16, 2)}


def _tensor_bytes(t, dtype):
    tdt, _ = _DTYPES[dtype]
    t = t.detach().to(tdt).contiguous()
    if dtype == "BF16":
        return t.view(torch.int16).numpy().tobytes()  # little-endian host
    return t.numpy().tobytes()


def write_safetensors(path, tensors, dtypes=None, metadata=None, default_dtype="F32"):
    """tensors: ordered dict name -> tensor. dtypes: dict name -> 'F32'|'F64'|'BF16'|'F16'."""
    dtypes = dtypes or {}
    header = {}
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    blobs = []
    off = 0
    for name, t in tensors.items():
        dt = dtypes.get(name, default_dtype)
        b = _tensor_bytes(t, dt)
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    pad = (-len(hjson)) % 8
    hjson += b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """Returns (dict name -> float64 tensor, dict name -> dtype string, metadata)."""
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    meta = header.pop("__metadata__", {})
    out, dts = {}, {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        raw = data[base + a:base + b]
        dt = info["dtype"]
        if dt == "BF16":
            i16 = np.frombuffer(raw, dtype="<i2").copy()
            t = torch.from_numpy(i16).view(torch.bfloat16)
        else:
            npdt = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}[dt]
            t = torch.from_numpy(np.frombuffer(raw, dtype=npdt).copy())
        out[name] = t.to(DT).reshape(info["shape"])
        dts[name] = dt
    return out, dts, meta
