// Linear projection without bias, in PyTorch nn.Linear layout (docs/math.md §3): y = x W^T, with W
// in any storage format (core/linear_weight.hpp, docs/math.md §10).
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_panels.hpp"
#include "diffattn/kernels/product_path.hpp"
#include "diffattn/layers/panel_products.hpp"
#include "diffattn/layers/few_rows_linear.hpp"
#include "diffattn/layers/stored_weight_dots.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>

namespace diffattn {

namespace detail {
/// Size of `blocks` blocks covering `extent`, rounded up to a multiple of `multiple` (so perhaps
/// fewer blocks).
inline Index block_size(Index extent, Index blocks, Index multiple) {
    const Index size = (extent + blocks - 1) / blocks;
    return std::max<Index>(multiple, (size + multiple - 1) / multiple * multiple);
}
/// Size of the blocks a product's extent is cut into: about `target` (one block below 2 * target),
/// rounded up to a multiple of `multiple`. It depends on the extent only, never on the thread count,
/// so every thread count computes the same products, bit for bit.
inline Index linear_block(Index extent, Index target, Index multiple) {
    return block_size(extent, std::max<Index>(1, extent / target), multiple);
}
/// linear() cuts y into blocks of about 512 tokens x 512 output features, each one Eigen GEMM. Each
/// block packs its part of x and of W again, which costs little next to the products of a block
/// this large but slows narrower blocks down (docs/benchmarks.md, "Fixed blocks for products"), and
/// the mid-size model's products still give 8-64 blocks to share out. 16 features: a whole AVX-512
/// packet of floats.
inline constexpr Index kLinearBlockTarget = 512;
inline constexpr Index kLinearFeatureMultiple = 16;
/// Features per block of a few-rows product on `team` threads: about kLinearBlockTarget, rounded up
/// to kLinearFeatureMultiple, in a number of blocks that shares evenly over the team (but for the
/// last block's rounding), at least two per thread on a team of several: a thread that finishes
/// its first block while another is still on its own takes the next, rather than the team waiting
/// for the slower thread's one block (docs/benchmarks.md, "Two blocks per thread").
inline Index few_rows_feature_block(Index features, int team) {
    const Index per_thread = (features + team - 1) / team;
    const Index least = team > 1 ? 2 : 1;
    const Index blocks = team * std::max<Index>(least, (per_thread + kLinearBlockTarget / 2) / kLinearBlockTarget);
    return block_size(features, blocks, kLinearFeatureMultiple);
}
/// What reading a weight from memory costs, in flops: kFlopsPerByteRead for each byte it is stored
/// in (a float's 4 for the f32 format, kept for double too, whose few-rows products are rarer).
template <typename T>
double flops_per_weight_read(const WeightView<T>& w) {
    const double bytes = w.format == WeightFormat::f32 ? 4.0 : static_cast<double>(w.row_bytes) / static_cast<double>(w.cols);
    return bytes * kFlopsPerByteRead;
}

}  // namespace detail

/// One product of linear_each: out = x W^T, W stored as [out_features x in_features] in any format.
template <typename T>
struct LinearProduct {
    WeightView<T> weight;  ///< [out x in]
    MatrixRef<T> out;      ///< [N x out], not aliasing x
};

/// out = x W^T for each product, all of the same x, in one parallel region: the projections of
/// one input (a layer's queries, keys and values; a SwiGLU's gate and up) fork and join the team
/// once, not once each. Each output is what linear() alone computes, bit for bit.
///   x          [N x in]   (any row-major matrix or column block)
///   products   each weight [out_i x in] with its out [N x out_i]
///   context: fewer than detail::kFewRowsLinear tokens (a decode step) take few_rows_linear (f32)
///            or stored_few_rows_linear (other formats), which read W once, each weight's features
///            cut into as many blocks per thread (detail::few_rows_feature_block); larger calls cut
///            each out into fixed blocks of tokens x features (detail::linear_block), a weight of
///            another format than f32 decoded a panel at a time into context.panels (allocated for
///            the call when the context has none). The blocks run on up to context.threads
///            threads (OpenMP builds), but on fewer, down to one, when the products have less than
///            context.min_parallel_flops flops per thread (a few-rows product counts
///            flops_per_weight_read per weight it reads). Results do not depend on the thread count.
///            context.compute: a BF16 mode makes the products of many rows BF16 products
///            (detail::linear_block_through_panels, docs/math.md §10.1; float only: OptionError for a double
///            product, and for bf16_dot or bf16_amx on a CPU without its unit); a decode step stays in T.
template <typename T, std::size_t K>
void linear_each(const ConstMatrixRef<T>& x, const LinearProduct<T> (&products)[K],
                 const ExecutionContext& context = {}) {
    const Index tokens = x.rows();
    const bool few_rows = tokens < detail::kFewRowsLinear;
    const ProductPath path = context.compute == Compute::scalar || few_rows
                                 ? ProductPath::scalar
                                 : detail::resolve_products<T>("linear", context.compute);
    const bool bf16 = path != ProductPath::scalar;
    double work = 0;
    bool stored = false;  // a weight in another format than f32
    for (const LinearProduct<T>& product : products) {
        const WeightView<T>& w = product.weight;
        // Entry-point checks are cheap next to the GEMM and catch mis-sized scratch early.
        detail::require_same_cols("linear", detail::named("x", x), detail::NamedShape{"weight", w.rows, w.cols});
        detail::require_shape("linear", detail::named("out", product.out), tokens, w.rows);
        const double flops = 2.0 * static_cast<double>(tokens) * static_cast<double>(x.cols()) *
                             static_cast<double>(w.rows);
        // A few-rows product is bound by reading W, not by its flops: weigh each weight it reads as
        // flops_per_weight_read flops when choosing the threads.
        const double weights = static_cast<double>(w.rows) * static_cast<double>(w.cols);
        work += few_rows ? std::max(flops, detail::flops_per_weight_read(w) * weights) : flops;
        stored = stored || w.format != WeightFormat::f32;
    }
    const int team = context.threads_for(work);
    // Panels for the stored weights of a call of many rows: the context's, or the call's own.
    WeightPanels own_panels;
    const WeightPanels* panels = context.panels;
    if ((stored || bf16) && !few_rows &&
        (panels == nullptr || panels->threads() < team || !panels->holds(sizeof(T)) ||
         (bf16 && !panels->holds_bf16_operands()))) {
        own_panels = WeightPanels(team, sizeof(T), bf16);
        panels = &own_panels;
    }
    const Index token_block = detail::linear_block(tokens, detail::kLinearBlockTarget, 1);
    const Index token_blocks = (tokens + token_block - 1) / token_block;
    // Each product's blocks, laid out once before the region: the blocks of product i are
    // [first_block[i], first_block[i + 1]). A few-rows product gives every output one dot product
    // over the whole inner dimension, however the features are split, so its blocks may depend on
    // the threads: as many per thread (5 blocks of a 2816-feature weight had left one of two
    // threads a third of the reads idle).
    std::array<Index, K> feature_block{}, feature_blocks{};
    std::array<Index, K + 1> first_block{};
    for (std::size_t i = 0; i < K; ++i) {
        const Index features = products[i].weight.rows;
        feature_block[i] = few_rows ? detail::few_rows_feature_block(features, team)
                                    : detail::linear_block(features, detail::kLinearBlockTarget,
                                                           detail::kLinearFeatureMultiple);
        feature_blocks[i] = (features + feature_block[i] - 1) / feature_block[i];
        first_block[i + 1] = first_block[i] + token_blocks * feature_blocks[i];
    }
    detail::parallel_for(first_block[K], team, detail::Schedule::equal_tasks, [&](Index block, int thread) {
        std::size_t i = 0;  // the product block `block` is of, and its block in it
        while (block >= first_block[i + 1]) ++i;
        const LinearProduct<T>& product = products[i];
        block -= first_block[i];
        const WeightView<T>& w = product.weight;
        const Index features = w.rows;
        const Index first_token = block / feature_blocks[i] * token_block;
        const Index first_feature = block % feature_blocks[i] * feature_block[i];
        const Index rows = std::min(token_block, tokens - first_token);
        const Index columns = std::min(feature_block[i], features - first_feature);
        MatrixRef<T> out = product.out;
        if (few_rows && w.format == WeightFormat::f32) {  // a decode step: read W once
            detail::few_rows_linear<T>(x, w.matrix(), out, first_feature, first_feature + columns);
        } else if (few_rows) {
            detail::stored_few_rows_linear<T>(x, w, out, first_feature, first_feature + columns);
        } else if (w.format == WeightFormat::f32 && !bf16) {
            out.block(first_token, first_feature, rows, columns).noalias() =
                x.middleRows(first_token, rows) * w.matrix().middleRows(first_feature, columns).transpose();
        } else {
            detail::linear_block_through_panels(x, w, out, first_token, rows, first_feature, columns, path,
                                                panels->template panel<T>(thread),
                                                bf16 ? panels->operands(thread) : nullptr);
        }
    });
}

/// y = x W^T for a weight stored as [out_features x in_features] (nn.Linear, no bias): linear_each
/// of one product. The caller owns `out`; it must not alias `x`.
///   x       [N x in]     (any row-major matrix or column block)
///   w       [out x in], in any format (a LinearWeight, a WeightMatrix, any row-major matrix)
///   out     [N x out]
template <typename T>
void linear(const ConstMatrixRef<T>& x, const WeightView<T>& w, MatrixRef<T> out, const ExecutionContext& context = {}) {
    linear_each<T>(x, {LinearProduct<T>{w, out}}, context);
}

/// Parameter count of a bias-free nn.Linear(in_features, out_features).
constexpr Index linear_parameter_count(Index in_features, Index out_features) {
    return in_features * out_features;
}

}  // namespace diffattn
