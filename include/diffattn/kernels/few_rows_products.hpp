// The two products of a call of few query rows (a decode step) with a tile of keys and values:
// few_rows_logits (the logits of each query row against the key rows; few_rows_key_logits for keys
// of either layout of kernels/key_rows.hpp) and few_rows_accumulate (each row's probabilities times
// the value rows). With AVX-512 the float path runs the loops of
// few_rows_simd.hpp, reading keys and values stored in float, half or bfloat16 directly; other ISAs
// and double use Eigen's matrix-vector products.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/few_rows_simd.hpp"
#include "diffattn/kernels/key_rows.hpp"
#include "diffattn/kernels/stored_rows.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace diffattn::detail {

/// Whether an Eigen expression stores its rows contiguously (the AVX-512 paths' operands).
template <typename Xpr>
inline constexpr bool kRowMajor = (Eigen::internal::traits<std::decay_t<Xpr>>::Flags & Eigen::RowMajorBit) != 0;

/// Whether few_rows_logits and few_rows_accumulate read keys and values stored in S directly when
/// computing in T (else the caller widens them first: rows_as).
template <typename T, typename S>
inline constexpr bool kFewRowsRead =
    std::is_same_v<T, S>
#if defined(DIFFATTN_FEW_ROWS_AVX512)
    || (std::is_same_v<T, float> && (std::is_same_v<S, Eigen::half> || std::is_same_v<S, Eigen::bfloat16>))
#endif
    ;

/// Rows [begin, begin + count) of a key or value operand stored in S, as the few-row products take
/// them: the stored rows themselves where they read S (kFewRowsRead), else widened into `buffer`.
template <typename T, typename S>
auto few_rows_operand(const ConstMatrixRef<S>& m, Index begin, Index count, RowMatrix<T>& buffer) {
    if constexpr (kFewRowsRead<T, S>) {
        return m.middleRows(begin, count);
    } else {
        return rows_as(m, begin, count, buffer);
    }
}

/// tile [rows x keys] = scale * queries [rows x d] keys [keys x d]^T, for few query rows: each
/// row's logits in one sweep of the key tile (row-major, in cache after the first row, so only the
/// first row's sweep asks for lines ahead: a GQA group's 4-8 rows had asked for each line 4-8 times).
template <typename Tile, typename Queries, typename Keys, typename T>
void few_rows_logits(Tile&& tile, const Queries& queries, const Keys& keys, T scale) {
    using S = typename std::decay_t<Keys>::Scalar;
    static_assert(kFewRowsRead<T, S>, "keys in another scalar: widen them first (rows_as)");
#if defined(DIFFATTN_FEW_ROWS_AVX512)
    if constexpr (std::is_same_v<T, float>) {
        static_assert(kRowMajor<Queries> && kRowMajor<Keys> && kRowMajor<Tile>, "row-major operands");
        for (Index r = 0; r < queries.rows() && keys.rows() > 0; ++r) {
            scaled_key_dots(queries.data() + r * queries.outerStride(), keys.data(), keys.outerStride(), keys.rows(),
                            keys.cols(), scale, tile.data() + r * tile.outerStride(), r == 0);
        }
    } else
#endif
    {
        // Eigen's matrix-vector product per query row (several keys per pass, no packing).
        for (Index r = 0; r < queries.rows(); ++r) {
            tile.row(r).transpose().noalias() = scale * (keys * queries.row(r).transpose());
        }
    }
}

#if defined(DIFFATTN_FEW_ROWS_AVX512)
/// The scaled dots of `rows` query rows with `count` blocked keys from the block at `blocks`
/// (kernels/key_rows.hpp), d entries each: row_at(i) gives query row i and where its logits go, as
/// {const float*, float*}. Up to four rows (a GQA group's heads, DIFF V2's two maps) share each
/// read of a block.
template <typename S, typename RowAt>
void blocked_key_logits(Index rows, const RowAt& row_at, const S* blocks, Index count, Index d, float scale) {
    for (Index r = 0; r < rows; r += 4) {
        const auto rows_from_r = [&](auto count_of_rows) {
            constexpr int kRows = decltype(count_of_rows)::value;
            const float* queries[kRows];
            float* out[kRows];
            for (int m = 0; m < kRows; ++m) std::tie(queries[m], out[m]) = row_at(r + m);
            scaled_blocked_key_dots<kRows>(queries, blocks, count, d, scale, out);
        };
        switch (std::min<Index>(4, rows - r)) {
            case 1: rows_from_r(std::integral_constant<int, 1>{}); break;
            case 2: rows_from_r(std::integral_constant<int, 2>{}); break;
            case 3: rows_from_r(std::integral_constant<int, 3>{}); break;
            default: rows_from_r(std::integral_constant<int, 4>{}); break;
        }
    }
}
#endif

