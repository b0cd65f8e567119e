// The per-head blocks of a key or value store: where head b's rows live (docs/math.md §6).
//
// A call's projections hold its heads side by side, as column blocks of one [N x heads * width]
// matrix. A KV cache holds each head's rows contiguously instead ("head-major": head b's rows are
// one [capacity x width] block), because a decode step reads one head's keys and values from
// memory, and rows of one head spaced a whole token apart (several KB in a large model) stream at
// a fraction of the bandwidth that contiguous rows do (docs/benchmarks.md, "KV cache layout").
// A KV cache's keys go one step further: each head's keys lie in blocks of 16 keys stored
// dimension by dimension (kernels/key_rows.hpp), whose dots with a decode step's query need no sum
// across lanes. HeadBlocks describes every layout, so the heads see one kind of operand whichever
// they read.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/key_rows.hpp"

#include <Eigen/Core>

#include <cassert>
#include <type_traits>

namespace diffattn {

/// `heads` blocks of `width` columns, head b's from data + b * head_stride, for rows [0, capacity):
/// row r at data + b * head_stride + r * row_stride, or (key_blocks) in kernels/key_rows.hpp's
/// blocks of 16 keys. E is the stored scalar, const for a read-only view.
template <typename E>
struct HeadBlocks {
    using Scalar = std::remove_const_t<E>;
    using Plain = std::conditional_t<std::is_const_v<E>, const RowMatrix<Scalar>, RowMatrix<Scalar>>;
    using Block = Eigen::Map<Plain, Eigen::Unaligned, Eigen::OuterStride<>>;
    using Keys = detail::KeyRows<Scalar>;

    E* data = nullptr;
    Index heads = 0;
    Index width = 0;
    Index capacity = 0;       ///< rows each head has room for
    Index row_stride = 0;     ///< from one row of a head to the next (rows stored row by row)
    Index head_stride = 0;    ///< from one head's row 0 to the next head's
    bool key_blocks = false;  ///< rows stored in blocks of 16 keys (key_rows.hpp); row_stride unused

    /// The column blocks of m [capacity x heads * width], head b at columns [b width, (b+1) width):
    /// a call's own projections.
    template <typename M>
    static HeadBlocks columns(M&& m, Index heads) {
        require<ShapeError>(heads > 0 && m.cols() % heads == 0, "HeadBlocks: ", m.cols(),
                            " columns do not split into ", heads, " heads");
        const Index width = m.cols() / heads;
        return HeadBlocks{m.data(), heads, width, m.rows(), m.outerStride(), width};
    }
    /// The row blocks of m [heads * capacity x width], head b at rows [b capacity, (b+1) capacity):
    /// a KV cache's store.
    template <typename M>
    static HeadBlocks head_major(M&& m, Index heads) {
        require<ShapeError>(heads > 0 && m.rows() % heads == 0, "HeadBlocks: ", m.rows(),
                            " rows do not split into ", heads, " heads");
        const Index capacity = m.rows() / heads;
        return HeadBlocks{m.data(), heads, m.cols(), capacity, m.outerStride(), capacity * m.outerStride()};
    }

    /// A KV cache's keys: `heads` blocks of `capacity` keys of `width` entries from `data`, each in
    /// blocks of 16 keys (whole blocks: kernels/key_rows.hpp's whole_key_blocks(capacity) keys).
    static HeadBlocks blocked_keys(E* data, Index heads, Index width, Index capacity) {
        return HeadBlocks{data, heads, width, capacity, 0, detail::whole_key_blocks(capacity) * width, true};
    }

    /// Rows [first, first + rows) of head b: [rows x width] (rows stored row by row).
    Block head(Index b, Index first, Index rows) const {
        assert(!key_blocks);
        return Block(data + b * head_stride + first * row_stride, rows, width, Eigen::OuterStride<>(row_stride));
    }
    /// Rows [0, rows) of head b as the kernels' key operand, in either layout.
    Keys keys(Index b, Index rows) const {
        if (key_blocks) return Keys::blocked(data + b * head_stride, rows, width);
        return Keys(head(b, 0, rows));
    }
    /// Columns of all heads side by side: the width of the matrix the heads came from.
    Index total_width() const { return heads * width; }

    /// The same blocks, read-only.
    HeadBlocks<const Scalar> as_const() const {
        return HeadBlocks<const Scalar>{data, heads, width, capacity, row_stride, head_stride, key_blocks};
    }

    /// Rows [first, first + rows.rows()) of every head = the column blocks of `rows`
    /// [n x heads * width], converted to the stored scalar. Returns the first of those rows (from
    /// 0) in which a finite entry became infinite, because the stored scalar cannot hold it (beyond
    /// 65504 in f16, docs/kv_cache.md), or -1: the caller says so instead of attending over an
    /// infinity. A second pass over the written entries, only when the stored scalar is narrower.
    template <typename Rows>
    Index write_rows(Index first, const Rows& rows) const {
        static_assert(!std::is_const_v<E>, "a read-only HeadBlocks cannot be written");
        using Source = typename Rows::Scalar;
        for (Index b = 0; b < heads; ++b) {
            if (!key_blocks) {
                head(b, first, rows.rows()) = rows.middleCols(b * width, width).template cast<Scalar>();
                continue;
            }
            for (Index r = 0; r < rows.rows(); ++r) {
                E* key = data + b * head_stride + Keys::blocked_entry(first + r, 0, width);
                for (Index i = 0; i < width; ++i) {
                    const auto entry = rows(r, b * width + i);
                    key[i * detail::kKeyBlock] = Eigen::internal::cast<Source, Scalar>(entry);
                }
            }
        }
        if constexpr (sizeof(Scalar) < sizeof(Source)) {  // f16 or bf16 from float, ...
            for (Index r = 0; r < rows.rows(); ++r) {
                for (Index b = 0; b < heads; ++b) {
                    const E* stored = key_blocks ? data + b * head_stride + Keys::blocked_entry(first + r, 0, width)
                                                 : data + b * head_stride + (first + r) * row_stride;
                    const Index step = key_blocks ? detail::kKeyBlock : 1;
                    for (Index i = 0; i < width; ++i) {
                        if ((Eigen::numext::isinf)(stored[i * step]) &&
                            (Eigen::numext::isfinite)(rows(r, b * width + i))) {
                            return r;
                        }
                    }
                }
            }
        }
        return -1;
    }

    /// Rows [0, rows) of every head side by side, [rows x heads * width] in the scalar T (a copy).
    template <typename T>
    RowMatrix<T> gather(Index rows) const {
        RowMatrix<T> out(rows, total_width());
        RowMatrix<T> blocked_rows(key_blocks ? rows : 0, width);  // a blocked head turned into rows
        for (Index b = 0; b < heads; ++b) {
            if (key_blocks) {
                out.middleCols(b * width, width) = detail::key_rows_as<T>(keys(b, rows), 0, rows, blocked_rows);
            } else {
                out.middleCols(b * width, width) = head(b, 0, rows).template cast<T>();
            }
        }
        return out;
    }
};

}  // namespace diffattn
