// The safetensors files of one checkpoint directory, laid out as the Hugging Face Hub ships them
// (docs/checkpoints.md, "Files"): `model.safetensors` alone, or `model.safetensors.index.json`
// and the shards its weight_map names. Every file is memory-mapped (io/mapped_file.hpp) and its
// header validated when the checkpoint is opened; tensors are converted one at a time by
// read_into(), which hands the tensor's pages back afterwards.
//
// The index rules, each a FileError naming the index, the shard and the tensor:
//   - both model.safetensors and the index present: ambiguous;
//   - the index within max_index_bytes and weight_map within max_index_tensors entries (counted
//     before the JSON tree is built);
//   - weight_map a non-empty object of strings; every shard a plain file name (no "/", "\",
//     control character, ".", "..", so no absolute path) of an existing regular file whose real
//     path is inside the directory (a symbolic link may not lead out, except into the Hub cache's
//     blobs/, where `snapshots/<revision>/` links every file);
//   - every tensor of every shard listed for that shard, no tensor in two shards, every listed
//     tensor present. Shards the index does not name are not opened. `metadata.total_size` is
//     informational.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/io/detail/counted.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/io/safetensors_format.hpp"
#include "diffattn/io/safetensors_reader.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace diffattn {

class SafetensorsCheckpoint {
public:
    static constexpr const char* single_file_name = "model.safetensors";
    static constexpr const char* index_file_name = "model.safetensors.index.json";
    /// Largest index read (a 1000-shard, 100k-tensor index is about 10 MB).
    static constexpr std::uintmax_t max_index_bytes = std::uintmax_t(64) << 20;
    /// Most weight_map entries read: four times the tensors one safetensors file may hold, as an
    /// index spans many files (DeepSeek-V3's, among the largest, lists about 91,000 tensors).
    static constexpr std::size_t max_index_tensors = 4 * SafetensorsLimits::max_tensors;

    /// Maps and validates the weights of directory `dir`: model.safetensors, or the index and its
    /// shards. FileError for any rule of the file comment (and any defect of a file's header).
    explicit SafetensorsCheckpoint(const std::filesystem::path& dir) {
        namespace fs = std::filesystem;
        const fs::path single = dir / single_file_name, index = dir / index_file_name;
        std::error_code error;
        const bool has_index = fs::exists(fs::symlink_status(index, error));
        if (!has_index) {
            add_file(SafetensorsFile::mapped(single));
            description_ = detail::concat("safetensors file \"", single.string(), "\"");
            return;
        }
        description_ = detail::concat(index_file_name, " \"", index.string(), "\"");
        if (fs::exists(fs::symlink_status(single, error))) {
            fail("ambiguous checkpoint: \"", single.string(), "\" is also present (a directory holds either ",
                 single_file_name, " or an index and its shards)");
        }
        open_shards(dir, read_weight_map(index));
    }

    /// A checkpoint of one file already opened (DecoderModel::load_weights(const SafetensorsFile&)).
    explicit SafetensorsCheckpoint(SafetensorsFile file) {
        description_ = detail::concat("safetensors file \"", file.path(), "\"");
        add_file(std::move(file));
    }

    /// The files: model.safetensors, or the shards in name order.
    const std::vector<SafetensorsFile>& files() const noexcept { return files_; }
    bool sharded() const noexcept { return sharded_; }
    /// How messages name the checkpoint: `safetensors file "<path>"` or `model.safetensors.index.json "<path>"`.
    const std::string& description() const noexcept { return description_; }
    /// Number of tensors over all files.
    std::size_t tensor_count() const noexcept { return where_.size(); }

    /// The file holding tensor `name`, or null.
    const SafetensorsFile* find(const std::string& name) const {
        const auto found = where_.find(name);
        return found == where_.end() ? nullptr : &files_[found->second];
    }

