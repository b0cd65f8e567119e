// diffattn-forward: run a differential-attention decoder over a token sequence and print the
// next-token prediction.
//
//   diffattn-forward                           the embedded demo model (no files needed)
//   diffattn-forward --model DIR               DIR/config.json + DIR/model.safetensors (docs/math.md §5), or a
//                                              released DiffLlama / Motif directory, single file or
//                                              sharded (docs/checkpoints.md)
//   diffattn-forward --tokens "3 14 15 92"     the input token ids
//   diffattn-forward --logits out.safetensors  also write all logits as F32 tensor `logits` [tokens, vocab]
//   diffattn-forward --threads 4               attention heads on 4 threads (OpenMP builds)
//   diffattn-forward --precision double        compute in double instead of float
//   diffattn-forward --generate 16             greedy continuation by 16 tokens with a KV cache,
//                                              printed as one line "generated: <id> <id> ...";
//                                              stops early at the model's end-of-sequence ids
//   diffattn-forward --generate 16 --no-cache  the same, recomputing the full forward every step
//
// The embedded demo model is a DINT Transformer (the family's flagship) with seeded weights
// (init_parameters_uniform, seed 1234), the same on every platform:
//   attention dint (dint_integral causal_softmax), hidden_size 64, num_attention_heads 4,
//   num_key_value_heads 2 (GQA, diff_gqa_pairing per_head), num_hidden_layers 2,
//   intermediate_size 172, vocab_size 256, rms_norm_eps 1e-5, rope_theta 10000, untied lm_head.
//
// Every error (a bad or repeated flag, file, configuration, token id, or sizes the machine cannot
// hold) prints a message naming the problem and exits with status 2; sizes are checked before
// anything is printed. Results do not depend on --threads (each head writes its own output columns).
#include "diffattn/core/isa.hpp"
#include "diffattn/io/safetensors.hpp"
#include "diffattn/model/config_json.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/generate.hpp"
#include "diffattn/model/generation_config.hpp"
#include "diffattn/model/kv_cache.hpp"
#include "diffattn/model/logit_ranking.hpp"

#include "cli_support.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace {

using namespace diffattn;
using cli::parse_integer;
using cli::parse_tokens;
using cli::UsageError;

constexpr std::uint64_t kDemoSeed = 1234;

/// The default input: the digits of pi in pairs (mapped into the vocabulary when it is smaller).
const std::vector<Token> kDefaultTokens = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79};

ModelConfig demo_config() {
    ModelConfig c;
    c.attention = AttentionKind::dint;
    c.dint_integral = DintIntegral::causal_softmax;
    c.hidden_size = 64;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.num_hidden_layers = 2;
    c.intermediate_size = 172;
    c.vocab_size = 256;
    return c;
}

struct Options {
    std::optional<std::string> model_dir;
    std::optional<std::string> tokens_text;
    std::optional<std::string> logits_path;
    int threads = 1;
    bool use_double = false;
    int generate = 0;       // --generate K: tokens to generate greedily (0: none)
    bool use_cache = true;  // --no-cache: full recompute at every generation step
};

