// Plain reference implementation of the single-head kernels (docs/math.md §2; the masks and single
// maps they are built from, §1 and §2.1: reference_maps.hpp): the oracle.
//
// Every formula of docs/math.md §1-2 transcribed as literally as possible, one matrix at a time, with the
// attention maps MATERIALISED (N x S each) so that they can be returned for analysis and used to
// check the fast kernels (docs/math.md §7: the fast kernels are compared with this code run in double).
// Nothing here is tiled, fused or online; it is O(N S) memory and meant for tests, debugging and
// users who want to look at the maps, not for inference.
//
// Conventions (as in the fast API, docs/TEAM_API.md):
//   Q, Q1, Q2 [N x d], K, K1, K2 [S x d], V [S x dv], S >= N, row n = token n.
//   Mask causal: query n sees key j iff j <= n + (S - N); key padding: only keys j < valid_len exist.
//   Scale s = options.scale, or 1/sqrt(d) when unset.
// Outputs are plain matrix products (combined * V), so a NaN or Inf in a value row reaches every
// output row, even rows whose weight on that key is an exact 0 (0 * NaN = NaN); the fast kernels
// keep such rows finite. Use the reference as an oracle for finite inputs.
// Arguments are checked by the fast entry points' own checks (kernels/attention_checks.hpp:
// ShapeError / OptionError naming the function and the shapes), with the function named
// "reference::<kernel>". Matrices come in as
// ConstMatrixRef<T> like the fast kernels', so a head that is a middleCols block binds without a
// copy; T follows the matrices (reference::softmax_attention(q, k, v)) or is given
// (reference::softmax_attention<double>(...)).
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/attention_checks.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/reference_maps.hpp"

#include <optional>

