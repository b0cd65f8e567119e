// The KV cache of one sequence for incremental decoding (docs/math.md §6): per layer the rotated keys and
// the values of every token so far, and per layer and head the DINT history (causal_mean: the
// running sum of O1 rows; causal_softmax: the running column sums of A1).
//
// Capacity policy: fixed. A cache is made for a maximum context `max_len` and allocates all its
// memory then; it never grows (a call that would pass max_len is a ShapeError naming the lengths,
// and leaves the cache as it was), so decoding allocates nothing. reset() empties it for the next
// sequence, keeping the memory. A max_len past ModelConfig::max_positions, or a cache larger than
// the machine's memory (core/memory_limit.hpp), is a ShapeError before anything is allocated. The
// keys and values ask for 2 MB pages (model/kv_store.hpp), so the memory the cache occupies grows
// toward bytes() in steps of 2 MB, not 4 KB, as tokens arrive.
//
// Stored precision (KvPrecision, chosen per cache): keys and values as the model's scalar T
// ("f32", the default), or as Eigen::half / Eigen::bfloat16 at half the bytes, widened to T tile by
// tile inside the kernels (docs/math.md §6). The DINT histories and the rotary table stay in T.
//
// Memory (bytes_per_token(), T = float or double; widths as in AttentionConfig; E the bytes of a
// stored key or value: sizeof(T) for f32, 2 for f16 and bf16):
//   per token:  L (k_width + v_width) E              keys and values of every layer
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
#include "diffattn/kernels/key_rows.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/kv_cache_view.hpp"
#include "diffattn/layers/rotary.hpp"
#include "diffattn/model/config.hpp"
#include "diffattn/model/kv_store.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace diffattn {

template <typename T>
class DecoderModel;

