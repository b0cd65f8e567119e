// The weight formats (docs/math.md §10): the reference codecs against llama.cpp's blocks (an
// independent transcription, tools/make_weight_goldens.py), LinearWeight's storage, and linear()
// with stored weights against the product of the decoded weights.
#include "stored_weight_cases.hpp"

#include "../error_messages.hpp"

#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/weight_blocks.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/io/detail/float_formats.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

using namespace diffattn;

namespace {

struct CodecGolden {
    std::vector<float> weights;
    std::string q8_0, q4_0;  // hex; q4_0 empty where the row is beyond its range
    std::vector<std::uint16_t> bf16;
};

std::vector<CodecGolden> codec_goldens() {
    std::ifstream in(DIFFATTN_TEST_DATA_DIR "/weights/codec_goldens.json");
    REQUIRE(in.good());
    const nlohmann::json json = nlohmann::json::parse(in);
    std::vector<CodecGolden> out;
    for (const nlohmann::json& row : json.at("rows")) {
        CodecGolden g;
        for (const auto& bits : row.at("weights")) g.weights.push_back(detail::float_from_bits(bits.get<std::uint32_t>()));
        g.q8_0 = row.at("q8_0").get<std::string>();
        if (!row.at("q4_0").is_null()) g.q4_0 = row.at("q4_0").get<std::string>();
        for (const auto& bits : row.at("bf16")) g.bf16.push_back(bits.get<std::uint16_t>());
        out.push_back(std::move(g));
    }
    return out;
}

std::string hex(const unsigned char* bytes, Index count) {
    static const char* digits = "0123456789abcdef";
    std::string text;
    for (Index i = 0; i < count; ++i) {
        text += digits[bytes[i] >> 4];
        text += digits[bytes[i] & 15];
    }
    return text;
}

/// The weights a q8_0 / q4_0 row stands for, decoded here from the golden's bytes by the format's
/// definition (docs/math.md §10), independently of weight_blocks.hpp: q times the f16 scale.
std::vector<float> golden_weights(const std::string& hex_bytes, WeightFormat format, Index cols) {
    std::vector<unsigned char> bytes;
    for (std::size_t i = 0; i < hex_bytes.size(); i += 2) {
        bytes.push_back(static_cast<unsigned char>(std::stoi(hex_bytes.substr(i, 2), nullptr, 16)));
    }
    std::vector<float> out;
    const Index block = format == WeightFormat::q8_0 ? 34 : 18;
    for (Index b = 0; b < cols / 32; ++b) {
        const unsigned char* p = bytes.data() + b * block;
        const float d = detail::f16_bits_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
        for (Index j = 0; j < 32; ++j) {
            const int q = format == WeightFormat::q8_0 ? static_cast<int>(static_cast<std::int8_t>(p[2 + j]))
                                                       : (j < 16 ? (p[2 + j] & 15) : (p[2 + j - 16] >> 4)) - 8;
            out.push_back(static_cast<float>(q) * d);
        }
    }
    return out;
}

}  // namespace

TEST_CASE("the codecs write llama.cpp's blocks and bfloat16 bits", "[layers][weights]") {
    const std::vector<CodecGolden> goldens = codec_goldens();
    REQUIRE(goldens.size() >= 20);
    for (std::size_t i = 0; i < goldens.size(); ++i) {
        const CodecGolden& g = goldens[i];
        const Index cols = static_cast<Index>(g.weights.size());
        INFO("golden row " << i);
        for (WeightFormat format : stored_weight_test::kStoredFormats) {
            const std::string expected = format == WeightFormat::q8_0 ? g.q8_0 : g.q4_0;
            if (format == WeightFormat::q4_0 && expected.empty()) {  // beyond q4_0's f16 scale
                CHECK(detail::first_unstorable_weight(format, g.weights.data(), cols) >= 0);
                continue;
            }
            REQUIRE(detail::first_unstorable_weight(format, g.weights.data(), cols) == -1);
            std::vector<unsigned char> bytes(static_cast<std::size_t>(row_bytes(format, cols, 4)));
            detail::encode_row(format, g.weights.data(), cols, bytes.data());
            std::vector<float> decoded(static_cast<std::size_t>(cols));
            detail::decode_row(format, bytes.data(), cols, decoded.data());
            if (format == WeightFormat::bf16) {
                for (Index j = 0; j < cols; ++j) {
                    const auto bits = static_cast<std::uint16_t>(bytes[2 * j] | (bytes[2 * j + 1] << 8));
                    CHECK(bits == g.bf16[static_cast<std::size_t>(j)]);
                    CHECK(detail::bits_from_float(decoded[j]) == std::uint32_t(bits) << 16);
                }
                continue;
            }
            CHECK(hex(bytes.data(), static_cast<Index>(bytes.size())) == expected);
            const std::vector<float> weights = golden_weights(expected, format, cols);
            for (Index j = 0; j < cols; ++j) {
                CHECK(detail::bits_from_float(decoded[j]) == detail::bits_from_float(weights[j]));
            }
            // LinearWeight stores the same bytes and decodes the same weights.
            LinearWeight<float> w(1, cols, format);
            w.store_rows(0, ConstRowMatrixMap<float>(g.weights.data(), 1, cols), "golden");
            CHECK(hex(w.stored_row(0), w.row_bytes()) == expected);
            const RowMatrix<float> from_weight = w.decoded();
            for (Index j = 0; j < cols; ++j) CHECK(from_weight(0, j) == weights[j]);
        }
    }
}

