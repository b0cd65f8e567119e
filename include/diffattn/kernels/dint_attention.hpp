// DINT attention (SPEC 2.3): DIFF plus lambda times an integral term built from A1,
// out = (A1 - lambda A2 + lambda I) V, so every row of the final matrix sums to 1.
//
// The integral is an epilogue on top of the DIFF block step, using the SPEC 2.3 identities:
//   causal_mean:    I V = running mean of the rows of O1 = A1 V          (O(N dv) extra work)
//   global_mean:    I V = mean of all rows of O1                          (O(N dv) extra work)
//   causal_softmax: I = softmax_M(G), G = running column mean of A1; I V is one more pass of
//                   the tiled core whose logits policy rebuilds A1 tiles from map 1's final
//                   {m, l} and turns them into G rows with O(S) running column sums.
// Query blocks run in order because each needs the sums of all rows before it.
#pragma once

#include "diffattn/kernels/diff_attention.hpp"

namespace diffattn {
namespace detail {

/// Logits policy of DINT's causal_softmax integral map (dint-transformer-v2 eq. 5-6).
/// For a tile it recomputes A1[r, j] = exp(s q1_r . k1_j - m_r) / l_r from map 1's final state
/// (0 where the mask hides j), adds each row into the running column sums of A1 and writes
/// G[r, j] = column_sum[j] / (rows so far) — values in [0, 1], used with logit scale 1.
template <typename T, typename Mask>
class IntegralLogits {
public:
    IntegralLogits(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, T scale, const Mask& mask,
                   const OnlineSoftmaxState<T>& map1, Eigen::Ref<Vector<T>> column_sum, Index rows_before)
        : q1_(q1), k1_(k1), scale_(scale), mask_(mask), map1_(map1), column_sum_(column_sum),
          rows_before_(rows_before) {}

