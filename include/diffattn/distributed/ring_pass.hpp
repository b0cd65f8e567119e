// One pass of key / value blocks around the ranks (docs/distributed.md, "The ring").
//
// Every rank packs its slice's key and value rows (the pieces a pass needs: K1 and V, or K1, K2
// and V) into one contiguous block. Step s: each rank posts the receive of the block it needs
// next and the send of the block it holds (MPI_Irecv / MPI_Isend), works on the block it holds,
// then waits for both; the wait is the time the transfers did not hide behind the tile work.
//   - mask none: a ring. Rank r holds the block of rank (r - s) mod R at step s, R steps.
//   - causal: rank r needs only the blocks of ranks <= r (its own first), so blocks flow one way,
//     r -> r + 1, and stop at the last rank that works in the pass: rank r takes r + 1 steps.
// MPI makes progress on a large transfer only inside MPI calls, so the work calls progress()
// between query groups (MPI_Testall on the step's requests, MPI_Test on a background collective).
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/distributed/mpi_support.hpp"
#include "diffattn/distributed/sequence_slices.hpp"

#include <array>
#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace diffattn::distributed {

/// Where the time of a rank's passes went, for the benchmark (docs/distributed.md).
struct RingStats {
    double wait_seconds = 0;  ///< in MPI_Waitall at the end of steps (transfers not hidden)
    double bytes_sent = 0;    ///< block bytes this rank sent
    void reset() { *this = RingStats{}; }
};

/// One block as a step's work sees it: up to three pieces of the same rows, e.g. K1, K2, V.
template <typename T>
struct RingBlock {
    int origin = 0;   ///< the rank whose slice these rows are
    Index first = 0;  ///< the block's first row in the whole sequence
    Index rows = 0;
    std::array<ConstRowMatrixMap<T>, 3> pieces{ConstRowMatrixMap<T>(nullptr, 0, 0), ConstRowMatrixMap<T>(nullptr, 0, 0),
                                               ConstRowMatrixMap<T>(nullptr, 0, 0)};
    std::size_t count = 0;  ///< pieces in use
    const ConstRowMatrixMap<T>& piece(std::size_t i) const { return pieces[i]; }
    const ConstRowMatrixMap<T>& last_piece() const { return pieces[count - 1]; }
};

/// The two block buffers of a pass, reused across passes and calls (grown, never shrunk).
template <typename T>
struct RingBuffers {
    std::vector<T> current, next;
    /// A non-blocking collective in flight during the passes (DINT's prefix of column sums):
    /// their progress() calls drive it too, since Open MPI advances it only inside MPI calls on
    /// requests that are not yet complete.
    MPI_Request background = MPI_REQUEST_NULL;
};

/// Runs one pass. `local`: this rank's pieces (each [slice rows x width_i], any strides);
/// `causal`: blocks flow one way (see above); `last_rank`: with causal, blocks travel no further
/// than this rank, and ranks past it take no part; work(block, progress) is called on every block
/// this rank holds, its own first. Every rank of `comm` must call pass() with the same slices,
/// widths, causal and last_rank, in the same order as its other passes.
template <typename T, std::size_t Pieces, typename Work>
void ring_pass(MPI_Comm comm, const SequenceSlices& slices, const std::array<ConstMatrixRef<T>, Pieces>& local,
               bool causal, int last_rank, RingBuffers<T>& buffers, RingStats& stats, Work&& work) {
    static_assert(Pieces >= 1 && Pieces <= 3, "ring_pass: one to three pieces");
    constexpr const char* function = "ring_pass";
    const RankInfo me = rank_info(comm, function);
    const int ranks = me.size, rank = me.rank;
    if (causal && rank > last_rank) return;
    Index width = 0;
    for (const auto& piece : local) width += piece.cols();
    const auto block_count = [&](int origin) { return static_cast<std::size_t>(slices.rows(origin) * width); };
    const std::size_t capacity = static_cast<std::size_t>(slices.max_rows() * width);
    if (buffers.current.size() < capacity) buffers.current.resize(capacity);
    if (buffers.next.size() < capacity) buffers.next.resize(capacity);

    // This rank's block: the pieces one after another, each row-major and contiguous.
    {
        T* out = buffers.current.data();
        for (const auto& piece : local) {
            RowMatrixMap<T>(out, piece.rows(), piece.cols()) = piece;
            out += piece.size();
        }
    }
    const auto view = [&](const T* data, int origin) {
        RingBlock<T> block;
        block.origin = origin;
        block.first = slices.first(origin);
        block.rows = slices.rows(origin);
        block.count = Pieces;
        for (std::size_t i = 0; i < Pieces; ++i) {
            new (&block.pieces[i]) ConstRowMatrixMap<T>(data, block.rows, local[i].cols());
            data += block.rows * local[i].cols();
        }
        return block;
    };

    const int steps = causal ? rank + 1 : ranks;
    const int next_rank = (rank + 1) % ranks, previous_rank = (rank + ranks - 1) % ranks;
    for (int s = 0; s < steps; ++s) {
        const int origin = ((rank - s) % ranks + ranks) % ranks;
        // Causal: forward every block to the next rank if it takes part; ring: all but the last step.
        const bool send = causal ? rank + 1 <= last_rank : s + 1 < ranks;
        const bool receive = causal ? s + 1 < steps : s + 1 < ranks;
        const int incoming = ((origin - 1) % ranks + ranks) % ranks;
        std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        if (receive) {
            check_mpi(MPI_Irecv(buffers.next.data(), static_cast<int>(block_count(incoming)), mpi_type<T>(),
                                previous_rank, 0, comm, &requests[0]),
                      function, "MPI_Irecv");
        }
        if (send) {
            check_mpi(MPI_Isend(buffers.current.data(), static_cast<int>(block_count(origin)), mpi_type<T>(),
                                next_rank, 0, comm, &requests[1]),
                      function, "MPI_Isend");
            stats.bytes_sent += static_cast<double>(block_count(origin) * sizeof(T));
        }
        const auto progress = [&] {
            int done = 0;
            MPI_Testall(2, requests.data(), &done, MPI_STATUSES_IGNORE);
            if (buffers.background != MPI_REQUEST_NULL) MPI_Test(&buffers.background, &done, MPI_STATUS_IGNORE);
        };
        work(view(buffers.current.data(), origin), progress);
        const double start = MPI_Wtime();
        check_mpi(MPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE), function, "MPI_Waitall");
        stats.wait_seconds += MPI_Wtime() - start;
        std::swap(buffers.current, buffers.next);
    }
}

}  // namespace diffattn::distributed
