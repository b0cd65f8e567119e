// The argument checks of one attention call (docs/errors.md: wrong shapes, invalid kernel options),
// owned here for the fast kernels and the reference alike: the shapes of Q, K and V (and of a
// differential call's second map), and the options (valid_len, scale, mask) resolved against them.
// A fast call adds its output's shape, the output's aliasing and the thread count (check_attention).
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/key_rows.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/product_path.hpp"

#include <cmath>
#include <optional>
#include <type_traits>

namespace diffattn::detail {

/// Options after validation, with defaults filled in.
struct ResolvedOptions {
    MaskKind mask;
    Index valid_len;  ///< keys [0, valid_len) exist
    double scale;     ///< s > 0
    int threads;      ///< threads this build will use (1 without OpenMP)
    ProductPath products = ProductPath::scalar;  ///< how the tiled core multiplies (packed_tiles.hpp)
};

/// Q [N x d], K [S x d], V [S x dv]: the head dims of Q and K agree, K and V have S rows, and S >= N
/// (the keys include every query). names: how the function's documentation names q, k, v.
template <typename Q, typename K, typename V>
void check_qkv_shapes(const char* function, const char* q_name, const Q& q, const char* k_name, const K& k,
                      const char* v_name, const V& v) {
    require_same_cols(function, named(k_name, k), named(q_name, q));
    require_same_rows(function, named(v_name, v), named(k_name, k));
    require<ShapeError>(k.rows() >= q.rows(), function, ": ", named(k_name, k), " but ", named(q_name, q),
                        " (need at least as many keys as queries: S >= N)");
}

/// The second map of a DIFF or DINT call: Q2 shaped as Q1, K2 as K1; and lambda finite.
template <typename Q, typename K>
void check_second_map(const char* function, const Q& q1, const K& k1, const Q& q2, const K& k2, double lambda) {
    require_same_shape(function, named("Q2", q2), named("Q1", q1));
    require_same_shape(function, named("K2", k2), named("K1", k1));
    require_finite(function, "lambda", lambda);
}

/// The shapes of a GDA call (docs/math.md §9) and its lambda: Q2 [N x d] the noise head's queries
/// with d > 0, K2 [S x d] and V [S x dv] as a single map's, K1 shaped as K2, and Q1 [N x gr d]: the
/// gr >= 1 signal heads side by side. Returns gr.
template <typename Q, typename K, typename V>
Index check_gda_shapes(const char* function, const Q& q1, const K& k1, const Q& q2, const K& k2, const V& v,
                       double lambda) {
    check_qkv_shapes(function, "Q2", q2, "K2", k2, "V", v);
    require_same_shape(function, named("K1", k1), named("K2", k2));
    require_finite(function, "lambda", lambda);
    require<ShapeError>(q2.cols() > 0, function, ": ", named("Q2", q2),
                        " (the noise head's width d must be > 0: Q1 holds the signal heads in blocks of d)");
    require<ShapeError>(q1.rows() == q2.rows() && q1.cols() >= q2.cols() && q1.cols() % q2.cols() == 0, function,
                        ": ", named("Q1", q1), " but ", named("Q2", q2),
                        " (Q1 holds gr >= 1 signal heads of Q2's width side by side, one row per query)");
    return q1.cols() / q2.cols();
}

/// The options of a call with queries q [N x d] in scalar T and keys k [S x d]: valid_len in [0, S],
/// scale finite and > 0 in double and in T (a float kernel would turn 1e300 into Inf and 1e-300 into
/// 0), a default scale 1/sqrt(d) only for d > 0, a known mask. `threads` is left 1: the caller's.
template <typename T, typename K>
ResolvedOptions resolve_options(const char* function, const AttentionOptions& options, const char* q_name,
                                const ConstMatrixRef<T>& q, const char* k_name, const K& k) {
    ResolvedOptions resolved{options.mask, k.rows(), 0.0, 1};
    if (options.valid_len) {
        resolved.valid_len = *options.valid_len;
        require<OptionError>(resolved.valid_len >= 0 && resolved.valid_len <= k.rows(), function,
                             ": valid_len is ", resolved.valid_len, " but ", named(k_name, k),
                             " (need 0 <= valid_len <= S)");
    }
    if (options.scale) {
        resolved.scale = *options.scale;
        require<OptionError>(std::isfinite(resolved.scale) && resolved.scale > 0, function,
                             ": scale must be finite and > 0, got ", resolved.scale);
        const T scale_in_t = static_cast<T>(resolved.scale);
        require<OptionError>(std::isfinite(scale_in_t) && scale_in_t > 0, function, ": scale ", resolved.scale,
                             " is not a finite value > 0 in ", sizeof(T) == sizeof(float) ? "float" : "double");
    } else {
        require<ShapeError>(q.cols() > 0 || q.rows() == 0, function, ": ", named(q_name, q),
                            " (head dim 0 has no default scale 1/sqrt(d))");
        resolved.scale = q.cols() > 0 ? 1.0 / std::sqrt(static_cast<double>(q.cols())) : 1.0;
    }
    require<OptionError>(options.mask == MaskKind::none || options.mask == MaskKind::causal, function,
                         ": unknown mask kind");
    return resolved;
}

/// The integral mode and the earlier rows of a DINT call over Q1 [N x d] and K1 [S x d] (docs/math.md
/// §2.3, 6): a known mode; global_mean sees the future, so mask none and no earlier rows; a causal
/// mode over the S - N cached keys needs the DintHistory of exactly those rows. history_rows: the
/// history's rows, or nullopt without one.
inline void check_dint_integral(const char* function, DintIntegral integral, MaskKind mask, const NamedShape& q1,
                                const NamedShape& k1, std::optional<Index> history_rows) {
    const Index cached = k1.rows - q1.rows;
    switch (integral) {
        case DintIntegral::global_mean:
            require<OptionError>(mask == MaskKind::none, function,
                                 ": integral global_mean sees the future and needs mask none, not causal");
            require<OptionError>(history_rows.value_or(0) == 0, function,
                                 ": integral global_mean cannot continue from a history (KV cache) of ",
                                 history_rows.value_or(0), " rows");
            return;
        case DintIntegral::causal_mean:
        case DintIntegral::causal_softmax:
            break;
        default:
            throw OptionError(concat(function, ": unknown DintIntegral value"));
    }
    require<OptionError>(history_rows || cached == 0, function, ": ", k1, " but ", q1, "; a causal integral over ",
                         cached, " cached rows needs their DintHistory");
    require<OptionError>(history_rows.value_or(0) == cached, function, ": history has ", history_rows.value_or(0),
                         " rows but ", k1, " and ", q1, " (need history rows == S - N = ", cached, ")");
}

/// Checks the shapes of one query/key/value triple of a fast kernel and its output, and the
/// options and thread count.
///   names: how the function's documentation names q, k, v (e.g. "Q1", "K1", "V").
///   S:     the scalar K and V are stored in (T, or a half-precision KV cache's).
template <typename T, typename S = T>
ResolvedOptions check_attention(const char* function, const char* q_name, const char* k_name, const char* v_name,
                                const ConstMatrixRef<T>& q, const KeyOperand<S>& k, const ConstMatrixRef<S>& v,
                                const MatrixRef<T>& out, const AttentionOptions& options) {
    check_qkv_shapes(function, q_name, q, k_name, k, v_name, v);
    require_shape(function, named("out", out), q.rows(), v.cols());
    require_no_alias(function, "out", out, q_name, q);
    require_no_alias(function, "out", out, k_name, k);
    require_no_alias(function, "out", out, v_name, v);
    require_thread_count(function, options.threads);
    ResolvedOptions resolved = resolve_options<T>(function, options, q_name, q, k_name, k);
    resolved.threads = available_threads(options.threads);
    resolved.products = resolve_products<T>(function, options.compute);
    return resolved;
}

}  // namespace diffattn::detail
