// A decoder model's forward with the sequence split across the ranks of a communicator
// (docs/distributed.md, "The model across ranks").
//
// Each rank embeds its slice's tokens, runs every layer's projections, rotary (at the slice's
// positions), SwiGLU and the lm_head on its own rows only; the attention heads go through
// RingAttention (the layers' AttentionKernels seam, layers/attention_kernels.hpp), the only place
// where ranks exchange data. Rank 0 then gathers every rank's logits rows.
#pragma once

#include "diffattn/distributed/call_agreement.hpp"
#include "diffattn/distributed/ring_attention.hpp"
#include "diffattn/layers/attention_kernels.hpp"
#include "diffattn/model/decoder_model.hpp"

#include <utility>
#include <vector>

namespace diffattn::distributed {

/// The single-head kernels of a multi-head module, run by a RingAttention across ranks.
template <typename T>
class RingAttentionKernels final : public AttentionKernels<T> {
public:
    explicit RingAttentionKernels(RingAttention<T>& ring) : ring_(ring) {}

    Index first_position() const override { return ring_.first_row(); }
    void softmax(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k, const ConstMatrixRef<T>& v, MatrixRef<T> out,
                 const AttentionOptions& options, AttentionWorkspace<T>&) const override {
        ring_.softmax(q, k, v, out, options);
    }
    void diff(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
              const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda, MatrixRef<T> out,
              const AttentionOptions& options, AttentionWorkspace<T>&) const override {
        ring_.diff(q1, k1, q2, k2, v, lambda, out, options);
    }
    void dint(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
              const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda, DintIntegral integral,
              MatrixRef<T> out, const AttentionOptions& options, AttentionWorkspace<T>&) const override {
        ring_.dint(q1, k1, q2, k2, v, lambda, integral, out, options);
    }

private:
    RingAttention<T>& ring_;  // the kernels' calls change its workspace, never the module
};

/// The split a model forward uses: balanced for causal work in a causal model, equal rows in an
/// encoder (sequence_slices.hpp), weighed by what a row costs each rank in a DINT model
/// (dint_rank_costs).
template <typename T>
SequenceSlices model_slices(const DecoderModel<T>& model, Index tokens, int ranks) {
    const AttentionConfig attention = model.config().attention_config();
    const std::vector<double> cost =
        attention.kind == AttentionKind::dint ? dint_rank_costs(attention.dint_integral, ranks) : std::vector<double>{};
    return balanced_slices(tokens, ranks, attention.mask() == MaskKind::causal, cost);
}

/// One forward of `tokens`, the whole sequence (the same on every rank), split over the ranks of
/// `comm` by `slices` (slices.ranks() == the communicator's size). Collective.
///   state:  this rank's ForwardState, with max_len >= this rank's slice rows (slices.rows(rank)):
///           it holds the slice's rows only; for the call its rotary table is replaced by one of
///           the slice's positions, and the state's own comes back afterwards.
///   logits: on rank 0, [N x vocab], written with every rank's rows; unused on the other ranks.
///   stats:  if not null, where this rank's attention time went (RingStats).
/// Throws on every rank (call_agreement.hpp) if any rank's arguments are wrong: a communicator of
/// another size than the slices (OptionError), slices of another length than the tokens, a state
/// too short or of another model, a token outside the vocabulary, logits of the wrong shape on
/// rank 0 (ShapeError).
template <typename T>
void distributed_forward(const DecoderModel<T>& model, const std::vector<Token>& tokens, const SequenceSlices& slices,
                         ForwardState<T>& state, MatrixRef<T> logits, MPI_Comm comm, RingStats* stats = nullptr) {
    constexpr const char* function = "distributed_forward";
    const RankInfo me = rank_info(comm, function);
    const Index n = static_cast<Index>(tokens.size()), vocab = model.config().vocab_size;
    require_on_every_rank(comm, function, [&] {
        require<OptionError>(slices.ranks() == me.size, function, ": the slices are for ", slices.ranks(),
                             " ranks but the communicator has ", me.size);
        require<ShapeError>(slices.length() == n, function, ": the slices cover ", slices.length(), " tokens but ", n,
                            " were given");
        for (int r = 0; r < slices.ranks(); ++r) {
            require<ShapeError>(slices.rows(r) >= 1, function, ": rank ", r, "'s slice is empty");
        }
        require<ShapeError>(state.fits(model.config()) && state.max_len() >= slices.rows(me.rank), function,
                            ": the ForwardState holds ", state.max_len(), " tokens of its model; rank ", me.rank,
                            "'s slice has ", slices.rows(me.rank),
                            " (make_state(max_len) of this model, max_len >= the slice's rows)");
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            require<ShapeError>(tokens[i] >= 0 && tokens[i] < vocab, function, ": token ", i, " is ", tokens[i],
                                ", outside the vocabulary [0, ", vocab, ")");
        }
        if (me.rank == 0) detail::require_shape(function, detail::named("logits", logits), n, vocab);
    });
    // Every rank must hold the same sequence: compare a checksum of the token ids.
    long long sums[2] = {n, 0};
    for (std::size_t i = 0; i < tokens.size(); ++i) sums[1] += static_cast<long long>(tokens[i]) * static_cast<long long>(i % 65521 + 1);
    long long lowest[2] = {0, 0}, highest[2] = {0, 0};
    check_mpi(MPI_Allreduce(sums, lowest, 2, MPI_LONG_LONG, MPI_MIN, comm), function, "MPI_Allreduce");
    check_mpi(MPI_Allreduce(sums, highest, 2, MPI_LONG_LONG, MPI_MAX, comm), function, "MPI_Allreduce");
    require<ShapeError>(lowest[0] == highest[0] && lowest[1] == highest[1], function,
                        ": the ranks were given different token sequences (", lowest[0], " to ", highest[0],
                        " tokens); each rank needs the whole sequence");

