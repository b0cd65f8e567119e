// Shared DIFF projections (docs/math.md §3.3, shared-diff-transformer): every query/key map is a shared
// base plus a per-head low-rank correction,
//   Q1[h] = X (q_base^T + q1_a[h] q1_b[h]^T),  likewise Q2 (q2_*), K1 (k1_*), K2 (k2_*).
//
// Two ways to compute it, which agree up to rounding (tested):
//   factored: Q_t = X q_base^T + (X a_t) b_t^T        O(N D d + N D 2H r + N 2H r d)
//   merged:   Q = X W^T with W_t = q_base + b_t a_t^T  O(N D 2H d), after a one-off merge
// The factored form is cheaper whenever r is small next to d; the merged form turns the module
// into a plain DIFF module with rep = 1 (one GEMM for all maps).
//
// Storage is compute-friendly: map t = 2h + m (m = 0 for q1/k1, 1 for q2/k2) of every head sits
// side by side, so X a for all maps is one GEMM. The model file's [H, D, r] / [H, d, r] tensors
// are scattered into it by the parameter list (layers/parameters.hpp).
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/layers/linear.hpp"
#include "diffattn/layers/parameters.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace diffattn {

namespace detail {
/// Tokens per block of the factored projection: about 256 (detail::linear_block), which gives a
/// 1024-token forward 4 blocks to share out, while each block still runs its products over
/// 256+ rows (re-packing a block's weights costs ~1/256 of its products).
inline Index shared_diff_token_block(Index tokens) { return linear_block(tokens, 256, 1); }
}  // namespace detail

template <typename T>
struct SharedDiffFactors {
    WeightMatrix<T> q_base;  ///< [d x D]      `q_base.weight`
    WeightMatrix<T> k_base;  ///< [d x D]      `k_base.weight`
    WeightMatrix<T> q_a;     ///< [D x 2H r]   map t = 2h + m at columns [t r, (t+1) r): q1_a[h] (m = 0), q2_a[h] (m = 1)
    WeightMatrix<T> k_a;     ///< [D x 2H r]   k1_a[h], k2_a[h] likewise
    WeightMatrix<T> q_b;     ///< [2H d x r]   map t at rows [t d, (t+1) d): q1_b[h], q2_b[h]
    WeightMatrix<T> k_b;     ///< [2H d x r]   k1_b[h], k2_b[h] likewise

    SharedDiffFactors() = default;
    SharedDiffFactors(Index d_model, Index n_heads, Index head_dim, Index rank)
        : q_base(head_dim, d_model), k_base(head_dim, d_model), q_a(d_model, 2 * n_heads * rank),
          k_a(d_model, 2 * n_heads * rank), q_b(2 * n_heads * head_dim, rank), k_b(2 * n_heads * head_dim, rank) {}

    Index head_dim() const { return q_base.rows(); }
    Index rank() const { return q_b.cols(); }
    Index n_maps() const { return q_b.rows() / q_base.rows(); }  // 2H

    /// Factored projection of queries and keys.
    ///   x [N x D]; base [N x 2d] and xa [N x 4 H r] scratch; q, k [N x 2H d] (map t at [t d, (t+1) d)).
    ///   context: the tokens are cut into fixed blocks (detail::shared_diff_token_block), each projected
    ///            whole (bases, X a and the maps of its rows) on one of up to context.threads threads,
    ///            or on fewer when the work is below context.min_parallel_flops per thread. The
    ///            blocks depend on N only, so results do not depend on the thread count.
    void project(const ConstMatrixRef<T>& x, MatrixRef<T> base, MatrixRef<T> xa, MatrixRef<T> q, MatrixRef<T> k,
                 const ExecutionContext& context = {}) const {
        const Index d = head_dim(), r = rank(), maps = n_maps(), tokens = x.rows();
        constexpr const char* function = "SharedDiffFactors::project";
        detail::require_same_cols(function, detail::named("x", x), detail::named("q_base", q_base));
        detail::require_shape(function, detail::named("base", base), tokens, 2 * d);
        detail::require_shape(function, detail::named("xa", xa), tokens, 2 * maps * r);
        detail::require_shape(function, detail::named("q", q), tokens, maps * d);
        detail::require_shape(function, detail::named("k", k), tokens, maps * d);
        const Index block = detail::shared_diff_token_block(tokens);
        const Index blocks = (tokens + block - 1) / block;
        // Per token, for q and k each: X base^T (2 D d), X a (2 D 2H r), and the maps (2 2H r d).
        const double flops = 4.0 * static_cast<double>(tokens) *
                             static_cast<double>(x.cols() * d + x.cols() * maps * r + maps * r * d);
        detail::parallel_for(blocks, context.threads_for(flops), detail::Schedule::equal_tasks,
                             [&](Index b, int /*thread*/) {
                                 const Index first = b * block, rows = std::min(block, tokens - first);
                                 const auto x_rows = x.middleRows(first, rows);
                                 project_one(x_rows, q_base, q_a, q_b, base.block(first, 0, rows, d),
                                             xa.block(first, 0, rows, maps * r), q.middleRows(first, rows), d, r, maps);
                                 project_one(x_rows, k_base, k_a, k_b, base.block(first, d, rows, d),
                                             xa.block(first, maps * r, rows, maps * r), k.middleRows(first, rows), d,
                                             r, maps);
                             });
    }

