#!/usr/bin/env bash
# Installs the dependencies, builds the examples (release preset) and runs the demo.
# Arguments are passed through to the demo program.
set -euo pipefail

DEMO_TARGET=diffattn-forward    # the model demo (examples/diffattn_forward.cpp); diffattn-kernel-demo runs the kernels alone

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/build-dir.sh

scripts/install-deps.sh >&2

preset=release
build_dir=build/$preset
clear_foreign_build_dir "$build_dir" demo.sh

# Build output goes to stderr so that stdout is only the demo's own output.
cmake --preset "$preset" >&2
cmake --build --preset "$preset" -j "$(nproc 2>/dev/null || echo 2)" --target diffattn-examples >&2

exec "$build_dir/examples/$DEMO_TARGET" "$@"
