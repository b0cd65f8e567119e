#!/usr/bin/python3
"""Golden blocks of the weight formats (docs/math.md §10) from an independent transcription of
llama.cpp's reference quantizers (ggml/src/ggml-quants.c: quantize_row_q8_0_ref,
quantize_row_q4_0_ref; ggml_compute_fp32_to_bf16), written here in numpy float32 arithmetic,
operation for operation, so that the C++ codecs (include/diffattn/core/weight_blocks.hpp) are held
to llama.cpp's bytes and not to themselves.

    /usr/bin/python3 tools/make_weight_goldens.py

Writes tests/data/weights/codec_goldens.json: rows of 96 float32 weights (bit patterns), and for
each row its q8_0 and q4_0 blocks (hex, the f16 scale little-endian first) and its bf16 bits.
The rows are seeded random weights of several scales plus the cases a transcription can get wrong:
a zero block, ties between +m and -m for q4_0's signed maximum, values halfway between two
quantization steps, weights whose scale is an f16 subnormal, and a block at f16's largest scale.
"""

import json
import math
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "weights", "codec_goldens.json")
QK = 32
F32 = np.float32


def f16_bits(value):
    """GGML_FP32_TO_FP16: round to nearest, ties to even (numpy's float16 conversion)."""
    return int(np.array([value], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def roundf(value):
    """C's roundf: halfway cases away from zero (value is a float32, exact in a double)."""
    magnitude = math.floor(abs(float(value)) + 0.5)
    return int(math.copysign(magnitude, float(value)))


def q8_0_block(x):
    amax = F32(0)
    for v in x:
        amax = max(amax, F32(abs(v)))
    d = F32(amax / F32(127))
    inv = F32(F32(1) / d) if d != 0 else F32(0)
    out = [f16_bits(d) & 0xFF, f16_bits(d) >> 8]
    for v in x:
        q = roundf(F32(v * inv))
        assert -127 <= q <= 127
        out.append(q & 0xFF)
    return bytes(out)


def q4_0_block(x):
    amax = F32(0)
    signed_max = F32(0)
    for v in x:
        if amax < F32(abs(v)):
            amax = F32(abs(v))
            signed_max = v
    d = F32(signed_max / F32(-8))
    inv = F32(F32(1) / d) if d != 0 else F32(0)
    out = [f16_bits(d) & 0xFF, f16_bits(d) >> 8]
    for j in range(QK // 2):
        x0 = F32(x[j] * inv)
        x1 = F32(x[QK // 2 + j] * inv)
        xi0 = min(15, int(F32(x0 + F32(8.5))))  # (int8_t) truncates toward zero
        xi1 = min(15, int(F32(x1 + F32(8.5))))
        out.append(xi0 | (xi1 << 4))
    return bytes(out)


def bf16_bits(value):
    """ggml_compute_fp32_to_bf16: round to nearest even on the bits (no NaN in these rows)."""
    u = int(np.array([value], dtype=np.float32).view(np.uint32)[0])
    return (u + (0x7FFF + ((u >> 16) & 1))) >> 16


def rows():
    rng = np.random.RandomState(20261202)
    out = []
    for scale in (1.0, 0.02, 1e-3, 40.0):
        for _ in range(4):
            out.append((rng.standard_normal(96) * scale).astype(np.float32))
    zero = np.zeros(96, dtype=np.float32)
    zero[40:] = (rng.standard_normal(56) * 0.1).astype(np.float32)  # block 0 all zero, block 1 half
    out.append(zero)
    tie = (rng.uniform(-1, 1, 96)).astype(np.float32)
    tie[3], tie[17] = F32(1.5), F32(-1.5)      # q4_0: the first of +m, -m is the signed maximum
    tie[40], tie[33] = F32(-2.25), F32(2.25)
    out.append(tie)
    # Halfway between steps: q8_0 with amax 127 has d = 1, so x = k + 0.5 rounds away from zero.
    half = np.array([127.0] + [k + 0.5 for k in range(-15, 16)] + [-127.0] + [(-1) ** k * (k % 60 + 0.5)
                                                                            for k in range(63)], dtype=np.float32)
    out.append(half)
    out.append((rng.standard_normal(96) * 1e-9).astype(np.float32))   # scales below f16's normal range
    big = (rng.uniform(-1, 1, 96) * 5e5).astype(np.float32)
    big[40] = F32(-65504.0 * 8)                                        # q4_0's largest scale
    out.append(big)
    largest = (rng.uniform(-1, 1, 96) * 8e6).astype(np.float32)       # beyond q4_0's range
    largest[5] = F32(65504.0 * 127)                                    # q8_0's largest scale
    out.append(largest)
    return out


def storable_q4_0(x):
    return bool(np.all(np.abs(x.astype(np.float64)) <= 65504.0 * 8))


def main():
    goldens = []
    for x in rows():
        blocks = [x[b * QK:(b + 1) * QK] for b in range(len(x) // QK)]
        goldens.append({
            "weights": [int(v) for v in x.view(np.uint32)],
            "q8_0": b"".join(q8_0_block(b) for b in blocks).hex(),
            "q4_0": b"".join(q4_0_block(b) for b in blocks).hex() if storable_q4_0(x) else None,
            "bf16": [bf16_bits(v) for v in x],
        })
    # Self-checks of the transcription: each dequantized weight lies within half a step of the
    # weight, plus what rounding the scale to f16 moves it (q steps of |d16 - d|).
    for g in goldens:
        x = np.array(g["weights"], dtype=np.uint32).view(np.float32).astype(np.float64)
        for name, size, levels in (("q8_0", 34, 127), ("q4_0", 18, 8)):
            if g[name] is None:
                continue
            raw = bytes.fromhex(g[name])
            for b in range(3):
                blk = raw[b * size:(b + 1) * size]
                d16 = float(np.frombuffer(blk[:2], dtype=np.float16)[0])
                xb = x[b * QK:(b + 1) * QK]
                if name == "q8_0":
                    q = np.frombuffer(blk[2:], dtype=np.int8).astype(np.float64)
                else:
                    nib = np.frombuffer(blk[2:], dtype=np.uint8)
                    q = np.concatenate([nib & 15, nib >> 4]).astype(np.float64) - 8
                d = np.max(np.abs(xb)) / levels
                # q4_0 clips the side opposite its signed maximum at +7: up to a whole step there.
                step = 0.5 if name == "q8_0" else 1.0
                assert np.all(np.abs(q * d16 - xb) <= step * d * (1 + 1e-5) + levels * abs(abs(d16) - d) + 1e-30), name
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "tools/make_weight_goldens.py", "block": QK, "rows": goldens}, f, indent=0)
        f.write("\n")
    print("wrote", OUT, len(goldens), "rows")


if __name__ == "__main__":
    main()
