// Compares how Oniguruma (what Hugging Face tokenizers compiles tokenizer.json patterns with) and
// diffattn (PCRE2, after text/oniguruma_pattern.hpp's translation) split texts: the evidence behind
// docs/tokenizer.md's list of translated and refused constructs. A developer's tool, not part of the
// library or the tests (it needs libonig-dev, which nothing else does):
//
//   g++ -std=c++17 -O1 -Iinclude tools/compare_regex_engines.cpp -lonig -lpcre2-8 -o /tmp/compare_regex_engines
//   /tmp/compare_regex_engines '\v|[^\v]+' '(?m).+' ...
//
// For each pattern: "refused" with diffattn's message, or, for each text of a built-in list (every
// code point below U+0300 and a sample of others, alone and in short strings), the matches of both
// engines, printed where they differ ("same" when none does). Oniguruma runs with its default
// syntax and options, as the Rust onig crate's Regex::new (tokenizers' SysRegex) does.
#include "diffattn/text/oniguruma_pattern.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <oniguruma.h>
#include <pcre2.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace {

using Matches = std::vector<std::pair<std::size_t, std::size_t>>;

std::string utf8(char32_t c) {
    std::string s;
    if (c < 0x80) {
        s += char(c);
    } else if (c < 0x800) {
        s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        s += char(0xE0 | (c >> 12)), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
    } else {
        s += char(0xF0 | (c >> 18)), s += char(0x80 | ((c >> 12) & 0x3F)), s += char(0x80 | ((c >> 6) & 0x3F));
        s += char(0x80 | (c & 0x3F));
    }
    return s;
}

std::vector<std::string> texts() {
    std::vector<std::string> out;
    std::vector<char32_t> points;
    for (char32_t c = 1; c < 0x300; ++c) points.push_back(c);
    for (char32_t c : {0x0345, 0x0390, 0x03B0, 0x0587, 0x1680, 0x180E, 0x1E96, 0x1E9E, 0x2000, 0x2028, 0x2029, 0x202F,
                       0x205F, 0x2160, 0x212A, 0x2126, 0x3000, 0xFB00, 0xFB01, 0xFB05, 0xFB06, 0xFEFF, 0x1F600})
        points.push_back(c);
    for (char32_t c : points) out.push_back(utf8(c));
    for (const char* s : {".\n", "a\nb", "a\n\nb\n", "Hello world", "it's 'S 'LL 'll", "stra\xC3\x9F" "e STRASSE",
                          "\xEF\xAC\x81le fi", "ab\x0B\x0C\r\n", "x\xC2\x85y", " \t \n", "aaa", "abcabc", "123 4567",
                          "A\xE2\x80\xA8" "B", "\xE2\x85\xA0\xE2\x85\xA1 IV", "aaaa", "aaaaa", "a b#c\nd",
                          "\xCE\xA3\xCF\x83\xCF\x82", "\xC7\x84\xC7\x85\xC7\x86" "D\xC5\xBE"})
        out.push_back(s);
    return out;
}

Matches oniguruma_matches(regex_t* re, const std::string& text) {
    Matches out;
    OnigRegion* region = onig_region_new();
    const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
    const auto* end = begin + text.size();
    std::size_t start = 0;
    while (start <= text.size()) {
        const int r = onig_search(re, begin, end, begin + start, end, region, ONIG_OPTION_NONE);
        if (r < 0) break;
        const std::size_t b = std::size_t(region->beg[0]), e = std::size_t(region->end[0]);
        out.emplace_back(b, e);
        start = e > b ? e : e + 1;  // an empty match: step on (tokenizers' find_iter)
    }
    onig_region_free(region, 1);
    return out;
}

Matches pcre2_matches(pcre2_code* code, const std::string& text) {
    Matches out;
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
    std::size_t start = 0;
    while (start <= text.size()) {
        const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start, 0, data, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* v = pcre2_get_ovector_pointer(data);
        out.emplace_back(v[0], v[1]);
        start = v[1] > v[0] ? v[1] : v[1] + 1;
    }
    pcre2_match_data_free(data);
    return out;
}

std::string shown(const std::string& text, const Matches& m) {
    std::string s;
    for (const auto& [b, e] : m) s += "[" + std::to_string(b) + "," + std::to_string(e) + ")";
    std::string escaped;
    for (unsigned char c : text) {
        char hex[8];
        std::snprintf(hex, sizeof hex, c < 0x20 || c >= 0x7F ? "\\x%02X" : "%c", c);
        escaped += hex;
    }
    return "\"" + escaped + "\" " + s;
}

}  // namespace

int main(int argc, char** argv) {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
    const std::vector<std::string> all = texts();
    for (int a = 1; a < argc; ++a) {
        const std::string pattern = argv[a];
        std::printf("pattern %s\n", pattern.c_str());
        regex_t* re = nullptr;
        OnigErrorInfo info;
        const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
        int r = onig_new(&re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
        if (r != ONIG_NORMAL) {
            OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
            onig_error_code_to_str(message, r, &info);
            std::printf("  oniguruma: does not compile: %s\n", reinterpret_cast<char*>(message));
        }
        std::string translated;
        try {
            translated = diffattn::text::pcre2_pattern_from_oniguruma(pattern, "pattern");
        } catch (const diffattn::Error& e) {
            std::printf("  diffattn: refused: %s\n", e.what());
            if (re != nullptr) onig_free(re);
            continue;
        }
        int error = 0;
        PCRE2_SIZE offset = 0;
        pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                         PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
        if (code == nullptr) {
            std::printf("  diffattn: PCRE2 does not compile %s\n", translated.c_str());
            if (re != nullptr) onig_free(re);
            continue;
        }
        if (re == nullptr) {
            std::printf("  DIFFERENT: diffattn accepts what Oniguruma does not compile (as %s)\n", translated.c_str());
            pcre2_code_free(code);
            continue;
        }
        int differences = 0;
        for (const std::string& text : all) {
            const Matches o = oniguruma_matches(re, text), q = pcre2_matches(code, text);
            if (o != q && differences++ < 8) {
                std::printf("  DIFFERENT %s: oniguruma %s, diffattn %s\n", shown(text, {}).c_str(), shown("", o).c_str(),
                            shown("", q).c_str());
            }
        }
        std::printf("  %s (%d of %zu texts differ; translated %s)\n", differences ? "DIFFERENT" : "same", differences,
                    all.size(), translated.c_str());
        pcre2_code_free(code);
        onig_free(re);
    }
    onig_end();
    return 0;
}
