// The keys and values of every layer of a KvCache (model/kv_cache.hpp) in the scalar it stores them
// in: one buffer, per layer the keys (n_key_maps maps of whole_key_blocks(max_len) keys of d, each
// map in blocks of 16 keys: kernels/key_rows.hpp) then the values [n_value_heads max_len x dv],
// head-major (layers/head_blocks.hpp). One buffer rather than one matrix per
// layer so that nearly all of it lies in whole 2 MB pages, which it asks for (core/huge_pages.hpp)
// when allocated, before anything is written, and so does a copy: every decode step streams it
// all (docs/benchmarks.md, "The KV cache on huge pages").
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/huge_pages.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/key_rows.hpp"
#include "diffattn/layers/attention_config.hpp"

#include <cstddef>
#include <utility>

namespace diffattn::detail {

template <typename S>
class KvStore {
public:
    using Scalar = S;

    KvStore() = default;
    /// A move leaves `other` empty (no buffer, no layers), not with sizes that describe a buffer it
    /// no longer has (Eigen's move assignment swaps buffers).
    KvStore(KvStore&& other) noexcept { *this = std::move(other); }
    KvStore& operator=(KvStore&& other) noexcept {
        if (this == &other) return *this;
        buffer_ = std::exchange(other.buffer_, Vector<S>());
        layers_ = std::exchange(other.layers_, 0);
        key_rows_ = std::exchange(other.key_rows_, 0);
        value_rows_ = std::exchange(other.value_rows_, 0);
        d_ = std::exchange(other.d_, 0);
        dv_ = std::exchange(other.dv_, 0);
        return *this;
    }
    /// A copy whose buffer asks for huge pages as allocate()'s does (a batch's caches are often
    /// copies of one prefilled cache).
    KvStore(const KvStore& other)
        : buffer_(huge_page_matrix<Vector<S>>(other.buffer_.size(), 1)),
          layers_(other.layers_),
          key_rows_(other.key_rows_),
          value_rows_(other.value_rows_),
          d_(other.d_),
          dv_(other.dv_) {
        buffer_ = other.buffer_;
    }
    KvStore& operator=(const KvStore& other) { return *this = KvStore(other); }

    /// Room for `layers` layers' keys and values, uninitialised.
    void allocate(Index layers, Index max_len, const AttentionConfig& attention) {
        layers_ = layers;
        key_rows_ = attention.n_key_maps() * whole_key_blocks(max_len);
        value_rows_ = attention.n_value_heads() * max_len;
        d_ = attention.head_dim();
        dv_ = attention.value_dim();
        buffer_ = huge_page_matrix<Vector<S>>(layers * layer_entries(), 1);
    }

    Index layers() const { return layers_; }
    /// Layer `layer`'s keys as [n_key_maps whole_key_blocks(max_len) x d] entries (blocked_keys of
    /// head_blocks.hpp reads them); ShapeError naming it unless 0 <= layer < layers().
    Eigen::Map<RowMatrix<S>> keys(Index layer) { return {buffer_.data() + keys_at(layer), key_rows_, d_}; }
    Eigen::Map<const RowMatrix<S>> keys(Index layer) const {
        return {buffer_.data() + keys_at(layer), key_rows_, d_};
    }
    /// Layer `layer`'s values [n_value_heads max_len x dv].
    Eigen::Map<RowMatrix<S>> values(Index layer) { return {buffer_.data() + values_at(layer), value_rows_, dv_}; }
    Eigen::Map<const RowMatrix<S>> values(Index layer) const {
        return {buffer_.data() + values_at(layer), value_rows_, dv_};
    }

    std::size_t bytes() const { return static_cast<std::size_t>(buffer_.size()) * sizeof(S); }

private:
    /// Entries of one layer: its keys, then its values.
    Index layer_entries() const { return key_rows_ * d_ + value_rows_ * dv_; }
    /// Where layer `layer`'s keys start in the buffer.
    Index keys_at(Index layer) const {
        require<ShapeError>(layers_ > 0, "KvCache: it holds no storage (it was moved from)");
        require<ShapeError>(layer >= 0 && layer < layers_, "KvCache: layer ", layer, " is not one of its ", layers_,
                            " layers");
        return layer * layer_entries();
    }
    Index values_at(Index layer) const { return keys_at(layer) + key_rows_ * d_; }

    Vector<S> buffer_;  // layer i's keys, then its values, at i layer_entries()
    Index layers_ = 0, key_rows_ = 0, value_rows_ = 0, d_ = 0, dv_ = 0;
};

}  // namespace diffattn::detail
