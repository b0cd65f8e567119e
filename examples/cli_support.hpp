// Command-line plumbing shared by the example programs (diffattn-forward, diffattn-analyze): a
// usage error, strict integers, token ids, and main's error handling, so that every program
// reports every error the same way: a message naming the problem and exit status 2.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace cli {

/// A command-line problem: printed with the usage hint, exit status 2.
struct UsageError {
    std::string message;
};

/// The integer `text` of `what` in [min, max]: decimal digits only, no sign, no spaces (every
/// integer of a command line goes through here, so all are read alike).
inline long long parse_integer(const std::string& what, const std::string& text, long long min, long long max) {
    long long value = 0;
    const char* first = text.data();
    const char* last = text.data() + text.size();
    const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
    const auto [end, error] = std::from_chars(first, last, value);
    if (!digits || error != std::errc() || end != last || value < min || value > max) {
        throw UsageError{what + " needs an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                         "], got \"" + text + "\""};
    }
    return value;
}

/// The number `text` of `what` in [min, max]: a whole decimal number ("0.8", "1e-3", no spaces, no
/// "inf" or "nan").
inline double parse_real(const std::string& what, const std::string& text, double min, double max) {
    double value = 0;
    const char* first = text.data();
    const char* last = text.data() + text.size();
    const bool plain = !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos;
    const auto [end, error] = std::from_chars(first, last, value);
    if (!plain || error != std::errc() || end != last || !(value >= min && value <= max)) {
        std::ostringstream range;
        range << "[" << min << ", " << max << "]";
        throw UsageError{what + " needs a number in " + range.str() + ", got \"" + text + "\""};
    }
    return value;
}

/// Token ids from "3 14 15" or "3,14,15"; each must be an integer in [0, vocab_size).
inline std::vector<std::int32_t> parse_tokens(const std::string& text, diffattn::Index vocab_size) {
    std::string spaced = text;
    std::replace(spaced.begin(), spaced.end(), ',', ' ');
    std::istringstream in(spaced);
    std::vector<std::int32_t> tokens;
    std::string word;
    while (in >> word) {
        const std::string what = "--tokens: token " + std::to_string(tokens.size()) + " (an id of the vocabulary)";
        tokens.push_back(static_cast<std::int32_t>(parse_integer(what, word, 0, vocab_size - 1)));
    }
    if (tokens.empty()) throw UsageError{"--tokens: no token ids in \"" + text + "\""};
    return tokens;
}

/// Walks a command line flag by flag, alike in every program: `--help` or `-h` prints the help
/// and exits 0; a flag given twice, or a flag without its value, is a UsageError.
class Flags {
public:
    Flags(int argc, char** argv, void (*print_help)(std::ostream&)) : argc_(argc), argv_(argv), help_(print_help) {}

    /// Moves to the next flag; false when there is none left.
    bool next() {
        if (++i_ >= argc_) return false;
        flag_ = argv_[i_];
        if (flag_ == "--help" || flag_ == "-h") {
            help_(std::cout);
            std::exit(0);
        }
        if (!seen_.insert(flag_).second) throw UsageError{flag_ + " is given more than once; give each flag once"};
        return true;
    }
    const std::string& flag() const { return flag_; }
    /// The value that follows the current flag.
    std::string value() {
        if (i_ + 1 >= argc_) throw UsageError{flag_ + " needs a value"};
        return argv_[++i_];
    }
    /// True if `flag` was given (among those read so far).
    bool given(const std::string& flag) const { return seen_.count(flag) != 0; }

private:
    int argc_;
    char** argv_;
    void (*help_)(std::ostream&);
    int i_ = 0;
    std::string flag_;
    std::set<std::string> seen_;
};

/// Runs `body` (returning the exit status) as a program's main: every error is a message on
/// stderr, prefixed with the program's name, and exit status 2. A write past the file-size limit
/// (ulimit -f) raises SIGXFSZ, which by default kills the process with no message and leaves the
/// temporary file of io/replace_file.hpp behind: ignored, the write fails with EFBIG instead, a
/// FileError that removes the temporary file and names the reason.
template <typename Body>
int run_main(const char* program, Body&& body) {
    std::signal(SIGXFSZ, SIG_IGN);
    try {
        return body();
    } catch (const UsageError& e) {
        std::cerr << program << ": " << e.message << "\n(see " << program << " --help)\n";
    } catch (const diffattn::Error& e) {  // model directory, config.json, tensor, sizes, files
        std::cerr << program << ": " << e.what() << "\n";
    } catch (const std::bad_alloc&) {  // sizes are checked against the machine, but its memory may be in use
        std::cerr << program << ": out of memory\n";
    } catch (const std::exception& e) {
        std::cerr << program << ": " << e.what() << "\n";
    }
    return 2;
}

}  // namespace cli
