// A count with its noun for error messages: "1 byte", "2 bytes", "0 tensors".
#pragma once

#include <cstdint>
#include <ostream>

namespace diffattn::detail {

/// `count` followed by `noun`, plural unless count is 1: `concat(Counted{n, "byte"})`. Holds
/// a number and a pointer, so a check that passes formats nothing.
struct Counted {
    std::uint64_t count;
    const char* noun;  ///< singular, made plural with "s"
};

inline std::ostream& operator<<(std::ostream& out, const Counted& counted) {
    return out << counted.count << ' ' << counted.noun << (counted.count == 1 ? "" : "s");
}

/// "N bytes" ("1 byte").
inline Counted bytes_count(std::uint64_t count) noexcept { return {count, "byte"}; }

}  // namespace diffattn::detail
