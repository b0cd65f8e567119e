// detail::widen, compiled for the build machine's vector ISA (diffattn::native, as the examples and
// benchmarks are): its F16C / AVX2 paths against Eigen's own scalar conversion, entry by entry and
// bit for bit, over every finite, infinite, subnormal and NaN pattern of the 16-bit formats, at
// every length modulo the 8-wide step. (The portable test builds cover the scalar path.)
#include "diffattn/kernels/stored_rows.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace diffattn;

namespace {

template <typename S>
void check_every_pattern() {
    std::vector<S> all(65536);
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
        all[bits] = Eigen::numext::bit_cast<S>(static_cast<std::uint16_t>(bits));
    }
    std::vector<float> widened(all.size() + 8);
    for (Index offset : {Index(0), Index(1), Index(5)}) {  // unaligned starts, all tail lengths
        std::fill(widened.begin(), widened.end(), 12345.0f);
        const auto n = static_cast<Index>(all.size()) - offset;
        detail::widen(all.data() + offset, widened.data(), n);
        Index mismatches = 0;
        for (Index i = 0; i < n; ++i) {
            const float expected = static_cast<float>(all[static_cast<std::size_t>(i + offset)]);
            const float got = widened[static_cast<std::size_t>(i)];
            const bool same = std::isnan(expected) ? std::isnan(got) : std::memcmp(&expected, &got, sizeof got) == 0;
            if (!same) ++mismatches;
        }
        CHECK(mismatches == 0);
        CHECK(widened[static_cast<std::size_t>(n)] == 12345.0f);  // nothing past n written
    }
}

}  // namespace

TEST_CASE("widen: every f16 and bf16 pattern as Eigen converts it, native build", "[kernels][half_kv]") {
    check_every_pattern<Eigen::half>();
    check_every_pattern<Eigen::bfloat16>();
}
