#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/), deterministically.

    python3 fuzz/make_seed_corpus.py          (from the repository root)

safetensors:  tests/data/safetensors/{good,bad}/* and two small model.safetensors of tests/data/models
config_json:  every config.json of tests/data/models and tests/data/checkpoints (the released
              families', and those refused), plus the bad and odd configs of
              tests/model/test_config_json.cpp and a few more (syntax, ranges, nesting)
kernels:      hand-made headers for fuzz_kernels.cpp (decode_case): each kernel, mask and DINT
              integral, tile-crossing sizes, and one input per kind of invalid call. Only the
              26 header bytes are written; the matrix values come from the decoder's stream.
tokenizer:    a mode byte (fuzz_tokenizer.cpp), then: the two tokenizer.json of tests/data/text, tiny_gpt2's
              with its pre-tokenizer's add_prefix_space set, and a few refused variants; the texts of
              tests/data/text/tokenizer_goldens.json for either test tokenizer; a few id lists.
Inputs found by fuzzing (regression inputs) live next to these as found_*; this script never
deletes them.
"""
import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
DATA = os.path.join(ROOT, "tests", "data")


def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def safetensors_seeds():
    for kind in ("good", "bad"):
        folder = os.path.join(DATA, "safetensors", kind)
        for name in sorted(os.listdir(folder)):
            shutil.copyfile(os.path.join(folder, name), os.path.join(CORPUS, "safetensors", f"{kind}_{name}"))
    for model in ("diff_bf16", "shared_diff"):  # the smallest two of different layouts
        shutil.copyfile(os.path.join(DATA, "models", model, "model.safetensors"),
                        os.path.join(CORPUS, "safetensors", f"model_{model}.safetensors"))


def config_seeds():
    models = os.path.join(DATA, "models")
    for model in sorted(os.listdir(models)):
        path = os.path.join(models, model, "config.json")
        if os.path.isfile(path):
            shutil.copyfile(path, os.path.join(CORPUS, "config_json", f"model_{model}.json"))
    checkpoints = os.path.join(DATA, "checkpoints")  # the released families', accepted and refused
    for prefix, folder in (("checkpoint", checkpoints), ("refused", os.path.join(checkpoints, "refused"))):
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name, "config.json")
            if os.path.isfile(path):
                shutil.copyfile(path, os.path.join(CORPUS, "config_json", f"{prefix}_{name}.json"))

    base = {"attention": "diff", "hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 2,
            "intermediate_size": 85, "vocab_size": 50}

    def with_(key, value, j=None):
        j = dict(base if j is None else j)
        j[key] = value
        return j

    def without(key):
        j = dict(base)
        del j[key]
        return j

    cases = {
        "minimal": base,
        "hidden_size_string": with_("hidden_size", "32"),
        "hidden_size_float": with_("hidden_size", 32.5),
        "hidden_size_negative": with_("hidden_size", -32),
        "hidden_size_zero": with_("hidden_size", 0),
        "hidden_size_bool": with_("hidden_size", True),
        "hidden_size_not_divisible": with_("hidden_size", 30),
        "hidden_size_int_max": with_("hidden_size", 2147483647),
        "hidden_size_past_int": with_("hidden_size", 2147483648),
        "heads_array": with_("num_attention_heads", [2]),
        "kv_heads_not_dividing": with_("num_key_value_heads", 3),
        "kv_heads_null": with_("num_key_value_heads", None),
        "layers_negative": with_("num_hidden_layers", -1),
        "layers_zero": with_("num_hidden_layers", 0),
        "intermediate_zero": with_("intermediate_size", 0),
        "vocab_string": with_("vocab_size", "many"),
        "vocab_negative": with_("vocab_size", -5),
        "attention_unknown": with_("attention", "linear"),
        "attention_number": with_("attention", 3),
        "eps_zero": with_("rms_norm_eps", 0),
        "eps_string": with_("rms_norm_eps", "1e-5"),
        "eps_tiny": with_("rms_norm_eps", 5e-324),
        "rope_theta_negative": with_("rope_theta", -1.0),
        "rope_theta_tiny": with_("rope_theta", 1e-300),
        "tie_int": with_("tie_word_embeddings", 1),
        "causal_string": with_("causal", "yes"),
        "integral_unknown": with_("dint_integral", "integral"),
        "pairing_unknown": with_("diff_gqa_pairing", "per_group"),
        "head_dim_zero": with_("head_dim", 0),
        "array": [1, 2],
        "shared_diff_without_rank": with_("attention", "shared_diff"),
        "diff_v2_without_head_dim": with_("attention", "diff_v2"),
        "shared_diff_rank_3": with_("shared_diff_rank", 3, with_("attention", "shared_diff")),
        "diff_v2_head_dim_6": with_("head_dim", 6, with_("attention", "diff_v2")),
        "gda_without_group_ratio": with_("attention", "gda"),
        "gda_ratio_2": with_("num_key_value_heads", 1, with_("gda_group_ratio", 2, with_("attention", "gda"))),
        "gda_ratio_not_dividing": with_("gda_group_ratio", 3, with_("attention", "gda")),
        "dint_global_mean_causal": with_("dint_integral", "global_mean", with_("attention", "dint")),
        "dint_global_mean_encoder": with_("causal", False,
                                          with_("dint_integral", "global_mean", with_("attention", "dint"))),
        "unknown_and_unused_keys": with_("head_dim", 8, with_("model_type", "llama")),
        "every_key": {"attention": "dint", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
                      "num_hidden_layers": 2, "intermediate_size": 85, "vocab_size": 50, "rms_norm_eps": 1e-6,
                      "rope_theta": 500000.0, "tie_word_embeddings": True, "dint_integral": "causal_mean",
                      "diff_gqa_pairing": "per_subhead", "causal": False},
    }
    for key in ("attention", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                "vocab_size"):
        cases[f"missing_{key}"] = without(key)
    for name, value in sorted(cases.items()):
        write("config_json", f"case_{name}.json", json.dumps(value, indent=1))
    # Raw text: syntax errors and lexer corners.
    raw = {
        "truncated": '{"attention": "diff",',
        "empty": "",
        "number_overflow": json.dumps(base)[:-1] + ', "rope_theta": 1e400}',
        "big_integer": json.dumps(base)[:-1] + ', "num_hidden_layers": 18446744073709551616}',
        "invalid_utf8": b'{"attention": "diff\xff"}',
        "bom": b"\xef\xbb\xbf" + json.dumps(base).encode(),
        "nested_value": json.dumps(base)[:-1] + ', "vocab_size": ' + "[" * 64 + "]" * 64 + "}",
        "duplicate_key": json.dumps(base)[:-1] + ', "hidden_size": 64}',
        "comment": "/* c */" + json.dumps(base),
    }
    for name, text in sorted(raw.items()):
        write("config_json", f"raw_{name}.json", text)


