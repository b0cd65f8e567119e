// The one tiled online-softmax core that every attention variant reuses.
//
// attend_block() runs FlashAttention's loop for one block of at most kQueryTile query rows:
// visit the key tiles the mask allows, turn each tile into logits with a Logits policy, fold
// them into an OnlineSoftmaxState, and accumulate P V. Variants differ only in the Logits
// policy (scaled Q K^T, or DINT's integral G) and in how they combine the states of several
// maps (SPEC 2.2, 2.3). No N x S buffer is ever held: scratch is one kQueryTile x kKeyTile tile.
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/workspace.hpp"
#include "diffattn/kernels/mask.hpp"
#include "diffattn/kernels/online_softmax.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/tile_product.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace diffattn::detail {

/// Logits policy of ordinary attention: tile = Q[q rows] K[k rows]^T (the core applies the scale).
template <typename T>
class DotProductLogits {
public:
    DotProductLogits(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k) : q_(q), k_(k) {}

    /// tile [rows x keys] = Q[q_begin : q_begin + rows] K[k_begin : k_begin + keys]^T.
    template <typename Tile>
    void operator()(Index q_begin, Index k_begin, Tile& tile) const {
        tile_product<false>(tile, q_.middleRows(q_begin, tile.rows()), k_.middleRows(k_begin, tile.cols()).transpose());
    }

private:
    const ConstMatrixRef<T>& q_;  // [N x d]
    const ConstMatrixRef<T>& k_;  // [S x d]
};

/// Runs the online softmax of one query block [q_begin, q_begin + q_rows) over every key tile the
/// mask lets it see. On return `state` holds the block's {acc, m, l}.
///   logit_scale: the logical logit is logit_scale * (what `logits` writes); must be > 0.
///   v:           [S x value_dim] values.
///   tile_buffer: at least [kQueryTile x kKeyTile] scratch.
template <typename T, typename Logits, typename Mask>
void attend_block(Logits& logits, T logit_scale, const Mask& mask, Index q_begin, Index q_rows,
                  const ConstMatrixRef<T>& v, RowMatrix<T>& tile_buffer, OnlineSoftmaxState<T>& state) {
    state.reset(q_rows, v.cols());
    const Index visit_end = block_visit_end(mask, q_begin, q_begin + q_rows);
    const Index unmasked_end = block_unmasked_end(mask, q_begin);
    for (Index k_begin = 0; k_begin < visit_end; k_begin += kKeyTile) {
        const Index k_count = std::min(kKeyTile, visit_end - k_begin);
        auto tile = tile_buffer.topLeftCorner(q_rows, k_count);
        logits(q_begin, k_begin, tile);
        const bool masked = k_begin + k_count > unmasked_end;
        state.update(tile, logit_scale, v.middleRows(k_begin, k_count), masked,
                     [&](Index r) { return visible_keys_in_tile(mask, q_begin + r, k_begin, k_count); });
    }
}

/// Calls f(q_begin, q_rows, scratch) for each block of at most kQueryTile query rows, on up to
/// `threads` threads, each block with
/// the block scratch of the thread running it. Blocks must be independent. Under a causal mask a
/// later block sees more keys, so the blocks are handed out last first (the heaviest first).
template <typename T, typename Mask, typename F>
void for_each_query_block(Index seq_len_q, int threads, const Mask& /*mask*/, AttentionWorkspace<T>& ws, F&& f) {
    constexpr Schedule schedule = std::is_same_v<Mask, CausalMask> ? Schedule::largest_first : Schedule::equal_tasks;
    parallel_for(query_block_count(seq_len_q), threads, schedule, [&](Index b, int thread) {
        const Index q_begin = b * kQueryTile;
        f(q_begin, std::min(kQueryTile, seq_len_q - q_begin), ws.block(thread));
    });
}

/// Options after validation, with defaults filled in.
struct ResolvedOptions {
    MaskKind mask;
    Index valid_len;  ///< keys [0, valid_len) exist
    double scale;     ///< s > 0
    int threads;      ///< threads this build will use (1 without OpenMP)
};

/// Checks the shapes of one query/key/value triple and the output, and the options.
///   names: how the function's documentation names q, k, v (e.g. "Q1", "K1", "V").
template <typename T>
ResolvedOptions check_attention(const char* function, const char* q_name, const char* k_name, const char* v_name,
                                const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k, const ConstMatrixRef<T>& v,
                                const MatrixRef<T>& out, const AttentionOptions& options) {
    require_same_cols(function, named(k_name, k), named(q_name, q));
    require_same_rows(function, named(v_name, v), named(k_name, k));
    require<ShapeError>(k.rows() >= q.rows(), function, ": ", describe(named(k_name, k)), " but ",
                        describe(named(q_name, q)), " (need at least as many keys as queries: S >= N)");
    require_shape(function, named("out", out), q.rows(), v.cols());
    require_no_alias(function, "out", out, q_name, q);
    require_no_alias(function, "out", out, k_name, k);
    require_no_alias(function, "out", out, v_name, v);

    require<OptionError>(options.threads >= 1, function, ": threads must be >= 1, got ", options.threads);
    ResolvedOptions resolved{options.mask, k.rows(), 0.0, available_threads(options.threads)};
    if (options.valid_len) {
        resolved.valid_len = *options.valid_len;
        require<OptionError>(resolved.valid_len >= 0 && resolved.valid_len <= k.rows(), function,
                             ": valid_len is ", resolved.valid_len, " but ", describe(named(k_name, k)),
                             " (need 0 <= valid_len <= S)");
    }
    if (options.scale) {
        resolved.scale = *options.scale;
        require<OptionError>(std::isfinite(resolved.scale) && resolved.scale > 0, function,
                             ": scale must be finite and > 0, got ", resolved.scale);
        // The kernels scale in T: a float kernel would turn 1e300 into Inf (NaN logits) and 1e-300 into 0.
        const T scale_in_t = static_cast<T>(resolved.scale);
        require<OptionError>(std::isfinite(scale_in_t) && scale_in_t > 0, function, ": scale ", resolved.scale,
                             " is not a finite value > 0 in ", sizeof(T) == sizeof(float) ? "float" : "double");
    } else {
        require<ShapeError>(q.cols() > 0 || q.rows() == 0, function, ": ", describe(named(q_name, q)),
                            " (head dim 0 has no default scale 1/sqrt(d))");
        resolved.scale = q.cols() > 0 ? 1.0 / std::sqrt(static_cast<double>(q.cols())) : 1.0;
    }
    require<OptionError>(options.mask == MaskKind::none || options.mask == MaskKind::causal, function,
                         ": unknown mask kind");
    return resolved;
}

/// Returns the caller's workspace, or `local`, reserved for these sizes (the kernels' only allocation point).
template <typename T>
AttentionWorkspace<T>& prepare_workspace(AttentionWorkspace<T>* workspace, AttentionWorkspace<T>& local, Index seq_len_q,
                                         Index seq_len_kv, Index head_dim, Index value_dim, int threads) {
    AttentionWorkspace<T>& ws = workspace != nullptr ? *workspace : local;
    ws.reserve(seq_len_q, seq_len_kv, head_dim, value_dim, threads);
    return ws;
}

}  // namespace diffattn::detail
