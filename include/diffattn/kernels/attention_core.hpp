// The one tiled online-softmax core that every attention variant reuses.
//
// attend_block() runs FlashAttention's loop for one group of at most kGroupRows query rows (one
// or several blocks of kQueryTile): visit the key tiles the mask allows, turn each tile into
// logits with a Logits policy, fold them into an OnlineSoftmaxState, and accumulate P V. Variants
// differ only in the Logits policy (scaled Q K^T, or DINT's integral G) and in how they combine
// the states of several maps (docs/math.md §2.2, 2.3). No N x S buffer is ever held: scratch is one
// kQueryTile x kKeyTile tile plus packed operands (PackedTiles, which also says how the products
// run: in T, or with BF16 operands, docs/math.md §7.1).
#pragma once

#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/attention_checks.hpp"
#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/few_rows_products.hpp"
#include "diffattn/kernels/key_rows.hpp"
#include "diffattn/kernels/mask.hpp"
#include "diffattn/kernels/online_softmax.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/stored_rows.hpp"
#include "diffattn/kernels/tile_product.hpp"

#include <algorithm>
#include <cassert>
#include <limits>
#include <type_traits>

namespace diffattn::detail {

/// Logits policy of ordinary attention: tile = s Q[q rows] K[k rows]^T, with the keys stored in
/// the scalar S (T, or a half-precision KV cache's) row by row or in a KV cache's blocks
/// (kernels/key_rows.hpp); a key tile the products cannot read where it lies is converted into the
/// thread's `key_tile` first (docs/math.md §6).
/// A policy has three steps, so that each operand is packed once: pack_queries() once per query
/// group, pack_keys() once per key tile, then operator() for each block of the group. For a group
/// of fewer than kMinPackedRows rows the core skips the packing and passes `packed = nullptr`.
/// `key_tile` is the calling thread's BlockScratch::key_tile.
template <typename T, typename S = T>
class DotProductLogits {
public:
    DotProductLogits(const ConstMatrixRef<T>& q, const KeyOperand<S>& k, T scale) : q_(q), k_(k), scale_(scale) {}

    /// Packs the query rows [q_begin, q_begin + q_rows) of a group.
    void pack_queries(Index q_begin, Index q_rows, PackedTiles<T>& packed) const {
        packed.pack_queries(q_.middleRows(q_begin, q_rows));
    }
    /// Packs the key rows [k_begin, k_begin + keys).
    void pack_keys(Index k_begin, Index keys, PackedTiles<T>& packed, RowMatrix<T>& key_tile) const {
        packed.pack_keys(k_, k_begin, keys, key_tile);
    }
    /// tile [rows x keys] = s Q[q_begin : q_begin + rows] K[k_begin : k_begin + keys]^T. Packed: with
    /// q_begin - group_begin a multiple of kQueryTile (so the block's packed rows start a fresh panel)
    /// and keys the packed count.
    template <typename Tile>
    void operator()(Index q_begin, Index group_begin, Index k_begin, Tile& tile, const PackedTiles<T>* packed,
                    RowMatrix<T>& key_tile) const {
        if (packed == nullptr) {
            few_rows_key_logits(tile, q_.middleRows(q_begin, tile.rows()), k_, k_begin, tile.cols(), scale_, key_tile);
            return;
        }
        packed->multiply_logits(tile, q_begin - group_begin, q_.cols(), scale_);
    }

    /// tile as operator() writes it for a call of few rows, and other_tile as `other` would, from
    /// one read of the key tile for both where the keys are read in place (shares_key_tiles_with).
    template <typename Tile>
    void few_rows_tiles_with(const DotProductLogits& other, Index q_begin, Index k_begin, Tile& tile, Tile& other_tile,
                             RowMatrix<T>& key_tile) const {
        assert(shares_key_tiles_with(other));
        few_rows_key_logits_of_two(tile, q_.middleRows(q_begin, tile.rows()), other_tile,
                                   other.q_.middleRows(q_begin, tile.rows()), k_, k_begin, tile.cols(), scale_,
                                   key_tile);
    }

