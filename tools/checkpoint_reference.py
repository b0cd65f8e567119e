#!/usr/bin/python3
"""Independent float64 PyTorch transcription of two released differential-attention checkpoint
families, read unchanged from a Hugging Face style directory (docs/checkpoints.md):

  * DiffLlama (transformers `models/diffllama/modeling_diffllama.py`, eager attention path,
    `configuration_diffllama.py`, rotary frequencies of `modeling_rope_utils.py`);
  * Motif (the vanilla differential attention of Motif-2.6B, `modeling_motif.py`, as ported in
    vLLM `model_executor/models/motif.py` + `attention/backends/differential_flash_attn.py` +
    `layers/layernorm.py::PolyNorm` and in mlx-motif `model.py`);
  * Motif-2 (`num_noise_heads`: grouped differential attention, Motif-2-12.7B), as Motif's own
    vLLM fork runs it (MotifTechnologies/vllm branch `motif`: `model_executor/models/motif.py`
    `MotifAttention`, `v1/attention/backends/grouped_diff_attn.py`
    `GroupedDifferentialAttentionImpl`) and mlx-motif `model.py` `_forward_grouped`.

Written from reading those sources (no code copied). Everything is float64, one sequence at a
time, attention matrices materialised. Used by tools/make_checkpoint_goldens.py.

Structure follows upstream on purpose: `diffllama_attention` mirrors the transformers eager
forward (repeat_kv, value halves concatenated, one softmax over all query heads, output halves
subtracted), `motif_attention` mirrors the vLLM differential backend (stripe split of q/k/v into
even/odd heads, four attention calls), `motif_gda_attention` the grouped backend (query heads
split into groups with the noise head last, k/v stripe-split, four attention calls, the noise
outputs repeated over their groups). The generator cross-checks each against an explicit
per-pair or per-group loop written from docs/checkpoints.md.
"""

import json
import math
import os

import torch

import torch_reference as TR  # safetensors reader/writer, rms_norm, linear (shared helpers)

DT = torch.float64
POLYNORM_EPS = 1e-6  # vLLM PolyNorm(eps=1e-6), mlx PolyNorm(eps=1e-6): a constant, not a config key
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
IGNORED_SUFFIX = ".rotary_emb.inv_freq"  # buffers some checkpoints carry; never used


class Refused(ValueError):
    """A checkpoint or config the readers must refuse (docs/checkpoints.md, 'Refused')."""


# --------------------------------------------------------------------------------------------
# config.json -> resolved settings
# --------------------------------------------------------------------------------------------
def detect_family(cfg):
    """'diffllama' by model_type (transformers dispatches on it), 'motif' by architectures
    (vLLM and the remote code dispatch on it); anything else is refused."""
    mt = cfg.get("model_type")
    arch = cfg.get("architectures")
    if mt == "diffllama":
        if arch is not None and arch != ["DiffLlamaForCausalLM"]:
            raise Refused("diffllama: architectures %r is not [\"DiffLlamaForCausalLM\"]" % (arch,))
        return "diffllama"
    if arch == ["MotifForCausalLM"]:
        return "motif"
    raise Refused("unknown checkpoint: model_type %r, architectures %r" % (mt, arch))


def _positive_int(cfg, key, default=None):
    v = cfg.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise Refused("%s must be a positive integer, got %r" % (key, v))
    return v


