// Decoder model (docs/math.md §4, 5): token embedding, L pre-norm layers, final RMSNorm, lm_head.
//   X_0    = embed_tokens[tokens]
//   X_i+1  = DecoderLayer_i(X_i)
//   logits = RMSNorm(X_L) lm_head^T            (lm_head = embed_tokens when tied)
// With "causal": false it is a bidirectional encoder stack (every attention mask is none).
//
// Templated on the scalar type (float or double). forward() is const and keeps all its scratch
// in a caller-owned ForwardState (and, for incremental decoding, a caller-owned KvCache per
// sequence, model/kv_cache.hpp), so one model serves any number of threads at once.
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/io/safetensors.hpp"
#include "diffattn/io/safetensors_checkpoint.hpp"
#include "diffattn/layers/linear.hpp"
#include "diffattn/layers/parameters.hpp"
#include "diffattn/layers/rms_norm.hpp"
#include "diffattn/model/checkpoint_config.hpp"
#include "diffattn/model/checkpoint_weights.hpp"
#include "diffattn/model/config.hpp"
#include "diffattn/model/config_json.hpp"
#include "diffattn/model/decoder_layer.hpp"
#include "diffattn/model/forward_state.hpp"
#include "diffattn/model/kv_cache.hpp"
#include "diffattn/model/load_options.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace diffattn {

/// A token id, in [0, vocab_size).
using Token = std::int32_t;

template <typename T>
class DecoderModel {
public:
    LinearWeight<T> embed_tokens;         ///< [V x D]  `model.embed_tokens.weight`
    std::vector<DecoderLayer<T>> layers;  ///< L layers, `model.layers.<i>.*`
    RmsNorm<T> norm;                      ///< [D]      `model.norm.weight`
    LinearWeight<T> lm_head;              ///< [V x D]  `lm_head.weight` (empty when tied)

    /// A model of this configuration with zero projections and unit norm weights; validates it.
    /// Every 2-D weight is stored in stored_format(`weights`, its inputs), the output head (lm_head,
    /// or the embedding table when tied) as an output head (docs/math.md §10).
    explicit DecoderModel(const ModelConfig& config, WeightFormat weights = WeightFormat::f32)
        : config_(validated(config)), weights_(weights) {
        const Index V = config_.vocab_size, D = config_.hidden_size;
        embed_tokens = LinearWeight<T>(V, D, stored_format(weights, D, config_.tie_word_embeddings));
        layers.reserve(static_cast<std::size_t>(config_.num_hidden_layers));
        for (Index i = 0; i < config_.num_hidden_layers; ++i) layers.emplace_back(config_, i, weights);
        norm = RmsNorm<T>(D, config_.rms_norm_eps);
        if (!config_.tie_word_embeddings) lm_head = LinearWeight<T>(V, D, stored_format(weights, D, true));
    }

    /// Loads a model directory: config.json of our own format (docs/math.md §5) or of a released DiffLlama
    /// or Motif checkpoint (docs/checkpoints.md, model/checkpoint_config.hpp), and the weights as
    /// the Hub ships them: model.safetensors, or model.safetensors.index.json and its shards
    /// (io/safetensors_checkpoint.hpp), memory-mapped. Every tensor the model needs must be present
    /// with exactly its shape, and no other tensor may be there (a family's ignored buffers aside);
    /// F32, F16, BF16 and F64 are converted to T. Throws ConfigError (config.json, naming the key)
    /// or FileError (naming the file and the tensor). Unknown config keys go to `warnings` (may be null).
    ///
    /// Memory: every file is validated and every name and shape checked against config.json
    /// before the model is allocated (a config.json describing far more parameters than the files
    /// hold is refused first, naming both), so a refused directory allocates nothing; the
    /// tensors are then converted one by one from the mapping, each one's pages handed back, so
    /// loading takes the model's size in T plus about one tensor (docs/benchmarks.md, "Loading a
    /// checkpoint"). The checks and the copy: model/checkpoint_weights.hpp.
    static DecoderModel load(const std::filesystem::path& dir, std::vector<std::string>* warnings = nullptr) {
        return load(dir, LoadOptions{}, warnings);
    }

