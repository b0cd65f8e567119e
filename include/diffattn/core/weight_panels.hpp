// Per-thread buffers in which a product of many rows decodes a panel of stored weights (bf16,
// q8_0, q4_0) into the scalar its GEMM multiplies (layers/linear.hpp), and, for BF16 products
// (layers/panel_products.hpp), rounds or packs a chunk of its input rows beside it: allocated once
// with the run state that owns them (model/forward_state.hpp), so that a prefill allocates nothing.
//
// The buffers are never written until a product uses them, so a run state of a model whose weights
// are all f32 holds address space for them but no memory.
#pragma once

#include "diffattn/core/types.hpp"

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace diffattn {

class WeightPanels {
public:
    /// A panel is at most kRows weight rows (output features) by kDepth weights of each.
    static constexpr Index kRows = 256;
    static constexpr Index kDepth = 1024;
    /// BF16 products round or pack up to kOperandRows input rows of kDepth entries at a time.
    static constexpr Index kOperandRows = 256;

    WeightPanels() = default;
    /// One panel of up to kRows x kDepth scalars of `scalar_bytes` bytes for each of `threads`
    /// threads; with `bf16_operands`, followed by room for kOperandRows x kDepth floats.
    WeightPanels(int threads, std::size_t scalar_bytes, bool bf16_operands = false)
        : bytes_(kRows * kDepth * scalar_bytes), operand_bytes_(bf16_operands ? kOperandRows * kDepth * sizeof(float) : 0) {
        for (int t = 0; t < threads; ++t) {
            void* data = std::aligned_alloc(64, bytes_ + operand_bytes_);
            if (data == nullptr) throw std::bad_alloc();
            panels_.emplace_back(static_cast<unsigned char*>(data));
        }
    }

    /// Threads with a panel.
    int threads() const { return static_cast<int>(panels_.size()); }
    /// Whether every panel holds kRows x kDepth scalars of `scalar_bytes` bytes.
    bool holds(std::size_t scalar_bytes) const { return bytes_ >= kRows * kDepth * scalar_bytes; }

    /// Whether each thread has room for BF16 products' operands beside its panel.
    bool holds_bf16_operands() const { return operand_bytes_ > 0; }

    /// The panel of thread `thread`, as T.
    template <typename T>
    T* panel(int thread) const {
        return reinterpret_cast<T*>(panels_[static_cast<std::size_t>(thread)].get());
    }
    /// Thread `thread`'s room for kOperandRows x kDepth floats (holds_bf16_operands() only).
    float* operands(int thread) const {
        return reinterpret_cast<float*>(panels_[static_cast<std::size_t>(thread)].get() + bytes_);
    }

private:
    struct Free {
        void operator()(unsigned char* p) const { std::free(p); }
    };
    std::size_t bytes_ = 0, operand_bytes_ = 0;
    std::vector<std::unique_ptr<unsigned char, Free>> panels_;
};

}  // namespace diffattn
