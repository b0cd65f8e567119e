#!/usr/bin/env bash
# Builds bench_ring with the bench preset (-O3 -march=native) and runs it on 2 ranks, one thread
# each: the single-process kernel and the ring in one run (docs/distributed.md, "Measured").
#   bench/ring/run.sh [bench_ring flags...]     e.g. --n 8192,16384,32768
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks="${RANKS:-2}"
cmake --preset bench >/dev/null
nice cmake --build --preset bench -j2 --target bench_ring
export OMP_NUM_THREADS=1
# Open MPI refuses root unless told; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe --bind-to none -np "$ranks" build/bench/bench/bench_ring "$@"
