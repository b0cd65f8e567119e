// What each weight format costs in accuracy (docs/model.md, "Weight formats"): every model of the
// repository loaded as f32 and as bf16, q8_0 and q4_0, the same tokens through each.
//
//   released-layout goldens (tests/data/checkpoints/*): the golden tokens' logits against the f32
//     load's: max |dl| / max |l| and mean |dl| / mean |l| over every logit, and the share of rows
//     whose argmax agrees; a greedy continuation of 32 tokens from the golden's first 8: the tokens
//     that agree with f32's, up to the first that does not;
//   the trained text model (models/diffllama_tiny_text): the same, and its perplexity on its own
//     training text (tests/data/text/training_text.txt, tokenized with its tokenizer.json), every
//     token after the first of each 129-token window predicted once (the trainer's windows);
//   the retrieval models (models/retrieval/*): the same logit figures on the first episode, and
//     the accuracy of the argmax at every question row of tests/data/retrieval/episodes.json.
// Each model also runs as f32 weights with BF16 products (compute bf16, docs/math.md §7.1, §10.1),
// the row "bf16 products", on the path this CPU takes for Compute::bf16.
//
// Run: bench_weight_accuracy [SOURCE_DIR] (default: the source tree it was built from). Plain
// output, one line per model and format; no timing.
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/generate.hpp"
#include "diffattn/text/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace diffattn;
namespace fs = std::filesystem;

constexpr WeightFormat kFormats[] = {WeightFormat::bf16, WeightFormat::q8_0, WeightFormat::q4_0};

std::vector<Token> golden_tokens(const fs::path& dir) {
    const SafetensorsFile golden(dir / "golden.safetensors");
    const Vector<double> ids = golden.vector<double>("tokens");
    std::vector<Token> tokens;
    for (Index i = 0; i < ids.size(); ++i) tokens.push_back(static_cast<Token>(ids(i)));
    return tokens;
}

/// max |a - b| / max |b|, mean |a - b| / mean |b|, the share of rows whose argmax agrees.
struct LogitFigures {
    double max_relative = 0, mean_relative = 0, argmax_agreement = 0;
};

LogitFigures compare(const RowMatrix<float>& logits, const RowMatrix<float>& reference) {
    const RowMatrix<double> a = logits.cast<double>(), b = reference.cast<double>();
    LogitFigures f;
    f.max_relative = (a - b).cwiseAbs().maxCoeff() / b.cwiseAbs().maxCoeff();
    f.mean_relative = (a - b).cwiseAbs().mean() / b.cwiseAbs().mean();
    Index agree = 0;
    for (Index r = 0; r < a.rows(); ++r) {
        Index x = 0, y = 0;
        a.row(r).maxCoeff(&x);
        b.row(r).maxCoeff(&y);
        agree += x == y ? 1 : 0;
    }
    f.argmax_agreement = static_cast<double>(agree) / static_cast<double>(a.rows());
    return f;
}

/// The logits of every row of `tokens`, without a cache, with the products of `compute`.
RowMatrix<float> logits_of(const DecoderModel<float>& model, const std::vector<Token>& tokens, Compute compute) {
    ForwardState<float> state = model.make_state(static_cast<Index>(tokens.size()));
    state.set_compute(compute);
    return model.forward(tokens, state);
}

/// Greedy tokens of `model` after `prompt`, without a cache (every kind, encoders included).
std::vector<Token> greedy(const DecoderModel<float>& model, std::vector<Token> tokens, Index count,
                          Compute compute = Compute::scalar) {
    std::vector<Token> out;
    for (Index i = 0; i < count; ++i) {
        const RowMatrix<float> logits = logits_of(model, tokens, compute);
        Index best = 0;
        logits.row(logits.rows() - 1).maxCoeff(&best);
        out.push_back(static_cast<Token>(best));
        tokens.push_back(static_cast<Token>(best));
    }
    return out;
}

Index agreeing_prefix(const std::vector<Token>& a, const std::vector<Token>& b) {
    Index n = 0;
    while (n < static_cast<Index>(a.size()) && a[static_cast<std::size_t>(n)] == b[static_cast<std::size_t>(n)]) ++n;
    return n;
}

/// exp(mean negative log-likelihood) of every token after the first of each window of 129.
double perplexity(const DecoderModel<float>& model, const std::vector<Token>& text, Compute compute = Compute::scalar) {
    constexpr Index window = 129;
    double nll = 0;
    Index counted = 0;
    for (Index start = 0; start + 1 < static_cast<Index>(text.size()); start += window - 1) {
        const Index end = std::min<Index>(start + window, static_cast<Index>(text.size()));
        const std::vector<Token> part(text.begin() + start, text.begin() + end);
        const RowMatrix<double> logits = logits_of(model, part, compute).cast<double>();
        for (Index i = 0; i + 1 < static_cast<Index>(part.size()); ++i) {
            const double top = logits.row(i).maxCoeff();
            const double log_sum = top + std::log((logits.row(i).array() - top).exp().sum());
            nll += log_sum - logits(i, part[static_cast<std::size_t>(i + 1)]);
            ++counted;
        }
    }
    return std::exp(nll / static_cast<double>(counted));
}