/// Whether the few-row products read keys stored in S in blocks (kernels/key_rows.hpp) where they
/// lie when computing in T, from the start of a block: the AVX-512 float loops.
template <typename T, typename S>
inline constexpr bool kFewRowsReadBlocks =
#if defined(DIFFATTN_FEW_ROWS_AVX512)
    std::is_same_v<T, float> && kFewRowsRead<T, S>;
#else
    false;
#endif

/// Where the few-row products read `keys` in place in blocks from k_begin (kFewRowsReadBlocks, the
/// keys blocked, k_begin a block's start): the logits of `rows` query rows against keys [k_begin,
/// k_begin + count) (blocked_key_logits; row_at(i) gives query row i and where its logits go), and
/// true. Else false, and nothing is computed. row_at is instantiated only where it is called.
template <typename T, typename S, typename RowAt>
bool blocked_key_logits_in_place(const KeyRows<S>& keys, Index k_begin, Index count, Index rows, const RowAt& row_at,
                                 T scale) {
#if defined(DIFFATTN_FEW_ROWS_AVX512)
    if constexpr (kFewRowsReadBlocks<T, S>) {
        if (keys.is_blocked() && k_begin % kKeyBlock == 0) {
            blocked_key_logits(rows, row_at, keys.data() + k_begin * keys.cols(), count, keys.cols(), scale);
            return true;
        }
    }
#endif
    (void)keys, (void)k_begin, (void)count, (void)rows, (void)row_at, (void)scale;
    return false;
}

/// tile [rows x count] = scale * queries [rows x d] keys[k_begin, k_begin + count)^T for few query
/// rows, the keys row-major or blocked (kernels/key_rows.hpp): read where they lie by the loops that
/// read their scalar and layout (blocked: kFewRowsReadBlocks, from the start of a block), else
/// turned into rows in T in `key_tile` first.
template <typename Tile, typename Queries, typename T, typename S>
void few_rows_key_logits(Tile&& tile, const Queries& queries, const KeyRows<S>& keys, Index k_begin, Index count,
                         T scale, RowMatrix<T>& key_tile) {
    const auto row_at = [&](auto i) {  // generic: compiled only where the keys are read in blocks
        static_assert(kRowMajor<Queries> && kRowMajor<std::decay_t<Tile>>, "row-major operands");
        return std::pair<const float*, float*>(queries.data() + i * queries.outerStride(),
                                               tile.data() + i * tile.outerStride());
    };
    if (blocked_key_logits_in_place(keys, k_begin, count, queries.rows(), row_at, scale)) return;
    if constexpr (kFewRowsRead<T, S>) {
        if (!keys.is_blocked()) {
            return few_rows_logits(tile, queries, keys.row_major().middleRows(k_begin, count), scale);
        }
    }
    few_rows_logits(tile, queries, key_rows_as<T>(keys, k_begin, count, key_tile), scale);
}

/// few_rows_key_logits for two query matrices over the same keys (DIFF V2's two query heads of one
/// kv head): tile1 from queries1 and tile2 from queries2, of the same rows, from one read of the
/// keys where they are read in place in blocks; else one call after the other.
template <typename Tile, typename Queries, typename T, typename S>
void few_rows_key_logits_of_two(Tile&& tile1, const Queries& queries1, Tile&& tile2, const Queries& queries2,
                                const KeyRows<S>& keys, Index k_begin, Index count, T scale, RowMatrix<T>& key_tile) {
    const auto row_at = [&](auto i) {  // the two matrices' rows in turn: a block read once for both
        static_assert(kRowMajor<Queries> && kRowMajor<std::decay_t<Tile>>, "row-major operands");
        const auto& queries = i % 2 == 0 ? queries1 : queries2;
        auto& tile = i % 2 == 0 ? tile1 : tile2;
        return std::pair<const float*, float*>(queries.data() + i / 2 * queries.outerStride(),
                                               tile.data() + i / 2 * tile.outerStride());
    };
    if (blocked_key_logits_in_place(keys, k_begin, count, 2 * queries1.rows(), row_at, scale)) return;
    few_rows_key_logits(tile1, queries1, keys, k_begin, count, scale, key_tile);
    few_rows_key_logits(tile2, queries2, keys, k_begin, count, scale, key_tile);
}

