// How the tiled attention core and the prefill products multiply (docs/math.md §7.1): in the
// kernel's own scalar, or with operands rounded to BF16 and fp32 accumulation.
#pragma once

namespace diffattn {

/// The products of a call (AttentionOptions::compute, ExecutionContext::compute).
enum class Compute {
    scalar,        ///< every product in the kernel's scalar T (float or double): the default
    bf16,          ///< operands rounded to BF16, fp32 accumulation; the faster of the two ways below
                   ///< this CPU offers (kernels/product_path.hpp says which); float kernels only
    bf16_dot,      ///< as bf16, multiplied by AVX512-BF16's vdpbf16ps; an error on a CPU without it
    bf16_widened,  ///< as bf16, the rounded operands multiplied by the float products (any CPU)
    bf16_amx,      ///< as bf16, multiplied by AMX tiles' tdpbf16ps; an error on a CPU without them
};

/// The spelling of `compute` in messages and on the command line.
inline const char* to_string(Compute compute) {
    switch (compute) {
        case Compute::scalar: return "scalar";
        case Compute::bf16: return "bf16";
        case Compute::bf16_dot: return "bf16_dot";
        case Compute::bf16_widened: return "bf16_widened";
        case Compute::bf16_amx: return "bf16_amx";
    }
    return "unknown";
}

/// Whether `compute` rounds the products' operands to BF16.
inline bool rounds_to_bf16(Compute compute) { return compute != Compute::scalar; }

}  // namespace diffattn
