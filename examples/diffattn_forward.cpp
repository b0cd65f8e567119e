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
//   diffattn-forward --compute bf16            a prefill's products on BF16 operands (docs/math.md §7.1, §10.1);
//                                              bf16_widened, bf16_dot or bf16_amx name the way
//   diffattn-forward --weights q8_0            store every 2-D weight as bf16, q8_0 or q4_0 (f32:
//                                              the model's scalar; default: as DIR stores them)
//   diffattn-forward --generate 16             greedy continuation by 16 tokens with a KV cache,
//                                              printed as one line "generated: <id> <id> ...";
//                                              stops early at the model's end-of-sequence ids
//   diffattn-forward --generate 16 --no-cache  the same, recomputing the full forward every step
//   diffattn-forward --generate 16 --kv-cache f16
//                                              the KV cache stores keys and values as f16 (or bf16):
//                                              half the bytes; f32 (default) = the model's scalar
//   diffattn-forward --model DIR --prompt "Hello" --generate 16
//                                              text in (DIR/tokenizer.json), the continuation printed
//                                              as text token by token as it is produced
//   diffattn-forward --model DIR --prompt "Hello" --tokenize
//                                              only the prompt's ids: "tokens: <id> <id> ..."
//   --temperature 0.8 --top-k 40 --top-p 0.95 --seed 7
//                                              sample instead of greedy (model/sampler.hpp)
//   mpirun -np R diffattn-forward --model DIR --tokens "..."
//                                              one forward with the sequence split over R processes
//                                              (builds with MPI: docs/distributed.md); rank 0 prints
//                                              and writes --logits, with a line "ranks: R ..."
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
#include "diffattn/model/sampler.hpp"
#if defined(DIFFATTN_WITH_TOKENIZER)
#include "diffattn/text/streaming_decoder.hpp"
#include "diffattn/text/tokenizer.hpp"
#endif

#if defined(DIFFATTN_FORWARD_MPI)
#include "diffattn/distributed/ring_model.hpp"
#endif

#include "cli_support.hpp"
#include "output_files.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace diffattn;
using cli::check_output_file;
using cli::parse_integer;
using cli::parse_real;
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
    std::optional<std::string> prompt;  // --prompt TEXT: tokenized with DIR/tokenizer.json
    bool tokenize_only = false;         // --tokenize: print the prompt's ids and exit
    int generate = 0;                   // --generate K: tokens to generate (0: none)
    bool use_cache = true;              // --no-cache: full recompute at every generation step
    KvPrecision kv_cache = KvPrecision::f32;  // --kv-cache f32|f16|bf16: the cache's stored scalar
    Compute compute = Compute::scalar;        // --compute f32|bf16|bf16_<way>: the prefill's products
    std::optional<WeightFormat> weights;      // --weights f32|bf16|q8_0|q4_0 (LoadOptions::weights)
    SamplingOptions sampling;           // --temperature, --top-k, --top-p, --seed (greedy by default)
    std::vector<std::string> sampling_flags;  // the sampling flags given, for the checks
};

