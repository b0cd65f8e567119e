// y = x W^T for a few rows of x (a decode step: one token per sequence of a batch), reading W once.
//
// A decode step's projections multiply one or a few tokens by every weight matrix, so their floor is
// the time to read the weights from memory. Eigen serves one row with a matrix-vector product at
// that rate, but a product of 2-15 rows goes through its GEMM, which packs W afresh on every call
// and runs at a fraction of the bandwidth (docs/benchmarks.md, "Decode-time projections"). Here
// each W row is loaded once per group of x rows and multiplied into one accumulator per (W row,
// x row) pair, in SIMD packets over the inner dimension; a block of W rows small enough for L2
// serves every group of x rows before the next block is read, so W comes from memory once. Each
// output is one dot product whose order depends only on the inner dimension, so the result does
// not depend on how the features are split over threads or how many x rows share the call.
#pragma once

#include "diffattn/core/prefetch.hpp"
#include "diffattn/core/types.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <type_traits>

namespace diffattn::detail {

/// Calls with fewer rows than this take few_rows_linear; larger ones Eigen's GEMM, whose packing of
/// W pays off once it serves many rows.
inline constexpr Index kFewRowsLinear = 16;

/// Whether the target has 32 vector registers (AVX-512, NEON): enough for 8 W rows against one or
/// two x rows, and for a wide group of 5-8 x rows (3 W rows x 8 accumulators, 3 W packets and the
/// x packet); with 16, x rows go four at a time against 2 W rows.
inline constexpr bool kFewRowsWideGroups = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32;

/// Keeps a loaded packet in a register. GCC otherwise folds the load into every multiply-add that
/// uses it, which with 8 x rows makes the loads, not the multiply-adds, the limit
/// (docs/benchmarks.md, "Decode-time projections").
template <typename Packet>
EIGEN_ALWAYS_INLINE void keep_in_register(Packet& packet) {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__)
    if constexpr (!std::is_arithmetic_v<Packet>) __asm__("" : "+v"(packet));
#else
    (void)packet;
#endif
}

/// acc[r][n] += the packets of w row r times x row n over [k_begin, k_end), whole packets, asking
/// for the line at ahead(r, k) at each packet of W row r: W's data to come (the same row further on,
/// or the next block's rows), so that memory streams while the packets multiply.
template <int R, int N, typename Packet, typename T, typename Ahead>
EIGEN_ALWAYS_INLINE void accumulate_dots(const T* const (&x_row)[N], const T* const (&w_row)[R], Index k_begin,
                                         Index k_end, const Ahead& ahead, Packet (&acc)[R][N]) {
    constexpr Index P = Eigen::internal::unpacket_traits<Packet>::size;
    for (Index k = k_begin; k < k_end; k += P) {
        Packet w_packet[R];
        for (int r = 0; r < R; ++r) {
            prefetch_into_l2(ahead(r, k));
            w_packet[r] = Eigen::internal::ploadu<Packet>(w_row[r] + k);
        }
        for (int n = 0; n < N; ++n) {
            Packet x_packet = Eigen::internal::ploadu<Packet>(x_row[n] + k);
            if constexpr (R * N > 16) keep_in_register(x_packet);
            for (int r = 0; r < R; ++r) acc[r][n] = Eigen::internal::pmadd(w_packet[r], x_packet, acc[r][n]);
        }
    }
}

/// How far ahead of the packet it multiplies the one-row loop asks for weights, in bytes of memory
/// (which for rows one after the other is the rows to come, and past a matrix's last row the memory
/// that follows it: in a weight pool the next matrix). 8 KB read the bench model's matrices faster
/// than 4, 12 or 16 (docs/benchmarks.md, "Short rows asked for 8 KB ahead").
inline constexpr Index kOneRowPrefetchBytes = 8192;

