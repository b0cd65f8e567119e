// The Catch2 main of the tests run under mpirun: MPI around the session. Every rank runs every
// test case in the same order (the calls under test are collective), so the tests use CHECK,
// never REQUIRE, around collective calls: one rank's failed assertion must not skip a call the
// other ranks make.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <mpi.h>

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    const int failed = Catch::Session().run(argc, argv);
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any_failed != 0 ? 1 : 0;
}
