// The per-head blocks of a key or value store: where head b's rows live (docs/math.md §6).
//
// A call's projections hold its heads side by side, as column blocks of one [N x heads * width]
// matrix. A KV cache holds each head's rows contiguously instead ("head-major": head b's rows are
// one [capacity x width] block), because a decode step reads one head's keys and values from
// memory, and rows of one head spaced a whole token apart (several KB in a large model) stream at
// a fraction of the bandwidth that contiguous rows do (docs/benchmarks.md, "KV cache layout").
// HeadBlocks describes either layout, so the heads see one kind of operand whichever they read.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <Eigen/Core>

#include <type_traits>

namespace diffattn {

/// `heads` blocks of `width` columns: head b's row r starts at data + b * head_stride + r *
/// row_stride, for rows [0, capacity). E is the stored scalar, const for a read-only view.
template <typename E>
struct HeadBlocks {
    using Scalar = std::remove_const_t<E>;
    using Plain = std::conditional_t<std::is_const_v<E>, const RowMatrix<Scalar>, RowMatrix<Scalar>>;
    using Block = Eigen::Map<Plain, Eigen::Unaligned, Eigen::OuterStride<>>;

    E* data = nullptr;
    Index heads = 0;
    Index width = 0;
    Index capacity = 0;     ///< rows each head has room for
    Index row_stride = 0;   ///< from one row of a head to the next
    Index head_stride = 0;  ///< from one head's row 0 to the next head's

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

    /// Rows [first, first + rows) of head b: [rows x width].
    Block head(Index b, Index first, Index rows) const {
        return Block(data + b * head_stride + first * row_stride, rows, width, Eigen::OuterStride<>(row_stride));
    }
    /// Columns of all heads side by side: the width of the matrix the heads came from.
    Index total_width() const { return heads * width; }

    /// The same blocks, read-only.
    HeadBlocks<const Scalar> as_const() const {
        return HeadBlocks<const Scalar>{data, heads, width, capacity, row_stride, head_stride};
    }

    /// Rows [first, first + rows.rows()) of every head = the column blocks of `rows`
    /// [n x heads * width], converted to the stored scalar.
    template <typename Rows>
    void write_rows(Index first, const Rows& rows) const {
        static_assert(!std::is_const_v<E>, "a read-only HeadBlocks cannot be written");
        for (Index b = 0; b < heads; ++b) {
            head(b, first, rows.rows()) = rows.middleCols(b * width, width).template cast<Scalar>();
        }
    }

    /// Rows [0, rows) of every head side by side, [rows x heads * width] in the scalar T (a copy).
    template <typename T>
    RowMatrix<T> gather(Index rows) const {
        RowMatrix<T> out(rows, total_width());
        for (Index b = 0; b < heads; ++b) out.middleCols(b * width, width) = head(b, 0, rows).template cast<T>();
        return out;
    }
};

}  // namespace diffattn
