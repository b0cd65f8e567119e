// Models whose weights are stored as bf16, q8_0 or q4_0 (docs/math.md §10, docs/model.md "Weight
// formats"): DecoderModel::load converts a checkpoint tensor by tensor into exactly the bytes the
// reference codec gives, keeps a BF16 checkpoint's own bits, falls back to f32 (with a warning)
// where a weight's rows are not whole blocks, refuses what a format cannot hold, and a model of
// stored weights decodes from its cache as its full forward computes.
#include "golden_files.hpp"
#include "model_files.hpp"

#include "../error_messages.hpp"

#include "diffattn/model/decoder_model.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace diffattn;
using model_test::TempDir;

namespace {

constexpr WeightFormat kFormats[] = {WeightFormat::bf16, WeightFormat::q8_0, WeightFormat::q4_0};

/// Every LinearWeight of the two models holds the same bytes (the same formats).
template <typename T>
void check_same_weights(const DecoderModel<T>& a, const DecoderModel<T>& b) {
    const auto same = [](const LinearWeight<T>& x, const LinearWeight<T>& y) {
        REQUIRE(x.format() == y.format());
        REQUIRE(x.rows() == y.rows());
        CHECK(std::memcmp(x.stored_row(0), y.stored_row(0), static_cast<std::size_t>(x.stored_bytes())) == 0);
    };
    same(a.embed_tokens, b.embed_tokens);
    if (!a.config().tie_word_embeddings) same(a.lm_head, b.lm_head);
    for (std::size_t i = 0; i < a.layers.size(); ++i) {
        std::vector<const LinearWeight<T>*> xs, ys;
        a.layers[i].self_attn.weights().for_each_projection(a.layers[i].self_attn.config(), [&](const auto& w) { xs.push_back(&w); });
        a.layers[i].mlp.for_each_projection([&](const auto& w) { xs.push_back(&w); });
        b.layers[i].self_attn.weights().for_each_projection(b.layers[i].self_attn.config(), [&](const auto& w) { ys.push_back(&w); });
        b.layers[i].mlp.for_each_projection([&](const auto& w) { ys.push_back(&w); });
        REQUIRE(xs.size() == ys.size());
        for (std::size_t j = 0; j < xs.size(); ++j) same(*xs[j], *ys[j]);
    }
}

}  // namespace

TEST_CASE("a checkpoint loads into each weight format as the codec encodes it", "[model][weights]") {
    for (AttentionKind kind : {AttentionKind::diff, AttentionKind::diff_v2, AttentionKind::softmax}) {
        ModelConfig config = test::small_config(kind);
        config.hidden_size = 64;  // rows of 64 weights: whole blocks; SwiGLU 48 and diff's 48-wide heads are not
        config.tie_word_embeddings = kind == AttentionKind::softmax;
        DecoderModel<float> f32 = DecoderModel<float>::seeded(config, 21);
        TempDir dir;
        model_test::write_model_dir(dir.path(), config, model_test::tensors_of(f32));
        const std::vector<Token> tokens = {1, 5, 9, 2, 33, 7, 0, 63};
        for (WeightFormat format : kFormats) {
            INFO(to_string(kind) << " as " << to_string(format));
            std::vector<std::string> warnings;
            const DecoderModel<float> loaded = DecoderModel<float>::load(dir.path(), LoadOptions{format}, &warnings);
            CHECK(loaded.weight_format() == format);
            const DecoderModel<float> seeded = DecoderModel<float>::seeded(config, 21, format);
            check_same_weights(loaded, seeded);
            CHECK(loaded.logits(tokens) == seeded.logits(tokens));
            // The output head under q4_0 is q8_0; rows that are not whole blocks stay f32, named.
            const LinearWeight<float>& head = config.tie_word_embeddings ? loaded.embed_tokens : loaded.lm_head;
            CHECK(head.format() == (format == WeightFormat::q4_0 ? WeightFormat::q8_0 : format));
            const WeightFormat down = loaded.layers[0].mlp.down_proj.format();
            CHECK(down == (format == WeightFormat::bf16 ? WeightFormat::bf16 : WeightFormat::f32));
            const bool warned = std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
                return w.find("model.layers.0.mlp.down_proj.weight") != std::string::npos &&
                       w.find("48 weights are not whole 32-weight blocks") != std::string::npos;
            });
            CHECK(warned == is_block_format(format));
            CHECK(loaded.stored_bytes() < f32.stored_bytes());
        }
        // The default stays f32: the same weights as the seeded model.
        const DecoderModel<float> plain = DecoderModel<float>::load(dir.path());
        CHECK(plain.weight_format() == WeightFormat::f32);
        CHECK(plain.logits(tokens) == f32.logits(tokens));
    }
}

