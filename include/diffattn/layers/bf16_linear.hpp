// The projections of many rows with BF16 products (ExecutionContext::compute, docs/math.md §10.1):
// out = bf16(x) bf16(W)^T, each product of two BF16 values exact in fp32 and the products summed
// in fp32. W, in any storage format, is decoded a panel at a time (WeightPanels) and rounded; x is
// rounded (bf16_widened: then Eigen's float GEMM) or packed as BF16 rows (bf16_dot: vdpbf16ps on
// the panel's pair panels, kernels/bf16_dot.hpp) kOperandRows rows at a time, in the thread's
// operand room beside its panel. A bf16 weight is BF16 already; f32, q8_0 and q4_0 weights round.
#pragma once

#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/core/weight_panels.hpp"
#include "diffattn/kernels/bf16_dot.hpp"
#include "diffattn/kernels/product_path.hpp"
#include "diffattn/layers/stored_weight_dots.hpp"

#include <algorithm>

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

/// out.block(first_token, first_feature, rows, columns) = bf16(x rows) bf16(W rows)^T with fp32
/// sums, by `path` (bf16_widened or bf16_dot, a path this CPU runs), with the thread's `panel`
/// (WeightPanels::panel) and `operands` (WeightPanels::operands). Each panel of kRows features x
/// kDepth inputs is decoded once and multiplied by every chunk of the block's rows; the panels over
/// the inner dimension add into the output block in turn, as linear_block_through_panels's do.
inline void linear_block_bf16(const ConstMatrixRef<float>& x, const WeightView<float>& w, MatrixRef<float>& out,
                              Index first_token, Index rows, Index first_feature, Index columns, ProductPath path,
                              float* panel, float* operands) {
    const Index depth = w.cols;
    for (Index f = 0; f < columns; f += WeightPanels::kRows) {
        const Index features = std::min(WeightPanels::kRows, columns - f);
        for (Index k = 0; k < depth; k += WeightPanels::kDepth) {
            const Index count = std::min(WeightPanels::kDepth, depth - k);
            bf16_weight_panel(w, first_feature + f, features, k, count, panel);
#if defined(DIFFATTN_X86_TARGETS)
            if (path == ProductPath::bf16_dot) {
                // The operand room in halves: W^T's pair panels, then a chunk of x as BF16 rows.
                namespace dot = bf16_dot;
                const Index words = dot::words_of(count), ldb = dot::panel_columns(features);
                auto* weight_pairs = reinterpret_cast<dot::Word*>(operands);
                dot::Word* x_rows = weight_pairs + WeightPanels::kOperandRows * WeightPanels::kDepth / 2;
                dot::pack_keys(panel, features, count, count, weight_pairs, ldb);
                for (Index t = 0; t < rows; t += WeightPanels::kOperandRows) {
                    const Index n = std::min(WeightPanels::kOperandRows, rows - t);
                    dot::pack_rows(x.data() + (first_token + t) * x.outerStride() + k, n, count, x.outerStride(), x_rows, words);
                    float* into = &out(first_token + t, first_feature + f);
                    dot::multiply(x_rows, words, n, weight_pairs, ldb, features, words, into, out.outerStride(), 1.0f,
                                  k > 0);
                }
                continue;
            }
#endif
            const ConstRowMatrixMap<float> weights(panel, features, count);
            for (Index t = 0; t < rows; t += WeightPanels::kOperandRows) {
                const Index n = std::min(WeightPanels::kOperandRows, rows - t);
                RowMatrixMap<float> rounded(operands, n, count);
                rounded = x.block(first_token + t, k, n, count);
                round_operands_to_bf16(operands, n * count);
                auto into = out.block(first_token + t, first_feature + f, n, features);
                if (k == 0) {
                    into.noalias() = rounded * weights.transpose();
                } else {
                    into.noalias() += rounded * weights.transpose();
                }
            }
        }
    }
}

}  // namespace diffattn::detail
