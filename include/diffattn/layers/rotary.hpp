// Rotary position embedding (docs/math.md §3.1; docs/checkpoints.md, "Rotary position embedding").
//
// Each query/key map of width d is rotated pair by pair, by the angle
//   angle(pos, i) = pos * f_i,   f_i = theta^(-2i/d),  i = 0 .. d/2 - 1
// (f_i adjusted by llama3 rope scaling when a released checkpoint asks for it). Two layouts of
// the pairs, a convention of the checkpoint family:
//   interleaved  pairs (2i, 2i+1): the official DIFF code, FlashAttention's
//                apply_rotary_emb(interleaved=True); our own format
//   rotate_half  pairs (i, i + d/2): transformers' rotate_half, vLLM is_neox_style; DiffLlama, Motif
// with x'_a = x_a cos - x_b sin, x'_b = x_a sin + x_b cos for each pair (a, b).
// `pos` counts from the first token of the sequence, cached tokens included.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <cmath>

namespace diffattn {

/// Which elements of a map rotate together.
enum class RotaryStyle {
    interleaved,  ///< (2i, 2i+1): our own format (docs/math.md §3.1)
    rotate_half,  ///< (i, i + d/2): DiffLlama and Motif (NeoX style)
};

inline const char* to_string(RotaryStyle style) {
    return style == RotaryStyle::interleaved ? "interleaved" : "rotate_half";
}

/// `rope_scaling` of rope_type llama3 (transformers `_compute_llama3_parameters`); factor 0: none.
struct Llama3RopeScaling {
    double factor = 0;                            ///< `factor` (0: no scaling)
    double low_freq_factor = 0;                   ///< `low_freq_factor`
    double high_freq_factor = 0;                  ///< `high_freq_factor` (> low_freq_factor)
    double original_max_position_embeddings = 0;  ///< omax (docs/checkpoints.md says which key)

    bool enabled() const { return factor > 0; }

    /// The adjusted frequency of a frequency f: wavelengths 2 pi / f longer than omax / low are
    /// divided by factor, shorter than omax / high kept, and blended in between (both edges).
    double adjust(double f) const {
        if (!enabled()) return f;
        const double wavelength = 2 * 3.14159265358979323846 / f;
        const double low_wavelength = original_max_position_embeddings / low_freq_factor;
        const double high_wavelength = original_max_position_embeddings / high_freq_factor;
        if (wavelength > low_wavelength) return f / factor;
        if (wavelength < high_wavelength) return f;
        const double s = (original_max_position_embeddings / wavelength - low_freq_factor) /
                         (high_freq_factor - low_freq_factor);
        return (1 - s) * f / factor + s * f;
    }

    friend bool operator==(const Llama3RopeScaling& a, const Llama3RopeScaling& b) {
        return a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
               a.high_freq_factor == b.high_freq_factor &&
               a.original_max_position_embeddings == b.original_max_position_embeddings;
    }
};

/// Everything the rotary table of a map width depends on.
struct RotarySpec {
    Index head_dim = 0;                            ///< d, even
    double theta = 10000.0;                        ///< `rope_theta`
    RotaryStyle style = RotaryStyle::interleaved;  ///< pair layout
    Llama3RopeScaling llama3;                      ///< frequency scaling (none by default)

    /// f'_i: theta^(-2i/d), llama3-adjusted.
    double frequency(Index i) const {
        return llama3.adjust(std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim)));
    }

    friend bool operator==(const RotarySpec& a, const RotarySpec& b) {
        return a.head_dim == b.head_dim && a.theta == b.theta && a.style == b.style && a.llama3 == b.llama3;
    }
    friend bool operator!=(const RotarySpec& a, const RotarySpec& b) { return !(a == b); }
};

/// cos / sin of every (position, pair) up to a maximum position, computed once in double.
template <typename T>
class RotaryTable {
public:
    RotaryTable() = default;

    /// head_dim: width d of one map (even); max_positions: positions [0, max_positions) covered;
    /// interleaved pairs, unscaled frequencies.
    RotaryTable(Index head_dim, Index max_positions, double theta)
        : RotaryTable(RotarySpec{head_dim, theta, RotaryStyle::interleaved, {}}, max_positions) {}

