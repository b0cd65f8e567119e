// The bounds of the half-precision KV caches' accuracy report (half_kv_accuracy.hpp; the full
// report, every episode, is bench_half_kv_accuracy, docs/benchmarks.md "Half-precision KV caches")
// on every causal golden model and every 8th accuracy episode of each retrieval model (each
// episode length, 90 answers a model): every difference is finite and nonzero (the rows were
// rounded), and over all models f16 (11 significant bits) is closer to f32 than bf16 (8 bits): its
// largest relative difference is below bf16's (by about 2^3 in the measurements; the changed
// answers are near ties and not ordered by precision, so they are reported, not checked).
#include "half_kv_accuracy.hpp"

#include <catch2/catch.hpp>

TEST_CASE("half-precision KV caches: logit differences against f32 on the goldens and the retrieval models",
          "[analysis][half_kv][accuracy]") {
    const half_kv_accuracy::Report report =
        half_kv_accuracy::run_report(DIFFATTN_TEST_DATA_DIR, DIFFATTN_MODELS_DIR, 8);
    for (const half_kv_accuracy::Worst* w : {&report.f16, &report.bf16}) {
        CHECK(w->all_finite);
        CHECK(w->smallest > 0);
    }
    CHECK(report.f16.answers > 100);
    CHECK(report.f16.relative < report.bf16.relative);
}