    /// The file holding tensor `name`, after checking that it has exactly `shape`: FileError
    /// `missing tensor` (naming the checkpoint) or the file's shape message.
    const SafetensorsFile& require_tensor(const std::string& name, const std::vector<Index>& shape) const {
        const SafetensorsFile* file = find(name);
        if (file == nullptr) {
            if (!sharded_) files_.front().info(name);  // the single file's own "missing tensor" message
            fail("missing tensor ", detail::quote_json(name), " (the ", detail::Counted{files_.size(), "shard"},
                 " hold ", detail::Counted{where_.size(), "tensor"}, ")");
        }
        file->require_tensor(name, shape);
        return *file;
    }

    /// Converts tensor `name` (exactly `shape`) into dst as SafetensorsFile::read_into does, then
    /// releases its pages of the mapping: loading holds the converted model, not the files.
    template <typename T>
    void read_into(const std::string& name, const std::vector<Index>& shape, T* dst) const {
        const SafetensorsFile& file = require_tensor(name, shape);
        file.read_into<T>(name, shape, dst);
        file.release(name);
    }

    /// Rows [first_row, first_row + rows) of tensor `name` (exactly `shape`) into dst, as
    /// SafetensorsFile::read_rows_into; then releases their pages of the mapping.
    template <typename T>
    void read_rows_into(const std::string& name, const std::vector<Index>& shape, Index first_row, Index rows,
                        T* dst) const {
        const SafetensorsFile& file = require_tensor(name, shape);
        file.read_rows_into<T>(name, shape, first_row, rows, dst);
        file.release_rows(name, first_row, rows);
    }

    /// The entry of tensor `name` (exactly `shape`) and the file holding it.
    const SafetensorsTensorInfo& tensor_info(const std::string& name, const std::vector<Index>& shape) const {
        return require_tensor(name, shape).info(name);
    }

    /// FileError naming the file and (the first 16 of) its tensors that are not in `expected`,
    /// tensors whose name ends in `ignored_suffix` (if not null) aside.
    void check_no_unexpected(const std::set<std::string>& expected, const char* ignored_suffix = nullptr) const {
        for (const SafetensorsFile& file : files_) file.check_no_unexpected(expected, ignored_suffix);
    }

private:
    template <typename... Parts>
    [[noreturn]] void fail(Parts&&... parts) const {
        throw FileError(detail::concat(description_, ": ", std::forward<Parts>(parts)...));
    }

    void add_file(SafetensorsFile file) {
        const std::size_t index = files_.size();
        for (const auto& entry : file.tensors()) where_.emplace(entry.first, index);
        files_.push_back(std::move(file));
    }

    /// weight_map of the index: tensor name -> shard file name.
    std::map<std::string, std::string> read_weight_map(const std::filesystem::path& index) const {
        const std::string text = detail::read_text_file(index, description_, max_index_bytes, "an index");
        // Counted in the linear pass: the tree costs about 300 bytes an entry (4.4M entries: 1.29 GB).
        detail::JsonLimits limits;
        limits.max_depth = 8;
        limits.counted_object = "weight_map";
        limits.max_counted_members = max_index_tensors;
        limits.max_array_size = limits.max_object_members = limits.max_top_level_keys = 4096;  // metadata
        limits.max_values = max_index_tensors + 65536;
        const nlohmann::json json = detail::parse_json_text<FileError>(text, description_, limits, "an index");
        if (!json.is_object()) fail("expected a JSON object, got ", json.type_name());
        const auto map = json.find("weight_map");
        if (map == json.end() || !map->is_object() || map->empty()) {
            fail("\"weight_map\" must be a non-empty object {tensor: shard file}, got ",
                 map == json.end() ? std::string("nothing") : detail::brief_json(*map));
        }
        std::map<std::string, std::string> weight_map;
        for (auto item = map->begin(); item != map->end(); ++item) {
            if (!item.value().is_string()) {
                fail("weight_map entry of tensor ", detail::quote_json(item.key()), " is ",
                     detail::brief_json(item.value()), ", not a shard file name");
            }
            weight_map.emplace(item.key(), item.value().get<std::string>());
        }
        return weight_map;
    }