    const Index first = slices.first(me.rank), rows = slices.rows(me.rank);
    const std::vector<Token> mine(tokens.begin() + first, tokens.begin() + first + rows);
    RingAttention<T> ring(comm, first);
    const RingAttentionKernels<T> kernels(ring);
    // Rotary at the slice's positions [first, first + rows) (docs/math.md §3.1), from a table of
    // just those: the state's own covers [0, max_len).
    RotaryTable<T> slice_rotary(state.layer.attention.rotary.spec(), first + rows, first);
    struct Restore {  // the state serves single-process forwards again afterwards, whatever happens
        AttentionScratch<T>& scratch;
        RotaryTable<T>& other;
        ~Restore() {
            scratch.kernels = nullptr;
            std::swap(scratch.rotary, other);
        }
    } restore{state.layer.attention, slice_rotary};
    std::swap(state.layer.attention.rotary, slice_rotary);
    state.layer.attention.kernels = &kernels;
    const ConstMatrixRef<T> local = model.forward(mine, state);  // [rows x vocab]
    if (stats != nullptr) *stats = ring.stats();

    // Rank 0 gathers the rows: counts in T elements, rows row-major.
    std::vector<int> counts(static_cast<std::size_t>(me.size)), displacements(static_cast<std::size_t>(me.size));
    for (int r = 0; r < me.size; ++r) {
        counts[static_cast<std::size_t>(r)] = static_cast<int>(slices.rows(r) * vocab);
        displacements[static_cast<std::size_t>(r)] = static_cast<int>(slices.first(r) * vocab);
    }
    // The state's logits rows are contiguous (a RowMatrix of vocab columns); `logits` may not be.
    RowMatrix<T> gathered(me.rank == 0 ? n : 0, vocab);
    check_mpi(MPI_Gatherv(local.data(), static_cast<int>(local.size()), mpi_type<T>(), gathered.data(), counts.data(),
                          displacements.data(), mpi_type<T>(), 0, comm),
              function, "MPI_Gatherv");
    if (me.rank == 0) logits = gathered;
}

}  // namespace diffattn::distributed