    /// As above, each 2-D weight stored as `options` asks (LoadOptions, docs/math.md §10): converted
    /// tensor by tensor from the mapped files, so that loading takes the stored model plus a few MB.
    /// OptionError for a request that would quantize a quantized directory again (before anything
    /// is allocated); FileError naming the file and the tensor for a weight the format cannot hold
    /// (NaN or infinite in a block format; see LinearWeight::store_rows), found while reading.
    /// A weight kept in f32 because its rows are not whole blocks is named in `warnings`.
    static DecoderModel load(const std::filesystem::path& dir, const LoadOptions& options,
                             std::vector<std::string>* warnings = nullptr) {
        detail::require_model_directory(dir);
        const std::filesystem::path config_path = dir / "config.json";
        const ModelConfig config = read_checkpoint_config(config_path, warnings);
        const SafetensorsCheckpoint files(dir);
        // The count first: the table's size follows the layers config.json claims.
        detail::require_parameters_in_files(config, config_path, files);
        detail::check_checkpoint_tensors(config, tensor_table(config), files);
        DecoderModel model(config, detail::format_to_load(files, options));
        ParameterList<T> list = model.parameters();
        detail::read_parameters(list, files);
        if (warnings != nullptr) model.warn_unblocked_weights(list, *warnings);
        return model;
    }

    /// A model with seeded weights (init_parameters_uniform): the same numbers on every platform,
    /// each 2-D weight stored in stored_format(`weights`, ...) (the seeded values encoded).
    static DecoderModel seeded(const ModelConfig& config, std::uint64_t seed, WeightFormat weights = WeightFormat::f32) {
        DecoderModel model(config, weights);
        ParameterList<T> parameters = model.parameters();
        init_parameters_uniform(parameters, seed);
        return model;
    }

    const ModelConfig& config() const { return config_; }
    /// The weight format the model was built for (each weight's own: LinearWeight::format()).
    WeightFormat weight_format() const { return weights_; }

    /// Bytes the parameters occupy as stored: each 2-D weight in its format, the rest in T.
    double stored_bytes() const {
        double bytes = static_cast<double>(parameter_count()) * static_cast<double>(sizeof(T));  // all in T
        const auto weigh = [&](const LinearWeight<T>& w) {  // ... but this weight in its format
            bytes += w.stored_bytes() - static_cast<double>(w.rows() * w.cols()) * static_cast<double>(sizeof(T));
        };
        weigh(embed_tokens);
        weigh(lm_head);
        for (const DecoderLayer<T>& layer : layers) {
            layer.self_attn.weights().for_each_projection(layer.self_attn.config(), weigh);
            layer.mlp.for_each_projection(weigh);
        }
        return bytes;
    }

    /// Number of parameters, ModelConfig::parameter_count() (docs/model.md).
    Index parameter_count() const { return config_.parameter_count(); }

    /// Every tensor of model.safetensors with a writable view of its storage, in file order.
    ParameterList<T> parameters() {
        ParameterList<T> list;
        list_tensors(config_, list, this);
        return list;
    }

    /// The tensors a model of `config` reads, with their file shapes and no storage (nothing is
    /// allocated): the same names and shapes as parameters() of such a model. Validates `config`.
    static ParameterList<T> tensor_table(const ModelConfig& config) {
        config.validate();
        ParameterList<T> list;
        list_tensors(config, list, nullptr);
        return list;
    }

    /// Reads the weights from a safetensors file: exactly the tensors of parameters(), shapes checked.
    void load_weights(const std::filesystem::path& file_path) { load_weights(SafetensorsFile(file_path)); }

    /// The same from a safetensors file already opened (and validated).
    void load_weights(const SafetensorsFile& file) {
        ParameterList<T> list = parameters();
        file.check_no_unexpected(detail::read_parameters(list, file));
    }

    /// Shared DIFF: precompute the merged per-map projections of every layer (forward() then uses
    /// them; results agree with the factored form up to rounding). No-op for other kinds.
    void merge_shared_diff() {
        for (auto& layer : layers) layer.self_attn.merge();
    }

