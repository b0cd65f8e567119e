#!/usr/bin/env python3
"""Generate the crafted safetensors files of tests/data/safetensors/.

    /usr/bin/python3 tools/make_bad_safetensors.py [--out DIR]

good/  files the reader must accept (edge cases of a valid file);
bad/   files it must reject with a FileError, one defect per file.

The files are tiny (they double as the seed corpus for fuzzing) and the output is
deterministic: running the script again rewrites the same bytes. Stale *.safetensors files in
good/ and bad/ are removed so the folders hold exactly what is listed here.
tests/io/test_safetensors.cpp lists every bad file with the message fragments it expects and
fails when a file here has no entry there (or the other way round).

Standard library only.
"""

import argparse
import json
import pathlib
import struct
import sys

# ---------------------------------------------------------------------------------------------
# Building blocks


def pad8(header: bytes) -> bytes:
    """Pad with spaces to a multiple of 8 bytes, as the reference writer does."""
    return header + b" " * ((8 - len(header) % 8) % 8)


def container(header, data=b"", *, length=None, pad=True) -> bytes:
    """8-byte little-endian header length, header, data. `length` overrides the length field."""
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header = pad8(header)
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def dumps(obj) -> str:
    """Compact JSON keeping the key order given (the reference writer's format)."""
    return json.dumps(obj, separators=(",", ":"))


def entry(dtype, shape, *offsets) -> dict:
    """A tensor entry; shape and offsets are written as given (so a bad file can break them)."""
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, (list, tuple)) else shape,
            "data_offsets": list(offsets)}


def single(dtype="F32", shape=(2,), offsets=(0, 8), data=b"\0" * 8, name="w") -> bytes:
    """A file with one tensor `name`."""
    return container(dumps({name: entry(dtype, shape, *offsets)}), data)


def f32(*values) -> bytes:
    return struct.pack("<%df" % len(values), *values)


def f64(*values) -> bytes:
    return struct.pack("<%dd" % len(values), *values)


def u16(*bits) -> bytes:
    return struct.pack("<%dH" % len(bits), *bits)


W8 = '{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'  # a valid entry for 8 data bytes

# ---------------------------------------------------------------------------------------------
# Files the reader accepts


def good_files() -> dict:
    files = {}
    files["empty.safetensors"] = container("{}")
    files["metadata_only.safetensors"] = container(dumps({"__metadata__": {"format": "pt", "note": "crafted"}}))

    # Every supported dtype, a scalar and a zero-size tensor; header keys in neither name nor
    # offset order; offsets not aligned to the element size (F32 at byte 42).
    mixed = {
        "scalar": entry("F32", [], 42, 46),
        "f32": entry("F32", [2, 2], 16, 32),
        "empty": entry("F32", [0, 3], 46, 46),
        "bf16": entry("BF16", [2], 38, 42),
        "__metadata__": {"source": "tools/make_bad_safetensors.py"},
        "f16": entry("F16", [3], 32, 38),
        "f64": entry("F64", [1, 2], 0, 16),
    }
    mixed_data = (
        f64(0.5, -3.25)  # f64    [0, 16)
        + f32(1.0, -2.5, 0.125, 1024.0)  # f32    [16, 32)
        + u16(0x3C00, 0x7BFF, 0x0001)  # f16    [32, 38): 1, 65504, 2^-24
        + u16(0x3F80, 0xC000)  # bf16   [38, 42): 1, -2
        + f32(7.0)  # scalar [42, 46)
    )
    files["mixed_dtypes.safetensors"] = container(dumps(mixed), mixed_data)

    unpadded = dumps({"w": entry("F32", [1], 0, 4)})
    assert len(unpadded) % 8 != 0
    files["unpadded_header.safetensors"] = container(unpadded, f32(1.5), pad=False)

    # Pretty-printed header (whitespace and newlines are valid JSON).
    files["pretty_header.safetensors"] = container(json.dumps({"w": entry("F32", [2], 0, 8)}, indent=1), f32(1, 2))

    # Zero-byte tensors at offset 0, between and after tensors; a zero dimension makes the
    # count 0 whatever the other dimensions are.
    zeros = {
        "a": entry("F32", [2], 0, 8),
        "z0": entry("F32", [0], 0, 0),
        "z1": entry("F16", [3, 0], 8, 8),
        "z2": entry("F64", [0, 9223372036854775807], 8, 8),
    }
    files["zero_size_tensors.safetensors"] = container(dumps(zeros), f32(3, 4))
    return files


# ---------------------------------------------------------------------------------------------
# Files the reader rejects: one defect each


