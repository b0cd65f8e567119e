// Helpers shared by the io tests: temporary directories, byte images of safetensors files, and
// checks of the FileErrors the reader and the writer throw.
#pragma once

#include "../error_messages.hpp"

#include "diffattn/io/safetensors.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <sys/resource.h>

namespace io_test {

namespace fs = std::filesystem;
using diffattn::Index;
using diffattn::RowMatrix;
using diffattn::SafetensorsDtype;
using diffattn::SafetensorsFile;
using diffattn::TensorView;
using diffattn::Vector;

inline fs::path safetensors_data_dir() {
#ifdef DIFFATTN_TEST_DATA_DIR
    return fs::path(DIFFATTN_TEST_DATA_DIR) / "safetensors";
#else
    return fs::path(__FILE__).parent_path().parent_path() / "data" / "safetensors";
#endif
}

/// A fresh directory under the system temp directory, removed with its contents at scope exit.
struct TempDir {
    fs::path path;
    TempDir() {
        std::random_device random;
        path = fs::temp_directory_path() /
               ("diffattn_safetensors_" + std::to_string(random()) + "_" + std::to_string(random()));
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

using Bytes = std::vector<unsigned char>;

inline Bytes read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const fs::path& path, const Bytes& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

inline void append_le(Bytes& bytes, std::uint64_t value, int byte_count) {
    for (int i = 0; i < byte_count; ++i) bytes.push_back(static_cast<unsigned char>(value >> (8 * i)));
}

/// A safetensors image: length field, `header` (not padded), then `data`.
inline Bytes make_file(const std::string& header, const Bytes& data) {
    Bytes bytes;
    append_le(bytes, header.size(), 8);
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.insert(bytes.end(), data.begin(), data.end());
    return bytes;
}

/// A header of `tensors` zero-size F32 tensors "t0", "t1", ... and `metadata` entries "k0": "", ...
inline std::string many_entries_header(std::size_t tensors, std::size_t metadata) {
    std::string header = "{";
    if (metadata != 0) {
        header += "\"__metadata__\":{";
        for (std::size_t i = 0; i < metadata; ++i) header += (i == 0 ? "\"k" : ",\"k") + std::to_string(i) + "\":\"\"";
        header += "}";
    }
    for (std::size_t i = 0; i < tensors; ++i) {
        header += (i == 0 && metadata == 0 ? "\"t" : ",\"t") + std::to_string(i) +
                  R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
    }
    return header + "}";
}

/// Opens `path`, requiring a FileError whose message names the file and holds every fragment.
inline void require_file_error(const fs::path& path, const std::vector<std::string>& fragments) {
    INFO("file: " << path.string());
    std::string message;
    try {
        SafetensorsFile file(path);
        FAIL("no FileError; the file loaded with " << file.tensor_count() << " tensors");
    } catch (const diffattn::FileError& error) {
        message = error.what();
    }
    INFO("message: " << message);
    CHECK(message.find(path.filename().string()) != std::string::npos);
    for (const std::string& fragment : fragments) {
        INFO("fragment: " << fragment);
        CHECK(message.find(fragment) != std::string::npos);
    }
}

/// The names in directory `dir`.
inline std::set<std::string> entries_of(const fs::path& dir) {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
    return names;
}

/// Lowers this process's file-size limit (RLIMIT_FSIZE) to `bytes` for its lifetime, with SIGXFSZ
/// ignored: a write past the limit then fails with EFBIG ("File too large"). A real write error at
/// a chosen offset on any file system, where a full disk cannot be had (no small tmpfs here).
class FileSizeLimit {
public:
    /// `ignore_signal` false: SIGXFSZ keeps its default action (the process is killed), as in a
    /// program that does not ignore it itself.
    explicit FileSizeLimit(rlim_t bytes, bool ignore_signal = true) {
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
        rlimit lowered = saved_;
        lowered.rlim_cur = std::min(bytes, saved_.rlim_max);
        previous_handler_ = std::signal(SIGXFSZ, ignore_signal ? SIG_IGN : SIG_DFL);
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &lowered) == 0);
    }
    ~FileSizeLimit() {
        ::setrlimit(RLIMIT_FSIZE, &saved_);
        std::signal(SIGXFSZ, previous_handler_);
    }
    FileSizeLimit(const FileSizeLimit&) = delete;
    FileSizeLimit& operator=(const FileSizeLimit&) = delete;

private:
    rlimit saved_{};
    void (*previous_handler_)(int) = SIG_DFL;
};

}  // namespace io_test
