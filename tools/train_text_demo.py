#!/usr/bin/python3
"""Train models/diffllama_tiny_text/: a tiny DiffLlama that memorises the project's own text
tests/data/text/training_text.txt, laid out exactly as the Hugging Face Hub ships a DiffLlama,
with a float64 golden for the README demo prompt.

    nice /usr/bin/python3 tools/train_text_demo.py            (Debian python3-torch, one thread)

The model is the float64 transcription tools/checkpoint_reference.py (`forward`, the same math
the C++ reader is checked against), trained as-is: the parameters are float64 leaf tensors,
Adam, one sequence per forward call. Deterministic (fixed seed, one thread).

Token ids come from @huggingface/tokenizers (the reference the tokenizer tests compare the C++
tokenizer with), run by node from the scratch directory tools/make_tokenizer_goldens.sh
installs it in (default /tmp/diffattn-tokenizer-js; --tokenizer-js DIR to change).

Writes config.json, generation_config.json, model.safetensors (F32), tokenizer.json,
tokenizer_config.json, golden.safetensors and MODEL_CARD.md into the output directory. The
golden is computed from the stored F32 values read back by the reference loader.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_reference as CR  # noqa: E402
import torch_reference as TR  # noqa: E402
from make_checkpoint_goldens import (MARGIN_MIN, byte_level_decode, check,  # noqa: E402
                                     diffllama_config, maxabs, write_json)

DT = torch.float64
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(ROOT, "tests", "data", "text", "training_text.txt")
TOKENIZER = os.path.join(ROOT, "tests", "data", "text", "tiny_llama3")
OUT = os.path.join(ROOT, "models", "diffllama_tiny_text")
BOS, EOS, VOCAB = 810, 811, 821
PROMPT = "Differential attention computes"
MAX_NEW = 24
SEED = 20250
CONFIG = diffllama_config(vocab_size=VOCAB, bos_token_id=BOS, eos_token_id=EOS, hidden_size=64,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                          num_hidden_layers=2, intermediate_size=192,
                          max_position_embeddings=256)
WINDOW = 128        # tokens per training sequence (+1 for the shifted targets)
BATCH = 4           # sequences per Adam step: the one at offset 0 and 3 random ones
STEPS = 1200
LR, LR_MIN, WARMUP = 1e-2, 5e-4, 30


# ============================================================================================
# Tokens
# ============================================================================================
JS = """
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
const [dir, ...texts] = JSON.parse(fs.readFileSync(0, "utf8"));
const read = (f) => JSON.parse(fs.readFileSync(dir + "/" + f, "utf8"));
const tok = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
console.log(JSON.stringify(texts.map((t) =>
  Array.from(tok.encode(t, { add_special_tokens: true }).ids, Number))));
"""


def tokenize(texts, js_dir):
    """Ids with the post-processor's <|begin_of_text|>, by @huggingface/tokenizers."""
    if not os.path.isdir(os.path.join(js_dir, "node_modules", "@huggingface", "tokenizers")):
        sys.exit("train_text_demo: no @huggingface/tokenizers under %s; run "
                 "tools/make_tokenizer_goldens.sh (or pass --tokenizer-js DIR)" % js_dir)
    out = subprocess.run(["node", "--input-type=module", "-e", JS], cwd=js_dir, check=True,
                         input=json.dumps([TOKENIZER] + texts), capture_output=True, text=True)
    return json.loads(out.stdout)


# ============================================================================================
# Training
# ============================================================================================
def init_params(rc, g):
    """DiffLlamaPreTrainedModel._init_weights: matrices N(0, initializer_range), norms 1,
    lambda_* N(0, lambda_std_dev)."""
    params = {}
    for name, shape in CR.expected_shapes(rc).items():
        if name.endswith("norm.weight"):
            w = torch.ones(*shape, dtype=DT)
        elif ".lambda_" in name:
            w = torch.randn(*shape, generator=g, dtype=DT) * CONFIG["lambda_std_dev"]
        else:
            w = torch.randn(*shape, generator=g, dtype=DT) * CONFIG["initializer_range"]
        params[name] = w.requires_grad_()
    return params


def sequence_loss(seq, params, rc):
    logits = CR.forward(seq[:-1], params, rc)
    return torch.nn.functional.cross_entropy(logits, seq[1:])


def learning_rate(step, steps):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return LR_MIN + 0.5 * (LR - LR_MIN) * (1 + math.cos(math.pi * t))


