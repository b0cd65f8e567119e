// The cases of the kernel tests: one call's shape and options (KernelCase) and its error bound, the
// lengths at the tiles' edges, key padding, the fast-vs-reference sweep (kernel_cases) and the
// runners of decode calls on 1 to 3 threads.
#pragma once

#include <catch2/catch.hpp>

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/tiling.hpp"

#include "spec7_accuracy.hpp"
#include "test_random.hpp"
#include "../sanitized_repetitions.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace diffattn::test {

/// Debug builds (no NDEBUG: Eigen unoptimised, asserts on) run the references ~30x slower, so the
/// randomised sweeps divide their cost budgets by this factor there (Release runs everything).
#ifdef NDEBUG
inline constexpr Index kDebugCostDivisor = 1;
#else
inline constexpr Index kDebugCostDivisor = 4;
#endif

/// One shape and option combination of a kernel call.
struct KernelCase {
    Index seq_len_q = 1;   // N
    Index seq_len_kv = 1;  // S >= N
    Index head_dim = 1;    // d
    Index value_dim = 1;   // dv
    MaskKind mask = MaskKind::causal;
    std::optional<Index> valid_len;
    std::optional<double> scale;
    int threads = 1;       // AttentionOptions::threads (query blocks on several threads)
    /// Key rows scaled by a ramp over the keys (random_diff_inputs): > 0, key j by 1 + ramp j / (S - 1),
    /// so a row's running max rises from key tile to key tile; < 0, the same ramp from the last key
    /// to the first, so the first tiles hold the max. 0: keys in [-1, 1].
    double key_ramp = 0;

    /// The largest factor of the ramp: keys lie in [-key_magnitude(), key_magnitude()].
    double key_magnitude() const { return 1 + std::abs(key_ramp); }

    AttentionOptions options() const {
        AttentionOptions o;
        o.mask = mask;
        o.valid_len = valid_len;
        o.scale = scale;
        o.threads = threads;
        return o;
    }

    std::string describe() const {
        std::ostringstream s;
        s << "N=" << seq_len_q << " S=" << seq_len_kv << " d=" << head_dim << " dv=" << value_dim
          << " mask=" << (mask == MaskKind::causal ? "causal" : "none");
        if (valid_len) s << " valid_len=" << *valid_len;
        if (scale) s << " scale=" << *scale;
        if (threads != 1) s << " threads=" << threads;
        if (key_ramp != 0) s << " key_ramp=" << key_ramp;
        return s.str();
    }
};

/// forward_error_bound for a kernel that combines `maps` attention maps of the case's shape, with
/// inputs in [-1, 1] but for the keys' ramp (so logits of at most scale * d * key_magnitude()).
template <typename T>
long double case_error_bound(const KernelCase& c, int maps) {
    const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    return maps * forward_error_bound<T>(c.head_dim, c.seq_len_kv, scale * c.head_dim * c.key_magnitude(), 1);
}

/// DINT's integral modes (docs/math.md §2.3), and those valid under a causal mask.
inline constexpr DintIntegral kDintIntegrals[] = {DintIntegral::causal_softmax, DintIntegral::causal_mean,
                                                  DintIntegral::global_mean};
inline constexpr DintIntegral kCausalDintIntegrals[] = {DintIntegral::causal_softmax, DintIntegral::causal_mean};

/// A case of the differential kernels' "several query groups" tests: N x S spanning more than one
/// query group (kGroupRows rows), small maps (d 16, dv 32) so the reference stays cheap.
inline KernelCase multi_group_case(Index seq_len_q, Index seq_len_kv, MaskKind mask) {
    KernelCase c;
    c.seq_len_q = seq_len_q;
    c.seq_len_kv = seq_len_kv;
    c.head_dim = 16;
    c.value_dim = 32;
    c.mask = mask;
    return c;
}

