// The weights of one attention module (docs/math.md §3): their shapes for each attention kind,
// and the model-file tensors that hold them (names, file shapes, and where each row block of a
// projection is stored under the checkpoint family's head pairing, docs/checkpoints.md).
#pragma once

#include "diffattn/core/types.hpp"
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
/// empty. Shapes in nn.Linear layout [out x in]; d, dv, widths as in AttentionConfig.
template <typename T>
struct AttentionWeights {
    WeightMatrix<T> q_proj;       ///< [q_width x D]  `q_proj.weight` (shared_diff: merged weights after merge())
    WeightMatrix<T> k_proj;       ///< [k_width x D]  `k_proj.weight` (shared_diff: merged weights after merge())
    WeightMatrix<T> v_proj;       ///< [v_width x D]  `v_proj.weight`
    WeightMatrix<T> out_proj;     ///< [D x out_width] `out_proj.weight` (diff_v2: `o_proj.weight`)
    WeightMatrix<T> lambda_proj;  ///< diff_v2: [H x D] `lambda_proj.weight`
    DiffLambda<T> lambda;         ///< diff, dint, shared_diff: 4 x [d] `lambda_q1` ... `lambda_k2`
    RmsNorm<T> subln;             ///< diff, dint, shared_diff: [2d] `subln.weight` (ones when PairNorm::plain),
                                  ///< eps conventions.pair_norm_eps (1e-5 in our format)
    SharedDiffFactors<T> shared;  ///< shared_diff: bases and low-rank factors

    AttentionWeights() = default;

    /// The weights a module of `config` (validated) uses: all-zero projections, norm weights one.
    explicit AttentionWeights(const AttentionConfig& config) {
        const Index D = config.d_model, d = config.head_dim();
        if (config.kind == AttentionKind::shared_diff) {
            shared = SharedDiffFactors<T>(D, config.n_heads, d, config.shared_diff_rank);
        } else {
            q_proj = WeightMatrix<T>(config.q_width(), D);
            k_proj = WeightMatrix<T>(config.k_width(), D);
        }
        v_proj = WeightMatrix<T>(config.v_width(), D);
        out_proj = WeightMatrix<T>(D, config.out_width());
        if (config.kind == AttentionKind::diff_v2) lambda_proj = WeightMatrix<T>(config.n_heads, D);
        if (config.has_lambda()) lambda = DiffLambda<T>(d);
        if (config.has_subln()) subln = RmsNorm<T>(2 * d, config.conventions.pair_norm_eps);
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
        const auto projection = [&](const char* name, Index rows, WeightMatrix<T>* m) {
            std::vector<ParameterSlice<T>> slices;
            if (m != nullptr && pairing == HeadPairing::stripe) slices.push_back(ParameterSlice<T>::of(*m));
            for (Index block = 0, n = rows / d; m != nullptr && pairing != HeadPairing::stripe && block < n; ++block) {
                slices.push_back(ParameterSlice<T>::block(*m, stored_head(pairing, block, n) * d, 0, d, D));
            }
            list.add(prefix + name, {rows, D}, std::move(slices));
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
