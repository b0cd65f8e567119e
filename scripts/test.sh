#!/usr/bin/env bash
# Installs the dependencies, then configures, builds and tests diffattn with the `release`
# preset (build/release). Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/build-dir.sh

scripts/install-deps.sh

preset=release
build_dir=build/$preset
jobs=$(nproc 2>/dev/null || echo 2)

clear_foreign_build_dir "$build_dir" test.sh

# DIFFATTN_WARNINGS_AS_ERRORS=ON (as .ci/run sets it): a compiler warning fails the build.
cmake --preset "$preset" -DDIFFATTN_WARNINGS_AS_ERRORS="${DIFFATTN_WARNINGS_AS_ERRORS:-OFF}"
cmake --build --preset "$preset" -j "$jobs"
cd "$build_dir"
ctest --output-on-failure -j "$jobs"
