// The gated feed-forward of every decoder layer (docs/math.md §4): y = (act(x Wg^T) * (x Wu^T)) Wd^T with
// act = silu (SwiGLU: our own format, DiffLlama) or PolyNorm (Motif, layers/poly_norm.hpp), the
// family's convention (docs/checkpoints.md, "MLP").
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/layers/linear.hpp"
#include "diffattn/layers/parameters.hpp"
#include "diffattn/layers/poly_norm.hpp"

#include <cmath>
#include <string>

namespace diffattn {

/// The gate activation (config.json `hidden_act` of a released checkpoint).
enum class MlpActivation {
    silu,       ///< z sigmoid(z): SwiGLU
    poly_norm,  ///< PolyNorm with `mlp.act_fn.weight` [3], `mlp.act_fn.bias` [1]
};

inline const char* to_string(MlpActivation activation) {
    return activation == MlpActivation::silu ? "silu" : "poly_norm";
}

/// Activation buffers of one SwiGLU call, sized once for a maximum number of tokens.
template <typename T>
struct SwiGluScratch {
    RowMatrix<T> gate;  ///< [max_len x d_ff]  x Wg^T, then silu(x Wg^T) * (x Wu^T)
    RowMatrix<T> up;    ///< [max_len x d_ff]  x Wu^T

    SwiGluScratch() = default;
    SwiGluScratch(Index max_len, Index d_ff) : gate(max_len, d_ff), up(max_len, d_ff) {}
};

template <typename T>
struct SwiGlu {
    LinearWeight<T> gate_proj;  ///< [d_ff x d_model]  `mlp.gate_proj.weight`
    LinearWeight<T> up_proj;    ///< [d_ff x d_model]  `mlp.up_proj.weight`
    LinearWeight<T> down_proj;  ///< [d_model x d_ff]  `mlp.down_proj.weight`
    MlpActivation activation = MlpActivation::silu;
    PolyNorm<T> poly_norm;      ///< poly_norm: `mlp.act_fn.weight`, `mlp.act_fn.bias`

    SwiGlu() = default;
    /// Zero projections in stored_format(`weights`, their inputs).
    SwiGlu(Index d_model, Index d_ff, MlpActivation act = MlpActivation::silu, WeightFormat weights = WeightFormat::f32)
        : gate_proj(d_ff, d_model, stored_format(weights, d_model)),
          up_proj(d_ff, d_model, stored_format(weights, d_model)),
          down_proj(d_model, d_ff, stored_format(weights, d_ff)),
          activation(act) {}

    Index d_model() const { return gate_proj.cols(); }
    Index d_ff() const { return gate_proj.rows(); }

    /// out = SwiGLU(x). x [N x d_model], out [N x d_model] (must not alias x);
    /// scratch sized for at least N tokens and d_ff; the projections run as `context` allows (linear()).
    void operator()(const ConstMatrixRef<T>& x, MatrixRef<T> out, SwiGluScratch<T>& scratch,
                    const ExecutionContext& context = {}) const {
        const Index n = x.rows();
        require<ShapeError>(scratch.gate.rows() >= n && scratch.gate.cols() == d_ff() &&
                                scratch.up.rows() >= n && scratch.up.cols() == d_ff(),
                            "SwiGlu: scratch is sized for ", scratch.gate.rows(), " tokens x ", scratch.gate.cols(),
                            " but the call has ", n, " tokens x d_ff ", d_ff());
        auto gate = scratch.gate.topRows(n);  // [N x d_ff]
        auto up = scratch.up.topRows(n);      // [N x d_ff]
        linear_each<T>(x, {{gate_proj, gate}, {up_proj, up}}, context);
        if (activation == MlpActivation::silu) {
            // silu(g) = g * sigmoid(g) = g / (1 + exp(-g)), fused with the product by up.
            gate.array() = gate.array() / (T(1) + (-gate.array()).exp()) * up.array();
        } else {
            poly_norm.apply(gate);
            gate.array() *= up.array();
        }
        linear<T>(gate, down_proj, out, context);
    }

    /// f(w) for the gate, up and down projections.
    template <typename F>
    void for_each_projection(F&& f) const {
        f(gate_proj);
        f(up_proj);
        f(down_proj);
    }

    /// The model-file tensors under `prefix` ("model.layers.<i>.mlp."), viewing the storage of
    /// `mlp`, or as table entries only when `mlp` is null.
    static void list_tensors(Index d_model, Index d_ff, MlpActivation activation, const std::string& prefix,
                             ParameterList<T>& list, SwiGlu* mlp) {
        list.add(prefix + "gate_proj.weight", d_ff, d_model, mlp ? &mlp->gate_proj : nullptr);
        list.add(prefix + "up_proj.weight", d_ff, d_model, mlp ? &mlp->up_proj : nullptr);
        list.add(prefix + "down_proj.weight", d_model, d_ff, mlp ? &mlp->down_proj : nullptr);
        if (activation == MlpActivation::poly_norm) {
            list.add(prefix + "act_fn.weight", 3, mlp ? &mlp->poly_norm.weight : nullptr);
            list.add(prefix + "act_fn.bias", 1, mlp ? &mlp->poly_norm.bias : nullptr);
        }
    }

    /// 3 d_model d_ff (gate, up and down projections, no biases), + 4 for PolyNorm.
    static constexpr Index parameter_count(Index d_model, Index d_ff, MlpActivation act = MlpActivation::silu) {
        return 3 * d_model * d_ff + (act == MlpActivation::poly_norm ? PolyNorm<T>::parameter_count() : 0);
    }
};

}  // namespace diffattn