void print_help(std::ostream& out) {
    out << "usage: diffattn-forward [--model DIR] [--tokens \"ID ID ...\"] [--logits FILE]\n"
           "                        [--threads T] [--precision float|double]\n"
           "                        [--generate K [--no-cache]] [--help]\n"
           "\n"
           "Runs a differential-attention decoder (diffattn) over a token sequence and prints the\n"
           "configuration, the parameter count, the time and the top-5 next tokens.\n"
           "\n"
           "  --model DIR        model directory with config.json and model.safetensors (docs/math.md §5),\n"
           "                     or a DiffLlama / Motif checkpoint as the Hub ships it (sharded\n"
           "                     or not; docs/checkpoints.md).\n"
           "                     Default: an embedded demo DINT model with seeded weights\n"
           "                     (hidden_size 64, 4 heads, 2 kv heads, 2 layers, vocab 256).\n"
           "  --tokens \"...\"     token ids separated by spaces or commas. Default: the digits of\n"
           "                     pi in pairs, 3 14 15 92 65 35 89 79 ... (modulo vocab_size).\n"
           "  --logits FILE      write the logits [tokens, vocab] as F32 tensor `logits` to a\n"
           "                     safetensors file.\n"
           "  --threads T        run attention heads on T threads (OpenMP builds; default 1).\n"
           "                     The results do not depend on T.\n"
           "  --precision P      float (default) or double.\n"
           "  --generate K       continue the tokens greedily by K tokens (the argmax of each\n"
           "                     step's last logits row; a NaN logit never wins over a\n"
           "                     number) and print them as one line\n"
           "                     \"generated: <id> <id> ...\", with the time per token; fewer when\n"
           "                     the model's end-of-sequence id (generation_config.json, else\n"
           "                     config.json) comes first. Uses a KV\n"
           "                     cache: the tokens are prefilled in one call, then each new token\n"
           "                     is one decode call (docs/math.md §6). Not for encoder or DINT global_mean\n"
           "                     models (add --no-cache).\n"
           "  --no-cache         with --generate: recompute the full forward over all tokens at\n"
           "                     every step instead (same tokens, slower).\n"
           "  --help             this text.\n"
           "\n"
           "Integers are plain decimal digits (no sign, no spaces). Each flag may be given once.\n"
           "The top-5 list ranks the largest logit first, NaN logits last (ties: lower id first).\n"
           "\n"
           "Exit status: 0 on success, 2 for any error: a bad or repeated flag, a file,\n"
           "configuration or token id, or sizes larger than the machine's memory (checked\n"
           "before anything is printed).\n";
}

Options parse_arguments(int argc, char** argv) {
    Options options;
    std::set<std::string> seen;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") {
            print_help(std::cout);
            std::exit(0);
        }
        if (!seen.insert(flag).second) throw UsageError{flag + " is given more than once; give each flag once"};
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw UsageError{flag + " needs a value"};
            return argv[++i];
        };
        if (flag == "--model") {
            options.model_dir = value();
        } else if (flag == "--tokens") {
            options.tokens_text = value();
        } else if (flag == "--logits") {
            options.logits_path = value();
        } else if (flag == "--threads") {
            options.threads = static_cast<int>(parse_integer(flag, value(), 1, 1024));
        } else if (flag == "--precision") {
            const std::string p = value();
            if (p != "float" && p != "double") throw UsageError{"--precision must be float or double, got \"" + p + "\""};
            options.use_double = p == "double";
        } else if (flag == "--generate") {
            options.generate = static_cast<int>(parse_integer(flag, value(), 1, 1000000));
        } else if (flag == "--no-cache") {
            options.use_cache = false;
        } else {
            throw UsageError{"unknown argument \"" + flag + "\""};
        }
    }
    if (!options.use_cache && options.generate == 0) throw UsageError{"--no-cache needs --generate K"};
    return options;
}

