// A model directory's weights against a model's tensor table (docs/checkpoints.md, "Loading"): the
// checks DecoderModel::load runs before it allocates anything, and the copy of each tensor into the
// storage of a ParameterList once it has.
//
// The table is DecoderModel::tensor_table(config) (names and file shapes, no storage) for the
// checks, and DecoderModel::parameters() (the same names, with storage) for the copy, so that a
// refused directory allocates nothing.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/io/detail/counted.hpp"
#include "diffattn/io/safetensors_checkpoint.hpp"
#include "diffattn/io/safetensors_reader.hpp"
#include "diffattn/layers/checkpoint_family.hpp"
#include "diffattn/layers/parameters.hpp"
#include "diffattn/model/config.hpp"

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <vector>

namespace diffattn::detail {

/// FileError unless `dir` is a directory. std::error_code forms only: a symbolic link loop, a
/// path longer than PATH_MAX or a parent without search permission is a message naming the path
/// and the reason, not a std::filesystem::filesystem_error.
inline void require_model_directory(const std::filesystem::path& dir) {
    std::error_code error;
    const std::filesystem::file_status status = std::filesystem::status(dir, error);
    const bool missing = status.type() == std::filesystem::file_type::not_found;  // ENOENT, ENOTDIR
    require<FileError>(!error || missing, "model directory \"", dir.string(), "\": cannot access it: ",
                       error.message());
    require<FileError>(status.type() == std::filesystem::file_type::directory, "model directory \"", dir.string(),
                       "\" does not exist or is not a directory");
}

/// Checks, before anything of the model is built, that `files` hold at least half of the
/// parameters of a model of `config` (else FileError "... do not belong together", naming
/// config.json at `config_path` and the files). It comes before tensor_table(config), whose size
/// grows with the layers config.json claims: a config.json of millions of layers beside a small
/// file is refused at once, allocating nothing.
inline void require_parameters_in_files(const ModelConfig& config, const std::filesystem::path& config_path,
                                        const SafetensorsCheckpoint& files) {
    const char* ignored = tensor_names(config.conventions.family).ignored_suffix;
    std::uint64_t in_files = 0;  // elements of all tensors: <= the files' size / 2, cannot overflow
    for (const SafetensorsFile& file : files.files()) {
        for (const auto& entry : file.tensors()) {
            if (!ends_with(entry.first, ignored)) in_files += static_cast<std::uint64_t>(entry.second.num_elements);
        }
    }
    const auto needed = static_cast<std::uint64_t>(config.parameter_count());  // validated: fits
    require<FileError>(needed <= 2 * in_files + 65536, "DecoderModel::load: config.json \"", config_path.string(),
                       "\" describes a model of ", needed, " parameters but ", files.description(), " holds ",
                       in_files, " in ", files.tensor_count(),
                       " tensors: most of the model is missing, so the two files do not belong together "
                       "(nothing was allocated)");
}

/// Checks `files` against a model of `config` whose tensors are `table` (tensor_table(config),
/// after require_parameters_in_files), allocating nothing: every tensor of the table with exactly
/// its shape and nothing else (tensors ending in the family's ignored suffix aside). FileError
/// naming the file and the tensor.
template <typename T>
void check_checkpoint_tensors(const ModelConfig& config, const ParameterList<T>& table,
                              const SafetensorsCheckpoint& files) {
    std::set<std::string> expected;
    for (const Parameter<T>& p : table) {
        files.require_tensor(p.name, p.shape);
        expected.insert(p.name);
    }
    files.check_no_unexpected(expected, tensor_names(config.conventions.family).ignored_suffix);
}

/// Converts every tensor of `list` from `source` (a SafetensorsFile or a SafetensorsCheckpoint:
/// read_into checks the name and the shape) into its storage, one at a time; tensors split over
/// several slices (Shared DIFF factors, halves-paired projections) go through one staging buffer of
/// the largest such tensor. Returns the names read.
template <typename T, typename Source>
std::set<std::string> read_parameters(ParameterList<T>& list, const Source& source) {
    std::set<std::string> expected;
    std::vector<T> staging;
    for (Parameter<T>& p : list) {
        expected.insert(p.name);
        const ParameterSlice<T>& first = p.slices.front();
        if (p.slices.size() == 1 && first.outer_stride == first.cols) {
            source.template read_into<T>(p.name, p.shape, first.data);
            continue;
        }
        staging.resize(static_cast<std::size_t>(p.size()));
        source.template read_into<T>(p.name, p.shape, staging.data());
        const T* from = staging.data();
        for (const ParameterSlice<T>& slice : p.slices) {
            slice.map() = ConstRowMatrixMap<T>(from, slice.rows, slice.cols);
            from += slice.rows * slice.cols;
        }
    }
    return expected;
}

}  // namespace diffattn::detail
