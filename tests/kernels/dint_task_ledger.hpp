// A ledger of DINT causal_softmax's pipeline tasks (detail::DintTaskQueue), for the tests that drive
// the queue: it records what has finished and says whether a task the queue hands out had every
// input it reads ready, by what the pipeline computes rather than by the queue's own bookkeeping:
//   - a map writes map slot g % kDintMapSlots, which the rows of group g - kDintMapSlots read;
//   - a run reads map 1 of its group and the column sums that every run of the group before adds
//     to, and writes run slot g % 2, which the rows of group g - 2 read;
//   - a rows block reads both maps and every run of its group.
// Not thread-safe: callers that finish tasks on several threads hold a lock around it.
#pragma once

#include "diffattn/kernels/dint_pipeline.hpp"
#include "diffattn/kernels/dint_schedule.hpp"

#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace diffattn::test {

/// The pipeline of a call of `seq_len_q` query rows on `threads` threads, reserved (value width 8)
/// and planned by plan_integral_runs, as dint_softmax_integral prepares it.
template <typename Mask>
DintPipeline<float> planned_pipeline(const Mask& mask, Index seq_len_q, int threads) {
    DintPipeline<float> pipeline;
    pipeline.reserve(seq_len_q, 8, threads);
    detail::plan_integral_runs(mask, seq_len_q, threads, pipeline);
    return pipeline;
}

class DintTaskLedger {
public:
    /// The tasks of `seq_len_q` query rows with the runs plan_integral_runs wrote to run_count.
    DintTaskLedger(Index seq_len_q, const std::vector<Index>& run_count)
        : groups_(query_group_count(seq_len_q)), seq_len_q_(seq_len_q), run_count_(run_count),
          maps_(static_cast<std::size_t>(groups_)), runs_(maps_.size()), rows_(maps_.size()) {}

    /// "" if every input of `task` is ready and it was not handed out before, else what is wrong.
    std::string check_handed_out(const detail::DintTask& task) {
        std::ostringstream problem;
        const Index g = task.group;
        if (!handed_.insert({int(task.kind), g, task.index}).second) problem << "handed out twice; ";
        switch (task.kind) {
            case detail::DintTask::Kind::map:
                if (!rows_written(g - Index(kDintMapSlots))) problem << "map slot still read; ";
                break;
            case detail::DintTask::Kind::run:
                if (!map_done(g, 0)) problem << "map 1 not done; ";
                if (!runs_finished(g - 1)) problem << "column sums of the group before not final; ";
                if (!rows_written(g - 2)) problem << "run slot still read; ";
                if (task.index >= runs_of(g)) problem << "no such run; ";
                break;
            case detail::DintTask::Kind::rows:
                if (!map_done(g, 0) || !map_done(g, 1)) problem << "maps not done; ";
                if (!runs_finished(g)) problem << "runs not done; ";
                if (task.index >= blocks(g)) problem << "no such block; ";
                break;
        }
        if (problem.tellp() > 0) {
            problem << "(kind " << int(task.kind) << ", group " << g << ", index " << task.index << ")";
        }
        return problem.str();
    }

    void finish(const detail::DintTask& task) {
        const auto g = static_cast<std::size_t>(task.group);
        switch (task.kind) {
            case detail::DintTask::Kind::map: maps_[g] |= 1 << task.index; break;
            case detail::DintTask::Kind::run: ++runs_[g]; break;
            case detail::DintTask::Kind::rows: ++rows_[g]; break;
        }
    }

    /// Every task of every group handed out (and, after finish, done).
    bool all_handed_out() const { return Index(handed_.size()) == total_tasks(); }
    bool all_finished() const {
        for (Index g = 0; g < groups_; ++g) {
            if (!map_done(g, 0) || !map_done(g, 1) || !runs_finished(g) || !rows_written(g)) return false;
        }
        return true;
    }
    Index total_tasks() const {
        Index total = 0;
        for (Index g = 0; g < groups_; ++g) total += 2 + runs_of(g) + blocks(g);
        return total;
    }

private:
    Index runs_of(Index g) const { return run_count_[static_cast<std::size_t>(g)]; }
    Index blocks(Index g) const { return query_block_count(query_group_rows(seq_len_q_, g)); }
    bool map_done(Index g, int map) const { return (maps_[static_cast<std::size_t>(g)] >> map & 1) != 0; }
    bool runs_finished(Index g) const { return g < 0 || runs_[static_cast<std::size_t>(g)] == runs_of(g); }
    bool rows_written(Index g) const { return g < 0 || rows_[static_cast<std::size_t>(g)] == blocks(g); }

    Index groups_, seq_len_q_;
    std::vector<Index> run_count_;
    std::vector<int> maps_;    // bit m: map m + 1 done
    std::vector<Index> runs_;  // runs done
    std::vector<Index> rows_;  // rows blocks written
    std::set<std::tuple<int, Index, Index>> handed_;
};

}  // namespace diffattn::test