def resolve_rope(cfg, head_dim):
    """Rotary settings as transformers 5 standardises them (modeling_rope_utils.py
    RotaryEmbeddingConfigMixin): the dict is `rope_scaling` if given, else `rope_parameters`;
    rope_type from `rope_type` (or the legacy `type`), default "default"; theta from the dict's
    `rope_theta`, else the top-level `rope_theta`, else 10000."""
    rp = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not isinstance(rp, dict):
        raise Refused("rope_scaling / rope_parameters must be an object, got %r" % (rp,))
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    if "rope_theta" in rp and "rope_theta" in cfg and rp["rope_theta"] != cfg["rope_theta"]:
        # transformers 4 reads the top-level key, 5 the dict's: no answer is right for both
        raise Refused("rope_theta %r and %r (inside the rope dict) disagree"
                      % (cfg["rope_theta"], rp["rope_theta"]))
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or theta <= 0:
        raise Refused("rope_theta must be a positive number, got %r" % (theta,))
    partial = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise Refused("partial_rotary_factor %r is not supported" % (partial,))
    out = {"rope_type": rope_type, "rope_theta": float(theta), "dim": head_dim}
    if rope_type == "default":
        return out
    if rope_type != "llama3":
        raise Refused("rope_type %r is not supported (only default and llama3)" % (rope_type,))
    for key in ("factor", "low_freq_factor", "high_freq_factor"):
        if not isinstance(rp.get(key), (int, float)) or isinstance(rp.get(key), bool):
            raise Refused("llama3 rope: %s missing or not a number" % key)
        out[key] = float(rp[key])
    if not out["high_freq_factor"] > out["low_freq_factor"]:
        raise Refused("llama3 rope: high_freq_factor must exceed low_freq_factor")
    # transformers 5: a top-level original_max_position_embeddings wins over the dict's (4 reads
    # only the dict's: refuse when both exist and differ); without either, 5 falls back to
    # max_position_embeddings.
    top, inner = cfg.get("original_max_position_embeddings"), \
        rp.get("original_max_position_embeddings")
    if top is not None and inner is not None and top != inner:
        raise Refused("llama3 rope: original_max_position_embeddings %r and %r (inside the rope "
                      "dict) disagree" % (top, inner))
    omax = top if top is not None else inner if inner is not None \
        else cfg.get("max_position_embeddings")
    if not isinstance(omax, int) or isinstance(omax, bool) or omax <= 0:
        raise Refused("llama3 rope: original_max_position_embeddings missing")
    out["original_max_position_embeddings"] = omax
    return out