# fuzz_kernels header layout (decode_case): byte order below. Codes, in short:
#   n_code, s_code, d_code, dv_code: < 200 -> code % 17; >= 200 -> a tile-edge length (s_code 255: S = N - 1)
#   perturb >= 160: one dimension off by one; mask < 200: code % 2 (0 none, 1 causal), else code - 210
#   valid_mode: < 100 unset, < 200 value % (S + 1), else a special; scale_mode likewise ((value + 1) / 32)
#   lambda_mode < 200: (value - 100) / 50, else a special; integral < 240: code % 3, else invalid
#   history_mode % 8 (0 none, 1 consistent, 2-6 inconsistent, 7 fresh); alias >= 200: out overlaps an input
#   pad >= 192: code % 4; workspace >= 128; precision % 3 (0 float, 1 double, 2 both);
#   threads: 1 + code % 2, or 0 / negative for code >= 250
#   value_code: magnitude {1, .25, 3, 8}[code % 4], NaN / Inf / huge values when >= 192
FIELDS = ["kernel", "n", "s", "d", "dv", "perturb", "mask", "valid_mode", "valid_value", "scale_mode", "scale_value",
          "lambda_mode", "lambda_value", "integral", "history_mode", "history_param", "alias", "alias_offset_lo",
          "alias_offset_hi", "pad", "workspace", "workspace_keys", "workspace_dv", "precision", "threads", "values"]
