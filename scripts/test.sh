#!/usr/bin/env bash
# Installs the dependencies, then configures, builds and tests diffattn with the `release`
# preset (build/release). Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh

preset=release
build_dir=build/$preset
jobs=$(nproc 2>/dev/null || echo 2)

# A build directory copied or moved from another checkout cannot be reused (CMake refuses a
# cache made for another source directory): start it afresh.
if [[ -f "$build_dir/CMakeCache.txt" ]]; then
  cached_src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build_dir/CMakeCache.txt")
  if [[ "$cached_src" != "$(pwd -P)" && "$cached_src" != "$(pwd)" ]]; then
    echo "test.sh: $build_dir was configured for $cached_src; removing it"
    rm -rf "$build_dir"
  fi
fi

cmake --preset "$preset"
cmake --build --preset "$preset" -j "$jobs"
cd "$build_dir"
ctest --output-on-failure -j "$jobs"
