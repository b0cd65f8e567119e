// DINT attention (SPEC 2.3): DIFF plus lambda times an integral term built from A1,
// out = (A1 - lambda A2 + lambda I) V, so every row of the final matrix sums to 1.
//
// The integral is an epilogue on top of the DIFF block step, using the SPEC 2.3 identities:
//   causal_mean:    I V = running mean of the rows of O1 = A1 V          (O(N dv) extra work)
//   global_mean:    I V = mean of all rows of O1                          (O(N dv) extra work)
//   causal_softmax: I = softmax_M(G), G = running column mean of A1; I V is one more pass of
//                   the tiled core whose logits policy rebuilds A1 tiles from map 1's final
//                   {m, l} and turns them into G rows with O(S) running column sums.
// The DIFF part runs in query groups of kGroupRows rows through differential_block, the same
// grouped, packed path as diff_attention. Each query row needs sums over all rows before it;
// dint_mean_integral and dint_softmax_integral say how the groups still run on several threads.
#pragma once

#include "diffattn/kernels/diff_attention.hpp"

namespace diffattn {
namespace detail {

/// A1 tiles of the query rows [first_row, first_row + rows), rebuilt from map 1's final statistics
/// of those rows: A1[n, j] = exp(s q1_n . k1_j - m_n) / l_n, and 0 where the mask hides key j from
/// row n. The logits come from map 1's own policy (same packing, same products), so a rebuilt
/// tile matches the probabilities map 1 normalised.
template <typename T, typename Mask>
class A1Tiles {
public:
    /// row_max, row_sum: map 1's final m and l of the rows [first_row, first_row + row_max.size()).
    A1Tiles(const DotProductLogits<T>& logits1, const Mask& mask, Index first_row, ConstVectorRef<T> row_max,
            ConstVectorRef<T> row_sum)
        : logits1_(logits1), mask_(mask), first_row_(first_row), row_max_(row_max), row_sum_(row_sum) {}

    /// Packing as DotProductLogits (the core's three-step logits protocol).
    void pack_queries(Index q_begin, Index q_rows, PackedTiles<T>& packed) const {
        logits1_.pack_queries(q_begin, q_rows, packed);
    }
    void pack_keys(Index k_begin, Index keys, PackedTiles<T>& packed) const {
        logits1_.pack_keys(k_begin, keys, packed);
    }

    /// tile [rows x keys] = A1[q_begin + r, k_begin + j]; group_begin and packed as DotProductLogits.
    template <typename Tile>
    void operator()(Index q_begin, Index group_begin, Index k_begin, Tile& tile, const PackedTiles<T>* packed) const {
        const Index keys = tile.cols();
        logits1_(q_begin, group_begin, k_begin, tile, packed);
        for (Index r = 0; r < tile.rows(); ++r) {
            auto row = tile.row(r);
            const Index i = q_begin - first_row_ + r;
            const Index visible = visible_keys_in_tile(mask_, q_begin + r, k_begin, keys);
            const T inverse_sum = row_sum_[i] > T(0) ? T(1) / row_sum_[i] : T(0);
            row.tail(keys - visible).setZero();
            if (visible > 0) {
                row.head(visible) = ((row.head(visible).array() - row_max_[i]).exp() * inverse_sum).matrix();
            }
        }
    }

private:
    const DotProductLogits<T>& logits1_;  // s Q1 K1^T
    const Mask& mask_;
    Index first_row_;
    ConstVectorRef<T> row_max_;
    ConstVectorRef<T> row_sum_;
};

/// Logits policy of DINT's causal_softmax integral map (dint-transformer-v2 eq. 5-6).
/// For a tile it rebuilds the A1 tile, adds each row into the running column sums of A1 and writes
/// G[r, j] = column_sum[j] / (rows so far) — values in [0, 1], used with logit scale 1.
/// Rows must reach each key tile in order: column sum j must hold every earlier row of the
/// sequence when a row reads it. The core visits key tiles in the outer loop and the blocks of a
/// group in order in the inner one, and the sums of one key tile depend only on that tile, so a
/// whole group can run at once: each block finds the earlier blocks' rows already added to the
/// tile's columns (a block that skips a tile wholly in its future would only have added zeros).
/// It reads Q1 and K1 through A1Tiles, which packs them as map 1 does.
template <typename T, typename Mask>
class IntegralLogits {
public:
    IntegralLogits(const A1Tiles<T, Mask>& a1, VectorRef<T> column_sum, Index rows_before)
        : a1_(a1), column_sum_(column_sum), rows_before_(rows_before) {}