DEFAULTS = dict(kernel=0, n=5, s=4, d=4, dv=6, perturb=0, mask=1, valid_mode=0, valid_value=0, scale_mode=0,
                scale_value=0, lambda_mode=0, lambda_value=140, integral=0, history_mode=1, history_param=0, alias=0,
                alias_offset_lo=0, alias_offset_hi=0, pad=0, workspace=0, workspace_keys=0, workspace_dv=0,
                precision=2, threads=0, values=0)


def kernel_input(**fields):
    unknown = set(fields) - set(FIELDS)
    assert not unknown, unknown
    values = dict(DEFAULTS, **fields)
    return struct.pack(f"{len(FIELDS)}B", *(values[f] for f in FIELDS))


def kernel_seeds():
    seeds = {}
    names = ["softmax", "diff", "dint"]
    for kernel in range(3):
        for mask in (0, 1):
            integrals = range(3) if kernel == 2 else [0]
            for integral in integrals:
                if integral == 2 and mask == 1:
                    continue
                tag = f"{names[kernel]}_{'causal' if mask else 'none'}" + (f"_integral{integral}" if kernel == 2 else "")
                seeds[tag] = kernel_input(kernel=kernel, mask=mask, integral=integral)
                # Tile edges: N = 65 queries (block 64 + 1), S = N + 129 keys (past one 128-key tile).
                seeds[tag + "_tiles"] = kernel_input(kernel=kernel, mask=mask, integral=integral, n=202, s=207,
                                                     d=8, dv=9, valid_mode=150, valid_value=100)
    # S = N (no cache), key padding, explicit scale, pad (column blocks), workspace reuse, one thread count each.
    seeds["dint_no_cache_fresh_history"] = kernel_input(kernel=2, s=0, history_mode=7, scale_mode=150, scale_value=40)
    seeds["diff_padded_workspace"] = kernel_input(kernel=1, pad=195, workspace=200, workspace_keys=3,
                                                  workspace_dv=2, threads=1)
    seeds["softmax_empty"] = kernel_input(n=0, s=0, d=0, dv=0)
    seeds["softmax_d0_no_scale_n0"] = kernel_input(n=0, s=3, d=0)
    seeds["dint_valid_len_0"] = kernel_input(kernel=2, valid_mode=150, valid_value=0)
    seeds["nan_values"] = kernel_input(kernel=2, values=200)
    # Invalid calls, one per rule.
    seeds["bad_s_less_than_n"] = kernel_input(s=255)
    for i, what in enumerate(["q2_rows", "q2_cols", "k2_rows", "k2_cols", "k1_cols", "v_rows", "out_rows", "out_cols"]):
        seeds[f"bad_shape_{what}"] = kernel_input(kernel=1, perturb=160 + i)
    seeds["bad_mask_kind"] = kernel_input(mask=212)
    seeds["bad_mask_negative"] = kernel_input(mask=205)
    seeds["bad_threads_zero"] = kernel_input(kernel=1, threads=250)
    seeds["bad_threads_negative"] = kernel_input(kernel=2, threads=251)
    seeds["dint_two_threads_tiles"] = kernel_input(kernel=2, threads=1, n=205, s=203, d=8, dv=9)
    seeds["bad_valid_len_negative"] = kernel_input(valid_mode=250, valid_value=0)
    seeds["bad_valid_len_past_s"] = kernel_input(valid_mode=250, valid_value=1)
    seeds["bad_scale_zero"] = kernel_input(scale_mode=250, scale_value=0)
    seeds["bad_scale_nan"] = kernel_input(scale_mode=250, scale_value=3)
    seeds["bad_scale_inf"] = kernel_input(scale_mode=250, scale_value=4)
    seeds["bad_d0_default_scale"] = kernel_input(d=0)
    seeds["bad_lambda_nan"] = kernel_input(kernel=1, lambda_mode=250, lambda_value=0)
    seeds["bad_lambda_float_overflow"] = kernel_input(kernel=2, lambda_mode=250, lambda_value=7)
    seeds["bad_integral"] = kernel_input(kernel=2, integral=245)
    seeds["bad_global_mean_causal"] = kernel_input(kernel=2, integral=2, mask=1)
    seeds["bad_global_mean_history"] = kernel_input(kernel=2, integral=2, mask=0, s=3, history_mode=2)
    seeds["bad_no_history_with_cache"] = kernel_input(kernel=2, history_mode=0, s=3)
    for mode in range(2, 7):
        for integral in (0, 1):
            seeds[f"history_mode{mode}_integral{integral}"] = kernel_input(kernel=2, s=3, history_mode=mode,
                                                                           integral=integral, history_param=mode)
    for alias in range(5):
        seeds[f"bad_alias_{alias}"] = kernel_input(kernel=2 if alias >= 3 else 0, alias=200 + alias, alias_offset_lo=3)
    for name, data in sorted(seeds.items()):
        write("kernels", f"seed_{name}.bin", data)