def windows(n):
    """Start offsets covering the whole text with windows of WINDOW + 1 tokens."""
    starts = list(range(0, n - WINDOW - 1, WINDOW // 2))
    return starts + [n - WINDOW - 1]


@torch.no_grad()
def evaluate(data, params, rc):
    """Mean cross-entropy over every predicted token of the text, and the fraction of tokens
    the model's argmax gets right, each token counted once (teacher forcing, windows of
    WINDOW tokens; a token is scored in the first window that predicts it)."""
    total, right, count, done = 0.0, 0, 0, 0
    for s in windows(len(data)):
        seq = data[s:s + WINDOW + 1]
        logits = CR.forward(seq[:-1], params, rc)
        keep = slice(done - s, None)  # targets s+1.. already scored up to `done`
        tgt = seq[1:][keep]
        total += float(torch.nn.functional.cross_entropy(logits[keep], tgt, reduction="sum"))
        right += int((logits[keep].argmax(-1) == tgt).sum())
        count += len(tgt)
        done = s + WINDOW
    return total / count, right / count, count


def train(data, rc, steps, log):
    g = torch.Generator().manual_seed(SEED)
    params = init_params(rc, g)
    opt = torch.optim.Adam(params.values(), lr=LR)
    t0 = time.time()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, steps)
        starts = [0] + torch.randint(1, len(data) - WINDOW, (BATCH - 1,), generator=g).tolist()
        opt.zero_grad()
        loss = sum(sequence_loss(data[s:s + WINDOW + 1], params, rc) for s in starts) / BATCH
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log("step %4d  loss %.4f  lr %.2e  %5.0f s" % (step, float(loss),
                                                          learning_rate(step, steps),
                                                          time.time() - t0))
    return {k: v.detach() for k, v in params.items()}, time.time() - t0, float(loss)


# ============================================================================================
# Writing the directory and the golden
# ============================================================================================
def write_model(d, params):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    write_json(os.path.join(d, "config.json"), CONFIG)
    write_json(os.path.join(d, "generation_config.json"),
               {"_from_model_config": True, "bos_token_id": BOS, "eos_token_id": EOS,
                "transformers_version": CONFIG["transformers_version"]})
    TR.write_safetensors(os.path.join(d, CR.SINGLE_FILE), params, metadata={"format": "pt"},
                         default_dtype="F32")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, fn), os.path.join(d, fn))


def write_golden(d, prompt):
    """Greedy continuation of `prompt` by the reference from the stored (F32) weights."""
    rc, p64, _ = CR.load_checkpoint(d)
    eos = CR.read_generation_config(d)
    check("eos ids from generation_config.json", eos == {EOS})
    tokens = torch.tensor(prompt)
    logits = CR.forward(tokens, p64, rc)
    gen, rows = CR.greedy(tokens, p64, rc, MAX_NEW, eos)
    top2 = rows.topk(2, dim=-1).values
    margin = float((top2[:, 0] - top2[:, 1]).min())
    check("greedy margins >= %g" % MARGIN_MIN, margin >= MARGIN_MIN, "%.3g" % margin)
    full = CR.forward(torch.tensor(prompt + gen), p64, rc)
    check("greedy steps = rows of one full forward (causal)",
          maxabs(full[len(prompt) - 1:len(prompt) - 1 + len(gen)], rows) < 1e-12)
    stopped = gen[-1] in eos
    text = byte_level_decode(d, gen)
    meta = {"family": rc["family"], "max_new_tokens": str(MAX_NEW),
            "eos_token_ids": json.dumps(sorted(eos)), "stopped_on_eos": str(stopped).lower(),
            "prompt_text": PROMPT, "generated_text": text,
            "note": "float64 reference tools/checkpoint_reference.py on the stored F32 weights; "
                    "logits of a full forward over tokens at positions 0..T-1; generated = "
                    "greedy continuation, generated_logits[n] = last-row logits that chose "
                    "generated[n]"}
    TR.write_safetensors(os.path.join(d, "golden.safetensors"),
                         {"tokens": tokens.to(DT), "logits": logits,
                          "generated": torch.tensor(gen, dtype=DT), "generated_logits": rows},
                         default_dtype="F64", metadata=meta)
    return gen, text, margin, stopped, rc, p64


