// The keys and values of every layer of a KvCache (model/kv_cache.hpp) in the scalar it stores them
// in, head-major (layers/head_blocks.hpp): one matrix per layer for the keys, one for the values.
// Their pages ask for 2 MB huge pages (core/huge_pages.hpp) when allocated, before anything is
// written, and so do a copy's: every decode step streams them all. A cache's memory is allocated
// whole when it is made (its capacity policy), and with huge pages its first tokens bring in whole
// 2 MB pages, so its resident memory nears bytes() sooner than with 4 KB pages.
#pragma once

#include "diffattn/core/huge_pages.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/layers/attention_config.hpp"

#include <cstddef>
#include <vector>

namespace diffattn::detail {

/// The keys and values of every layer of a KvCache in the stored scalar S.
template <typename S>
struct KvStore {
    // Head-major (layers/head_blocks.hpp): map b's rows at rows [b max_len, (b+1) max_len).
    std::vector<RowMatrix<S>> keys;    // L x [n_key_maps max_len x d]  rotated keys
    std::vector<RowMatrix<S>> values;  // L x [n_value_heads max_len x dv]  values

    KvStore() = default;
    KvStore(KvStore&&) noexcept = default;
    KvStore& operator=(KvStore&&) noexcept = default;
    /// A copy whose matrices ask for huge pages as allocate()'s do (a batch's caches are often
    /// copies of one prefilled cache).
    KvStore(const KvStore& other) : keys(advised_copies(other.keys)), values(advised_copies(other.values)) {}
    KvStore& operator=(const KvStore& other) { return *this = KvStore(other); }

    /// Each layer's keys and values, uninitialised, asking for huge pages (core/huge_pages.hpp):
    /// every decode step streams them all.
    void allocate(Index layers, Index max_len, const AttentionConfig& attention) {
        keys.reserve(static_cast<std::size_t>(layers));
        values.reserve(static_cast<std::size_t>(layers));
        for (Index i = 0; i < layers; ++i) {
            keys.push_back(huge_page_matrix<RowMatrix<S>>(attention.n_key_maps() * max_len, attention.head_dim()));
            values.push_back(
                huge_page_matrix<RowMatrix<S>>(attention.n_value_heads() * max_len, attention.value_dim()));
        }
    }
    std::size_t bytes() const {
        std::size_t entries = 0;
        for (const RowMatrix<S>& m : keys) entries += static_cast<std::size_t>(m.size());
        for (const RowMatrix<S>& m : values) entries += static_cast<std::size_t>(m.size());
        return entries * sizeof(S);
    }

private:
    static std::vector<RowMatrix<S>> advised_copies(const std::vector<RowMatrix<S>>& from) {
        std::vector<RowMatrix<S>> copies;
        copies.reserve(from.size());
        for (const RowMatrix<S>& m : from) {
            copies.push_back(huge_page_matrix<RowMatrix<S>>(m.rows(), m.cols()));
            copies.back() = m;
        }
        return copies;
    }
};

}  // namespace diffattn::detail
