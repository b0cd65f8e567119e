#!/usr/bin/env python3
"""Expected token sequences of diffattn::Sampler (include/diffattn/model/sampler.hpp) for fixed seeds.

    /usr/bin/python3 tools/sampler_reference.py

Prints the values tests/model/test_sampler.cpp checks, computed here without the C++ code:

  * std::mt19937_64, written out from the C++ standard's definition ([rand.eng.mers] with the
    parameters of [rand.predef]); checked against the standard's own figure, the 10000th output
    for the default seed 5489 is 9981545732273789042. (numpy's MT19937 is the 32-bit generator,
    so it cannot serve.) The first outputs for seed 5489 are printed for the test to compare with
    the engine the C++ standard library ships.
  * the sampler's documented procedure: u = (draw >> 11) * 2^-53; top-k keeps the k first of the
    ranking (larger logit first, NaN last, ties by the lower id); weights exp((x - max) / t) in
    double (NaN: 0); top-p keeps a ranked token of positive weight while the weights before it sum
    to less than top_p times the total (summed in id order, or ranking order after top-k); the token is the first kept one whose running sum of weights passes
    u * total, the kept tokens taken in ranking order when top-k or top-p is on, in id order
    otherwise.

The logits are multiples of 1/8 (exact in float and double). Python's math.exp is the C
library's exp, as std::exp is with g++ here. Standard library only.
"""

import math

MASK64 = (1 << 64) - 1


class MersenneTwister64:
    """std::mt19937_64: w=64, n=312, m=156, r=31, a=0xb5026f5aa96619e9, u=29, d=0x5555555555555555,
    s=17, b=0x71d67fffeda60000, t=37, c=0xfff7eee000000000, l=43, f=6364136223846793005."""

    n, m = 312, 156
    upper, lower = MASK64 ^ ((1 << 31) - 1), (1 << 31) - 1

    def __init__(self, seed):
        self.x = [seed & MASK64]
        for i in range(1, self.n):
            prev = self.x[-1]
            self.x.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64)
        self.i = 0

    def __call__(self):
        n, m, i = self.n, self.m, self.i
        y = (self.x[i] & self.upper) | (self.x[(i + 1) % n] & self.lower)
        self.x[i] = self.x[(i + m) % n] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
        z = self.x[i]
        self.i = (i + 1) % n
        z ^= (z >> 29) & 0x5555555555555555
        z ^= (z << 17) & 0x71D67FFFEDA60000
        z ^= (z << 37) & 0xFFF7EEE000000000
        z ^= z >> 43
        return z & MASK64


def ranking(logits):
    """Token ids, larger logit first, every NaN last, ties by the lower id."""
    return sorted(range(len(logits)), key=lambda i: (1, 0.0, i) if math.isnan(logits[i]) else (0, -logits[i], i))


def sample(logits, temperature, top_k, top_p, u):
    """One token by the documented procedure (temperature > 0)."""
    v = len(logits)
    ranked = False
    kept = list(range(v))
    if 0 < top_k < v:
        kept = ranking(logits)[:top_k]
        ranked = True
    numbers = [logits[i] for i in kept if not math.isnan(logits[i])]
    top = max(numbers)
    assert top != -math.inf
    weight = {}
    for i in kept:
        x = logits[i]
        if math.isnan(x):
            weight[i] = 0.0
        elif top == math.inf:
            weight[i] = 1.0 if x == math.inf else 0.0
        else:
            weight[i] = math.exp((x - top) / temperature)
    if top_p < 1.0:
        total = 0.0
        for i in kept:  # id order, or ranking order after top-k
            total += weight[i]
        threshold = top_p * total
        order = kept if ranked else ranking(logits)
        before, cut = 0.0, len(order)
        for j, i in enumerate(order):
            if before >= threshold or weight[i] == 0.0:
                cut = j
                break
            before += weight[i]
        kept = order[:cut]
    total = 0.0
    for i in kept:
        total += weight[i]
    target = u * total
    running, chosen = 0.0, None
    for i in kept:
        if weight[i] == 0.0:
            continue
        chosen = i
        running += weight[i]
        if running > target:
            break
    return chosen


LOGITS = [1.5, -0.25, 2.0, 0.75, 2.0, -1.0, math.nan, 0.125, -math.inf, 1.0]

# (name, temperature, top_k, top_p, seed): the cases of the test, 24 tokens each.
CASES = [
    ("temperature", 0.7, 0, 1.0, 42),
    ("top_k", 1.3, 4, 1.0, 7),
    ("top_p", 1.0, 0, 0.8, 123),
    ("all three", 0.9, 6, 0.7, 2024),
]
DRAWS = 24


def main():
    engine = MersenneTwister64(5489)
    first = [engine() for _ in range(5)]
    for _ in range(9995):  # outputs 6 .. 10000
        last = engine()
    assert last == 9981545732273789042, last  # the C++ standard's check value
    print("mt19937_64 seed 5489, outputs 1-5:", ", ".join(f"{x}u" for x in first))
    print("mt19937_64 seed 5489, output 10000:", last)
    for name, temperature, top_k, top_p, seed in CASES:
        engine = MersenneTwister64(seed)
        tokens = [sample(LOGITS, temperature, top_k, top_p, (engine() >> 11) * 2.0**-53) for _ in range(DRAWS)]
        print(f"{name} (t={temperature}, top_k={top_k}, top_p={top_p}, seed={seed}):", ", ".join(map(str, tokens)))


if __name__ == "__main__":
    main()
