#!/usr/bin/env bash
# Runs diffattn's benchmark suite and renders its results (docs/benchmarks.md says what each
# figure means):
#   1. installs the Debian packages (scripts/install-deps.sh --bench: the build's, plus compare.py,
#      scipy and matplotlib; python3-torch and libopenblas0-openmp for the PyTorch comparison),
#   2. configures and builds the `bench` preset (build/bench: -O3 -march=native -mtune=generic),
#   3. runs bench_kernels, bench_model and bench_decode with
#      --benchmark_out=build/bench-results/raw/<name>.json, and bench_memory (the long-context DINT
#      peak-memory program),
#   4. merges them into <dir>/latest.json and <dir>/latest.json.xz (tools/bench_json.py; git keeps
#      only the .xz),
#   5. draws <dir>/kernels.svg, GFLOP/s against N per kernel with the GEMM line (tools/bench_chart.py,
#      matplotlib),
#   6. prints the standing goals (tools/bench_summary.py) into <dir>/summary.txt,
#   7. with --compare, compares every benchmark's time with a previous run (Google Benchmark's
#      compare.py) into build/bench-results/compare.txt,
#   8. runs the same math in PyTorch on the CPU side by side (tools/bench_torch.py) into <dir>/torch.txt.
#
# Usage: scripts/bench.sh [--quick] [--filter REGEX] [--out DIR] [--compare JSON] [--no-torch] [--torch]
#                         [--no-memory]
#   --quick          small sizes and short runs (N <= 2048, the memory program at N 16384): checks the
#                    pipeline in a few minutes; writes to build/bench-results unless --out is given
#   --filter REGEX   Google Benchmark --benchmark_filter for the three benchmark programs, e.g.
#                    'softmax|gemm' or '^diff/N:4096'; the memory program runs only if REGEX matches
#                    "memory", the PyTorch comparison only with --torch
#   --out DIR        results directory (default docs/bench; --quick: build/bench-results)
#   --compare JSON   a previous run's merged JSON (plain or .xz, e.g. docs/bench/latest.json.xz, the
#                    committed run: read before this run replaces it) to compare this one with
#   --no-torch       skip the PyTorch comparison (and the python3-torch install)
#   --no-memory      skip the peak-memory program
# Environment: BENCH_JOBS (build parallelism, default 2), BENCH_ARGS (extra flags for every
# benchmark program, e.g. "--benchmark_repetitions=3"), DIFFATTN_SKIP_DEPS=1 (skip the install),
# GBENCH_COMPARE (compare.py, default /usr/share/benchmark/compare.py).
# Timings are never asserted; the exit code reflects only build and run failures.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/build-dir.sh

quick=0
filter=""
out=""
torch=1
torch_forced=0
memory=1
compare=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --filter) filter="${2:?--filter needs a regex}"; shift ;;
    --filter=*) filter="${1#--filter=}" ;;
    --out) out="${2:?--out needs a directory}"; shift ;;
    --out=*) out="${1#--out=}" ;;
    --no-torch) torch=0 ;;
    --torch) torch=1; torch_forced=1 ;;
    --compare) compare="${2:?--compare needs a JSON file}"; shift ;;
    --compare=*) compare="${1#--compare=}" ;;
    --no-memory) memory=0 ;;
    -h|--help) sed -n '2,34p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z "$out" ]]; then
  out=$([[ $quick == 1 ]] && echo build/bench-results || echo docs/bench)
fi
if [[ -n "$filter" && $torch_forced == 0 ]]; then
  torch=0
fi

if [[ -n "$compare" && ! -f "$compare" ]]; then
  echo "bench.sh: --compare $compare: no such file" >&2
  exit 2
fi

