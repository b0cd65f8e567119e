// GPT-2's byte-level alphabet: each of the 256 byte values stands for one printable character, so
// that any byte string is a string of vocabulary symbols (docs/tokenizer.md).
//
// Printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the
// other 68 bytes, in increasing order, for U+0100, U+0101, ... U+0143 (so ' ' is "Ġ" U+0120 and
// '\n' is "Ċ" U+010A). The tokenizer keys its vocabulary by the bytes a token stands for, so
// encoding never builds these characters; they are needed to read a vocabulary and to decode.
#pragma once

#include "diffattn/text/utf8.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace diffattn::text {

namespace detail {

/// byte -> code point, and code point (< 0x144) -> byte or -1, built once.
struct ByteLevelTables {
    std::array<char32_t, 256> char_of_byte{};
    std::array<std::int16_t, 0x144> byte_of_char{};

    ByteLevelTables() {
        byte_of_char.fill(-1);
        char32_t next_unprintable = 0x100;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const char32_t c = printable ? static_cast<char32_t>(b) : next_unprintable++;
            char_of_byte[static_cast<std::size_t>(b)] = c;
            byte_of_char[c] = static_cast<std::int16_t>(b);
        }
    }
};

inline const ByteLevelTables& byte_level_tables() {
    static const ByteLevelTables tables;
    return tables;
}

}  // namespace detail

/// The byte-level character (as a code point) that stands for `byte`.
inline char32_t byte_level_char(unsigned char byte) { return detail::byte_level_tables().char_of_byte[byte]; }

/// `bytes` written in the byte-level alphabet (what a tokenizer.json vocabulary holds).
inline std::string byte_level_encode(std::string_view bytes) {
    std::string out;
    out.reserve(2 * bytes.size());
    for (const char b : bytes) append_utf8(byte_level_char(static_cast<unsigned char>(b)), out);
    return out;
}

/// The bytes a byte-level string stands for, or nothing if one of its characters is not in the
/// alphabet. `token` must be valid UTF-8.
inline std::optional<std::string> byte_level_decode(std::string_view token) {
    const auto& byte_of_char = detail::byte_level_tables().byte_of_char;
    std::string bytes;
    bytes.reserve(token.size());
    for (std::size_t pos = 0; pos < token.size();) {
        const char32_t c = next_code_point(token, pos);
        if (c >= byte_of_char.size() || byte_of_char[c] < 0) return std::nullopt;
        bytes += static_cast<char>(byte_of_char[c]);
    }
    return bytes;
}

/// The bytes the ByteLevel decoder turns a token into: byte_level_decode(token) when every
/// character is in the alphabet, else the token's own UTF-8 bytes (the rule of Hugging Face's
/// ByteLevel decoder, applied to vocabulary and added tokens alike).
inline std::string byte_level_token_bytes(std::string_view token) {
    std::optional<std::string> bytes = byte_level_decode(token);
    return bytes ? std::move(*bytes) : std::string(token);
}

}  // namespace diffattn::text