TOKENIZER_JSON, TOKENIZER_TEXT, TOKENIZER_IDS = 0, 1, 5  # fuzz_tokenizer.cpp's mode byte (| 2: tiny_gpt2)


def tokenizer_seeds():
    text_dir = os.path.join(DATA, "text")
    for name in ("tiny_llama3", "tiny_gpt2"):
        with open(os.path.join(text_dir, name, "tokenizer.json"), "rb") as f:
            raw = f.read()
        write("tokenizer", f"json_{name}.json", bytes([TOKENIZER_JSON]) + raw)
        if name != "tiny_gpt2":
            continue  # the variants of the smaller file only: the corpus stays small
        parsed = json.loads(raw)
        variants = {
            "prefix_space": ("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                               "use_regex": True}),
            "bad_normalizer": ("normalizer", {"type": "NFC"}),
            "bad_split_removed": ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
            "bad_decoder": ("decoder", None),
        }
        for variant, (key, value) in variants.items():
            changed = dict(parsed)
            changed[key] = value
            write("tokenizer", f"json_{name}_{variant}.json",
                  bytes([TOKENIZER_JSON]) + json.dumps(changed, ensure_ascii=False).encode("utf-8"))
        write("tokenizer", f"json_{name}_truncated.json", bytes([TOKENIZER_JSON]) + raw[: len(raw) // 2])
    with open(os.path.join(text_dir, "tokenizer_goldens.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    for case in cases:
        text = case["text"].encode("utf-8", "surrogatepass")
        for gpt2 in (0, 2):
            write("tokenizer", f"text_{'gpt2' if gpt2 else 'llama3'}_{case['name']}.txt",
                  bytes([TOKENIZER_TEXT | gpt2]) + text)
    write("tokenizer", "text_invalid_utf8.txt", bytes([TOKENIZER_TEXT]) + b"ok \xc3( \xed\xa0\x80 \xff")
    for gpt2 in (0, 2):
        ids = struct.pack("<6I", 0, 1, 255, 256, 300, 0x7FFFFFFF)
        write("tokenizer", f"ids_{'gpt2' if gpt2 else 'llama3'}.bin", bytes([TOKENIZER_IDS | gpt2]) + ids)


def main():
    for target in ("safetensors", "config_json", "kernels", "tokenizer"):
        os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    safetensors_seeds()
    config_seeds()
    kernel_seeds()
    tokenizer_seeds()


if __name__ == "__main__":
    main()