void print_help(std::ostream& out) {
    out << "usage: diffattn-forward [--model DIR] [--tokens \"ID ID ...\" | --prompt TEXT [--tokenize]]\n"
           "                        [--logits FILE] [--threads T] [--precision float|double]\n"
           "                        [--compute f32|bf16|bf16_widened|bf16_dot|bf16_amx]\n"
           "                        [--weights f32|bf16|q8_0|q4_0]\n"
           "                        [--generate K [--no-cache | --kv-cache f32|f16|bf16]\n"
           "                        [--temperature X [--top-k K]\n"
           "                        [--top-p P] [--seed S]]] [--help]\n"
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
           "  --prompt TEXT      the input as text, tokenized with DIR/tokenizer.json (and\n"
           "                     DIR/tokenizer_config.json) as Hugging Face's tokenizer does by\n"
           "                     default, with the special tokens its post-processor adds (e.g.\n"
           "                     <|begin_of_text|>); needs --model. With --generate the\n"
           "                     continuation is also printed as text, token by token as it is\n"
           "                     produced (special tokens and ids the tokenizer lacks left out).\n"
           "  --tokenize         with --prompt: print only the ids, one line\n"
           "                     \"tokens: <id> <id> ...\", and exit (the weights are not read).\n"
           "  --logits FILE      write the logits [tokens, vocab] as F32 tensor `logits` to a\n"
           "                     safetensors file: a new one, or one an earlier --logits wrote;\n"
           "                     never a file of the model's folder or anyone else's.\n"
           "  --threads T        run attention heads on T threads (OpenMP builds; default 1).\n"
           "                     The results do not depend on T.\n"
           "  --precision P      float (default) or double.\n"
           "  --compute C        the products of a prefill (the forward): its attention heads'\n"
           "                     over 8 or more tokens and its projections over 16 or more: f32\n"
           "                     (default; the model's own scalar) or bf16 (the operands rounded\n"
           "                     to 8 significant bits, fp32 sums: docs/math.md §7.1, §10.1;\n"
           "                     --precision float only), the faster way this CPU has, or one\n"
           "                     way named: bf16_widened (any CPU), bf16_dot (AVX512-BF16),\n"
           "                     bf16_amx (AMX tiles). Prints which products this CPU runs.\n"
           "  --weights F        store every 2-D weight (projections, embeddings, output head) as\n"
           "                     f32 (the --precision scalar), bf16, q8_0 or q4_0 (llama.cpp's\n"
           "                     blocks; docs/model.md, \"Weight formats\"). Default: as the\n"
           "                     directory stores them (f32 for float checkpoints, the format a\n"
           "                     diffattn-quantize directory was written in).\n"
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
           "  --kv-cache P       with --generate: the scalar the KV cache stores keys and values\n"
           "                     in: f32 (default; the model's own scalar, double with\n"
           "                     --precision double), f16 or bf16 (half the bytes per token;\n"
           "                     keys and values rounded to 11 / 8 significant bits).\n"
           "  --temperature X    with --generate: sample each token from softmax(logits / X)\n"
           "                     instead of taking the argmax; X > 0 (0, the default, is greedy).\n"
           "  --top-k K          with --temperature: sample among the K most likely tokens only.\n"
           "  --top-p P          with --temperature: sample among the fewest most likely tokens\n"
           "                     whose probabilities add up to P, 0 < P <= 1 (nucleus sampling).\n"
           "  --seed S           with --temperature: the seed of the sampler (default 5489); the\n"
           "                     same seed, model and flags give the same tokens on every run.\n"
           "  --help             this text.\n"
           "\n"
           "Integers are plain decimal digits (no sign, no spaces); X and P are decimal numbers\n"
           "(e.g. 0.8, 1e-3). Each flag may be given once.\n"
           "The top-5 list ranks the largest logit first, NaN logits last (ties: lower id first).\n"
           "\n"
           "Exit status: 0 on success, 2 for any error: a bad or repeated flag, a file,\n"
           "configuration or token id, or sizes larger than the machine's memory (checked\n"
           "before anything is printed).\n";
}

