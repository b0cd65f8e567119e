// The seam where a multi-head module's single-head kernels can be replaced (docs/distributed.md).
//
// By default the head policies (attention_heads.hpp) call the single-process kernels of
// kernels/ on all S keys of the call. A caller that holds only a slice of the sequence (the
// sequence-parallel kernels of include/diffattn/distributed/, one slice per MPI rank) hands the
// module an AttentionKernels through its scratch: the module then runs its projections, rotary
// and output projection on the slice's rows, starts the rotary positions at first_position(), and
// calls these kernels for every head, one head after another on one thread, in the same order
// on every rank (the kernels may communicate). The layers never depend on how they do it.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/options.hpp"

namespace diffattn {

template <typename T>
class AttentionKernels {
public:
    virtual ~AttentionKernels() = default;

    /// Position of the call's first row in the whole sequence (its rotary position).
    virtual Index first_position() const = 0;

    /// As softmax_attention, diff_attention and dint_attention (docs/math.md §2.1-2.3) for the
    /// call's rows: q [N x d] and k, v of the same N rows; out [N x dv].
    virtual void softmax(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k, const ConstMatrixRef<T>& v,
                         MatrixRef<T> out, const AttentionOptions& options, AttentionWorkspace<T>& ws) const = 0;
    virtual void diff(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
                      const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda, MatrixRef<T> out,
                      const AttentionOptions& options, AttentionWorkspace<T>& ws) const = 0;
    virtual void dint(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
                      const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda, DintIntegral integral,
                      MatrixRef<T> out, const AttentionOptions& options, AttentionWorkspace<T>& ws) const = 0;
};

}  // namespace diffattn
