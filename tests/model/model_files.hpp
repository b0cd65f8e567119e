// Helpers of the model tests: temporary directories and writing model directories
// (config.json + model.safetensors, F32) from a model's parameter list; the golden model directories;
// the peak resident set size (Linux /proc), to show that a refused file allocated nothing; the
// logit ranking by a plain sort (an oracle of model/logit_ranking.hpp).
#pragma once

#include "diffattn/io/safetensors.hpp"
#include "diffattn/model/config_json.hpp"
#include "diffattn/model/decoder_model.hpp"

#include "small_configs.hpp"
#include "../kernel_instances.hpp"  // the fast kernels, instantiated once (diffattn_test_support)
#include "../temp_dir.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace model_test {

using namespace diffattn;

using test_files::TempDir;  // tests/temp_dir.hpp

/// The model's tensors as contiguous float buffers by name (3-D tensors gathered from their slices).
struct TensorSet {
    std::map<std::string, std::vector<Index>> shapes;
    std::map<std::string, std::vector<float>> data;

    std::map<std::string, TensorView> views() const {
        std::map<std::string, TensorView> out;
        for (const auto& [name, shape] : shapes) out.emplace(name, TensorView(shape, data.at(name).data()));
        return out;
    }
};

template <typename T>
TensorSet tensors_of(DecoderModel<T>& model) {
    TensorSet set;
    for (const Parameter<T>& p : model.parameters()) {
        std::vector<float>& buffer = set.data[p.name];
        for (const ParameterSlice<T>& slice : p.slices) {
            const auto m = slice.map();
            for (Index r = 0; r < m.rows(); ++r)
                for (Index c = 0; c < m.cols(); ++c) buffer.push_back(static_cast<float>(m(r, c)));
        }
        set.shapes[p.name] = p.shape;
    }
    return set;
}

/// Writes dir/config.json and dir/model.safetensors.
inline void write_model_dir(const std::filesystem::path& dir, const ModelConfig& config, const TensorSet& tensors) {
    write_model_config(dir / "config.json", config);
    write_safetensors(dir / "model.safetensors", tensors.views());
}

/// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), or -1 where there is none.
inline long long status_bytes(const std::string& field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.compare(0, field.size() + 1, field + ":") == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
    }
    return -1;
}

/// Resets the peak resident set size (VmHWM) to the current one (Linux >= 4.0); false if it cannot.
inline bool reset_peak_rss() {
    std::ofstream clear_refs("/proc/self/clear_refs");
    clear_refs << "5";
    clear_refs.close();
    return clear_refs.good() && status_bytes("VmHWM") >= 0;
}

/// A safetensors file whose one tensor "unused" is `elements` F16 zeros: written sparse, so it
/// costs no disk space, but reading it costs its size in memory.
/// A tied softmax model of no layers, hidden 1024: its one large tensor is embed_tokens
/// [vocab, 1024] (the memory tests' model).
inline ModelConfig embedding_only_config(Index vocab) {
    ModelConfig config = test::tiny_config(AttentionKind::softmax, vocab);
    config.hidden_size = 1024;
    config.num_hidden_layers = 0;
    config.tie_word_embeddings = true;
    return config;
}

/// A safetensors file of the tensors {name, dtype, shape} in that order whose data are holes
/// (zeros that take no disk and no time to write).
struct SparseTensor {
    std::string name;
    std::string dtype;  // "F16", "BF16", "F32"
    std::vector<std::uint64_t> shape;
};
inline void write_sparse_file(const std::filesystem::path& path, const std::vector<SparseTensor>& tensors) {
    std::string header = "{";
    std::uint64_t offset = 0;
    for (const SparseTensor& t : tensors) {
        std::uint64_t count = 1;
        std::string shape;
        for (std::uint64_t n : t.shape) {
            count *= n;
            shape += (shape.empty() ? "" : ",") + std::to_string(n);
        }
        const std::uint64_t bytes = count * (t.dtype == "F32" ? 4 : 2);
        header += (header.size() == 1 ? "\"" : ",\"") + t.name + "\":{\"dtype\":\"" + t.dtype +
                  "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(offset) + "," +
                  std::to_string(offset + bytes) + "]}";
        offset += bytes;
    }
    header += "}";
    header.append((8 - header.size() % 8) % 8, ' ');
    unsigned char length[8];
    detail::store_u64_le(header.size(), length);
    {
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(length), 8);
        out << header;
        if (!out) throw std::runtime_error("cannot write " + path.string());
    }
    std::filesystem::resize_file(path, 8 + header.size() + offset);
}

