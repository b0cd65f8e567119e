// Matrix products on tiles that never touch the heap.
//
// Eigen's GEMM packs its operands into buffers that live on the stack up to
// EIGEN_STACK_ALLOCATION_LIMIT (128 KB) and on the heap beyond. Splitting a tile product along
// its depth and its output columns into chunks of kProductChunk<T> keeps every packed panel
// at <= 64 KB, so the kernels' hot loops allocate nothing whatever the head dim (checked by a
// test built with EIGEN_RUNTIME_NO_MALLOC). Tiles of the usual sizes take a single chunk.
#pragma once

#include "diffattn/core/types.hpp"

#include <algorithm>

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

}  // namespace diffattn::detail
