// A quantized checkpoint (docs/safetensors.md, "Quantized weights"): a model directory whose 2-D
// weights are stored as q8_0 or q4_0 blocks, written in one streaming pass from a checkpoint of
// float tensors (diffattn-quantize), and loaded by DecoderModel::load without the originals.
//
// The output directory holds config.json and the other small files of the input (tokenizer,
// generation config) copied unchanged, and the weights as safetensors shards: model.safetensors,
// or model-0000i-of-0000n.safetensors with model.safetensors.index.json. Every weight the model
// stores as a LinearWeight takes stored_format(format, its inputs, output head): U8 tensors
// [rows, blocks, 34 or 18] of llama.cpp's blocks, or its original bytes where it stays f32 (rows
// not whole blocks) or is not such a weight (norms, lambda vectors, Shared DIFF factors). Every
// shard's __metadata__ records the format (kQuantizedWeightsKey).
//
// Memory: the input is mapped; each tensor is converted a few MB at a time and written out, its
// pages handed back, so the pass holds a few MB besides the page cache, whatever the model's size.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_blocks.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/io/replace_file.hpp"
#include "diffattn/io/safetensors_checkpoint.hpp"
#include "diffattn/io/safetensors_header.hpp"
#include "diffattn/io/safetensors_stream_writer.hpp"
#include "diffattn/layers/checkpoint_family.hpp"
#include "diffattn/model/checkpoint_config.hpp"
#include "diffattn/model/checkpoint_weights.hpp"
#include "diffattn/model/decoder_model.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

