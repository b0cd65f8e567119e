// The checkpoint families diffattn reads, and the one table of what their tensor names differ in
// (docs/checkpoints.md, "Tensors"). Everything else a family changes is convention data in the
// configs (AttentionConventions, ModelConfig::mlp_activation); which family a config.json is,
// model/checkpoint_config.hpp decides.
#pragma once

namespace diffattn {

enum class CheckpointFamily {
    diffattn,   ///< our own format (docs/math.md §5): config.json key `attention`
    diffllama,  ///< Hugging Face DiffLlama (transformers `modeling_diffllama.py`)
    motif,      ///< Motif (`MotifForCausalLM`, Motif-2.6B style vanilla differential attention)
};

/// The names that differ between families; every other tensor name is shared.
struct FamilyTensorNames {
    const char* family;          ///< how messages name the family
    const char* out_proj;        ///< the attention output projection (diff_v2 of our format: o_proj)
    const char* ignored_suffix;  ///< tensors ending so are buffers to skip (null: none skipped)
};

inline const FamilyTensorNames& tensor_names(CheckpointFamily family) {
    // Older DiffLlama / Motif checkpoints carry rotary inv_freq buffers: never used (the
    // frequencies come from config.json), so skipped rather than refused (docs/checkpoints.md, "Files").
    static constexpr FamilyTensorNames table[] = {
        {"diffattn", "out_proj", nullptr},
        {"diffllama", "o_proj", ".rotary_emb.inv_freq"},
        {"motif", "o_proj", ".rotary_emb.inv_freq"},
    };
    return table[static_cast<int>(family)];
}

inline const char* to_string(CheckpointFamily family) { return tensor_names(family).family; }

}  // namespace diffattn
