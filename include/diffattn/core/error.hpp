// Errors thrown by diffattn's public entry points.
//
// Configuration, shapes and files are checked where they enter the library, in every build
// type (Eigen itself checks nothing in Release), and the message names the function, the
// argument and the shapes: "diff_attention: K1 is 17x32 but Q1 is 9x64".
#pragma once

#include <cstddef>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace diffattn {

/// Base of every diffattn error: bad shapes, bad options, bad configuration.
class Error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// Shapes of arguments disagree, or a dimension is out of range.
class ShapeError : public Error {
public:
    using Error::Error;
};

/// An option, or a combination of options, is not supported.
class OptionError : public Error {
public:
    using Error::Error;
};

/// A configuration value (config.json or a config struct) is invalid.
class ConfigError : public Error {
public:
    using Error::Error;
};

/// A file is missing, unreadable or malformed.
class FileError : public Error {
public:
    using Error::Error;
};

namespace detail {

/// Concatenates its arguments with operator<< into a std::string.
template <typename... Parts>
std::string concat(Parts&&... parts) {
    std::ostringstream out;
    (out << ... << std::forward<Parts>(parts));
    return out.str();
}

/// A matrix shape in an error message, printed "17x32". It holds two numbers, so that passing it
/// to require() costs nothing: the text is built only when a check fails and a message is needed.
struct Shape {
    std::ptrdiff_t rows;
    std::ptrdiff_t cols;
};
inline std::ostream& operator<<(std::ostream& out, const Shape& shape) { return out << shape.rows << "x" << shape.cols; }

/// The shape of a matrix-like object, for error messages.
template <typename Matrix>
Shape shape_of(const Matrix& m) {
    return {static_cast<std::ptrdiff_t>(m.rows()), static_cast<std::ptrdiff_t>(m.cols())};
}

}  // namespace detail

/// Throws `ErrorType` with the concatenated message if `condition` is false. The parts are formatted
/// only then: pass numbers, names and Shape values, not strings built in advance, so that a check
/// that passes formats nothing. Kernels check their arguments on every call, decode steps included,
/// and a string stream per argument made check_differential cost most of a one-token call.
template <typename ErrorType = Error, typename... Parts>
void require(bool condition, Parts&&... message_parts) {
    if (!condition) throw ErrorType(detail::concat(std::forward<Parts>(message_parts)...));
}

}  // namespace diffattn
