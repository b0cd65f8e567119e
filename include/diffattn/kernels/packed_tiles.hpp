// The tiled core's packed operands and their two products (attention_core.hpp), in one of three
// ways, the call's ProductPath (docs/math.md §7.1):
//   scalar        Eigen's GEMM kernel on operands packed for it (tile_product.hpp's PackedProduct);
//   bf16_widened  the same kernel on the same packings with every entry rounded to BF16 after
//                 packing (a packing is a copy, so this is rounding before it), on any CPU;
//   bf16_dot      vdpbf16ps on BF16 packings (bf16_dot.hpp): Q and P as BF16 rows, K^T and V as
//                 pair panels, packed once per group or key tile and reused by its blocks; a BF16
//                 KV cache's keys and values are repacked without a conversion;
//   bf16_amx      AMX tiles' tdpbf16ps (bf16_tiles.hpp) on the same packings.
// Either BF16 path is the same contract: the products of BF16-rounded operands summed in fp32
// (a product of two BF16 values is exact in fp32). Only float kernels take them.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/bf16_dot.hpp"
#include "diffattn/kernels/bf16_rounding.hpp"
#include "diffattn/kernels/product_path.hpp"
#include "diffattn/kernels/key_rows.hpp"
#include "diffattn/kernels/tile_product.hpp"
#include "diffattn/kernels/tiling.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <type_traits>

namespace diffattn {

/// Operands of the tiled core's products, each packed once and reused by every product that reads
/// it, for the call's path (AttentionWorkspace::reserve sets it before the call runs).
template <typename T>
struct PackedTiles {
    using Product = detail::PackedProduct<T>;
    using Word = std::uint32_t;

    ProductPath path = ProductPath::scalar;
    // scalar and bf16_widened: Eigen's packings.
    Vector<T> queries;        ///< [kGroupRows * head_dim] the query rows of a group (Q^T, gebp's B)
    Vector<T> keys;           ///< [kKeyTile * head_dim] a key tile (gebp's A)
    Vector<T> values;         ///< [kKeyTile * value_dim] a value tile, transposed (gebp's A)
    Vector<T> probabilities;  ///< [kQueryTile * kKeyTile] a block's probabilities, transposed (gebp's B)
    // bf16_dot and bf16_amx (bf16_dot.hpp's layouts), with their strides in words.
    Vector<Word> bf16_queries;        ///< [kGroupRows x words(head_dim)] BF16 rows
    Vector<Word> bf16_keys;           ///< [words(head_dim) x columns(kKeyTile)] pair panels of K^T
    Vector<Word> bf16_values;         ///< [words(kKeyTile) x columns(value_dim)] pair panels of V
    Vector<Word> bf16_probabilities;  ///< [kQueryTile x words(kKeyTile)] BF16 rows
    Index query_words = 0, key_columns = 0, value_columns = 0;

    /// Room for heads of these widths; the BF16 packings only with `pair_packings`.
    void reserve(Index head_dim, Index value_dim, bool pair_packings) {
        grow(queries, kGroupRows * head_dim);
        grow(keys, kKeyTile * head_dim);
        grow(values, kKeyTile * value_dim);
        grow(probabilities, kQueryTile * kKeyTile);
        if (!pair_packings) return;
        grow(bf16_queries, kGroupRows * words(head_dim));
        grow(bf16_keys, words(head_dim) * columns(kKeyTile));
        grow(bf16_values, words(kKeyTile) * columns(value_dim));
        grow(bf16_probabilities, kQueryTile * words(kKeyTile));
    }

    /// Packs the query rows [rows x head_dim] of a group.
    template <typename Rows>
    void pack_queries(const Rows& rows) {
        if (pair_packed()) {
#if defined(DIFFATTN_X86_TARGETS)
            if constexpr (std::is_same_v<T, float>) {
                query_words = words(rows.cols());
                detail::bf16_dot::pack_rows(rows.data(), rows.rows(), rows.cols(), rows.outerStride(),
                                            bf16_queries.data(), query_words);
            }
#endif
            return;
        }
        Product::pack_rows_as_rhs(queries.data(), rows);
        if (path == ProductPath::bf16_widened) round_in_place(queries.data(), rows.size());
    }

    /// Packs the keys [begin, begin + count) of k (either layout); key_tile: the thread's tile for
    /// keys the packing cannot read where they lie.
    template <typename S>
    void pack_keys(const detail::KeyRows<S>& k, Index begin, Index count, RowMatrix<T>& key_tile) {
        const Index cols = k.cols();
        if (pair_packed()) {
#if defined(DIFFATTN_X86_TARGETS)
            if constexpr (std::is_same_v<T, float>) {
                key_columns = columns(count);
                Word* dst = bf16_keys.data();
                if constexpr (std::is_same_v<S, Eigen::bfloat16>) {
                    const auto* bits = reinterpret_cast<const std::uint16_t*>(k.data());
                    if (k.is_blocked()) {
                        assert(begin % detail::kKeyBlock == 0);
                        return detail::bf16_dot::pack_blocked_keys(bits + begin * cols, count, cols, dst, key_columns);
                    }
                    return detail::bf16_dot::pack_keys(bits + begin * k.row_stride(), count, cols, k.row_stride(), dst,
                                                       key_columns);
                }
                const auto rows = detail::key_rows_as<T>(k, begin, count, key_tile);
                detail::bf16_dot::pack_keys(rows.data(), count, cols, rows.outerStride(), dst, key_columns);
            }
#endif
            return;
        }
        Product::pack_rows_as_lhs(keys.data(), detail::key_rows_as<T>(k, begin, count, key_tile));
        // BF16 keys are already BF16 values: nothing to round.
        if (path == ProductPath::bf16_widened && !std::is_same_v<S, Eigen::bfloat16>) {
            round_in_place(keys.data(), count * cols);
        }
    }

