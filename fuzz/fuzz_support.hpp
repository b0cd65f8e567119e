// Shared helpers of the fuzz targets (fuzz/fuzz_*.cpp): how a finding is reported, and a reader
// that turns the fuzzer's bytes into numbers.
//
// Every target is a LLVMFuzzerTestOneInput: built with -fsanitize=fuzzer it is a libFuzzer
// binary, built with replay_main.cpp it replays files (the ctest replay of the seed corpus).
// A finding is an abort(): libFuzzer saves the input, the replay test fails.
#pragma once

#include "diffattn/core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace diffattn_fuzz {

/// Reports a finding (prints it) and aborts, so that the fuzzer keeps the input.
template <typename... Parts>
[[noreturn]] void finding(Parts&&... parts) {
    const std::string message = diffattn::detail::concat(std::forward<Parts>(parts)...);
    std::fprintf(stderr, "\n*** FUZZ FINDING: %s\n", message.c_str());
    std::fflush(stderr);
    std::abort();
}

/// Runs `body`; a diffattn::Error is the one accepted failure (returns false), any other exception
/// is a finding. Returns true when `body` returned normally.
template <typename Body>
bool succeeds_or_throws_error(const char* what, Body&& body) {
    try {
        body();
        return true;
    } catch (const diffattn::Error&) {
        return false;
    } catch (const std::exception& e) {
        finding(what, ": exception that is not a diffattn::Error: ", e.what());
    } catch (...) {
        finding(what, ": exception that is not a std::exception");
    }
}

/// Reads the fuzzer's bytes front to back. Past the end it does not return zeros (the fuzzer
/// would then need long inputs for big matrices) but continues with a xorshift stream seeded
/// by a hash of the whole input, so every input still decodes deterministically.
class ByteReader {
public:
    ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {
        std::uint64_t hash = 1469598103934665603ull;  // FNV-1a
        for (std::size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 1099511628211ull;
        state_ = hash | 1;
    }

    std::uint8_t byte() {
        if (position_ < size_) return data_[position_++];
        state_ ^= state_ << 13;
        state_ ^= state_ >> 7;
        state_ ^= state_ << 17;
        return static_cast<std::uint8_t>(state_ >> 56);
    }

    /// Two bytes, little-endian.
    std::uint16_t u16() {
        const std::uint16_t low = byte();
        return static_cast<std::uint16_t>(low | (byte() << 8));
    }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t position_ = 0;
    std::uint64_t state_ = 1;
};

}  // namespace diffattn_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
