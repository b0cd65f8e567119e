// The learnable lambda of differential attention (docs/math.md §2.5), one per layer, shared by its heads.
//   lambda      = exp(dot(lq1, lk1)) - exp(dot(lq2, lk2)) + lambda_init
//   lambda_init = 0.8 - 0.6 * exp(-0.3 * depth),  depth = 0-based layer index
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <cmath>
#include <limits>

namespace diffattn {

/// lambda_init(depth) = 0.8 - 0.6 exp(-0.3 depth) (docs/math.md §2.5; depth is the 0-based layer index).
inline double lambda_init(Index depth) { return 0.8 - 0.6 * std::exp(-0.3 * static_cast<double>(depth)); }

/// The four re-parameterisation vectors of lambda, each [d] (d = width of one query/key map).
template <typename T>
struct DiffLambda {
    Vector<T> q1;  ///< [d]  `self_attn.lambda_q1`
    Vector<T> k1;  ///< [d]  `self_attn.lambda_k1`
    Vector<T> q2;  ///< [d]  `self_attn.lambda_q2`
    Vector<T> k2;  ///< [d]  `self_attn.lambda_k2`

    DiffLambda() = default;
    explicit DiffLambda(Index head_dim)
        : q1(Vector<T>::Zero(head_dim)), k1(Vector<T>::Zero(head_dim)), q2(Vector<T>::Zero(head_dim)),
          k2(Vector<T>::Zero(head_dim)) {}

    /// lambda for a layer with the given lambda_init, evaluated in double (one scalar per call).
    double value(double init) const {
        const double dot1 = q1.template cast<double>().dot(k1.template cast<double>());
        const double dot2 = q2.template cast<double>().dot(k2.template cast<double>());
        return std::exp(dot1) - std::exp(dot2) + init;
    }

    /// value(init), which the kernels take as `Out`: OptionError naming layer `depth` and its
    /// lambda_* tensors when it is not a finite `Out` (a NaN or Inf among them, or an exp that
    /// overflows), rather than the kernel's message, which cannot say where the lambda came from.
    template <typename Out>
    double checked_value(double init, Index depth) const {
        const double lambda = value(init);
        require<OptionError>(std::isfinite(lambda) && std::abs(lambda) <= double(std::numeric_limits<Out>::max()),
                             "layer ", depth, ": lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + ",
                             init, " is ", lambda, ", not a finite ", sizeof(Out) == 4 ? "float" : "double",
                             ": the layer's self_attn.lambda_* weights give no lambda (docs/math.md §2.5)");
        return lambda;
    }

    static constexpr Index parameter_count(Index head_dim) { return 4 * head_dim; }
};

}  // namespace diffattn
