// Quantized checkpoints (docs/safetensors.md, "Quantized weights"): write_quantized_checkpoint
// writes a directory that DecoderModel::load reads as the same model a load of the original in
// that format gives, bit for bit, sharded or not; what it refuses; and the reader's checks of
// block tensors.
#include "model_files.hpp"

#include "../error_messages.hpp"

#include "diffattn/io/safetensors_stream_writer.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/quantized_checkpoint.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

using namespace diffattn;
using model_test::TempDir;

namespace {

ModelConfig quantizable_config(AttentionKind kind, bool tied) {
    ModelConfig config = test::small_config(kind);
    config.hidden_size = 64;
    config.tie_word_embeddings = tied;
    return config;
}

/// A seeded f32 checkpoint of `config` in dir, with a tokenizer-like file beside it.
DecoderModel<float> write_checkpoint(const std::filesystem::path& dir, const ModelConfig& config) {
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 17);
    model_test::write_model_dir(dir, config, model_test::tensors_of(model));
    std::ofstream(dir / "generation_config.json") << "{\"eos_token_id\": 3}\n";
    return model;
}

}  // namespace

TEST_CASE("a quantized checkpoint loads as the original does in its format", "[model][weights]") {
    for (WeightFormat format : {WeightFormat::q8_0, WeightFormat::q4_0}) {
        for (bool tied : {false, true}) {
            INFO(to_string(format) << (tied ? ", tied" : ", untied"));
            const ModelConfig config = quantizable_config(AttentionKind::dint, tied);
            TempDir work;
            const std::filesystem::path in = work.path() / "in", out = work.path() / "out";
            std::filesystem::create_directories(in);
            write_checkpoint(in, config);
            QuantizeOptions options;
            options.shard_bytes = 20000;  // several shards, with an index
            std::vector<std::string> warnings;
            const QuantizeReport report = write_quantized_checkpoint(in, out, format, options, &warnings);
            CHECK(std::filesystem::exists(out / "model.safetensors.index.json"));
            CHECK(std::filesystem::exists(out / "generation_config.json"));
            CHECK(std::filesystem::exists(out / "config.json"));
            CHECK_FALSE(std::filesystem::exists(out / "model.safetensors"));
            CHECK(report.output_bytes < 0.45 * report.input_bytes);
            CHECK_FALSE(warnings.empty());  // SwiGLU's 48-wide down projection stays F32

            const DecoderModel<float> original = DecoderModel<float>::load(in, LoadOptions{format});
            const DecoderModel<float> quantized = DecoderModel<float>::load(out);  // its format, from the files
            CHECK(quantized.weight_format() == format);
            CHECK(quantized.stored_bytes() == original.stored_bytes());
            const std::vector<Token> tokens = {2, 9, 4, 60, 33, 1};
            CHECK(quantized.logits(tokens) == original.logits(tokens));
            const LinearWeight<float>& head = tied ? quantized.embed_tokens : quantized.lm_head;
            CHECK(head.format() == WeightFormat::q8_0);
            CHECK(std::memcmp(quantized.layers[1].self_attn.weights().q_proj.stored_row(0),
                              original.layers[1].self_attn.weights().q_proj.stored_row(0),
                              static_cast<std::size_t>(original.layers[1].self_attn.weights().q_proj.stored_bytes())) == 0);

            // As f32 its weights are the blocks' decoded weights; as another block format it is refused.
            const DecoderModel<float> widened = DecoderModel<float>::load(out, LoadOptions{WeightFormat::f32});
            CHECK(widened.layers[0].mlp.gate_proj.dense() == original.layers[0].mlp.gate_proj.decoded());
            const WeightFormat other = format == WeightFormat::q8_0 ? WeightFormat::q4_0 : WeightFormat::q8_0;
            CHECK_ERROR(OptionError, DecoderModel<float>::load(out, LoadOptions{other}), "quantized as",
                        to_string(format), "would quantize them twice");
        }
    }
}

