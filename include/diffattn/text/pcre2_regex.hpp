// A compiled PCRE2 regular expression (UTF + UCP, JIT-compiled when PCRE2 has a JIT), immutable
// and safe to share between threads: each match call allocates its own match data.
//
// Linking: diffattn is header-only, but this header calls libpcre2-8, so a program that includes
// it (or diffattn/text/tokenizer.hpp) links PCRE2: `pkg-config --cflags --libs libpcre2-8`, or
// in CMake the in-tree target diffattn::text (docs/tokenizer.md). The 8-bit functions are called
// by their explicit _8 names, so PCRE2_CODE_UNIT_WIDTH may be anything in the including program.
#pragma once

#include "diffattn/core/error.hpp"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

namespace diffattn::text {

namespace detail {

inline std::string pcre2_error_message(int code) {
    PCRE2_UCHAR8 buffer[256];
    const int length = pcre2_get_error_message_8(code, buffer, sizeof buffer);
    return length < 0 ? "PCRE2 error " + std::to_string(code)
                      : std::string(reinterpret_cast<const char*>(buffer), static_cast<std::size_t>(length));
}

struct Pcre2CodeDeleter {
    void operator()(pcre2_code_8* code) const { pcre2_code_free_8(code); }
};
struct Pcre2MatchDataDeleter {
    void operator()(pcre2_match_data_8* data) const { pcre2_match_data_free_8(data); }
};
struct Pcre2MatchContextDeleter {
    void operator()(pcre2_match_context_8* context) const { pcre2_match_context_free_8(context); }
};

}  // namespace detail

/// The matching steps (PCRE2's match limit) a text may spend, over every Pcre2Regex::for_each_match
/// on it and on its pieces (MatchBudget): kMatchStepsBase + kMatchStepsPerByte n for n bytes. PCRE2's
/// limit holds for one match, and a pattern that backtracks over the rest of the text at every match
/// (`(?:a|b)*c|.` on a run of "a") costs the square of the text's length in all; the tokenizers'
/// patterns need at most about 20 steps a byte (docs/tokenizer.md, "Regular expressions").
inline constexpr std::uint64_t kMatchStepsBase = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kMatchStepsPerByte = 256;
/// The first limit each match is tried with; it doubles until the match ends or the budget does.
inline constexpr std::uint64_t kFirstMatchLimit = 64;

/// The matching steps left to a text of `text_bytes` bytes (kMatchStepsPerByte), shared by every
/// match on it and its pieces, over every pre-tokenizer step; and the PCRE2 match context that
/// carries each try's limit, made once for the text rather than once per piece.
class MatchBudget {
public:
    explicit MatchBudget(std::size_t text_bytes)
        : text_bytes_(text_bytes), steps_(kMatchStepsBase + kMatchStepsPerByte * text_bytes),
          context_(pcre2_match_context_create_8(nullptr)) {
        require<Error>(context_ != nullptr, "MatchBudget: out of memory for a PCRE2 match context");
    }

    /// Takes up to `limit` steps for one try (fewer when fewer are left, and at most 2^32 - 1, PCRE2's
    /// type) and sets them as context()'s match limit. Error naming `what` and the place (byte
    /// `start` of a piece of `piece_bytes`) when none are left.
    void take(std::uint64_t limit, const char* what, std::size_t start, std::size_t piece_bytes) {
        require<Error>(spent_ < steps_, what, ": the regex took more than ", steps_, " matching steps on a text of ",
                       text_bytes_, " bytes (", kMatchStepsPerByte, " a byte), at byte ", start, " of a piece of ",
                       piece_bytes, ": it backtracks over much of the text at each match");
        constexpr std::uint64_t kMaxLimit = std::numeric_limits<std::uint32_t>::max();
        const std::uint64_t taken = std::min({limit, steps_ - spent_, kMaxLimit});
        spent_ += taken;
        pcre2_set_match_limit_8(context_.get(), static_cast<std::uint32_t>(taken));
    }