/// Lengths that matter to a tiled kernel with tile `tile`: tiny, odd, and just below / at / above
/// one and two multiples of the tile.
inline std::vector<Index> tile_edge_lengths(Index tile) {
    std::vector<Index> lengths{1, 2, 7, tile - 1, tile, tile + 1, 2 * tile - 1, 2 * tile, 2 * tile + 1, 3 * tile + 5};
    std::vector<Index> positive;
    for (Index n : lengths) {
        if (n >= 1) positive.push_back(n);
    }
    return positive;
}

/// Draws a key-padding choice for S keys and N queries: unset, 0, 1, a value below S - N + 1
/// (so early queries see fewer keys than the causal mask allows), S - N + 1, S - 1, S, or random.
inline std::optional<Index> random_valid_len(std::mt19937& rng, Index seq_len_q, Index seq_len_kv) {
    const Index cached = seq_len_kv - seq_len_q;
    switch (uniform_index(rng, 0, 9)) {
        case 0:
            return Index{0};
        case 1:
            return Index{1};
        case 2:
            return cached > 0 ? uniform_index(rng, 1, cached) : seq_len_kv;
        case 3:
            return std::min(seq_len_kv, cached + 1);
        case 4:
            return std::max<Index>(0, seq_len_kv - 1);
        case 5:
            return seq_len_kv;
        case 6:
            return uniform_index(rng, 0, seq_len_kv);
        default:
            return std::nullopt;
    }
}

/// Runs check(case, workspace) on `c` with 1, 2 and 3 threads: with 2, `workspace` (reused across
/// calls of every size: it grows to the most threads), else none.
template <typename T, typename Check>
void check_on_1_to_3_threads(KernelCase c, AttentionWorkspace<T>& workspace, Check& check) {
    for (int threads : {1, 2, 3}) {
        c.threads = threads;
        INFO(c.describe());
        check(c, threads == 2 ? &workspace : nullptr);
    }
}

/// Runs check(case, workspace) on random decode calls (docs/math.md §6): fewer than
/// kMinPackedRows query rows after a KV cache of 0 to just past 2 of their longest key tiles
/// (kFewRowsKeyTile: 3 tiles, and 9 of the half caches' shorter ones; the DINT references cost S^2),
/// so their keys split into several runs (kernels/key_split.hpp), on 1, 2 and 3 threads, with both
/// masks and sometimes key padding; `count` shapes (half as many, at least 6, in a sanitizer build:
/// sanitized_repetitions.hpp), 3 thread counts each. Every other call gets one workspace reused
/// across all of them (it grows to the most threads), the others none.
template <typename T, typename Check>
void for_each_decode_case(std::mt19937& rng, int count, Check&& check) {
    AttentionWorkspace<T> workspace;
    // 6 shapes hold each option of the cycle below: no cache (i % 4 == 0: 0, 4), no mask
    // (i % 3 == 2: 2, 5) and key padding (i % 5 == 4: 4).
    count = random_repetitions(count, 6);
    for (int i = 0; i < count; ++i) {
        KernelCase c;
        c.seq_len_q = uniform_index(rng, 1, kMinPackedRows - 1);
        const Index cached = uniform_index(rng, 0, 2 * kFewRowsKeyTile + 7) / kDebugCostDivisor;
        c.seq_len_kv = c.seq_len_q + (i % 4 == 0 ? 0 : cached);
        c.head_dim = uniform_index(rng, 1, 72);
        c.value_dim = uniform_index(rng, 1, 80);
        c.mask = i % 3 == 2 ? MaskKind::none : MaskKind::causal;
        if (i % 5 == 4) c.valid_len = random_valid_len(rng, c.seq_len_q, c.seq_len_kv);
        check_on_1_to_3_threads(c, workspace, check);
    }
}

