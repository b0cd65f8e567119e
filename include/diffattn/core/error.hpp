// Errors thrown by diffattn's public entry points.
//
// Configuration, shapes and files are checked where they enter the library, in every build
// type (Eigen itself checks nothing in Release), and the message names the function, the
// argument and the shapes: "diff_attention: K1 is 17x32 but Q1 is 9x64".
#pragma once

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

/// "17x32": the shape of a matrix-like object for error messages.
template <typename Matrix>
std::string shape_of(const Matrix& m) {
    return concat(m.rows(), "x", m.cols());
}

}  // namespace detail

/// Throws `ErrorType` with the concatenated message if `condition` is false.
template <typename ErrorType = Error, typename... Parts>
void require(bool condition, Parts&&... message_parts) {
    if (!condition) throw ErrorType(detail::concat(std::forward<Parts>(message_parts)...));
}

}  // namespace diffattn