Options parse_arguments(int argc, char** argv) {
    Options options;
    cli::Flags flags(argc, argv, print_help);
    while (flags.next()) {
        const std::string& flag = flags.flag();
        const auto value = [&] { return flags.value(); };
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
        } else if (flag == "--compute") {
            const std::string c = value();
            options.compute = Compute::scalar;
            bool known = c == "f32";
            for (Compute way : {Compute::bf16, Compute::bf16_widened, Compute::bf16_dot, Compute::bf16_amx}) {
                if (c == to_string(way)) options.compute = way, known = true;
            }
            if (!known) {
                throw UsageError{"--compute must be f32, bf16, bf16_widened, bf16_dot or bf16_amx, got \"" + c + "\""};
            }
        } else if (flag == "--generate") {
            options.generate = static_cast<int>(parse_integer(flag, value(), 1, 1000000));
        } else if (flag == "--no-cache") {
            options.use_cache = false;
        } else if (flag == "--kv-cache") {
            const std::string p = value();
            if (p == "f32") {
                options.kv_cache = KvPrecision::f32;
            } else if (p == "f16") {
                options.kv_cache = KvPrecision::f16;
            } else if (p == "bf16") {
                options.kv_cache = KvPrecision::bf16;
            } else {
                throw UsageError{"--kv-cache must be f32, f16 or bf16, got \"" + p + "\""};
            }
        } else if (flag == "--weights") {
            try {
                options.weights = parse_weight_format(value(), "--weights");
            } catch (const OptionError& e) {
                throw UsageError{e.what()};
            }
        } else if (flag == "--prompt") {
            options.prompt = value();
        } else if (flag == "--tokenize") {
            options.tokenize_only = true;
        } else if (flag == "--temperature") {
            options.sampling.temperature = parse_real(flag, value(), 0.0, 1e6);
        } else if (flag == "--top-k") {
            options.sampling.top_k = static_cast<Index>(parse_integer(flag, value(), 1, 2147483647));
            options.sampling_flags.push_back(flag);
        } else if (flag == "--top-p") {
            options.sampling.top_p = parse_real(flag, value(), 0.0, 1.0);
            options.sampling_flags.push_back(flag);
        } else if (flag == "--seed") {
            options.sampling.seed = static_cast<std::uint64_t>(parse_integer(flag, value(), 0, 9223372036854775807LL));
            options.sampling_flags.push_back(flag);
        } else {
            throw UsageError{"unknown argument \"" + flag + "\""};
        }
    }
    if (!options.use_cache && options.generate == 0) throw UsageError{"--no-cache needs --generate K"};
    if (flags.given("--kv-cache") && options.generate == 0) throw UsageError{"--kv-cache needs --generate K"};
    if (flags.given("--kv-cache") && !options.use_cache) {
        throw UsageError{"--kv-cache sets the KV cache that --no-cache turns off; give one"};
    }
    if (options.compute != Compute::scalar && options.use_double) {
        throw UsageError{std::string("--compute ") + to_string(options.compute) +
                         " needs --precision float (BF16 products sum in fp32)"};
    }
    if (options.prompt && options.tokens_text) throw UsageError{"--prompt and --tokens both give the input; give one"};
    if (options.prompt && !options.model_dir) {
        throw UsageError{"--prompt needs --model DIR (the tokenizer is DIR/tokenizer.json)"};
    }
    if (options.tokenize_only && !options.prompt) throw UsageError{"--tokenize needs --prompt TEXT"};
    if (options.tokenize_only && (options.generate > 0 || options.logits_path)) {
        throw UsageError{std::string("--tokenize prints only the prompt's ids; it does not run the model, so ") +
                         (options.generate > 0 ? "--generate" : "--logits") + " has nothing to do"};
    }
    if (flags.given("--temperature") && options.generate == 0) throw UsageError{"--temperature needs --generate K"};
    for (const std::string& flag : options.sampling_flags) {
        if (options.sampling.greedy()) throw UsageError{flag + " needs --temperature X > 0 (greedy decoding takes the argmax)"};
    }
    try {
        check_sampling_options(options.sampling);
    } catch (const OptionError& e) {
        throw UsageError{e.what()};
    }
    return options;
}

#if defined(DIFFATTN_WITH_TOKENIZER)
using text::StreamingDecoder;
using text::Tokenizer;
#else
/// Stands in for the tokenizer in a build without PCRE2: --prompt says what is missing.
struct Tokenizer {
    static Tokenizer load(const std::string&) {
        throw UsageError{"--prompt: this diffattn-forward was built without the tokenizer (PCRE2, libpcre2-dev)"};
    }
    std::vector<Token> encode(const std::string&) const { return {}; }
};
#endif

/// The ids of `--prompt` by DIR/tokenizer.json, as Hugging Face's tokenizer gives them by default.
std::vector<Token> prompt_tokens(const Tokenizer& tokenizer, const std::string& prompt) {
    const auto ids = [&] {
        try {
            return tokenizer.encode(prompt);
        } catch (const diffattn::Error& e) {  // not UTF-8, or a pattern of tokenizer.json over its match limit
            throw UsageError{std::string("--prompt: ") + e.what()};
        }
    }();
    if (ids.empty()) throw UsageError{"--prompt: the text gives no tokens"};
    return std::vector<Token>(ids.begin(), ids.end());
}

