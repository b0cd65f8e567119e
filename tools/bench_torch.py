#!/usr/bin/python3
"""Side by side: diffattn's single-head kernels against the same math in PyTorch on the CPU.

  /usr/bin/python3 tools/bench_torch.py --bench-json docs/bench/latest.json \
      --bench-bin build/bench/bench/bench_kernels [--quick] [--threads 1,2] [--out torch.json]

Run it with Debian's python3-torch (/usr/bin/python3; scripts/bench.sh does) and an optimised
libblas.so.3 (libopenblas0-openmp: Debian's torch multiplies through the system BLAS, and netlib's
reference BLAS makes it 10-50x slower; the script prints the BLAS torch loaded). For each case,
size and thread count it prints diffattn's time, torch's time and their ratio:
  - diffattn: the wall time per call of bench_kernels' benchmark of the same name
    (softmax/N:../d:../mask:../threads:..) from --bench-json (the same run's JSON); names missing
    there are measured now by running --bench-bin with a filter for exactly them.
  - torch "textbook": the formula as written, on float32 [N x d] tensors, one head:
      softmax  A = softmax(s Q K^T + M); O = A V
      DIFF     O = (A1 - lambda A2) V,  V of width 2d
      DINT     O = (A1 - lambda A2 + lambda I) V with I = causal_softmax: softmax_M(cumsum(A1) / n),
               causal_mean: cumsum(A1) / n, global_mean: mean of A1's rows (mask none)
    (the mask M is built once, outside the timing; torch.inference_mode).
  - torch "sdpa" (softmax only): torch.nn.functional.scaled_dot_product_attention (torch >= 2.0),
    or torch 1.13's private F._scaled_dot_product_attention, with is_causal.
  torch.set_num_threads(T) for T in --threads; diffattn's kernels get AttentionOptions::threads = T.
  Ratio columns are torch time / diffattn time: > 1 means diffattn is faster.
torch's time: mean over repeated calls after one warm-up, for at least --min-time seconds
(Google Benchmark's figure is also a mean). Nothing is asserted.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

LAMBDA = 0.8

# (family, d, mask, more than one thread): bench_kernels has 2-thread runs of the headline cases only
CASES = [
    ("softmax", 128, "causal", True),
    ("softmax", 128, "none", True),
    ("softmax", 64, "causal", False),
    ("diff", 64, "causal", True),
    ("dint_causal_softmax", 64, "causal", True),
    ("dint_causal_mean", 64, "causal", True),
    ("dint_global_mean", 64, "none", True),
]


def bench_name(family, n, d, mask, threads):
    return "%s/N:%d/d:%d/mask:%s/threads:%d" % (family, n, d, mask, threads)


def torch_functions(torch):
    F = torch.nn.functional

    def maps(q, k, mask, scale):
        s = (q @ k.transpose(0, 1)) * scale
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1)

    def softmax_textbook(x, mask, scale):
        return maps(x["q1"], x["k1"], mask, scale) @ x["v"]

    sdpa = None
    sdpa_name = None
    if hasattr(F, "scaled_dot_product_attention"):
        def sdpa(x, mask, scale):
            # default scale is 1/sqrt(d), the same as ours
            return F.scaled_dot_product_attention(x["q1"][None], x["k1"][None], x["v"][None],
                                                  is_causal=mask is not None)[0]
        sdpa_name = "F.scaled_dot_product_attention"
    elif hasattr(F, "_scaled_dot_product_attention"):
        def sdpa(x, mask, scale):
            return F._scaled_dot_product_attention(x["q1"][None], x["k1"][None], x["v"][None], None, 0.0, False,
                                                   mask is not None)[0][0]
        sdpa_name = "F._scaled_dot_product_attention (torch 1.13)"

    def diff_textbook(x, mask, scale):
        a1 = maps(x["q1"], x["k1"], mask, scale)
        a2 = maps(x["q2"], x["k2"], mask, scale)
        return (a1 - LAMBDA * a2) @ x["v"]

    def dint(mode):
        def run(x, mask, scale):
            a1 = maps(x["q1"], x["k1"], mask, scale)
            a2 = maps(x["q2"], x["k2"], mask, scale)
            if mode == "global_mean":
                integral = a1.mean(dim=0, keepdim=True).expand_as(a1)
            else:
                g = torch.cumsum(a1, dim=0) / x["counts"]
                if mode == "causal_mean":
                    integral = g
                else:
                    integral = torch.softmax(g if mask is None else g.masked_fill(~mask, float("-inf")), dim=-1)
            return (a1 - LAMBDA * a2 + LAMBDA * integral) @ x["v"]
        return run

    textbook = {
        "softmax": softmax_textbook,
        "diff": diff_textbook,
        "dint_causal_softmax": dint("causal_softmax"),
        "dint_causal_mean": dint("causal_mean"),
        "dint_global_mean": dint("global_mean"),
    }
    return textbook, sdpa, sdpa_name


def blas_libraries():
    """The BLAS / LAPACK shared objects this process has mapped (torch's matmul backend)."""
    found = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                name = os.path.basename(path)
                if ("blas" in name or "mkl" in name or "blis" in name) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def time_call(fn, min_time):
    fn()  # warm-up
    reps, start = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time or reps >= 1000:
            return elapsed / reps


def diffattn_times(names, bench_json_paths, bench_bin, quick):
    """{name: seconds per call} from the JSON, then from running the binary for what is missing."""
    found = {}
    records = bench_json.load(bench_json_paths) if bench_json_paths else []
    for r in records:
        if r.name in names:
            found[r.name] = r.seconds
    missing = [n for n in names if n not in found]
    if missing and bench_bin:
        if not os.path.exists(bench_bin):
            print("bench_torch: %s not found; diffattn times missing for %d cases" % (bench_bin, len(missing)))
            return found
        pattern = "^(%s)(/|$)" % "|".join(missing)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "kernels.json")
            cmd = [bench_bin, "--benchmark_filter=" + pattern, "--benchmark_out=" + out,
                   "--benchmark_out_format=json", "--benchmark_format=console"]
            if quick:
                cmd.append("--quick")
            print("bench_torch: measuring %d diffattn case(s) not in the JSON: %s" % (len(missing), bench_bin))
            subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
            for r in bench_json.load(out):
                if r.name in names:
                    found[r.name] = r.seconds
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench-json", action="append", default=[],
                        help="benchmark JSON of the same run (repeatable), e.g. docs/bench/latest.json")
    parser.add_argument("--bench-bin", default="build/bench/bench/bench_kernels",
                        help="bench_kernels binary, run with a filter for the cases the JSON lacks ('' to never run it)")
    parser.add_argument("--quick", action="store_true", help="N 1024 and 2048, short timings")
    parser.add_argument("--sizes", default="", help="comma-separated N (default 1024,2048,4096; quick 1024,2048)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--min-time", type=float, default=0.0, help="seconds of torch calls per case (default 0.5; quick 0.1)")
    parser.add_argument("--out", default="", help="write the table as JSON here")
    args = parser.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("bench_torch: PyTorch is not importable by %s; install Debian's python3-torch and run with "
              "/usr/bin/python3 (scripts/bench.sh does both)" % sys.executable)
        return 1

    sizes = [int(s) for s in (args.sizes or ("1024,2048" if args.quick else "1024,2048,4096")).split(",") if s]
    thread_counts = [int(t) for t in args.threads.split(",") if t]
    min_time = args.min_time or (0.1 if args.quick else 0.5)
    textbook, sdpa, sdpa_name = torch_functions(torch)

    names = [bench_name(f, n, d, m, t) for (f, d, m, multi) in CASES for n in sizes for t in thread_counts
             if t == 1 or multi]
    ours = diffattn_times(set(names), args.bench_json, args.bench_bin, args.quick)

    print("diffattn vs PyTorch %s on the CPU (float32, one head, S = N); ratio = torch time / diffattn time"
          % torch.__version__)
    print("sdpa: %s" % (sdpa_name or "not available in this torch"))
    torch.ones(64, 64) @ torch.ones(64, 64)  # loads the BLAS
    blas = blas_libraries()
    print("torch BLAS: %s" % (", ".join(sorted(set(blas))) or "none mapped (MKL-DNN / built-in kernels)"))
    if any("/blas/libblas" in b for b in blas):
        print("WARNING: torch runs on netlib's reference BLAS (slow): install libopenblas0-openmp "
              "(scripts/bench.sh does) for a meaningful comparison")
    header = "%-27s %6s %4s %5s %12s %12s %12s %9s %9s" % (
        "case", "N", "d", "thr", "diffattn ms", "textbook ms", "sdpa ms", "textbook/", "sdpa/")
    print(header)
    print("-" * len(header))
    rows = []
    torch.manual_seed(0)
    with torch.inference_mode():
        for (family, d, mask_kind, multi) in CASES:
            dv = d if family == "softmax" else 2 * d
            for n in sizes:
                x = {
                    "q1": torch.randn(n, d), "k1": torch.randn(n, d),
                    "q2": torch.randn(n, d), "k2": torch.randn(n, d),
                    "v": torch.randn(n, dv),
                    "counts": torch.arange(1, n + 1, dtype=torch.float32)[:, None],
                }
                mask = torch.ones(n, n, dtype=torch.bool).tril() if mask_kind == "causal" else None
                scale = 1.0 / math.sqrt(d)
                for threads in thread_counts:
                    if threads > 1 and not multi:
                        continue
                    torch.set_num_threads(threads)
                    t_text = time_call(lambda: textbook[family](x, mask, scale), min_time)
                    t_sdpa = None
                    if family == "softmax" and sdpa is not None:
                        t_sdpa = time_call(lambda: sdpa(x, mask, scale), min_time)
                    ours_s = ours.get(bench_name(family, n, d, mask_kind, threads))
                    row = {"case": "%s %s" % (family, mask_kind), "family": family, "mask": mask_kind, "N": n,
                           "d": d, "threads": threads, "diffattn_s": ours_s, "torch_textbook_s": t_text,
                           "torch_sdpa_s": t_sdpa}
                    rows.append(row)

                    def ms(s):
                        return "%12.3f" % (s * 1e3) if s else "%12s" % "-"

                    def rt(a, b):
                        return "%9.2f" % (a / b) if a and b else "%9s" % "-"

                    print("%-27s %6d %4d %5d %s %s %s %s %s" % (
                        row["case"], n, d, threads, ms(ours_s), ms(t_text), ms(t_sdpa), rt(t_text, ours_s),
                        rt(t_sdpa, ours_s)))
                    sys.stdout.flush()
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "sdpa": sdpa_name, "blas": blas, "rows": rows}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
