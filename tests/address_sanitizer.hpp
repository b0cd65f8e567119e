// Whether this test build runs under AddressSanitizer (the `asan` preset): tests whose work grows
// with the input use it to check the same property on a smaller input there, where every load
// and store is checked (about 10x slower).
#pragma once

namespace diffattn_test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace diffattn_test
