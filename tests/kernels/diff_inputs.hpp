// Inputs of the differential kernels' tests: random DIFF / DINT inputs of a KernelCase over the whole
// sequence, and the DINT history of the tokens before the call, from the plain reference.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/reference.hpp"

#include "kernel_cases.hpp"
#include "test_random.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace diffattn::test {

/// Random inputs of one DIFF / DINT call. The query matrices cover the WHOLE sequence of S tokens
/// (so the earlier S - N rows can build a DINT history); the call uses their last N rows.
template <typename T>
struct DiffInputs {
    RowMatrix<T> q1_all, q2_all;  // [S x d] queries of every token
    RowMatrix<T> q1, q2;          // [N x d] the last N rows: this call's queries
    RowMatrix<T> k1, k2;          // [S x d]
    RowMatrix<T> v;               // [S x dv]
    T lambda = T(0);

    template <typename U>
    DiffInputs<U> cast() const {
        DiffInputs<U> c;
        c.q1_all = q1_all.template cast<U>();
        c.q2_all = q2_all.template cast<U>();
        c.q1 = q1.template cast<U>();
        c.q2 = q2.template cast<U>();
        c.k1 = k1.template cast<U>();
        c.k2 = k2.template cast<U>();
        c.v = v.template cast<U>();
        c.lambda = static_cast<U>(lambda);
        return c;
    }
};

template <typename T>
DiffInputs<T> random_diff_inputs(std::mt19937& rng, const KernelCase& c) {
    DiffInputs<T> in;
    in.q1_all = random_matrix<T>(rng, c.seq_len_kv, c.head_dim);
    in.q2_all = random_matrix<T>(rng, c.seq_len_kv, c.head_dim);
    in.q1 = in.q1_all.bottomRows(c.seq_len_q);
    in.q2 = in.q2_all.bottomRows(c.seq_len_q);
    in.k1 = random_matrix<T>(rng, c.seq_len_kv, c.head_dim);
    in.k2 = random_matrix<T>(rng, c.seq_len_kv, c.head_dim);
    if (c.key_ramp != 0) {
        const double last = static_cast<double>(std::max<Index>(c.seq_len_kv - 1, 1));
        for (Index j = 0; j < c.seq_len_kv; ++j) {
            const double position = c.key_ramp > 0 ? static_cast<double>(j) : last - static_cast<double>(j);
            const T factor = static_cast<T>(1 + std::abs(c.key_ramp) * position / last);
            in.k1.row(j) *= factor;
            in.k2.row(j) *= factor;
        }
    }
    in.v = random_matrix<T>(rng, c.seq_len_kv, c.value_dim);
    in.lambda = static_cast<T>(std::uniform_real_distribution<double>(0.1, 0.9)(rng));
    return in;
}

/// The DINT history of the S - N tokens before this call, from the reference run over the whole
/// sequence with the same options: A1 of the first S - N query rows (row m sees keys <= m under
/// the causal mask), its column sums (all S keys) and the sum of its O1 rows.
template <typename T>
DintHistory<T> reference_history(const DiffInputs<T>& in, const AttentionOptions& options) {
    const Index cached = in.k1.rows() - in.q1.rows();
    const RowMatrix<T> a1_all = reference::attention_map<T>(in.q1_all, in.k1, options);  // [S x S]
    const RowMatrix<T> earlier = a1_all.topRows(cached);                                 // [S-N x S]
    return reference::dint_history<T>(earlier, in.v);
}

/// A DintHistory with its sums converted to another scalar type.
template <typename To, typename From>
DintHistory<To> cast_history(const DintHistory<From>& history) {
    DintHistory<To> c;
    c.rows = history.rows;
    c.a1_column_sum = history.a1_column_sum.template cast<To>();
    c.o1_row_sum = history.o1_row_sum.template cast<To>();
    return c;
}

inline const char* integral_name(DintIntegral integral) {
    switch (integral) {
        case DintIntegral::causal_softmax:
            return "causal_softmax";
        case DintIntegral::causal_mean:
            return "causal_mean";
        case DintIntegral::global_mean:
            return "global_mean";
    }
    return "?";
}

}  // namespace diffattn::test