namespace diffattn::reference {

/// `T` in a non-deduced context: lambda follows the matrices' scalar (pass 0.5 with float inputs).
template <typename T>
struct NonDeduced {
    using type = T;
};
template <typename T>
using NonDeducedT = typename NonDeduced<T>::type;

/// Every map of one kernel call. Maps are [N x S], `out` is [N x dv].
template <typename T>
struct AttentionMaps {
    RowMatrix<T> a1;        ///< softmax map (softmax kernel: A; DIFF/DINT: A1)
    RowMatrix<T> a2;        ///< DIFF/DINT: A2; empty for the softmax kernel
    RowMatrix<T> integral;  ///< DINT: softmax_M(G), G or 1 g (by integral mode); empty otherwise
    RowMatrix<T> combined;  ///< the final attention matrix: A, A1 - lambda A2, or A1 - lambda A2 + lambda integral
    RowMatrix<T> out;       ///< combined * V
};

// ---------------------------------------------------------------------------------------------
// Argument checks: the fast entry points' (kernels/attention_checks.hpp)
// ---------------------------------------------------------------------------------------------
namespace detail {

/// Q [N x d], K [S x d], V [S x dv] and the options.
template <typename T>
void check_single(const char* function, const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k,
                  const ConstMatrixRef<T>& v, const AttentionOptions& options) {
    diffattn::detail::check_qkv_shapes(function, "Q", q, "K", k, "V", v);
    diffattn::detail::resolve_options<T>(function, options, "Q", q, "K", k);
}

/// The DIFF/DINT inputs: Q1, Q2 [N x d]; K1, K2 [S x d]; V [S x dv]; lambda finite; the options.
template <typename T>
void check_diff(const char* function, const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1,
                const ConstMatrixRef<T>& q2, const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda,
                const AttentionOptions& options) {
    diffattn::detail::check_second_map(function, q1, k1, q2, k2, static_cast<double>(lambda));
    diffattn::detail::check_qkv_shapes(function, "Q1", q1, "K1", k1, "V", v);
    diffattn::detail::resolve_options<T>(function, options, "Q1", q1, "K1", k1);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// docs/math.md §2.1: softmax attention
// ---------------------------------------------------------------------------------------------

/// A = softmax(s Q K^T + M), O = A V. Returns a1 = combined = A and out = O.
template <typename T>
AttentionMaps<T> softmax_attention_maps(const ConstMatrixRef<T>& q /*[N x d]*/, const ConstMatrixRef<T>& k /*[S x d]*/,
                                        const ConstMatrixRef<T>& v /*[S x dv]*/,
                                        const AttentionOptions& options = {}) {
    constexpr const char* function = "reference::softmax_attention";
    detail::check_single<T>(function, q, k, v, options);

    AttentionMaps<T> maps;
    maps.a1 = attention_map<T>(q, k, options);  // A = softmax(s Q K^T + M)      [N x S]
    maps.combined = maps.a1;                 //                               [N x S]
    maps.out = maps.combined * v;            // O = A V                       [N x dv]
    return maps;
}

/// docs/math.md §2.1: O = softmax(s Q K^T + M) V  [N x dv].
template <typename T>
RowMatrix<T> softmax_attention(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k, const ConstMatrixRef<T>& v,
                               const AttentionOptions& options = {}) {
    return softmax_attention_maps<T>(q, k, v, options).out;
}

// ---------------------------------------------------------------------------------------------
// docs/math.md §2.2: differential (DIFF) attention
// ---------------------------------------------------------------------------------------------

/// A1 = softmax(s Q1 K1^T + M), A2 = softmax(s Q2 K2^T + M), O = (A1 - lambda A2) V.
template <typename T>
AttentionMaps<T> diff_attention_maps(const ConstMatrixRef<T>& q1 /*[N x d]*/, const ConstMatrixRef<T>& k1 /*[S x d]*/,
                                     const ConstMatrixRef<T>& q2 /*[N x d]*/, const ConstMatrixRef<T>& k2 /*[S x d]*/,
                                     const ConstMatrixRef<T>& v /*[S x dv]*/, NonDeducedT<T> lambda,
                                     const AttentionOptions& options = {}) {
    detail::check_diff<T>("reference::diff_attention", q1, k1, q2, k2, v, lambda, options);

    AttentionMaps<T> maps;
    maps.a1 = attention_map<T>(q1, k1, options);  // A1 = softmax(s Q1 K1^T + M)   [N x S]
    maps.a2 = attention_map<T>(q2, k2, options);  // A2 = softmax(s Q2 K2^T + M)   [N x S]
    maps.combined = maps.a1 - lambda * maps.a2;  // A1 - lambda A2                [N x S]
    maps.out = maps.combined * v;                // O = (A1 - lambda A2) V        [N x dv]
    return maps;
}

/// docs/math.md §2.2: O = (A1 - lambda A2) V  [N x dv].
template <typename T>
RowMatrix<T> diff_attention(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
                            const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, NonDeducedT<T> lambda,
                            const AttentionOptions& options = {}) {
    return diff_attention_maps<T>(q1, k1, q2, k2, v, lambda, options).out;
}

// ---------------------------------------------------------------------------------------------
// docs/math.md §2.3: DINT attention
// ---------------------------------------------------------------------------------------------

/// The history a DINT call needs for the query rows before it (docs/math.md §2.3, 6), built from the
/// materialised A1 rows of those earlier queries: a1 [rows x keys], v [keys x dv] (the values those
/// rows attended to). rows = a1.rows(), a1_column_sum = column sums of A1 [keys],
/// o1_row_sum = sum of the rows of O1 = A1 V [dv]. Pad a1_column_sum with zeros for later keys.
template <typename T>
DintHistory<T> dint_history(const ConstMatrixRef<T>& a1 /*[rows x keys]*/, const ConstMatrixRef<T>& v /*[keys x dv]*/) {
    require<ShapeError>(v.rows() == a1.cols(), "reference::dint_history: V is ", v.rows(), "x", v.cols(), " but A1 is ",
                        a1.rows(), "x", a1.cols(), " (V needs one row per key of A1)");
    DintHistory<T> history;
    history.rows = a1.rows();
    if (a1.rows() == 0) {  // Eigen's colwise() over 0 rows offsets a null data pointer (UBSan: undefined)
        history.a1_column_sum = Vector<T>::Zero(a1.cols());
        history.o1_row_sum = Vector<T>::Zero(v.cols());
        return history;
    }
    history.a1_column_sum = a1.colwise().sum().transpose();  // sum_m A1[m, :]   [keys]
    const RowMatrix<T> o1 = a1 * v;                          // O1 = A1 V        [rows x dv]
    history.o1_row_sum = o1.colwise().sum().transpose();     // sum_m O1[m, :]   [dv]
    return history;
}

/// DINT (docs/math.md §2.3), gamma = lambda:
///   A1, A2 as in DIFF;
///   causal_softmax: G[n,:] = (1/(R+n+1)) (H + sum_{m<=n} A1[m,:]), integral = softmax_M(G)
///                   (softmax of row n of G over the keys query n may see, docs/math.md §2.3 / v2 eq. 5-6);
///   causal_mean:    integral = G (v2 eq. 5 without the softmax);
///   global_mean:    g = (1/N) sum_m A1[m,:], integral = 1 g (v1 eq. 5-7; mask none only);
///   combined = A1 - lambda A2 + lambda integral,  O = combined V.
/// R = history->rows earlier query rows (KV cache, S - N of them) and H = their A1 column sums
/// (history->a1_column_sum, zero-padded to S keys). The reference materialises G, so in BOTH causal
/// modes it reads a1_column_sum (not o1_row_sum); build histories with dint_history().
/// A query row with no allowed key gets an all-zero combined row and output (docs/math.md §1), in every mode.
template <typename T>
AttentionMaps<T> dint_attention_maps(const ConstMatrixRef<T>& q1 /*[N x d]*/, const ConstMatrixRef<T>& k1 /*[S x d]*/,
                                     const ConstMatrixRef<T>& q2 /*[N x d]*/, const ConstMatrixRef<T>& k2 /*[S x d]*/,
                                     const ConstMatrixRef<T>& v /*[S x dv]*/, NonDeducedT<T> lambda,
                                     DintIntegral integral_mode, const AttentionOptions& options = {},
                                     const DintHistory<T>* history = nullptr) {
    constexpr const char* function = "reference::dint_attention";
    detail::check_diff<T>(function, q1, k1, q2, k2, v, lambda, options);
    const Index seq_len_q = q1.rows();            // N
    const Index seq_len_kv = k1.rows();           // S
    const Index cached = seq_len_kv - seq_len_q;  // S - N
    const Index history_rows = history ? history->rows : 0;

    // docs/math.md §2.3 / 6: the mode, and with a KV cache the A1 rows of the S - N earlier queries.
    diffattn::detail::check_dint_integral(function, integral_mode, options.mask, diffattn::detail::named("Q1", q1),
                                          diffattn::detail::named("K1", k1),
                                          history != nullptr ? std::optional<Index>(history_rows) : std::nullopt);
    const bool causal_mode = integral_mode != DintIntegral::global_mean;
    if (causal_mode && history_rows > 0) {
        require<ShapeError>(history->a1_column_sum.size() >= cached, function, ": history a1_column_sum has ",
                            history->a1_column_sum.size(), " entries but ", cached, " keys are cached",
                            " (the reference materialises G and needs the A1 column sums in both causal modes)");
        for (Index j = seq_len_kv; j < history->a1_column_sum.size(); ++j) {
            require<ShapeError>(history->a1_column_sum[j] == T(0), function, ": history A1 column sum of key ", j,
                                " is nonzero but only ", seq_len_kv, " keys exist");
        }
    }

    AttentionMaps<T> maps;
    maps.a1 = attention_map<T>(q1, k1, options);  // A1 = softmax(s Q1 K1^T + M)   [N x S]
    maps.a2 = attention_map<T>(q2, k2, options);  // A2 = softmax(s Q2 K2^T + M)   [N x S]

    if (causal_mode) {
        // H: column sums of A1 over the earlier rows, zero-padded to S keys.   [1 x S]
        RowMatrix<T> running_sum = RowMatrix<T>::Zero(1, seq_len_kv);
        if (history_rows > 0) {
            for (Index j = 0; j < seq_len_kv && j < history->a1_column_sum.size(); ++j) {
                running_sum(0, j) = history->a1_column_sum[j];
            }
        }
        // G[n,:] = (1/(R + n + 1)) (H + sum_{m<=n} A1[m,:])                     [N x S]
        RowMatrix<T> g(seq_len_q, seq_len_kv);
        for (Index n = 0; n < seq_len_q; ++n) {
            running_sum += maps.a1.row(n);
            g.row(n) = running_sum / static_cast<T>(history_rows + n + 1);
        }
        if (integral_mode == DintIntegral::causal_softmax) {
            maps.integral = masked_softmax<T>(mask_logits<T>(g, options));  // softmax_M(G): same mask M as A1
        } else {
            maps.integral = g;  // causal_mean: G
        }
    } else {
        // g = (1/N) sum_m A1[m,:], repeated for every query: 1 g                [N x S]
        RowMatrix<T> g_row = RowMatrix<T>::Zero(1, seq_len_kv);
        for (Index m = 0; m < seq_len_q; ++m) g_row += maps.a1.row(m);
        if (seq_len_q > 0) g_row /= static_cast<T>(seq_len_q);
        maps.integral = RowMatrix<T>::Ones(seq_len_q, 1) * g_row;
    }

    // combined = A1 - lambda A2 + lambda integral (gamma = lambda)              [N x S]
    maps.combined = maps.a1 - lambda * maps.a2 + lambda * maps.integral;
    // docs/math.md §1: a query row allowed no key at all has an all-zero output row (this only matters for
    // causal_mean with a history, where G would otherwise carry the earlier rows' mass).
    const Index valid_len = valid_len_of(options, seq_len_kv);
    for (Index n = 0; n < seq_len_q; ++n) {
        if (!row_has_allowed_key(options.mask, n, seq_len_q, seq_len_kv, valid_len)) maps.combined.row(n).setZero();
    }
    maps.out = maps.combined * v;  // O = combined V                          [N x dv]
    return maps;
}

/// docs/math.md §2.3: O = (A1 - lambda A2 + lambda integral) V  [N x dv].
template <typename T>
RowMatrix<T> dint_attention(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
                            const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, NonDeducedT<T> lambda,
                            DintIntegral integral_mode, const AttentionOptions& options = {},
                            const DintHistory<T>* history = nullptr) {
    return dint_attention_maps<T>(q1, k1, q2, k2, v, lambda, integral_mode, options, history).out;
}

// ---------------------------------------------------------------------------------------------
// T from the matrices: reference::softmax_attention(q, k, v) with RowMatrix, Map or block arguments
// (a ConstMatrixRef<T> parameter alone would not deduce T from them). Each calls the function of the
// same name above with T = the scalar of its first matrix.
// ---------------------------------------------------------------------------------------------

template <typename Q, typename K, typename V, typename T = ScalarOf<Q>>
AttentionMaps<T> softmax_attention_maps(const Q& q, const K& k, const V& v, const AttentionOptions& options = {}) {
    return softmax_attention_maps<T>(q, k, v, options);
}
template <typename Q, typename K, typename V, typename T = ScalarOf<Q>>
RowMatrix<T> softmax_attention(const Q& q, const K& k, const V& v, const AttentionOptions& options = {}) {
    return softmax_attention<T>(q, k, v, options);
}
template <typename Q1, typename K1, typename Q2, typename K2, typename V, typename T = ScalarOf<Q1>>
AttentionMaps<T> diff_attention_maps(const Q1& q1, const K1& k1, const Q2& q2, const K2& k2, const V& v,
                                     NonDeducedT<T> lambda, const AttentionOptions& options = {}) {
    return diff_attention_maps<T>(q1, k1, q2, k2, v, lambda, options);
}
template <typename Q1, typename K1, typename Q2, typename K2, typename V, typename T = ScalarOf<Q1>>
RowMatrix<T> diff_attention(const Q1& q1, const K1& k1, const Q2& q2, const K2& k2, const V& v, NonDeducedT<T> lambda,
                            const AttentionOptions& options = {}) {
    return diff_attention<T>(q1, k1, q2, k2, v, lambda, options);
}
template <typename A1, typename V, typename T = ScalarOf<A1>>
DintHistory<T> dint_history(const A1& a1, const V& v) {
    return dint_history<T>(a1, v);
}
template <typename Q1, typename K1, typename Q2, typename K2, typename V, typename T = ScalarOf<Q1>>
AttentionMaps<T> dint_attention_maps(const Q1& q1, const K1& k1, const Q2& q2, const K2& k2, const V& v,
                                     NonDeducedT<T> lambda, DintIntegral integral_mode,
                                     const AttentionOptions& options = {},
                                     const DintHistory<NonDeducedT<T>>* history = nullptr) {
    return dint_attention_maps<T>(q1, k1, q2, k2, v, lambda, integral_mode, options, history);
}
template <typename Q1, typename K1, typename Q2, typename K2, typename V, typename T = ScalarOf<Q1>>
RowMatrix<T> dint_attention(const Q1& q1, const K1& k1, const Q2& q2, const K2& k2, const V& v, NonDeducedT<T> lambda,
                            DintIntegral integral_mode, const AttentionOptions& options = {},
                            const DintHistory<NonDeducedT<T>>* history = nullptr) {
    return dint_attention<T>(q1, k1, q2, k2, v, lambda, integral_mode, options, history);
}

}  // namespace diffattn::reference
