// The tiling of the attention kernels: query blocks, key tiles and query groups.
//
// The tiled core (attention_core.hpp) runs the query rows in blocks of kQueryTile against key tiles
// of kKeyTile, and hands the blocks to threads in groups of kGroupBlocks. Groups and blocks are
// fixed runs of rows whatever the thread count, which keeps results independent of it.
#pragma once

#include "diffattn/core/types.hpp"

#include <algorithm>

namespace diffattn {

/// Query rows per block and keys per tile of the tiled core.
inline constexpr Index kQueryTile = 64;
inline constexpr Index kKeyTile = 128;
/// Softmax, DIFF and DINT run the query blocks in groups of kGroupBlocks: a group packs each key /
/// value tile once for all its blocks, so packing costs 1/kGroupBlocks of what it costs per block.
/// The group's accumulators [kGroupRows x value_dim] (256 KB at value width 256) stay in L2.
inline constexpr Index kGroupBlocks = 4;
inline constexpr Index kGroupRows = kGroupBlocks * kQueryTile;

/// Query groups of fewer rows multiply their tiles unpacked, a matrix-vector product per row
/// (few_rows_logits, few_rows_accumulate): packing a key / value tile costs about as much as
/// multiplying it by a few query rows. Calls of so few rows (a decode step) also split their keys
/// over the threads (kernels/key_split.hpp), since their one query group leaves the others idle.
inline constexpr Index kMinPackedRows = 8;

/// Calls of fewer than kMinPackedRows rows over keys and values stored in S visit their keys in
/// tiles of kFewRowsKeyTileOf<S> (their tiles are not packed): kFewRowsKeyTile for float and
/// double, whose heads read the cache at about 0.9 of a streaming read's rate with it against
/// about 0.7 with tiles of 128; kFewRowsHalfKeyTile for half precision, whose heads were slower
/// with the longer tiles (docs/benchmarks.md, "Longer key tiles for few rows").
inline constexpr Index kFewRowsKeyTile = 4 * kKeyTile;
inline constexpr Index kFewRowsHalfKeyTile = kKeyTile;
template <typename S>
inline constexpr Index kFewRowsKeyTileOf = sizeof(S) >= 4 ? kFewRowsKeyTile : kFewRowsHalfKeyTile;
/// The shorter of the two, of which both are multiples: a workspace, which does not know S, keeps
/// per-tile state for tiles this short (AttentionWorkspace::kept_probabilities).
inline constexpr Index kShortestFewRowsKeyTile = std::min(kFewRowsKeyTile, kFewRowsHalfKeyTile);
static_assert(kFewRowsKeyTile % kShortestFewRowsKeyTile == 0 && kFewRowsHalfKeyTile % kShortestFewRowsKeyTile == 0,
              "every few-row key tile is a multiple of the shortest");

/// Number of query blocks of kQueryTile rows covering `seq_len_q` rows.
inline Index query_block_count(Index seq_len_q) { return (seq_len_q + kQueryTile - 1) / kQueryTile; }
/// Number of query groups of kGroupRows rows covering `seq_len_q` rows.
inline Index query_group_count(Index seq_len_q) { return (seq_len_q + kGroupRows - 1) / kGroupRows; }
/// Rows of query group g of `seq_len_q` rows: kGroupRows, or fewer for the last group.
inline Index query_group_rows(Index seq_len_q, Index g) { return std::min(kGroupRows, seq_len_q - g * kGroupRows); }

}  // namespace diffattn
