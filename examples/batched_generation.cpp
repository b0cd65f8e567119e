// diffattn-batched-generation: simulates a server generating for many users at once with
// continuous batching (DecoderModel::forward_batch, docs/math.md §6), and reports tokens/s and
// each request's latency.
//
//   diffattn-batched-generation [--model DIR] [--batch B] [--requests R] [--new-tokens G]
//                               [--min-prompt P] [--max-prompt Q] [--threads T] [--seed S]
//                               [--compare] [--verify]
//
// R requests wait in a queue, with prompts of seeded random lengths in [P, Q] and seeded random
// token ids. Up to B are in flight: a request joins as soon as a slot is free (its prompt is
// prefilled into the slot's cache, one forward() call), then every step feeds one token to each
// request in flight in one forward_batch() call (greedy: the argmax of its last logits), and a
// request leaves after G new tokens. Each slot keeps one KvCache for the whole run (reset() for the
// next request), so nothing is allocated after the start.
//
// Printed: generated tokens, wall time and tokens/s (all of it, and the decode steps alone), and
// per request the latency (queue + prefill + decode, from the start of the run) and the time per
// generated token, as min / median / max. --compare runs the same requests one at a time (batch 1)
// too and prints the speed-up. --verify also generates every request alone with generate() and
// exits 1 unless the ids agree (they can differ only where two logits are within rounding).
// Without --model the model is seeded: DIFF with GQA, hidden 1024, 8 layers, 16 heads over 4
// key/value heads, SwiGLU 2816, vocabulary 8192 (98M parameters; bench_batched_decode's model).
#include "cli_support.hpp"

#include <diffattn/core/isa.hpp>
#include <diffattn/core/memory_limit.hpp>
#include <diffattn/model/decoder_model.hpp>
#include <diffattn/model/generate.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace diffattn;
using Clock = std::chrono::steady_clock;

struct Options {
    std::optional<std::string> model_dir;
    Index batch = 8, requests = 16, new_tokens = 32, min_prompt = 64, max_prompt = 512;
    int threads = 1;
    unsigned seed = 1;
    bool compare = false, verify = false;
    std::optional<WeightFormat> weights;  // --weights (LoadOptions::weights)
};

void print_help(std::ostream& out) {
    out << "usage: diffattn-batched-generation [--model DIR] [--batch B] [--requests R] [--new-tokens G]\n"
           "                                   [--min-prompt P] [--max-prompt Q] [--threads T] [--seed S]\n"
           "                                   [--compare] [--verify] [--weights f32|bf16|q8_0|q4_0]\n"
           "Simulates R requests served with continuous batching: up to B in flight, each joining when a\n"
           "slot frees (its prompt prefilled), one forward_batch step per token for all in flight.\n"
           "  --model DIR      model directory (default: a seeded 98M-parameter DIFF model)\n"
           "  --batch B        requests in flight at most (default 8)\n"
           "  --requests R     requests in the queue (default 16)\n"
           "  --new-tokens G   tokens generated per request (default 32)\n"
           "  --min-prompt P, --max-prompt Q   prompt lengths, seeded uniform in [P, Q] (default 64, 512)\n"
           "  --threads T      threads (OpenMP builds; default 1)\n"
           "  --seed S         seed of the prompts (default 1)\n"
           "  --compare        also serve the requests one at a time and print the speed-up\n"
           "  --verify         also generate each request alone; exit 1 unless the ids agree\n"
           "  --weights F      store every 2-D weight as f32, bf16, q8_0 or q4_0 (default: as the\n"
           "                   directory stores them; f32 for the seeded model)\n";
}

Options parse(int argc, char** argv) {
    Options o;
    cli::Flags flags(argc, argv, print_help);
    while (flags.next()) {
        const std::string& flag = flags.flag();
        if (flag == "--weights") {
            try {
                o.weights = parse_weight_format(flags.value(), "--weights");
            } catch (const OptionError& e) {
                throw cli::UsageError{e.what()};
            }
        } else if (flag == "--model") {
            o.model_dir = flags.value();
        } else if (flag == "--batch") {
            o.batch = cli::parse_integer(flag, flags.value(), 1, 4096);
        } else if (flag == "--requests") {
            o.requests = cli::parse_integer(flag, flags.value(), 1, 1 << 20);
        } else if (flag == "--new-tokens") {
            o.new_tokens = cli::parse_integer(flag, flags.value(), 1, 1 << 20);
        } else if (flag == "--min-prompt") {
            o.min_prompt = cli::parse_integer(flag, flags.value(), 1, ModelConfig::max_positions);
        } else if (flag == "--max-prompt") {
            o.max_prompt = cli::parse_integer(flag, flags.value(), 1, ModelConfig::max_positions);
        } else if (flag == "--threads") {
            o.threads = static_cast<int>(cli::parse_integer(flag, flags.value(), 1, 1024));
        } else if (flag == "--seed") {
            o.seed = static_cast<unsigned>(cli::parse_integer(flag, flags.value(), 0, 4294967295LL));
        } else if (flag == "--compare") {
            o.compare = true;
        } else if (flag == "--verify") {
            o.verify = true;
        } else {
            throw cli::UsageError{"unknown flag " + flag};
        }
    }
    if (o.min_prompt > o.max_prompt) {
        throw cli::UsageError{"--min-prompt " + std::to_string(o.min_prompt) + " is above --max-prompt " +
                              std::to_string(o.max_prompt)};
    }
    return o;
}

