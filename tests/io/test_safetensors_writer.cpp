// Tests of the safetensors writer (io/safetensors_writer.hpp): write/read round trips, the exact
// bytes written, the errors raised before anything is written, and what a write does to its
// target (replaced whole or left as it was; only a regular file).
#include "diffattn/io/safetensors.hpp"

#include "safetensors_test_support.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

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

// ---- Write targets --------------------------------------------------------------------------------
// write_safetensors writes a temporary file of its own next to the target and renames it over the
// target only once it is complete: a failed write leaves the target as it was, and nothing but a
// regular file (or no file) is ever replaced. docs/safetensors.md, "Writing".

namespace {

/// 16 KiB of tensor data: more than the 4 KiB file-size limit of the failure tests.
Vector<float> sixteen_kib() { return Vector<float>::LinSpaced(4096, -1.0f, 1.0f); }

/// The FileError message of write_safetensors(target, {{"v", data}}), run on another thread so that
/// a write that blocks (opening a FIFO without a reader) fails the test instead of hanging it.
std::string write_error(const fs::path& target, const Vector<float>& data) {
    auto attempt = std::async(std::launch::async, [&]() -> std::string {
        try {
            diffattn::write_safetensors(target, {{"v", data}});
        } catch (const diffattn::FileError& error) {
            return error.what();
        }
        return "(no FileError)";
    });
    if (attempt.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
        // Blocked in open(): a reader releases it; keep it open until the write is over (no SIGPIPE).
        const int reader = ::open(target.c_str(), O_RDONLY | O_NONBLOCK);
        attempt.wait();
        if (reader >= 0) ::close(reader);
        FAIL("write_safetensors blocked for 20 s on " << target.string());
    }
    return attempt.get();
}

void check_fragments(const std::string& message, const std::vector<std::string>& fragments) {
    INFO("message: " << message);
    for (const std::string& fragment : fragments) {
        INFO("fragment: " << fragment);
        CHECK(message.find(fragment) != std::string::npos);
    }
}

}  // namespace

TEST_CASE("safetensors: a failed write leaves the target as it was", "[io][safetensors][write_target]") {
    TempDir dir;
    const fs::path target = dir.path / "out.safetensors";
    const Vector<float> data = sixteen_kib();

    SECTION("an existing file keeps every byte, and no temporary file is left") {
        const Vector<float> earlier = Vector<float>::Constant(3, 7.0f);
        diffattn::write_safetensors(target, {{"earlier", earlier}});
        const Bytes before = read_bytes(target);
        std::string message;
        {
            FileSizeLimit limit(4096);  // the write fails with EFBIG a quarter of the way in
            message = write_error(target, data);
        }
        check_fragments(message, {"write_safetensors", target.string(), "File too large"});
        CHECK(read_bytes(target) == before);
        CHECK(entries_of(dir.path) == std::set<std::string>{"out.safetensors"});
    }
    SECTION("no file is created where there was none") {
        std::string message;
        {
            FileSizeLimit limit(4096);
            message = write_error(target, data);
        }
        check_fragments(message, {target.string(), "File too large"});
        CHECK(entries_of(dir.path).empty());
    }
    SECTION("a folder that does not exist: the reason is given") {
        const fs::path nowhere = dir.path / "missing_folder" / "x.safetensors";
        check_fragments(write_error(nowhere, data), {nowhere.string(), "No such file or directory"});
        CHECK(entries_of(dir.path).empty());
    }
}

