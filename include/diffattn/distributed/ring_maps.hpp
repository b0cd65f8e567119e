// One rank's side of a sequence-parallel attention call (docs/distributed.md, "The ring"): the
// agreement that every rank got compatible arguments, and the passes that fold key / value blocks
// into the online-softmax states of the slice's query groups.
//
// Each (slice x block) part runs the single-process tiled core (attend_block) into an
// online-softmax state and merges into one state per query group and map
// (OnlineSoftmaxState::merge), as a key split does on one machine. The kernels built on these
// passes (softmax, DIFF, DINT) are RingAttention's (ring_attention.hpp).
#pragma once

#include "diffattn/core/parallel.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/distributed/call_agreement.hpp"
#include "diffattn/distributed/ring_pass.hpp"

#include <algorithm>
#include <array>
#include <vector>

namespace diffattn::distributed {

template <typename T>
class RingMaps {
public:
    /// comm: the ranks that share the sequence, rank order = slice order. first_row: where this
    /// rank's slice must start in the sequence (checked on every call), or -1 for anywhere.
    explicit RingMaps(MPI_Comm comm, Index first_row = -1) : comm_(comm), first_row_(first_row) {}

    /// Where this rank's time went in its passes since the last reset (docs/distributed.md).
    const RingStats& stats() const { return stats_; }
    void reset_stats() { stats_.reset(); }
    Index first_row() const { return first_row_; }
    MPI_Comm comm() const { return comm_; }

protected:
    Index groups() const { return query_group_count(rows_); }
    Index group_rows(Index g) const { return query_group_rows(rows_, g); }

    /// The agreement of every call (call_agreement.hpp): local checks, shapes across ranks, slices;
    /// then the workspace and states for this call. check() returns the resolved options of this rank.
    template <typename Check>
    void start(const char* function, const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k,
               const ConstMatrixRef<T>& v, const AttentionOptions& options, int integral, Check&& check) {
        SliceCall mine;
        mine.q_rows = q.rows();
        mine.head_dim = q.cols();
        mine.value_dim = v.cols();
        mine.mask = static_cast<double>(options.mask);
        mine.integral = integral;
        mine.first_row = static_cast<double>(first_row_);
        slices_ = agree_on_call(comm_, function, mine, [&](SliceCall& call) {
            require<OptionError>(!options.valid_len, function, ": key padding (valid_len) is not supported across ranks");
            const detail::ResolvedOptions resolved = check();
            call.k_rows = k.rows();
            call.v_rows = v.rows();
            call.scale = resolved.scale;
            call.lambda = lambda_;
        });
        const RankInfo me = rank_info(comm_, function);
        rank_ = me.rank;
        rows_ = q.rows();
        causal_ = options.mask == MaskKind::causal;
        ws_.reserve(rows_, slices_.length(), q.cols(), v.cols(), std::max(options.threads, 1));
        for (auto& maps_of_kind : totals_) {
            if (maps_of_kind.size() < static_cast<std::size_t>(groups())) maps_of_kind.resize(static_cast<std::size_t>(groups()));
            for (Index g = 0; g < groups(); ++g) {
                maps_of_kind[g].reserve(kGroupRows, v.cols());
                maps_of_kind[g].reset(group_rows(g), v.cols());
            }
        }
    }

    struct NoExtraCheck {
        void operator()(const detail::ResolvedOptions&) const {}
    };
    /// start() for DIFF and DINT: the two-map checks, then extra(resolved).
    template <typename Extra = NoExtraCheck>
    detail::ResolvedOptions start_differential(const char* function, const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1,
                                               const ConstMatrixRef<T>& q2, const ConstMatrixRef<T>& k2,
                                               const ConstMatrixRef<T>& v, T lambda, const MatrixRef<T>& out,
                                               const AttentionOptions& options, int integral, Extra extra = {}) {
        detail::ResolvedOptions resolved{};
        lambda_ = static_cast<double>(lambda);
        start(function, q1, k1, v, options, integral, [&] {
            resolved = detail::check_differential<T>(function, q1, k1, q2, k2, v, lambda, out, options);
            extra(resolved);
            return resolved;
        });
        return resolved;
    }

