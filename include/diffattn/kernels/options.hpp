// Options shared by every single-head kernel (docs/math.md §1 and §2).
#pragma once

#include "diffattn/core/compute.hpp"
#include "diffattn/core/types.hpp"

#include <optional>

namespace diffattn {

/// Which keys a query may see (docs/math.md §1). Key padding is orthogonal: see AttentionOptions::valid_len.
enum class MaskKind {
    none,    ///< every query sees every key
    causal,  ///< query n sees key j iff j <= n + (S - N): N new queries after S - N cached keys
};

/// The integral term of DINT attention (docs/math.md §2.3).
enum class DintIntegral {
    causal_softmax,  ///< dint-transformer-v2 eq. 5-6: softmax over the allowed keys of the causal column mean of A1 (default)
    causal_mean,     ///< the causal column mean of A1 without the softmax
    global_mean,     ///< dint-transformer-v1 eq. 5-7: column mean of A1 over all rows; mask `none` only
};

/// Options of a single-head kernel call.
struct AttentionOptions {
    /// Mask between queries and keys. Causal is the default, as in decoder models.
    MaskKind mask = MaskKind::causal;
    /// Key padding: only the first `valid_len` keys exist (0 <= valid_len <= S). Unset: all S keys.
    std::optional<Index> valid_len;
    /// Score scale s (finite, > 0). Unset: 1 / sqrt(head_dim).
    std::optional<double> scale;
    /// Threads the kernel may use over its query blocks (>= 1). Used only when the build has
    /// OpenMP (DIFFATTN_HAS_OPENMP); the result matches the 1-thread result within docs/math.md §7.
    int threads = 1;
    /// The products of query groups of at least kMinPackedRows rows (prefill, a KV-cache chunk):
    /// scalar (the default), or with Q, K, P and V rounded to BF16 and fp32 sums, within docs/math.md
    /// §7.1 (float kernels only; Compute says which ways exist). Calls of fewer rows (a decode
    /// step, bound by its reads) multiply in the kernel's scalar whatever this says. The plain
    /// reference (kernels/reference.hpp) ignores it.
    Compute compute = Compute::scalar;
};

/// What DINT's causal integral needs to know about query rows of earlier calls (docs/math.md §2.3, 6),
/// for one head. With a KV cache the S - N cached keys belong to S - N earlier query rows, so
/// `rows` must equal S - N. The kernel reads it and updates it in place.
template <typename T>
struct DintHistory {
    /// Number of query rows seen before this call (the cached tokens).
    Index rows = 0;
    /// causal_mean: sum of the rows of O1 = A1 V over the earlier rows, [value_dim] (empty when rows == 0).
    Vector<T> o1_row_sum;
    /// causal_softmax: column sums of A1 over the earlier rows, one entry per key seen so far;
    /// entries past the keys used so far are zero. Grows with the context (reserve it to avoid
    /// the kernel resizing it).
    Vector<T> a1_column_sum;

    void reset() {
        rows = 0;
        o1_row_sum.setZero();
        a1_column_sum.setZero();
    }
};

}  // namespace diffattn