    /// The table of `spec` for positions [first_position, max_positions): a slice of a longer
    /// sequence (docs/distributed.md) needs only its own positions.
    RotaryTable(const RotarySpec& spec, Index max_positions, Index first_position = 0)
        : spec_(spec), first_(first_position) {
        require<ConfigError>(spec.head_dim > 0 && spec.head_dim % 2 == 0,
                             "RotaryTable: head_dim must be even and > 0, got ", spec.head_dim);
        require<ConfigError>(spec.theta > 0 && std::isfinite(spec.theta), "RotaryTable: rope_theta must be > 0, got ",
                             spec.theta);
        require<ShapeError>(first_position >= 0 && first_position <= max_positions, "RotaryTable: positions [",
                            first_position, ", ", max_positions, ") are not a range of positions >= 0");
        const Index pairs = spec.head_dim / 2;
        cos_.resize(max_positions - first_position, pairs);
        sin_.resize(max_positions - first_position, pairs);
        for (Index i = 0; i < pairs; ++i) {
            const double frequency = spec.frequency(i);
            for (Index row = 0; row < cos_.rows(); ++row) {
                const double angle = static_cast<double>(first_position + row) * frequency;
                cos_(row, i) = static_cast<T>(std::cos(angle));
                sin_(row, i) = static_cast<T>(std::sin(angle));
            }
        }
    }

    Index head_dim() const { return spec_.head_dim; }
    /// The positions covered: [first_position(), max_positions()).
    Index first_position() const { return first_; }
    Index max_positions() const { return first_ + cos_.rows(); }
    double theta() const { return spec_.theta; }
    const RotarySpec& spec() const { return spec_; }

    /// Rotates, in place, every map of `x`: rows are tokens at positions first_position + n,
    /// columns hold x.cols() / head_dim maps of width head_dim side by side.
    ///   x [N x (n_maps * head_dim)]
    void apply(MatrixRef<T> x, Index first_position) const {
        const Index d = spec_.head_dim;
        require<ShapeError>(x.cols() % d == 0, "RotaryTable::apply: x has ", x.cols(),
                            " columns, not a multiple of head_dim ", d);
        require<ShapeError>(first_position >= first_ && first_position + x.rows() <= max_positions(),
                            "RotaryTable::apply: positions [", first_position, ", ", first_position + x.rows(),
                            ") exceed the table's positions [", first_, ", ", max_positions(), ")");
        if (spec_.style == RotaryStyle::interleaved) {
            rotate<true>(x, first_position);
        } else {
            rotate<false>(x, first_position);
        }
    }

private:
    /// Pair i of a map is (a, a + gap) with a = stride i: interleaved stride 2, gap 1; rotate_half
    /// stride 1, gap d/2 (compile-time, so each layout gets its own loop).
    template <bool Interleaved>
    void rotate(MatrixRef<T>& x, Index first_position) const {
        const Index d = spec_.head_dim, pairs = d / 2, n_maps = x.cols() / d;
        constexpr Index stride = Interleaved ? 2 : 1;
        const Index gap = Interleaved ? 1 : pairs;
        for (Index n = 0; n < x.rows(); ++n) {
            const auto cos = cos_.row(first_position - first_ + n);  // [pairs]
            const auto sin = sin_.row(first_position - first_ + n);  // [pairs]
            for (Index map = 0; map < n_maps; ++map) {
                T* first = &x.coeffRef(n, map * d);  // row-major: a map's elements are contiguous
                for (Index i = 0; i < pairs; ++i) {
                    T* a = first + stride * i;
                    const T x0 = a[0], x1 = a[gap];
                    a[0] = x0 * cos(i) - x1 * sin(i);
                    a[gap] = x0 * sin(i) + x1 * cos(i);
                }
            }
        }
    }

    RotarySpec spec_;
    Index first_ = 0;   // the position of row 0
    RowMatrix<T> cos_;  // [max_positions - first_ x head_dim / 2]
    RowMatrix<T> sin_;  // [max_positions - first_ x head_dim / 2]
};

}  // namespace diffattn
