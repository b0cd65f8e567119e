// fuzz_tokenizer: tokenizer.json text -> Tokenizer, and text or ids through the committed tokenizers
// (text/tokenizer.hpp, docs/tokenizer.md).
//
// The first byte chooses what the rest is:
//   even          tokenizer.json text. Tokenizer::from_json_text returns a tokenizer or throws a
//                 ConfigError (nothing else). An accepted tokenizer encodes a few fixed texts
//                 without throwing, into ids that each name a token, and decodes them (with and
//                 without the special tokens) into valid UTF-8.
//   odd           a test tokenizer of tests/data/text (bit 1: tiny_gpt2, else tiny_llama3), and
//     bit 2 clear text to encode: invalid UTF-8 is a diffattn::Error, valid UTF-8 is not; every id
//                 names a token; decode(encode(text)) gives the text back unless an added token
//                 was matched (lstrip and rstrip take whitespace, as Hugging Face's do); the post-
//                 processor's ids go around the same ids with add_special_tokens;
//     bit 2 set   ids to decode, 4 bytes each: an id naming no token is a diffattn::Error, else
//                 the text is valid UTF-8 (invalid bytes become U+FFFD).
#include "fuzz_support.hpp"

#include "diffattn/text/tokenizer.hpp"
#include "diffattn/text/utf8.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if !defined(DIFFATTN_FUZZ_TEXT_DATA_DIR)
#error "DIFFATTN_FUZZ_TEXT_DATA_DIR must name tests/data/text (fuzz/CMakeLists.txt sets it)"
#endif

namespace {

using diffattn::text::Tokenizer;
using diffattn_fuzz::finding;

const Tokenizer& test_tokenizer(bool gpt2) {
    static const Tokenizer llama3 = Tokenizer::load(DIFFATTN_FUZZ_TEXT_DATA_DIR "/tiny_llama3");
    static const Tokenizer tiny_gpt2 = Tokenizer::load(DIFFATTN_FUZZ_TEXT_DATA_DIR "/tiny_gpt2");
    return gpt2 ? tiny_gpt2 : llama3;
}

/// decode(ids, skip), or nothing where it threw a diffattn::Error; a text that is not UTF-8 is a
/// finding.
std::optional<std::string> decode_to_utf8(const Tokenizer& tokenizer, const std::vector<std::int32_t>& ids, bool skip) {
    std::string text;
    if (!diffattn_fuzz::succeeds_or_throws_error("decode", [&] { text = tokenizer.decode(ids, skip); })) {
        return std::nullopt;
    }
    if (diffattn::text::first_invalid_utf8(text) != std::string_view::npos) finding("decode gave invalid UTF-8");
    return text;
}

/// Every id names a token, and the ids decode, with and without the special tokens; returns the
/// text with them.
std::string check_ids(const Tokenizer& tokenizer, const std::vector<std::int32_t>& ids, const char* what) {
    for (const std::int32_t id : ids) {
        if (!tokenizer.id_to_token(id)) finding(what, ": id ", id, " names no token");
    }
    std::string with_special;
    for (const bool skip : {false, true}) {
        std::optional<std::string> text = decode_to_utf8(tokenizer, ids, skip);
        if (!text) finding(what, ": decode of its own ids threw");
        if (!skip) with_special = std::move(*text);
    }
    return with_special;
}

void fuzz_tokenizer_json(const std::string& json_text) {
    std::vector<Tokenizer> accepted;  // at most one; a vector since Tokenizer has no default state
    try {
        accepted.push_back(Tokenizer::from_json_text(json_text, "fuzz tokenizer.json"));
    } catch (const diffattn::ConfigError&) {
        return;  // rejected: the one allowed failure
    } catch (const std::exception& e) {
        finding("Tokenizer::from_json_text threw something other than a ConfigError: ", e.what());
    }
    const Tokenizer& tokenizer = accepted.front();
    for (const char* text : {"", "Hello world", " a\n\nb  c\t", "caf\xc3\xa9 123 4567 \xe2\x80\x94 \xf0\x9f\x98\x80",
                             "<|begin_of_text|>x<|eot_id|>"}) {
        for (const bool special : {false, true}) {
            std::vector<std::int32_t> ids;
            if (!diffattn_fuzz::succeeds_or_throws_error("encode", [&] { ids = tokenizer.encode(text, special); })) {
                finding("an accepted tokenizer refused to encode valid UTF-8: \"", text, "\"");
            }
            check_ids(tokenizer, ids, "an accepted tokenizer's ids");
        }
    }
}

void fuzz_text(const Tokenizer& tokenizer, std::string_view text) {
    const bool valid = diffattn::text::first_invalid_utf8(text) == std::string_view::npos;
    std::vector<std::int32_t> ids;
    const bool encoded =
        diffattn_fuzz::succeeds_or_throws_error("encode", [&] { ids = tokenizer.encode(text, false); });
    if (encoded != valid) finding(valid ? "encode refused valid UTF-8" : "encode accepted invalid UTF-8");
    if (!encoded) return;
    const std::string decoded = check_ids(tokenizer, ids, "encode");
    const bool added_token_matched = std::any_of(ids.begin(), ids.end(), [&](std::int32_t id) {
        const auto& added = tokenizer.added_tokens();
        return std::any_of(added.begin(), added.end(), [&](const auto& token) { return token.id == id; });
    });
    if (!added_token_matched && decoded != text) finding("decode(encode(text)) is not the text");
    const std::vector<std::int32_t> with_special = tokenizer.encode(text, true);
    if (!ids.empty() &&
        std::search(with_special.begin(), with_special.end(), ids.begin(), ids.end()) == with_special.end()) {
        finding("encode with the special tokens does not hold the ids without them");
    }
}

void fuzz_ids(const Tokenizer& tokenizer, const std::uint8_t* data, std::size_t size) {
    std::vector<std::int32_t> ids;
    bool all_known = true;
    for (std::size_t i = 0; i + 4 <= size; i += 4) {
        std::uint32_t bits;
        std::memcpy(&bits, data + i, 4);
        // Mostly ids near the vocabulary, sometimes any 32-bit value.
        const auto id = static_cast<std::int32_t>((bits >> 31) != 0 ? bits : bits % (tokenizer.vocab_size() + 8));
        all_known = all_known && tokenizer.id_to_token(id).has_value();
        ids.push_back(id);
    }
    for (const bool skip : {false, true}) {
        const bool decoded = decode_to_utf8(tokenizer, ids, skip).has_value();
        if (decoded != all_known) finding(all_known ? "decode refused known ids" : "decode accepted an unknown id");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t mode = data[0];
    if ((mode & 1) == 0) {
        fuzz_tokenizer_json(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
        return 0;
    }
    const Tokenizer& tokenizer = test_tokenizer((mode & 2) != 0);
    if ((mode & 4) == 0) {
        fuzz_text(tokenizer, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
    } else {
        fuzz_ids(tokenizer, data + 1, size - 1);
    }
    return 0;
}
