#!/usr/bin/env python3
"""Reads and merges the JSON files of diffattn's benchmark programs (standard library only).

Every program of bench/ names its benchmarks "family/key:value/key:value", e.g.
"softmax/N:1024/d:128/mask:causal/threads:1"; Google Benchmark appends "/real_time" (and
"/min_time:0.050" in --quick runs, "/iterations:32", ...), which Record drops from .name.
load() turns each entry into a Record with .name, .family, .params (the key:value parts, numbers
as int), .seconds (wall time per iteration), the raw entry (.get for counters) and helpers.

  python3 tools/bench_json.py merge -o docs/bench/latest.json a.json b.json ...
      one file {"context": {...}, "contexts": {file: context}, "benchmarks": [all entries]};
      missing or empty inputs are skipped with a note (a --filter that matched nothing).
  python3 tools/bench_json.py list latest.json
      one line per benchmark: name, time, GFLOPs, vs_gemm
"""
import argparse
import json
import os
import sys

_TIME_TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


_GBENCH_SUFFIXES = ("real_time", "manual_time", "process_time")
_GBENCH_KEYS = ("min_time:", "min_warmup_time:", "iterations:", "repeats:")


def _is_gbench_suffix(part):
    return part in _GBENCH_SUFFIXES or part.startswith(_GBENCH_KEYS)


class Record:
    def __init__(self, entry):
        self.entry = entry
        self.full_name = entry.get("name", "")
        # Drop the parts Google Benchmark appends (real_time, min_time:0.050, iterations:32, ...).
        parts = [p for p in self.full_name.split("/") if p and not _is_gbench_suffix(p)]
        self.name = "/".join(parts)
        self.family = parts[0] if parts else ""
        self.params = {}
        for part in parts[1:]:
            if ":" not in part:
                continue
            key, value = part.split(":", 1)
            try:
                value = int(value)
            except ValueError:
                pass
            self.params[key] = value

    def get(self, key, default=None):
        """A counter or field of the entry."""
        return self.entry.get(key, default)

    @property
    def seconds(self):
        """Wall time per iteration, in seconds."""
        t = self.entry.get("real_time")
        if t is None:
            return None
        return float(t) * _TIME_TO_SECONDS.get(self.entry.get("time_unit", "ns"), 1e-9)

    def matches(self, family=None, **params):
        if family is not None and self.family != family:
            return False
        return all(self.params.get(k) == v for k, v in params.items())

    def __repr__(self):
        return "Record(%s)" % self.name


def read_file(path):
    """The parsed JSON of one file, or None if it is missing or empty."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    with open(path) as f:
        return json.load(f)


def load(paths):
    """One Record per benchmark name over the files: the median aggregate when the run had
    repetitions (--benchmark_repetitions), else the last iteration entry; errored runs left out."""
    if isinstance(paths, str):
        paths = [paths]
    by_name, medians = {}, {}
    for path in paths:
        data = read_file(path)
        if data is None:
            continue
        for entry in data.get("benchmarks", []):
            if entry.get("error_occurred"):
                continue
            run_type = entry.get("run_type", "iteration")
            if run_type == "iteration":
                by_name[entry.get("name", "")] = entry
            elif run_type == "aggregate" and entry.get("aggregate_name") == "median":
                base = dict(entry)
                base["name"] = entry.get("run_name", entry.get("name", ""))
                medians[base["name"]] = base
    records = {}
    for entry in list(by_name.values()) + list(medians.values()):
        r = Record(entry)
        records[r.name] = r  # medians come last and win
    return list(records.values())


def context(path):
    data = read_file(path) or {}
    return data.get("context", {})


def find(records, family, **params):
    """The one record of `family` with these params, or None (the last one if repeated)."""
    found = [r for r in records if r.matches(family, **params)]
    return found[-1] if found else None


def merge(paths, out_path):
    merged = {"context": {}, "contexts": {}, "benchmarks": []}
    for path in paths:
        data = read_file(path)
        if data is None:
            print("bench_json: %s: missing or empty, skipped" % path, file=sys.stderr)
            continue
        ctx = data.get("context", {})
        merged["contexts"][os.path.basename(path)] = ctx
        if not merged["context"]:
            merged["context"] = dict(ctx)
        merged["benchmarks"].extend(data.get("benchmarks", []))
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    return merged


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge several benchmark JSON files into one")
    m.add_argument("-o", "--output", required=True)
    m.add_argument("inputs", nargs="+")
    ls = sub.add_parser("list", help="one line per benchmark")
    ls.add_argument("inputs", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "merge":
        merged = merge(args.inputs, args.output)
        print("bench_json: %d benchmarks -> %s" % (len(merged["benchmarks"]), args.output))
    else:
        for r in load(args.inputs):
            g, v = r.get("GFLOPs"), r.get("vs_gemm")
            print("%-70s %12.4f ms %s %s" % (r.name, (r.seconds or 0) * 1e3,
                                             "" if g is None else "%8.2f GFLOP/s" % g,
                                             "" if v is None else "vs_gemm %.3f" % v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
