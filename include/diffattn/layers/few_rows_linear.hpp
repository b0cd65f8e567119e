// y = x W^T for a few rows of x (a decode step: one token per sequence of a batch), reading W once.
//
// A decode step's projections multiply one or a few tokens by every weight matrix, so their floor is
// the time to read the weights from memory. Eigen serves one row with a matrix-vector product at
// that rate, but a product of 2-15 rows goes through its GEMM, which packs W afresh on every call
// and runs at a fraction of the bandwidth (docs/benchmarks.md, "Decode-time projections"). Here
// each W row is loaded once per group of up to four x rows and multiplied into one accumulator
// per (W row, x row) pair, in SIMD packets over the inner dimension; a block of W rows small
// enough for L2 serves every group of x rows before the next block is read, so W comes from
// memory once. Each output is one dot product whose order depends only on the inner dimension,
// so the result does not depend on how the features are split over threads.
#pragma once

#include "diffattn/core/types.hpp"

#include <Eigen/Core>

#include <algorithm>

namespace diffattn::detail {

/// Calls with fewer rows than this take few_rows_linear; larger ones Eigen's GEMM, whose packing of
/// W pays off once it serves many rows.
inline constexpr Index kFewRowsLinear = 16;

/// out[n, j] = x[n] . w[j] for the R weight rows from j and the N (<= 4) x rows, over the whole
/// inner dimension: R N packet accumulators, then one horizontal sum each plus the scalar tail.
template <int R, int N, typename T, typename X, typename W, typename Out>
void few_rows_dot_block(const X& x, const W& w, Out& out, Index j) {
    using Packet = typename Eigen::internal::packet_traits<T>::type;
    constexpr Index P = Eigen::internal::packet_traits<T>::size;
    constexpr Index kPrefetch = 512 / sizeof(T);  // W rows are streamed: ask for them 512 bytes ahead
    const Index depth = x.cols();
    const T* w_row[R];
    const T* x_row[N];
    for (int r = 0; r < R; ++r) w_row[r] = w.data() + (j + r) * w.outerStride();
    for (int n = 0; n < N; ++n) x_row[n] = x.data() + n * x.outerStride();
    Packet acc[R][N];
    for (int r = 0; r < R; ++r) {
        for (int n = 0; n < N; ++n) acc[r][n] = Eigen::internal::pset1<Packet>(T(0));
    }
    Index k = 0;
    for (; k + P <= depth; k += P) {
        Packet w_packet[R];
        for (int r = 0; r < R; ++r) {
            Eigen::internal::prefetch(w_row[r] + std::min(k + kPrefetch, depth - 1));
            w_packet[r] = Eigen::internal::ploadu<Packet>(w_row[r] + k);
        }
        for (int n = 0; n < N; ++n) {
            const Packet x_packet = Eigen::internal::ploadu<Packet>(x_row[n] + k);
            for (int r = 0; r < R; ++r) acc[r][n] = Eigen::internal::pmadd(w_packet[r], x_packet, acc[r][n]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int n = 0; n < N; ++n) {
            T sum = Eigen::internal::predux(acc[r][n]);
            for (Index tail = k; tail < depth; ++tail) sum += w_row[r][tail] * x_row[n][tail];
            out(n, j + r) = sum;
        }
    }
}

/// Weight rows [j_begin, j_end) against N (<= 4) x rows: R rows at a time, R as many as the
/// registers hold (R N accumulators, R weight packets and one x packet; 8 rows for one or two x
/// rows, so that as many weight rows stream from memory at once as in Eigen's matrix-vector
/// product; docs/benchmarks.md, "Decode-time projections"), then the odd rows.
template <int N, typename T, typename X, typename W, typename Out>
void few_rows_dot_rows(const X& x, const W& w, Out& out, Index j_begin, Index j_end) {
    constexpr int R = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32 ? (N <= 2 ? 8 : 4) : 2;
    Index j = j_begin;
    for (; j + R <= j_end; j += R) few_rows_dot_block<R, N, T>(x, w, out, j);
    for (; j < j_end; ++j) few_rows_dot_block<1, N, T>(x, w, out, j);
}

/// out [N x F] = x [N x K] w[F x K]^T for the features [f_begin, f_end), N < kFewRowsLinear.
template <typename T>
void few_rows_linear(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& w, MatrixRef<T>& out, Index f_begin,
                     Index f_end) {
    // W rows per block: about 128 KB, which stays in L2 while every group of x rows uses it; a
    // multiple of 8 rows, so that only a call's last block has rows left over for the odd-row path.
    const Index row_bytes = std::max<Index>(1, x.cols() * static_cast<Index>(sizeof(T)));
    const Index block = std::max<Index>(8, (Index(128) << 10) / row_bytes / 8 * 8);
    for (Index b = f_begin; b < f_end; b += block) {
        const Index b_end = std::min(f_end, b + block);
        for (Index n = 0; n < x.rows(); n += 4) {
            const auto rows = x.middleRows(n, std::min<Index>(4, x.rows() - n));
            auto into = out.middleRows(n, rows.rows());
            switch (rows.rows()) {
                case 1: few_rows_dot_rows<1, T>(rows, w, into, b, b_end); break;
                case 2: few_rows_dot_rows<2, T>(rows, w, into, b, b_end); break;
                case 3: few_rows_dot_rows<3, T>(rows, w, into, b, b_end); break;
                default: few_rows_dot_rows<4, T>(rows, w, into, b, b_end); break;
            }
        }
    }
}

}  // namespace diffattn::detail