TEST_CASE("a BF16 checkpoint loaded as bf16 keeps its bits, and halves-paired rows go where f32's go",
          "[model][weights]") {
    for (const char* name : {"motif_gqa_bf16_sharded", "diffllama_gqa_bf16_tied_sharded"}) {
        INFO(name);
        const std::string dir = std::string(DIFFATTN_TEST_DATA_DIR) + "/checkpoints/" + name;
        const DecoderModel<float> f32 = DecoderModel<float>::load(dir);
        const DecoderModel<float> bf16 = DecoderModel<float>::load(dir, LoadOptions{WeightFormat::bf16});
        // Every BF16 value widens to float exactly and is kept as itself: the same weights, in
        // the same rows (DiffLlama's halves pairing reorders them at load).
        const auto same = [](const LinearWeight<float>& stored, const LinearWeight<float>& dense) {
            REQUIRE(stored.format() == WeightFormat::bf16);
            CHECK(stored.decoded() == RowMatrix<float>(dense.dense()));
        };
        same(bf16.embed_tokens, f32.embed_tokens);
        for (std::size_t i = 0; i < f32.layers.size(); ++i) {
            const auto& a = bf16.layers[i].self_attn.weights();
            const auto& b = f32.layers[i].self_attn.weights();
            same(a.q_proj, b.q_proj);
            same(a.k_proj, b.k_proj);
            same(a.v_proj, b.v_proj);
            same(a.out_proj, b.out_proj);
            same(bf16.layers[i].mlp.down_proj, f32.layers[i].mlp.down_proj);
        }
        // ... so the logits differ only by the order of the sums: within the float golden tolerance.
        const model_test::Golden golden = model_test::read_golden(dir);
        const RowMatrix<double> expected = f32.logits(golden.tokens).cast<double>();
        CHECK(model_test::max_abs_diff(bf16.logits(golden.tokens).cast<double>(), expected) <=
              model_test::golden_tolerance<float>(model_test::magnitude(expected)));
        CHECK(bf16.stored_bytes() < 0.6 * f32.stored_bytes());
    }
}

namespace {
// `dense` (an f32 model of the same checkpoint) with every stored weight of `stored` decoded into it.
void decode_weights_into(DecoderModel<float>& dense, DecoderModel<float>& stored) {
    ParameterList<float> to = dense.parameters();
    ParameterList<float> from = stored.parameters();
    REQUIRE(to.size() == from.size());
    for (std::size_t i = 0; i < to.size(); ++i) {
        REQUIRE(to.items()[i].slices.size() == from.items()[i].slices.size());
        for (std::size_t s = 0; s < to.items()[i].slices.size(); ++s) {
            const ParameterSlice<float>& source = from.items()[i].slices[s];
            if (source.stored == nullptr) continue;
            RowMatrix<float> rows(source.rows, source.cols);
            source.stored->decode_rows(source.first_row, source.rows, rows);
            to.items()[i].slices[s].map() = rows;
        }
    }
}
}  // namespace

TEST_CASE("released checkpoints in each weight format compute as f32 on their decoded weights",
          "[model][weights]") {
    // Exactness: a model of stored weights multiplies the weights its format decodes to, so its
    // logits are those of the f32 model holding those weights, within float rounding. Closeness
    // to the checkpoint's own f32 logits is only a sanity bound (docs/model.md, "Weight formats",
    // measures the accuracy): these are small random models, where q4_0's step of max|w| / 8 per
    // 32 weights compounds through the layers to differences of the logits' own order (0.6 m on
    // the GDA golden with r 2), so q4_0 is held to m and the finer formats to 0.1 m.
    for (const std::filesystem::path& dir : model_test::checkpoint_golden_dirs()) {
        const model_test::Golden golden = model_test::read_golden(dir);
        const DecoderModel<float> f32 = DecoderModel<float>::load(dir);
        const RowMatrix<double> reference = f32.logits(golden.tokens).cast<double>();
        const double m = model_test::magnitude(reference);
        for (WeightFormat format : kFormats) {
            INFO(dir.filename().string() << " as " << to_string(format));
            DecoderModel<float> model = DecoderModel<float>::load(dir, LoadOptions{format});
            const RowMatrix<double> logits = model.logits(golden.tokens).cast<double>();
            DecoderModel<float> decoded = DecoderModel<float>::load(dir);
            decode_weights_into(decoded, model);
            const RowMatrix<double> expected = decoded.logits(golden.tokens).cast<double>();
            CHECK(model_test::max_abs_diff(logits, expected) <=
                  model_test::golden_tolerance<float>(model_test::magnitude(expected)));
            const double difference = model_test::max_abs_diff(logits, reference);
            std::printf("%-34s %-5s max |logit - f32 logit| = %.3g (m %.3g)\n", dir.filename().string().c_str(),
                        to_string(format), difference, m);
            CHECK(difference < (format == WeightFormat::q4_0 ? 1.0 : 0.1) * m);
            CHECK(difference > 0);  // the format was applied
        }
    }
}