CARD = """# diffllama_tiny_text: a toy DiffLlama that memorised 5 KB of this project's text

A tiny DiffLlama (`DiffLlamaForCausalLM`, transformers' layout: `config.json`,
`generation_config.json`, `model.safetensors`, `tokenizer.json`, `tokenizer_config.json`)
trained to memorise `tests/data/text/training_text.txt` (5 KB written for this project: prose
about differential attention and the library, code, numbers, a dozen scripts, emoji) with the
project's own byte-level BPE tokenizer `tests/data/text/tiny_llama3` (810 tokens + Llama 3's 11
special tokens). It exists for the README demo: text in, text out, through a real checkpoint
directory.

    diffattn-forward --model models/diffllama_tiny_text --prompt "{prompt}" --generate {max_new}

## Sizes

hidden_size {D}, {L} layers, {H} query heads and {Hkv} key-value heads of width {hd} ({P}
differential pairs), intermediate_size {I}, vocab_size {V} (bos {bos}, eos {eos}), untied
lm_head, rope_theta 10000, max_position_embeddings {maxpos}. {nparams} parameters, stored F32
({size} bytes of model.safetensors).

## Training

`tools/train_text_demo.py` (regenerate with one command, deterministic: seed {seed}, one thread):

    nice /usr/bin/python3 tools/train_text_demo.py

Data: the {ntok} ids of the whole text by @huggingface/tokenizers (`<|begin_of_text|>` first,
`<|end_of_text|>` appended at the end). Model: the float64 transcription
`tools/checkpoint_reference.py` itself (the code the C++ reader's goldens come from), float64
Adam, lr {lr} (warm-up {warmup} steps, cosine to {lr_min}), gradient norm clipped at 1. {steps} steps of
{batch} windows of {window} tokens (the one at the start of the text and {batch_minus} at random
offsets). Training took {minutes:.1f} minutes of wall time on one thread (a shared 2-core
machine: the time varies with its load).

Loss of the last step (float64, before rounding to F32) {last_loss:.4f}; over the whole text (each token once, teacher
forcing): cross-entropy {ce:.4f} nats per token, argmax right for {acc:.1%} of the {count} tokens.

## What it shows, and what not

It shows the reader end to end: a Hub-layout DiffLlama directory with a tokenizer, read
unchanged, prompt text tokenized, greedy continuation decoded back to text. From the prompt
"{prompt}" the float64 reference continues with ({ngen} tokens{stop_note}):

    {text}

`golden.safetensors` holds that prompt's ids, its logits, the continuation and the logits that
chose each token, computed by the float64 reference from the stored F32 weights (smallest
top-1 minus top-2 logit margin over the steps: {margin:.3g});
`tests/checkpoints/test_checkpoint_goldens.cpp` checks the C++ reader against it.

It is not a language model: it has seen 5 KB of text and recites it; a prompt that does not
occur in the text gets a continuation stitched from pieces of it. It says nothing about the
quality of differential attention.
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--tokenizer-js", default="/tmp/diffattn-tokenizer-js")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)

    with open(TEXT, encoding="utf-8") as f:
        text = f.read()
    ids, prompt = tokenize([text, PROMPT], args.tokenizer_js)
    check("text ids start with <|begin_of_text|>", ids[0] == BOS and prompt[0] == BOS)
    check("prompt ids are a prefix of the text ids", ids[:len(prompt)] == prompt)
    data = torch.tensor(ids + [EOS])
    rc = CR.resolve_config(CONFIG)

    params, seconds, last_loss = train(data, rc, args.steps, lambda s: print(s, flush=True))
    params32 = {k: v.float().double() for k, v in params.items()}
    ce, acc, count = evaluate(data, params32, rc)
    print("whole text: cross-entropy %.4f, argmax right %.2f%% of %d tokens"
          % (ce, 100 * acc, count))

    write_model(args.out, params)
    gen, gen_text, margin, stopped, rc2, p64 = write_golden(args.out, prompt)
    check("loader round trip exact", rc2 == rc and all(maxabs(p64[k], params32[k]) == 0.0
                                                       for k in params))
    print("prompt %s -> %s" % (prompt, gen))
    print("continuation: %r (margin %.3g%s)" % (gen_text, margin, ", eos" if stopped else ""))

    size = os.path.getsize(os.path.join(args.out, CR.SINGLE_FILE))
    with open(os.path.join(args.out, "MODEL_CARD.md"), "w") as f:
        f.write(CARD.format(
            prompt=PROMPT, max_new=MAX_NEW, D=rc["hidden_size"], L=rc["num_hidden_layers"],
            H=rc["num_attention_heads"], Hkv=rc["num_key_value_heads"], hd=rc["head_dim"],
            P=rc["num_attention_heads"] // 2, I=rc["intermediate_size"], V=rc["vocab_size"],
            bos=BOS, eos=EOS, maxpos=CONFIG["max_position_embeddings"],
            nparams=sum(v.numel() for v in params.values()), size=size, seed=SEED,
            ntok=len(ids), lr=LR, warmup=WARMUP, lr_min=LR_MIN, steps=args.steps, batch=BATCH,
            batch_minus=BATCH - 1, window=WINDOW, minutes=seconds / 60, last_loss=last_loss,
            ce=ce, acc=acc, count=count, ngen=len(gen),
            stop_note=", ending on <|end_of_text|>" if stopped else "",
            text=gen_text.replace("\n", "\n    "), margin=margin))
    print("wrote %s (%d bytes of weights), trained %.1f min" % (args.out, size, seconds / 60))


if __name__ == "__main__":
    main()