ModelConfig seeded_config() {
    ModelConfig c;
    c.attention = AttentionKind::diff;
    c.hidden_size = 1024;
    c.num_attention_heads = 16;
    c.num_key_value_heads = 4;
    c.num_hidden_layers = 8;
    c.intermediate_size = 2816;
    c.vocab_size = 8192;
    return c;
}

struct Request {
    std::vector<Token> prompt;
    std::vector<Token> generated;
    double finished = 0;  // seconds from the start of the run
};

/// What one run of the queue took.
struct Run {
    double seconds = 0;         // wall time of the whole run
    double decode_seconds = 0;  // of the forward_batch steps alone
    Index decoded = 0;          // tokens produced by those steps
};

/// Serves every request with up to `batch` in flight; fills each request's generated ids and
/// finishing time.
Run serve(const DecoderModel<float>& model, std::vector<Request>& requests, Index batch, Index new_tokens,
          int threads) {
    std::size_t longest_prompt = 0;
    for (const Request& r : requests) longest_prompt = std::max(longest_prompt, r.prompt.size());
    const Index longest = static_cast<Index>(longest_prompt);
    const Index max_len = longest + new_tokens - 1;  // the last new token is never fed back
    std::vector<std::unique_ptr<KvCache<float>>> slots;
    for (Index s = 0; s < batch; ++s) slots.push_back(std::make_unique<KvCache<float>>(model.make_cache(max_len)));
    ForwardState<float> state = model.make_state(std::max(longest, batch), threads);
    RowMatrix<float> logits(batch, model.config().vocab_size);
    std::vector<KvCache<float>*> caches;
    std::vector<Token> next;
    std::vector<std::size_t> free_slots;
    for (Index s = batch - 1; s >= 0; --s) free_slots.push_back(static_cast<std::size_t>(s));
    std::vector<std::size_t> slot_of(requests.size());
    std::size_t queued = 0;
    Run run;
    const Clock::time_point start = Clock::now();
    const auto seconds_since_start = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
    std::vector<Index> active;  // requests in flight
    while (queued < requests.size() || !active.empty()) {
        // Join: prefill queued requests into free slots.
        while (queued < requests.size() && !free_slots.empty()) {
            const std::size_t slot = free_slots.back();
            free_slots.pop_back();
            Request& r = requests[queued];
            slots[slot]->reset();
            const ConstMatrixRef<float> prefill = model.forward(r.prompt, state, slots[slot].get());
            r.generated.push_back(argmax_token(prefill.row(prefill.rows() - 1)));
            slot_of[queued] = slot;
            active.push_back(static_cast<Index>(queued++));
        }
        // Leave: requests with all their tokens.
        for (std::size_t i = 0; i < active.size();) {
            Request& r = requests[static_cast<std::size_t>(active[i])];
            if (static_cast<Index>(r.generated.size()) == new_tokens) {
                r.finished = seconds_since_start();
                free_slots.push_back(slot_of[static_cast<std::size_t>(active[i])]);
                active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
            } else {
                ++i;
            }
        }
        if (active.empty()) continue;
        // One step for every request in flight.
        caches.clear();
        next.clear();
        for (Index a : active) {
            caches.push_back(slots[slot_of[static_cast<std::size_t>(a)]].get());
            next.push_back(requests[static_cast<std::size_t>(a)].generated.back());
        }
        const Index count = static_cast<Index>(active.size());
        const Clock::time_point step = Clock::now();
        model.forward_batch(next, caches, state, logits.topRows(count));
        run.decode_seconds += std::chrono::duration<double>(Clock::now() - step).count();
        run.decoded += count;
        for (Index b = 0; b < count; ++b) {
            requests[static_cast<std::size_t>(active[static_cast<std::size_t>(b)])].generated.push_back(
                argmax_token(logits.row(b)));
        }
    }
    run.seconds = seconds_since_start();
    return run;
}

/// min / median / max of `values`.
std::string spread(std::vector<double> values, double scale, const char* unit) {
    std::sort(values.begin(), values.end());
    char text[128];
    std::snprintf(text, sizeof text, "%.1f / %.1f / %.1f %s", values.front() * scale,
                  values[values.size() / 2] * scale, values.back() * scale, unit);
    return text;
}