template <typename T>
int run(const Options& options) {
    // 1. The model.
    std::vector<std::string> warnings;
    const DecoderModel<T> model = options.model_dir ? DecoderModel<T>::load(*options.model_dir, &warnings)
                                                    : DecoderModel<T>::seeded(demo_config(), kDemoSeed);
    for (const std::string& w : warnings) std::cerr << "warning: " << w << "\n";
    const ModelConfig& config = model.config();

    // 2. The tokens.
    std::vector<Token> tokens;
    if (options.tokens_text) {
        tokens = parse_tokens(*options.tokens_text, config.vocab_size);
    } else {
        for (Token t : kDefaultTokens) tokens.push_back(static_cast<Token>(t % config.vocab_size));
    }
    const Index n = static_cast<Index>(tokens.size());

    // 3. Every size, before anything is printed: the state of the forward pass (its logits
    //    [tokens x vocab] are printed and written from) and what the generation will allocate.
    int threads = options.threads;
#if !defined(DIFFATTN_HAS_OPENMP)
    const bool single_threaded_build = threads > 1;
    threads = 1;
#endif
    ForwardState<T> state = model.make_state(n, threads);
    if (options.generate > 0) {
        try {
            check_generate(model, n, options.generate, options.use_cache);
        } catch (const OptionError& e) {  // an encoder or DINT global_mean model with the cache
            throw UsageError{std::string("--generate: ") + e.what() + "; add --no-cache"};
        }
    }

    std::cout << "model: " << (options.model_dir ? *options.model_dir : std::string("embedded demo model (seed 1234)"))
              << "\n"
              << config << "parameters: " << model.parameter_count() << "\n"
              << "precision: " << (std::is_same_v<T, double> ? "double" : "float") << "\n"
              << "vector ISA: " << diffattn::compiled_isa() << "\n";
#if !defined(DIFFATTN_HAS_OPENMP)
    if (single_threaded_build) std::cout << "note: built without OpenMP, running on 1 thread\n";
#endif
    std::cout << "threads: " << threads << "\n"
              << "tokens (" << n << "):";
    for (Token t : tokens) std::cout << " " << t;
    std::cout << "\n";

    // 4. The forward pass: a warm-up call, then a timed one (same state, same result).
    model.forward(tokens, state);
    const auto start = std::chrono::steady_clock::now();
    const ConstMatrixRef<T> logits = model.forward(tokens, state);  // [tokens x vocab], in state.logits
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << std::fixed << std::setprecision(3) << "forward: " << seconds * 1e3 << " ms, " << std::setprecision(1)
              << static_cast<double>(n) / std::max(seconds, 1e-12) << " tokens/s\n";

    // 5. Top-5 next tokens after the last position (NaN logits last: model/logit_ranking.hpp).
    const auto last = logits.row(n - 1);
    const std::vector<Index> top = top_logits(last, 5);
    std::cout << "top-" << top.size() << " next tokens (largest logit first, NaN last):\n" << std::setprecision(6);
    for (const Index id : top) {
        std::cout << "  " << std::setw(6) << id << "  logit " << std::setw(12) << static_cast<double>(last(id)) << "\n";
    }

    // 6. Optionally all logits to a safetensors file (the state holds exactly n rows).
    if (options.logits_path) {
        write_safetensors(*options.logits_path, {{"logits", TensorView(state.logits)}});
        std::cout << "wrote logits [" << n << ", " << config.vocab_size << "] to " << *options.logits_path << "\n";
    }

    // 7. Optionally greedy generation, with the KV cache (prefill + one decode call per token) or
    //    with a full forward at every step.
    if (options.generate > 0) {
        const Index count = options.generate;
        if (options.use_cache) {
            std::cout << "generation: " << count << " tokens, greedy, KV cache of " << KvCache<T>::bytes_per_token(config)
                      << " bytes per token (" << static_cast<std::uint64_t>(KvCache<T>::bytes(config, n + count - 1))
                      << " bytes for " << n + count - 1 << " tokens)\n";
        } else {
            std::cout << "generation: " << count << " tokens, greedy, full forward at every step (--no-cache)\n";
        }
        // A checkpoint's end-of-sequence ids (generation_config.json, else config.json) end it early.
        const std::vector<Token> eos = options.model_dir ? read_eos_token_ids(*options.model_dir) : std::vector<Token>{};
        const auto begin = std::chrono::steady_clock::now();
        const std::vector<Token> generated = generate(model, tokens, count, options.use_cache, threads, eos);
        const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        std::cout << "generated:";
        for (Token t : generated) std::cout << " " << t;
        std::cout << "\n";
        if (static_cast<Index>(generated.size()) < count) {
            std::cout << "stopped at end-of-sequence id " << generated.back() << " after " << generated.size()
                      << " tokens\n";
        }
        std::cout << std::setprecision(3) << "generation time: " << total * 1e3 << " ms (setup and prefill included), "
                  << total * 1e3 / static_cast<double>(generated.size()) << " ms per generated token"
                  << std::setprecision(1) << ", " << static_cast<double>(generated.size()) / std::max(total, 1e-12)
                  << " tokens/s\n";
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return cli::run_main("diffattn-forward", [&] {
        const Options options = parse_arguments(argc, argv);
        return options.use_double ? run<double>(options) : run<float>(options);
    });
}