    /// Run state for calls of up to max_len tokens with attention heads on `threads` threads
    /// (ForwardState's constructor: ShapeError for max_len outside [1, ModelConfig::max_positions]
    /// or a state larger than the machine's memory, before allocating).
    ForwardState<T> make_state(Index max_len, int threads = 1) const { return ForwardState<T>(config_, max_len, threads); }

    /// logits [N x V] of the N tokens, into caller-owned `logits`.
    ///
    /// Without a cache the tokens are a whole sequence at positions 0 .. N-1. With a cache
    /// (docs/math.md §6) they continue the cache's sequence: positions cache->length() .. + N - 1; every
    /// layer appends their rotated keys and values to the cache and attends over all cached rows
    /// (DINT heads continue their histories), then the cache's length grows by N. Prefill (an empty
    /// cache, the whole prompt) and decode (one token or a chunk per call) are the same call, and
    /// the plain forward is the same path with the keys in the state instead of a cache. Feeding a
    /// sequence whole, token by token or in chunks gives the same logits up to rounding.
    /// The state's max_len bounds N (the chunk), the cache's max_len bounds the context.
    ///
    /// Throws ShapeError for a token id outside [0, V), too many tokens for the state, a state of
    /// another configuration, a cache of another configuration, or a cache without room for N
    /// more tokens (the cache never grows; it is left unchanged). The caller owns state and cache:
    /// one of each per concurrent sequence. (Should a layer throw after these checks, the cache is
    /// reset, as its layers would disagree.)
    void forward(const std::vector<Token>& tokens, ForwardState<T>& state, MatrixRef<T> logits,
                 KvCache<T>* cache = nullptr) const {
        if (cache == nullptr) {
            forward_observed(tokens, state, logits, [](Index, const AttentionScratch<T>&) {});
            return;
        }
        const Index n = static_cast<Index>(tokens.size());
        check_call(tokens, state, logits);
        cache->check_serves("DecoderModel::forward", config_, n);
        if (n == 0) return;
        auto x = embed(tokens, state);  // [N x D] residual stream
        try {
            for (std::size_t i = 0; i < layers.size(); ++i) {
                // [cached + N rows] of layer i, in the cache's stored scalar
                cache->with_view(static_cast<Index>(i), [&](auto& view) {
                    layers[i].forward(x, state.layer, state.context(), &view);
                });
            }
        } catch (...) {
            cache->reset();
            throw;
        }
        cache->advance(n);
        project_logits(x, state, logits);
    }

    /// A batched decode step (continuous batching, docs/math.md §6): token b continues the sequence
    /// of caches[b], at position caches[b]->length(); logits [B x V], row b for sequence b. Each
    /// layer's projections and SwiGLU run once over the B rows, so the weights are read once for
    /// the whole batch, and each sequence attends over its own cache; then every cache grows by
    /// one. Row b equals forward({tokens[b]}, state, ..., caches[b]) up to rounding (docs/math.md
    /// §7). Sequences join (after a prefill of their prompt through forward() with their cache)
    /// and leave (simply not passed) between steps; their caches may hold different lengths.
    ///
    /// Throws ShapeError for tokens and caches of different counts, more sequences than the
    /// state's max_len, a null cache, two entries sharing one cache, caches of different stored
    /// precisions (KvPrecision), or what forward() refuses for
    /// a cache or a token; a refused call changes no cache. (Should a layer throw after these
    /// checks, every cache of the batch is reset, as its layers would disagree.)
    void forward_batch(const std::vector<Token>& tokens, const std::vector<KvCache<T>*>& caches, ForwardState<T>& state,
                       MatrixRef<T> logits) const {
        constexpr const char* function = "DecoderModel::forward_batch";
        const Index batch = static_cast<Index>(tokens.size());
        require<ShapeError>(caches.size() == tokens.size(), function, ": ", tokens.size(), " tokens but ",
                            caches.size(), " caches (one token per sequence, one cache each)");
        check_call(tokens, state, logits, function);
        for (Index b = 0; b < batch; ++b) {
            KvCache<T>* cache = caches[static_cast<std::size_t>(b)];
            require<ShapeError>(cache != nullptr, function, ": cache ", b, " is null");
            cache->check_serves(function, config_, 1);
            require<ShapeError>(cache->precision() == caches.front()->precision(), function, ": cache ", b,
                                " stores its keys and values as ", to_string(cache->precision()), " but cache 0 as ",
                                to_string(caches.front()->precision()), " (the caches of a batch share one precision)");
        }
        require_distinct_caches(function, batch, [&](Index b) { return caches[static_cast<std::size_t>(b)]; });
        if (batch == 0) return;
        auto x = embed(tokens, state);  // [B x D] residual stream, row b of sequence b
        try {
            for (std::size_t i = 0; i < layers.size(); ++i) {
                // The batch shares one stored precision: dispatch on the first cache's.
                caches.front()->with_view(static_cast<Index>(i), [&](auto& first) {
                    using S = typename std::decay_t<decltype(first.keys)>::Scalar;
                    const auto sequence = [&](Index b) {  // row b continues caches[b]
                        return SequenceRows<T, S>{
                            caches[static_cast<std::size_t>(b)]->template view<S>(static_cast<Index>(i)), b, 1};
                    };
                    layers[i].forward_batch(x, state.layer, state.context(), batch, sequence);
                });
            }
        } catch (...) {
            for (KvCache<T>* cache : caches) cache->reset();
            throw;
        }
        for (KvCache<T>* cache : caches) cache->advance(1);
        project_logits(x, state, logits);
    }