/// The decode steps' tokens/s as text, or that there were none (one new token each: every token
/// came from a prefill).
std::string decode_rate(const Run& run) {
    if (run.decoded == 0) return "no decode steps (each token came from its prompt's prefill)";
    char text[64];
    std::snprintf(text, sizeof text, "decode steps alone %.1f tokens/s",
                  static_cast<double>(run.decoded) / run.decode_seconds);
    return text;
}

void report(const char* name, const Run& run, const std::vector<Request>& requests, Index new_tokens) {
    const Index generated = static_cast<Index>(requests.size()) * new_tokens;
    std::vector<double> latency, per_token;
    for (const Request& r : requests) {
        latency.push_back(r.finished);
        per_token.push_back(r.finished / static_cast<double>(new_tokens));
    }
    std::printf("%s: %ld tokens in %.2f s: %.1f tokens/s; %s\n", name,
                static_cast<long>(generated), run.seconds, static_cast<double>(generated) / run.seconds,
                decode_rate(run).c_str());
    std::printf("  latency per request (min / median / max): %s; per generated token: %s\n",
                spread(latency, 1e3, "ms").c_str(), spread(per_token, 1e3, "ms").c_str());
}

int run_program(const Options& o) {
    std::vector<std::string> warnings;
    const DecoderModel<float> model =
        o.model_dir ? DecoderModel<float>::load(*o.model_dir, LoadOptions{o.weights}, &warnings)
                    : DecoderModel<float>::seeded(seeded_config(), 2024, o.weights.value_or(WeightFormat::f32));
    for (const std::string& w : warnings) std::cerr << "warning: " << w << "\n";
    const Index vocab = model.config().vocab_size;
    std::mt19937 rng(o.seed);
    std::uniform_int_distribution<Index> length(o.min_prompt, o.max_prompt);
    std::uniform_int_distribution<Token> token(0, static_cast<Token>(vocab - 1));
    // The sizes first, checked as generate() checks them, before anything is allocated: the prompts'
    // lengths, then the prompts' tokens.
    std::vector<Index> prompt_lengths(static_cast<std::size_t>(o.requests));
    for (Index& n : prompt_lengths) n = length(rng);
    for (Index n : prompt_lengths) check_generate(model, n, o.new_tokens);
    // ... the batch's caches together: serve() keeps `batch` of them, each for the longest prompt ...
    const Index longest = *std::max_element(prompt_lengths.begin(), prompt_lengths.end());
    const Index cache_len = longest + o.new_tokens - 1;
    diffattn::require_memory(static_cast<long double>(o.batch) * KvCache<float>::bytes(model.config(), cache_len),
                             "--batch ", o.batch, ": its KV caches of ", cache_len, " tokens each");
    // ... and the prompts, held three times (the requests, the batched run's copy, --compare's).
    long double prompt_tokens = 0;
    for (Index n : prompt_lengths) prompt_tokens += static_cast<long double>(n);
    diffattn::require_memory(3 * prompt_tokens * sizeof(Token), "--requests ", o.requests, ": their prompts of ",
                             o.min_prompt, "-", o.max_prompt, " tokens, held three times");
    std::vector<Request> requests(static_cast<std::size_t>(o.requests));
    for (std::size_t i = 0; i < requests.size(); ++i) {
        requests[i].prompt.resize(static_cast<std::size_t>(prompt_lengths[i]));
        for (Token& t : requests[i].prompt) t = token(rng);
    }

    std::printf("diffattn batched generation (%s): %ld requests, prompts of %ld-%ld tokens, %ld new tokens each, "
                "batch %ld, %d thread(s)\n",
                diffattn::compiled_isa(), static_cast<long>(o.requests), static_cast<long>(o.min_prompt),
                static_cast<long>(o.max_prompt), static_cast<long>(o.new_tokens), static_cast<long>(o.batch),
                o.threads);
    std::vector<Request> batched = requests;
    const Run run = serve(model, batched, o.batch, o.new_tokens, o.threads);
    report("batched", run, batched, o.new_tokens);
    if (o.compare) {
        std::vector<Request> alone = requests;
        const Run one = serve(model, alone, 1, o.new_tokens, o.threads);
        report("one at a time", one, alone, o.new_tokens);
        std::printf("speed-up of batch %ld over batch 1: %.2fx overall", static_cast<long>(o.batch),
                    one.seconds / run.seconds);
        if (run.decoded > 0 && one.decoded > 0) {
            std::printf(", %.2fx in the decode steps", (static_cast<double>(run.decoded) / run.decode_seconds) /
                                                           (static_cast<double>(one.decoded) / one.decode_seconds));
        }
        std::printf("\n");
    }
    if (o.verify) {
        Index agree = 0;
        for (const Request& r : batched) agree += generate(model, r.prompt, o.new_tokens) == r.generated ? 1 : 0;
        std::printf("verify: %ld of %ld requests generate the same ids alone\n", static_cast<long>(agree),
                    static_cast<long>(o.requests));
        if (agree != o.requests) return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return cli::run_main("diffattn-batched-generation", [&] { return run_program(parse(argc, argv)); });
}
