// The projections of many rows that go through panels of the weight (layers/linear.hpp): the
// weight's rows decoded (WeightPanels) a panel of kRows features x kDepth inputs at a time, each
// panel multiplied by the block's input rows and the panels over the inner dimension summed into
// the output block. Two kinds of call take them:
//   a weight stored in another format than f32 (docs/math.md §10), in the scalar T: decoded
//     exactly, then multiplied by the GEMM as the f32 path multiplies W;
//   BF16 products (ExecutionContext::compute, docs/math.md §10.1), float only, any format: the
//     panel rounded to BF16 (a bf16 weight is BF16 already), and the input rows, kOperandRows at a
//     time in the thread's operand room, rounded (bf16_widened: then Eigen's float GEMM) or packed
//     as BF16 rows with the panel as pair panels (bf16_dot: kernels/bf16_dot.hpp's vdpbf16ps;
//     bf16_amx: kernels/bf16_tiles.hpp's AMX tiles).
#pragma once

#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/core/weight_panels.hpp"
#include "diffattn/kernels/bf16_dot.hpp"
#include "diffattn/kernels/product_path.hpp"
#include "diffattn/layers/stored_weight_dots.hpp"

#include <algorithm>
#include <type_traits>

namespace diffattn::detail {

/// panel [rows x count] (`count` floats a row) <- W rows [first_row, first_row + rows) x columns
/// [first_col, first_col + count), rounded to BF16.
inline void bf16_weight_panel(const WeightView<float>& w, Index first_row, Index rows, Index first_col, Index count,
                              float* panel) {
    if (w.format == WeightFormat::f32) {
        RowMatrixMap<float>(panel, rows, count) = w.matrix().block(first_row, first_col, rows, count);
    } else {
        decode_stored_panel(w, first_row, rows, first_col, count, panel, count);
    }
    if (w.format != WeightFormat::bf16) round_operands_to_bf16(panel, rows * count);  // bf16: exact already
}

/// into [n x features] (+)= bf16(x [n x count]) weights^T for the rounded panel `weights`
/// [features x count], by `path`, in `operands` (kOperandRows x kDepth floats); `accumulate`
/// adds to into. bf16_dot and bf16_amx pack the panel into the operand room when `pack_weights`
/// (the first rows of a panel) and reuse it for the next rows.
inline void bf16_panel_product(const float* x, Index x_stride, Index n, Index count, const float* weights,
                               Index features, float* into, Index into_stride, ProductPath path, float* operands,
                               bool accumulate, bool pack_weights) {
#if defined(DIFFATTN_X86_TARGETS)
    if (uses_pair_packings(path)) {
        // The operand room in halves: the panel's pair panels (W^T), then the rows of x as BF16 rows.
        namespace dot = bf16_dot;
        const Index words = dot::words_of(count), ldb = dot::panel_columns(features);
        auto* weight_pairs = reinterpret_cast<dot::Word*>(operands);
        dot::Word* x_rows = weight_pairs + WeightPanels::kOperandRows * WeightPanels::kDepth / 2;
        if (pack_weights) dot::pack_keys(weights, features, count, count, weight_pairs, ldb);
        dot::pack_rows(x, n, count, x_stride, x_rows, words);
        multiply_pairs(path, x_rows, words, n, weight_pairs, ldb, features, words, into, into_stride, 1.0f, accumulate);
        return;
    }
#endif
    (void)pack_weights;
    RowMatrixMap<float> rounded(operands, n, count);
    rounded = Eigen::Map<const RowMatrix<float>, 0, Eigen::OuterStride<>>(x, n, count, Eigen::OuterStride<>(x_stride));
    round_operands_to_bf16(operands, n * count);
    Eigen::Map<RowMatrix<float>, 0, Eigen::OuterStride<>> out(into, n, features, Eigen::OuterStride<>(into_stride));
    const ConstRowMatrixMap<float> w(weights, features, count);
    if (accumulate) {
        out.noalias() += rounded * w.transpose();
    } else {
        out.noalias() = rounded * w.transpose();
    }
}

/// out.block(first_token, first_feature, rows, columns) = x rows x W rows^T through panels (the
/// file comment): `path` scalar for a stored weight (any T), bf16_widened, bf16_dot or bf16_amx for
/// BF16 products (float; a path this CPU runs); `panel` the thread's WeightPanels::panel, `operands`
/// its WeightPanels::operands (BF16 products only).
template <typename T>
void linear_block_through_panels(const ConstMatrixRef<T>& x, const WeightView<T>& w, MatrixRef<T>& out,
                                 Index first_token, Index rows, Index first_feature, Index columns, ProductPath path,
                                 T* panel, float* operands) {
    const Index depth = w.cols;
    for (Index f = 0; f < columns; f += WeightPanels::kRows) {
        const Index features = std::min(WeightPanels::kRows, columns - f);
        auto into = out.block(first_token, first_feature + f, rows, features);
        for (Index k = 0; k < depth; k += WeightPanels::kDepth) {
            const Index count = std::min(WeightPanels::kDepth, depth - k);
            if (path == ProductPath::scalar) {
                decode_stored_panel(w, first_feature + f, features, k, count, panel, count);
                const ConstRowMatrixMap<T> weights(panel, features, count);
                if (k == 0) {
                    into.noalias() = x.block(first_token, k, rows, count) * weights.transpose();
                } else {
                    into.noalias() += x.block(first_token, k, rows, count) * weights.transpose();
                }
                continue;
            }
            if constexpr (std::is_same_v<T, float>) {
                bf16_weight_panel(w, first_feature + f, features, k, count, panel);
                for (Index t = 0; t < rows; t += WeightPanels::kOperandRows) {
                    const Index n = std::min(WeightPanels::kOperandRows, rows - t);
                    bf16_panel_product(x.data() + (first_token + t) * x.outerStride() + k, x.outerStride(), n, count, panel, features,
                                       &into.coeffRef(t, 0), out.outerStride(), path, operands, k > 0, t == 0);
                }
            }
        }
    }
}

}  // namespace diffattn::detail
