#!/usr/bin/env bash
# Builds one libFuzzer target (the `fuzz` preset: clang 14, ASan + UBSan, build/fuzz) and runs it.
#
#   scripts/fuzz.sh TARGET [SECONDS]     TARGET: safetensors | config_json | kernels | tokenizer
#                                        (SECONDS: 600)
#
# The fuzzer runs on a scratch copy of the seed corpus, build/fuzz-corpus/TARGET/ (what it adds
# stays there, so fuzz/corpus/ does not grow with every run); crashing inputs are written to
# build/fuzz-artifacts/TARGET/, the log to build/fuzz-artifacts/TARGET.log. One process, one core.
# Environment: FUZZ_ARGS (extra libFuzzer flags), FUZZ_BUILD_JOBS (build parallelism, default 2).
# Exits with libFuzzer's status: 0 when nothing was found. docs/fuzzing.md has the details.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/build-dir.sh

usage() {
  echo "usage: scripts/fuzz.sh safetensors|config_json|kernels|tokenizer [SECONDS]" >&2
  exit 2
}
[[ $# -ge 1 && $# -le 2 ]] || usage
target=$1
seconds=${2:-600}
[[ "$seconds" =~ ^[0-9]+$ ]] || usage
# -max_len: a safetensors seed is up to ~38 KB (a whole model file), a tokenizer seed up to ~34 KB (a
# tokenizer.json); configs and kernel headers are small.
case "$target" in
  safetensors | tokenizer) max_len=65536 ;;
  config_json) max_len=4096 ;;
  kernels) max_len=4096 ;;
  *) usage ;;
esac

scripts/install-deps.sh

preset=fuzz
build_dir=build/$preset
# As scripts/test.sh: a cache made for another source directory cannot be reused.
clear_foreign_build_dir "$build_dir" fuzz.sh
cmake --preset "$preset"
cmake --build --preset "$preset" --target "fuzz_$target" -j "${FUZZ_BUILD_JOBS:-2}"

corpus=build/fuzz-corpus/$target
artifacts=build/fuzz-artifacts/$target
log=build/fuzz-artifacts/$target.log
mkdir -p "$corpus" "$artifacts"
for seed in fuzz/corpus/"$target"/*; do   # seeds join the scratch corpus; earlier finds stay
  [[ -e "$corpus/$(basename "$seed")" ]] || cp "$seed" "$corpus/"
done

# A finding is an abort (harness), a sanitizer report, a timeout or a single allocation over
# -malloc_limit_mb (the "huge allocation" check). UBSan stops at the first report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
started=$SECONDS
# shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
"$build_dir/fuzz/fuzz_$target" -max_total_time="$seconds" -max_len="$max_len" -timeout=30 \
  -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="$artifacts/" \
  ${FUZZ_ARGS:-} "$corpus" >"$log" 2>&1 || status=$?
elapsed=$((SECONDS - started))
tail -n 25 "$log"
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
echo "fuzz.sh: $target: ${execs:-?} executions in ${elapsed} s; corpus $corpus ($(ls "$corpus" | wc -l) inputs);" \
     "findings in $artifacts/ ($(ls "$artifacts" | wc -l)); log $log; exit status $status"
exit "$status"
