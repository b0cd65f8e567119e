#!/usr/bin/env bash
# Builds bench_peer_ggml against a ggml checkout in a scratch folder and runs it: ggml's CPU
# flash attention and diffattn's kernel on the same decode shape, with the streaming-read
# yardstick, in one run (docs/benchmarks.md, "Decode against ggml").
#   bench/peers/ggml/run.sh GGML_DIR [SCRATCH_DIR] [benchmark flags...]
# GGML_DIR: a ggml source checkout (git clone https://github.com/ggml-org/ggml); nothing is
# downloaded here. SCRATCH_DIR (default /tmp/diffattn-peer-ggml) holds the build, outside the
# project. Prints the commit of ggml and of diffattn, then the benchmark table.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ggml_dir="$(cd "${1:?usage: run.sh GGML_DIR [SCRATCH_DIR] [benchmark flags...]}" && pwd)"
scratch="${2:-/tmp/diffattn-peer-ggml}"
shift $(( $# >= 2 ? 2 : 1 ))
cmake -S "$here" -B "$scratch" -G Ninja -DGGML_DIR="$ggml_dir" > "$scratch.configure.log"
cmake --build "$scratch" -j "$(nproc 2>/dev/null || echo 2)" --target bench_peer_ggml > "$scratch.build.log"
echo "ggml $(git -C "$ggml_dir" log -1 --format='%h %cs') ($ggml_dir)"
echo "diffattn $(git -C "$here" log -1 --format='%h %cs')"
"$scratch/bench_peer_ggml" --benchmark_counters_tabular=true "$@"