    /// Whether `other` reads the same key rows with the same scale (DIFF V2's two query heads of one
    /// kv head), so that one read of a key tile serves both.
    bool shares_key_tiles_with(const DotProductLogits& other) const {
        return scale_ == other.scale_ && k_.data() == other.k_.data() && k_.rows() == other.k_.rows() &&
               k_.is_blocked() == other.k_.is_blocked() &&
               (k_.is_blocked() || k_.row_stride() == other.k_.row_stride());
    }

private:
    const ConstMatrixRef<T>& q_;  // [N x d]
    KeyRows<S> k_;                // [S x d]
    T scale_;
};

/// Whether every entry of `m` is finite: inf - inf and NaN - NaN are NaN, and a sum with a NaN
/// is NaN. One vectorised pass (Eigen's allFinite() is a scalar loop).
template <typename Matrix>
bool all_finite(const Matrix& m) {
    // A half-precision cache's rows (few_rows_accumulate reads them unwidened) are summed as floats;
    // Eigen's cast to the matrix's own scalar is the matrix itself.
    using Scalar = typename Matrix::Scalar;
    const auto wide = m.template cast<std::conditional_t<std::is_floating_point_v<Scalar>, Scalar, float>>().array();
    return !std::isnan((wide - wide).sum());
}

/// A run of keys [begin, end) that attend_block limits a group to (by default all of them).
struct KeyRange {
    Index begin = 0;
    Index end = std::numeric_limits<Index>::max();
};

/// acc += P V, each row r of P multiplying only the value rows it sees (its visible prefix of the
/// tile from k_begin, query row first_row + r): for a tile some of whose hidden value rows hold
/// Inf/NaN, where one product over the whole tile would leak 0 * NaN = NaN into a row that must not
/// depend on them.
template <typename Mask, typename Acc, typename Probabilities, typename Values>
void accumulate_visible_prefixes(const Mask& mask, Index first_row, Index k_begin, Acc&& acc, const Probabilities& p,
                                 const Values& values) {
    for (Index r = 0; r < p.rows(); ++r) {
        const Index n = visible_keys_in_tile(mask, first_row + r, k_begin, p.cols());
        if (n > 0) few_rows_accumulate(acc.middleRows(r, 1), p.block(r, 0, 1, n), values.topRows(n));
    }
}

/// One block's step on one key tile: the logits of rows [b_offset, b_offset + b_rows) of the group
/// starting at q_begin against the b_keys keys of the tile from k_begin that the block sees, folded
/// into those rows of `state`, then acc += P V.
///   values:        the tile's value rows [k_count x value_dim];
///   values_finite: () -> whether every value of the tile is finite (asked only when a row must
///                  not see some of them; the caller may compute it once per tile);
///   packed:        the group's packed queries and the tile's packed values and keys (these for
///                  b_keys keys), or null for a group of fewer than kMinPackedRows rows.
template <typename T, typename Logits, typename Mask, typename Values, typename ValuesFinite>
void fold_tile(Logits& logits, const Mask& mask, Index q_begin, Index b_offset, Index b_rows, Index k_begin,
               Index b_keys, const Values& values, const ValuesFinite& values_finite, BlockScratch<T>& scratch,
               OnlineSoftmaxState<T>& state, PackedTiles<T>* packed) {
    const Index b_begin = q_begin + b_offset;
    auto probabilities = (packed != nullptr ? scratch.logits : scratch.few_rows_logits).topLeftCorner(b_rows, b_keys);
    logits(b_begin, q_begin, k_begin, probabilities, packed, scratch.key_tile);
    const bool masked = k_begin + b_keys > block_unmasked_end(mask, b_begin);
    const Index min_visible = state.fold(
        b_offset, probabilities, masked,
        [&](Index r) { return visible_keys_in_tile(mask, b_begin + r, k_begin, b_keys); },
        packed != nullptr && packed->rounds_probabilities_in_fold());
    // acc += P V. Masked probabilities are exact zeros, so one product over the whole tile is
    // exact unless a value row hidden from some query holds Inf/NaN (0 * NaN = NaN would leak
    // into a row that must not depend on it): then each row multiplies only its visible prefix.
    // (The same holds for the one value row past the block's keys that a BF16 pair reads.)
    auto acc = state.accumulator_rows(b_offset, b_rows);
    const auto block_values = values.topRows(b_keys);
    const bool reads_past = packed != nullptr && packed->reads_past(b_keys, values.rows());
    if ((min_visible == b_keys && !reads_past) || values_finite()) {
        if (packed != nullptr) {
            packed->accumulate(acc, probabilities, values.rows());
        } else {
            few_rows_accumulate(acc, probabilities, block_values);
        }
    } else {
        accumulate_visible_prefixes(mask, b_begin, k_begin, acc, probabilities, block_values);
    }
}

/// Whether every value of a tile is finite, computed on first use only (fold_tile's values_finite).
template <typename Values>
class LazyFinite {
public:
    explicit LazyFinite(const Values& values) : values_(values) {}
    bool operator()() const {
        if (known_ == Known::not_yet) known_ = all_finite(values_) ? Known::finite : Known::not_finite;
        return known_ == Known::finite;
    }

private:
    // Not a std::optional<bool>: GCC 12 at -O3 warns that its flag "may be used uninitialized"
    // wherever this is inlined, a false positive.
    enum class Known : unsigned char { not_yet, finite, not_finite };
    const Values& values_;
    mutable Known known_ = Known::not_yet;
};

/// Runs the online softmax of one query group [q_begin, q_begin + q_rows), q_rows <= kGroupRows,
/// over every key tile the mask lets it see. Key tiles are the outer loop: each key / value tile is
/// packed once and used by every block of kQueryTile rows of the group that sees it. On return
/// `state` holds the group's {acc, m, l}.
///   logits: the Logits policy (see DotProductLogits); it writes the logical (scaled) logits.
///   v:      [S x value_dim] values, stored in the scalar S (converted tile by tile, see rows_as).
///   keys:   only the keys [keys.begin, keys.end) (key tile boundaries), for a group whose key tiles
///           are split over several threads; merge the states with add_merged_row.
/// Groups are fixed runs of kGroupRows rows, whatever the thread count, so results are
/// bit-identical for every thread count.
template <typename T, typename S, typename Logits, typename Mask>
void attend_block(Logits& logits, const Mask& mask, Index q_begin, Index q_rows, const ConstMatrixRef<S>& v,
                  BlockScratch<T>& scratch, OnlineSoftmaxState<T>& state, KeyRange keys = {}) {
    assert(q_rows <= kGroupRows && keys.begin % kKeyTile == 0);
    PackedTiles<T>& packed = scratch.packed;
    const bool pack = q_rows >= kMinPackedRows;
    state.reset(q_rows, v.cols());
    const Index visit_end = std::min(keys.end, block_visit_end(mask, q_begin, q_begin + q_rows));
    if (pack && keys.begin < visit_end) logits.pack_queries(q_begin, q_rows, packed);
    for (Index k_begin = keys.begin; k_begin < visit_end; k_begin += kKeyTile) {
        const Index k_count = std::min(kKeyTile, visit_end - k_begin);
        const auto values = rows_as(v, k_begin, k_count, scratch.value_tile);
        if (pack) packed.pack_values(v, k_begin, values);
        Index packed_keys = 0;  // keys of this tile in packed.keys (a packing is not sliceable by keys)
        const LazyFinite<decltype(values)> values_finite(values);  // only if a block needs to know
        for (Index b_offset = 0; b_offset < q_rows; b_offset += kQueryTile) {
            const Index b_begin = q_begin + b_offset, b_rows = std::min(kQueryTile, q_rows - b_offset);
            // Under a causal mask an earlier block of the group sees fewer keys: it skips tiles
            // wholly in its future and uses a prefix of the last one it sees. The blocks come in
            // order, so the keys they see only grow: on the diagonal the key tile is packed again
            // for each longer prefix (each block computes only the logits it can see), elsewhere
            // once for the whole group.
            const Index b_keys = std::min(k_count, block_visit_end(mask, b_begin, b_begin + b_rows) - k_begin);
            if (b_keys <= 0) continue;
            if (pack && packed_keys != b_keys) {
                logits.pack_keys(k_begin, b_keys, packed, scratch.key_tile);
                packed_keys = b_keys;
            }
            fold_tile(logits, mask, q_begin, b_offset, b_rows, k_begin, b_keys, values, values_finite, scratch, state,
                      pack ? &packed : nullptr);
        }
    }
}

/// Calls f(q_begin, q_rows, scratch) for each query group of at most kGroupRows rows, on up to
/// `threads` threads, each with the scratch of the thread running it. Groups must be independent.
/// Under a causal mask a later group sees more keys, so the groups are handed out last first (the
/// heaviest first).
template <typename T, typename Mask, typename F>
void for_each_query_group(Index seq_len_q, int threads, const Mask& /*mask*/, AttentionWorkspace<T>& ws, F&& f) {
    constexpr Schedule schedule = std::is_same_v<Mask, CausalMask> ? Schedule::largest_first : Schedule::equal_tasks;
    parallel_for(query_group_count(seq_len_q), threads, schedule, [&](Index g, int thread) {
        f(g * kGroupRows, query_group_rows(seq_len_q, g), ws.block(thread));
    });
}

/// Returns the caller's workspace, or `local`, reserved for these sizes and the call's products
/// (the kernels' only allocation point).
template <typename T>
AttentionWorkspace<T>& prepare_workspace(AttentionWorkspace<T>* workspace, AttentionWorkspace<T>& local, Index seq_len_q,
                                         Index seq_len_kv, Index head_dim, Index value_dim,
                                         const ResolvedOptions& resolved) {
    AttentionWorkspace<T>& ws = workspace != nullptr ? *workspace : local;
    ws.reserve(seq_len_q, seq_len_kv, head_dim, value_dim, resolved.threads, 0, compute_of(resolved.products));
    return ws;
}

}  // namespace diffattn::detail
