#!/usr/bin/env python3
"""Trains the tiny byte-level BPE vocabulary of the tokenizer tests (tests/data/text/).

A plain byte-level BPE trainer (no third-party tokenizer library): the training text is split
with Llama 3's pre-tokenizer pattern, every byte is mapped to its GPT-2 byte-level character,
and the most frequent adjacent pair is merged until --merges merges are learned (ties go to the
lexicographically smallest pair, so the output is deterministic). A few whole words that the
merges do not produce are then added to the vocabulary, so that `ignore_merges` changes the
result. The vocabulary is written in two tokenizer.json forms:

  tiny_llama3/tokenizer.json   Llama 3's form: Sequence[Split(Llama 3 pattern, Isolated),
                               ByteLevel(use_regex false)], ignore_merges true, merges as
                               [a, b] arrays, Llama 3's special tokens, post-processor
                               Sequence[ByteLevel, TemplateProcessing("<|begin_of_text|> $A")]
                               as in Llama 3.1; plus a tokenizer_config.json naming bos / eos
  tiny_gpt2/tokenizer.json     GPT-2's form: ByteLevel(use_regex true), ignore_merges false,
                               merges as "a b" strings, <|endoftext|> and three added tokens
                               with lstrip / rstrip / normalized flags, post-processor ByteLevel

The training text (tests/data/text/training_text.txt) is the project's own. Needs the `regex`
module (for \\p{L}); run:  python3 tools/train_tiny_bpe.py
"""
import argparse
import collections
import json
import os

import regex

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Llama 3.1's first 11 special tokens (of 256), with ids after the vocabulary as in Llama 3.
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                   "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]

# Whole words added to the vocabulary although no merge builds them (ignore_merges: true turns
# each into one token; with ignore_merges: false the merges split it).
WHOLE_WORDS = [" attentive", " tokenizes", " Aufmerksamkeit", " differentiation", " 😀", "ization"]


def bytes_to_unicode():
    """GPT-2's byte -> printable character table, in GPT-2's order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


def byte_level(text, table):
    return "".join(table[b] for b in text.encode("utf-8"))


def train(words, merges_wanted):
    """words: {tuple of symbols: count}. Returns the list of merges (a, b)."""
    words = {tuple(w): c for w, c in words.items()}
    merges = []
    while len(merges) < merges_wanted:
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best_count = max(pairs.values())
        if best_count < 2:
            break
        best = min(p for p, c in pairs.items() if c == best_count)
        merges.append(best)
        merged = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    return merges


def apply_merges(word, ranks):
    """Plain BPE (lowest rank first, leftmost on ties), to check the whole words need > 1 token."""
    symbols = list(word)
    while len(symbols) > 1:
        best = None
        for i in range(len(symbols) - 1):
            r = ranks.get((symbols[i], symbols[i + 1]))
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    return symbols


def added(id_, content, special=True, lstrip=False, rstrip=False, normalized=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def model(vocab, merges, ignore_merges, array_form):
    return {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": ignore_merges, "vocab": vocab,
            "merges": [[a, b] for a, b in merges] if array_form else [f"{a} {b}" for a, b in merges]}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(here, "..", "tests", "data", "text")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--text", default=os.path.join(data, "training_text.txt"))
    parser.add_argument("--out", default=data)
    parser.add_argument("--merges", type=int, default=700)
    args = parser.parse_args()

    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    bs, cs = bytes_to_unicode()
    table = dict(zip(bs, cs))
    counts = collections.Counter(byte_level(w, table) for w in regex.findall(LLAMA3_PATTERN, text))
    merges = train({tuple(w): c for w, c in counts.items()}, args.merges)

    vocab = {c: i for i, c in enumerate(cs)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    ranks = {m: r for r, m in enumerate(merges)}
    for word in WHOLE_WORDS:
        pieces = regex.findall(LLAMA3_PATTERN, word)
        assert pieces == [word], f"{word!r} is not one pre-token: {pieces}"
        mapped = byte_level(word, table)
        assert mapped not in vocab, f"{word!r} is already built by the merges"
        assert len(apply_merges(mapped, ranks)) > 1
        vocab[mapped] = len(vocab)

    n = len(vocab)
    llama3 = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(n + i, t) for i, t in enumerate(LLAMA3_SPECIALS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [n],
                                                      "tokens": ["<|begin_of_text|>"]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": model(vocab, merges, True, True),
    }
    gpt2 = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(n, "<|endoftext|>"),
                         added(n + 1, "<mask>", lstrip=True),
                         added(n + 2, "[NOTE]", special=False, rstrip=True),
                         added(n + 3, "ahem", special=False, normalized=True)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": model(vocab, merges, False, False),
    }
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
              "clean_up_tokenization_spaces": False, "model_max_length": 131072,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    for name, tok in (("tiny_llama3", llama3), ("tiny_gpt2", gpt2)):
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        with open(os.path.join(args.out, name, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, indent=1)
            f.write("\n")
    with open(os.path.join(args.out, "tiny_llama3", "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"{len(merges)} merges, {len(vocab)} vocabulary entries, written to {args.out}")


if __name__ == "__main__":
    main()
