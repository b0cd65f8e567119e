// UTF-8: validation, code point stepping and lossy decoding (docs/tokenizer.md).
//
// One classifier, utf8_step, decides what the bytes at a position hold; encode's validation, the
// decoder's replacement of invalid bytes and the streaming decoder's "wait for more bytes" all use
// it, so the three agree byte for byte. Well-formed sequences are those of the Unicode Standard's
// table 3-7 (no overlongs, no surrogates, nothing above U+10FFFF). Invalid bytes are replaced by
// U+FFFD one "maximal subpart" at a time, the W3C / Unicode practice that Rust's
// String::from_utf8_lossy (what Hugging Face tokenizers' decoders use) follows.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace diffattn::text {

/// What the bytes at a position of a UTF-8 string hold.
struct Utf8Step {
    enum Kind {
        complete,    ///< a well-formed sequence of `length` bytes
        incomplete,  ///< the `length` remaining bytes are a proper prefix of a well-formed sequence
        invalid      ///< `length` bytes (>= 1, a maximal subpart) that start no well-formed sequence
    };
    Kind kind;
    std::size_t length;
};

/// Classifies the bytes of `s` from `pos` (< s.size()).
inline Utf8Step utf8_step(std::string_view s, std::size_t pos) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char lead = byte(pos);
    if (lead < 0x80) return {Utf8Step::complete, 1};
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the range of the second byte (table 3-7)
    if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        if (lead == 0xE0) low = 0xA0;   // no overlongs
        if (lead == 0xED) high = 0x9F;  // no surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        if (lead == 0xF0) low = 0x90;   // no overlongs
        if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
    } else {
        return {Utf8Step::invalid, 1};  // a continuation byte, C0, C1 or F5..FF
    }
    for (std::size_t i = 1; i < length; ++i) {
        if (pos + i == s.size()) return {Utf8Step::incomplete, i};
        const unsigned char c = byte(pos + i);
        const bool ok = i == 1 ? (c >= low && c <= high) : (c >= 0x80 && c <= 0xBF);
        if (!ok) return {Utf8Step::invalid, i};
    }
    return {Utf8Step::complete, length};
}

/// The offset of the first byte of `s` that is not part of a well-formed sequence (a truncated
/// sequence at the end counts), or std::string_view::npos if `s` is valid UTF-8.
inline std::size_t first_invalid_utf8(std::string_view s) {
    for (std::size_t pos = 0; pos < s.size();) {
        const Utf8Step step = utf8_step(s, pos);
        if (step.kind != Utf8Step::complete) return pos;
        pos += step.length;
    }
    return std::string_view::npos;
}

/// The code point of the well-formed sequence at `pos`; advances `pos` past it. `s` must be valid.
inline char32_t next_code_point(std::string_view s, std::size_t& pos) {
    const auto byte = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(s[i])); };
    const char32_t lead = byte(pos);
    if (lead < 0x80) {
        pos += 1;
        return lead;
    }
    const std::size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    char32_t cp = lead & (0x7F >> length);
    for (std::size_t i = 1; i < length; ++i) cp = (cp << 6) | (byte(pos + i) & 0x3F);
    pos += length;
    return cp;
}

/// The offset where the code point that ends at `end` (> 0) starts. `s` must be valid.
inline std::size_t previous_code_point_start(std::string_view s, std::size_t end) {
    std::size_t pos = end - 1;
    while (pos > 0 && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) --pos;
    return pos;
}

/// Appends the UTF-8 encoding of code point `cp` (<= U+10FFFF, not a surrogate) to `out`.
inline void append_utf8(char32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

/// U+FFFD REPLACEMENT CHARACTER, which stands for each maximal subpart of invalid bytes.
inline constexpr std::string_view utf8_replacement = "\xEF\xBF\xBD";

/// Appends `bytes` to `out` as valid UTF-8, each maximal invalid subpart replaced by U+FFFD.
/// A truncated sequence at the end is replaced too if `final`; otherwise it is left unconsumed,
/// since more bytes may complete it. Returns the number of bytes consumed (bytes.size() if final).
inline std::size_t append_utf8_lossy(std::string_view bytes, bool final, std::string& out) {
    std::size_t pos = 0;
    while (pos < bytes.size()) {
        const Utf8Step step = utf8_step(bytes, pos);
        if (step.kind == Utf8Step::complete) {
            out.append(bytes.data() + pos, step.length);
        } else if (step.kind == Utf8Step::invalid || final) {
            out += utf8_replacement;
        } else {
            break;  // incomplete: wait for the next bytes
        }
        pos += step.length;
    }
    return pos;
}

}  // namespace diffattn::text