# 1. Dependencies: the build's, the benchmark tooling's (--bench), and python3-torch for the
# comparison. Debian's torch does its matrix products through whatever libblas.so.3 the
# alternatives system points to; with only netlib's reference BLAS they run 10-50x slower than
# with OpenBLAS and the comparison means nothing, so the OpenMP build of OpenBLAS comes along (it
# follows torch.set_num_threads, and takes over libblas.so.3 system-wide by its alternatives
# priority).
extra=(--bench)
[[ $torch == 1 ]] && extra+=(python3-torch libopenblas0-openmp)
scripts/install-deps.sh "${extra[@]}"
# Debian's python: matplotlib, scipy and torch are its packages.
python=/usr/bin/python3
[[ -x $python ]] || python=python3
compare_py=${GBENCH_COMPARE:-/usr/share/benchmark/compare.py}

# The baseline is read now: with --compare docs/bench/latest.json.xz this run replaces the file.
results=build/bench-results
mkdir -p "$results"
if [[ -n "$compare" ]]; then
  "$python" tools/bench_json.py gbench -o "$results/compare-baseline.json" "$compare"
fi

# 2. Build (own build directory; a cache made for another checkout is started afresh).
preset=bench
build_dir=build/$preset
clear_foreign_build_dir "$build_dir" bench.sh
cmake --preset "$preset"
cmake --build --preset "$preset" -j "${BENCH_JOBS:-2}" --target bench_kernels bench_model bench_decode bench_memory
bin=$build_dir/bench

# 3. Run. Each program's own JSON goes to build/bench-results/raw; the merged one to $out.
raw=$results/raw
mkdir -p "$raw" "$out"
rm -f "$raw"/*.json
flags=(--benchmark_out_format=json --benchmark_counters_tabular=true)
[[ $quick == 1 ]] && flags+=(--quick)
[[ -n "$filter" ]] && flags+=("--benchmark_filter=$filter")
# shellcheck disable=SC2206
[[ -n "${BENCH_ARGS:-}" ]] && flags+=(${BENCH_ARGS})
for prog in kernels model decode; do
  echo
  echo "== bench_$prog =="
  "$bin/bench_$prog" "${flags[@]}" "--benchmark_out=$raw/$prog.json"
done
if [[ $memory == 1 ]] && { [[ -z "$filter" ]] || grep -Eq -- "$filter" <<< "memory"; }; then
  echo
  echo "== bench_memory =="
  mem_flags=("--json=$raw/memory.json")
  [[ $quick == 1 ]] && mem_flags+=(--quick)
  "$bin/bench_memory" "${mem_flags[@]}"
fi

# 4-6. Merge, chart, summary.
echo
"$python" tools/bench_json.py merge --xz -o "$out/latest.json" "$raw"/*.json
if ! "$python" tools/bench_chart.py "$out/latest.json" -o "$out/kernels.svg"; then
  echo "bench.sh: no chart (no kernel results in this run)"
fi
echo
"$python" tools/bench_summary.py "$out/latest.json" | tee "$out/summary.txt"

# 7. This run against the baseline: compare.py's "benchmarks" mode (time and CPU change per
# benchmark, with its U test where both runs have repetitions), on the entries it can read.
if [[ -n "$compare" ]]; then
  echo
  echo "== compared with $compare (compare.py) =="
  "$python" tools/bench_json.py gbench -o "$results/compare-contender.json" "$out/latest.json"
  "$python" "$compare_py" --no-color benchmarks "$results/compare-baseline.json" \
    "$results/compare-contender.json" | tee "$results/compare.txt"
fi

# 8. PyTorch side by side.
if [[ $torch == 1 ]]; then
  echo "== PyTorch comparison =="
  torch_flags=(--bench-json "$out/latest.json" --bench-bin "$bin/bench_kernels" --out "$out/torch.json")
  [[ $quick == 1 ]] && torch_flags+=(--quick)
  /usr/bin/python3 tools/bench_torch.py "${torch_flags[@]}" | tee "$out/torch.txt" ||
    echo "bench.sh: the PyTorch comparison failed (see above)"
fi
echo
echo "bench.sh: results in $out: latest.json (.xz), kernels.svg, summary.txt$([[ $torch == 1 ]] && echo ", torch.txt")$([[ -n $compare ]] && echo "; $results/compare.txt")"
