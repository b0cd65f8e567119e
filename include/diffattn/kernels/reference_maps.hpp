// Plain reference of docs/math.md §1 and the first half of §2.1: which keys a query may see, the
// masked logits s Q K^T + M, and one softmax map over them, each [N x S] matrix MATERIALISED and
// every formula transcribed as literally as possible. The reference kernels (reference.hpp) build
// their maps from these; tests and analysis call them directly to look at one map. Nothing here is
// tiled, fused or online: O(N S) memory, for tests, debugging and analysis, not for inference.
// T follows the matrices (reference::attention_map(q, k, options)) or is given
// (reference::attention_map<double>(...)).
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/options.hpp"

#include <cmath>
#include <limits>

namespace diffattn::reference {

// ---------------------------------------------------------------------------------------------
// docs/math.md §1: masks
// ---------------------------------------------------------------------------------------------

/// Number of keys that exist: options.valid_len, or all S keys when unset (docs/math.md §1, key padding).
inline Index valid_len_of(const AttentionOptions& options, Index seq_len_kv) {
    return options.valid_len ? *options.valid_len : seq_len_kv;
}

/// docs/math.md §1: may query `query` (of N) see key `key` (of S)?
///   none:   every key;  causal: key <= query + (S - N);  key padding: key < valid_len.
inline bool key_allowed(MaskKind mask, Index query, Index key, Index seq_len_q, Index seq_len_kv, Index valid_len) {
    if (key >= valid_len) return false;                                            // key padding
    if (mask == MaskKind::causal) return key <= query + (seq_len_kv - seq_len_q);  // causal, offset S - N
    return true;                                                                   // none
}

/// True if query `query` is allowed at least one key (docs/math.md §1: otherwise its output row is zero).
inline bool row_has_allowed_key(MaskKind mask, Index query, Index seq_len_q, Index seq_len_kv, Index valid_len) {
    for (Index j = 0; j < seq_len_kv; ++j) {
        if (key_allowed(mask, query, j, seq_len_q, seq_len_kv, valid_len)) return true;
    }
    return false;
}

/// docs/math.md §1: the masked scores. `scores` is [N x S] (N = rows, S = cols); every entry the mask
/// forbids becomes a true -infinity, every other entry is copied unchanged.
template <typename T>
RowMatrix<T> mask_logits(const ConstMatrixRef<T>& scores, const AttentionOptions& options) {
    const Index seq_len_q = scores.rows();
    const Index seq_len_kv = scores.cols();
    const Index valid_len = valid_len_of(options, seq_len_kv);
    require<OptionError>(valid_len >= 0 && valid_len <= seq_len_kv, "reference::mask_logits: valid_len is ", valid_len,
                         " but must be in [0, ", seq_len_kv, "] (S = ", seq_len_kv, " keys)");
    RowMatrix<T> masked = scores;
    for (Index n = 0; n < seq_len_q; ++n) {
        for (Index j = 0; j < seq_len_kv; ++j) {
            if (!key_allowed(options.mask, n, j, seq_len_q, seq_len_kv, valid_len)) {
                masked(n, j) = -std::numeric_limits<T>::infinity();
            }
        }
    }
    return masked;
}

/// Softmax over the key axis (each row) of masked logits, subtracting the row max (docs/math.md §7).
/// Entries equal to -infinity get probability 0; a row whose entries are all -infinity (no allowed
/// key) is all zero, never NaN (docs/math.md §1). A NaN logit makes its whole row NaN.
template <typename T>
RowMatrix<T> masked_softmax(const ConstMatrixRef<T>& masked_logits) {
    const T minus_inf = -std::numeric_limits<T>::infinity();
    RowMatrix<T> probabilities = RowMatrix<T>::Zero(masked_logits.rows(), masked_logits.cols());
    for (Index n = 0; n < masked_logits.rows(); ++n) {
        // Row max over the allowed entries.
        bool any_allowed = false;
        bool any_nan = false;
        T row_max = minus_inf;
        for (Index j = 0; j < masked_logits.cols(); ++j) {
            const T x = masked_logits(n, j);
            if (std::isnan(x)) {
                any_nan = true;
            } else if (x != minus_inf) {
                any_allowed = true;
                if (x > row_max) row_max = x;
            }
        }
        if (any_nan) {
            probabilities.row(n).setConstant(std::numeric_limits<T>::quiet_NaN());
            continue;
        }
        if (!any_allowed) continue;  // docs/math.md §1: no allowed key -> all-zero row
        // p_j = exp(x_j - max) / sum_k exp(x_k - max); exp(-inf) = 0 for masked entries.
        T row_sum = T(0);
        for (Index j = 0; j < masked_logits.cols(); ++j) {
            const T x = masked_logits(n, j);
            const T e = (x == minus_inf) ? T(0) : std::exp(x - row_max);
            probabilities(n, j) = e;
            row_sum += e;
        }
        for (Index j = 0; j < masked_logits.cols(); ++j) probabilities(n, j) /= row_sum;
    }
    return probabilities;
}

/// The score scale s: options.scale, or 1/sqrt(d) when unset (docs/math.md notation). Computed in double
/// and rounded once to T, like the fast kernels. (d = 0 with no scale is rejected by the entry
/// points unless N = 0; then any scale will do.)
template <typename T>
T scale_of(const AttentionOptions& options, Index head_dim) {
    const double s = options.scale  ? *options.scale
                     : head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim))
                                    : 1.0;
    return static_cast<T>(s);
}

