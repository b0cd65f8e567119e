#!/usr/bin/python3
"""The synthetic multi-needle key-value retrieval task of docs/retrieval.md (issue 19).

An episode is one token sequence:

    BOS  context (L tokens: noise with N needles at chosen or random depths)  question block

    needle  (style "kv"):   NDL key value          three tokens, a little sentence
    needle  (style "pair"): PAIR(key, value)       one token standing for the pair (one-hop)
    question block: R times   QRY key              (the answers are not in the sequence, so a
                                                  later question cannot be answered by
                                                  elimination of the values already given)

The prediction scored for question r is the next-token prediction at the position of its key
token in the question block (the expected id is the value of that key's needle). Keys within an
episode are distinct and so are values, so answering with another needle's value is always wrong
and chance is 1/N.

Everything is seeded (numpy's PCG64 through `numpy.random.default_rng(seed)`), so an episode set is
a pure function of its seed and arguments.
"""

import numpy as np

BOS, QRY, NDL = 0, 1, 2
N_SPECIAL = 3


class Vocab:
    """Token-id layout: 3 specials, then noise, key, value and (style "pair") pair tokens."""

    def __init__(self, n_noise=32, n_keys=16, n_values=16, style="kv"):
        if style not in ("kv", "pair"):
            raise ValueError("style must be kv or pair, got %r" % style)
        self.style = style
        self.n_noise, self.n_keys, self.n_values = n_noise, n_keys, n_values
        self.noise0 = N_SPECIAL
        self.key0 = self.noise0 + n_noise
        self.value0 = self.key0 + n_keys
        self.pair0 = self.value0 + n_values
        self.size = self.pair0 + (n_keys * n_values if style == "pair" else 0)

    def key(self, k):
        return self.key0 + k

    def value(self, v):
        return self.value0 + v

    def pair(self, k, v):
        return self.pair0 + k * self.n_values + v

    @property
    def needle_len(self):
        return 3 if self.style == "kv" else 1

    def needle(self, k, v):
        if self.style == "kv":
            return [NDL, self.key(k), self.value(v)]
        return [self.pair(k, v)]

    def describe(self):
        d = {"size": self.size, "style": self.style, "BOS": BOS, "QRY": QRY,
             "noise": [self.noise0, self.n_noise], "keys": [self.key0, self.n_keys],
             "values": [self.value0, self.n_values]}
        if self.style == "kv":
            d["NDL"] = NDL
        else:
            d["pairs"] = [self.pair0, self.n_keys * self.n_values]
        return d


def make_episode(rng, vocab, L, N, R, depth=None):
    """One episode. L: context length (noise + needles, BOS and question excluded); N needles with
    distinct keys and distinct values; R <= N questions (distinct keys, random order).
    depth: None (every needle at a random place) or a number in [0, 1]: the needle of the FIRST
    question is placed with its first token at round(depth * (L - needle_len)) of the context; the
    others at random places that do not overlap it.

    Returns a dict (positions are indices into `tokens`):
      tokens      list of ids, length 1 + L + 2 R
      score_pos   R positions whose next-token prediction is scored (the question's key token)
      targets     R expected ids (the asked values)
      answer      R lists: the positions of the asked key's needle (its whole span)
      noise       the positions of the noise tokens of the context (same for every question)
      depth       R numbers: start of the asked needle in the context / (L - needle_len)
    """
    nl = vocab.needle_len
    if N < 1 or R < 1 or R > N or N > min(vocab.n_keys, vocab.n_values):
        raise ValueError("bad N=%d R=%d" % (N, R))
    if N * nl > L:
        raise ValueError("context L=%d too short for %d needles" % (L, N))
    keys = rng.choice(vocab.n_keys, size=N, replace=False)
    values = rng.choice(vocab.n_values, size=N, replace=False)
    asked = rng.choice(N, size=R, replace=False)  # needle indices, in question order
    n_noise = L - N * nl
    # Needle starts: choose where each needle goes among the noise tokens (slots 0..n_noise), so
    # needles never overlap; slot s means "after s noise tokens".
    if depth is None:
        slots = np.sort(rng.integers(0, n_noise + 1, size=N))
        order = rng.permutation(N)  # which needle sits in which (sorted) slot
    else:
        # Place the first asked needle at the requested depth, others randomly around it.
        start = int(round(depth * (L - nl)))
        # slot of the target: the number of noise tokens before it, given the other needles
        # placed before it; choose how many other needles go before (consistent with start).
        others = [i for i in range(N) if i != asked[0]]
        rng.shuffle(others)
        # max needles that can precede: those fitting in start tokens; min: those forced by the
        # noise budget after the target
        max_before = min(len(others), start // nl)
        after_room = L - start - nl
        min_before = max(0, len(others) - after_room // nl)
        # also the noise before the target must fit: start - b*nl <= n_noise
        min_before = max(min_before, -(-(start - n_noise) // nl) if start > n_noise else 0)
        b = int(rng.integers(min_before, max_before + 1)) if max_before >= min_before else max_before
        s_target = start - b * nl
        before_slots = np.sort(rng.integers(0, s_target + 1, size=b))
        after_slots = np.sort(rng.integers(s_target, n_noise + 1, size=len(others) - b))
        slots = np.concatenate([before_slots, [s_target], after_slots]).astype(np.int64)
        order = np.array(others[:b] + [asked[0]] + others[b:])
    noise_ids = rng.integers(0, vocab.n_noise, size=n_noise) + vocab.noise0
    tokens = [BOS]
    noise_pos = []
    starts = [0] * N
    ni = 0
    for s, which in zip(list(slots) + [n_noise], list(order) + [None]):
        while ni < s:
            noise_pos.append(len(tokens))
            tokens.append(int(noise_ids[ni]))
            ni += 1
        if which is not None:
            starts[which] = len(tokens)
            tokens.extend(vocab.needle(int(keys[which]), int(values[which])))
    assert len(tokens) == 1 + L
    score_pos, targets, answer, depths = [], [], [], []
    for i in asked:
        tokens.append(QRY)
        score_pos.append(len(tokens))
        tokens.append(vocab.key(int(keys[i])))
        targets.append(vocab.value(int(values[i])))
        answer.append(list(range(starts[i], starts[i] + nl)))
        depths.append((starts[i] - 1) / max(1, L - nl))
    if depth is not None:
        assert abs(depths[0] - depth) <= 0.5 / max(1, L - nl) + 1e-12, (depths[0], depth)
    return {"tokens": tokens, "score_pos": score_pos, "targets": targets, "answer": answer,
            "noise": noise_pos, "depth": depths}


def make_batch(rng, vocab, B, L, N, R):
    """B random episodes of the same shape, as int64 arrays tokens [B, T], score_pos [B, R],
    targets [B, R]."""
    eps = [make_episode(rng, vocab, L, N, R) for _ in range(B)]
    tok = np.array([e["tokens"] for e in eps], dtype=np.int64)
    sp = np.array([e["score_pos"] for e in eps], dtype=np.int64)
    tg = np.array([e["targets"] for e in eps], dtype=np.int64)
    return tok, sp, tg


if __name__ == "__main__":
    v = Vocab()
    rng = np.random.default_rng(0)
    for dep in (None, 0.0, 0.25, 0.5, 0.75, 1.0):
        e = make_episode(rng, v, 32, 4, 2, depth=dep)
        print(dep, e["depth"], e["tokens"])
        for p, t, a in zip(e["score_pos"], e["targets"], e["answer"]):
            assert e["tokens"][a[-1]] == t and e["tokens"][p] == e["tokens"][a[-2]]