    /// The plain forward above (no cache), calling `observe(i, attention)` after layer i with that
    /// layer's attention scratch, read-only: rows [0, N) of its q, k and v then hold the layer's
    /// rotated queries [N x q_width], rotated keys [N x k_width] and values [N x v_width]
    /// (docs/math.md §3), `heads` the head outputs before the output projection [N x out_width]
    /// (after subln and the output factor) and, for diff_v2, `lambda_gate` the gates
    /// sigmoid(x lambda_proj^T) [N x H]. The hook of attention analysis (diffattn/analysis/): it
    /// sees what the kernels saw without recomputing the projections and rotary. Same checks and
    /// logits as forward(tokens, state, logits).
    template <typename LayerObserver>
    void forward_observed(const std::vector<Token>& tokens, ForwardState<T>& state, MatrixRef<T> logits,
                          LayerObserver&& observe) const {
        check_call(tokens, state, logits);
        if (tokens.empty()) return;
        auto x = embed(tokens, state);  // [N x D] residual stream
        for (std::size_t i = 0; i < layers.size(); ++i) {
            layers[i].forward(x, state.layer, state.context());
            observe(static_cast<Index>(i), static_cast<const AttentionScratch<T>&>(state.layer.attention));
        }
        project_logits(x, state, logits);
    }

    /// As above, into state.logits; returns a view of its first N rows [N x V] (valid until the
    /// state's next use; copy it into a RowMatrix to keep it).
    ConstMatrixRef<T> forward(const std::vector<Token>& tokens, ForwardState<T>& state,
                              KvCache<T>* cache = nullptr) const {
        const Index n = static_cast<Index>(tokens.size());
        check_call(tokens, state);
        forward(tokens, state, state.logits.topRows(n), cache);
        return ConstMatrixRef<T>(state.logits.topRows(n));
    }

    /// An empty KV cache for sequences of up to max_len tokens of this model (KvCache's
    /// constructor: OptionError for an encoder or DINT global_mean model; ShapeError for max_len
    /// outside [1, ModelConfig::max_positions] or a cache larger than the machine's memory).
    /// `precision`: the scalar keys and values are stored in (KvPrecision; f32 = the model's T).
    KvCache<T> make_cache(Index max_len, KvPrecision precision = KvPrecision::f32) const {
        return KvCache<T>(config_, max_len, precision);
    }

