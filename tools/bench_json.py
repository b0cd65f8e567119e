#!/usr/bin/env python3
"""Reads and merges the JSON files of diffattn's benchmark programs (standard library only).
Every reader here takes plain JSON or xz-compressed JSON (*.xz: docs/bench/latest.json.xz).

Every program of bench/ names its benchmarks "family/key:value/key:value", e.g.
"softmax/N:1024/d:128/mask:causal/threads:1"; Google Benchmark appends "/real_time" (and
"/min_time:0.050" in --quick runs, "/iterations:32", ...), which Record drops from .name.
load() turns each entry into a Record with .name, .family, .params (the key:value parts, numbers
as int), .seconds (wall time per iteration), the raw entry (.get for counters) and helpers.

  python3 tools/bench_json.py merge [--xz] -o docs/bench/latest.json a.json b.json ...
      one file {"context": {...}, "contexts": {file: context}, "benchmarks": [all entries]};
      missing or empty inputs are skipped with a note (a --filter that matched nothing).
      --xz also writes it xz-compressed to <output>.xz (what git keeps: docs/bench/latest.json.xz)
  python3 tools/bench_json.py list latest.json
      one line per benchmark: name, time, GFLOPs, vs_gemm
  python3 tools/bench_json.py gbench -o run.json latest.json.xz
      the entries Google Benchmark's compare.py can compare (those with a time: not
      bench_memory's), so that any two runs compare at the benchmarks both have: a run reported
      by aggregates only stands as its medians, names lose the "min_time:..." part of --quick,
      and compare.py's sort keeps the merged file's order (gbench_entries)
"""
import argparse
import json
import lzma
import os
import sys

_TIME_TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


_GBENCH_SUFFIXES = ("real_time", "manual_time", "process_time")
_MIN_TIME_KEYS = ("min_time:", "min_warmup_time:")
_GBENCH_KEYS = _MIN_TIME_KEYS + ("iterations:", "repeats:")


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
    """The parsed JSON of one file (plain, or xz-compressed if the name ends in .xz), or None if it
    is missing or empty."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    with (lzma.open(path, "rt") if path.endswith(".xz") else open(path)) as f:
        return json.load(f)


def gbench_entries(data):
    """The entries compare.py can compare, in the merged file's order: of a benchmark with
    repetitions, its iterations with the mean and median aggregates (stddev and cv are not times);
    of one reported by its aggregates only (--benchmark_report_aggregates_only), the median under
    the benchmark's own name, as load() reads it, so that it compares with a run without
    repetitions. Names lose the min_time part a --quick run adds; family_index becomes the order
    in which each benchmark first appears (per_family_instance_index 0), which compare.py's sort
    then keeps (each program counts its families from 0)."""
    def plain(name):
        return "/".join(p for p in name.split("/") if not p.startswith(_MIN_TIME_KEYS))

    timed = [e for e in data.get("benchmarks", []) if all(k in e for k in ("real_time", "cpu_time", "time_unit"))]
    iterated = {e.get("run_name", e.get("name")) for e in timed if e.get("run_type", "iteration") == "iteration"}
    order, entries = {}, []
    for entry in timed:
        entry = dict(entry)
        run = entry.get("run_name", entry.get("name", ""))
        if entry.get("run_type") == "aggregate":
            if entry.get("aggregate_name") not in ("mean", "median") or \
                    (run not in iterated and entry.get("aggregate_name") != "median"):
                continue
            if run not in iterated:
                entry.update(name=run, run_type="iteration")
                entry.pop("aggregate_name", None)
        for key in ("name", "run_name"):
            if key in entry:
                entry[key] = plain(entry[key])
        entry["family_index"] = order.setdefault(plain(run), len(order))
        entry["per_family_instance_index"] = 0
        entries.append(entry)
    return entries


def write_json(data, out_path, xz=False):
    """Writes `data` to out_path, and with xz also to out_path + ".xz" (the same bytes compressed)."""
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    text = json.dumps(data, indent=1) + "\n"
    with open(out_path, "w") as f:
        f.write(text)
    if xz:
        with lzma.open(out_path + ".xz", "wt", preset=9 | lzma.PRESET_EXTREME) as f:
            f.write(text)


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


def merge(paths, out_path, xz=False):
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
    write_json(merged, out_path, xz)
    return merged


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge several benchmark JSON files into one")
    m.add_argument("-o", "--output", required=True)
    m.add_argument("--xz", action="store_true", help="also write <output>.xz")
    m.add_argument("inputs", nargs="+")
    ls = sub.add_parser("list", help="one line per benchmark")
    ls.add_argument("inputs", nargs="+")
    gb = sub.add_parser("gbench", help="the entries compare.py can compare, in one plain JSON file")
    gb.add_argument("-o", "--output", required=True)
    gb.add_argument("input")
    args = parser.parse_args(argv)
    if args.command == "merge":
        merged = merge(args.inputs, args.output, args.xz)
        print("bench_json: %d benchmarks -> %s%s" % (len(merged["benchmarks"]), args.output,
                                                    " (and .xz)" if args.xz else ""))
    elif args.command == "gbench":
        data = read_file(args.input)
        if data is None:
            raise SystemExit("bench_json: %s is missing or empty" % args.input)
        entries = gbench_entries(data)
        write_json({"context": data.get("context", {}), "benchmarks": entries}, args.output)
        print("bench_json: %d entries compare.py can compare -> %s" % (len(entries), args.output))
    else:
        for r in load(args.inputs):
            g, v = r.get("GFLOPs"), r.get("vs_gemm")
            print("%-70s %12.4f ms %s %s" % (r.name, (r.seconds or 0) * 1e3,
                                             "" if g is None else "%8.2f GFLOP/s" % g,
                                             "" if v is None else "vs_gemm %.3f" % v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
