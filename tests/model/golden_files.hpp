// Helpers shared by the tests that compare a model with golden files (tests/model: our own format,
// tests/checkpoints: released DiffLlama / Motif checkpoints) and that feed a sequence through a KV
// cache in chunks: reading a golden file, the tolerances, the chunk schedules.
//
// Tolerances of a whole-model forward against float64 golden logits, relative to the logit
// magnitude m = max(1, max |golden logit|):
//   double: 1e-9 m   (the double forward agrees to ~1e-14; anything near 1e-9 is a real bug)
//   float:  64 eps_float m = 7.6e-6 m. A float forward of these models chains two layers of ~10
//           operations (norms, projections, softmax, subln, MLP) plus the final norm and lm_head,
//           each adding a few eps relative to the O(1) residual stream; the largest error seen is
//           ~8 eps m, so 64 eps m leaves room for other compilers and SIMD widths while any formula
//           error (>= 1e-3; a flipped checkpoint convention >= 1e-2) still fails.
#pragma once

#include "model_files.hpp"

#include "diffattn/io/safetensors.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <type_traits>
#include <vector>

namespace model_test {

using namespace diffattn;

inline constexpr double kEpsFloat = std::numeric_limits<float>::epsilon();

/// The prompt and the float64 logits of a golden.safetensors.
struct Golden {
    std::vector<Token> tokens;
    RowMatrix<double> logits;  // [T x V]
};

/// The token ids of F64 tensor `name` of `file` (ids stored as doubles).
inline std::vector<Token> golden_tokens(const SafetensorsFile& file, const std::string& name) {
    const Vector<double> ids = file.vector<double>(name);
    std::vector<Token> tokens;
    for (Index i = 0; i < ids.size(); ++i) tokens.push_back(static_cast<Token>(ids(i)));
    return tokens;
}

inline Golden read_golden(const std::filesystem::path& dir) {
    const SafetensorsFile file(dir / "golden.safetensors");
    return {golden_tokens(file, "tokens"), file.matrix<double>("logits")};
}

/// The golden tolerance of a T forward for logits of magnitude m (the file comment).
template <typename T>
double golden_tolerance(double magnitude) {
    return (std::is_same_v<T, double> ? 1e-9 : 64 * kEpsFloat) * magnitude;
}

inline double max_abs_diff(const RowMatrix<double>& a, const RowMatrix<double>& b) {
    return (a - b).cwiseAbs().maxCoeff();
}

inline double magnitude(const RowMatrix<double>& logits) { return std::max(1.0, logits.cwiseAbs().maxCoeff()); }

/// How a sequence of `total` tokens is cut into calls.
struct Schedule {
    const char* name;
    std::vector<Index> chunks;
};

inline std::vector<Schedule> schedules(Index total) {
    Schedule tokens{"token by token", std::vector<Index>(static_cast<std::size_t>(total), 1)};
    Schedule threes{"chunks of 3", {}};
    for (Index done = 0; done < total; done += 3) threes.chunks.push_back(std::min<Index>(3, total - done));
    Schedule prefill{"prefill + tokens", {total - total / 3}};
    for (Index i = 0; i < total / 3; ++i) prefill.chunks.push_back(1);
    return {{"whole", {total}}, tokens, threes, prefill};
}

/// Logits [T x V] of `tokens` fed through `cache` in calls of `chunks` tokens (one state sized for
/// the largest call).
template <typename T>
RowMatrix<T> cached_logits(const DecoderModel<T>& model, const std::vector<Token>& tokens,
                           const std::vector<Index>& chunks, KvCache<T>& cache, int threads = 1) {
    const Index largest = *std::max_element(chunks.begin(), chunks.end());
    ForwardState<T> state = model.make_state(largest, threads);
    state.set_min_parallel_flops(0);  // `threads` threads even for one-token steps
    RowMatrix<T> logits(static_cast<Index>(tokens.size()), model.config().vocab_size);
    Index done = 0;
    for (Index chunk : chunks) {
        const std::vector<Token> part(tokens.begin() + done, tokens.begin() + done + chunk);
        REQUIRE(cache.length() == done);
        model.forward(part, state, logits.middleRows(done, chunk), &cache);
        done += chunk;
    }
    REQUIRE(done == static_cast<Index>(tokens.size()));
    CHECK(cache.length() == done);
    return logits;
}

template <typename T>
RowMatrix<T> cached_logits(const DecoderModel<T>& model, const std::vector<Token>& tokens,
                           const std::vector<Index>& chunks, int threads = 1) {
    KvCache<T> cache = model.make_cache(static_cast<Index>(tokens.size()));
    return cached_logits(model, tokens, chunks, cache, threads);
}

}  // namespace model_test