    /// Merged weights in nn.Linear layout: q_proj, k_proj [2H d x D], rows of map t = base + b_t a_t^T.
    void merge_into(WeightMatrix<T>& q_proj, WeightMatrix<T>& k_proj) const {
        merge_one(q_base, q_a, q_b, q_proj);
        merge_one(k_base, k_a, k_b, k_proj);
    }

    /// The model-file tensors: q_base.weight, k_base.weight, then q1_a, q1_b, q2_a, q2_b, k1_a, ... .
    void collect_parameters(const std::string& prefix, ParameterList<T>& list) {
        list_tensors(q_base.cols(), n_maps() / 2, head_dim(), rank(), prefix, list, this);
    }

    /// The same tensors for D = d_model, H heads, map width d, rank r, viewing the storage of
    /// `factors`, or as table entries only when `factors` is null.
    static void list_tensors(Index d_model, Index n_heads, Index d, Index r, const std::string& prefix,
                             ParameterList<T>& list, SharedDiffFactors* factors) {
        list.add(prefix + "q_base.weight", d, d_model, factors ? &factors->q_base : nullptr);
        list.add(prefix + "k_base.weight", d, d_model, factors ? &factors->k_base : nullptr);
        const char* names[2] = {"q", "k"};
        for (int which = 0; which < 2; ++which) {
            WeightMatrix<T>* a = factors ? (which == 0 ? &factors->q_a : &factors->k_a) : nullptr;
            WeightMatrix<T>* b = factors ? (which == 0 ? &factors->q_b : &factors->k_b) : nullptr;
            for (Index m = 0; m < 2; ++m) {
                std::vector<ParameterSlice<T>> a_slices, b_slices;
                for (Index h = 0; h < n_heads && factors; ++h) {
                    const Index t = 2 * h + m;
                    a_slices.push_back(ParameterSlice<T>::block(*a, 0, t * r, d_model, r));
                    b_slices.push_back(ParameterSlice<T>::block(*b, t * d, 0, d, r));
                }
                const std::string stem = prefix + names[which] + std::to_string(m + 1);  // "q1", "q2", "k1", "k2"
                list.add(stem + "_a", {n_heads, d_model, r}, std::move(a_slices));
                list.add(stem + "_b", {n_heads, d, r}, std::move(b_slices));
            }
        }
    }

private:
    template <typename Rows, typename Base, typename Xa, typename Out>
    static void project_one(const Rows& x, const WeightMatrix<T>& base_w, const WeightMatrix<T>& a,
                            const WeightMatrix<T>& b, Base base, Xa xa, Out out, Index d, Index r, Index maps) {
        base.noalias() = x * base_w.transpose();  // [N x d]     X base^T, shared by all maps
        xa.noalias() = x * a;                     // [N x 2H r]  X a_t for every map t
        for (Index t = 0; t < maps; ++t) {
            auto map = out.middleCols(t * d, d);  // [N x d]
            map = base;
            map.noalias() += xa.middleCols(t * r, r) * b.middleRows(t * d, d).transpose();
        }
    }

    static void merge_one(const WeightMatrix<T>& base_w, const WeightMatrix<T>& a, const WeightMatrix<T>& b,
                          WeightMatrix<T>& merged) {
        const Index d = base_w.rows(), r = b.cols(), maps = b.rows() / d;
        merged.resize(maps * d, base_w.cols());
        for (Index t = 0; t < maps; ++t) {
            auto rows = merged.middleRows(t * d, d);  // [d x D]
            rows = base_w;
            rows.noalias() += b.middleRows(t * d, d) * a.middleCols(t * r, r).transpose();
        }
    }
};

/// Parameters of the Shared DIFF projections: 2 d D (bases) + 4 H r (D + d) (factors).
constexpr Index shared_diff_factor_parameter_count(Index d_model, Index n_heads, Index head_dim, Index rank) {
    return 2 * head_dim * d_model + 4 * n_heads * rank * (d_model + head_dim);
}

}  // namespace diffattn