/// Prints generated ids as text as they come (--prompt): only complete UTF-8 characters, special
/// tokens and ids the tokenizer does not have left out (as Hugging Face's decode skips them).
class TextStream {
public:
#if defined(DIFFATTN_WITH_TOKENIZER)
    explicit TextStream(const std::optional<Tokenizer>& tokenizer) {
        if (!tokenizer) return;
        decoder_.emplace(*tokenizer, /*skip_special_tokens=*/true);
        tokenizer_ = &*tokenizer;
    }
    bool active() const { return decoder_.has_value(); }
    void push(Token id) {
        if (!decoder_ || !tokenizer_->id_to_token(static_cast<std::int32_t>(id))) return;
        std::cout << decoder_->push(static_cast<std::int32_t>(id)) << std::flush;
    }
    void finish() {
        if (decoder_) std::cout << decoder_->finish() << "\n";
    }

private:
    std::optional<StreamingDecoder> decoder_;
    const Tokenizer* tokenizer_ = nullptr;
#else
    explicit TextStream(const std::optional<Tokenizer>&) {}
    bool active() const { return false; }
    void push(Token) {}
    void finish() {}
#endif
};

/// The processes of a run started by mpirun (MPI builds only); one otherwise.
struct Ranks {
    int rank = 0;
    int size = 1;
    bool distributed = false;  ///< started by mpirun: the forward runs across the ranks (even one)
    /// distributed: the vote every rank casts once, before the first collective of the forward or,
    /// leaving before it (failed, or done), on its way out: whether it is ready. Returns the first
    /// rank that is not, or -1. So a rank that fails alone (a flag, a file only it cannot read)
    /// never leaves the others waiting in a collective it will not join.
    std::function<int(bool ready)> agree;
};

#if defined(DIFFATTN_FORWARD_MPI)
/// MPI for the life of the program, but only when mpirun started it (its environment says so):
/// run on its own, the program never touches MPI.
class MpiSession {
public:
    MpiSession(int& argc, char**& argv) {
        if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMI_SIZE") == nullptr &&
            std::getenv("PMIX_RANK") == nullptr) {
            return;
        }
        int provided = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
        ranks_.distributed = true;
        MPI_Comm_rank(MPI_COMM_WORLD, &ranks_.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &ranks_.size);
        if (ranks_.rank != 0) std::cout.setstate(std::ios::badbit);  // rank 0 alone prints
    }
    ~MpiSession() {
        if (ranks_.distributed) MPI_Finalize();
    }
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;
    /// The ranks, with Ranks::agree this session's vote.
    Ranks ranks() {
        Ranks ranks = ranks_;
        if (ranks.distributed) ranks.agree = [this](bool ready) { return vote(ready); };
        return ranks;
    }
    /// The exit status of a rank whose body returned `status`. A rank that has not voted yet leaves
    /// before the forward, done (--tokenize) or failed: it votes "not ready", so that no rank waits
    /// for it in the forward's collectives.
    int finish(int status) {
        if (ranks_.distributed && !voted_) vote(false);
        return status;
    }

private:
    int vote(bool ready) {
        voted_ = true;
        int failed = ready ? ranks_.size : ranks_.rank;
        int first = ranks_.size;
        MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        return first < ranks_.size ? first : -1;
    }

    Ranks ranks_;
    bool voted_ = false;
};
#endif

/// The mark of --logits' files (output_files.hpp): an existing file is replaced only if it has it.
constexpr const char* kLogitsMark = "diffattn-forward --logits";