TEST_CASE("diffattn-quantize refuses what it cannot write, and leaves nothing behind", "[model][weights]") {
    const ModelConfig config = quantizable_config(AttentionKind::diff, false);
    TempDir work;
    const std::filesystem::path in = work.path() / "in", out = work.path() / "out";
    std::filesystem::create_directories(in);
    DecoderModel<float> model = write_checkpoint(in, config);
    CHECK_ERROR(OptionError, write_quantized_checkpoint(in, out, WeightFormat::bf16), "q8_0 or q4_0");
    CHECK_ERROR(FileError, write_quantized_checkpoint(in, in / "q", WeightFormat::q8_0), "inside the model directory");
    std::filesystem::create_directories(out);
    CHECK_ERROR(FileError, write_quantized_checkpoint(in, out, WeightFormat::q8_0), "already exists");
    std::filesystem::remove(out);
    write_quantized_checkpoint(in, out, WeightFormat::q8_0);
    CHECK_ERROR(FileError, write_quantized_checkpoint(out, work.path() / "again", WeightFormat::q4_0),
                "already quantized");

    // A NaN weight: the pass stops naming it, and the output directory is removed.
    model_test::TensorSet tensors = model_test::tensors_of(model);
    tensors.data["model.layers.0.mlp.up_proj.weight"][64 * 5 + 2] = std::numeric_limits<float>::quiet_NaN();
    const std::filesystem::path bad = work.path() / "bad", bad_out = work.path() / "bad_out";
    std::filesystem::create_directories(bad);
    model_test::write_model_dir(bad, config, tensors);
    CHECK_ERROR(FileError, write_quantized_checkpoint(bad, bad_out, WeightFormat::q4_0),
                "tensor \"model.layers.0.mlp.up_proj.weight\"", "weight [5, 2] = nan cannot be stored as q4_0");
    CHECK_FALSE(std::filesystem::exists(bad_out));
}

TEST_CASE("block tensors must hold the weights their model expects", "[model][weights]") {
    TempDir work;
    const auto file = [&](const std::string& name, std::vector<Index> shape, bool quantized) {
        std::vector<StreamedTensor> tensors(1);
        tensors[0].name = "w";
        tensors[0].dtype = SafetensorsDtype::u8;
        tensors[0].shape = shape;
        Index bytes = 1;
        for (Index d : shape) bytes *= d;
        tensors[0].write = [bytes](TensorByteSink& sink) {
            const std::vector<unsigned char> zeros(static_cast<std::size_t>(bytes));
            sink.write(zeros.data(), zeros.size());
        };
        const std::filesystem::path path = work.path() / name;
        std::map<std::string, std::string> metadata;
        if (quantized) metadata[kQuantizedWeightsKey] = "q8_0";
        write_safetensors_streamed(path, tensors, metadata);
        return path;
    };
    const SafetensorsFile blocks(file("blocks.safetensors", {4, 2, 34}, true));
    CHECK(blocks.info("w").blocks == WeightFormat::q8_0);
    CHECK(blocks.info("w").weight_shape() == std::vector<Index>{4, 64});
    CHECK_NOTHROW(blocks.require_tensor("w", {4, 64}));
    CHECK_ERROR(FileError, blocks.require_tensor("w", {4, 96}), "tensor \"w\" has shape [4, 2, 34]",
                "(q8_0 blocks of weights [4, 64])", "but shape [4, 96] is expected");
    RowMatrix<float> decoded(4, 64);
    blocks.read_into<float>("w", {4, 64}, decoded.data());
    CHECK((decoded.array() == 0).all());
    CHECK_ERROR(FileError, SafetensorsFile(file("plain.safetensors", {4, 2, 34}, false)), "dtype \"U8\"",
                "quantized checkpoint", kQuantizedWeightsKey);
    CHECK_ERROR(FileError, SafetensorsFile(file("odd.safetensors", {4, 2, 33}, true)), "U8 shape [4, 2, 33]",
                "[rows, blocks, 34] (q8_0 blocks) or [rows, blocks, 18] (q4_0 blocks)");
    CHECK_ERROR(FileError, SafetensorsFile(file("flat.safetensors", {4, 68}, true)), "U8 shape [4, 68]");
}