/// The masked logits s * Q K^T + M: [N x S] with -infinity where the mask forbids (docs/math.md §1, 2.1).
template <typename T>
RowMatrix<T> masked_logits(const ConstMatrixRef<T>& q /*[N x d]*/, const ConstMatrixRef<T>& k /*[S x d]*/,
                           const AttentionOptions& options) {
    const T s = scale_of<T>(options, q.cols());
    RowMatrix<T> scores = s * (q * k.transpose());  // [N x S]
    return mask_logits<T>(scores, options);
}

/// One softmax attention map A = softmax(s Q K^T + M): [N x S] (docs/math.md §2.1).
template <typename T>
RowMatrix<T> attention_map(const ConstMatrixRef<T>& q /*[N x d]*/, const ConstMatrixRef<T>& k /*[S x d]*/,
                           const AttentionOptions& options) {
    return masked_softmax<T>(masked_logits<T>(q, k, options));
}

// ---------------------------------------------------------------------------------------------
// T from the matrices: each calls the function of the same name above with T = the scalar of its
// first matrix (a ConstMatrixRef<T> parameter alone would not deduce T from a RowMatrix, Map or block).
// ---------------------------------------------------------------------------------------------

/// The scalar of an Eigen matrix type; no type for a scalar type, so an explicit
/// reference::f<T>(...) never picks the overloads below.
template <typename Matrix>
using ScalarOf = typename Matrix::Scalar;

template <typename Scores, typename T = ScalarOf<Scores>>
RowMatrix<T> mask_logits(const Scores& scores, const AttentionOptions& options) {
    return mask_logits<T>(scores, options);
}
template <typename Logits, typename T = ScalarOf<Logits>>
RowMatrix<T> masked_softmax(const Logits& masked_logits) {
    return masked_softmax<T>(masked_logits);
}
template <typename Q, typename K, typename T = ScalarOf<Q>>
RowMatrix<T> masked_logits(const Q& q, const K& k, const AttentionOptions& options) {
    return masked_logits<T>(q, k, options);
}
template <typename Q, typename K, typename T = ScalarOf<Q>>
RowMatrix<T> attention_map(const Q& q, const K& k, const AttentionOptions& options) {
    return attention_map<T>(q, k, options);
}

}  // namespace diffattn::reference
