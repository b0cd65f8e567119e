// Argument checks for public entry points (run in every build type).
//
// Messages follow one pattern: "<function>: <argument> is <rows>x<cols> but <other> is <rows>x<cols>".
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>

namespace diffattn::detail {

/// A matrix argument as error messages name it, printed "K1 is 17x32" (only when a check fails).
struct NamedShape {
    const char* name;
    Index rows;
    Index cols;
};

template <typename Matrix>
NamedShape named(const char* name, const Matrix& m) {
    return {name, m.rows(), m.cols()};
}

inline std::ostream& operator<<(std::ostream& out, const NamedShape& a) {
    return out << a.name << " is " << Shape{a.rows, a.cols};
}

/// Throws ShapeError unless a and b have the same number of columns.
inline void require_same_cols(const char* function, const NamedShape& a, const NamedShape& b) {
    require<ShapeError>(a.cols == b.cols, function, ": ", a, " but ", b,
                        " (column counts must match)");
}

/// Throws ShapeError unless a and b have the same number of rows.
inline void require_same_rows(const char* function, const NamedShape& a, const NamedShape& b) {
    require<ShapeError>(a.rows == b.rows, function, ": ", a, " but ", b,
                        " (row counts must match)");
}

/// Throws ShapeError unless a and b have the same shape.
inline void require_same_shape(const char* function, const NamedShape& a, const NamedShape& b) {
    require<ShapeError>(a.rows == b.rows && a.cols == b.cols, function, ": ", a, " but ",
                        b, " (shapes must match)");
}

/// Throws ShapeError unless `m` is exactly rows x cols.
inline void require_shape(const char* function, const NamedShape& m, Index rows, Index cols) {
    require<ShapeError>(m.rows == rows && m.cols == cols, function, ": ", m, " but must be ", rows,
                        "x", cols);
}

/// The bytes [first, last) of a strided row-major view (operands of other layouts, such as
/// kernels/key_rows.hpp's blocked keys, overload it beside their type).
template <typename M>
std::pair<const unsigned char*, const unsigned char*> memory_span(const M& m) {
    const auto* first = reinterpret_cast<const unsigned char*>(m.data());
    const auto* last = reinterpret_cast<const unsigned char*>(m.data() + (m.rows() - 1) * m.outerStride() +
                                                              (m.cols() - 1) * m.innerStride());
    return {first, last + sizeof(*m.data())};
}

/// True when the memory spans of two views overlap.
template <typename A, typename B>
bool memory_overlaps(const A& a, const B& b) {
    if (a.size() == 0 || b.size() == 0) return false;
    const auto [a_begin, a_end] = memory_span(a);
    const auto [b_begin, b_end] = memory_span(b);
    return std::less<>{}(a_begin, b_end) && std::less<>{}(b_begin, a_end);
}

/// Throws ShapeError if the output shares memory with an input (outputs are written while
/// inputs are still being read, so aliasing would give a silently wrong answer).
template <typename Out, typename In>
void require_no_alias(const char* function, const char* out_name, const Out& out, const char* in_name,
                      const In& in) {
    require<ShapeError>(!memory_overlaps(out, in), function, ": ", out_name, " overlaps the memory of ", in_name,
                        "; the output must not alias an input");
}

/// Throws OptionError unless `value` is finite.
inline void require_finite(const char* function, const char* name, double value) {
    require<OptionError>(std::isfinite(value), function, ": ", name, " must be finite, got ", value);
}

}  // namespace diffattn::detail
