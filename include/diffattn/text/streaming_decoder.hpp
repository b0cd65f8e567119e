// StreamingDecoder: ids -> text one id at a time, for printing tokens as a model generates them
// (docs/tokenizer.md). A token may end in the middle of a multi-byte character (a byte-level
// vocabulary splits emoji and CJK characters into byte tokens); push() emits only complete UTF-8
// sequences and keeps such a tail until the next ids complete it (or show it to be invalid: then
// it becomes U+FFFD). The texts of push() calls followed by finish() concatenate to
// decode(all ids): both run the same lossy UTF-8 decoding (utf8.hpp).
#pragma once

#include "diffattn/text/tokenizer.hpp"
#include "diffattn/text/utf8.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace diffattn::text {

class StreamingDecoder {
public:
    explicit StreamingDecoder(Tokenizer tokenizer, bool skip_special_tokens = false)
        : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {}

    /// Decodes one more id and appends the text it completes to `out` (maybe nothing).
    /// An unknown id is an Error, and leaves the decoder as it was.
    void push(std::int32_t id, std::string& out) {
        const std::string_view bytes = tokenizer_.token_bytes(id);
        if (skip_special_tokens_ && tokenizer_.is_special(id)) return;
        pending_ += bytes;
        pending_.erase(0, append_utf8_lossy(pending_, false, out));
    }

    /// push(id, out) returning the text.
    std::string push(std::int32_t id) {
        std::string out;
        push(id, out);
        return out;
    }

    /// Ends the stream: a truncated character still pending becomes U+FFFD. The decoder is then
    /// empty and can start a new stream.
    std::string finish() {
        std::string out;
        append_utf8_lossy(pending_, true, out);
        pending_.clear();
        return out;
    }

    /// The bytes of an incomplete character waiting for the next id (at most 3).
    std::size_t pending_bytes() const { return pending_.size(); }

private:
    Tokenizer tokenizer_;
    bool skip_special_tokens_;
    std::string pending_;
};

}  // namespace diffattn::text
