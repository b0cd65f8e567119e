// Interleaved rotary position embedding (docs/math.md §3.1).
//
// Each query/key map of width d is rotated pair by pair, pairs (0,1), (2,3), ... ("interleaved",
// the layout of the official DIFF code and of FlashAttention's apply_rotary_emb(interleaved=True)):
//   angle(pos, i) = pos * theta^(-2i/d)
//   x[2i]'   = x[2i] cos - x[2i+1] sin
//   x[2i+1]' = x[2i] sin + x[2i+1] cos
// `pos` counts from the first token of the sequence, cached tokens included.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <cmath>

namespace diffattn {

/// cos / sin of every (position, pair) up to a maximum position, computed once in double.
template <typename T>
class RotaryTable {
public:
    RotaryTable() = default;

    /// head_dim: width d of one map (even); max_positions: positions [0, max_positions) covered.
    RotaryTable(Index head_dim, Index max_positions, double theta) : head_dim_(head_dim), theta_(theta) {
        require<ConfigError>(head_dim > 0 && head_dim % 2 == 0, "RotaryTable: head_dim must be even and > 0, got ",
                             head_dim);
        require<ConfigError>(theta > 0 && std::isfinite(theta), "RotaryTable: rope_theta must be > 0, got ", theta);
        const Index pairs = head_dim / 2;
        cos_.resize(max_positions, pairs);
        sin_.resize(max_positions, pairs);
        for (Index i = 0; i < pairs; ++i) {
            const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
            for (Index pos = 0; pos < max_positions; ++pos) {
                const double angle = static_cast<double>(pos) * inv_freq;
                cos_(pos, i) = static_cast<T>(std::cos(angle));
                sin_(pos, i) = static_cast<T>(std::sin(angle));
            }
        }
    }

    Index head_dim() const { return head_dim_; }
    Index max_positions() const { return cos_.rows(); }
    double theta() const { return theta_; }

    /// Rotates, in place, every map of `x`: rows are tokens at positions first_position + n,
    /// columns hold x.cols() / head_dim maps of width head_dim side by side.
    ///   x [N x (n_maps * head_dim)]
    void apply(MatrixRef<T> x, Index first_position) const {
        require<ShapeError>(x.cols() % head_dim_ == 0, "RotaryTable::apply: x has ", x.cols(),
                            " columns, not a multiple of head_dim ", head_dim_);
        require<ShapeError>(first_position >= 0 && first_position + x.rows() <= max_positions(),
                            "RotaryTable::apply: positions [", first_position, ", ", first_position + x.rows(),
                            ") exceed the table's ", max_positions(), " positions");
        const Index pairs = head_dim_ / 2;
        const Index n_maps = x.cols() / head_dim_;
        for (Index n = 0; n < x.rows(); ++n) {
            const auto cos = cos_.row(first_position + n);  // [pairs]
            const auto sin = sin_.row(first_position + n);  // [pairs]
            for (Index map = 0; map < n_maps; ++map) {
                T* pair = &x.coeffRef(n, map * head_dim_);  // row-major: a map's pairs are contiguous
                for (Index i = 0; i < pairs; ++i, pair += 2) {
                    const T x0 = pair[0], x1 = pair[1];
                    pair[0] = x0 * cos(i) - x1 * sin(i);
                    pair[1] = x0 * sin(i) + x1 * cos(i);
                }
            }
        }
    }

private:
    Index head_dim_ = 0;
    double theta_ = 10000.0;
    RowMatrix<T> cos_;  // [max_positions x head_dim / 2]
    RowMatrix<T> sin_;  // [max_positions x head_dim / 2]
};

}  // namespace diffattn
