// The one check that every rank of a sequence-parallel call was given compatible arguments
// (docs/distributed.md). Each rank first runs the single-process checks on its own slice; then
// one MPI_Allgather shares what each rank holds, so every rank reaches the same verdict and
// throws the same exception: no rank is left waiting in a transfer that will never come.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/distributed/mpi_support.hpp"
#include "diffattn/distributed/sequence_slices.hpp"

#include <array>
#include <exception>
#include <vector>

namespace diffattn::distributed {

/// What one rank holds for a call: its slice's rows of Q, K and V, their widths, and the call's
/// scalars, which must agree across ranks.
struct SliceCall {
    Index q_rows = 0, k_rows = 0, v_rows = 0;
    Index head_dim = 0, value_dim = 0;
    double lambda = 0, scale = 0, mask = 0, integral = 0, first_row = -1;  ///< first_row -1: any
    bool ok = true;  ///< false: this rank's own checks failed

    static constexpr std::size_t kFields = 11;
    std::array<double, kFields> pack() const {
        return {double(q_rows), double(k_rows), double(v_rows), double(head_dim), double(value_dim), lambda, scale,
                mask, integral, first_row, ok ? 1.0 : 0.0};
    }
    static SliceCall unpack(const double* f) {
        SliceCall c;
        c.q_rows = Index(f[0]), c.k_rows = Index(f[1]), c.v_rows = Index(f[2]), c.head_dim = Index(f[3]);
        c.value_dim = Index(f[4]), c.lambda = f[5], c.scale = f[6], c.mask = f[7], c.integral = f[8];
        c.first_row = f[9], c.ok = f[10] != 0;
        return c;
    }
};

/// Runs check() on every rank of comm and shares the verdict: if it threw anywhere, every rank
/// throws, this rank its own exception, the others an Error naming the first rank that failed.
template <typename Check>
void require_on_every_rank(MPI_Comm comm, const char* function, Check&& check) {
    std::exception_ptr failure;
    try {
        check();
    } catch (...) {
        failure = std::current_exception();
    }
    const RankInfo me = rank_info(comm, function);
    int first_failed = failure ? me.rank : me.size;
    int any = me.size;
    check_mpi(MPI_Allreduce(&first_failed, &any, 1, MPI_INT, MPI_MIN, comm), function, "MPI_Allreduce");
    if (failure) std::rethrow_exception(failure);
    require<Error>(any == me.size, function, ": rank ", any, " of ", me.size, " rejected its arguments (see its message)");
}

/// Runs local_checks() (the single-process checks of this rank's arguments, which fill `mine`),
/// shares the result with every rank and returns the slices of the sequence. Throws, on every
/// rank: this rank's own exception; Error naming a rank whose own checks failed; ShapeError if a
/// rank's Q, K, V hold different rows or the widths differ across ranks; OptionError if lambda,
/// scale, mask or integral differ, or a rank's slice does not start at the row it expects.
template <typename LocalChecks>
SequenceSlices agree_on_call(MPI_Comm comm, const char* function, SliceCall mine, LocalChecks&& local_checks) {
    std::exception_ptr failure;
    try {
        local_checks(mine);
    } catch (...) {
        failure = std::current_exception();
        mine.ok = false;
    }
    const RankInfo me = rank_info(comm, function);
    const auto packed = mine.pack();
    std::vector<double> all(SliceCall::kFields * static_cast<std::size_t>(me.size));
    check_mpi(MPI_Allgather(packed.data(), int(SliceCall::kFields), MPI_DOUBLE, all.data(), int(SliceCall::kFields),
                            MPI_DOUBLE, comm),
              function, "MPI_Allgather");
    if (failure) std::rethrow_exception(failure);
    std::vector<SliceCall> calls;
    for (int r = 0; r < me.size; ++r) calls.push_back(SliceCall::unpack(all.data() + SliceCall::kFields * r));
    for (int r = 0; r < me.size; ++r) {
        require<Error>(calls[r].ok, function, ": rank ", r, " of ", me.size, " rejected its arguments (see its message)");
    }
    SequenceSlices slices;
    slices.begin.push_back(0);
    const SliceCall& first = calls[0];
    for (int r = 0; r < me.size; ++r) {
        const SliceCall& c = calls[r];
        require<ShapeError>(c.k_rows == c.q_rows && c.v_rows == c.q_rows, function, ": rank ", r, " holds ",
                            c.q_rows, " query rows but ", c.k_rows, " key rows and ", c.v_rows,
                            " value rows (each rank needs the same rows of Q, K and V: its slice of one sequence)");
        require<ShapeError>(c.head_dim == first.head_dim && c.value_dim == first.value_dim, function, ": rank ", r,
                            " has head dim ", c.head_dim, " and value dim ", c.value_dim, " but rank 0 has ",
                            first.head_dim, " and ", first.value_dim);
        require<OptionError>(c.lambda == first.lambda && c.scale == first.scale && c.mask == first.mask &&
                                 c.integral == first.integral,
                             function, ": rank ", r, " was called with lambda ", c.lambda, ", scale ", c.scale,
                             ", mask ", c.mask, ", integral ", c.integral, " but rank 0 with ", first.lambda, ", ",
                             first.scale, ", ", first.mask, ", ", first.integral, " (they must agree)");
        require<OptionError>(c.first_row < 0 || Index(c.first_row) == slices.begin.back(), function, ": rank ", r,
                             " expects its slice to start at row ", Index(c.first_row), " but the ranks before it hold ",
                             slices.begin.back(), " rows");
        slices.begin.push_back(slices.begin.back() + c.q_rows);
    }
    return slices;
}

}  // namespace diffattn::distributed