    /// Convenience: a fresh single-threaded state and a new logits matrix [N x V].
    RowMatrix<T> logits(const std::vector<Token>& tokens) const {
        ForwardState<T> state = make_state(std::max<Index>(1, static_cast<Index>(tokens.size())));
        RowMatrix<T> out(static_cast<Index>(tokens.size()), config_.vocab_size);
        forward(tokens, state, out);
        return out;
    }

private:
    /// The tensors of a model of `config` in file order, viewing the storage of `model`, or as
    /// table entries only when `model` is null.
    static void list_tensors(const ModelConfig& config, ParameterList<T>& list, DecoderModel* model) {
        const Index V = config.vocab_size, D = config.hidden_size;
        list.add("model.embed_tokens.weight", V, D, model ? &model->embed_tokens : nullptr);
        list.items().back().output_head = config.tie_word_embeddings;
        for (Index i = 0; i < config.num_hidden_layers; ++i) {
            const std::string prefix = "model.layers." + std::to_string(i) + ".";
            if (model != nullptr) {
                model->layers[static_cast<std::size_t>(i)].collect_parameters(prefix, list);
            } else {
                DecoderLayer<T>::list_tensors(config, i, prefix, list);
            }
        }
        list.add("model.norm.weight", D, model ? &model->norm.weight : nullptr);
        if (!config.tie_word_embeddings) {
            list.add("lm_head.weight", V, D, model ? &model->lm_head : nullptr);
            list.items().back().output_head = true;
        }
    }

    /// X_0 = embed_tokens[tokens] into the state's residual stream; returns its first N rows [N x D].
    auto embed(const std::vector<Token>& tokens, ForwardState<T>& state) const {
        auto x = state.x.topRows(static_cast<Index>(tokens.size()));
        for (Index i = 0; i < x.rows(); ++i) embed_tokens.decode_rows(tokens[static_cast<std::size_t>(i)], 1, x.row(i));
        return x;
    }

    /// A warning for each 2-D weight stored in another format than the model's because its rows
    /// are not whole blocks (stored_format).
    void warn_unblocked_weights(const ParameterList<T>& list, std::vector<std::string>& warnings) const {
        if (!is_block_format(weights_)) return;
        for (const Parameter<T>& p : list) {
            if (p.shape.size() != 2 || can_store(weights_, p.shape[1])) continue;
            warnings.push_back(detail::concat("tensor \"", p.name, "\": its rows of ", p.shape[1],
                                              " weights are not whole ", kWeightBlock, "-weight blocks of ",
                                              to_string(weights_), "; stored as f32"));
        }
    }

    /// logits = RMSNorm(X_L) lm_head^T (lm_head = embed_tokens when tied).
    void project_logits(const ConstMatrixRef<T>& x, ForwardState<T>& state, MatrixRef<T> logits) const {
        auto normed = state.normed.topRows(x.rows());  // [N x D]
        norm(x, normed);
        linear<T>(normed, config_.tie_word_embeddings ? embed_tokens : lm_head, logits, state.context());
    }

    static const ModelConfig& validated(const ModelConfig& config) {
        config.validate();
        return config;
    }

    /// check_call, and logits [N x V].
    void check_call(const std::vector<Token>& tokens, const ForwardState<T>& state, const MatrixRef<T>& logits,
                    const char* function = "DecoderModel::forward") const {
        check_call(tokens, state, function);
        detail::require_shape(function, detail::named("logits", logits),
                              static_cast<Index>(tokens.size()), config_.vocab_size);
    }

    void check_call(const std::vector<Token>& tokens, const ForwardState<T>& state,
                    const char* function = "DecoderModel::forward") const {
        const Index n = static_cast<Index>(tokens.size());
        require<ShapeError>(n <= state.max_len(), function, ": ", n, " tokens but the ForwardState holds at most ",
                            state.max_len(), " (make_state(max_len))");
        require<ShapeError>(state.fits(config_), function,
                            ": the ForwardState was made for another configuration (use this model's make_state)");
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            require<ShapeError>(tokens[i] >= 0 && tokens[i] < config_.vocab_size, function, ": token ", i, " is ",
                                tokens[i], ", outside the vocabulary [0, ", config_.vocab_size, ")");
        }
    }

    ModelConfig config_;
    WeightFormat weights_ = WeightFormat::f32;
};

}  // namespace diffattn
