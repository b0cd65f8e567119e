// Matrix products on tiles that never touch the heap.
//
// Eigen's GEMM packs its operands into buffers that live on the stack up to
// EIGEN_STACK_ALLOCATION_LIMIT (128 KB) and on the heap beyond. Splitting a tile product along
// its depth and its output columns into chunks of kProductChunk<T> keeps every packed panel
// at <= 64 KB, so the kernels' hot loops allocate nothing whatever the head dim (checked by a
// test built with EIGEN_RUNTIME_NO_MALLOC). Tiles of the usual sizes take a single chunk.
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

/// Depth and column chunk of tile products: chunk^2 * sizeof(T) = 64 KB.
template <typename T>
inline constexpr Index kProductChunk = sizeof(T) >= 8 ? 64 : 128;

/// dst = lhs * rhs (Accumulate = false) or dst += lhs * rhs (Accumulate = true).
///   lhs [rows x depth], rhs [depth x cols], dst [rows x cols]; rows is at most a query tile.
template <bool Accumulate, typename Dst, typename Lhs, typename Rhs>
void tile_product(Dst&& dst, const Lhs& lhs, const Rhs& rhs) {
    using T = typename std::decay_t<Dst>::Scalar;
    constexpr Index chunk = kProductChunk<T>;
    const Index depth = lhs.cols(), cols = rhs.cols();
    if (depth <= chunk && cols <= chunk) {  // the common case: one Eigen product
        if constexpr (Accumulate) dst.noalias() += lhs * rhs;
        else dst.noalias() = lhs * rhs;
        return;
    }
    if constexpr (!Accumulate) dst.setZero();
    for (Index c = 0; c < cols; c += chunk) {
        const Index nc = std::min(chunk, cols - c);
        for (Index k = 0; k < depth; k += chunk) {
            const Index kc = std::min(chunk, depth - k);
            dst.middleCols(c, nc).noalias() += lhs.middleCols(k, kc) * rhs.block(k, c, kc, nc);
        }
    }
}

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
