// PolyNorm, the gate activation of Motif's MLP (docs/checkpoints.md, "MLP (MotifMLP + PolyNorm)"):
//   PolyNorm(z) = w[0] n(z^3) + w[1] n(z^2) + w[2] n(z) + b[0],   n(u) = u / sqrt(mean(u^2) + eps)
// over the features of each row, eps = 1e-6 (a constant of vLLM's and mlx-motif's PolyNorm, not a
// config key). The first weight goes with the cube.
#pragma once

#include "diffattn/core/types.hpp"

#include <cmath>

namespace diffattn {

/// The eps of PolyNorm's three normalisations (vLLM `PolyNorm(eps=1e-6)`).
inline constexpr double kPolyNormEps = 1e-6;

template <typename T>
struct PolyNorm {
    Vector<T> weight;  ///< [3]  `mlp.act_fn.weight`: w[0] for z^3, w[1] for z^2, w[2] for z
    Vector<T> bias;    ///< [1]  `mlp.act_fn.bias`

    PolyNorm() : weight(Vector<T>::Zero(3)), bias(Vector<T>::Zero(1)) {}

    /// z = PolyNorm(z) in place, row by row; z [N x features]. Each row's three mean squares are
    /// taken before the row is written. No allocation.
    template <typename Rows>
    void apply(Rows&& z) const {
        const T inv_features = T(1) / static_cast<T>(z.cols());
        const T eps = static_cast<T>(kPolyNormEps);
        for (Index n = 0; n < z.rows(); ++n) {
            auto row = z.row(n).array();
            T m2 = T(0), m4 = T(0), m6 = T(0);  // mean(z^2), mean((z^2)^2), mean((z^3)^2)
            for (Index i = 0; i < row.size(); ++i) {
                const T s = row(i) * row(i);
                m2 += s;
                m4 += s * s;
                m6 += s * s * s;
            }
            const T c3 = weight(0) / std::sqrt(m6 * inv_features + eps);
            const T c2 = weight(1) / std::sqrt(m4 * inv_features + eps);
            const T c1 = weight(2) / std::sqrt(m2 * inv_features + eps);
            row = ((c3 * row + c2) * row + c1) * row + bias(0);  // c3 z^3 + c2 z^2 + c1 z + b
        }
    }

    static constexpr Index parameter_count() { return 4; }
};

}  // namespace diffattn
