// diffattn: differential (DIFF / DINT / Shared DIFF) attention operators on Eigen 3.4.
//
// Umbrella header: includes every public header of the library.
#pragma once

#include "diffattn/version.hpp"

// core: Eigen aliases, errors, argument checks, memory limit, the parallel loop, compiled ISA
#include "diffattn/core/checks.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/isa.hpp"
#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/memory_limit.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_blocks.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/core/weight_matrix.hpp"
#include "diffattn/core/weight_panels.hpp"

// kernels: single-head attention (docs/math.md §1-2), its scratch memory (AttentionWorkspace) and the plain
// reference
#include "diffattn/kernels/attention_core.hpp"
#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/dint_integral.hpp"
#include "diffattn/kernels/dint_pipeline.hpp"
#include "diffattn/kernels/dint_schedule.hpp"
#include "diffattn/kernels/gda_attention.hpp"
#include "diffattn/kernels/mask.hpp"
#include "diffattn/kernels/online_softmax.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/reference.hpp"
#include "diffattn/kernels/reference_gda.hpp"
#include "diffattn/kernels/softmax_attention.hpp"
#include "diffattn/kernels/tile_product.hpp"
#include "diffattn/kernels/tiling.hpp"

// io: checkpoint files
#include "diffattn/io/json_file.hpp"
#include "diffattn/io/mapped_file.hpp"
#include "diffattn/io/safetensors.hpp"
#include "diffattn/io/safetensors_checkpoint.hpp"
#include "diffattn/io/safetensors_stream_writer.hpp"

// layers: RMSNorm, SwiGLU, rotary, lambda, multi-head attention modules (docs/math.md §3-4)
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/attention_conventions.hpp"
#include "diffattn/layers/attention_heads.hpp"
#include "diffattn/layers/attention_scratch.hpp"
#include "diffattn/layers/checkpoint_family.hpp"
#include "diffattn/layers/head_parallel.hpp"
#include "diffattn/layers/kv_cache_view.hpp"
#include "diffattn/layers/lambda.hpp"
#include "diffattn/layers/linear.hpp"
#include "diffattn/layers/multi_head_attention.hpp"
#include "diffattn/layers/parameters.hpp"
#include "diffattn/layers/poly_norm.hpp"
#include "diffattn/layers/rms_norm.hpp"
#include "diffattn/layers/rotary.hpp"
#include "diffattn/layers/shared_diff.hpp"
#include "diffattn/layers/stored_weight_dots.hpp"
#include "diffattn/layers/swiglu.hpp"

// model: config, decoder layer, decoder model (docs/math.md §4-5), KV cache, logit
// ranking, generation (docs/math.md §6) and the token sampler; released checkpoints' configs
#include "diffattn/model/checkpoint_config.hpp"
#include "diffattn/model/config.hpp"
#include "diffattn/model/config_json.hpp"
#include "diffattn/model/decoder_layer.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/forward_state.hpp"
#include "diffattn/model/generate.hpp"
#include "diffattn/model/generation_config.hpp"
#include "diffattn/model/kv_cache.hpp"
#include "diffattn/model/load_options.hpp"
#include "diffattn/model/logit_ranking.hpp"
#include "diffattn/model/quantized_checkpoint.hpp"
#include "diffattn/model/released_config_reader.hpp"
#include "diffattn/model/sampler.hpp"

// analysis (optional, on top of the model): attention maps and their measures per layer, head and
// row, streamed in O(N) memory (docs/analysis.md)
#include "diffattn/analysis/analysis_result.hpp"
#include "diffattn/analysis/analysis_rows.hpp"
#include "diffattn/analysis/attention_analysis.hpp"
#include "diffattn/analysis/head_rows.hpp"
#include "diffattn/analysis/row_measure.hpp"
