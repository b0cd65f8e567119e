// DINT causal_softmax's task queue (detail::DintTaskQueue) under real threads. The kernel drives it
// from an OpenMP team, which the `tsan` preset cannot build (libgomp is not TSan-instrumented), so
// here std::threads play the team: they take tasks with next() (which waits), "run" them, and
// finish them. Under ThreadSanitizer (scripts/test-sanitizers.sh) a race on the queue's state fails
// CI; in every build, a task handed out before its inputs were ready, a lost task or a hang fails here.
#include "../kernels/dint_task_ledger.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace diffattn;
using diffattn::test::DintTaskLedger;
using diffattn::test::planned_pipeline;

namespace {

/// Runs every task of a causal call of `seq_len_q` rows planned for `threads` threads on that many
/// std::threads. A worker that takes its `throw_at`-th task (counting from 1 over all workers)
/// throws instead of finishing it, as the kernel's worker does: abandon(), then rethrow.
/// Returns the ledger's complaints; `thrown` counts the workers that threw.
std::vector<std::string> run_queue(Index seq_len_q, int threads, int throw_at, int& thrown) {
    DintPipeline<float> pipeline = planned_pipeline(CausalMask{0, seq_len_q}, seq_len_q, threads);
    DintTaskLedger ledger(seq_len_q, pipeline.run_count);
    detail::DintTaskQueue<float> queue(pipeline, seq_len_q);
    std::mutex ledger_mutex;
    std::vector<std::string> problems;
    std::atomic<int> taken{0}, throws{0};
    const auto worker = [&] {
        try {
            while (const std::optional<detail::DintTask> task = queue.next()) {
                {
                    const std::lock_guard<std::mutex> lock(ledger_mutex);
                    const std::string problem = ledger.check_handed_out(*task);
                    if (!problem.empty()) problems.push_back(problem);
                }
                try {
                    if (++taken == throw_at) throw std::runtime_error("task failed");
                    std::this_thread::yield();  // the task's "work": lets the other threads interleave
                } catch (...) {
                    queue.abandon();
                    throw;
                }
                {
                    const std::lock_guard<std::mutex> lock(ledger_mutex);
                    ledger.finish(*task);
                }
                queue.finish(*task);
            }
        } catch (const std::runtime_error&) {
            ++throws;
        }
    };
    std::vector<std::thread> team;
    for (int t = 0; t < threads; ++t) team.emplace_back(worker);
    for (std::thread& thread : team) thread.join();
    thrown = throws;
    if (throw_at == 0 && !ledger.all_finished()) problems.push_back("not every task finished");
    return problems;
}

}  // namespace

TEST_CASE("DINT task queue: std::threads run every task, each once its inputs are ready",
          "[concurrency][dint_attention]") {
    const Index seq_len_q = 9 * kGroupRows + 3;  // 10 groups: every map and run slot reused
    for (int threads : {2, 3, 4}) {
        for (int repeat = 0; repeat < 20; ++repeat) {
            INFO("threads " << threads << ", repeat " << repeat);
            int thrown = 0;
            const std::vector<std::string> problems = run_queue(seq_len_q, threads, 0, thrown);
            CHECK(problems.empty());
            if (!problems.empty()) FAIL_CHECK(problems.front());
            CHECK(thrown == 0);
        }
    }
}

TEST_CASE("DINT task queue: a task that throws stops the team, and no thread is left waiting",
          "[concurrency][dint_attention]") {
    // Returning at all shows no thread waits forever: the others were waiting in next() or took
    // their next task and found the queue abandoned.
    for (int threads : {2, 4}) {
        for (int throw_at : {1, 7, 30}) {
            INFO("threads " << threads << ", task " << throw_at << " throws");
            int thrown = 0;
            const std::vector<std::string> problems = run_queue(5 * kGroupRows, threads, throw_at, thrown);
            CHECK(problems.empty());
            CHECK(thrown == 1);
        }
    }
}