    /// Checks and opens the shards `weight_map` names, then cross-checks their tensors with it.
    void open_shards(const std::filesystem::path& dir, const std::map<std::string, std::string>& weight_map) {
        namespace fs = std::filesystem;
        sharded_ = true;
        std::map<std::string, std::string> shards;  // shard -> a tensor the index lists for it (for messages)
        for (const auto& [tensor, shard] : weight_map) {
            // A NUL would end the name the system sees, so a name with junk after one would open
            // another file than the index names; no control character names a shard.
            const bool plain = !shard.empty() && shard != "." && shard != ".." &&
                               std::none_of(shard.begin(), shard.end(), [](char c) {
                                   return c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
                               });
            if (!plain) {
                fail("weight_map names ", detail::quote_json(shard), " for tensor ", detail::quote_json(tensor),
                     ": not a file name inside the directory (a shard name has no \"/\", \"\\\" or control "
                     "character and is not \".\" or \"..\")");
            }
            shards.emplace(shard, tensor);
        }
        std::error_code error;
        const fs::path real_dir = fs::canonical(dir, error);
        if (error) fail("cannot resolve the directory \"", dir.string(), "\": ", error.message());
        for (const auto& [shard, tensor] : shards) {
            const fs::path path = dir / shard;
            const fs::file_status status = fs::status(path, error);
            if (status.type() == fs::file_type::not_found) {
                fail("shard ", detail::quote_json(shard), " (named for tensor ", detail::quote_json(tensor),
                     ") does not exist in \"", dir.string(), "\"");
            }
            const fs::path real = fs::canonical(path, error);
            if (error) fail("cannot resolve shard ", detail::quote_json(shard), ": ", error.message());
            if (!inside(real_dir, real)) {
                fail("shard ", detail::quote_json(shard), " is a symbolic link to \"", real.string(),
                     "\", outside the directory \"", real_dir.string(), "\"");
            }
            add_file(SafetensorsFile::mapped(path));
        }
        // Every tensor of every shard listed for that shard, once; add_file kept the first shard.
        for (std::size_t i = 0; i < files_.size(); ++i) {
            const std::string shard = fs::path(files_[i].path()).filename().string();
            for (const auto& entry : files_[i].tensors()) {
                const std::string& name = entry.first;
                const std::size_t first = where_.at(name);
                if (first != i) {
                    fail("tensor ", detail::quote_json(name), " is in two shards, ",
                         detail::quote_json(fs::path(files_[first].path()).filename().string()), " and ",
                         detail::quote_json(shard));
                }
                const auto listed = weight_map.find(name);
                if (listed == weight_map.end()) {
                    fail("tensor ", detail::quote_json(name), " of shard ", detail::quote_json(shard),
                         " is not listed in weight_map");
                }
                if (listed->second != shard) {
                    fail("weight_map lists tensor ", detail::quote_json(name), " for shard ",
                         detail::quote_json(listed->second), " but it is in shard ", detail::quote_json(shard));
                }
            }
        }
        for (const auto& [tensor, shard] : weight_map) {
            if (where_.count(tensor) == 0) {
                fail("weight_map lists tensor ", detail::quote_json(tensor), " in shard ", detail::quote_json(shard),
                     ", which does not hold it (no shard does)");
            }
        }
    }

    /// True when `real` (a canonical path) lies in `real_dir`, or, for a Hub cache snapshot
    /// (<repo>/snapshots/<revision>), in <repo>/blobs.
    static bool inside(const std::filesystem::path& real_dir, const std::filesystem::path& real) {
        const std::filesystem::path parent = real.parent_path();
        if (parent == real_dir) return true;
        const std::filesystem::path snapshots = real_dir.parent_path();
        return snapshots.filename() == "snapshots" && parent == snapshots.parent_path() / "blobs";
    }

    std::vector<SafetensorsFile> files_;
    std::map<std::string, std::size_t> where_;  // tensor -> index in files_ (the first file holding it)
    std::string description_;
    bool sharded_ = false;
};

}  // namespace diffattn
