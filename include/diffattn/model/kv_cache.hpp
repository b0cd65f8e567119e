// The KV cache of one sequence for incremental decoding (docs/math.md §6): per layer the rotated keys and
// the values of every token so far, and per layer and head the DINT history (causal_mean: the
// running sum of O1 rows; causal_softmax: the running column sums of A1).
//
// Capacity policy: fixed. A cache is made for a maximum context `max_len` and allocates all its
// memory then; it never grows (a call that would pass max_len is a ShapeError naming the lengths,
// and leaves the cache as it was), so decoding allocates nothing. reset() empties it for the next
// sequence, keeping the memory. A max_len past ModelConfig::max_positions, or a cache larger than
// the machine's memory (core/memory_limit.hpp), is a ShapeError before anything is allocated.
//
// Memory (bytes_per_token(), T = float or double; widths as in AttentionConfig):
//   per token:  L (k_width + v_width) sizeof(T)      keys and values of every layer
//             + L H sizeof(T)                         dint causal_softmax: A1 column sums, per head
//             + d sizeof(T)                           the rotary table (cos and sin of d/2 pairs)
//   fixed:      L H dv sizeof(T)                      dint causal_mean: O1 row sums, per head
//   bytes() = max_len * bytes_per_token() + fixed.
//
// A cache belongs to one sequence and one caller at a time; the model stays const (see
// DecoderModel::forward).
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/memory_limit.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/kv_cache_view.hpp"
#include "diffattn/layers/rotary.hpp"
#include "diffattn/model/config.hpp"

#include <cstddef>
#include <vector>

namespace diffattn {

template <typename T>
class DecoderModel;

template <typename T>
class KvCache {
public:
    /// An empty cache for up to `max_len` tokens of models with this configuration. Throws what
    /// check(config, max_len) throws, before allocating.
    KvCache(const ModelConfig& config, Index max_len) : config_(checked(config, max_len)) {
        const AttentionConfig attention = config_.attention_config();
        const auto layers = static_cast<std::size_t>(config_.num_hidden_layers);
        keys_.reserve(layers);
        values_.reserve(layers);
        for (std::size_t i = 0; i < layers; ++i) {
            keys_.emplace_back(max_len, attention.k_width());
            values_.emplace_back(max_len, attention.v_width());
        }
        if (config_.attention == AttentionKind::dint) {
            dint_.resize(layers * static_cast<std::size_t>(config_.num_attention_heads));
            for (DintHistory<T>& history : dint_) {
                if (config_.dint_integral == DintIntegral::causal_softmax) {
                    history.a1_column_sum = Vector<T>::Zero(max_len);  // room for every key: never grows
                } else {
                    history.o1_row_sum = Vector<T>::Zero(attention.value_dim());
                }
            }
        }
        rotary_ = RotaryTable<T>(attention.rotary(), max_len);
    }

    /// The configuration the cache was made for.
    const ModelConfig& config() const { return config_; }
    /// Maximum number of tokens (prompt and generated) the cache holds.
    Index max_len() const { return rotary_.max_positions(); }
    /// Tokens cached so far: the position of the next token.
    Index length() const { return length_; }
    /// Tokens that still fit.
    Index remaining() const { return max_len() - length_; }
    bool empty() const { return length_ == 0; }

    /// Forgets every token (and the DINT histories) so the cache can serve a new sequence; keeps
    /// the memory.
    void reset() {
        length_ = 0;
        for (DintHistory<T>& history : dint_) history.reset();
    }

    /// The rotated keys of layer `layer`, [length x k_width] (valid until the cache changes).
    ConstMatrixRef<T> keys(Index layer) const { return keys_.at(static_cast<std::size_t>(layer)).topRows(length_); }
    /// The values of layer `layer`, [length x v_width].
    ConstMatrixRef<T> values(Index layer) const {
        return values_.at(static_cast<std::size_t>(layer)).topRows(length_);
    }

    /// Bytes held by the cache (keys, values, DINT histories, rotary table): max_len *
    /// bytes_per_token() + the fixed DINT causal_mean sums.
    std::size_t bytes() const {
        std::size_t scalars = 0;
        for (const RowMatrix<T>& m : keys_) scalars += static_cast<std::size_t>(m.size());
        for (const RowMatrix<T>& m : values_) scalars += static_cast<std::size_t>(m.size());
        for (const DintHistory<T>& h : dint_) {
            scalars += static_cast<std::size_t>(h.a1_column_sum.size() + h.o1_row_sum.size());
        }
        scalars += static_cast<std::size_t>(max_len() * rotary_.head_dim());  // cos and sin, d/2 each
        return scalars * sizeof(T);
    }

    /// Bytes per token of context for this cache's configuration (see bytes_per_token(config)).
    std::size_t bytes_per_token() const { return bytes_per_token(config_); }

