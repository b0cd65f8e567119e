// The bad-input tests' view of an error: the message of the exception an action throws, and a
// check that it holds the key words the documentation promises. Shared by the bad-input catalogue
// (tests/catalogue) and the tokenizer tests (tests/text).
#pragma once

#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>

/// The message of the E thrown by `action`; fails the test if it throws nothing. Any other
/// exception type escapes and fails the test too (the sibling error classes do not catch each other).
template <typename E, typename Action>
std::string message_of(Action&& action) {
    try {
        action();
    } catch (const E& e) {
        return e.what();
    }
    FAIL("no exception was thrown");
    return {};
}

/// Checks that `message` holds every fragment.
inline void check_words(const std::string& message, std::initializer_list<const char*> fragments) {
    INFO("message: " << message);
    for (const char* fragment : fragments) {
        INFO("expected fragment: " << fragment);
        CHECK(message.find(fragment) != std::string::npos);
    }
}

/// CHECK_ERROR(ErrorType, expression, "fragment", ...): `expression` throws ErrorType, whose message
/// holds every fragment.
#define CHECK_ERROR(ErrorType, expression, ...) \
    check_words(message_of<ErrorType>([&] { (void)(expression); }), {__VA_ARGS__})