template <typename T>
class KvCache {
public:
    /// An empty cache for up to `max_len` tokens of models with this configuration, storing keys
    /// and values in `precision`. Throws what check(config, max_len, precision) throws, before
    /// allocating.
    KvCache(const ModelConfig& config, Index max_len, KvPrecision precision = KvPrecision::f32)
        : config_(checked(config, max_len, precision)), precision_(precision) {
        const AttentionConfig attention = config_.attention_config();
        visit_store([&](auto& store) { store.allocate(config_.num_hidden_layers, max_len, attention); });
        const auto layers = static_cast<std::size_t>(config_.num_hidden_layers);
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

    /// A move, constructing or assigning, leaves `other` holding no tokens and no room (length() and
    /// max_len() 0): its storage went with the move, so nothing may read the tokens it counted.
    KvCache(KvCache&& other) noexcept
        : config_(std::move(other.config_)), precision_(other.precision_), f32_(std::move(other.f32_)),
          f16_(std::move(other.f16_)), bf16_(std::move(other.bf16_)), dint_(std::move(other.dint_)),
          rotary_(std::move(other.rotary_)), length_(std::exchange(other.length_, 0)) {}
    KvCache& operator=(KvCache&& other) noexcept {
        if (this == &other) return *this;
        config_ = std::move(other.config_);
        precision_ = other.precision_;
        f32_ = std::move(other.f32_);
        f16_ = std::move(other.f16_);
        bf16_ = std::move(other.bf16_);
        dint_ = std::move(other.dint_);
        rotary_ = std::exchange(other.rotary_, RotaryTable<T>{});  // Eigen's move assignment swaps
        length_ = std::exchange(other.length_, 0);
        return *this;
    }
    KvCache(const KvCache&) = default;
    KvCache& operator=(const KvCache&) = default;

    /// The configuration the cache was made for.
    const ModelConfig& config() const { return config_; }
    /// The scalar keys and values are stored in.
    KvPrecision precision() const { return precision_; }
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

    /// A copy of the rotated keys of layer `layer`, [length x k_width] with the maps side by side as
    /// the key projection lays them out, of a cache storing T (KvPrecision::f32; else OptionError:
    /// see stored_keys). The cache itself holds each map's keys in blocks of 16 (layers/head_blocks.hpp).
    RowMatrix<T> keys(Index layer) const { return stored_keys<T>(layer); }
    /// A copy of the values of layer `layer`, [length x v_width], of a cache storing T.
    RowMatrix<T> values(Index layer) const { return stored_values<T>(layer); }
    /// As keys() in the stored scalar S (KvScalar<T, precision()>; another S: OptionError).
    template <typename S>
    RowMatrix<S> stored_keys(Index layer) const {
        const Store<S>& store = stored<S>("KvCache::keys");
        return key_blocks(store.keys(layer)).template gather<S>(length_);
    }
    /// As values() in the stored scalar S.
    template <typename S>
    RowMatrix<S> stored_values(Index layer) const {
        const Store<S>& store = stored<S>("KvCache::values");
        return head_blocks(store.values(layer)).template gather<S>(length_);
    }

    /// Bytes held by the cache (keys, values, DINT histories, rotary table): bytes(config(),
    /// max_len(), precision()).
    std::size_t bytes() const {
        std::size_t scalars = 0;
        for (const DintHistory<T>& h : dint_) {
            scalars += static_cast<std::size_t>(h.a1_column_sum.size() + h.o1_row_sum.size());
        }
        scalars += static_cast<std::size_t>(max_len() * rotary_.head_dim());  // cos and sin, d/2 each
        std::size_t stored_bytes = 0;
        visit_store([&](const auto& store) { stored_bytes = store.bytes(); });
        return scalars * sizeof(T) + stored_bytes;
    }

    /// Bytes per token of context for this cache's configuration and precision (see
    /// bytes_per_token(config, precision)).
    std::size_t bytes_per_token() const { return bytes_per_token(config_, precision_); }

    /// Bytes of one stored key or value entry: sizeof(T) for f32, 2 for f16 and bf16.
    static std::size_t stored_scalar_bytes(KvPrecision precision) {
        return precision == KvPrecision::f32 ? sizeof(T) : sizeof(Eigen::half);
    }

    /// Bytes per token of context of a cache for `config` (the file comment's formula):
    /// L (k_width + v_width) E + [dint causal_softmax] L H sizeof(T) + d sizeof(T).
    static std::size_t bytes_per_token(const ModelConfig& config, KvPrecision precision = KvPrecision::f32) {
        const AttentionConfig attention = config.attention_config();
        const Index stored = config.num_hidden_layers * (attention.k_width() + attention.v_width());
        Index scalars = attention.head_dim();
        if (config.attention == AttentionKind::dint && config.dint_integral == DintIntegral::causal_softmax) {
            scalars += config.num_hidden_layers * config.num_attention_heads;
        }
        return static_cast<std::size_t>(stored) * stored_scalar_bytes(precision) +
               static_cast<std::size_t>(scalars) * sizeof(T);
    }

    /// Bytes of a cache of max_len tokens for `config`: max_len * bytes_per_token(config, precision)
    /// + the keys of the up to 15 tokens that round each key map up to whole blocks of 16
    /// (kernels/key_rows.hpp) + the fixed DINT causal_mean sums, in long double (no overflow for any
    /// max_len). Equals bytes().
    static long double bytes(const ModelConfig& config, Index max_len, KvPrecision precision = KvPrecision::f32) {
        long double fixed = 0;
        if (config.attention == AttentionKind::dint && config.dint_integral != DintIntegral::causal_softmax) {
            fixed = static_cast<long double>(config.num_hidden_layers * config.num_attention_heads *
                                             config.attention_config().value_dim()) *
                    sizeof(T);
        }
        const Index key_width = config.num_hidden_layers * config.attention_config().k_width();
        fixed += static_cast<long double>(detail::key_block_padding(max_len) * key_width) *
                 static_cast<long double>(stored_scalar_bytes(precision));
        return static_cast<long double>(bytes_per_token(config, precision)) * static_cast<long double>(max_len) +
               fixed;
    }

    /// Throws ConfigError for an invalid config; ShapeError for max_len outside [1,
    /// ModelConfig::max_positions] or a cache larger than memory_limit_bytes() (naming the bytes);
    /// OptionError for a model that cannot be decoded incrementally: an encoder ("causal": false)
    /// or DINT global_mean; OptionError for a precision outside KvPrecision.
    static void check(const ModelConfig& config, Index max_len, KvPrecision precision = KvPrecision::f32) {
        require<OptionError>(precision == KvPrecision::f32 || precision == KvPrecision::f16 ||
                                 precision == KvPrecision::bf16,
                             "KvCache: unknown KvPrecision value ", static_cast<int>(precision));
        config.validate();
        require<ShapeError>(max_len > 0, "KvCache: max_len must be > 0, got ", max_len);
        require<ShapeError>(max_len <= ModelConfig::max_positions, "KvCache: max_len must be at most ",
                            ModelConfig::max_positions, " (ModelConfig::max_positions), got ", max_len, " (",
                            detail::byte_count_text(bytes(config, max_len, precision)), " bytes)");
        require_kv_cache_support("KvCache", config.attention_config());
        require_memory(bytes(config, max_len, precision), "KvCache: ", max_len, " tokens of ",
                       bytes_per_token(config, precision), " bytes each");
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

    /// The keys and values of every layer in the stored scalar S (model/kv_store.hpp).
    template <typename S>
    using Store = detail::KvStore<S>;

    static const ModelConfig& checked(const ModelConfig& config, Index max_len, KvPrecision precision) {
        check(config, max_len, precision);
        return config;
    }

    /// Calls f(store) with the store of this cache's precision (the one dispatch on it).
    template <typename F>
    void visit_store(F&& f) { visit_store(*this, f); }
    template <typename F>
    void visit_store(F&& f) const { visit_store(*this, f); }
    template <typename Self, typename F>
    static void visit_store(Self& self, F& f) {
        switch (self.precision_) {
            case KvPrecision::f32: f(self.f32_); return;
            case KvPrecision::f16: f(self.f16_); return;
            case KvPrecision::bf16: f(self.bf16_); return;
        }
    }

    /// The store of scalar S; OptionError naming `function` unless the cache stores S.
    template <typename S>
    const Store<S>& stored(const char* function) const {
        const Store<S>* store = nullptr;
        visit_store([&](const auto& s) {
            if constexpr (std::is_same_v<const Store<S>&, decltype(s)>) store = &s;
        });
        require<OptionError>(store != nullptr, function, ": the cache stores its keys and values as ",
                             to_string(precision_), ", not in the scalar asked for");
        return *store;
    }

    /// Calls f(view) with layer `layer`'s view (view<S>) in the stored scalar S.
    template <typename F>
    void with_view(Index layer, F&& f) {
        visit_store([&](auto& store) {
            using S = typename std::decay_t<decltype(store)>::Scalar;
            KvCacheView<T, S> layer_view = view<S>(layer);
            f(layer_view);
        });
    }

    /// Layer `layer`'s keys, values, DINT histories and the rotary table, for its attention module,
    /// with the keys and values in S, the scalar this cache stores (the caller has dispatched on
    /// precision(): with_view, or a batch whose caches share one precision).
    template <typename S>
    KvCacheView<T, S> view(Index layer) {
        const auto i = static_cast<std::size_t>(layer);
        DintHistory<T>* histories =
            dint_.empty() ? nullptr : dint_.data() + i * static_cast<std::size_t>(config_.num_attention_heads);
        Store<S>& store = store_of<S>();
        return KvCacheView<T, S>{key_blocks(store.keys(layer)), head_blocks(store.values(layer)), length_, histories,
                                 &rotary_};
    }

    /// The store of scalar S (T, Eigen::half or Eigen::bfloat16).
    template <typename S>
    Store<S>& store_of() {
        if constexpr (std::is_same_v<S, T>) {
            return f32_;
        } else if constexpr (std::is_same_v<S, Eigen::half>) {
            return f16_;
        } else {
            static_assert(std::is_same_v<S, Eigen::bfloat16>, "a KvCache stores T, Eigen::half or Eigen::bfloat16");
            return bf16_;
        }
    }

    /// A layer's values (Store) as its head-major blocks of max_len rows each.
    template <typename Stored>
    auto head_blocks(Stored&& m) const {
        return HeadBlocks<std::remove_reference_t<decltype(*m.data())>>::head_major(m, m.rows() / max_len());
    }
    /// A layer's keys (Store) as its maps of max_len keys, each in blocks of 16 (kernels/key_rows.hpp).
    template <typename Stored>
    auto key_blocks(Stored&& m) const {
        return HeadBlocks<std::remove_reference_t<decltype(*m.data())>>::blocked_keys(
            m.data(), config_.attention_config().n_key_maps(), m.cols(), max_len());
    }

    /// Records n more cached tokens (after every layer has written them).
    void advance(Index n) { length_ += n; }

    ModelConfig config_;
    KvPrecision precision_;
    Store<T> f32_;                      // the store of precision_; the other two stay empty
    Store<Eigen::half> f16_;
    Store<Eigen::bfloat16> bf16_;
    std::vector<DintHistory<T>> dint_;  // dint: [L * H], layer i head h at i * H + h; else empty
    RotaryTable<T> rotary_;             // cos / sin of positions [0, max_len)
    Index length_ = 0;
};

}  // namespace diffattn