struct Episodes {
    std::vector<std::vector<Token>> tokens;
    std::vector<std::vector<Index>> score;
    std::vector<std::vector<Token>> targets;
};

Episodes read_episodes(const fs::path& file) {
    std::ifstream in(file);
    const nlohmann::json json = nlohmann::json::parse(in);
    Episodes e;
    for (const nlohmann::json& set : json.at("sets")) {
        for (const nlohmann::json& ep : set.at("episodes")) {
            e.tokens.push_back(ep.at("tokens").get<std::vector<Token>>());
            e.score.push_back(ep.at("score_pos").get<std::vector<Index>>());
            e.targets.push_back(ep.at("targets").get<std::vector<Token>>());
        }
    }
    return e;
}

double retrieval_accuracy(const DecoderModel<float>& model, const Episodes& e, Compute compute = Compute::scalar) {
    Index correct = 0, total = 0;
    for (std::size_t i = 0; i < e.tokens.size(); ++i) {
        const RowMatrix<float> logits = logits_of(model, e.tokens[i], compute);
        for (std::size_t q = 0; q < e.score[i].size(); ++q) {
            Index best = 0;
            logits.row(e.score[i][q]).maxCoeff(&best);
            correct += best == e.targets[i][q] ? 1 : 0;
            ++total;
        }
    }
    return static_cast<double>(correct) / static_cast<double>(total);
}

void report(const fs::path& dir, const std::vector<Token>& tokens, const std::vector<Token>* text,
            const Episodes* episodes) {
    const DecoderModel<float> f32 = DecoderModel<float>::load(dir);
    const RowMatrix<float> reference = f32.logits(tokens);
    const std::vector<Token> prompt(tokens.begin(), tokens.begin() + std::min<std::size_t>(8, tokens.size()));
    const std::vector<Token> f32_greedy = greedy(f32, prompt, 32);
    std::printf("%-36s f32                                                    ", dir.filename().string().c_str());
    if (text) std::printf(" ppl %.4f", perplexity(f32, *text));
    if (episodes) std::printf(" retrieval %.4f", retrieval_accuracy(f32, *episodes));
    std::printf("\n");
    for (WeightFormat format : kFormats) {
        const DecoderModel<float> model = DecoderModel<float>::load(dir, LoadOptions{format});
        const LogitFigures f = compare(model.logits(tokens), reference);
        const Index prefix = agreeing_prefix(greedy(model, prompt, 32), f32_greedy);
        std::printf("%-36s %-5s max %.2e mean %.2e argmax %.3f greedy %2ld/32", dir.filename().string().c_str(),
                    to_string(format), f.max_relative, f.mean_relative, f.argmax_agreement, static_cast<long>(prefix));
        if (text) std::printf(" ppl %.4f", perplexity(model, *text));
        if (episodes) std::printf(" retrieval %.4f", retrieval_accuracy(model, *episodes));
        std::printf("\n");
    }
    // f32 weights, BF16 products.
    const Compute bf16 = Compute::bf16;
    const LogitFigures f = compare(logits_of(f32, tokens, bf16), reference);
    const Index prefix = agreeing_prefix(greedy(f32, prompt, 32, bf16), f32_greedy);
    std::printf("%-36s bf16 products (%s) max %.2e mean %.2e argmax %.3f greedy %2ld/32", dir.filename().string().c_str(),
                to_string(product_path(bf16)), f.max_relative, f.mean_relative, f.argmax_agreement,
                static_cast<long>(prefix));
    if (text) std::printf(" ppl %.4f", perplexity(f32, *text, bf16));
    if (episodes) std::printf(" retrieval %.4f", retrieval_accuracy(f32, *episodes, bf16));
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    const fs::path root = argc > 1 ? fs::path(argv[1]) : fs::path(DIFFATTN_SOURCE_DIR);
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(root / "tests/data/checkpoints")) {
        if (entry.is_directory() && entry.path().filename() != "refused") checkpoints.push_back(entry.path());
    }
    std::sort(checkpoints.begin(), checkpoints.end());
    for (const fs::path& dir : checkpoints) report(dir, golden_tokens(dir), nullptr, nullptr);

    const fs::path text_model = root / "models/diffllama_tiny_text";
    const text::Tokenizer tokenizer = text::Tokenizer::load(text_model);
    std::ifstream in(root / "tests/data/text/training_text.txt", std::ios::binary);
    std::stringstream corpus;
    corpus << in.rdbuf();
    const std::vector<std::int32_t> ids = tokenizer.encode(corpus.str());
    const std::vector<Token> text(ids.begin(), ids.end());
    report(text_model, golden_tokens(text_model), &text, nullptr);

    const Episodes episodes = read_episodes(root / "tests/data/retrieval/episodes.json");
    std::vector<fs::path> retrieval;
    for (const auto& entry : fs::directory_iterator(root / "models/retrieval")) retrieval.push_back(entry.path());
    std::sort(retrieval.begin(), retrieval.end());
    for (const fs::path& dir : retrieval) report(dir, episodes.tokens.front(), nullptr, &episodes);
    return 0;
}
