// Loading a released checkpoint as the Hub ships it: a synthetic ~1B-parameter DiffLlama and a
// Motif-2.6B-shape checkpoint, sharded BF16 (docs/checkpoints.md), read by DecoderModel<float>::load
// (mapped shards, every name and shape checked first, then tensor-by-tensor conversion).
//
//   load_checkpoint/motif_2p6b_bf16_sharded/weights:<F>   the Motif-2.6B shape (hidden 2048, 32
//     layers, 16 heads, intermediate 8192, vocabulary 219520, tied: 2.6e9 parameters) stored in
//     weight format F (f32, bf16, q8_0, q4_0; LoadOptions); counters
//     stored_GB          DecoderModel::stored_bytes(): the weights in their formats
//     peak_rss_GB        the growth of the peak resident set during the load
//     peak_over_stored   peak_rss_GB / stored_GB (1: the load holds the stored model and nothing else)
//     seconds            wall time of the load
//   load_checkpoint/diffllama_1b_bf16_sharded   one load per iteration; counters
//     seconds            wall time of DecoderModel<float>::load (config, index, mapping, checks,
//                        allocation, conversion; the halves pairing reorders q/k/v rows)
//     model_GB           parameters * sizeof(float): the model's size in T
//     file_GB            bytes of the shards (BF16: about half of model_GB)
//     peak_rss_over_model  the growth of the peak resident set during the load (VmHWM, reset
//                        before it through /proc/self/clear_refs) over model_GB: 1 would be the
//                        model alone; what a load adds is the largest tensor's mapped pages (the
//                        rest are handed back tensor by tensor) and one staging tensor
//
// The checkpoint is written to a fresh temporary directory before the timed loop and removed
// afterwards: config.json, model.safetensors.index.json and shards of at most 512 MiB whose data
// sections are holes (ftruncate), so writing takes no time and no disk; reading them costs page faults on the
// page cache, not disk I/O (a warm-cache load). Model: hidden 2048, 32 query heads of width 64,
// 8 kv heads, 20 layers, intermediate 5632, vocabulary 32000, untied: 1.03e9 parameters.
#include <diffattn/model/decoder_model.hpp>
#include <diffattn/model/config_json.hpp>

#include <benchmark/benchmark.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using diffattn::Index;

