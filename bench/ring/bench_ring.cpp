// bench_ring: sequence-parallel attention (include/diffattn/distributed/) on 1 vs R ranks.
//
//   mpirun -np 2 bench_ring [--n 8192,16384] [--kernels diff,dint_causal_mean,dint_causal_softmax]
//                           [--d 64] [--dv 128] [--repeats 2]
//
// For each kernel and N, in one run: rank 0 times the single-process kernel on the whole sequence
// (one thread; the other ranks sleep meanwhile), then every rank runs its slice through
// RingAttention (one thread each). Prints per case the single-process time, the ring time (the
// slowest rank), the speed-up, the same in thread CPU seconds (the slowest rank's; what the
// speed-up would be with a core per rank when other programs share the machine), and the share
// of the ring time each rank spent waiting on transfers (RingStats::wait_seconds). Best of --repeats. bench/ring/run.sh runs it; docs/distributed.md
// reads its numbers.
#include "diffattn/distributed/ring_attention.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace diffattn;
using distributed::RingAttention;

std::vector<std::string> split_list(const std::string& text) {
    std::vector<std::string> items;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) items.push_back(item);
    return items;
}

/// Waits at a barrier without spinning a core (Open MPI's blocking calls poll).
void quiet_barrier() {
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    for (int done = 0; !done;) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

/// CPU seconds of the calling thread: unlike wall time, not stretched when other programs share
/// the cores (Open MPI's waits spin, so a rank's waits count as CPU time too: conservative).
double thread_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

RowMatrix<float> random_matrix(std::mt19937& rng, Index rows, Index cols) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    RowMatrix<float> m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = uniform(rng);
    return m;
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    std::vector<std::string> sizes{"8192", "16384"}, kernels{"diff", "dint_causal_mean", "dint_causal_softmax"};
    Index d = 64, dv = 128;
    int repeats = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--n") sizes = split_list(value);
        else if (flag == "--kernels") kernels = split_list(value);
        else if (flag == "--d") d = std::stol(value);
        else if (flag == "--dv") dv = std::stol(value);
        else if (flag == "--repeats") repeats = std::stoi(value);
    }
    if (rank == 0) {
        std::printf("ranks %d, head dim %ld, value dim %ld, causal, float, 1 thread per rank, best of %d\n", ranks,
                    static_cast<long>(d), static_cast<long>(dv), repeats);
        std::printf("%-20s %7s %9s %9s %8s %9s %9s %8s  %s\n", "kernel", "N", "single s", "ring s", "speedup",
                    "single cpu", "ring cpu", "cpu x", "wait share per rank, cpu s per rank");
    }
    const float lambda = 0.3f;
    for (const std::string& kernel : kernels) {
        for (const std::string& size : sizes) {
            const Index n = std::stol(size);
            std::mt19937 rng(7);
            const RowMatrix<float> q1 = random_matrix(rng, n, d), k1 = random_matrix(rng, n, d);
            const RowMatrix<float> q2 = random_matrix(rng, n, d), k2 = random_matrix(rng, n, d);
            const RowMatrix<float> v = random_matrix(rng, n, dv);
            const bool dint = kernel != "diff";
            const DintIntegral integral =
                kernel == "dint_causal_mean" ? DintIntegral::causal_mean : DintIntegral::causal_softmax;
            AttentionOptions options;  // causal, one thread

            const distributed::SequenceSlices slices = distributed::balanced_slices(
                n, ranks, true, dint ? distributed::dint_rank_costs(integral, ranks) : std::vector<double>{});
            const Index first = slices.first(rank), rows = slices.rows(rank);
            const auto slice = [&](const RowMatrix<float>& m) { return ConstMatrixRef<float>(m.middleRows(first, rows)); };
            RingAttention<float> ring(MPI_COMM_WORLD, first);
            RowMatrix<float> out(rows, dv), single_out(rank == 0 ? n : 0, dv);
            AttentionWorkspace<float> single_ws;
            double single = 1e300, single_cpu = 1e300, best = 1e300, best_wait = 0, best_cpu = 1e300, best_own_cpu = 0;
            // Single process and ring alternate, so that a burst of other load on the machine
            // slows one repeat of each rather than every repeat of one.
            for (int r = 0; r < repeats; ++r) {
                if (rank == 0) {
                    const auto start = std::chrono::steady_clock::now();
                    const double cpu_start = thread_cpu_seconds();
                    if (dint) {
                        dint_attention(q1, k1, q2, k2, v, lambda, integral, single_out, options, nullptr, &single_ws);
                    } else {
                        diff_attention(q1, k1, q2, k2, v, lambda, single_out, options, &single_ws);
                    }
                    single = std::min(single, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
                    single_cpu = std::min(single_cpu, thread_cpu_seconds() - cpu_start);
                }
                quiet_barrier();

                ring.reset_stats();
                MPI_Barrier(MPI_COMM_WORLD);
                const double start = MPI_Wtime(), cpu_start = thread_cpu_seconds();
                if (dint) {
                    ring.dint(slice(q1), slice(k1), slice(q2), slice(k2), slice(v), lambda, integral, out, options);
                } else {
                    ring.diff(slice(q1), slice(k1), slice(q2), slice(k2), slice(v), lambda, out, options);
                }
                const double mine = MPI_Wtime() - start, mine_cpu = thread_cpu_seconds() - cpu_start;
                double slowest_cpu = 0;
                MPI_Allreduce(&mine_cpu, &slowest_cpu, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                best_cpu = std::min(best_cpu, slowest_cpu);
                double slowest = 0;
                MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (slowest < best) {
                    best = slowest;
                    best_wait = ring.stats().wait_seconds;
                    best_own_cpu = mine_cpu;
                }
            }
            std::vector<double> waits(static_cast<std::size_t>(ranks)), cpus(static_cast<std::size_t>(ranks));
            MPI_Gather(&best_wait, 1, MPI_DOUBLE, waits.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            MPI_Gather(&best_own_cpu, 1, MPI_DOUBLE, cpus.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            if (rank == 0) {
                std::printf("%-20s %7ld %9.3f %9.3f %7.2fx %9.3f %9.3f %7.2fx ", kernel.c_str(), static_cast<long>(n),
                            single, best, single / best, single_cpu, best_cpu, single_cpu / best_cpu);
                for (double w : waits) std::printf(" %4.1f%%", 100.0 * w / best);
                std::printf("  ");
                for (double c : cpus) std::printf(" %.3f", c);
                std::printf("\n");
                std::fflush(stdout);
            }
        }
    }
    MPI_Finalize();
    return 0;
}
