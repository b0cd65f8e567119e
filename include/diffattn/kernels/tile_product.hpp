// Matrix products on tiles that never touch the heap.
//
// Query groups of many rows run their tile products on operands packed once for Eigen's GEMM
// kernel (PackedProduct below). Groups of few rows (a decode step: one token or a small chunk)
// multiply as loops over the keys of a tile (few_rows_products.hpp): each key or value row is read
// once for all the query rows, with no product set-up per tile, and nothing is allocated whatever
// the head dim.
#pragma once

#include "diffattn/core/types.hpp"

#include <Eigen/Core>

#include <algorithm>

// PackedProduct below calls Eigen's internal GEMM building blocks, whose signatures are those of
// Eigen 3.4 (Debian 12's libeigen3-dev 3.4.0): refuse other versions clearly rather than fail
// deep inside Eigen.
#if !(EIGEN_WORLD_VERSION == 3 && EIGEN_MAJOR_VERSION == 4)
#error "diffattn needs Eigen 3.4 (kernels/tile_product.hpp uses Eigen 3.4's internal gebp_kernel)"
#endif

namespace diffattn::detail {

// ---------------------------------------------------------------------------------------------
// Packed tile products: Eigen 3.4's GEMM building blocks, called directly.
//
// An ordinary Eigen product repacks both operands on every call. The tiled core multiplies the
// same query block by every key tile and the same key / value tile by several query blocks, so
// it packs each operand once into its own scratch (PackedTiles) and runs Eigen's inner kernel
// (internal::gebp_kernel, the code that does the flops of every Eigen GEMM) on the packed
// panels. This is the split Eigen's own general_matrix_matrix_product makes (GeneralMatrixMatrix.h:
// gemm_pack_lhs, gemm_pack_rhs, gebp_kernel with gebp_traits' mr / nr); only the reuse differs.
// The packed buffers come from the workspace, so these products never allocate.
//
// gebp computes a column-major C += alpha A B. A row-major [rows x cols] tile is a column-major
// [cols x rows] one with the same stride, so for row-major tiles the core computes
//   logits^T = K_tile Q_block^T   (A = key rows: row-major storage; B = Q_block^T),
//   acc^T   += V_tile^T P^T       (A = V_tile^T: column-major storage; B = P^T).
// Both B operands are row-major blocks read as column-major transposes (pack_rows_as_rhs).
template <typename T>
struct PackedProduct {
    using Traits = Eigen::internal::gebp_traits<T, T>;
    using RowMapper = Eigen::internal::const_blas_data_mapper<T, Index, Eigen::RowMajor>;
    using ColMapper = Eigen::internal::const_blas_data_mapper<T, Index, Eigen::ColMajor>;
    using ResMapper = Eigen::internal::blas_data_mapper<T, Index, Eigen::ColMajor>;
    template <int Order>
    using PackLhs = Eigen::internal::gemm_pack_lhs<T, Index,
                                                   Eigen::internal::const_blas_data_mapper<T, Index, Order>,
                                                   Traits::mr, Traits::LhsProgress,
                                                   typename Traits::LhsPacket4Packing, Order>;
    using PackRhs = Eigen::internal::gemm_pack_rhs<T, Index, ColMapper, Traits::nr, Eigen::ColMajor>;
    using Kernel = Eigen::internal::gebp_kernel<T, T, Index, ResMapper, Traits::mr, Traits::nr, false, false>;

    /// Columns per rhs panel. A block of rows starting at a multiple of nr starts a fresh panel,
    /// so the packed rhs of rows [r, r + n) of a packing is the packing's data from r * depth.
    static constexpr Index rhs_panel = Traits::nr;

    /// packed <- the rows [rows x depth] of a row-major block as gebp's A (the key tile of logits^T).
    template <typename Rows>
    static void pack_rows_as_lhs(T* packed, const Rows& rows) {
        if (rows.size() == 0) return;  // nothing to pack (head dim 0: a null data pointer Eigen may not map)
        PackLhs<Eigen::RowMajor>()(packed, RowMapper(rows.data(), rows.outerStride()), rows.cols(), rows.rows());
    }
    /// packed <- the transpose [cols x rows] of a row-major block as gebp's A (V_tile^T, depth = rows).
    template <typename Rows>
    static void pack_transpose_as_lhs(T* packed, const Rows& rows) {
        if (rows.size() == 0) return;  // nothing to pack (head dim 0: a null data pointer Eigen may not map)
        PackLhs<Eigen::ColMajor>()(packed, ColMapper(rows.data(), rows.outerStride()), rows.rows(), rows.cols());
    }
    /// packed <- the transpose [cols x rows] of a row-major block as gebp's B (Q_block^T, P^T).
    template <typename Rows>
    static void pack_rows_as_rhs(T* packed, const Rows& rows) {
        if (rows.size() == 0) return;  // nothing to pack (head dim 0: a null data pointer Eigen may not map)
        PackRhs()(packed, ColMapper(rows.data(), rows.outerStride()), rows.cols(), rows.rows());
    }

    /// dst [n x m] (row-major) += alpha * (A B)^T, A packed [m x depth] (its first `depth` of
    /// `lhs_depth` packed columns: a packed lhs's prefix is a valid operand), B packed [depth x n].
    template <typename Dst>
    static void multiply_transposed(Dst&& dst, const T* packed_lhs, Index lhs_depth, const T* packed_rhs,
                                    Index depth, T alpha) {
        // An empty product adds nothing; gebp itself would divide by depth (its L1 blocking:
        // SIGFPE for head dim 0, found by fuzz_kernels).
        if (depth == 0 || dst.rows() == 0 || dst.cols() == 0) return;
        Kernel()(ResMapper(dst.data(), dst.outerStride()), packed_lhs, packed_rhs, dst.cols(), depth, dst.rows(),
                 alpha, lhs_depth, depth);
    }
};

}  // namespace diffattn::detail