template <typename T>
int run(const Options& options, const std::optional<Tokenizer>& tokenizer, const std::vector<Token>& prompt_ids,
        const Ranks& ranks) {
    // 0. Where the logits go, before anything is read or computed: never over an input or a file
    //    this program did not write (output_files.hpp).
    // Across ranks rank 0 alone writes them: the others never touch the path.
    if (options.logits_path && ranks.rank == 0) {
        std::vector<std::filesystem::path> inputs;
        if (options.model_dir) inputs.emplace_back(*options.model_dir);
        check_output_file("--logits", *options.logits_path, inputs, cli::is_earlier_safetensors_output, kLogitsMark);
    }

    // 1. The model.
    std::vector<std::string> warnings;
    const auto load_start = std::chrono::steady_clock::now();
    const DecoderModel<T> model =
        options.model_dir ? DecoderModel<T>::load(*options.model_dir, LoadOptions{options.weights}, &warnings)
                          : DecoderModel<T>::seeded(demo_config(), kDemoSeed, options.weights.value_or(WeightFormat::f32));
    const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    for (const std::string& w : warnings) std::cerr << "warning: " << w << "\n";
    const ModelConfig& config = model.config();

    // 2. The tokens.
    std::vector<Token> tokens;
    if (options.tokens_text) {
        tokens = parse_tokens(*options.tokens_text, config.vocab_size);
    } else if (options.prompt) {
        tokens = prompt_ids;
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] >= config.vocab_size) {
                throw UsageError{"--prompt: token " + std::to_string(i) + " of the text is id " + std::to_string(tokens[i]) +
                                 ", outside the model's vocabulary [0, " + std::to_string(config.vocab_size) +
                                 "): tokenizer.json and the model do not belong together"};
            }
        }
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
    try {
        state.set_compute(options.compute);
    } catch (const OptionError& e) {  // a way of multiplying this CPU lacks
        throw UsageError{std::string("--compute: ") + e.what()};
    }
    if (ranks.distributed && options.compute != Compute::scalar) {
        throw UsageError{std::string("--compute ") + to_string(options.compute) +
                         " does not run across ranks (mpirun): the ring kernels multiply in float"};
    }
    if (ranks.distributed && options.generate > 0) {
        throw UsageError{"--generate does not run across ranks (mpirun): only one forward does"};
    }
    std::vector<Token> stop_tokens;  // a checkpoint's end-of-sequence ids end a generation early
    if (options.generate > 0) {
        try {
            check_generate(model, n, options.generate, options.use_cache, options.kv_cache);
        } catch (const OptionError& e) {  // an encoder or DINT global_mean model with the cache
            throw UsageError{std::string("--generate: ") + e.what() + "; add --no-cache"};
        }
        // generation_config.json, else config.json: read now, so that a bad one stops the run
        // before anything is printed or written.
        if (options.model_dir) stop_tokens = read_eos_token_ids(*options.model_dir, config.vocab_size);
    }

    // Across ranks: every rank has read and checked all it needs; the forward's collectives follow.
    if (ranks.distributed) {
        const int failed = ranks.agree(true);
        require<Error>(failed < 0, "rank ", failed, " of ", ranks.size, " stopped before the forward (see its message)");
    }

    std::cout << "model: " << (options.model_dir ? *options.model_dir : std::string("embedded demo model (seed 1234)"))
              << "\n"
              << config << "parameters: " << model.parameter_count() << "\n"
              << "weights: " << to_string(model.weight_format()) << ", " << std::fixed << std::setprecision(1)
              << model.stored_bytes() / 1e6 << " MB stored\n" << std::defaultfloat
              << "precision: " << (std::is_same_v<T, double> ? "double" : "float") << "\n"
              << "vector ISA: " << diffattn::compiled_isa() << "\n"
              << std::fixed << std::setprecision(1) << "load: " << load_seconds * 1e3 << " ms\n"
              << std::defaultfloat << std::setprecision(6);
#if !defined(DIFFATTN_HAS_OPENMP)
    if (single_threaded_build) std::cout << "note: built without OpenMP, running on 1 thread\n";
