// The weights of one attention module (docs/math.md §3): their shapes for each attention kind,
// and the model-file tensors that hold them (names, file shapes, and where each row block of a
// projection is stored under the checkpoint family's head pairing, docs/checkpoints.md).
#pragma once

#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/core/weight_matrix.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/attention_conventions.hpp"
#include "diffattn/layers/lambda.hpp"
#include "diffattn/layers/parameters.hpp"
#include "diffattn/layers/rms_norm.hpp"
#include "diffattn/layers/shared_diff.hpp"

#include <string>
#include <utility>
#include <vector>

namespace diffattn {

/// Weights of one attention module. Which members are used depends on the kind; unused ones are
/// empty. Shapes in nn.Linear layout [out x in]; d, dv, widths as in AttentionConfig. The
/// projections are stored in the module's weight format (stored_format); Shared DIFF's factors,
/// lambda and subln stay in T.
template <typename T>
struct AttentionWeights {
    LinearWeight<T> q_proj;       ///< [q_width x D]  `q_proj.weight` (shared_diff: merged weights after merge(), f32)
    LinearWeight<T> k_proj;       ///< [k_width x D]  `k_proj.weight` (shared_diff: merged weights after merge(), f32)
    LinearWeight<T> v_proj;       ///< [v_width x D]  `v_proj.weight`
    LinearWeight<T> out_proj;     ///< [D x out_width] `out_proj.weight` (diff_v2: `o_proj.weight`)
    LinearWeight<T> lambda_proj;  ///< diff_v2: [H x D] `lambda_proj.weight`
    DiffLambda<T> lambda;         ///< diff, dint, shared_diff: 4 x [d] `lambda_q1` ... `lambda_k2`
    RmsNorm<T> subln;             ///< diff, dint, shared_diff: [2d] `subln.weight` (ones when PairNorm::plain),
                                  ///< eps conventions.pair_norm_eps (1e-5 in our format)
    SharedDiffFactors<T> shared;  ///< shared_diff: bases and low-rank factors

    AttentionWeights() = default;

    /// The weights a module of `config` (validated) uses: all-zero projections, norm weights one;
    /// the projections in stored_format(`weights`, their inputs).
    explicit AttentionWeights(const AttentionConfig& config, WeightFormat weights = WeightFormat::f32) {
        const Index D = config.d_model, d = config.head_dim();
        const auto projection = [&](Index rows, Index cols) {
            return LinearWeight<T>(rows, cols, stored_format(weights, cols));
        };
        if (config.kind == AttentionKind::shared_diff) {
            shared = SharedDiffFactors<T>(D, config.n_heads, d, config.shared_diff_rank);
        } else {
            q_proj = projection(config.q_width(), D);
            k_proj = projection(config.k_width(), D);
        }
        v_proj = projection(config.v_width(), D);
        out_proj = projection(D, config.out_width());
        if (config.kind == AttentionKind::diff_v2) lambda_proj = projection(config.n_heads, D);
        if (config.has_lambda()) lambda = DiffLambda<T>(d);
        if (config.has_subln()) subln = RmsNorm<T>(2 * d, config.conventions.pair_norm_eps);
    }

    /// f(w) for each projection weight of a module of `config` that is a model-file tensor (not
    /// Shared DIFF's merged weights).
    template <typename F>
    void for_each_projection(const AttentionConfig& config, F&& f) const {
        if (config.kind != AttentionKind::shared_diff) {
            f(q_proj);
            f(k_proj);
        }
        f(v_proj);
        f(out_proj);
        if (config.kind == AttentionKind::diff_v2) f(lambda_proj);
    }

    /// The model-file tensors of a module of `config` under `prefix`, in the order of docs/math.md
    /// §3, with their file shapes, viewing the storage of `weights`, or as table entries only when
    /// `weights` is null (what a checkpoint must hold, checked before anything is allocated). With
    /// HeadPairing::halves the row blocks of q_proj, k_proj and v_proj (one map, or one value half,
    /// of d rows each) go to the rows stored_head() gives, so that the stripe layout the kernels
    /// read holds DiffLlama's pairs (docs/checkpoints.md, "DiffLlama").
    static void list_tensors(const AttentionConfig& config, const std::string& prefix, ParameterList<T>& list,
                             AttentionWeights* weights) {
        AttentionWeights* w = weights;
        const Index D = config.d_model, d = config.head_dim();
        const HeadPairing pairing = config.conventions.head_pairing;
        const auto projection = [&](const char* name, Index rows, LinearWeight<T>* m) {
            std::vector<ParameterSlice<T>> slices;
            if (m != nullptr && pairing == HeadPairing::stripe) slices.push_back(ParameterSlice<T>::of(*m));
            for (Index block = 0, n = rows / d; m != nullptr && pairing != HeadPairing::stripe && block < n; ++block) {
                slices.push_back(ParameterSlice<T>::rows_of(*m, stored_head(pairing, block, n) * d, d));
            }
            list.add(prefix + name, {rows, D}, std::move(slices), true);
        };
        if (config.kind == AttentionKind::shared_diff) {
            SharedDiffFactors<T>::list_tensors(D, config.n_heads, d, config.shared_diff_rank, prefix, list,
                                               w ? &w->shared : nullptr);
        } else {
            projection("q_proj.weight", config.q_width(), w ? &w->q_proj : nullptr);
            projection("k_proj.weight", config.k_width(), w ? &w->k_proj : nullptr);
        }
        projection("v_proj.weight", config.v_width(), w ? &w->v_proj : nullptr);
        list.add(prefix + config.out_proj_name() + ".weight", D, config.out_width(), w ? &w->out_proj : nullptr);
        if (config.kind == AttentionKind::diff_v2) {
            list.add(prefix + "lambda_proj.weight", config.n_heads, D, w ? &w->lambda_proj : nullptr);
        }
        if (config.has_lambda()) {
            list.add(prefix + "lambda_q1", d, w ? &w->lambda.q1 : nullptr);
            list.add(prefix + "lambda_k1", d, w ? &w->lambda.k1 : nullptr);
            list.add(prefix + "lambda_q2", d, w ? &w->lambda.q2 : nullptr);
            list.add(prefix + "lambda_k2", d, w ? &w->lambda.k2 : nullptr);
        }
        if (config.has_subln_weight()) list.add(prefix + "subln.weight", 2 * d, w ? &w->subln.weight : nullptr);
    }
};

}  // namespace diffattn
