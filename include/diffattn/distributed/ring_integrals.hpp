// The pieces of DINT's integral terms (docs/math.md §2.3) that the sequence-parallel kernels
// (ring_attention.hpp) run on one slice of query rows, given map 1's final states of its query
// groups (one OnlineSoftmaxState per group of kGroupRows rows):
//   add_mean_integral       causal_mean / global_mean: the running or global mean of the O1 rows,
//                           with the other ranks' row sums by MPI_Exscan / MPI_Allreduce;
//   integral_map_part       causal_softmax: the integral map over one key block (IntegralLogits
//                           on A1 tiles rebuilt from map 1), folded into the groups' states;
//   add_a1_column_sums      causal_softmax: the A1 column sums of the slice's rows over one block.
#pragma once

#include "diffattn/distributed/mpi_support.hpp"
#include "diffattn/distributed/ring_pass.hpp"
#include "diffattn/kernels/dint_integral.hpp"

#include <algorithm>
#include <vector>

namespace diffattn::distributed {

/// out.row(n) += lambda times the mean integral of row n of the slice (its rows [first_row,
/// first_row + rows) of a sequence of `length` rows): the running mean of the O1 rows up to n
/// (causal_mean, the earlier ranks' sums by MPI_Exscan) or the mean of all of them (global_mean,
/// MPI_Allreduce). Sums in Accumulator<T> with Kahan compensation, as on one machine, in the
/// workspace's running sums; local_total, other_total: [dv] scratch. Returns the seconds spent in
/// the collective. Collective.
template <typename T>
double add_mean_integral(const std::vector<OnlineSoftmaxState<T>>& map1, Index rows, DintIntegral integral, T lambda,
                         Index first_row, Index length, MPI_Comm comm, AttentionWorkspace<T>& ws,
                         Vector<Accumulator<T>>& local_total, Vector<Accumulator<T>>& other_total, MatrixRef<T>& out) {
    using Wide = Accumulator<T>;
    constexpr const char* function = "ring dint_attention";
    const Index dv = out.cols();
    detail::KahanSum<Wide> sum(ws.running_row_sum().head(dv), ws.running_row_error().head(dv));
    sum.set_zero();
    const auto o1_rows = [&](const auto& f) {
        for (Index g = 0; g < query_group_count(rows); ++g) {
            for (Index r = 0; r < query_group_rows(rows, g); ++r) f(g * kGroupRows + r, map1[g].normalized_row(r));
        }
    };
    o1_rows([&](Index, const auto& row) { sum.add(row); });
    local_total.resize(dv);
    other_total.setZero(dv);
    for (Index j = 0; j < dv; ++j) local_total[j] = sum.compensated(j);
    const double start = MPI_Wtime();
    if (integral == DintIntegral::global_mean) {
        check_mpi(MPI_Allreduce(local_total.data(), other_total.data(), int(dv), mpi_type<Wide>(), MPI_SUM, comm),
                  function, "MPI_Allreduce");
        const double waited = MPI_Wtime() - start;
        const Wide weight = Wide(lambda) / Wide(length);
        o1_rows([&](Index n, const auto&) { out.row(n) += (weight * other_total).transpose().template cast<T>(); });
        return waited;
    }
    check_mpi(MPI_Exscan(local_total.data(), other_total.data(), int(dv), mpi_type<Wide>(), MPI_SUM, comm), function,
              "MPI_Exscan");
    const double waited = MPI_Wtime() - start;
    if (first_row == 0) other_total.setZero();  // MPI_Exscan leaves rank 0's result undefined
    sum.set_zero();
    sum.sum() = other_total;
    o1_rows([&](Index n, const auto& row) {
        sum.add(row);
        const Wide weight = Wide(lambda) / Wide(first_row + n + 1);
        out.row(n) += (weight * sum.sum()).transpose().template cast<T>();
    });
    return waited;
}

/// The causal_softmax integral map of the slice's rows over the keys of one block: q1 [rows x d]
/// against the block's k1, v under `mask`, with column sums `column_sum` [block rows] that hold
/// every earlier row's A1 columns (the earlier ranks' prefix, then this slice's rows as they
/// are added). The groups run in order: each adds its A1 rows to the sums before the next group
/// reads them (IntegralLogits). Folds each group's part into integral[g]; progress() after each.
template <typename T, typename Mask, typename Progress>
void integral_map_part(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& v,
                       const Mask& mask, T scale, const std::vector<OnlineSoftmaxState<T>>& map1, Index first_row,
                       VectorRef<T> column_sum, BlockScratch<T>& scratch, std::vector<OnlineSoftmaxState<T>>& integral,
                       const Progress& progress) {
    const detail::DotProductLogits<T> logits1(q1, k1, scale);
    const Index rows = q1.rows();
    for (Index g = 0; g < query_group_count(rows); ++g) {
        const Index q_begin = g * kGroupRows, q_rows = query_group_rows(rows, g);
        const detail::A1Tiles<T, Mask> a1(logits1, mask, q_begin, map1[g].row_maxima(), map1[g].row_sums());
        detail::IntegralLogits<T, decltype(a1)> logits(a1, column_sum, first_row);
        detail::attend_block(logits, mask, q_begin, q_rows, v, scratch, scratch.states[2]);
        integral[g].merge(scratch.states[2]);
        progress();
    }
}

/// sums [block rows] += the A1 columns of the slice's rows q1 over the block's keys k1 under
/// `mask`, with A1 rebuilt from map 1's final states; progress() after each group. The tiles come
/// in attend_block's order and packing (key tiles outer, each packed once for the group's blocks;
/// the group's queries packed once), so a rebuilt tile is the one map 1 normalised; each column
/// still takes the rows in order.
template <typename T, typename Mask, typename Progress>
void add_a1_column_sums(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const Mask& mask, T scale,
                        const std::vector<OnlineSoftmaxState<T>>& map1, VectorRef<T> sums, BlockScratch<T>& scratch,
                        const Progress& progress) {
    const detail::DotProductLogits<T> logits1(q1, k1, scale);
    PackedTiles<T>& packed = scratch.packed;
    const Index rows = q1.rows();
    for (Index g = 0; g < query_group_count(rows); ++g) {
        const Index group_begin = g * kGroupRows, group_rows = query_group_rows(rows, g);
        const Index group_end = group_begin + group_rows;
        const detail::A1Tiles<T, Mask> a1(logits1, mask, group_begin, map1[g].row_maxima(), map1[g].row_sums());
        const bool pack = group_rows >= kMinPackedRows;
        const Index visit_end = block_visit_end(mask, group_begin, group_end);
        if (pack && visit_end > 0) a1.pack_queries(group_begin, group_rows, packed);
        for (Index k_begin = 0; k_begin < visit_end; k_begin += kKeyTile) {
            const Index k_count = std::min(kKeyTile, visit_end - k_begin);
            Index packed_keys = 0;  // keys of this tile in packed.keys
            for (Index b = group_begin; b < group_end; b += kQueryTile) {
                const Index b_rows = std::min(kQueryTile, group_end - b);
                const Index b_keys = std::min(k_count, block_visit_end(mask, b, b + b_rows) - k_begin);
                if (b_keys <= 0) continue;
                if (pack && packed_keys != b_keys) {
                    a1.pack_keys(k_begin, b_keys, packed, scratch.key_tile);
                    packed_keys = b_keys;
                }
                auto tile = scratch.logits.topLeftCorner(b_rows, b_keys);
                a1(b, group_begin, k_begin, tile, pack ? &packed : nullptr, scratch.key_tile);
                sums.segment(k_begin, b_keys) += tile.colwise().sum().transpose();
            }
        }
        progress();
    }
}

}  // namespace diffattn::distributed
