// RMSNorm (docs/math.md §4): y = x / sqrt(mean(x^2) + eps) * w, row by row.
//
// A small function object in the CTranslate2 style: it holds the weight and eps, the caller
// owns the output. Used for input_layernorm, post_attention_layernorm, model.norm and the
// per-head subln of the differential attention modules (docs/math.md §3.1).
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/types.hpp"

#include <cmath>

namespace diffattn {

/// The eps of the per-head subln (docs/math.md §3.1 and 4: always 1e-5, independent of rms_norm_eps).
inline constexpr double kSublnEps = 1e-5;

template <typename T>
struct RmsNorm {
    Vector<T> weight;  ///< [features], `*.weight` in the model file
    double eps = 1e-5; ///< `rms_norm_eps` (1e-5 for subln)

    RmsNorm() = default;
    RmsNorm(Index features, double epsilon) : weight(Vector<T>::Ones(features)), eps(epsilon) {}

    Index features() const { return weight.size(); }

    /// out = RMSNorm(x). x, out: [N x features]; out may be x itself (in place), or any
    /// column block with the right shape (a head of a wider matrix).
    void operator()(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
        detail::require_shape("RmsNorm", detail::named("x", x), x.rows(), features());
        detail::require_shape("RmsNorm", detail::named("out", out), x.rows(), features());
        apply(x, out, T(1));
    }

    /// out = output_scale * RMSNorm(x), without entry checks (used per head inside the
    /// attention modules, where the shapes are fixed by construction).
    template <typename In, typename Out>
    void apply(const In& x, Out&& out, T output_scale) const {
        const T inv_features = T(1) / static_cast<T>(weight.size());
        for (Index n = 0; n < x.rows(); ++n) {
            // The whole row is read (mean of squares) before it is written, so out may alias x.
            const T mean_square = x.row(n).squaredNorm() * inv_features;
            const T factor = output_scale / std::sqrt(mean_square + static_cast<T>(eps));
            out.row(n) = (x.row(n).array() * factor * weight.transpose().array()).matrix();
        }
    }

    static Index parameter_count(Index features) { return features; }
};

}  // namespace diffattn
