// The key operand of the kernels: keys [S x d] stored row by row, or in the KV cache's blocks of
// 16 keys stored dimension by dimension (docs/math.md §6).
//
// A decode step's logits are dots of one query row with every cached key. Over row-major keys each
// dot ends in a sum across the lanes of a vector, which costs more instructions per key than the
// key's bytes take to arrive. Stored as blocks of kKeyBlock keys, entry i of the block's 16 keys
// side by side, the 16 dots of a block are d multiply-adds of the block's rows by the query's
// entries, with no sum across lanes (kernels/few_rows_simd.hpp; docs/benchmarks.md, "Keys in
// blocks of 16"). The call's own projections stay row-major; the kernels read either, and turn a
// tile of blocked keys back into rows where they need rows (the packed products of calls of many
// rows, and the ISAs without the AVX-512 loops).
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/stored_rows.hpp"

#include <Eigen/Core>

#include <cassert>
#include <type_traits>
#include <utility>

namespace diffattn::detail {

/// Keys per block of the blocked layout: one 512-bit vector of floats.
inline constexpr Index kKeyBlock = 16;

/// Keys that round `rows` keys up to whole blocks (0 for rows <= 0; never overflows).
inline constexpr Index key_block_padding(Index rows) {
    return rows > 0 ? (kKeyBlock - rows % kKeyBlock) % kKeyBlock : 0;
}
/// Rows a blocked store needs for `rows` keys: whole blocks.
inline constexpr Index whole_key_blocks(Index rows) { return rows + key_block_padding(rows); }

/// Keys [rows x cols] in the scalar S, read-only. Row-major: key r's entry i at data[r * stride + i].
/// Blocked: key r's entry i at data[(r / 16) * 16 * cols + i * 16 + r % 16], with room for
/// whole_key_blocks(rows) keys (the last block's unused slots are never read).
template <typename S>
class KeyRows {
public:
    using Scalar = S;
    using RowMajorRows = Eigen::Map<const RowMatrix<S>, Eigen::Unaligned, Eigen::OuterStride<>>;

    KeyRows() = default;
    /// Row-major keys: any row-major Eigen object with direct access (a matrix, Map, Ref, block).
    template <typename M, typename = std::enable_if_t<std::is_base_of_v<Eigen::EigenBase<M>, M>>>
    KeyRows(const M& m)  // NOLINT(google-explicit-constructor): the kernels take every row-major key operand
        : data_(m.data()),
          rows_(m.rows()),
          cols_(m.cols()),
          stride_(M::IsRowMajor ? m.outerStride() : m.innerStride()) {
        static_assert(std::is_same_v<typename M::Scalar, S>, "keys of another scalar");
        static_assert((Eigen::internal::traits<M>::Flags & Eigen::DirectAccessBit) != 0 &&
                          (M::IsRowMajor || M::ColsAtCompileTime == 1),
                      "keys must be row-major with direct access");
        assert(!M::IsRowMajor || m.innerStride() == 1 || m.cols() <= 1);
    }
    /// Blocked keys from `data` (blocked_entry's layout).
    static KeyRows blocked(const S* data, Index rows, Index cols) {
        KeyRows k;
        k.data_ = data;
        k.rows_ = rows;
        k.cols_ = cols;
        k.blocked_ = true;
        return k;
    }

    Index rows() const { return rows_; }
    Index cols() const { return cols_; }
    Index size() const { return rows_ * cols_; }
    const S* data() const { return data_; }
    bool is_blocked() const { return blocked_; }
    /// From one row to the next (row-major keys).
    Index row_stride() const {
        assert(!blocked_);
        return stride_;
    }
    /// The keys as an Eigen matrix (row-major keys only).
    RowMajorRows row_major() const {
        assert(!blocked_);
        return RowMajorRows(data_, rows_, cols_, Eigen::OuterStride<>(stride_));
    }
    /// Offset of key r's entry i in a blocked store of keys of `cols` entries.
    static Index blocked_entry(Index r, Index i, Index cols) {
        return r / kKeyBlock * kKeyBlock * cols + i * kKeyBlock + r % kKeyBlock;
    }

private:
    const S* data_ = nullptr;
    Index rows_ = 0, cols_ = 0, stride_ = 0;
    bool blocked_ = false;
};

/// One stored entry in T, exactly (a half or bfloat16 goes through float, which holds every one).
template <typename T, typename S>
T widened(S x) {
    if constexpr (std::is_same_v<S, T> || std::is_floating_point_v<S>) {
        return static_cast<T>(x);
    } else {
        return static_cast<T>(static_cast<float>(x));
    }
}

/// KeyRows<S> as a parameter that does not take part in deducing S (the kernels deduce it from V),
/// so that any row-major Eigen operand converts to it.
template <typename S>
struct KeyOperandOf {
    using type = KeyRows<S>;
};
template <typename S>
using KeyOperand = typename KeyOperandOf<S>::type;

/// The bytes [first, last) that keys may read (core/checks.hpp's memory_overlaps).
template <typename S>
std::pair<const unsigned char*, const unsigned char*> memory_span(const KeyRows<S>& k) {
    const auto* first = reinterpret_cast<const unsigned char*>(k.data());
    const Index entries = k.is_blocked() ? whole_key_blocks(k.rows()) * k.cols()
                                         : (k.rows() - 1) * k.row_stride() + k.cols();
    return {first, first + entries * static_cast<Index>(sizeof(S))};
}

/// Keys [begin, begin + count) as row-major rows in T: the stored rows themselves when they are
/// row-major in T (no copy), else widened and, for blocked keys, turned into rows, in `buffer`
/// [>= count x cols] (a tile of the thread's scratch: BlockScratch::key_tile).
template <typename T, typename S>
Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>> key_rows_as(const KeyRows<S>& k, Index begin,
                                                                                    Index count, RowMatrix<T>& buffer) {
    using Rows = Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
    const Index cols = k.cols();
    if (!k.is_blocked()) {
        if constexpr (std::is_same_v<S, T>) {
            return Rows(k.data() + begin * k.row_stride(), count, cols, Eigen::OuterStride<>(k.row_stride()));
        } else {
            const auto rows = rows_as(ConstMatrixRef<S>(k.row_major()), begin, count, buffer);
            return Rows(rows.data(), count, cols, Eigen::OuterStride<>(rows.outerStride()));
        }
    }
    assert(buffer.rows() * buffer.cols() >= count * cols);
    T* out = buffer.data();
    for (Index r = 0; r < count; ++r) {
        const S* key = k.data() + KeyRows<S>::blocked_entry(begin + r, 0, cols);
        for (Index i = 0; i < cols; ++i) out[r * cols + i] = widened<T>(key[i * kKeyBlock]);
    }
    return Rows(out, count, cols, Eigen::OuterStride<>(cols));
}

}  // namespace diffattn::detail
