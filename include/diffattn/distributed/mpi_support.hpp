// What the distributed component needs from MPI (docs/distributed.md): the MPI datatype of each
// scalar it sends, and one check that turns an MPI failure into a diffattn Error.
#pragma once

#include "diffattn/core/error.hpp"

#include <mpi.h>

#include <string>
#include <type_traits>

namespace diffattn::distributed {

/// The MPI datatype of float, double and long double (the kernels' scalars and their accumulators).
template <typename T>
MPI_Datatype mpi_type() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, long double>,
                  "mpi_type: float, double or long double");
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    if constexpr (std::is_same_v<T, long double>) return MPI_LONG_DOUBLE;
}

/// Throws Error naming `function` and the MPI call unless `code` is MPI_SUCCESS (communicators
/// whose error handler returns errors; the default handler aborts the job first).
inline void check_mpi(int code, const char* function, const char* call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw Error(detail::concat(function, ": ", call, " failed: ", std::string(text, static_cast<std::size_t>(length))));
}

/// This process's rank in `comm` and the communicator's size.
struct RankInfo {
    int rank = 0;
    int size = 1;
};
inline RankInfo rank_info(MPI_Comm comm, const char* function) {
    RankInfo info;
    check_mpi(MPI_Comm_rank(comm, &info.rank), function, "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm, &info.size), function, "MPI_Comm_size");
    return info;
}

}  // namespace diffattn::distributed