/// out(0, j) = W row j . x for j in [j_begin, j_end), one x row (depth entries) against short W
/// rows (kShortRowBytes): each W row on its own, in the order it lies in memory, its dot product,
/// its sum across lanes and its store, then the next row; each packet asks for the line
/// kOneRowPrefetchBytes further on. Read as accumulate_dots reads them, R short rows make R streams
/// of a few lines each: the hardware prefetcher follows one forward stream, while the prefetches
/// that short streams need are bound by the L1 miss buffers they share with the loads
/// (docs/benchmarks.md, "Decode-time projections"). Each sum takes the same packets in the same
/// order as accumulate_dots's, so the bits are the same.
template <typename T, typename W, typename Out>
void one_row_dots_row_by_row(const T* x, const W& w, Out& out, Index j_begin, Index j_end, Index depth) {
    using Packet = typename Eigen::internal::packet_traits<T>::type;
    constexpr Index P = Eigen::internal::packet_traits<T>::size;
    const Index full = depth / P * P;
    for (Index j = j_begin; j < j_end; ++j) {
        const T* const row = w.data() + j * w.outerStride();
        Packet acc = Eigen::internal::pset1<Packet>(T(0));
        for (Index k = 0; k < full; k += P) {
            prefetch_into_l2(reinterpret_cast<const char*>(row + k) + kOneRowPrefetchBytes);
            const Packet w_packet = Eigen::internal::ploadu<Packet>(row + k);
            acc = Eigen::internal::pmadd(w_packet, Eigen::internal::ploadu<Packet>(x + k), acc);
        }
        T sum = Eigen::internal::predux(acc);
        for (Index k = full; k < depth; ++k) sum += row[k] * x[k];
        out(0, j) = sum;
    }
}

/// Rows of W at most this long are read row by row for one x row (one_row_dots_row_by_row);
/// longer ones give each of accumulate_dots's streams enough lines for the prefetchers. 3 KB
/// covers the bench model's down projection (depth 683); at 4 KB the two orders are even
/// (docs/benchmarks.md, "Short rows up to 3 KB").
inline constexpr Index kShortRowBytes = 3072;

/// out[n, j + r] = the sum of acc[r][n]'s lanes plus the scalar tail [k_tail, depth).
template <int R, int N, typename Packet, typename T, typename Out>
void store_dots(const T* const (&x_row)[N], const T* const (&w_row)[R], Index k_tail, Index depth,
                const Packet (&acc)[R][N], Out& out, Index j) {
    for (int r = 0; r < R; ++r) {
        for (int n = 0; n < N; ++n) {
            T sum = Eigen::internal::predux(acc[r][n]);
            for (Index k = k_tail; k < depth; ++k) sum += w_row[r][k] * x_row[n][k];
            out(n, j + r) = sum;
        }
    }
}

/// row[i] = the start of row (first + i) of the row-major m.
template <int N, typename T, typename M>
void row_pointers(const M& m, Index first, const T* (&row)[N]) {
    for (int i = 0; i < N; ++i) row[i] = m.data() + (first + i) * m.outerStride();
}

/// Weight rows [j_begin, j_end) against N (<= 4) x rows over the whole inner dimension: R rows at a
/// time, R as many as the registers hold (R N accumulators, R weight packets and one x packet; 8
/// rows for one or two x rows, so that as many weight rows stream from memory at once as in
/// Eigen's matrix-vector product), then the odd rows. Each packet of a group asks for the packet at
/// the same place in the next group's rows: a whole group ahead, where asking 512 bytes on in the
/// same row left the first 512 bytes of every group unasked (a weight row is 1-3 KB in the bench
/// model; docs/benchmarks.md, "The next group's weight rows"). One x row against W rows of at most
/// kShortRowBytes takes each W row on its own instead (one_row_dots_row_by_row).
template <int N, typename T, typename X, typename W, typename Out>
void few_rows_dot_rows(const X& x, const W& w, Out& out, Index j_begin, Index j_end) {
    using Packet = typename Eigen::internal::packet_traits<T>::type;
    constexpr Index P = Eigen::internal::packet_traits<T>::size;
    constexpr int R = kFewRowsWideGroups ? (N <= 2 ? 8 : 4) : 2;
    const Index depth = x.cols(), full = depth / P * P;
    const T* x_row[N];
    row_pointers(x, 0, x_row);
    if constexpr (N == 1) {
        if (depth * static_cast<Index>(sizeof(T)) <= kShortRowBytes) {
            return one_row_dots_row_by_row<T>(x_row[0], w, out, j_begin, j_end, depth);
        }
    }
    const auto run = [&](auto rows, Index j) {
        constexpr int kRows = decltype(rows)::value;
        const T* w_row[kRows];
        row_pointers(w, j, w_row);
        Packet acc[kRows][N];
        for (auto& row : acc) std::fill(row, row + N, Eigen::internal::pset1<Packet>(T(0)));
        // The next group's row r, or (the last group) row r itself, already on its way.
        const Index next_group = (j + 2 * kRows <= j_end ? kRows : 0) * w.outerStride();
        const auto ahead = [&](int r, Index k) { return w_row[r] + next_group + k; };
        accumulate_dots(x_row, w_row, 0, full, ahead, acc);
        store_dots(x_row, w_row, full, depth, acc, out, j);
    };
    Index j = j_begin;
    for (; j + R <= j_end; j += R) run(std::integral_constant<int, R>{}, j);
    for (; j < j_end; ++j) run(std::integral_constant<int, 1>{}, j);
}

