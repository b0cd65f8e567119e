#!/usr/bin/env bash
# Builds and runs the test suite under sanitizers with clang 14 (CI runs this after test.sh):
#   1. preset `asan` (build/asan): the whole suite with AddressSanitizer + UndefinedBehaviorSanitizer
#      (and LeakSanitizer), -fno-sanitize-recover=all: any report fails the test that hit it;
#   2. preset `tsan` (build/tsan): the concurrency test (one model shared by several threads) with
#      ThreadSanitizer, OpenMP off (libgomp / libomp are not TSan-instrumented: false reports).
# The sanitizer options (halt_on_error, detect_leaks, print_stacktrace, ...) are set by the test
# presets in CMakePresets.json, so `ctest --preset asan` by hand behaves the same.
# Usage: scripts/test-sanitizers.sh [asan|tsan]...   (default: both). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/build-dir.sh

scripts/install-deps.sh

presets=("$@")
if [[ ${#presets[@]} -eq 0 ]]; then
  presets=(asan tsan)
fi
jobs=$(nproc 2>/dev/null || echo 2)

for preset in "${presets[@]}"; do
  case "$preset" in
    asan | tsan) ;;
    *) echo "test-sanitizers.sh: unknown preset '$preset' (asan or tsan)" >&2; exit 2 ;;
  esac
  build_dir=build/$preset
  clear_foreign_build_dir "$build_dir" test-sanitizers.sh
  start=$SECONDS
  echo "== test-sanitizers.sh: $preset: configure, build, test"
  cmake --preset "$preset"
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
  echo "== test-sanitizers.sh: $preset passed in $((SECONDS - start)) s"
done