    /// Packs a tile of values: rows [begin, begin + values.rows()) of v, which `values` holds in T.
    template <typename S, typename Values>
    void pack_values(const ConstMatrixRef<S>& v, Index begin, const Values& values) {
        if (pair_packed()) {
#if defined(DIFFATTN_X86_TARGETS)
            if constexpr (std::is_same_v<T, float>) {
                value_columns = columns(values.cols());
                if constexpr (std::is_same_v<S, Eigen::bfloat16>) {
                    const auto* bits = reinterpret_cast<const std::uint16_t*>(v.row(begin).data());
                    detail::bf16_dot::pack_values(bits, values.rows(), values.cols(), v.outerStride(),
                                                  bf16_values.data(), value_columns);
                } else {
                    detail::bf16_dot::pack_values(values.data(), values.rows(), values.cols(), values.outerStride(),
                                                  bf16_values.data(), value_columns);
                }
            }
#endif
            (void)v, (void)begin;
            return;
        }
        Product::pack_transpose_as_lhs(this->values.data(), values);
        if (path == ProductPath::bf16_widened && !std::is_same_v<S, Eigen::bfloat16>) {
            round_in_place(this->values.data(), values.size());
        }
    }

    /// tile [rows x keys] = scale * (the packed queries from row `row` of the group) (the packed
    /// keys, their first `keys` = tile.cols())^T, over `depth` = head_dim entries. `row` a
    /// multiple of kQueryTile (a block starts a fresh panel of Eigen's packing).
    template <typename Tile>
    void multiply_logits(Tile& tile, Index row, Index depth, T scale) const {
        if (pair_packed()) {
#if defined(DIFFATTN_X86_TARGETS)
            if constexpr (std::is_same_v<T, float>) {
                detail::multiply_pairs(path, bf16_queries.data() + row * query_words, query_words, tile.rows(),
                                       bf16_keys.data(), key_columns, tile.cols(), words(depth), tile.data(),
                                       tile.outerStride(), scale, false);
            }
#endif
            return;
        }
        static_assert(kQueryTile % Product::rhs_panel == 0, "blocks must start on a packed panel");
        tile.setZero();  // gebp accumulates; the scale rides on its alpha
        Product::multiply_transposed(tile, keys.data(), depth, queries.data() + row * depth, depth, scale);
    }

    /// acc [rows x value_dim] += probabilities [rows x keys] (the packed values, their first `keys`
    /// rows); `tile_keys`: the rows the values were packed with (>= keys). bf16_widened: the
    /// probabilities are rounded already (rounds_probabilities_in_fold).
    template <typename Acc, typename Probabilities>
    void accumulate(Acc&& acc, const Probabilities& p, Index tile_keys) {
        const Index keys = p.cols();
        if (pair_packed()) {
#if defined(DIFFATTN_X86_TARGETS)
            if constexpr (std::is_same_v<T, float>) {
                const Index p_words = words(keys);
                detail::bf16_dot::pack_rows(p.data(), p.rows(), keys, p.outerStride(), bf16_probabilities.data(),
                                            p_words);
                detail::multiply_pairs(path, bf16_probabilities.data(), p_words, acc.rows(), bf16_values.data(),
                                       value_columns, acc.cols(), p_words, acc.data(), acc.outerStride(), 1.0f, true);
            }
#endif
            (void)tile_keys;
            return;
        }
        Product::pack_rows_as_rhs(probabilities.data(), p);  // bf16_widened: rounded by the fold
        Product::multiply_transposed(acc, values.data(), tile_keys, probabilities.data(), keys, T(1));
    }

    /// Whether the fold writes the probabilities rounded to BF16 (bf16_widened: P's rounding, in
    /// registers rather than as a pass over the packed tile).
    bool rounds_probabilities_in_fold() const { return std::is_same_v<T, float> && path == ProductPath::bf16_widened; }

    /// Whether acc += P V over a prefix of `keys` of a tile of `tile_keys` packed values reads a value
    /// row past the prefix: the pair packings multiply pairs of rows, so an odd prefix reads its partner
    /// row too (times a zero, which is NaN if that row is not finite).
    bool reads_past(Index keys, Index tile_keys) const { return pair_packed() && keys % 2 == 1 && keys < tile_keys; }

private:
    /// Whether the products take bf16_dot.hpp's packings (bf16_dot, bf16_amx; float kernels only).
    bool pair_packed() const { return std::is_same_v<T, float> && uses_pair_packings(path); }
    static Index words(Index n) { return (n + 1) / 2; }
    /// A packing's entries rounded to BF16 (the widened path; float kernels only).
    static void round_in_place(T* p, Index n) {
        if constexpr (std::is_same_v<T, float>) detail::round_operands_to_bf16(p, n);
        (void)p, (void)n;
    }
    static Index columns(Index n) { return (n + 15) / 16 * 16; }
    template <typename V>
    static void grow(V& v, Index size) {
        if (v.size() < size) v.resize(size);
    }
};

}  // namespace diffattn