    /// The match context whose limit the last take() set.
    pcre2_match_context_8* context() const { return context_.get(); }

private:
    std::size_t text_bytes_;
    std::uint64_t steps_;
    std::uint64_t spent_ = 0;
    std::unique_ptr<pcre2_match_context_8, detail::Pcre2MatchContextDeleter> context_;
};

class Pcre2Regex {
public:
    /// Compiles `pattern` (PCRE2 syntax, UTF-8). A syntax error is a ConfigError naming `source`,
    /// the offset and PCRE2's message.
    Pcre2Regex(std::string_view pattern, const std::string& source) {
        int error = 0;
        PCRE2_SIZE offset = 0;
        pcre2_code_8* code = pcre2_compile_8(reinterpret_cast<PCRE2_SPTR8>(pattern.data()), pattern.size(),
                                             PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
        if (code == nullptr) {
            throw ConfigError(diffattn::detail::concat(source, ": the regex does not compile (PCRE2) at offset ", offset, ": ",
                                             detail::pcre2_error_message(error), "; pattern: ", pattern));
        }
        code_.reset(code);
        // Without a JIT (PCRE2 built without one, or no executable memory) the interpreter runs.
        jit_ = pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE) == 0;
        std::uint32_t min_length = 0;
        pcre2_pattern_info_8(code, PCRE2_INFO_MINLENGTH, &min_length);
        can_match_empty_ = min_length == 0;
    }

    /// True when the pattern may match the empty string (PCRE2's lower bound on a match length).
    bool can_match_empty() const { return can_match_empty_; }
    bool jit() const { return jit_; }

    /// Calls on_match(begin, end) for each match in `subject`, left to right, not overlapping, each
    /// match the one PCRE2 (like Oniguruma, a backtracking engine) prefers at the leftmost position.
    /// The pattern must not match the empty string (can_match_empty() false: the caller refuses
    /// such patterns, whose empty matches Oniguruma and PCRE2 step over differently). `subject`
    /// must be valid UTF-8: the caller checks it once, PCRE2 does not check it again. A matching
    /// failure (a resource limit, or no steps left in `budget`) is an Error naming `what`.
    ///
    /// PCRE2 reports no step count, so each match starts with a limit of kFirstMatchLimit steps,
    /// doubled after each try that reaches it, and every try is charged its whole limit: the budget
    /// is spent at most twice as fast as the steps are, plus kFirstMatchLimit per match (a try that
    /// overflows the JIT's stack is redone by the interpreter under the same limit, uncharged).
    template <typename OnMatch>
    void for_each_match(std::string_view subject, const char* what, MatchBudget& budget, OnMatch&& on_match) const {
        const std::unique_ptr<pcre2_match_data_8, detail::Pcre2MatchDataDeleter> data(
            pcre2_match_data_create_from_pattern_8(code_.get(), nullptr));
        require<Error>(data != nullptr, what, ": out of memory for PCRE2 match data");
        const auto* text = reinterpret_cast<PCRE2_SPTR8>(subject.data());
        PCRE2_SIZE start = 0;
        while (start < subject.size()) {
            int rc = PCRE2_ERROR_MATCHLIMIT;
            for (std::uint64_t limit = kFirstMatchLimit; rc == PCRE2_ERROR_MATCHLIMIT; limit *= 2) {
                budget.take(limit, what, start, subject.size());
                rc = pcre2_match_8(code_.get(), text, subject.size(), start, PCRE2_NO_UTF_CHECK, data.get(),
                                   budget.context());
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // the interpreter keeps its backtracking on the heap
                    rc = pcre2_match_8(code_.get(), text, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                                       data.get(), budget.context());
                }
            }
            if (rc == PCRE2_ERROR_NOMATCH) return;
            require<Error>(rc >= 0, what, ": the regex match failed at byte ", start, " of ", subject.size(), ": ",
                           detail::pcre2_error_message(rc));
            const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer_8(data.get());
            require<Error>(ovector[1] > ovector[0], what, ": the regex matched the empty string at byte ", ovector[0]);
            on_match(static_cast<std::size_t>(ovector[0]), static_cast<std::size_t>(ovector[1]));
            start = ovector[1];
        }
    }

    /// True when the pattern matches at exactly `pos` of `subject` (anchored there).
    bool matches_at(std::string_view subject, std::size_t pos) const {
        const std::unique_ptr<pcre2_match_data_8, detail::Pcre2MatchDataDeleter> data(
            pcre2_match_data_create_from_pattern_8(code_.get(), nullptr));
        require<Error>(data != nullptr, "Pcre2Regex::matches_at: out of memory for PCRE2 match data");
        return pcre2_match_8(code_.get(), reinterpret_cast<PCRE2_SPTR8>(subject.data()), subject.size(), pos,
                             PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, data.get(), nullptr) >= 0;
    }

private:
    std::unique_ptr<pcre2_code_8, detail::Pcre2CodeDeleter> code_;
    bool jit_ = false;
    bool can_match_empty_ = false;
};

}  // namespace diffattn::text