TEST_CASE("safetensors: only a regular file is replaced", "[io][safetensors][write_target]") {
    TempDir dir;
    const Vector<float> data = sixteen_kib();

    SECTION("a FIFO without a reader is refused at once (opening it would block)") {
        const fs::path fifo = dir.path / "pipe.safetensors";
        REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
        check_fragments(write_error(fifo, data), {fifo.string(), "not a regular file", "FIFO"});
        CHECK(fs::is_fifo(fifo));
        CHECK(entries_of(dir.path) == std::set<std::string>{"pipe.safetensors"});
    }
    SECTION("a character device made in the test folder stays (mknod needs root)") {
        const fs::path device = dir.path / "full";
        if (::mknod(device.c_str(), S_IFCHR | 0600, makedev(1, 7)) != 0) {
            WARN("skipped: mknod needs CAP_MKNOD");
        } else {
            check_fragments(write_error(device, data), {device.string(), "not a regular file but a character device"});
            CHECK(fs::is_character_file(device));
            CHECK(entries_of(dir.path) == std::set<std::string>{"full"});
        }
    }
    SECTION("/dev/full stays") {
        if (!fs::is_character_file("/dev/full")) {
            WARN("skipped: no /dev/full");
        } else {
            check_fragments(write_error("/dev/full", data), {"\"/dev/full\"", "not a regular file but a character device"});
            CHECK(fs::is_character_file("/dev/full"));
        }
    }
    SECTION("a directory stays") {
        const fs::path folder = dir.path / "folder.safetensors";
        fs::create_directory(folder);
        check_fragments(write_error(folder, data), {folder.string(), "is a directory"});
        CHECK(fs::is_directory(folder));
    }
    SECTION("a socket stays") {
        const fs::path socket_path = dir.path / "socket.safetensors";
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        REQUIRE(socket_path.string().size() < sizeof address.sun_path);
        std::strcpy(address.sun_path, socket_path.c_str());
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        REQUIRE(fd >= 0);
        REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
        check_fragments(write_error(socket_path, data), {socket_path.string(), "not a regular file but a socket"});
        CHECK(fs::is_socket(socket_path));
        ::close(fd);
    }
    SECTION("a symbolic link is refused, whatever it points to: the link and its file stay") {
        const fs::path file = dir.path / "real.safetensors";
        const Vector<float> earlier = Vector<float>::Constant(2, 3.0f);
        diffattn::write_safetensors(file, {{"earlier", earlier}});
        const Bytes before = read_bytes(file);
        const fs::path link = dir.path / "link.safetensors";
        fs::create_symlink("real.safetensors", link);
        check_fragments(write_error(link, data), {link.string(), "symbolic link", "real.safetensors"});
        CHECK(fs::is_symlink(link));
        CHECK(fs::read_symlink(link) == "real.safetensors");
        CHECK(read_bytes(file) == before);

        const fs::path dangling = dir.path / "dangling.safetensors";
        fs::create_symlink(dir.path / "absent.safetensors", dangling);
        check_fragments(write_error(dangling, data), {dangling.string(), "symbolic link"});
        CHECK(fs::is_symlink(dangling));
        CHECK(entries_of(dir.path) ==
              std::set<std::string>{"dangling.safetensors", "link.safetensors", "real.safetensors"});
    }
    SECTION("a file this process may not write stays (not for root: it may write anything)") {
        const fs::path locked = dir.path / "locked.safetensors";
        const Vector<float> earlier = Vector<float>::Constant(2, 3.0f);
        diffattn::write_safetensors(locked, {{"earlier", earlier}});
        const Bytes before = read_bytes(locked);
        fs::permissions(locked, fs::perms::owner_read);
        if (::geteuid() == 0) {
            WARN("skipped: root may write a read-only file");
        } else {
            check_fragments(write_error(locked, data), {locked.string(), "Permission denied"});
            CHECK(read_bytes(locked) == before);
            CHECK(entries_of(dir.path) == std::set<std::string>{"locked.safetensors"});
        }
    }
}

TEST_CASE("safetensors: a write replaces the target whole, once complete", "[io][safetensors][write_target]") {
    TempDir dir;
    const fs::path target = dir.path / "out.safetensors";
    const Vector<float> earlier = Vector<float>::Constant(3, 7.0f);
    diffattn::write_safetensors(target, {{"v", earlier}});
    const Bytes before = read_bytes(target);
    fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
    std::ifstream opened_before(target, std::ios::binary);  // a reader of the old file, mid-way
    REQUIRE(opened_before.is_open());

    const Vector<float> data = sixteen_kib();
    diffattn::write_safetensors(target, {{"v", data}});

    CHECK(SafetensorsFile(target).vector<float>("v", 4096) == data);
    // The old file was replaced by another (renamed over it), not truncated and rewritten in place:
    // a reader that opened it before still reads every old byte.
    CHECK(Bytes(std::istreambuf_iterator<char>(opened_before), std::istreambuf_iterator<char>()) == before);
    // The new file keeps the permission bits of the one it replaces, and no temporary file is left.
    CHECK(fs::status(target).permissions() == (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
    CHECK(entries_of(dir.path) == std::set<std::string>{"out.safetensors"});
}