TEST_CASE("a BF16 checkpoint loaded as bf16 holds its weights and little more", "[model][weights][memory]") {
    if (!model_test::reset_peak_rss()) {
        WARN("skipped: the peak resident set size cannot be reset here (/proc/self/clear_refs)");
        return;
    }
    // A tied model of no layers: embed_tokens [32768, 1024] in BF16, 64 MiB, its bits copied as
    // they are. The copy hands back the file's pages piece by piece: holding the whole tensor's
    // mapped pages as well would double the peak.
    ModelConfig config = model_test::embedding_only_config(32768);
    model_test::TempDir dir;
    write_model_config(dir.path() / "config.json", config);
    model_test::write_sparse_file(dir.path() / "model.safetensors",
                                  {{"model.embed_tokens.weight", "BF16", {32768, 1024}}, {"model.norm.weight", "BF16", {1024}}});
    REQUIRE(model_test::reset_peak_rss());
    const long long before = model_test::status_bytes("VmRSS");
    const DecoderModel<float> model = DecoderModel<float>::load(dir.path(), LoadOptions{WeightFormat::bf16});
    const long double grown = static_cast<long double>(model_test::status_bytes("VmHWM") - before);
    const long double stored = static_cast<long double>(model.stored_bytes());
    INFO("peak resident set grew by " << grown / 1048576 << " MiB; the model stores " << stored / 1048576 << " MiB");
    CHECK(stored >= 64 * 1048576.0L);
    CHECK(grown < stored + 16 * 1048576.0L);
}

TEST_CASE("a weight a block format cannot hold is refused at load, naming it", "[model][weights]") {
    ModelConfig config = test::small_config(AttentionKind::diff);
    config.hidden_size = 64;
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 4);
    model_test::TensorSet tensors = model_test::tensors_of(model);
    tensors.data["model.layers.1.self_attn.k_proj.weight"][64 * 3 + 10] = std::numeric_limits<float>::quiet_NaN();
    TempDir dir;
    model_test::write_model_dir(dir.path(), config, tensors);
    CHECK_NOTHROW(DecoderModel<float>::load(dir.path()));  // f32 and bf16 keep a NaN as it is
    CHECK_NOTHROW(DecoderModel<float>::load(dir.path(), LoadOptions{WeightFormat::bf16}));
    CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path(), LoadOptions{WeightFormat::q8_0}), "model.safetensors",
                "tensor \"model.layers.1.self_attn.k_proj.weight\"", "weight [3, 10] = nan cannot be stored as q8_0");
}

TEMPLATE_TEST_CASE("a model of stored weights decodes from its cache as its full forward computes", "[model][weights]",
                   float, double) {
    for (AttentionKind kind : {AttentionKind::dint, AttentionKind::diff_v2}) {
        ModelConfig config = test::small_config(kind);
        config.hidden_size = 64;
        for (WeightFormat format : kFormats) {
            INFO(to_string(kind) << " as " << to_string(format));
            const DecoderModel<TestType> model = DecoderModel<TestType>::seeded(config, 8, format);
            std::vector<Token> tokens;
            for (Index i = 0; i < 21; ++i) tokens.push_back(static_cast<Token>(i * 7 % 64));
            const RowMatrix<TestType> full = model.logits(tokens);  // 21 rows: the panels' path
            const double m = std::max(1.0, static_cast<double>(full.cwiseAbs().maxCoeff()));
            const double tolerance = (std::is_same_v<TestType, float> ? 64 * model_test::kEpsFloat : 1e-12) * m;
            for (const model_test::Schedule& schedule : model_test::schedules(21)) {
                INFO(schedule.name);
                const RowMatrix<TestType> cached = model_test::cached_logits(model, tokens, schedule.chunks, 2);
                CHECK((cached - full).cwiseAbs().maxCoeff() <= tolerance);
            }
        }
    }
}