/// W rows per block of the wide groups: their parked accumulators take 48 x 8 packets (24 KB with
/// AVX-512), on the stack; a multiple of the 3 and 4 rows a step takes.
inline constexpr Index kWideGroupBlock = 48;

/// Whether more than two of `rows` rows `stride_bytes` apart start at the same offset modulo 4 KB,
/// in the same 64-byte line: an L1 cache's set is given by those bits (4 KB per way), so such rows
/// and the weight rows streaming past compete for the ways of one set.
inline bool rows_crowd_cache_sets(Index rows, Index stride_bytes) {
    int in_line[64] = {};
    for (Index n = 0; n < rows; ++n) {
        if (++in_line[n * stride_bytes % 4096 / 64] > 2) return true;
    }
    return false;
}

/// Weight rows [j_begin, j_end) (at most kWideGroupBlock) against N (5-8) x rows, in chunks of the
/// inner dimension: each chunk of x (2 KB a row) stays in L1 while every weight row of the block
/// multiplies it, R rows at a time, their accumulators parked between chunks. Parking stores the
/// packets unchanged, so each output is the same dot product as over the whole inner dimension.
/// Each chunk asks for the next chunk of its rows, the last for the first chunk of the rows
/// kWideGroupBlock further on (the next block), if below `prefetch_end`. Where x's rows crowd L1's
/// sets (a row of 1024 floats is 4 KB: every row's chunk in one set), each chunk is first copied
/// into consecutive rows on the stack; the products and their order do not change
/// (docs/benchmarks.md, "Batched decoding").
template <int N, typename T, typename X, typename W, typename Out>
void few_rows_dot_chunks(const X& x, const W& w, Out& out, Index j_begin, Index j_end, Index prefetch_end) {
    using Packet = typename Eigen::internal::packet_traits<T>::type;
    constexpr Index P = Eigen::internal::packet_traits<T>::size;
    constexpr Index kChunk = std::max<Index>(P, Index(2048) / Index(sizeof(T)) / P * P);
    constexpr int R = N <= 5 ? 4 : 3;
    const Index depth = x.cols(), full = depth / P * P;
    eigen_assert(j_end - j_begin <= kWideGroupBlock);
    const T* x_row[N];
    row_pointers(x, 0, x_row);
    const bool copy_x = rows_crowd_cache_sets(N, x.outerStride() * static_cast<Index>(sizeof(T)));
    alignas(64) T x_copy[N][kChunk];
    Packet parked[kWideGroupBlock][N];  // filled by the first chunk
    const auto run = [&](auto rows, Index j, Index k_begin, Index k_end) {
        constexpr int kRows = decltype(rows)::value;
        const T* w_row[kRows];
        row_pointers(w, j, w_row);
        Packet acc[kRows][N];
        for (int r = 0; r < kRows; ++r) {
            if (k_begin == 0) {
                std::fill(acc[r], acc[r] + N, Eigen::internal::pset1<Packet>(T(0)));
            } else {
                std::copy(parked[j - j_begin + r], parked[j - j_begin + r] + N, acc[r]);
            }
        }
        const T* next_block_row[kRows];  // the row kWideGroupBlock further on, or the row itself
        for (int r = 0; r < kRows; ++r) {
            const Index next = j + r + kWideGroupBlock;
            next_block_row[r] = next < prefetch_end ? w.data() + next * w.outerStride() : w_row[r];
        }
        const bool last_chunk = k_end == full;
        const T* w_chunk[kRows];
        for (int r = 0; r < kRows; ++r) w_chunk[r] = w_row[r] + k_begin;
        const T* x_chunk[N];  // the chunk's x rows, from k_begin: x's own, or their copy
        for (int n = 0; n < N; ++n) x_chunk[n] = copy_x ? x_copy[n] : x_row[n] + k_begin;
        accumulate_dots(x_chunk, w_chunk, 0, k_end - k_begin,
                        [&](int r, Index i) {
                            return last_chunk ? next_block_row[r] + i  // its first chunk
                                              : w_row[r] + std::min(k_begin + i + kChunk, depth - 1);  // the next
                        },
                        acc);
        if (last_chunk) {
            store_dots(x_row, w_row, full, depth, acc, out, j);
        } else {
            for (int r = 0; r < kRows; ++r) std::copy(acc[r], acc[r] + N, parked[j - j_begin + r]);
        }
    };
    for (Index k = 0; k < std::max<Index>(full, 1); k += kChunk) {
        const Index k_end = std::min(full, k + kChunk);
        for (int n = 0; copy_x && n < N; ++n) std::copy(x_row[n] + k, x_row[n] + k_end, x_copy[n]);
        Index j = j_begin;
        for (; j + R <= j_end; j += R) run(std::integral_constant<int, R>{}, j, k, k_end);
        for (; j < j_end; ++j) run(std::integral_constant<int, 1>{}, j, k, k_end);
    }
}