/// acc [rows x dv] += probabilities [rows x keys] values [keys x dv], for few query rows, and the
/// same for `second` (acc2 += p2 values) unless it is null, from one sweep of the value tile per
/// row (row-major, in cache after the first row, which alone asks for lines ahead).
template <typename Acc, typename Probabilities, typename Values, typename Second = std::nullptr_t>
void few_rows_accumulate(Acc&& acc, const Probabilities& p, const Values& values, Second&& second = nullptr) {
    using T = typename std::decay_t<Acc>::Scalar;
    using S = typename std::decay_t<Values>::Scalar;
    constexpr bool kSecond = !std::is_same_v<std::decay_t<Second>, std::nullptr_t>;
    static_assert(kFewRowsRead<T, S>, "values in another scalar: widen them first (rows_as)");
#if defined(DIFFATTN_FEW_ROWS_AVX512)
    if constexpr (std::is_same_v<T, float>) {
        static_assert(kRowMajor<Acc> && kRowMajor<Probabilities> && kRowMajor<Values>, "row-major operands");
        if (values.rows() == 0) return;
        // One sweep of the value tile for the M weight rows and outputs given; the first asks ahead.
        const auto sweep = [&](const auto& weights, const auto& out, Index r) {
            constexpr int M = static_cast<int>(std::extent_v<std::remove_reference_t<decltype(weights)>>);
            accumulate_value_rows<M>(weights, values.data(), values.outerStride(), values.rows(), values.cols(), out,
                                     r == 0);
        };
        if constexpr (kSecond) {  // each row's two outputs from one sweep
            for (Index r = 0; r < acc.rows(); ++r) {
                const float* weights[2] = {p.data() + r * p.outerStride(),
                                           second.p.data() + r * second.p.outerStride()};
                float* out[2] = {acc.data() + r * acc.outerStride(), second.acc.data() + r * second.acc.outerStride()};
                sweep(weights, out, r);
            }
        } else {  // a GQA group's rows, up to 4 (2 where dv > 64) per sweep
            const Index group = values.cols() > 64 ? 2 : 4;
            for (Index r = 0; r < acc.rows(); r += group) {
                const auto rows_from_r = [&](auto count) {
                    const float* weights[decltype(count)::value];
                    float* out[decltype(count)::value];
                    for (int m = 0; m < decltype(count)::value; ++m) {
                        weights[m] = p.data() + (r + m) * p.outerStride();
                        out[m] = acc.data() + (r + m) * acc.outerStride();
                    }
                    sweep(weights, out, r);
                };
                switch (std::min(group, acc.rows() - r)) {
                    case 1: rows_from_r(std::integral_constant<int, 1>{}); break;
                    case 2: rows_from_r(std::integral_constant<int, 2>{}); break;
                    case 3: rows_from_r(std::integral_constant<int, 3>{}); break;
                    default: rows_from_r(std::integral_constant<int, 4>{}); break;
                }
            }
        }
    } else
#endif
    {
        // Eigen's vector-matrix product per query row (no packing).
        for (Index r = 0; r < acc.rows(); ++r) acc.row(r).noalias() += p.row(r) * values;
        if constexpr (kSecond) {
            for (Index r = 0; r < second.acc.rows(); ++r) second.acc.row(r).noalias() += second.p.row(r) * values;
        }
    }
}

/// The second output of few_rows_accumulate: acc += p values.
template <typename Acc, typename Probabilities>
struct SecondProduct {
    Acc acc;
    const Probabilities& p;
};
template <typename Acc, typename Probabilities>
SecondProduct(Acc, const Probabilities&) -> SecondProduct<Acc, Probabilities>;

}  // namespace diffattn::detail