TEST_CASE("stored weights: sizes, deep copies, conversions", "[layers][weights]") {
    CHECK(row_bytes(WeightFormat::q8_0, 64, 4) == 68);
    CHECK(row_bytes(WeightFormat::q4_0, 64, 4) == 36);
    CHECK(row_bytes(WeightFormat::bf16, 37, 4) == 74);
    CHECK(row_bytes(WeightFormat::f32, 37, 8) == 296);
    CHECK(stored_format(WeightFormat::q4_0, 64) == WeightFormat::q4_0);
    CHECK(stored_format(WeightFormat::q4_0, 64, true) == WeightFormat::q8_0);  // the output head
    CHECK(stored_format(WeightFormat::q8_0, 48) == WeightFormat::f32);         // rows not whole blocks
    CHECK(stored_format(WeightFormat::bf16, 48, true) == WeightFormat::bf16);

    const RowMatrix<float> values = naive::seeded<float>(3, 64, 9);
    LinearWeight<float> w(3, 64, WeightFormat::q8_0);
    w = values;
    CHECK(w.stored_bytes() == 3 * 68);
    LinearWeight<float> copy = w;
    CHECK(copy.stored_row(0) != w.stored_row(0));  // deep
    CHECK(std::memcmp(copy.stored_row(0), w.stored_row(0), 3 * 68) == 0);
    w = RowMatrix<float>::Zero(3, 64);
    CHECK((copy.decoded().array() != 0).any());
    const LinearWeight<float> f32 = copy.converted(WeightFormat::f32);
    CHECK(f32.format() == WeightFormat::f32);
    CHECK((f32.dense().array() == copy.decoded().array()).all());
    CHECK_ERROR(OptionError, copy.dense(), "stored as q8_0", "decoded()");
    CHECK_ERROR(ShapeError, LinearWeight<float>(2, 48, WeightFormat::q4_0), "48 weights", "32-weight blocks of q4_0");
    CHECK_ERROR(OptionError, parse_weight_format("q5_k", "--weights"), "--weights must be one of f32, bf16, q8_0, q4_0",
                "\"q5_k\"");
    CHECK(parse_weight_format("q4_0") == WeightFormat::q4_0);
}

TEST_CASE("weights a format cannot hold are refused, naming the weight", "[layers][weights]") {
    RowMatrix<float> values = naive::seeded<float>(2, 64, 3);
    values(1, 40) = std::numeric_limits<float>::quiet_NaN();
    LinearWeight<float> q(2, 64, WeightFormat::q4_0);
    CHECK_ERROR(OptionError, q = values, "weight [1, 40] = nan cannot be stored as q4_0", "not finite");
    values(1, 40) = 6e5f;  // q4_0's scale 6e5 / 8 is beyond f16's 65504; q8_0's 6e5 / 127 is not
    CHECK_ERROR(OptionError, q = values, "weight [1, 40]", "q4_0", "65504");
    LinearWeight<float> q8(2, 64, WeightFormat::q8_0);
    CHECK_NOTHROW(q8 = values);
    values(0, 3) = 3.4e38f;  // rounds to infinity in bfloat16
    LinearWeight<float> b(2, 64, WeightFormat::bf16);
    CHECK_ERROR(OptionError, b = values, "weight [0, 3]", "bf16", "infinity");
    values(0, 3) = std::numeric_limits<float>::infinity();  // bf16 and f32 keep what is not finite
    CHECK_NOTHROW(b = values);
    CHECK(std::isinf(b.decoded()(0, 3)));
}

TEMPLATE_TEST_CASE("linear with stored weights equals the product of the decoded weights", "[layers][weights]", float,
                   double) {
    stored_weight_test::check_stored_products<TestType>();
}

TEMPLATE_TEST_CASE("stored weight panels decode as the reference codec", "[layers][weights]", float, double) {
    stored_weight_test::check_stored_panels<TestType>();
}
