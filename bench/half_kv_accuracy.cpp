// What a half-precision KV cache costs in accuracy (docs/benchmarks.md, "Half-precision KV
// caches"): the report of tests/analysis/half_kv_accuracy.hpp over every causal golden model and
// every accuracy episode of the trained retrieval models; test_analysis "[half_kv]" holds its
// bounds on a subset.
//
// Run: bench_half_kv_accuracy [SOURCE_DIR] (default: the source tree it was built from). Plain
// output, one line per model and precision; no timing.
#include "../tests/analysis/half_kv_accuracy.hpp"

#include <filesystem>

int main(int argc, char** argv) {
    const std::filesystem::path root = argc > 1 ? std::filesystem::path(argv[1]) : std::filesystem::path(DIFFATTN_SOURCE_DIR);
    const half_kv_accuracy::Report report = half_kv_accuracy::run_report(root / "tests/data", root / "models", 1);
    return report.f16.relative < report.bf16.relative ? 0 : 1;
}
