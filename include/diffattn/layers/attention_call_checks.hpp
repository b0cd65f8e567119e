// The argument checks of MultiHeadAttention::forward (layers/multi_head_attention.hpp): the input
// and output shapes, the scratch, the rows of each sequence of a batched call and its KV cache
// (docs/math.md §6). Each throws ShapeError or OptionError naming MultiHeadAttention::forward and
// the shapes, before the call writes anything, so a refused call changes no cache; the one
// exception, refuse_cache_overflow, reports what a cache write found (an entry beyond f16's range).
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/attention_scratch.hpp"
#include "diffattn/layers/kv_cache_view.hpp"

#include <type_traits>

namespace diffattn::detail {

inline constexpr const char* kAttentionForward = "MultiHeadAttention::forward";

/// x and out [N x D] of a module of `config`, out not aliasing x; a scratch of this geometry
/// (`factored`: a Shared DIFF module projecting through its factors) with room for N rows.
template <typename T>
void check_attention_call(const AttentionConfig& config, bool factored, const ConstMatrixRef<T>& x,
                          const MatrixRef<T>& out, const AttentionScratch<T>& scratch) {
    require_shape(kAttentionForward, named("x", x), x.rows(), config.d_model);
    require_shape(kAttentionForward, named("out", out), x.rows(), config.d_model);
    require_no_alias(kAttentionForward, "out", out, "x", x);
    require<ShapeError>(x.rows() <= scratch.max_len(), kAttentionForward, ": x has ", x.rows(),
                        " tokens but the scratch holds at most ", scratch.max_len());
    require<ShapeError>(scratch.fits(config, factored), kAttentionForward,
                        ": the scratch was built for another attention geometry (make it from this module's "
                        "config())");
}

/// A KV cache that a module of `config` can write n more rows to: its heads and widths, its room,
/// its rotary table, and a DINT module's histories.
template <typename T, typename S>
void check_attention_cache(const AttentionConfig& config, const KvCacheView<T, S>& cache, Index n) {
    require_kv_cache_support(kAttentionForward, config);
    require<ShapeError>(cache.keys.heads == config.n_key_maps() && cache.keys.width == config.head_dim() &&
                            cache.values.heads == config.n_value_heads() && cache.values.width == config.value_dim() &&
                            cache.values.capacity == cache.keys.capacity,
                        kAttentionForward, ": the KV cache has ", cache.keys.heads, " key maps of [",
                        cache.keys.capacity, " x ", cache.keys.width, "] and ", cache.values.heads,
                        " value heads of [", cache.values.capacity, " x ", cache.values.width,
                        "] but this module needs ", config.n_key_maps(), " of width ", config.head_dim(), " and ",
                        config.n_value_heads(), " of width ", config.value_dim(), ", with equal row counts");
    require<ShapeError>(cache.length >= 0 && n <= cache.capacity() - cache.length, kAttentionForward,
                        ": the KV cache holds ", cache.length, " of at most ", cache.capacity(), " tokens; ", n,
                        " more do not fit");
    require<ShapeError>(cache.rotary != nullptr && cache.rotary->spec() == config.rotary() &&
                            cache.rotary->max_positions() >= cache.length + n,
                        kAttentionForward, ": the KV cache's rotary table does not cover positions [",
                        cache.length, ", ", cache.length + n, ") of maps of width ", config.head_dim(),
                        " with this module's rotary settings (rope_theta, style, scaling)");
    require<OptionError>(config.kind != AttentionKind::dint || cache.dint_histories != nullptr, kAttentionForward,
                         ": a dint module with a KV cache needs the per-head DintHistory of the cached rows");
}

/// The sequences of a call of n rows: their rows tile [0, n) in order; with caches (cached), each
/// cache fits a module of `config` with room for its rows, and no two share storage.
template <typename Sequences>
void check_attention_sequences(const AttentionConfig& config, Index count, const Sequences& sequence, Index n,
                               bool cached) {
    require<ShapeError>(count >= 1, kAttentionForward, ": a call needs at least one sequence, got ", count);
    Index next = 0;
    for (Index s = 0; s < count; ++s) {
        const auto rows = sequence(s);
        require<ShapeError>(rows.rows >= 0 && rows.first == next, kAttentionForward, ": sequence ", s,
                            " has rows [", rows.first, ", ", rows.first + rows.rows,
                            ") but its rows must start at ", next, " (after the sequences before it)");
        next += rows.rows;
        if (cached) check_attention_cache(config, rows.cache, rows.rows);
    }
    require<ShapeError>(next == n, kAttentionForward, ": the sequences hold ", next, " rows but x has ", n);
    require_distinct_caches(kAttentionForward, count, [&](Index s) { return sequence(s).cache.keys.data; });
}

/// Throws OptionError for a call whose keys (row `key_row` of the call, -1: none) or values
/// (`value_row`) hold a finite entry beyond what the cache's scalar S holds (f16: 65504), which the
/// cache write turned into an infinity (docs/kv_cache.md): the layer and the token's position
/// (`length` + the row) named. Not a check before the call: the cache rows are written (the
/// model's forward then empties the cache, model/decoder_model.hpp).
template <typename S>
[[noreturn]] void refuse_cache_overflow(const AttentionConfig& config, Index length, Index key_row, Index value_row) {
    const bool keys = key_row >= 0 && (value_row < 0 || key_row <= value_row);
    const char* scalar =
        std::is_same_v<S, Eigen::half> ? "f16" : std::is_same_v<S, Eigen::bfloat16> ? "bf16" : "its scalar";
    throw OptionError(concat(kAttentionForward, ": layer ", config.depth, "'s ", keys ? "key" : "value", " at position ",
                             length + (keys ? key_row : value_row), " has an entry beyond the range of ", scalar,
                             " (the KV cache's precision), which would store it as infinity; use a KV cache of f32 or "
                             "bf16 (float's range)"));
}

}  // namespace diffattn::detail
