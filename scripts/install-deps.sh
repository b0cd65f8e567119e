#!/usr/bin/env bash
# Makes sure the Debian 12 packages diffattn needs to build and test are installed.
#   root:      installs the missing ones with apt-get
#   not root:  prints the apt-get command to run and exits 1
# Arguments: --bench adds the benchmark tooling's packages (BENCH_PACKAGES below; scripts/bench.sh
# passes it); any other argument is an extra package to check and install with the lists
# (scripts/bench.sh passes python3-torch and libopenblas0-openmp for the PyTorch comparison).
# DIFFATTN_SKIP_DEPS=1 skips the check (other distributions, hand-made toolchains).
set -euo pipefail

# The one list of build / test dependencies (Debian 12 "bookworm" package names).
PACKAGES=(
  cmake               # >= 3.21 for CMakePresets.json (bookworm: 3.25)
  ninja-build
  g++
  pkg-config          # the pkg-config consumer test
  libeigen3-dev       # Eigen 3.4
  nlohmann-json3-dev  # io/ headers
  libpcre2-dev        # the tokenizer's regexes (text/ headers, tests/text)
  libdnnl-dev         # oneDNN: the BF16 GEMM yardstick of bench_kernels (optional, found if present)
  catch2              # tests (Catch2 v2)
  libbenchmark-dev    # bench/
  libomp-dev          # OpenMP for clang (g++ brings libgomp itself)
  clang-14            # scripts/test-sanitizers.sh (asan, tsan presets), scripts/fuzz.sh (fuzz preset)
  libclang-rt-14-dev  # clang 14's sanitizer runtimes and libFuzzer
  libopenmpi-dev      # include/diffattn/distributed/ (MPI); optional for the library, used by its tests
  openmpi-bin         # mpirun: the distributed tests, benchmark and mpirun diffattn-forward
)

# The benchmark tooling's (scripts/bench.sh, tools/bench_*.py, docs/benchmarks.md): not needed to
# build or test.
BENCH_PACKAGES=(
  python3             # tools/bench_*.py, run as /usr/bin/python3
  libbenchmark-tools  # Google Benchmark's compare.py (/usr/share/benchmark): bench.sh --compare
  python3-scipy       # compare.py imports scipy.stats (its U test); Debian does not pull it in
  python3-matplotlib  # tools/bench_chart.py draws docs/bench/kernels.svg
)

for arg in "$@"; do
  if [[ "$arg" == --bench ]]; then
    PACKAGES+=("${BENCH_PACKAGES[@]}")
  else
    PACKAGES+=("$arg")
  fi
done

if [[ "${DIFFATTN_SKIP_DEPS:-0}" == 1 ]]; then
  exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps: not a Debian system (no dpkg-query). Install the equivalents of:" >&2
  echo "  ${PACKAGES[*]}" >&2
  echo "then re-run with DIFFATTN_SKIP_DEPS=1." >&2
  exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != installed ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: missing: ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "install-deps: not root; run this, then try again:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