/// Decode calls (N < kMinPackedRows) over three of their key tiles (two in debug builds; the last
/// one short), with the keys ramped up and down (KernelCase::key_ramp) so that a row's max moves
/// far between tiles, both masks, on 1, 2 and 3 threads: check(case, workspace or nullptr).
template <typename T, typename Check>
void for_each_key_ramp_case(std::mt19937& rng, Check&& check) {
    AttentionWorkspace<T> workspace;
    for (double ramp : {8.0, -8.0}) {
        for (Index n : {Index{1}, kMinPackedRows - 2}) {
            if (kDebugCostDivisor > 1 && n > 1) continue;  // the references' S x S maps cost too much there
            KernelCase c;
            c.seq_len_q = n;
            c.seq_len_kv = (kDebugCostDivisor > 1 ? 1 : 2) * kFewRowsKeyTile + 37;
            c.head_dim = uniform_index(rng, 8, 64);
            c.value_dim = uniform_index(rng, 1, 80);
            c.key_ramp = ramp;
            c.mask = n > 1 ? MaskKind::causal : MaskKind::none;
            check_on_1_to_3_threads(c, workspace, check);
        }
    }
}

/// The kernel cases of the fast-vs-reference tests: every (N, S) pair from the tile-edge lengths
/// (S >= N, including S = N and S > N), both masks, with random d, dv (d != dv mostly, odd sizes
/// included), key padding and scale; plus `random_count` fully random shapes.
///   query_tile / key_tile: the fast kernels' kQueryTile / kKeyTile.
///   max_cells: skip pairs whose cost exceeds this (keeps the suite fast): the cost is N * S, or
///   S * S with `whole_sequence_cost` (DINT tests build the maps of all S tokens for the history).
inline std::vector<KernelCase> kernel_cases(std::mt19937& rng, Index query_tile, Index key_tile, int random_count,
                                            Index max_cells = 40000, bool whole_sequence_cost = false) {
    max_cells /= kDebugCostDivisor;
    const auto cost = [&](Index n, Index s) { return (whole_sequence_cost ? s : n) * s; };
    static const Index head_dims[] = {1, 3, 8, 16, 31, 32, 64};
    static const Index value_dims[] = {1, 5, 16, 33, 64, 128};
    const auto pick = [&](const auto& options) {
        const Index count = static_cast<Index>(std::size(options));
        return options[static_cast<std::size_t>(uniform_index(rng, 0, count - 1))];
    };
    const auto random_scale = [&]() -> std::optional<double> {
        switch (uniform_index(rng, 0, 3)) {
            case 0:
                return 0.37;
            case 1:
                return 2.5;
            default:
                return std::nullopt;
        }
    };
    std::vector<KernelCase> cases;
    const auto add = [&](Index n, Index s) {
        for (MaskKind mask : {MaskKind::none, MaskKind::causal}) {
            KernelCase c;
            c.seq_len_q = n;
            c.seq_len_kv = s;
            c.head_dim = pick(head_dims);
            c.value_dim = pick(value_dims);
            c.mask = mask;
            c.valid_len = random_valid_len(rng, n, s);
            c.scale = random_scale();
            c.threads = static_cast<int>(uniform_index(rng, 1, 3));  // 3 threads: more chunks than cores
            cases.push_back(c);
        }
    };
    const std::vector<Index> query_lengths = tile_edge_lengths(query_tile);
    std::vector<Index> key_lengths = tile_edge_lengths(key_tile);
    for (Index n : query_lengths) {
        if (cost(n, n) <= max_cells) add(n, n);  // no cache
        for (Index s : key_lengths) {
            if (s > n && cost(n, s) <= max_cells) add(n, s);
        }
    }
    for (int i = 0; i < random_count; ++i) {
        Index n = 0, s = 0;
        do {  // redraw until within the cost budget
            n = uniform_index(rng, 1, 3 * query_tile);
            s = n + uniform_index(rng, 0, 2 * key_tile);
        } while (cost(n, s) > max_cells);
        add(n, s);
    }
    return cases;
}

}  // namespace diffattn::test
