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

#include <algorithm>
#include <cstdint>
#include <cstring>
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
            if (!ends_with(entry.first, ignored)) in_files += static_cast<std::uint64_t>(entry.second.weight_count());
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

/// The file of `source` (a SafetensorsFile, or a SafetensorsCheckpoint's shard) holding tensor
/// `name`, which has exactly `shape` (FileError otherwise).
inline const SafetensorsFile& file_holding(const SafetensorsFile& file, const std::string& name,
                                           const std::vector<Index>& shape) {
    file.require_tensor(name, shape);
    return file;
}
inline const SafetensorsFile& file_holding(const SafetensorsCheckpoint& files, const std::string& name,
                                           const std::vector<Index>& shape) {
    return files.require_tensor(name, shape);
}

/// Bytes of T a tensor's rows are converted through at a time on their way into a stored weight.
inline constexpr std::size_t kStagingBytes = std::size_t(4) << 20;

/// Whether the file's bytes of `tensor` are already the stored format of `slice`: blocks of that
/// format, or BF16 for a bf16 weight (the checkpoint's own bits, kept).
template <typename T>
bool stores_file_bytes(const ParameterSlice<T>& slice, const SafetensorsTensorInfo& tensor) {
    if (slice.stored == nullptr) return false;
    const WeightFormat format = slice.stored->format();
    return tensor.blocks == format || (format == WeightFormat::bf16 && tensor.dtype == SafetensorsDtype::bf16);
}

/// Converts every tensor of `list` from `source` (a SafetensorsFile or a SafetensorsCheckpoint:
/// the name and the shape are checked) into its storage, one at a time, each tensor's pages of
/// the mapping handed back as it is read. A tensor of one plain slice is converted in place; a
/// weight stored in another format than f32 takes the file's bytes where they are that format
/// (stores_file_bytes), and is otherwise converted kStagingBytes at a time and encoded
/// (LinearWeight::store_rows: FileError naming the file and the tensor for a weight the format
/// cannot hold); other split tensors (Shared DIFF factors, halves-paired projections) go through
/// one staging buffer of the largest slice. Returns the names read.
template <typename T, typename Source>
std::set<std::string> read_parameters(ParameterList<T>& list, const Source& source) {
    std::set<std::string> expected;
    std::vector<T> staging;
    for (Parameter<T>& p : list) {
        expected.insert(p.name);
        const ParameterSlice<T>& first = p.slices.front();
        if (p.slices.size() == 1 && first.stored == nullptr && first.outer_stride == first.cols) {
            source.template read_into<T>(p.name, p.shape, first.data);
            continue;
        }
        const SafetensorsFile& file = file_holding(source, p.name, p.shape);
        const SafetensorsTensorInfo& tensor = file.info(p.name);
        const std::string what = concat("safetensors file \"", file.path(), "\": tensor ", quote_json(p.name));
        const Index row_width = p.size() / p.shape.front();  // scalars of one row of the file's first dimension
        Index file_row = 0;
        for (const ParameterSlice<T>& slice : p.slices) {
            const Index rows = slice.rows * slice.cols / row_width;  // rows of the first dimension it holds
            if (stores_file_bytes(slice, tensor)) {
                // Copied kStagingBytes at a time, each piece's mapped pages handed back after it:
                // the peak holds the stored model, not also the largest tensor's file pages.
                std::size_t bytes = 0;
                const unsigned char* from = file.stored_rows(p.name, file_row, rows, bytes);
                unsigned char* to = slice.stored->stored_row(slice.first_row);
                const std::size_t row_bytes = rows > 0 ? bytes / static_cast<std::size_t>(rows) : 0;
                const Index chunk = std::max<Index>(1, static_cast<Index>(kStagingBytes / std::max<std::size_t>(1, row_bytes)));
                for (Index r = 0; r < rows; r += chunk) {
                    const Index n = std::min(chunk, rows - r);
                    const std::size_t offset = static_cast<std::size_t>(r) * row_bytes;
                    std::memcpy(to + offset, from + offset, static_cast<std::size_t>(n) * row_bytes);
                    file.release_rows(p.name, file_row + r, n);
                }
            } else if (slice.stored != nullptr) {
                const Index chunk = std::max<Index>(1, static_cast<Index>(kStagingBytes / sizeof(T)) / row_width);
                staging.resize(static_cast<std::size_t>(std::min(chunk, rows) * row_width));
                for (Index r = 0; r < rows; r += chunk) {
                    const Index n = std::min(chunk, rows - r);
                    file.read_rows_into<T>(p.name, p.shape, file_row + r, n, staging.data());
                    file.release_rows(p.name, file_row + r, n);
                    slice.template write_rows<FileError>(r, ConstRowMatrixMap<T>(staging.data(), n, slice.cols), what);
                }
            } else {
                staging.resize(static_cast<std::size_t>(slice.rows * slice.cols));
                file.read_rows_into<T>(p.name, p.shape, file_row, rows, staging.data());
                slice.map() = ConstRowMatrixMap<T>(staging.data(), slice.rows, slice.cols);
            }
            file_row += rows;
        }
        file.release(p.name);
    }
    return expected;
}

}  // namespace diffattn::detail