    template <typename Tile>
    void operator()(Index q_begin, Index k_begin, Tile& tile) {
        const Index keys = tile.cols();
        tile_product<false>(tile, q1_.middleRows(q_begin, tile.rows()), k1_.middleRows(k_begin, keys).transpose());
        auto column_sum = column_sum_.segment(k_begin, keys);
        for (Index r = 0; r < tile.rows(); ++r) {
            auto row = tile.row(r);
            const Index visible = visible_keys_in_tile(mask_, q_begin + r, k_begin, keys);
            const T inverse_sum = map1_.inverse_sum(r);
            row.tail(keys - visible).setZero();
            if (visible > 0) {
                row.head(visible) =
                    ((row.head(visible).array() * scale_ - map1_.row_max(r)).exp() * inverse_sum).matrix();
            }
            column_sum += row.transpose();  // the row is final: later keys are masked for it (SPEC 6)
            row = column_sum.transpose() / static_cast<T>(rows_before_ + q_begin + r + 1);
        }
    }

private:
    const ConstMatrixRef<T>& q1_;          // [N x d]
    const ConstMatrixRef<T>& k1_;          // [S x d]
    T scale_;
    const Mask& mask_;
    const OnlineSoftmaxState<T>& map1_;    // map 1's final state for the current query block
    Eigen::Ref<Vector<T>> column_sum_;     // [S] column sums of A1 over all rows so far
    Index rows_before_;                    // query rows of earlier calls (the cache)
};

/// Validates the DINT-specific options and the history, and sizes the history's sums.
template <typename T>
void check_dint(DintIntegral integral, const ResolvedOptions& resolved, Index seq_len_q, Index seq_len_kv,
                Index value_dim, DintHistory<T>* history) {
    constexpr const char* function = "dint_attention";
    const Index cached = seq_len_kv - seq_len_q;
    switch (integral) {
        case DintIntegral::global_mean:
            require<OptionError>(resolved.mask == MaskKind::none, function,
                                 ": integral global_mean sees the future and needs mask none, not causal");
            require<OptionError>(history == nullptr || history->rows == 0, function,
                                 ": integral global_mean cannot continue from a history (KV cache) of ",
                                 history ? history->rows : 0, " rows");
            return;
        case DintIntegral::causal_mean:
        case DintIntegral::causal_softmax:
            break;
        default:
            throw OptionError(concat(function, ": unknown DintIntegral value"));
    }
    if (history == nullptr) {
        require<OptionError>(cached == 0, function, ": K1 has ", seq_len_kv, " rows but Q1 has ", seq_len_q,
                             "; a causal integral over ", cached, " cached rows needs their DintHistory");
        return;
    }
    require<OptionError>(history->rows == cached, function, ": history has ", history->rows,
                         " rows but K1 has ", seq_len_kv, " and Q1 ", seq_len_q, " (need history rows == S - N = ",
                         cached, ")");
    if (integral == DintIntegral::causal_mean) {
        if (history->rows == 0) {
            history->o1_row_sum.setZero(value_dim);
        } else {
            require<ShapeError>(history->o1_row_sum.size() == value_dim, function, ": history o1_row_sum has ",
                                history->o1_row_sum.size(), " entries but V has ", value_dim, " columns");
        }
    } else {
        Vector<T>& sums = history->a1_column_sum;
        if (history->rows == 0) sums.setZero();
        require<ShapeError>(history->rows == 0 || sums.size() >= cached, function,
                            ": history a1_column_sum has ", sums.size(), " entries but ", cached,
                            " keys are cached");
        if (sums.size() < seq_len_kv) {
            const Index old_size = sums.size();
            sums.conservativeResize(seq_len_kv);  // grows with the context (reserve to avoid this)
            sums.tail(seq_len_kv - old_size).setZero();
        }
    }
}

template <typename T>
void dint_attention(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
                    const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda, DintIntegral integral,
                    MatrixRef<T> out, const AttentionOptions& options, DintHistory<T>* history,
                    AttentionWorkspace<T>* workspace) {
    const ResolvedOptions resolved = check_differential<T>("dint_attention", q1, k1, q2, k2, v, lambda, out, options);
    const Index seq_len_q = q1.rows(), seq_len_kv = k1.rows(), value_dim = v.cols();
    check_dint<T>(integral, resolved, seq_len_q, seq_len_kv, value_dim, history);
    AttentionWorkspace<T> local;
    AttentionWorkspace<T>& ws = prepare_workspace(workspace, local, seq_len_q, seq_len_kv, q1.cols(), value_dim);
    const Index rows_before = history != nullptr ? history->rows : 0;
    const T scale = T(resolved.scale);
    const DotProductLogits<T> logits1(q1, k1), logits2(q2, k2);
    const OnlineSoftmaxState<T>& map1 = ws.state(0);

    dispatch_mask(resolved.mask, seq_len_q, seq_len_kv, resolved.valid_len, [&](const auto& mask) {
        using Mask = std::decay_t<decltype(mask)>;
        if (integral == DintIntegral::causal_softmax) {
            Eigen::Ref<Vector<T>> column_sum = history != nullptr ? history->a1_column_sum.head(seq_len_kv)
                                                                  : ws.column_accumulator().head(seq_len_kv);
            if (history == nullptr) column_sum.setZero();
            IntegralLogits<T, Mask> integral_logits(q1, k1, scale, mask, map1, column_sum, rows_before);
            OnlineSoftmaxState<T>& integral_map = ws.state(2);
            for_each_query_block(seq_len_q, [&](Index q_begin, Index q_rows) {
                differential_block(logits1, logits2, scale, mask, q_begin, q_rows, v, lambda, ws, out);
                attend_block(integral_logits, T(1), mask, q_begin, q_rows, v, ws.logits(), integral_map);
                for (Index r = 0; r < q_rows; ++r) out.row(q_begin + r) += lambda * integral_map.normalized_row(r);
            });
            return;
        }
        // causal_mean and global_mean: running sum of O1 rows, compensated (Kahan) in Accumulator<T>
        // within the call, so identical rows (one-hot maps) do not pile up rounding errors.
        using Wide = Accumulator<T>;
        Eigen::Ref<Vector<Wide>> o1_sum = ws.row_accumulator().head(value_dim);
        Eigen::Ref<Vector<Wide>> o1_compensation = ws.row_compensation().head(value_dim);
        o1_compensation.setZero();
        const bool continues_history = history != nullptr && integral == DintIntegral::causal_mean;
        if (continues_history) {
            o1_sum = history->o1_row_sum.template cast<Wide>();
        } else {
            o1_sum.setZero();
        }
        for_each_query_block(seq_len_q, [&](Index q_begin, Index q_rows) {
            differential_block(logits1, logits2, scale, mask, q_begin, q_rows, v, lambda, ws, out);
            for (Index r = 0; r < q_rows; ++r) {
                const auto o1 = map1.normalized_row(r);
                for (Index j = 0; j < value_dim; ++j) {
                    const Wide term = Wide(o1(j)) - o1_compensation[j];
                    const Wide total = o1_sum[j] + term;
                    o1_compensation[j] = (total - o1_sum[j]) - term;
                    o1_sum[j] = total;
                }
                // SPEC 1: a query allowed no key gets an all-zero row (the DIFF part already is).
                if (integral == DintIntegral::causal_mean && mask.key_end(q_begin + r) > 0) {
                    const Wide weight = Wide(lambda) / Wide(rows_before + q_begin + r + 1);
                    out.row(q_begin + r) += (weight * o1_sum).template cast<T>().transpose();
                }
            }
        });
        if (integral == DintIntegral::global_mean && seq_len_q > 0) {
            const Wide weight = Wide(lambda) / Wide(seq_len_q);
            for (Index n = 0; n < seq_len_q; ++n) {
                if (mask.key_end(n) > 0) out.row(n) += (weight * o1_sum).template cast<T>().transpose();
            }
        }
        if (continues_history) history->o1_row_sum = o1_sum.template cast<T>();
    });
    if (history != nullptr) history->rows += seq_len_q;
}

}  // namespace detail

/// DINT attention of one head (SPEC 2.3): out = (A1 - lambda A2 + lambda I) V, with the integral I
/// chosen by `integral`. Shapes as diff_attention. With a KV cache (S > N) the causal integrals
/// need `history` of the S - N earlier rows (history->rows == S - N); it is updated in place.
/// global_mean needs mask none and no history rows.
template <int = 0>  // instantiated only where called (keeps every other TU cheap to compile)
inline void dint_attention(const ConstMatrixRef<float>& q1, const ConstMatrixRef<float>& k1,
                           const ConstMatrixRef<float>& q2, const ConstMatrixRef<float>& k2,
                           const ConstMatrixRef<float>& v, float lambda, DintIntegral integral, MatrixRef<float> out,
                           const AttentionOptions& options = {}, DintHistory<float>* history = nullptr,
                           AttentionWorkspace<float>* workspace = nullptr) {
    detail::dint_attention<float>(q1, k1, q2, k2, v, lambda, integral, out, options, history, workspace);
}
template <int = 0>
inline void dint_attention(const ConstMatrixRef<double>& q1, const ConstMatrixRef<double>& k1,
                           const ConstMatrixRef<double>& q2, const ConstMatrixRef<double>& k2,
                           const ConstMatrixRef<double>& v, double lambda, DintIntegral integral,
                           MatrixRef<double> out, const AttentionOptions& options = {},
                           DintHistory<double>* history = nullptr, AttentionWorkspace<double>* workspace = nullptr) {
    detail::dint_attention<double>(q1, k1, q2, k2, v, lambda, integral, out, options, history, workspace);
}

}  // namespace diffattn
