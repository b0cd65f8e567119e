// diffattn-quantize: write a quantized copy of a checkpoint directory, which diffattn-forward
// --model loads directly (docs/safetensors.md, "Quantized weights").
//
//   diffattn-quantize IN_DIR OUT_DIR --weights q8_0|q4_0 [--shard-gb G]
//
// IN_DIR is a model directory of float tensors (our format, DiffLlama or Motif; sharded or not).
// OUT_DIR, which must not exist yet, receives config.json and the tokenizer files unchanged and
// the weights as safetensors shards of llama.cpp's q8_0 / q4_0 blocks, in one streaming pass
// (model/quantized_checkpoint.hpp). Every error prints a message and exits with status 2; a run
// that fails leaves no OUT_DIR behind.
#include "diffattn/model/quantized_checkpoint.hpp"

#include "cli_support.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace diffattn;

void print_help(std::ostream& out) {
    out << "usage: diffattn-quantize IN_DIR OUT_DIR --weights q8_0|q4_0 [--shard-gb G] [--help]\n"
           "\n"
           "Writes OUT_DIR (a new directory) holding IN_DIR's config.json and tokenizer files and\n"
           "its weights quantized to llama.cpp's q8_0 or q4_0 blocks (the output head stays q8_0\n"
           "under q4_0; weights whose rows are not whole 32-weight blocks, and the norms, stay as\n"
           "they are), which diffattn-forward --model OUT_DIR loads without the originals.\n"
           "\n"
           "  --weights F     q8_0 or q4_0.\n"
           "  --shard-gb G    largest shard, in GB (default 2; a larger tensor gets a shard of its own).\n"
           "\n"
           "Exit status: 0 on success, 2 for any error (nothing is left in OUT_DIR).\n";
}

int run(int argc, char** argv) {
    std::vector<std::string> positional;
    std::optional<WeightFormat> format;
    QuantizeOptions options;
    cli::Flags flags(argc, argv, print_help);
    while (flags.next()) {
        const std::string& flag = flags.flag();
        if (flag == "--weights") {
            try {
                format = parse_weight_format(flags.value(), "--weights");
            } catch (const OptionError& e) {
                throw cli::UsageError{e.what()};
            }
            if (!is_block_format(*format)) throw cli::UsageError{"--weights must be q8_0 or q4_0"};
        } else if (flag == "--shard-gb") {
            options.shard_bytes = static_cast<std::uint64_t>(cli::parse_integer(flag, flags.value(), 1, 1000)) << 30;
        } else if (flag.rfind("--", 0) != 0 && positional.size() < 2) {
            positional.push_back(flag);
        } else {
            throw cli::UsageError{"unknown argument \"" + flag + "\""};
        }
    }
    if (positional.size() != 2) throw cli::UsageError{"give IN_DIR and OUT_DIR"};
    if (!format) throw cli::UsageError{"--weights q8_0|q4_0 is required"};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::string> warnings;
    const QuantizeReport report = write_quantized_checkpoint(positional[0], positional[1], *format, options, &warnings);
    for (const std::string& w : warnings) std::cerr << "warning: " << w << "\n";
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("quantized %s to %s as %s: %.1f MB of tensors -> %.1f MB in %zu files, %.1f s\n", positional[0].c_str(),
                positional[1].c_str(), to_string(*format), report.input_bytes / 1e6, report.output_bytes / 1e6,
                report.files.size(), seconds);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return cli::run_main("diffattn-quantize", [&] { return run(argc, argv); });
}
