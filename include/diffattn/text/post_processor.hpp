// The post-processor: the special tokens encode(text, add_special_tokens = true) puts around the
// ids of the text (docs/tokenizer.md). tokenizer.json's TemplateProcessing "single" template
// (Llama 3.1: "<|begin_of_text|> $A") gives the ids before and after $A; ByteLevel adds none
// (it only trims offsets, which diffattn does not compute).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace diffattn::text {

class PostProcessor {
public:
    PostProcessor() = default;  // adds nothing
    PostProcessor(std::vector<std::int32_t> prefix, std::vector<std::int32_t> suffix)
        : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}

    /// The ids before the text's ids (e.g. {bos}).
    const std::vector<std::int32_t>& prefix() const { return prefix_; }
    /// The ids after the text's ids.
    const std::vector<std::int32_t>& suffix() const { return suffix_; }

private:
    std::vector<std::int32_t> prefix_, suffix_;
};

}  // namespace diffattn::text
