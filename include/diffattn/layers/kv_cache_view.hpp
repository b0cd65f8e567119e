// One layer's share of a KV cache, as a multi-head attention module sees it (docs/math.md §6).
//
// The module writes the N rotated key rows and value rows of its call at rows [length, length + N)
// of every head (each head's rows are a block of their own: layers/head_blocks.hpp)
// and attends over rows [0, length + N) (the kernels' S >= N form, causal offset S - N = length);
// rotary positions start at `length`. It does not advance `length`: the owner of the cache
// (model/kv_cache.hpp) does that once every layer has run. Without a cache the module uses the
// same path over a view of its scratch with length 0, so prefill and decode share one code path.
//
// Which modules can use a KV cache at all is stated once, in require_kv_cache_support.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/head_blocks.hpp"
#include "diffattn/layers/rotary.hpp"

#include <Eigen/Core>

#include <string>

namespace diffattn {

/// Throws OptionError, naming `function`, unless modules of `config` can be decoded incrementally
/// with a KV cache (docs/math.md §6): an earlier token must never see a later one, which rules out DINT
/// global_mean (its integral averages A1 over all rows) and every encoder ("causal": false).
/// Checked where a cache meets a configuration: KvCache's constructor, DecoderModel::forward and
/// MultiHeadAttention::forward.
inline void require_kv_cache_support(const char* function, const AttentionConfig& config) {
    require<OptionError>(config.kind != AttentionKind::dint || config.dint_integral != DintIntegral::global_mean,
                         function, ": dint_integral global_mean averages A1 over all rows, future ones included, "
                         "so a model using it cannot be decoded incrementally (use causal_softmax or causal_mean)");
    require<OptionError>(config.causal, function, ": the model is a bidirectional encoder (\"causal\": false); "
                         "a KV cache needs a causal decoder, where earlier tokens never see later ones");
}

/// The scalar a KV cache stores its keys and values in (docs/math.md §6). f32: the model's own
/// scalar T (float, or double for a double model: "f32" means "same as the model's scalar");
/// f16 / bf16: Eigen::half / Eigen::bfloat16, half the bytes, converted back to T tile by tile
/// inside the kernels.
enum class KvPrecision { f32, f16, bf16 };

inline const char* to_string(KvPrecision precision) {
    switch (precision) {
        case KvPrecision::f32: return "f32";
        case KvPrecision::f16: return "f16";
        case KvPrecision::bf16: return "bf16";
    }
    return "unknown";
}

/// The storage scalar of `precision` for a model of scalar T.
template <typename T, KvPrecision precision>
using KvScalar = std::conditional_t<precision == KvPrecision::f16, Eigen::half,
                                    std::conditional_t<precision == KvPrecision::bf16, Eigen::bfloat16, T>>;

/// S: the scalar keys and values are stored in (T, Eigen::half or Eigen::bfloat16; KvScalar).
template <typename T, typename S = T>
struct KvCacheView {
    HeadBlocks<S> keys;              ///< k_width / d maps of [capacity x d]  rotated keys; rows [0, length)
                                     ///< hold earlier tokens (a cache's: in blocks of 16 keys,
                                     ///< kernels/key_rows.hpp)
    HeadBlocks<S> values;            ///< v_width / dv heads of [capacity x dv]  values, the same rows
    Index length;                    ///< tokens already cached = position of this call's first token
    DintHistory<T>* dint_histories;  ///< dint: [H] per-head histories with rows == length; else nullptr
    const RotaryTable<T>* rotary;    ///< cos / sin of positions [0, capacity) at least

    /// Rows the cache can hold: length + N must not exceed it.
    Index capacity() const { return keys.capacity; }
};

/// The rows of a call that continue one sequence: rows [first, first + rows) of the call's input
/// and the sequence's cache (keys and values stored as S). A call over several of them is a batched
/// step (docs/math.md §6): the projections run once over all rows, each sequence attends over its
/// own cache.
template <typename T, typename S = T>
struct SequenceRows {
    using Stored = S;
    KvCacheView<T, S> cache;
    Index first;
    Index rows;
};

/// Throws ShapeError, naming `function`, if two of the `count` caches share their key storage: a
/// batched step over the same sequence twice would write one cache row twice (the second token
/// overwriting the first). Pairwise, so meant for batches of a few hundred sequences at most.
template <typename Keys>
void require_distinct_caches(const char* function, Index count, const Keys& keys_of) {
    for (Index a = 0; a < count; ++a) {
        for (Index b = a + 1; b < count; ++b) {
            require<ShapeError>(keys_of(a) != keys_of(b), function, ": sequences ", a, " and ", b,
                                " of the batch use the same KV cache (each sequence needs its own)");
        }
    }
}

}  // namespace diffattn
