// What DecoderModel::load stores a checkpoint's weights in (docs/math.md §10, docs/model.md
// "Weight formats"), and how a directory's own format and the request meet.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/io/safetensors_checkpoint.hpp"
#include "diffattn/io/safetensors_header.hpp"

#include <optional>
#include <string>

namespace diffattn {

struct LoadOptions {
    /// The format of every 2-D weight (layers and kernels read it directly): as stored_format()
    /// gives it, f32 where a block format's blocks do not tile a weight's rows and q8_0 for the
    /// output head under q4_0. Unset: as the directory is stored, its quantized format for a
    /// directory diffattn-quantize wrote (docs/safetensors.md, "Quantized weights"), else f32.
    std::optional<WeightFormat> weights;
};

namespace detail {

/// The format a checkpoint quantized by diffattn-quantize records in its files' __metadata__, or
/// nullopt for a checkpoint of float tensors. FileError when the files disagree or name no block
/// format.
inline std::optional<WeightFormat> quantized_format(const SafetensorsCheckpoint& files) {
    std::optional<WeightFormat> found;
    for (const SafetensorsFile& file : files.files()) {
        const auto key = file.metadata().find(kQuantizedWeightsKey);
        std::optional<WeightFormat> format;
        if (key != file.metadata().end()) {
            try {
                format = parse_weight_format(key->second, kQuantizedWeightsKey);
            } catch (const OptionError& error) {
                throw FileError(concat("safetensors file \"", file.path(), "\": __metadata__ ", error.what()));
            }
            require<FileError>(is_block_format(*format), "safetensors file \"", file.path(), "\": __metadata__ \"",
                               kQuantizedWeightsKey, "\" is \"", key->second, "\", not a block format (q8_0, q4_0)");
        }
        require<FileError>(&file == &files.files().front() || format == found, files.description(),
                           ": the shards disagree on the quantized format (\"", file.path(), "\" records ",
                           format ? to_string(*format) : "none", ", the first shard ",
                           found ? to_string(*found) : "none", ")");
        found = format;
    }
    return found;
}

/// The weight format a load of `files` with `options` stores (see LoadOptions::weights).
/// OptionError for a request that would quantize a quantized checkpoint into another block format:
/// its weights are already rounded, and rounding them again compounds the error.
inline WeightFormat format_to_load(const SafetensorsCheckpoint& files, const LoadOptions& options) {
    const std::optional<WeightFormat> stored = quantized_format(files);
    if (!options.weights) return stored.value_or(WeightFormat::f32);
    require<OptionError>(!stored || !is_block_format(*options.weights) || *options.weights == *stored,
                         "DecoderModel::load: ", files.description(), " holds weights quantized as ",
                         stored ? to_string(*stored) : "", "; loading them as ", to_string(*options.weights),
                         " would quantize them twice (quantize the original checkpoint instead)");
    return *options.weights;
}

}  // namespace detail
}  // namespace diffattn
