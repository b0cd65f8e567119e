// Where weight matrices live: the matrices a model allocates one after another share 16 MB
// chunks that are 2 MB-aligned and asked for huge pages whole (core/huge_pages.hpp).
//
// A decode step streams every weight once, and one stream over 4 KB pages gets about two thirds of
// the bandwidth it gets over 2 MB pages (docs/benchmarks.md, "Weights on huge pages"). Advice for
// each matrix on its own covers only the whole 2 MB pages inside it: a matrix under 4 MB may hold
// none, so a small model's weights stayed on 4 KB pages. Packed into shared chunks, they do not.
//
// A chunk is freed with the last matrix in it (each holds a reference); space inside a chunk is not
// reused, which suits weights, allocated together when a model is built and freed together. A
// matrix of at least a quarter chunk gets a chunk of its own, whose whole 2 MB pages are advised and
// whose tail keeps 4 KB pages, so a large checkpoint's matrices waste no memory on rounding.
#pragma once

#include "diffattn/core/huge_pages.hpp"

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>

namespace diffattn {

namespace detail {
/// One 2 MB-aligned allocation for weights, whose whole 2 MB pages are asked for huge pages.
class WeightChunk {
public:
    explicit WeightChunk(std::size_t bytes)
        : bytes_(bytes),
          data_(static_cast<unsigned char*>(std::aligned_alloc(kHugePageBytes, round_up(bytes, kHugePageBytes)))) {
        if (data_ == nullptr) throw std::bad_alloc();
        advise_huge_pages(data_, bytes);
    }
    WeightChunk(const WeightChunk&) = delete;
    WeightChunk& operator=(const WeightChunk&) = delete;
    ~WeightChunk() { std::free(data_); }

    unsigned char* data() const { return data_; }
    std::size_t bytes() const { return bytes_; }

    static std::size_t round_up(std::size_t bytes, std::size_t multiple) {
        return (bytes + multiple - 1) / multiple * multiple;
    }

private:
    std::size_t bytes_;
    unsigned char* data_;
};
}  // namespace detail

/// The process's allocator of weight storage (see the file comment). Thread-safe.
class WeightPool {
public:
    /// Size of a shared chunk: eight huge pages.
    static constexpr std::size_t kChunkBytes = 8 * kHugePageBytes;
    /// Alignment of every block: a cache line, and a whole AVX-512 packet.
    static constexpr std::size_t kAlignment = 64;

    /// Storage of `bytes` bytes (uninitialised), alive while `owner` or a copy of it is.
    struct Block {
        void* data = nullptr;
        std::shared_ptr<const void> owner;
    };

    /// A block of `bytes` bytes: kAlignment-aligned, placed right after the previous block while the
    /// current chunk has room. No storage for 0 bytes. Throws std::bad_alloc.
    Block allocate(std::size_t bytes) {
        if (bytes == 0) return {};
        bytes = detail::WeightChunk::round_up(bytes, kAlignment);
        if (bytes >= kChunkBytes / 4) {
            auto own = std::make_shared<const detail::WeightChunk>(bytes);
            return {own->data(), own};
        }
        const std::lock_guard<std::mutex> lock(mutex_);
        std::shared_ptr<const detail::WeightChunk> chunk = current_.lock();
        if (chunk == nullptr || used_ + bytes > chunk->bytes()) {
            chunk = std::make_shared<const detail::WeightChunk>(kChunkBytes);
            current_ = chunk;
            used_ = 0;
        }
        void* data = chunk->data() + used_;
        used_ += bytes;
        return {data, std::move(chunk)};
    }

private:
    std::mutex mutex_;
    std::weak_ptr<const detail::WeightChunk> current_;  // the chunk being filled, while a block in it lives
    std::size_t used_ = 0;                              // its bytes handed out
};

/// The one pool every WeightMatrix allocates from.
inline WeightPool& weight_pool() {
    static WeightPool pool;
    return pool;
}

}  // namespace diffattn
