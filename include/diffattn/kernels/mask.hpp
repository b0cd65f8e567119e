// Mask policies (docs/math.md §1).
//
// Every mask diffattn supports lets query n see a prefix of the keys: [0, key_end(n)), with
// key_end non-decreasing in n. A policy therefore answers both questions a tiled kernel asks
// (as in CUTLASS FMHA): which key tiles a block of queries visits (those below key_end of its
// last row) and which tiles need element masking (those reaching past key_end of its first row);
// every other tile takes the fast, unmasked path.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/options.hpp"

#include <algorithm>

namespace diffattn {

/// Every query sees the first `valid_len` keys.
struct NoMask {
    Index valid_len;  ///< keys [0, valid_len) exist (key padding)
    Index key_end(Index /*query*/) const { return valid_len; }
};

/// Query n sees key j iff j <= n + offset and j < valid_len, offset = S - N (docs/math.md §1).
struct CausalMask {
    Index offset;     ///< S - N: keys already in the cache before the first query
    Index valid_len;  ///< keys [0, valid_len) exist (key padding)
    Index key_end(Index query) const { return std::min(valid_len, query + offset + 1); }
};

/// Keys a query block [q_begin, q_end) visits: [0, block_visit_end).
template <typename Mask>
Index block_visit_end(const Mask& mask, Index /*q_begin*/, Index q_end) {
    return mask.key_end(q_end - 1);
}

/// Keys [0, block_unmasked_end) are visible to every query of a block starting at q_begin.
template <typename Mask>
Index block_unmasked_end(const Mask& mask, Index q_begin) {
    return mask.key_end(q_begin);
}

/// Number of keys of the tile [k_begin, k_begin + k_count) that `query` may see (a prefix of the tile).
template <typename Mask>
Index visible_keys_in_tile(const Mask& mask, Index query, Index k_begin, Index k_count) {
    return std::clamp<Index>(mask.key_end(query) - k_begin, 0, k_count);
}

/// The one place a runtime MaskKind becomes a compile-time mask policy: calls f(NoMask) or f(CausalMask).
template <typename F>
decltype(auto) dispatch_mask(MaskKind kind, Index seq_len_q, Index seq_len_kv, Index valid_len, F&& f) {
    switch (kind) {
        case MaskKind::none:
            return f(NoMask{valid_len});
        case MaskKind::causal:
            return f(CausalMask{seq_len_kv - seq_len_q, valid_len});
    }
    throw OptionError("dispatch_mask: unknown MaskKind");
}

}  // namespace diffattn
