// Decode steps of whole models compiled for the build machine's vector ISA (diffattn::native, as the
// examples and benchmarks are): with AVX-512 a step's key dots read the KV cache's blocks of 16 keys
// in registers (kernels/few_rows_simd.hpp), a path the portable suite (test_model) never compiles.
// Every cached kind, an f32 cache, 1 and 2 threads, a context past two key blocks and ending inside
// a third. Self-contained: it links no test support library, whose portable instances of the model
// would be other definitions of the same inline functions.
//
// Tolerance, test_kv_cache's float criterion: with e_full = max |full float - full double| (the
// plain float forward's error) and m = max(1, max |logit|), max |steps - full double| <= 2 e_full +
// 16 eps_float m. Half-precision caches have no exact model-level reference in float (test_kv_cache:
// the paths' keys differ by ~eps_float and now and then round to neighbouring half values); their
// blocked AVX-512 loops are checked on exactly rounded keys in few_rows_products_native.cpp, and
// their model-level decode in double by test_kv_cache.
#include "small_configs.hpp"

#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <vector>

using namespace diffattn;

namespace {

/// Logits of `tokens` fed to a fresh cache: the first `prompt` in one call, then one at a time.
RowMatrix<float> stepped_logits(const DecoderModel<float>& model, const std::vector<Token>& tokens, Index prompt,
                                int threads) {
    const auto n = static_cast<Index>(tokens.size());
    KvCache<float> cache = model.make_cache(n);
    ForwardState<float> state = model.make_state(n, threads);
    RowMatrix<float> out(n, model.config().vocab_size);
    const std::vector<Token> first(tokens.begin(), tokens.begin() + prompt);
    out.topRows(prompt) = model.forward(first, state, &cache);
    for (Index i = prompt; i < n; ++i) {
        const std::vector<Token> one{tokens[static_cast<std::size_t>(i)]};
        out.row(i) = model.forward(one, state, &cache);
    }
    return out;
}

}  // namespace

TEST_CASE("decode steps over a KV cache's blocks of keys match the full forward, native build",
          "[model][kv_cache][native]") {
    const double eps = std::numeric_limits<float>::epsilon();
    for (const test::CachedKind& kind : test::kCachedKinds) {
        ModelConfig config = test::small_config(kind.kind, kind.integral);
        const DecoderModel<double> model_d = DecoderModel<double>::seeded(config, 7);
        const DecoderModel<float> model_f = DecoderModel<float>::seeded(config, 7);
        std::vector<Token> tokens;
        for (Index i = 0; i < 41; ++i) tokens.push_back(static_cast<Token>((37 * i + 11) % config.vocab_size));
        const RowMatrix<double> full_d = model_d.logits(tokens);
        const double m = std::max(1.0, full_d.cwiseAbs().maxCoeff());
        const double e_full = (model_f.logits(tokens).cast<double>() - full_d).cwiseAbs().maxCoeff();
        const double bound = 2 * e_full + 16 * eps * m;
        for (int threads : {1, 2}) {
            INFO(to_string(kind.kind) << " " << to_string(kind.integral) << ", " << threads << " threads");
            const RowMatrix<double> steps = stepped_logits(model_f, tokens, 11, threads).cast<double>();
            CHECK((steps - full_d).cwiseAbs().maxCoeff() <= bound);
        }
    }
}