    /// Bytes per token of context of a cache for `config` (the file comment's formula):
    /// L (k_width + v_width) sizeof(T) + [dint causal_softmax] L H sizeof(T) + d sizeof(T).
    static std::size_t bytes_per_token(const ModelConfig& config) {
        const AttentionConfig attention = config.attention_config();
        Index scalars = config.num_hidden_layers * (attention.k_width() + attention.v_width());
        if (config.attention == AttentionKind::dint && config.dint_integral == DintIntegral::causal_softmax) {
            scalars += config.num_hidden_layers * config.num_attention_heads;
        }
        scalars += attention.head_dim();
        return static_cast<std::size_t>(scalars) * sizeof(T);
    }

    /// Bytes of a cache of max_len tokens for `config`: max_len * bytes_per_token(config) + the
    /// fixed DINT causal_mean sums, in long double (no overflow for any max_len). Equals bytes().
    static long double bytes(const ModelConfig& config, Index max_len) {
        long double fixed = 0;
        if (config.attention == AttentionKind::dint && config.dint_integral != DintIntegral::causal_softmax) {
            fixed = static_cast<long double>(config.num_hidden_layers * config.num_attention_heads *
                                             config.attention_config().value_dim()) *
                    sizeof(T);
        }
        return static_cast<long double>(bytes_per_token(config)) * static_cast<long double>(max_len) + fixed;
    }

    /// Throws ConfigError for an invalid config; ShapeError for max_len outside [1,
    /// ModelConfig::max_positions] or a cache larger than memory_limit_bytes() (naming the bytes);
    /// OptionError for a model that cannot be decoded incrementally: an encoder ("causal": false)
    /// or DINT global_mean.
    static void check(const ModelConfig& config, Index max_len) {
        config.validate();
        require<ShapeError>(max_len > 0, "KvCache: max_len must be > 0, got ", max_len);
        require<ShapeError>(max_len <= ModelConfig::max_positions, "KvCache: max_len must be at most ",
                            ModelConfig::max_positions, " (ModelConfig::max_positions), got ", max_len, " (",
                            detail::byte_count_text(bytes(config, max_len)), " bytes)");
        require_kv_cache_support("KvCache", config.attention_config());
        require_memory(bytes(config, max_len), "KvCache: ", max_len, " tokens of ", bytes_per_token(config),
                       " bytes each");
    }

    /// True when a model of `config` can use this cache: the same layers, attention kind and
    /// geometry, DINT integral and rotary settings (rope_theta, style, scaling).
    bool compatible(const ModelConfig& config) const {
        const AttentionConfig a = config_.attention_config(), b = config.attention_config();
        return config.attention == config_.attention && config.num_hidden_layers == config_.num_hidden_layers &&
               a.n_heads == b.n_heads && a.head_dim() == b.head_dim() && a.k_width() == b.k_width() &&
               a.v_width() == b.v_width() && a.rotary() == b.rotary() &&
               config.causal == config_.causal &&
               (config.attention != AttentionKind::dint || config.dint_integral == config_.dint_integral);
    }

    /// Throws unless `function` can run n more tokens of a model of `config` through this cache:
    /// OptionError for a model that cannot use any KV cache (an encoder, DINT global_mean), and
    /// ShapeError for a cache made for another configuration or without room for n more tokens (it
    /// never grows). Const: a refused call leaves the cache as it was.
    void check_serves(const char* function, const ModelConfig& config, Index n) const {
        require_kv_cache_support(function, config.attention_config());
        require<ShapeError>(compatible(config), function,
                            ": the KvCache was made for another configuration (attention ", to_string(config_.attention),
                            ", ", config_.num_hidden_layers, " layers; this model: ", to_string(config.attention), ", ",
                            config.num_hidden_layers, " layers)");
        require<ShapeError>(n <= remaining(), function, ": the KvCache holds ", length_, " of at most ", max_len(),
                            " tokens, so ", n, " more (", length_ + n,
                            ") would pass its max_len; it does not grow: make it with a larger max_len, or reset() "
                            "it for a new sequence");
    }

private:
    template <typename>
    friend class DecoderModel;

    static const ModelConfig& checked(const ModelConfig& config, Index max_len) {
        check(config, max_len);
        return config;
    }

    /// Layer `layer`'s keys, values, DINT histories and the rotary table, for its attention module.
    KvCacheView<T> view(Index layer) {
        const auto i = static_cast<std::size_t>(layer);
        DintHistory<T>* histories =
            dint_.empty() ? nullptr : dint_.data() + i * static_cast<std::size_t>(config_.num_attention_heads);
        return KvCacheView<T>{MatrixRef<T>(keys_[i]), MatrixRef<T>(values_[i]), length_, histories, &rotary_};
    }

    /// Records n more cached tokens (after every layer has written them).
    void advance(Index n) { length_ += n; }

    ModelConfig config_;
    std::vector<RowMatrix<T>> keys_;    // L x [max_len x k_width]  rotated keys
    std::vector<RowMatrix<T>> values_;  // L x [max_len x v_width]  values
    std::vector<DintHistory<T>> dint_;  // dint: [L * H], layer i head h at i * H + h; else empty
    RotaryTable<T> rotary_;             // cos / sin of positions [0, max_len)
    Index length_ = 0;
};

}  // namespace diffattn
