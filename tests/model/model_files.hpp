// Helpers of the model tests: temporary directories and writing model directories
// (config.json + model.safetensors, F32) from a model's parameter list; the golden model directories.
#pragma once

#include "diffattn/io/safetensors.hpp"
#include "diffattn/model/config_json.hpp"
#include "diffattn/model/decoder_model.hpp"

#include "small_configs.hpp"
#include "../kernel_instances.hpp"  // the fast kernels, instantiated once (diffattn_test_support)

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

namespace model_test {

using namespace diffattn;

/// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
public:
    TempDir() {
        static std::atomic<int> counter{0};
        path_ = std::filesystem::temp_directory_path() /
                ("diffattn_model_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

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
