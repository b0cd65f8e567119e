// Tests of the safetensors writer (io/safetensors_writer.hpp): write/read round trips, the exact
// bytes written, and the errors raised before anything is written.
#include "diffattn/io/safetensors.hpp"

#include "safetensors_test_support.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace io_test;  // fs, the diffattn names the io tests use, the helpers

TEMPLATE_TEST_CASE("safetensors: write then read round-trips", "[io][safetensors]", float, double) {
    using T = TestType;
    TempDir dir;
    std::mt19937 generator(42);
    std::normal_distribution<double> normal;
    RowMatrix<T> weight(3, 5);
    for (Index i = 0; i < weight.size(); ++i) weight.data()[i] = static_cast<T>(normal(generator));
    Vector<T> bias(4);
    for (Index i = 0; i < bias.size(); ++i) bias(i) = static_cast<T>(normal(generator));
    const RowMatrix<T> empty(0, 7);
    const T scale = static_cast<T>(0.1);
    const T cube[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"written_by", "diffattn"}};

    const fs::path path = dir.path / "model.safetensors";
    diffattn::write_safetensors(path,
                                {{"layer.weight", weight},
                                 {"layer.bias", bias},
                                 {"scale", TensorView({}, &scale)},
                                 {"empty", empty},
                                 {"cube", TensorView({2, 2, 2}, cube)}},
                                metadata);

    const SafetensorsFile file(path);
    CHECK(file.names() == std::vector<std::string>{"cube", "empty", "layer.bias", "layer.weight", "scale"});
    CHECK(file.metadata() == metadata);
    for (const auto& entry : file.tensors()) CHECK(entry.second.dtype == SafetensorsDtype::f32);

    // Values are stored as F32: T == float round-trips exactly, double through the nearest float.
    const RowMatrix<T> expected_weight = weight.template cast<float>().template cast<T>();
    CHECK(file.matrix<T>("layer.weight", 3, 5) == expected_weight);
    CHECK(file.matrix<float>("layer.weight") == weight.template cast<float>());
    CHECK(file.vector<T>("layer.bias") == bias.template cast<float>().template cast<T>());
    CHECK(file.scalar<T>("scale") == static_cast<T>(static_cast<float>(scale)));
    CHECK(file.matrix<T>("empty").rows() == 0);
    CHECK(file.matrix<T>("empty").cols() == 7);
    T cube_back[8] = {};
    file.read_into<T>("cube", {2, 2, 2}, cube_back);
    for (int i = 0; i < 8; ++i) CHECK(cube_back[i] == cube[i]);

    // Offsets follow name order.
    std::uint64_t offset = 0;
    for (const auto& entry : file.tensors()) {
        CHECK(entry.second.data_begin == offset);
        offset = entry.second.data_end;
    }

    // The header is padded with spaces to a multiple of 8; writing again gives the same bytes.
    const Bytes bytes = read_bytes(path);
    REQUIRE(bytes.size() >= 8);
    std::uint64_t header_size = 0;
    for (std::size_t i = 0; i < 8; ++i) header_size |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
    CHECK(header_size % 8 == 0);
    CHECK(bytes.size() == 8 + header_size + offset);
    const fs::path again = dir.path / "again.safetensors";
    diffattn::write_safetensors(again,
                                {{"cube", TensorView({2, 2, 2}, cube)},
                                 {"scale", TensorView({}, &scale)},
                                 {"empty", empty},
                                 {"layer.bias", bias},
                                 {"layer.weight", weight}},
                                metadata);
    CHECK(read_bytes(again) == bytes);
}

TEST_CASE("safetensors: the writer's exact bytes", "[io][safetensors]") {
    TempDir dir;
    const fs::path path = dir.path / "exact.safetensors";
    Vector<float> a(2);
    a << 1.0f, -2.0f;
    diffattn::write_safetensors(path, {{"a", a}}, {{"k", "v"}});
    std::string header = R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    header.append((8 - header.size() % 8) % 8, ' ');
    Bytes data;
    append_le(data, 0x3F800000u, 4);
    append_le(data, 0xC0000000u, 4);
    CHECK(read_bytes(path) == make_file(header, data));

    SECTION("no metadata: no __metadata__ key; no tensors: an empty object") {
        diffattn::write_safetensors(path, {});
        CHECK(read_bytes(path) == make_file("{}      ", {}));
        const SafetensorsFile file(path);
        CHECK(file.tensor_count() == 0);
        CHECK(file.metadata().empty());
    }
}

TEST_CASE("safetensors: writer errors", "[io][safetensors]") {
    TempDir dir;
    const Vector<float> v = Vector<float>::Ones(3);

    SECTION("unwritable paths are FileErrors naming the path") {
        const std::string into_directory =
            error_message<diffattn::FileError>([&] { diffattn::write_safetensors(dir.path, {{"v", v}}); });
        CHECK(into_directory.find(dir.path.string()) != std::string::npos);
        const fs::path no_parent = dir.path / "missing_folder" / "x.safetensors";
        const std::string missing_parent =
            error_message<diffattn::FileError>([&] { diffattn::write_safetensors(no_parent, {{"v", v}}); });
        CHECK(missing_parent.find("x.safetensors") != std::string::npos);
    }
    SECTION("bad arguments are rejected before the file is created") {
        const fs::path path = dir.path / "never.safetensors";
        CHECK_THROWS_AS(diffattn::write_safetensors(path, {{"__metadata__", v}}), diffattn::Error);
        CHECK_THROWS_AS(diffattn::write_safetensors(path, {{"neg", TensorView({2, -1}, v.data())}}),
                        diffattn::ShapeError);
        CHECK_THROWS_AS(diffattn::write_safetensors(path, {{"null", TensorView({3}, static_cast<const float*>(nullptr))}}),
                        diffattn::ShapeError);
        const double huge[2] = {1.0, 1e300};
        const std::string message =
            error_message<diffattn::Error>([&] { diffattn::write_safetensors(path, {{"huge", TensorView({2}, huge)}}); });
        CHECK(message.find("\"huge\"") != std::string::npos);
        CHECK(message.find("element 1") != std::string::npos);
        CHECK_THROWS_AS(diffattn::write_safetensors(path, {{std::string("bad\xff"), v}}), diffattn::Error);
        CHECK_FALSE(fs::exists(path));
    }
    SECTION("doubles just above FLT_MAX round to FLT_MAX; infinities and NaN pass through") {
        const fs::path path = dir.path / "edges.safetensors";
        const double edges[3] = {static_cast<double>(std::numeric_limits<float>::max()) * (1 + 1e-9),
                                 -std::numeric_limits<double>::infinity(), std::nan("")};
        diffattn::write_safetensors(path, {{"e", TensorView({3}, edges)}});
        const Vector<float> back = SafetensorsFile(path).vector<float>("e");
        CHECK(back(0) == std::numeric_limits<float>::max());
        CHECK(back(1) == -std::numeric_limits<float>::infinity());
        CHECK(std::isnan(back(2)));
    }
}