#endif
    std::cout << "threads: " << threads << "\n";
    if (options.compute != Compute::scalar) {
        std::cout << "compute: " << to_string(options.compute) << " (" << to_string(product_path(options.compute))
                  << " products; attention calls of fewer than " << kMinPackedRows << " tokens and projections of fewer than "
                  << detail::kFewRowsLinear << " in float)\n";
    }
    if (options.prompt) std::cout << "prompt: " << *options.prompt << "\n";
    std::cout << "tokens (" << n << "):";
    for (Token t : tokens) std::cout << " " << t;
    std::cout << "\n";

    // 4. The forward pass: a warm-up call, then a timed one (same state, same result). Across
    //    ranks each runs its slice and rank 0 gathers the logits into its state.
    std::vector<Index> split;  // across ranks: the first row of each rank's slice, then n
    const auto forward = [&] {
#if defined(DIFFATTN_FORWARD_MPI)
        if (ranks.distributed) {
            const distributed::SequenceSlices slices = distributed::model_slices(model, n, ranks.size);
            RowMatrix<T> gathered(ranks.rank == 0 ? n : 0, config.vocab_size);
            distributed::distributed_forward<T>(model, tokens, slices, state, gathered, MPI_COMM_WORLD);
            if (ranks.rank == 0) state.logits.topRows(n) = gathered;
            split = slices.begin;
            return;
        }
#endif
        model.forward(tokens, state);
    };
    forward();
    const auto start = std::chrono::steady_clock::now();
    forward();
    const ConstMatrixRef<T> logits = state.logits.topRows(n);  // [tokens x vocab]
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (ranks.distributed) {
        std::cout << "ranks: " << ranks.size << " (sequence split by rank:";
        for (std::size_t r = 0; r + 1 < split.size(); ++r) std::cout << " [" << split[r] << ", " << split[r + 1] << ")";
        std::cout << ")\n";
    }
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
    if (options.logits_path && ranks.rank == 0) {
        write_safetensors(*options.logits_path, {{"logits", TensorView(state.logits)}},
                          {{cli::kWrittenByKey, kLogitsMark}});
        std::cout << "wrote logits [" << n << ", " << config.vocab_size << "] to " << *options.logits_path << "\n";
    }

    // 7. Optionally generation (greedy, or sampled: model/sampler.hpp), with the KV cache
    //    (prefill + one decode call per token) or with a full forward at every step.
    if (options.generate > 0) {
        GenerationOptions generation;
        generation.max_new_tokens = options.generate;
        generation.use_cache = options.use_cache;
        generation.kv_precision = options.kv_cache;
        generation.threads = threads;
        generation.compute = options.compute;
        generation.stop_tokens = stop_tokens;
        const Index count = generation.max_new_tokens;
        const SamplingOptions& sampling = options.sampling;
        std::ostringstream how;
        if (sampling.greedy()) {
            how << "greedy";
        } else {
            how << "sampled (temperature " << sampling.temperature << ", top-k " << sampling.top_k << ", top-p "
                << sampling.top_p << ", seed " << sampling.seed << ")";
        }
        if (options.use_cache) {
            std::cout << "generation: " << count << " tokens, " << how.str() << ", KV cache ("
                      << to_string(options.kv_cache) << ") of " << KvCache<T>::bytes_per_token(config, options.kv_cache)
                      << " bytes per token ("
                      << static_cast<std::uint64_t>(KvCache<T>::bytes(config, n + count - 1, options.kv_cache))
                      << " bytes for "
                      << n + count - 1 << " tokens)\n";
        } else {
            std::cout << "generation: " << count << " tokens, " << how.str() << ", full forward at every step (--no-cache)\n";
        }
        Sampler sampler(sampling, config.vocab_size);
        TextStream text(tokenizer);
        if (text.active()) std::cout << "continuation: " << std::flush;
        const auto begin = std::chrono::steady_clock::now();
        const std::vector<Token> generated = generate(
            model, tokens, generation, [&](const auto& row) { return sampler.sample(row); },
            [&](Token id) { text.push(id); });
        const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        text.finish();
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
#if defined(DIFFATTN_FORWARD_MPI)
    MpiSession mpi(argc, argv);
    const Ranks ranks = mpi.ranks();
#else
    const Ranks ranks;
#endif
    const int status = cli::run_main("diffattn-forward", [&] {
        const Options options = parse_arguments(argc, argv);
        // The prompt is tokenized before the weights are read: --tokenize needs only tokenizer.json.
        std::optional<Tokenizer> tokenizer;
        std::vector<Token> prompt_ids;
        if (options.prompt) {
            tokenizer.emplace(Tokenizer::load(*options.model_dir));
            prompt_ids = prompt_tokens(*tokenizer, *options.prompt);
            if (options.tokenize_only) {
                std::cout << "tokens:";
                for (Token t : prompt_ids) std::cout << " " << t;
                std::cout << "\n";
                return 0;
            }
        }
        return options.use_double ? run<double>(options, tokenizer, prompt_ids, ranks)
                                  : run<float>(options, tokenizer, prompt_ids, ranks);
    });
#if defined(DIFFATTN_FORWARD_MPI)
    return mpi.finish(status);
#else
    return status;
#endif
}
