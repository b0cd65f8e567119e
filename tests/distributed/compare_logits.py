"""Compares the `logits` tensor of two safetensors files of diffattn-forward --logits (ctest
forward_mpi): the same shape, every entry within 1e-4 of the largest magnitude (the ranks sum in
another order than one process), and the mark of --logits in both. Standard library only.

    python3 compare_logits.py REFERENCE.safetensors OTHER.safetensors
"""
import json
import struct
import sys


def read_logits(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    entry = header["logits"]
    begin, end = entry["data_offsets"]
    if entry["dtype"] != "F32":
        sys.exit(f"{path}: logits are {entry['dtype']}, not F32")
    body = data[8 + length + begin:8 + length + end]
    values = struct.unpack(f"<{len(body) // 4}f", body)
    return entry["shape"], values, header.get("__metadata__", {})


def main():
    reference_path, other_path = sys.argv[1:3]
    shape, reference, reference_meta = read_logits(reference_path)
    other_shape, other, other_meta = read_logits(other_path)
    if shape != other_shape:
        sys.exit(f"{other_path}: logits of shape {other_shape}, but {shape} in {reference_path}")
    for path, meta in ((reference_path, reference_meta), (other_path, other_meta)):
        if meta.get("written_by") != "diffattn-forward --logits":
            sys.exit(f"{path}: no mark of diffattn-forward --logits in __metadata__: {meta}")
    largest = max(abs(v) for v in reference)
    worst = max(range(len(reference)), key=lambda i: abs(reference[i] - other[i]))
    difference = abs(reference[worst] - other[worst])
    if not difference <= 1e-4 * (1 + largest):
        row, column = divmod(worst, shape[1])
        sys.exit(f"{other_path}: logits[{row}][{column}] is {other[worst]} but {reference[worst]} in "
                 f"{reference_path} (difference {difference}, largest magnitude {largest})")
    print(f"same logits {shape}: largest difference {difference:.3g} (largest magnitude {largest:.3g})")


if __name__ == "__main__":
    main()
