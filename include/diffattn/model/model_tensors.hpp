// The tensors of a model file (docs/math.md §5) from its configuration alone: the name and shape of every
// tensor of model.safetensors, in file order, with no weight allocated.
//
// DecoderModel::load compares a file's header with them before it allocates the model, so a
// file that does not match its config.json costs no more memory than reading it. They are the
// names and shapes of DecoderModel<T>::parameters(), which binds the same tensors to their storage
// in the modules; the test "the tensors listed from a config are those of parameters()" keeps
// the two in step for every attention kind.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/io/safetensors.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/model/config.hpp"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace diffattn {

/// Calls visit(name, shape) (a std::string and a std::vector<Index>) for every tensor of the
/// `self_attn.` module of layer prefix `prefix` ("model.layers.<i>.self_attn."), as
/// MultiHeadAttention::collect_parameters lists them (docs/math.md §3): the projections (Shared DIFF: bases
/// [d, D] and factors [H, D, r], [H, d, r]), v_proj [v_width, D], out_proj / o_proj [D, out_width],
/// diff_v2's lambda_proj [H, D], the lambda vectors [d] and subln [2d].
template <typename Visit>
void for_each_attention_tensor(const AttentionConfig& a, const std::string& prefix, Visit&& visit) {
    const Index D = a.d_model, H = a.n_heads, d = a.head_dim(), r = a.shared_diff_rank;
    if (a.kind == AttentionKind::shared_diff) {
        visit(prefix + "q_base.weight", std::vector<Index>{d, D});
        visit(prefix + "k_base.weight", std::vector<Index>{d, D});
        for (const char* which : {"q", "k"}) {
            for (const char* map : {"1", "2"}) {
                visit(prefix + which + map + "_a", std::vector<Index>{H, D, r});
                visit(prefix + which + map + "_b", std::vector<Index>{H, d, r});
            }
        }
    } else {
        visit(prefix + "q_proj.weight", std::vector<Index>{a.q_width(), D});
        visit(prefix + "k_proj.weight", std::vector<Index>{a.k_width(), D});
    }
    visit(prefix + "v_proj.weight", std::vector<Index>{a.v_width(), D});
    visit(prefix + a.out_proj_name() + ".weight", std::vector<Index>{D, a.out_width()});
    if (a.kind == AttentionKind::diff_v2) visit(prefix + "lambda_proj.weight", std::vector<Index>{H, D});
    if (a.has_lambda()) {
        for (const char* name : {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"}) {
            visit(prefix + name, std::vector<Index>{d});
        }
    }
    if (a.has_subln()) visit(prefix + "subln.weight", std::vector<Index>{2 * d});
}

/// Calls visit(name, shape) for every tensor of a model file of `config` (validated), in file
/// order: model.embed_tokens.weight [V, D]; per layer, model.layers.<i>.input_layernorm.weight
/// [D], its self_attn.* tensors, post_attention_layernorm.weight [D], mlp.gate_proj.weight and
/// mlp.up_proj.weight [F, D], mlp.down_proj.weight [D, F]; model.norm.weight [D]; lm_head.weight
/// [V, D] unless the embeddings are tied.
template <typename Visit>
void for_each_model_tensor(const ModelConfig& config, Visit&& visit) {
    const Index D = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
    visit(std::string("model.embed_tokens.weight"), std::vector<Index>{V, D});
    for (Index i = 0; i < config.num_hidden_layers; ++i) {
        const std::string prefix = "model.layers." + std::to_string(i) + ".";
        visit(prefix + "input_layernorm.weight", std::vector<Index>{D});
        for_each_attention_tensor(config.attention_config(i), prefix + "self_attn.", visit);
        visit(prefix + "post_attention_layernorm.weight", std::vector<Index>{D});
        visit(prefix + "mlp.gate_proj.weight", std::vector<Index>{F, D});
        visit(prefix + "mlp.up_proj.weight", std::vector<Index>{F, D});
        visit(prefix + "mlp.down_proj.weight", std::vector<Index>{D, F});
    }
    visit(std::string("model.norm.weight"), std::vector<Index>{D});
    if (!config.tie_word_embeddings) visit(std::string("lm_head.weight"), std::vector<Index>{V, D});
}

/// FileError naming the file and the tensor unless `file` holds exactly the tensors of a model
/// of `config` (validated) with their shapes: the first missing or misshapen one in file order,
/// then every unexpected one (SafetensorsFile::require_tensor, check_no_unexpected). Reads the
/// header entries only; the names it keeps are ones the file holds.
inline void check_model_tensors(const SafetensorsFile& file, const ModelConfig& config) {
    std::set<std::string> expected;
    for_each_model_tensor(config, [&](std::string name, const std::vector<Index>& shape) {
        file.require_tensor(name, shape);
        expected.insert(std::move(name));
    });
    file.check_no_unexpected(expected);
}

}  // namespace diffattn