    void pack_queries(Index q_begin, Index q_rows, PackedTiles<T>& packed) const {
        a1_.pack_queries(q_begin, q_rows, packed);
    }
    void pack_keys(Index k_begin, Index keys, PackedTiles<T>& packed) const { a1_.pack_keys(k_begin, keys, packed); }

    template <typename Tile>
    void operator()(Index q_begin, Index group_begin, Index k_begin, Tile& tile, const PackedTiles<T>* packed) {
        a1_(q_begin, group_begin, k_begin, tile, packed);
        auto column_sum = column_sum_.segment(k_begin, tile.cols());
        for (Index r = 0; r < tile.rows(); ++r) {
            auto row = tile.row(r);
            column_sum += row.transpose();  // the row is final: later keys are masked for it (SPEC 6)
            row = column_sum.transpose() / static_cast<T>(rows_before_ + q_begin + r + 1);
        }
    }

private:
    const A1Tiles<T, Mask>& a1_;
    VectorRef<T> column_sum_;  // [S] column sums of A1 over all rows so far
    Index rows_before_;        // query rows of earlier calls (the cache)
};

/// column_sum += the column sums of the A1 rows of one query block (every key tile it visits).
template <typename T, typename Mask, typename ColumnSum>
void add_a1_column_sums(const A1Tiles<T, Mask>& a1, const Mask& mask, Index q_begin, Index q_rows,
                        RowMatrix<T>& tile_buffer, ColumnSum&& column_sum) {
    const Index visit_end = block_visit_end(mask, q_begin, q_begin + q_rows);
    for (Index k_begin = 0; k_begin < visit_end; k_begin += kKeyTile) {
        const Index keys = std::min(kKeyTile, visit_end - k_begin);
        auto tile = tile_buffer.topLeftCorner(q_rows, keys);
        a1(q_begin, q_begin, k_begin, tile, nullptr);  // unpacked: each tile is used once
        column_sum.segment(k_begin, keys) += tile.colwise().sum().transpose();
    }
}

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

/// The integral of the mean modes (SPEC 2.3: I V is the running or global mean of the rows of
/// O1 = A1 V), in three steps so that query groups can run on several threads and the result does
/// not depend on the thread count:
///   1. each group writes its DIFF rows (differential_block, as diff_attention) and, per block of
///      kQueryTile rows, the Kahan sum of the block's O1 rows (causal_mean also adds the part of
///      each row's running mean that comes from rows of its own block);
///   2. exclusive prefix sums over the blocks, continuing the history (sequential, O(blocks dv));
///   3. each row gets the part that comes from earlier blocks (causal_mean) or the global mean.
/// Sums run in Accumulator<T> with Kahan compensation, so identical rows (one-hot maps) do not pile
/// up rounding errors.
template <typename T, typename Mask>
void dint_mean_integral(const DotProductLogits<T>& logits1, const DotProductLogits<T>& logits2, const Mask& mask,
                        const ConstMatrixRef<T>& v, T lambda, DintIntegral integral,
                        const ResolvedOptions& resolved, Index seq_len_q, DintHistory<T>* history,
                        AttentionWorkspace<T>& ws, MatrixRef<T>& out) {
    using Wide = Accumulator<T>;
    const Index value_dim = v.cols();
    const Index rows_before = history != nullptr ? history->rows : 0;
    const bool causal = integral == DintIntegral::causal_mean;
    RowMatrix<Wide>& block_sums = ws.block_row_sums();          // [blocks x dv]
    RowMatrix<Wide>& block_errors = ws.block_row_compensation();  // [blocks x dv]
    const auto kahan_add = [](auto&& sum, auto&& error, const auto& value) {
        for (Index j = 0; j < sum.size(); ++j) {
            const Wide term = Wide(value[j]) - error[j];
            const Wide total = sum[j] + term;
            error[j] = (total - sum[j]) - term;
            sum[j] = total;
        }
    };
    const auto row_weight = [&](Index n) { return Wide(lambda) / Wide(rows_before + n + 1); };

    for_each_query_group(seq_len_q, resolved.threads, mask, ws, [&](Index group_begin, Index group_rows,
                                                                     BlockScratch<T>& scratch) {
        differential_block(logits1, logits2, mask, group_begin, group_rows, v, lambda, scratch, out);
        const OnlineSoftmaxState<T>& map1 = scratch.states[0];  // the group's rows
        // Sums per block rather than per group: a row's in-block running sum then adds at most
        // kQueryTile terms. Groups and blocks are fixed runs of rows, so the sums do not depend on
        // the thread count.
        for (Index b_offset = 0; b_offset < group_rows; b_offset += kQueryTile) {
            const Index q_begin = group_begin + b_offset, q_rows = std::min(kQueryTile, group_rows - b_offset);
            auto sum = block_sums.row(q_begin / kQueryTile).head(value_dim);
            auto error = block_errors.row(q_begin / kQueryTile).head(value_dim);
            sum.setZero();
            error.setZero();
            for (Index r = 0; r < q_rows; ++r) {
                kahan_add(sum, error, map1.normalized_row(b_offset + r));
                // SPEC 1: a query allowed no key gets an all-zero row (the DIFF part already is).
                if (causal && mask.key_end(q_begin + r) > 0) {
                    out.row(q_begin + r) += (row_weight(q_begin + r) * sum).template cast<T>();
                }
            }
        }
    });

    // Block b's row becomes the sum of the O1 rows of every earlier row (history and blocks < b).
    auto running = ws.running_row_sum().head(value_dim);
    auto running_error = ws.running_row_error().head(value_dim);
    running.setZero();
    running_error.setZero();
    if (causal && history != nullptr && history->rows > 0) running = history->o1_row_sum.template cast<Wide>();
    const Index blocks = query_block_count(seq_len_q);
    for (Index b = 0; b < blocks; ++b) {
        for (Index j = 0; j < value_dim; ++j) {
            const Wide block_total = block_sums(b, j) - block_errors(b, j);  // compensated
            block_sums(b, j) = running[j];
            const Wide term = block_total - running_error[j];
            const Wide total = running[j] + term;
            running_error[j] = (total - running[j]) - term;
            running[j] = total;
        }
    }

    const Wide global_weight = seq_len_q > 0 ? Wide(lambda) / Wide(seq_len_q) : Wide(0);
    for_each_query_group(seq_len_q, resolved.threads, mask, ws, [&](Index group_begin, Index group_rows,
                                                                     BlockScratch<T>&) {
        for (Index n = group_begin; n < group_begin + group_rows; ++n) {
            if (mask.key_end(n) == 0) continue;  // SPEC 1: stays an all-zero row
            if (causal) {
                const Index block = n / kQueryTile;
                if (block > 0 || rows_before > 0) {
                    out.row(n) += (row_weight(n) * block_sums.row(block).head(value_dim)).template cast<T>();
                }
            } else {
                out.row(n) += (global_weight * running.transpose()).template cast<T>();
            }
        }
    });
    if (causal && history != nullptr) history->o1_row_sum = running.template cast<T>();
}

/// The causal_softmax integral (dint-transformer-v2 eq. 5-6): after the DIFF rows of a query group,
/// one more pass of the tiled core over logits G = running column mean of A1 (IntegralLogits),
/// on groups of up to kGroupBlocks whole blocks too (IntegralLogits says why that keeps the row
/// order the column sums need). The running column sums make the rows depend on all earlier ones.
/// With one thread the groups simply run in order. With T > 1 threads the query rows are cut into
/// T chunks of whole blocks with about equal work:
///   1. every group (in parallel) writes its DIFF rows and keeps map 1's final row max and sum;
///   2. the blocks of every chunk but the last (in parallel) add their A1 rows into column sums
///      private to (thread, chunk);
///   3. each chunk (one per thread) starts from the history plus the sums of all earlier chunks
///      and runs its blocks in order, in groups that start at the chunk's first block.
/// Step 2 is the price of parallelism (an extra Q1 K1^T pass over all but the last chunk); the
/// sums are added in another order than with one thread, so results agree within SPEC 7.
template <typename T, typename Mask>
void dint_softmax_integral(const DotProductLogits<T>& logits1, const DotProductLogits<T>& logits2, const Mask& mask,
                           const ConstMatrixRef<T>& v, T lambda, const ResolvedOptions& resolved, Index seq_len_q,
                           DintHistory<T>* history, AttentionWorkspace<T>& ws, MatrixRef<T>& out) {
    const Index seq_len_kv = v.rows();
    const Index rows_before = history != nullptr ? history->rows : 0;
    const Index blocks = query_block_count(seq_len_q);
    const Index chunks = std::min<Index>(resolved.threads, blocks);

    // The integral map of rows [q_begin, q_begin + q_rows) (whole blocks, at most kGroupRows), given
    // map 1's statistics of those rows and the column sums of A1 over every earlier row.
    const auto integral_group = [&](Index q_begin, Index q_rows, ConstVectorRef<T> row_max,
                                    ConstVectorRef<T> row_sum, VectorRef<T> column_sum, BlockScratch<T>& scratch) {
        const A1Tiles<T, Mask> a1(logits1, mask, q_begin, row_max, row_sum);
        IntegralLogits<T, Mask> integral_logits(a1, column_sum, rows_before);
        OnlineSoftmaxState<T>& integral_map = scratch.states[2];
        attend_block(integral_logits, mask, q_begin, q_rows, v, scratch, integral_map);
        for (Index r = 0; r < q_rows; ++r) out.row(q_begin + r) += lambda * integral_map.normalized_row(r);
    };

    if (chunks <= 1) {
        VectorRef<T> column_sum = history != nullptr ? VectorRef<T>(history->a1_column_sum.head(seq_len_kv))
                                                     : VectorRef<T>(ws.column_sums().col(0).head(seq_len_kv));
        if (history == nullptr) column_sum.setZero();
        BlockScratch<T>& scratch = ws.block(0);
        const OnlineSoftmaxState<T>& map1 = scratch.states[0];
        for (Index q_begin = 0; q_begin < seq_len_q; q_begin += kGroupRows) {
            const Index q_rows = std::min(kGroupRows, seq_len_q - q_begin);
            differential_block(logits1, logits2, mask, q_begin, q_rows, v, lambda, scratch, out);
            integral_group(q_begin, q_rows, map1.row_maxima(), map1.row_sums(), column_sum, scratch);
        }
        return;
    }

    // Chunk boundaries: equal shares of the key tiles the blocks visit (their cost under the mask).
    std::vector<Index>& chunk_begin = ws.chunk_begin();
    const auto block_cost = [&](Index b) {
        const Index q_begin = b * kQueryTile, q_end = std::min(seq_len_q, q_begin + kQueryTile);
        return block_visit_end(mask, q_begin, q_end) + 1;
    };
    Index total_cost = 0;
    for (Index b = 0; b < blocks; ++b) total_cost += block_cost(b);
    chunk_begin[0] = 0;
    for (Index c = 1, b = 0, cost = 0; c < chunks; ++c) {
        // Chunk c starts where the cost so far reaches c / chunks of the total; every chunk keeps
        // at least one block.
        while (b < blocks - (chunks - c) &&
               (b <= chunk_begin[static_cast<std::size_t>(c - 1)] || cost * chunks < c * total_cost)) {
            cost += block_cost(b++);
        }
        chunk_begin[static_cast<std::size_t>(c)] = b;
    }
    chunk_begin[static_cast<std::size_t>(chunks)] = blocks;
    const auto chunk_of = [&](Index b) {
        Index c = 0;
        while (chunk_begin[static_cast<std::size_t>(c + 1)] <= b) ++c;
        return c;
    };

    // 1. DIFF rows of every group; map 1's statistics kept for steps 2 and 3.
    Vector<T>& row_max = ws.map1_row_max();
    Vector<T>& row_sum = ws.map1_row_sum();
    for_each_query_group(seq_len_q, resolved.threads, mask, ws, [&](Index q_begin, Index q_rows, BlockScratch<T>& scratch) {
        differential_block(logits1, logits2, mask, q_begin, q_rows, v, lambda, scratch, out);
        row_max.segment(q_begin, q_rows) = scratch.states[0].row_maxima();
        row_sum.segment(q_begin, q_rows) = scratch.states[0].row_sums();
    });

    // 2. Column sums of A1 over each chunk but the last, per (thread, chunk).
    ColMatrix<T>& partial = ws.partial_column_sums();  // column thread * chunks + chunk
    partial.leftCols(resolved.threads * chunks).topRows(seq_len_kv).setZero();
    const Index summed_blocks = chunk_begin[static_cast<std::size_t>(chunks - 1)];
    parallel_for(summed_blocks, resolved.threads, Schedule::largest_first, [&](Index b, int thread) {
        const Index q_begin = b * kQueryTile, q_rows = std::min(kQueryTile, seq_len_q - q_begin);
        const A1Tiles<T, Mask> a1(logits1, mask, q_begin, row_max.segment(q_begin, q_rows),
                                  row_sum.segment(q_begin, q_rows));
        add_a1_column_sums(a1, mask, q_begin, q_rows, ws.block(thread).logits,
                           partial.col(thread * chunks + chunk_of(b)).head(seq_len_kv));
    });

    // 3. Each chunk's starting sums, then its blocks in order, a group at a time.
    ColMatrix<T>& column_sums = ws.column_sums();  // column c: running sums of chunk c
    for (Index c = 0; c < chunks; ++c) {
        auto sums = column_sums.col(c).head(seq_len_kv);
        if (c == 0) {
            if (history != nullptr) sums = history->a1_column_sum.head(seq_len_kv);
            else sums.setZero();
        } else {
            sums = column_sums.col(c - 1).head(seq_len_kv);
            for (Index t = 0; t < resolved.threads; ++t) sums += partial.col(t * chunks + c - 1).head(seq_len_kv);
        }
    }
    parallel_for(chunks, resolved.threads, Schedule::equal_tasks, [&](Index c, int thread) {
        const Index begin = chunk_begin[static_cast<std::size_t>(c)] * kQueryTile;
        const Index end = std::min(seq_len_q, chunk_begin[static_cast<std::size_t>(c + 1)] * kQueryTile);
        for (Index q_begin = begin; q_begin < end; q_begin += kGroupRows) {
            const Index q_rows = std::min(kGroupRows, end - q_begin);
            integral_group(q_begin, q_rows, row_max.segment(q_begin, q_rows), row_sum.segment(q_begin, q_rows),
                           column_sums.col(c).head(seq_len_kv), ws.block(thread));
        }
    });
    if (history != nullptr) history->a1_column_sum.head(seq_len_kv) = column_sums.col(chunks - 1).head(seq_len_kv);
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
    AttentionWorkspace<T>& ws =
        prepare_workspace(workspace, local, seq_len_q, seq_len_kv, q1.cols(), value_dim, resolved.threads);
    const T scale = T(resolved.scale);
    const DotProductLogits<T> logits1(q1, k1, scale), logits2(q2, k2, scale);
    dispatch_mask(resolved.mask, seq_len_q, seq_len_kv, resolved.valid_len, [&](const auto& mask) {
        if (integral == DintIntegral::causal_softmax) {
            dint_softmax_integral(logits1, logits2, mask, v, lambda, resolved, seq_len_q, history, ws, out);
        } else {
            dint_mean_integral(logits1, logits2, mask, v, lambda, integral, resolved, seq_len_q, history, ws, out);
        }
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
