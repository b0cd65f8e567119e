#!/usr/bin/env bash
# The retrieval report (issue 19, docs/retrieval.md): measures the shipped retrieval models
# (models/retrieval/<kind>/) with diffattn-analyze and draws the README's pictures and tables.
#   1. installs the dependencies (and python3-numpy, python3-matplotlib for the pictures);
#   2. builds diffattn-analyze (release preset);
#   3. runs tools/retrieval_report.py: episodes (seed 1901) -> diffattn-analyze on every model ->
#      docs/retrieval/{tables.md, figures.json, question_rows.png, maps_<kind>.png,
#      heads_<kind>.png, depth.png, analyze_<kind>.txt}; the C++ program's full JSON output stays
#      in build/retrieval-report/.
# About 5 minutes on one core, the build apart. Arguments are passed to tools/retrieval_report.py
# (--threads T, --draw-only).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/build-dir.sh

scripts/install-deps.sh python3 python3-numpy python3-matplotlib

preset=release
build_dir=build/$preset
clear_foreign_build_dir "$build_dir" retrieval-report.sh
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$(nproc 2>/dev/null || echo 2)" --target diffattn-analyze

/usr/bin/python3 tools/retrieval_report.py --analyze "$build_dir/examples/diffattn-analyze" "$@"