/// out [N x F] = x [N x K] w[F x K]^T for the features [f_begin, f_end), N < kFewRowsLinear.
template <typename T>
void few_rows_linear(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& w, MatrixRef<T>& out, Index f_begin,
                     Index f_end) {
    // W rows per block: about 128 KB, which stays in L2 while every group of x rows uses it; a
    // multiple of 8 rows, so that only a call's last block has rows left over for the odd-row path.
    // A call of at most 8 x rows reads each block once, so only the wide groups' limit applies.
    // One x row takes its features as one block: blocks of 48 rows left the last group of each
    // asking for its own rows, not the next block's (docs/benchmarks.md, "One token, the features
    // as one block").
    const Index row_bytes = std::max<Index>(1, x.cols() * static_cast<Index>(sizeof(T)));
    const Index shared_block = kFewRowsWideGroups && x.rows() <= 8
                                   ? kWideGroupBlock
                                   : std::max<Index>(8, (Index(128) << 10) / row_bytes / 8 * 8);
    const Index block = x.rows() == 1 ? f_end - f_begin : shared_block;
    const Index group = kFewRowsWideGroups ? 8 : 4;
    for (Index b = f_begin; b < f_end; b += block) {
        const Index b_end = std::min(f_end, b + block);
        for (Index n = 0; n < x.rows(); n += group) {
            const auto rows = x.middleRows(n, std::min<Index>(group, x.rows() - n));
            auto into = out.middleRows(n, rows.rows());
            const auto wide = [&](auto kRows) {
                if constexpr (kFewRowsWideGroups) {
                    for (Index j = b; j < b_end; j += kWideGroupBlock) {
                        few_rows_dot_chunks<decltype(kRows)::value, T>(rows, w, into, j,
                                                                       std::min(b_end, j + kWideGroupBlock), f_end);
                    }
                }
            };
            switch (rows.rows()) {
                case 1: few_rows_dot_rows<1, T>(rows, w, into, b, b_end); break;
                case 2: few_rows_dot_rows<2, T>(rows, w, into, b, b_end); break;
                case 3: few_rows_dot_rows<3, T>(rows, w, into, b, b_end); break;
                case 4: few_rows_dot_rows<4, T>(rows, w, into, b, b_end); break;
                case 5: wide(std::integral_constant<int, 5>{}); break;
                case 6: wide(std::integral_constant<int, 6>{}); break;
                case 7: wide(std::integral_constant<int, 7>{}); break;
                default: wide(std::integral_constant<int, 8>{}); break;
            }
        }
    }
}

}  // namespace diffattn::detail