/// The config.json of the 1B DiffLlama.
nlohmann::json diffllama_1b() {
    return {{"architectures", {"DiffLlamaForCausalLM"}}, {"model_type", "diffllama"},
            {"hidden_size", 2048}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
            {"head_dim", 64}, {"num_hidden_layers", 20}, {"intermediate_size", 5632},
            {"vocab_size", 32000}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
            {"max_position_embeddings", 4096}, {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"}};
}

/// The config.json of a Motif-2.6B-shape checkpoint (shared/peers/llama_cpp's shape).
nlohmann::json motif_2p6b() {
    return {{"architectures", {"MotifForCausalLM"}}, {"model_type", "Motif"},
            {"hidden_size", 2048}, {"num_attention_heads", 16}, {"num_key_value_heads", 16},
            {"num_hidden_layers", 32}, {"intermediate_size", 8192}, {"vocab_size", 219520},
            {"hidden_act", "poly_norm"}, {"rms_norm_eps", 1e-6}, {"attn_rms_norm_eps", 1e-5},
            {"rope_theta", 500000.0}, {"max_position_embeddings", 16384}, {"tie_word_embeddings", true},
            {"torch_dtype", "bfloat16"}};
}

/// A synthetic sharded BF16 checkpoint of `config` in a temporary directory, removed on destruction.
class SyntheticCheckpoint {
public:
    explicit SyntheticCheckpoint(const nlohmann::json& config, std::uint64_t shard_bytes = std::uint64_t(1) << 29) {
        dir_ = fs::temp_directory_path() / ("diffattn_bench_checkpoint_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::ofstream(dir_ / "config.json") << config.dump(2);
        // The tensors of the model, in order, cut into shards of about shard_bytes.
        const diffattn::ModelConfig model_config = diffattn::read_checkpoint_config(dir_ / "config.json");
        parameters_ = model_config.parameter_count();
        std::vector<std::vector<std::pair<std::string, std::vector<Index>>>> shards(1);
        std::uint64_t in_shard = 0;
        for (const auto& p : diffattn::DecoderModel<float>::tensor_table(model_config)) {
            const std::uint64_t bytes = 2 * static_cast<std::uint64_t>(p.size());
            if (in_shard > 0 && in_shard + bytes > shard_bytes) {
                shards.emplace_back();
                in_shard = 0;
            }
            shards.back().emplace_back(p.name, p.shape);
            in_shard += bytes;
        }
        nlohmann::json weight_map = nlohmann::json::object();
        for (std::size_t s = 0; s < shards.size(); ++s) {
            char name[64];
            std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
            nlohmann::json header = nlohmann::json::object();
            std::uint64_t offset = 0;
            for (const auto& [tensor, shape] : shards[s]) {
                std::uint64_t bytes = 2;
                for (Index extent : shape) bytes *= static_cast<std::uint64_t>(extent);
                header[tensor] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
                offset += bytes;
                weight_map[tensor] = name;
            }
            const std::string text = header.dump();
            const fs::path path = dir_ / name;
            {
                std::ofstream out(path, std::ios::binary);
                const std::uint64_t length = text.size();
                for (int i = 0; i < 8; ++i) out.put(static_cast<char>(length >> (8 * i)));
                out << text;
                if (!out) throw std::runtime_error("cannot write " + path.string());
            }
            fs::resize_file(path, 8 + text.size() + offset);  // the data section: a hole
            file_bytes_ += 8 + text.size() + offset;
        }
        std::ofstream(dir_ / "model.safetensors.index.json")
            << nlohmann::json{{"metadata", {{"total_size", file_bytes_}}}, {"weight_map", weight_map}}.dump(2);
    }
    ~SyntheticCheckpoint() {
        std::error_code ignored;
        fs::remove_all(dir_, ignored);
    }
    SyntheticCheckpoint(const SyntheticCheckpoint&) = delete;
    SyntheticCheckpoint& operator=(const SyntheticCheckpoint&) = delete;

    const fs::path& dir() const { return dir_; }
    Index parameters() const { return parameters_; }
    std::uint64_t file_bytes() const { return file_bytes_; }

private:
    fs::path dir_;
    Index parameters_ = 0;
    std::uint64_t file_bytes_ = 0;
};

/// A field of /proc/self/status in bytes ("VmHWM", "VmRSS"); -1 if unreadable.
double status_bytes(const std::string& field) {
    std::ifstream in("/proc/self/status");
    std::string key;
    while (in >> key) {
        if (key == field + ":") {
            double kib = 0;
            in >> kib;
            return kib * 1024.0;
        }
        in.ignore(1 << 16, '\n');
    }
    return -1;
}

/// Resets the peak resident set (VmHWM) to the current one; false where the kernel does not allow it.
bool reset_peak_rss() {
    std::ofstream out("/proc/self/clear_refs");
    out << "5";
    out.flush();
    return static_cast<bool>(out);
}

void load_checkpoint(benchmark::State& state) {
    const SyntheticCheckpoint checkpoint(diffllama_1b());
    const double model_bytes = static_cast<double>(checkpoint.parameters()) * sizeof(float);
    double seconds = 0, peak_over_model = 0;
    for (auto _ : state) {
        const bool reset = reset_peak_rss();
        const double before = reset ? status_bytes("VmRSS") : status_bytes("VmHWM");
        const auto start = std::chrono::steady_clock::now();
        {
            const diffattn::DecoderModel<float> model = diffattn::DecoderModel<float>::load(checkpoint.dir());
            seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            benchmark::DoNotOptimize(model.embed_tokens.stored_row(0));
            peak_over_model = std::max(peak_over_model, (status_bytes("VmHWM") - before) / model_bytes);
        }
        if (!reset) state.SkipWithError("/proc/self/clear_refs not writable: peak RSS of later iterations unknown");
    }
    state.counters["seconds"] = seconds / static_cast<double>(state.iterations());
    state.counters["model_GB"] = model_bytes / 1e9;
    state.counters["file_GB"] = static_cast<double>(checkpoint.file_bytes()) / 1e9;
    state.counters["parameters"] = static_cast<double>(checkpoint.parameters());
    state.counters["peak_rss_over_model"] = peak_over_model;
}

/// load_checkpoint/motif_2p6b_bf16_sharded/weights:<F> (the file comment).
void load_in_format(benchmark::State& state, diffattn::WeightFormat format) {
    static const SyntheticCheckpoint checkpoint(motif_2p6b());
    double seconds = 0, peak = 0, stored = 0;
    for (auto _ : state) {
        const bool reset = reset_peak_rss();
        const double before = reset ? status_bytes("VmRSS") : status_bytes("VmHWM");
        const auto start = std::chrono::steady_clock::now();
        {
            const diffattn::DecoderModel<float> model =
                diffattn::DecoderModel<float>::load(checkpoint.dir(), diffattn::LoadOptions{format});
            seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            stored = model.stored_bytes();
            peak = std::max(peak, status_bytes("VmHWM") - before);
        }
        if (!reset) state.SkipWithError("/proc/self/clear_refs not writable: peak RSS of later iterations unknown");
    }
    state.counters["seconds"] = seconds / static_cast<double>(state.iterations());
    state.counters["stored_GB"] = stored / 1e9;
    state.counters["peak_rss_GB"] = peak / 1e9;
    state.counters["peak_over_stored"] = peak / stored;
    state.counters["file_GB"] = static_cast<double>(checkpoint.file_bytes()) / 1e9;
}

BENCHMARK_CAPTURE(load_in_format, f32, diffattn::WeightFormat::f32)
    ->Name("load_checkpoint/motif_2p6b_bf16_sharded/weights:f32")->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK_CAPTURE(load_in_format, bf16, diffattn::WeightFormat::bf16)
    ->Name("load_checkpoint/motif_2p6b_bf16_sharded/weights:bf16")->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK_CAPTURE(load_in_format, q8_0, diffattn::WeightFormat::q8_0)
    ->Name("load_checkpoint/motif_2p6b_bf16_sharded/weights:q8_0")->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK_CAPTURE(load_in_format, q4_0, diffattn::WeightFormat::q4_0)
    ->Name("load_checkpoint/motif_2p6b_bf16_sharded/weights:q4_0")->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

BENCHMARK(load_checkpoint)
    ->Name("load_checkpoint/diffllama_1b_bf16_sharded")
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