namespace diffattn {

struct QuantizeOptions {
    /// Most bytes of one output shard (a tensor larger than this gets a shard of its own).
    std::uint64_t shard_bytes = std::uint64_t(2) << 30;
};

/// What write_quantized_checkpoint wrote.
struct QuantizeReport {
    std::vector<std::filesystem::path> files;  ///< every file written, in order
    double input_bytes = 0;                    ///< bytes of the input's tensors
    double output_bytes = 0;                   ///< bytes of the output's tensors
};

namespace detail {

/// Files of a model directory that the output takes unchanged: every regular file but the weights
/// (safetensors files, their index, other weight files by their extension).
inline bool copied_with_checkpoint(const std::filesystem::path& file) {
    const std::string name = file.filename().string();
    for (const char* extension : {".safetensors", ".safetensors.index.json", ".bin", ".pt", ".pth", ".gguf", ".ckpt",
                                  ".h5", ".msgpack", ".npz", ".onnx"}) {
        if (ends_with(name, extension)) return false;
    }
    return !name.empty() && name.front() != '.';
}

/// Copies `from` to `to` (a new file: FileError if it exists), replacing nothing.
inline void copy_new_file(const std::filesystem::path& from, const std::filesystem::path& to) {
    std::ifstream in(from, std::ios::binary);
    require<FileError>(in.good(), "diffattn-quantize: cannot read \"", from.string(), "\"");
    ReplacingFile out(to, "diffattn-quantize");
    char buffer[1 << 16];
    while (in) {
        in.read(buffer, sizeof buffer);
        if (in.gcount() > 0) out.write(buffer, static_cast<std::size_t>(in.gcount()));
    }
    require<FileError>(in.eof(), "diffattn-quantize: error while reading \"", from.string(), "\"");
    out.commit();
}

/// Rows of a tensor's first dimension converted at a time: about kStagingBytes of floats.
inline Index quantize_chunk_rows(Index row_width) {
    return std::max<Index>(1, static_cast<Index>(kStagingBytes / sizeof(float)) / std::max<Index>(1, row_width));
}

}  // namespace detail

/// Writes a quantized copy of the checkpoint directory `in_dir` (our format, DiffLlama or Motif;
/// float tensors, sharded or not) to `out_dir` in `format` (q8_0 or q4_0), in one streaming pass
/// (see the file comment). Everything about the input is checked first, as DecoderModel::load
/// checks it; then `out_dir` is created, which must not exist yet and must not lie inside
/// `in_dir`. OptionError for a format that is not a block format; ConfigError / FileError as load()
/// for the input; FileError naming the input file, the tensor and the weight for a weight the
/// format cannot hold (not finite, or beyond its f16 scale), and for any write that fails: then
/// `out_dir` and everything written into it are removed.
inline QuantizeReport write_quantized_checkpoint(const std::filesystem::path& in_dir,
                                                 const std::filesystem::path& out_dir, WeightFormat format,
                                                 const QuantizeOptions& options = {},
                                                 std::vector<std::string>* warnings = nullptr) {
    namespace fs = std::filesystem;
    constexpr const char* who = "diffattn-quantize";
    require<OptionError>(is_block_format(format), who, ": the format must be q8_0 or q4_0, got ", to_string(format));
    require<OptionError>(options.shard_bytes > 0, who, ": the shard size must be > 0");
    detail::require_model_directory(in_dir);
    const fs::path config_path = in_dir / "config.json";
    const ModelConfig config = read_checkpoint_config(config_path, warnings);
    const SafetensorsCheckpoint files(in_dir);
    detail::require_parameters_in_files(config, config_path, files);
    const ParameterList<float> table = DecoderModel<float>::tensor_table(config);
    detail::check_checkpoint_tensors(config, table, files);
    require<FileError>(!detail::quantized_format(files), who, ": ", files.description(),
                       " is already quantized; quantize the original checkpoint");

    std::error_code error;
    require<FileError>(!fs::exists(fs::symlink_status(out_dir, error)), who, ": \"", out_dir.string(),
                       "\" already exists; give a new directory (nothing is written over)");
    const fs::path real_in = fs::weakly_canonical(in_dir, error);
    const fs::path real_out = fs::weakly_canonical(out_dir, error);
    const auto inside = [](const fs::path& dir, const fs::path& path) {
        const auto d = dir.begin(), p = path.begin();
        return std::mismatch(d, dir.end(), p, path.end()).first == dir.end();
    };
    require<FileError>(!inside(real_in, real_out), who, ": \"", out_dir.string(), "\" lies inside the model directory \"",
                       in_dir.string(), "\"; never a file of the model's folder");

    // The plan: each tensor's dtype, shape and bytes out, and the shards they fill in file order.
    struct Planned {
        const Parameter<float>* parameter;
        WeightFormat stored;  // f32: the input's bytes unchanged
        StreamedTensor tensor;
        std::uint64_t bytes = 0;
    };
    std::vector<Planned> plan;
    QuantizeReport report;
    for (const Parameter<float>& p : table) {
        const SafetensorsFile& file = files.require_tensor(p.name, p.shape);
        const SafetensorsTensorInfo& info = file.info(p.name);
        Planned item{&p, WeightFormat::f32, {}, 0};
        item.tensor.name = p.name;
        report.input_bytes += static_cast<double>(info.data_end - info.data_begin);
        if (p.linear_weight) item.stored = stored_format(format, p.shape[1], p.output_head);
        if (item.stored == WeightFormat::f32) {
            item.tensor.dtype = info.dtype;
            item.tensor.shape = info.shape;
            item.bytes = info.data_end - info.data_begin;
            if (p.linear_weight && warnings != nullptr) {
                warnings->push_back(detail::concat("tensor \"", p.name, "\": its rows of ", p.shape[1],
                                                   " weights are not whole ", kWeightBlock, "-weight blocks of ",
                                                   to_string(format), "; kept as ", dtype_name(info.dtype)));
            }
        } else {
            item.tensor.dtype = SafetensorsDtype::u8;
            item.tensor.shape = {p.shape[0], p.shape[1] / kWeightBlock, block_bytes(item.stored)};
            item.bytes = static_cast<std::uint64_t>(p.shape[0] * row_bytes(item.stored, p.shape[1], 4));
        }
        report.output_bytes += static_cast<double>(item.bytes);
        plan.push_back(std::move(item));
    }
    std::vector<std::vector<std::size_t>> shards(1);
    std::uint64_t filled = 0;
    for (std::size_t i = 0; i < plan.size(); ++i) {
        if (filled > 0 && filled + plan[i].bytes > options.shard_bytes) {
            shards.emplace_back();
            filled = 0;
        }
        shards.back().push_back(i);
        filled += plan[i].bytes;
    }

    // The writers: each tensor streams from the mapping, a chunk at a time.
    const std::map<std::string, std::string> metadata = {{"format", "pt"}, {kQuantizedWeightsKey, to_string(format)}};
    for (Planned& item : plan) {
        const Parameter<float>& p = *item.parameter;
        const SafetensorsFile& file = files.require_tensor(p.name, p.shape);
        const WeightFormat stored = item.stored;
        item.tensor.write = [&file, &p, stored](TensorByteSink& sink) {
            const Index rows = p.shape.empty() ? 1 : p.shape.front();
            const Index width = rows == 0 ? 0 : p.size() / rows;
            const Index chunk = detail::quantize_chunk_rows(width);
            std::vector<float> values;
            std::vector<unsigned char> bytes;
            for (Index r = 0; r < rows; r += chunk) {
                const Index n = std::min(chunk, rows - r);
                if (stored == WeightFormat::f32) {
                    std::size_t size = 0;
                    const unsigned char* data = file.stored_rows(p.name, r, n, size);
                    sink.write(data, size);
                } else {
                    values.resize(static_cast<std::size_t>(n * width));
                    file.read_rows_into<float>(p.name, p.shape, r, n, values.data());
                    const Index out_row = row_bytes(stored, width, 4);
                    bytes.resize(static_cast<std::size_t>(n * out_row));
                    for (Index i = 0; i < n; ++i) {
                        const float* x = values.data() + i * width;
                        const Index bad = detail::first_unstorable_weight(stored, x, width);
                        require<FileError>(bad < 0, "safetensors file \"", file.path(), "\": tensor ",
                                           detail::quote_json(p.name), ": weight [", r + i, ", ", bad, "] = ",
                                           bad < 0 ? 0.0f : x[bad], " cannot be stored as ", to_string(stored),
                                           " (not finite, or its block's scale would exceed f16's 65504)");
                        detail::encode_row(stored, x, width, bytes.data() + i * out_row);
                    }
                    sink.write(bytes.data(), bytes.size());
                }
                file.release_rows(p.name, r, n);
            }
        };
    }

    // Written into a new directory, removed again with everything in it should anything fail.
    fs::create_directories(out_dir, error);
    require<FileError>(!error, who, ": cannot create \"", out_dir.string(), "\": ", error.message());
    try {
        const std::size_t count = shards.size();
        nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
        for (std::size_t s = 0; s < count; ++s) {
            char name[64];
            std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, count);
            const fs::path path = out_dir / (count == 1 ? std::string(SafetensorsCheckpoint::single_file_name) : name);
            std::vector<StreamedTensor> tensors;
            for (std::size_t i : shards[s]) {
                tensors.push_back(plan[i].tensor);
                weight_map[plan[i].tensor.name] = path.filename().string();
            }
            write_safetensors_streamed(path, tensors, metadata);
            report.files.push_back(path);
        }
        if (count > 1) {
            nlohmann::ordered_json index = nlohmann::ordered_json::object();
            index["metadata"] = {{"total_size", static_cast<std::uint64_t>(report.output_bytes)},
                                 {kQuantizedWeightsKey, to_string(format)}};
            index["weight_map"] = std::move(weight_map);
            const std::string text = index.dump(2) + "\n";
            const fs::path path = out_dir / SafetensorsCheckpoint::index_file_name;
            detail::ReplacingFile out(path, who);
            out.write(text.data(), text.size());
            out.commit();
            report.files.push_back(path);
        }
        for (const fs::directory_entry& entry : fs::directory_iterator(in_dir)) {
            if (!entry.is_regular_file() || !detail::copied_with_checkpoint(entry.path())) continue;
            detail::copy_new_file(entry.path(), out_dir / entry.path().filename());
            report.files.push_back(out_dir / entry.path().filename());
        }
    } catch (...) {
        fs::remove_all(out_dir, error);  // ours: created above, and it did not exist before
        throw;
    }
    return report;
}

}  // namespace diffattn