def resolve_config(cfg):
    """The settings the forward needs, with upstream defaults; raises Refused on anything the
    transcription does not implement."""
    fam = detect_family(cfg)
    D = _positive_int(cfg, "hidden_size")
    H = _positive_int(cfg, "num_attention_heads")
    Hkv = cfg.get("num_key_value_heads")
    Hkv = H if Hkv is None else Hkv
    grouped = fam == "motif" and cfg.get("num_noise_heads") is not None
    if not isinstance(Hkv, int) or isinstance(Hkv, bool) or Hkv <= 0:
        raise Refused("num_key_value_heads %r must be a positive integer" % (Hkv,))
    if not grouped:
        if H % Hkv:
            raise Refused("num_key_value_heads %r must divide num_attention_heads %d" % (Hkv, H))
        if H % 2 or Hkv % 2:
            raise Refused("num_attention_heads %d and num_key_value_heads %d must be even" % (H, Hkv))
    rc = {"family": fam, "hidden_size": D, "num_attention_heads": H, "num_key_value_heads": Hkv,
          "grouped": grouped,
          "num_hidden_layers": _positive_int(cfg, "num_hidden_layers"),
          "intermediate_size": _positive_int(cfg, "intermediate_size"),
          "vocab_size": _positive_int(cfg, "vocab_size"),
          "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False))}
    if fam == "diffllama":
        hd = cfg.get("head_dim")
        hd = D // H if hd is None else hd
        if not isinstance(hd, int) or hd <= 0 or hd % 2:
            raise Refused("head_dim %r must be a positive even integer" % (hd,))
        if cfg.get("hidden_act", "silu") != "silu":
            raise Refused("diffllama: hidden_act %r is not supported (silu)" % cfg["hidden_act"])
        if cfg.get("attention_bias", False):
            raise Refused("diffllama: attention_bias true is not supported")
        rc["rms_norm_eps"] = float(cfg.get("rms_norm_eps", 1e-5))
        rc["groupnorm_eps"] = rc["rms_norm_eps"]
    else:
        if grouped:
            hd = grouped_heads(cfg, rc)
        else:
            if D % H:
                raise Refused("motif: hidden_size %d not divisible by num_attention_heads %d"
                              % (D, H))
            hd = D // H
            if cfg.get("head_dim") is not None and cfg["head_dim"] != hd:
                raise Refused("motif: head_dim %r differs from hidden_size / num_attention_heads %d"
                              % (cfg["head_dim"], hd))
        if hd % 2:
            raise Refused("motif: head dim %d must be even" % hd)
        k_ratio = cfg.get("k_ratio")
        if k_ratio is not None and (not isinstance(k_ratio, int) or isinstance(k_ratio, bool)
                                    or k_ratio != 1):
            # vLLM's MotifConfig stores k_ratio, its MotifAttention never reads it; only mlx-motif
            # gives other values a meaning: nothing released pins it
            raise Refused("motif: k_ratio %r is not supported (only 1)" % (k_ratio,))
        if cfg.get("hidden_act") != "poly_norm":
            raise Refused("motif: hidden_act %r is not poly_norm" % (cfg.get("hidden_act"),))
        for key in ("attention_bias", "use_bias", "qkv_bias"):
            if cfg.get(key, False):
                raise Refused("motif: %s true is not supported" % key)
        for key in ("rms_norm_eps", "attn_rms_norm_eps"):
            if not isinstance(cfg.get(key), (int, float)) or isinstance(cfg.get(key), bool):
                raise Refused("motif: %s is required" % key)
        rc["rms_norm_eps"] = float(cfg["rms_norm_eps"])
        rc["attn_rms_norm_eps"] = float(cfg["attn_rms_norm_eps"])
    rc["head_dim"] = hd
    rc["rope"] = resolve_rope(cfg, hd)
    return rc


def grouped_heads(cfg, rc):
    """Motif-2's head topology (vLLM MotifAttention.__init__ and the asserts of
    GroupedDifferentialAttentionImpl.__init__; mlx-motif ModelArgs._validate_grouped_head_topology):
    Hn noise heads, each closing a group of H / Hn query heads (Hn < H, Hn | H); an even number
    of kv heads, whose Hkv / 2 pairs each serve whole groups (Hkv / 2 | Hn); head_dim given
    (vLLM raises without it). Sets rc["num_noise_heads"], returns the head width."""
    H, Hkv = rc["num_attention_heads"], rc["num_key_value_heads"]
    Hn = cfg["num_noise_heads"]
    if not isinstance(Hn, int) or isinstance(Hn, bool) or Hn <= 0:
        raise Refused("motif: num_noise_heads %r must be a positive integer" % (Hn,))
    if Hn >= H or H % Hn:
        raise Refused("motif: num_noise_heads %d must be less than and divide "
                      "num_attention_heads %d" % (Hn, H))
    if Hkv % 2:
        raise Refused("motif: num_key_value_heads %d must be even" % Hkv)
    if Hn % (Hkv // 2):
        raise Refused("motif: num_noise_heads %d must be a multiple of num_key_value_heads / 2 = %d"
                      % (Hn, Hkv // 2))
    hd = cfg.get("head_dim")
    if hd is None:
        raise Refused("motif: head_dim is required with num_noise_heads")
    if not isinstance(hd, int) or isinstance(hd, bool) or hd <= 0:
        raise Refused("motif: head_dim %r must be a positive integer" % (hd,))
    rc["num_noise_heads"] = Hn
    return hd


# --------------------------------------------------------------------------------------------
# Tensor names and shapes
# --------------------------------------------------------------------------------------------
def expected_shapes(rc):
    """name -> shape of every tensor the directory must hold (ignored buffers aside), in the
    order the generator writes them."""
    D, H, Hkv, hd = rc["hidden_size"], rc["num_attention_heads"], rc["num_key_value_heads"], \
        rc["head_dim"]
    I, V = rc["intermediate_size"], rc["vocab_size"]
    s = {"model.embed_tokens.weight": [V, D]}
    for i in range(rc["num_hidden_layers"]):
        p = "model.layers.%d." % i
        s[p + "input_layernorm.weight"] = [D]
        s[p + "self_attn.q_proj.weight"] = [H * hd, D]
        s[p + "self_attn.k_proj.weight"] = [Hkv * hd, D]
        s[p + "self_attn.v_proj.weight"] = [Hkv * hd, D]
        # Motif-2: o_proj reads 2 hd per signal head (vLLM MotifAttention: 2 (H - Hn) hd)
        signal = H - rc["num_noise_heads"] if rc.get("grouped") else H // 2
        s[p + "self_attn.o_proj.weight"] = [D, 2 * signal * hd]
        for lam in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            s[p + "self_attn." + lam] = [hd]
        if rc["family"] == "motif":
            s[p + "self_attn.subln.weight"] = [2 * hd]
        s[p + "post_attention_layernorm.weight"] = [D]
        s[p + "mlp.gate_proj.weight"] = [I, D]
        s[p + "mlp.up_proj.weight"] = [I, D]
        s[p + "mlp.down_proj.weight"] = [D, I]
        if rc["family"] == "motif":
            s[p + "mlp.act_fn.weight"] = [3]
            s[p + "mlp.act_fn.bias"] = [1]
    s["model.norm.weight"] = [D]
    if not rc["tie_word_embeddings"]:
        s["lm_head.weight"] = [V, D]
    return s


# --------------------------------------------------------------------------------------------
# Reading a directory (single file or shards)
# --------------------------------------------------------------------------------------------
def _plain_name(name):
    return (isinstance(name, str) and name and "/" not in name and "\\" not in name
            and name not in (".", ".."))


def read_tensors(directory):
    """All tensors of the checkpoint as float64, plus their stored dtypes. Shard rules of
    docs/checkpoints.md: every index entry names a plain file in the directory, every tensor
    of every listed shard is listed once and in that shard, nothing listed is missing."""
    index_path = os.path.join(directory, INDEX_FILE)
    single_path = os.path.join(directory, SINGLE_FILE)
    if os.path.exists(index_path) and os.path.exists(single_path):
        raise Refused("%s: both %s and %s present" % (directory, SINGLE_FILE, INDEX_FILE))
    if not os.path.exists(index_path):
        if not os.path.exists(single_path):
            raise Refused("%s: neither %s nor %s" % (directory, SINGLE_FILE, INDEX_FILE))
        t, d, _ = TR.read_safetensors(single_path)
        return t, d
    with open(index_path) as f:
        index = json.load(f)
    wm = index.get("weight_map")
    if not isinstance(wm, dict) or not wm:
        raise Refused("%s: weight_map missing or empty" % INDEX_FILE)
    tensors, dtypes = {}, {}
    for shard in sorted(set(wm.values())):
        if not _plain_name(shard):
            raise Refused("%s: shard name %r is not a file name" % (INDEX_FILE, shard))
        if not os.path.isfile(os.path.join(directory, shard)):
            raise Refused("%s: shard %s does not exist" % (INDEX_FILE, shard))
        t, d, _ = TR.read_safetensors(os.path.join(directory, shard))
        for name in t:
            if wm.get(name) != shard:
                raise Refused("%s: tensor %s is not listed for it" % (shard, name))
            if name in tensors:
                raise Refused("%s: tensor %s in two shards" % (shard, name))
            tensors[name], dtypes[name] = t[name], d[name]
    missing = sorted(set(wm) - set(tensors))
    if missing:
        raise Refused("%s lists tensors no shard holds: %s" % (INDEX_FILE, missing))
    return tensors, dtypes


def load_checkpoint(directory):
    """(resolved config, params float64, stored dtypes). Refuses missing/extra/misshapen
    tensors; drops the ignorable rotary inv_freq buffers."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    rc = resolve_config(cfg)
    tensors, dtypes = read_tensors(directory)
    tensors = {k: v for k, v in tensors.items() if not k.endswith(IGNORED_SUFFIX)}
    want = expected_shapes(rc)
    extra = sorted(set(tensors) - set(want))
    missing = sorted(set(want) - set(tensors))
    if extra or missing:
        raise Refused("%s: missing %s, extra %s" % (directory, missing, extra))
    for k, shape in want.items():
        if list(tensors[k].shape) != shape:
            raise Refused("%s: %s has shape %s, expected %s" % (directory, k,
                                                                list(tensors[k].shape), shape))
    return rc, tensors, dtypes


def read_generation_config(directory, cfg=None):
    """eos ids (a set) from generation_config.json, else config.json (docs/checkpoints.md)."""
    src = {}
    path = os.path.join(directory, "generation_config.json")
    if os.path.exists(path):
        with open(path) as f:
            src = json.load(f)
    if "eos_token_id" not in src:
        if cfg is None:
            with open(os.path.join(directory, "config.json")) as f:
                cfg = json.load(f)
        src = cfg
    eos = src.get("eos_token_id")
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, list) else {eos}


# --------------------------------------------------------------------------------------------
# Rotary position embedding (rotate_half / NeoX style, both families)
# --------------------------------------------------------------------------------------------
def inv_freq(rope):
    """Inverse frequencies theta^(-2i/dim), i < dim/2 (_compute_default_rope_parameters), then
    the llama3 adjustment of _compute_llama3_parameters when rope_type is llama3."""
    dim = rope["dim"]
    f = 1.0 / (torch.tensor(rope["rope_theta"], dtype=DT)
               ** (torch.arange(0, dim, 2, dtype=DT) / dim))
    if rope["rope_type"] == "default":
        return f
    factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / f
    out = torch.where(wavelen > low_wavelen, f / factor, f)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, out)


def rope_cos_sin(positions, freqs):
    """cos, sin of shape [T, dim]: the angles pos * inv_freq repeated for both halves."""
    ang = positions.to(DT).unsqueeze(1) * freqs.unsqueeze(0)
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """x: [heads, T, dim] -> x cos + rotate_half(x) sin (element i rotates with i + dim/2)."""
    return x * cos + rotate_half(x) * sin


# --------------------------------------------------------------------------------------------
# Small pieces
# --------------------------------------------------------------------------------------------
def lambda_init(depth):
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


def layer_lambda_init(rc, layer_idx):
    """DiffLlama: lambda_init_fn(layer_idx); Motif: lambda_init_fn(layer_idx - 1)."""
    return lambda_init(layer_idx if rc["family"] == "diffllama" else layer_idx - 1)


def lambda_full(p, init):
    return (torch.exp(torch.sum(p["lambda_q1"] * p["lambda_k1"]))
            - torch.exp(torch.sum(p["lambda_q2"] * p["lambda_k2"])) + init)


def causal_bias(T):
    return torch.triu(torch.full((T, T), float("-inf"), dtype=DT), 1)


def repeat_kv(x, n_rep):
    """[Hkv, T, d] -> [Hkv * n_rep, T, d]; kv head g serves query heads g*n_rep .. +n_rep-1."""
    return x.repeat_interleave(n_rep, dim=0)


def rms_norm_noweight(x, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)


def polynorm(z, w, b, eps=POLYNORM_EPS):
    """w[0] n(z^3) + w[1] n(z^2) + w[2] n(z) + b, n(u) = u / sqrt(mean(u^2) + eps) over the
    feature axis (vLLM PolyNorm.forward_native)."""
    def n(u):
        return u / torch.sqrt((u * u).mean(-1, keepdim=True) + eps)
    return w[0] * n(z ** 3) + w[1] * n(z ** 2) + w[2] * n(z) + b


def layer_params(params, i):
    pre = "model.layers.%d." % i
    return {k[len(pre):]: v for k, v in params.items() if k.startswith(pre)}


# --------------------------------------------------------------------------------------------
# Attention, as upstream structures it
# --------------------------------------------------------------------------------------------
def _project(x, p, rc, positions):
    """q [H, T, hd], k and v [Hkv, T, hd], rotary applied to q and k."""
    T = x.shape[0]
    H, Hkv, hd = rc["num_attention_heads"], rc["num_key_value_heads"], rc["head_dim"]
    q = TR.linear(x, p["self_attn.q_proj.weight"]).view(T, H, hd).transpose(0, 1)
    k = TR.linear(x, p["self_attn.k_proj.weight"]).view(T, Hkv, hd).transpose(0, 1)
    v = TR.linear(x, p["self_attn.v_proj.weight"]).view(T, Hkv, hd).transpose(0, 1)
    cos, sin = rope_cos_sin(positions, inv_freq(rc["rope"]))
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def diffllama_attention(x, p, rc, layer_idx, positions):
    """DiffLlamaAttention.forward (eager): all H query heads attend with repeat_kv keys; the
    values of heads [0, H/2) and [H/2, H) are concatenated into 2hd-wide values shared by heads
    j and j + H/2; the output of head j + H/2 is subtracted (times lambda) from head j's;
    weightless RMSNorm over 2hd (eps rms_norm_eps), times (1 - lambda_init), o_proj."""
    T = x.shape[0]
    H, Hkv, hd = rc["num_attention_heads"], rc["num_key_value_heads"], rc["head_dim"]
    q, k, v = _project(x, p, rc, positions)
    k = repeat_kv(k, H // Hkv)
    v = repeat_kv(v, H // Hkv)
    v = torch.cat(torch.chunk(v, 2, dim=0), dim=-1)  # [H/2, T, 2hd]
    v = v.repeat(2, 1, 1)                            # [H, T, 2hd]
    w = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(hd) + causal_bias(T)
    w = torch.softmax(w, dim=-1)
    init = layer_lambda_init(rc, layer_idx)
    lam = lambda_full(_attn(p), init)
    o = torch.matmul(w, v)                           # [H, T, 2hd]
    o1, o2 = torch.chunk(o, 2, dim=0)
    o = o1 - lam * o2
    o = (1 - init) * rms_norm_noweight(o, rc["groupnorm_eps"])
    o = o.transpose(0, 1).reshape(T, -1)
    return TR.linear(o, p["self_attn.o_proj.weight"])


def _attn(p):
    return {k[len("self_attn."):]: v for k, v in p.items() if k.startswith("self_attn.")}


def _gqa_attention(q, k, v, hd):
    """Causal softmax attention, query head i using kv head i // (nq / nk) (flash-attn GQA)."""
    rep = q.shape[0] // k.shape[0]
    k, v = repeat_kv(k, rep), repeat_kv(v, rep)
    w = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(hd) + causal_bias(q.shape[1])
    return torch.matmul(torch.softmax(w, dim=-1), v)


def motif_attention(x, p, rc, layer_idx, positions):
    """Motif differential attention (vLLM DifferentialFlashAttentionImpl.forward): even heads
    of q, k, v form map 1 / value half 1, odd heads map 2 / value half 2 ("stripe" split);
    four GQA attentions; (attn1 - lambda attn2), subln RMSNorm with weight over 2hd (eps
    attn_rms_norm_eps), times (1 - lambda_init) with lambda_init of layer_idx - 1; o_proj."""
    T = x.shape[0]
    hd = rc["head_dim"]
    q, k, v = _project(x, p, rc, positions)
    q1, q2 = q[0::2], q[1::2]
    k1, k2 = k[0::2], k[1::2]
    v1, v2 = v[0::2], v[1::2]
    attn1 = torch.cat([_gqa_attention(q1, k1, v1, hd), _gqa_attention(q1, k1, v2, hd)], dim=-1)
    attn2 = torch.cat([_gqa_attention(q2, k2, v1, hd), _gqa_attention(q2, k2, v2, hd)], dim=-1)
    init = layer_lambda_init(rc, layer_idx)
    a = attn1 - lambda_full(_attn(p), init) * attn2  # [H/2, T, 2hd]
    a = TR.rms_norm(a, p["self_attn.subln.weight"], rc["attn_rms_norm_eps"])
    a = a * (1 - init)
    a = a.transpose(0, 1).reshape(T, -1)
    return TR.linear(a, p["self_attn.o_proj.weight"])


def motif_gda_attention(x, p, rc, layer_idx, positions):
    """Motif-2 grouped differential attention (vLLM GroupedDifferentialAttentionImpl.forward):
    the H query heads in Hn groups of gr + 1 = H / Hn, the first gr of each group signal heads
    (q1) and the last its noise head (q2) (split_q_heads); even kv heads k1, v1 and odd ones k2,
    v2 (split_heads); attn1 = [attn(q1,k1,v1), attn(q1,k1,v2)], attn2 = [attn(q2,k2,v1),
    attn(q2,k2,v2)] with flash-attn's GQA; attn2 repeated over each group's gr signal heads
    (`repeat(... H D -> ... (H r) D)`: noise head g serves signal heads g gr .. g gr + gr - 1);
    attn1 - lambda attn2, subln (weight, eps attn_rms_norm_eps), times (1 - lambda_init) of
    layer_idx - 1; signal head a's 2 hd outputs at o_proj input columns [2 hd a, 2 hd (a + 1))."""
    T = x.shape[0]
    H, Hn, hd = rc["num_attention_heads"], rc["num_noise_heads"], rc["head_dim"]
    group = H // Hn
    gr = group - 1
    q, k, v = _project(x, p, rc, positions)
    qg = q.view(Hn, group, T, hd)
    q1 = qg[:, :gr].reshape(Hn * gr, T, hd)  # signal heads, group by group
    q2 = qg[:, gr]                          # [Hn, T, hd] noise heads
    k1, k2 = k[0::2], k[1::2]
    v1, v2 = v[0::2], v[1::2]
    attn1 = torch.cat([_gqa_attention(q1, k1, v1, hd), _gqa_attention(q1, k1, v2, hd)], dim=-1)
    attn2 = torch.cat([_gqa_attention(q2, k2, v1, hd), _gqa_attention(q2, k2, v2, hd)], dim=-1)
    attn2 = attn2.repeat_interleave(gr, dim=0)  # [Hn * gr, T, 2hd]
    init = layer_lambda_init(rc, layer_idx)
    a = attn1 - lambda_full(_attn(p), init) * attn2
    a = TR.rms_norm(a, p["self_attn.subln.weight"], rc["attn_rms_norm_eps"]) * (1 - init)
    a = a.transpose(0, 1).reshape(T, -1)  # 'H (two D) -> (H two) D' then flatten: head-major
    return TR.linear(a, p["self_attn.o_proj.weight"])


# --------------------------------------------------------------------------------------------
# MLP, decoder, model
# --------------------------------------------------------------------------------------------
def mlp(x, p, rc):
    """DiffLlama (MistralMLP): down(silu(gate x) * up x).
    Motif (MotifMLP): down(PolyNorm(gate x) * up x)."""
    gate = TR.linear(x, p["mlp.gate_proj.weight"])
    up = TR.linear(x, p["mlp.up_proj.weight"])
    if rc["family"] == "diffllama":
        act = torch.nn.functional.silu(gate)
    else:
        act = polynorm(gate, p["mlp.act_fn.weight"], p["mlp.act_fn.bias"])
    return TR.linear(act * up, p["mlp.down_proj.weight"])


ATTENTION = {"diffllama": diffllama_attention, "motif": motif_attention}


def forward(tokens, params, rc, attention=None, mlp_fn=None):
    """logits [T, V] of a full causal forward over `tokens` at positions 0..T-1.
    `attention(x, layer_params, rc, layer_idx, positions)` and `mlp_fn(x, layer_params, rc)`
    replace the family's functions (the generator's convention checks use this)."""
    attention = attention or (motif_gda_attention if rc.get("grouped")
                              else ATTENTION[rc["family"]])
    mlp_fn = mlp_fn or mlp
    eps = rc["rms_norm_eps"]
    positions = torch.arange(len(tokens))
    x = params["model.embed_tokens.weight"][tokens]
    for i in range(rc["num_hidden_layers"]):
        p = layer_params(params, i)
        x = x + attention(TR.rms_norm(x, p["input_layernorm.weight"], eps), p, rc, i, positions)
        x = x + mlp_fn(TR.rms_norm(x, p["post_attention_layernorm.weight"], eps), p, rc)
    x = TR.rms_norm(x, params["model.norm.weight"], eps)
    head = params["model.embed_tokens.weight"] if rc["tie_word_embeddings"] \
        else params["lm_head.weight"]
    return x @ head.T


def greedy(prompt, params, rc, max_new_tokens, eos_ids, **kw):
    """Greedy continuation without a KV cache: each step runs the full forward over prompt +
    generated so far and takes the argmax of the last row (lowest id on ties); stops after
    emitting a token in eos_ids (that token included) or after max_new_tokens.
    Returns (generated ids, [n, V] logits of the step rows)."""
    seq = [int(t) for t in prompt]
    gen, rows = [], []
    for _ in range(max_new_tokens):
        logits = forward(torch.tensor(seq), params, rc, **kw)[-1]
        nxt = int(torch.argmax(logits))
        gen.append(nxt)
        rows.append(logits)
        seq.append(nxt)
        if nxt in eos_ids:
            break
    return gen, torch.stack(rows)