def bad_files() -> dict:
    files = {}
    # Length field and header bounds.
    files["empty.safetensors"] = b""
    files["short_7_bytes.safetensors"] = b"\x02\0\0\0\0\0\0"
    files["header_length_past_eof.safetensors"] = struct.pack("<Q", 64) + b"{}        "
    files["header_length_over_limit.safetensors"] = struct.pack("<Q", 100_000_001) + b"{}      "
    files["header_length_max_u64.safetensors"] = struct.pack("<Q", 2**64 - 1) + b"{}      "
    # Header JSON.
    files["header_empty.safetensors"] = container(b"", pad=False)
    files["header_not_json.safetensors"] = container('{"w":')
    files["header_trailing_garbage.safetensors"] = container("{} x")
    files["header_nul_padding.safetensors"] = container(b"{}\0\0\0\0\0\0", pad=False)
    files["header_invalid_utf8.safetensors"] = container(b'{"\xff":1}')
    files["header_array.safetensors"] = container("[]")
    files["header_too_deep.safetensors"] = container('{"w":' + "[" * 20 + "]" * 20 + "}")
    files["duplicate_tensor.safetensors"] = container('{"w":' + W8 + ',"w":' + W8 + "}", f32(1, 2))
    files["duplicate_entry_key.safetensors"] = container(
        '{"w":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}}', f32(1, 2))
    files["duplicate_metadata_key.safetensors"] = container('{"__metadata__":{"k":"a","k":"b"}}')
    # __metadata__.
    files["metadata_not_object.safetensors"] = container('{"__metadata__":["pt"]}')
    files["metadata_value_not_string.safetensors"] = container('{"__metadata__":{"epoch":3}}')
    # Tensor entries.
    files["entry_not_object.safetensors"] = container('{"w":[0,8]}')
    files["entry_missing_shape.safetensors"] = container('{"w":{"dtype":"F32","data_offsets":[0,8]}}', f32(1, 2))
    files["entry_extra_key.safetensors"] = container(
        '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"offsets":[0,8]}}', f32(1, 2))
    files["dtype_unknown.safetensors"] = single(dtype="F17")
    files["dtype_lowercase.safetensors"] = single(dtype="f32")
    files["dtype_unsupported_i32.safetensors"] = single(dtype="I32")
    files["dtype_u8_outside_quantized.safetensors"] = single(dtype="U8", shape=(8,))  # no diffattn.weights metadata
    files["dtype_not_string.safetensors"] = single(dtype=4)
    files["shape_not_array.safetensors"] = single(shape=2)
    files["shape_negative.safetensors"] = container('{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}',
                                                    f32(1, 2))
    files["shape_float.safetensors"] = container('{"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}',
                                                 f32(1, 2))
    # 2^32 * 2^32 * 2 elements: the element count passes 64 bits.
    files["shape_overflow.safetensors"] = single(shape=(2**32, 2**32, 2), offsets=(0, 8))
    # 2^62 elements fit, 2^62 * 4 bytes do not.
    files["shape_bytes_overflow.safetensors"] = single(shape=(2**62,), offsets=(0, 8))
    # 1025 dimensions: more than the reader's 1024-element limit on header arrays.
    files["shape_rank_too_large.safetensors"] = single(shape=(1,) * 1025, offsets=(0, 4), data=b"\0" * 4)
    # A dimension past 2^63 - 1 (the count is 0 because of the other dimension).
    files["shape_dim_too_large.safetensors"] = single(shape=(2**63, 0), offsets=(0, 0), data=b"")
    # data_offsets.
    files["offsets_not_array.safetensors"] = container('{"w":{"dtype":"F32","shape":[2],"data_offsets":8}}',
                                                       f32(1, 2))
    files["offsets_three_values.safetensors"] = single(offsets=(0, 8, 8))
    files["offsets_negative.safetensors"] = container('{"w":{"dtype":"F32","shape":[0],"data_offsets":[-4,-4]}}')
    files["offsets_float.safetensors"] = container('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}}',
                                                   f32(1, 2))
    files["offsets_reversed.safetensors"] = single(offsets=(8, 0))
    files["size_mismatch.safetensors"] = single(shape=(2, 3), offsets=(0, 20), data=b"\0" * 20)
    # Layout of the data section.
    files["overlap.safetensors"] = container(dumps({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}),
                                             b"\0" * 12)
    files["gap.safetensors"] = container(dumps({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 12, 20)}),
                                         b"\0" * 20)
    files["not_from_zero.safetensors"] = single(offsets=(4, 12), data=b"\0" * 12)
    files["past_end_of_file.safetensors"] = single(shape=(4,), offsets=(0, 16), data=b"\0" * 8)
    # Offsets near 2^64 whose span matches the shape: only the end-of-file check catches them.
    files["huge_offsets.safetensors"] = single(shape=(2**62 - 1,), offsets=(0, 2**64 - 4), data=b"\0" * 8)
    files["trailing_bytes.safetensors"] = single(data=b"\0" * 12)
    files["data_without_tensors.safetensors"] = container("{}", b"\0" * 8)
    return files


# ---------------------------------------------------------------------------------------------


def write_folder(folder: pathlib.Path, files: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.safetensors"):
        if stale.name not in files:
            stale.unlink()
    for name, content in sorted(files.items()):
        (folder / name).write_bytes(content)


def main() -> int:
    default_out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "safetensors"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=default_out,
                        help="folder that receives good/ and bad/ (default: %(default)s)")
    args = parser.parse_args()
    good, bad = good_files(), bad_files()
    write_folder(args.out / "good", good)
    write_folder(args.out / "bad", bad)
    print("wrote %d good and %d bad files under %s" % (len(good), len(bad), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