    /// f(mask) with the mask of this slice's queries against `block`: causal on the diagonal
    /// block, every key of an earlier block, every key with mask none.
    template <typename F>
    void with_block_mask(const RingBlock<T>& block, F&& f) const {
        if (causal_ && block.origin == rank_) {
            f(CausalMask{0, block.rows});
        } else {
            f(NoMask{block.rows});
        }
    }

    /// f(g, q_begin, q_rows, scratch, thread) for each query group of the slice.
    template <typename F>
    void for_each_group(int threads, F&& f) {
        const detail::Schedule schedule = causal_ ? detail::Schedule::largest_first : detail::Schedule::equal_tasks;
        detail::parallel_for(groups(), threads, schedule, [&](Index g, int thread) {
            f(g, g * kGroupRows, group_rows(g), ws_.block(thread), thread);
        });
    }

    /// Folds `block` into maps totals_[first_total + m] for m < Maps, map m's keys in the block's
    /// piece first_key + m, the values in its last piece; progress() between groups on thread 0
    /// (the thread that called MPI).
    template <std::size_t Maps, typename Progress>
    void fold_maps(const std::array<ConstMatrixRef<T>, Maps>& queries, const RingBlock<T>& block,
                   const detail::ResolvedOptions& resolved, std::size_t first_total, std::size_t first_key,
                   const Progress& progress) {
        const ConstMatrixRef<T> v(block.last_piece());
        with_block_mask(block, [&](const auto& mask) {
            for_each_group(resolved.threads, [&](Index g, Index q_begin, Index q_rows, BlockScratch<T>& scratch,
                                                 int thread) {
                for (std::size_t m = 0; m < Maps; ++m) {
                    const ConstMatrixRef<T> keys(block.piece(first_key + m));
                    const detail::DotProductLogits<T> logits(queries[m], keys, T(resolved.scale));
                    detail::attend_block(logits, mask, q_begin, q_rows, v, scratch, scratch.states[0]);
                    totals_[first_total + m][g].merge(scratch.states[0]);
                }
                if (thread == 0) progress();
            });
        });
    }

    /// One pass of blocks (K of each map, then V) folding `Maps` maps into totals_[0 .. Maps).
    template <std::size_t Maps, std::size_t Pieces>
    void attend_maps(const std::array<ConstMatrixRef<T>, Maps>& queries, const std::array<ConstMatrixRef<T>, Pieces>& local,
                     const detail::ResolvedOptions& resolved) {
        static_assert(Pieces == Maps + 1, "attend_maps: one key piece per map, then the values");
        ring_pass<T>(comm_, slices_, local, causal_, slices_.ranks() - 1, buffers_, stats_,
                     [&](const RingBlock<T>& block, const auto& progress) {
                         fold_maps<Maps>(queries, block, resolved, 0, 0, progress);
                     });
    }

    /// out = O1 - lambda O2 (docs/math.md §2.2) from totals_[0] and totals_[1].
    void write_differential(T lambda, MatrixRef<T>& out) const {
        for (Index g = 0; g < groups(); ++g) {
            detail::write_differential_rows(totals_[0][g], totals_[1][g], lambda, g * kGroupRows, 0, group_rows(g), out);
        }
    }

    MPI_Comm comm_;
    Index first_row_;
    double lambda_ = 0;
    int rank_ = 0;
    Index rows_ = 0;
    bool causal_ = true;
    SequenceSlices slices_;
    AttentionWorkspace<T> ws_;
    std::array<std::vector<OnlineSoftmaxState<T>>, 3> totals_;  ///< [map 1, map 2, integral][group]
    RingBuffers<T> buffers_;
    RingStats stats_;
};

}  // namespace diffattn::distributed