/// A sparse file holding one F16 tensor "unused" of `elements` zeros.
inline void write_sparse_f16_file(const std::filesystem::path& path, std::uint64_t elements) {
    write_sparse_file(path, {{"unused", "F16", {elements}}});
}

/// The ranking of model/logit_ranking.hpp by a plain sort (a test oracle): the finite and infinite logits by value (descending, ties by id),
/// then the NaN ids ascending.
inline std::vector<Index> ranking_by_sort(const Vector<float>& logits) {
    std::vector<std::pair<float, Index>> numbers;
    std::vector<Index> nans;
    for (Index i = 0; i < logits.size(); ++i) {
        if (std::isnan(logits(i))) {
            nans.push_back(i);
        } else {
            numbers.emplace_back(-logits(i), i);
        }
    }
    std::sort(numbers.begin(), numbers.end());
    std::vector<Index> ids;
    for (const auto& entry : numbers) ids.push_back(entry.second);
    ids.insert(ids.end(), nans.begin(), nans.end());
    return ids;
}

/// The directories under tests/data/`root` that hold `file` (any directory when `file` is empty), sorted.
inline std::vector<std::filesystem::path> test_data_dirs(const char* root, const char* file) {
    std::vector<std::filesystem::path> dirs;
    const std::filesystem::path top = std::filesystem::path(DIFFATTN_TEST_DATA_DIR) / root;
    if (!std::filesystem::is_directory(top)) return dirs;
    for (const auto& entry : std::filesystem::directory_iterator(top)) {
        if (entry.is_directory() && (*file == '\0' || std::filesystem::exists(entry.path() / file))) {
            dirs.push_back(entry.path());
        }
    }
    std::sort(dirs.begin(), dirs.end());
    return dirs;
}

/// Every model directory under tests/data/models that has golden logits, sorted.
inline std::vector<std::filesystem::path> golden_model_dirs() { return test_data_dirs("models", "golden.safetensors"); }

/// The released-checkpoint directories (DiffLlama, Motif) under tests/data/checkpoints with golden
/// logits, sorted (docs/checkpoints.md).
inline std::vector<std::filesystem::path> checkpoint_golden_dirs() {
    return test_data_dirs("checkpoints", "golden.safetensors");
}

/// The checkpoint directories a reader must refuse (tests/data/checkpoints/refused, its README),
/// control_valid included, sorted.
inline std::vector<std::filesystem::path> refused_checkpoint_dirs() { return test_data_dirs("checkpoints/refused", ""); }

}  // namespace model_test

// ---------------------------------------------------------------------------------------------
// Instantiated once for the whole test_model executable, in support_instances.cpp (library
// test_model_support): the model's class templates in float and double, every member. Every TU
// of test_model sees these `extern template` declarations (DIFFATTN_TEST_SUPPORT_MODEL is a usage
// requirement of that library), so the members it calls that are not inlined are compiled once
// instead of once per TU. Executables that do not link the library (the *_nomalloc ones, other
// folders' tests including this header) instantiate them as usual.
// ---------------------------------------------------------------------------------------------
#define DIFFATTN_TEST_MODEL_INSTANCES(PREFIX, T)                                      \
    PREFIX template class diffattn::DecoderModel<T>;                                 \
    PREFIX template struct diffattn::DecoderLayer<T>;                                \
    PREFIX template struct diffattn::ForwardState<T>;                                \
    PREFIX template class diffattn::KvCache<T>;                                      \
    PREFIX template class diffattn::MultiHeadAttention<T>;                           \
    PREFIX template struct diffattn::SwiGlu<T>;                                      \
    PREFIX template struct diffattn::RmsNorm<T>;                                     \
    PREFIX template class diffattn::RotaryTable<T>;                                  \
    PREFIX template class diffattn::ParameterList<T>;                                \
    PREFIX template struct diffattn::SharedDiffFactors<T>;                           \
    PREFIX template decltype(diffattn::linear<T>) diffattn::linear<T>;               \
    PREFIX template decltype(model_test::tensors_of<T>) model_test::tensors_of<T>;

#if defined(DIFFATTN_TEST_SUPPORT_MODEL)
DIFFATTN_TEST_MODEL_INSTANCES(extern, float)
DIFFATTN_TEST_MODEL_INSTANCES(extern, double)
#endif
