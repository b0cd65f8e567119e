#!/usr/bin/python3
"""The six shipped retrieval models of docs/retrieval.md: their names, their configurations and
where they and their test data live. The one home of what the trainer (tools/train_retrieval.py),
the expected figures (tools/retrieval_figures.py), the C++ report (tools/retrieval_report.py) and
the logit check (tools/retrieval_cpp_check.py) share; numpy and torch free.
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = os.path.join(ROOT, "models", "retrieval")            # models/retrieval/<kind>/
DATA = os.path.join(ROOT, "tests", "data", "retrieval")       # episodes and expected figures

# One width and depth for every kind (docs/retrieval.md). Heads follow the papers' rule of equal
# parameter counts: a differential head has two maps of width d and values of width 2d, so
# diff/dint/shared_diff use half the heads of softmax; diff_v2 doubles the query heads of softmax.
COMMON = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 171,
          "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
          "causal": True}
KINDS = {
    "softmax": {"attention": "softmax", "num_attention_heads": 4, "num_key_value_heads": 4},
    "diff": {"attention": "diff", "num_attention_heads": 2, "num_key_value_heads": 2,
             "diff_gqa_pairing": "per_head"},
    "dint_causal_softmax": {"attention": "dint", "num_attention_heads": 2,
                            "num_key_value_heads": 2, "diff_gqa_pairing": "per_head",
                            "dint_integral": "causal_softmax"},
    "dint_causal_mean": {"attention": "dint", "num_attention_heads": 2, "num_key_value_heads": 2,
                         "diff_gqa_pairing": "per_head", "dint_integral": "causal_mean"},
    "shared_diff": {"attention": "shared_diff", "num_attention_heads": 2,
                    "num_key_value_heads": 2, "shared_diff_rank": 4},
    "diff_v2": {"attention": "diff_v2", "num_attention_heads": 4, "num_key_value_heads": 4,
                "head_dim": 16},
}
NAMES = list(KINDS)  # the order of every table


def model_config(kind, vocab_size):
    """config.json of `kind` (docs/math.md §5), keys in a fixed order."""
    c = {"attention": KINDS[kind]["attention"]}
    c.update(COMMON)
    c.update(KINDS[kind])
    c["vocab_size"] = vocab_size
    order = ["attention", "hidden_size", "num_attention_heads", "num_key_value_heads",
             "num_hidden_layers", "intermediate_size", "vocab_size", "rms_norm_eps", "rope_theta",
             "tie_word_embeddings", "causal", "diff_gqa_pairing", "dint_integral",
             "shared_diff_rank", "head_dim"]
    return {k: c[k] for k in order if k in c}
