// Shared helpers of the kernel tests: seeded random inputs, precision ladders and the docs/math.md §7
// accuracy check against the plain reference (include/diffattn/kernels/reference.hpp).
//
// Seeds. Every test draws from its own std::mt19937 seeded with the base seed combined with the
// test's name (so tests do not depend on each other or on their order). The base seed is
// DIFFATTN_TEST_SEED from the environment, or kDefaultSeed; it is printed once per run and added
// to every failure message (INFO), so any failure is reproduced with
//     DIFFATTN_TEST_SEED=<seed> ./test_kernels "<test name>"
//
// Accuracy (docs/math.md §7). A fast kernel in precision T is compared with the plain reference run one
// precision up, Wide<T> (float -> double, double -> long double), on the same inputs:
//     max|fast_T - ref_Wide| <= 2 * max|ref_T - ref_Wide| + additive<T>
// For float this is exactly docs/math.md §7 (the FlashAttention criterion, additive 1e-6). For double we
// apply the same criterion one rung up the ladder: the oracle is the reference in long double
// (64-bit mantissa on x86-64, 11 more bits than double) and the additive term is docs/math.md §7's 1e-6
// scaled by DBL_EPSILON / FLT_EPSILON (~1.9e-15, i.e. the same ~8 ulps of an O(1) output). Where
// long double is no wider than double the double oracle would be itself, so the tests fall back to
// an a-priori forward-error bound instead (see spec7_tolerance below).
#pragma once

#include <catch2/catch.hpp>

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/reference.hpp"
#include "diffattn/kernels/tiling.hpp"

#include "../kernel_instances.hpp"  // the fast kernels, instantiated once (diffattn_test_support)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace diffattn::test {

inline constexpr std::uint32_t kDefaultSeed = 20240611u;

/// Debug builds (no NDEBUG: Eigen unoptimised, asserts on) run the references ~30x slower, so the
/// randomised sweeps divide their cost budgets by this factor there (Release runs everything).
#ifdef NDEBUG
inline constexpr Index kDebugCostDivisor = 1;
#else
inline constexpr Index kDebugCostDivisor = 4;
#endif

/// The run's base seed: DIFFATTN_TEST_SEED, or kDefaultSeed. Printed once.
inline std::uint32_t base_seed() {
    static const std::uint32_t seed = [] {
        std::uint32_t value = kDefaultSeed;
        if (const char* env = std::getenv("DIFFATTN_TEST_SEED"); env != nullptr && *env != '\0') {
            value = static_cast<std::uint32_t>(std::strtoul(env, nullptr, 0));
        }
        std::cerr << "diffattn kernel tests: base seed " << value << " (set DIFFATTN_TEST_SEED to reproduce or vary)\n";
        return value;
    }();
    return seed;
}

/// Seed of the running test: base seed mixed with the FNV-1a hash of the test's name.
inline std::uint32_t test_seed() {
    const std::string name = Catch::getResultCapture().getCurrentTestName();
    std::uint32_t hash = 2166136261u;
    for (const unsigned char c : name) hash = (hash ^ c) * 16777619u;
    return base_seed() ^ hash;
}

/// Declares `std::mt19937 rng` for the running test and logs its seed with every failure.
#define DIFFATTN_TEST_RNG(rng)                                                                                \
    const std::uint32_t rng##_seed = ::diffattn::test::test_seed();                                           \
    INFO("base seed " << ::diffattn::test::base_seed() << " (DIFFATTN_TEST_SEED), test seed " << rng##_seed); \
    std::mt19937 rng(rng##_seed)

/// Uniform integer in [lo, hi].
inline Index uniform_index(std::mt19937& rng, Index lo, Index hi) {
    return std::uniform_int_distribution<Index>(lo, hi)(rng);
}

/// rows x cols matrix with entries uniform in [lo, hi) (drawn in double, rounded once to T).
template <typename T>
RowMatrix<T> random_matrix(std::mt19937& rng, Index rows, Index cols, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> uniform(lo, hi);
    RowMatrix<T> m(rows, cols);
    for (Index i = 0; i < rows; ++i) {
        for (Index j = 0; j < cols; ++j) m(i, j) = static_cast<T>(uniform(rng));
    }
    return m;
}

/// Element-wise conversion (copies a block or a Ref into a plain RowMatrix).
template <typename To, typename Matrix>
RowMatrix<To> cast_to(const Matrix& m) {
    return m.template cast<To>();
}

/// One precision up: the oracle's scalar for a kernel in T.
template <typename T>
using Wide = std::conditional_t<std::is_same_v<T, float>, double, long double>;

/// True when Wide<T> carries more mantissa bits than T (long double may equal double off x86).
template <typename T>
inline constexpr bool kWideIsWider = std::numeric_limits<Wide<T>>::digits > std::numeric_limits<T>::digits;

/// max_ij |a_ij - b_ij| in long double; +infinity if the shapes differ or a NaN appears on one
/// side only (two NaNs in the same place count as equal).
template <typename A, typename B>
long double max_abs_diff(const A& a, const B& b) {
    if (a.rows() != b.rows() || a.cols() != b.cols()) return std::numeric_limits<long double>::infinity();
    long double worst = 0.0L;
    for (Index i = 0; i < a.rows(); ++i) {
        for (Index j = 0; j < a.cols(); ++j) {
            const long double x = static_cast<long double>(a(i, j));
            const long double y = static_cast<long double>(b(i, j));
            if (std::isnan(x) || std::isnan(y)) {
                if (std::isnan(x) && std::isnan(y)) continue;
                return std::numeric_limits<long double>::infinity();
            }
            const long double diff = std::fabs(x - y);
            if (!(diff <= worst)) worst = diff;  // also catches inf - inf = NaN
        }
    }
    return worst;
}

/// max_ij |a_ij| in long double.
template <typename A>
long double max_abs(const A& a) {
    long double worst = 0.0L;
    for (Index i = 0; i < a.rows(); ++i) {
        for (Index j = 0; j < a.cols(); ++j) worst = std::max(worst, std::fabs(static_cast<long double>(a(i, j))));
    }
    return worst;
}

/// True when every entry is finite.
template <typename A>
bool all_finite(const A& a) {
    for (Index i = 0; i < a.rows(); ++i) {
        for (Index j = 0; j < a.cols(); ++j) {
            if (!std::isfinite(static_cast<long double>(a(i, j)))) return false;
        }
    }
    return true;
}

/// docs/math.md §7's additive term for a kernel in T: 1e-6 for float; scaled by the unit roundoff ratio
/// for double (the same number of ulps of an O(1) output).
template <typename T>
long double spec7_additive() {
    return 1e-6L * static_cast<long double>(std::numeric_limits<T>::epsilon()) /
           static_cast<long double>(std::numeric_limits<float>::epsilon());
}

/// What one docs/math.md §7 comparison measured.
struct Accuracy {
    long double fast_error = 0;   ///< max|fast - oracle|
    long double plain_error = 0;  ///< max|plain reference in T - oracle|
    long double tolerance = 0;    ///< 2 * plain_error + additive (or the fallback bound)
    bool ok() const { return fast_error <= tolerance; }
};

/// docs/math.md §7 check of `fast` (a kernel's output in T) against `plain` (the reference in T) and
/// `oracle` (the reference in Wide<T>, same inputs).
///   fallback_bound: used instead of the plain error when Wide<T> is not wider than T; an a-priori
///   forward error bound of the reference, c * (d + S) * eps * (1 + max|V|), passed by the caller.
template <typename T, typename Fast, typename Oracle>
Accuracy spec7_accuracy(const Fast& fast, const RowMatrix<T>& plain, const Oracle& oracle,
                        long double fallback_bound = 0) {
    Accuracy a;
    a.fast_error = max_abs_diff(fast, oracle);
    a.plain_error = max_abs_diff(plain, oracle);
    if constexpr (kWideIsWider<T>) {
        a.tolerance = 2 * a.plain_error + spec7_additive<T>();
    } else {
        a.tolerance = fallback_bound + spec7_additive<T>();
    }
    return a;
}

/// Asserts docs/math.md §7 and reports the measured errors with the case description.
template <typename T, typename Fast, typename Oracle>
void check_spec7(const std::string& what, const Fast& fast, const RowMatrix<T>& plain, const Oracle& oracle,
                 long double fallback_bound = 0) {
    const Accuracy a = spec7_accuracy<T>(fast, plain, oracle, fallback_bound);
    INFO(what);
    INFO("fast error " << static_cast<double>(a.fast_error) << ", plain " << (sizeof(T) == 4 ? "float" : "double")
                       << " reference error " << static_cast<double>(a.plain_error) << ", tolerance "
                       << static_cast<double>(a.tolerance));
    CHECK(a.ok());
}

/// A-priori forward-error bound of the plain reference in T, used only when no wider oracle exists:
/// logits carry <= d eps relative error, the softmax sum <= S eps, and the output sum <= S eps,
/// each times max|V|; a factor 4 covers the fast kernel's own (different-order) rounding.
template <typename T>
long double forward_error_bound(Index head_dim, Index seq_len_kv, long double max_logit, long double max_value) {
    const long double eps = std::numeric_limits<T>::epsilon();
    return 4 * eps * (static_cast<long double>(head_dim) * (1 + max_logit) + 2 * static_cast<long double>(seq_len_kv)) *
           (1 + max_value);
}

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
/// masks and sometimes key padding; `count` shapes, 3 thread counts each. Every other call gets one
/// workspace reused across all of them (it grows to the most threads), the others none.
template <typename T, typename Check>
void for_each_decode_case(std::mt19937& rng, int count, Check&& check) {
    AttentionWorkspace<T> workspace;
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

/// Random inputs of one DIFF / DINT call. The query matrices cover the WHOLE sequence of S tokens
/// (so the earlier S - N rows can build a DINT history); the call uses their last N rows.
template <typename T>
struct DiffInputs {
    RowMatrix<T> q1_all, q2_all;  // [S x d] queries of every token
    RowMatrix<T> q1, q2;          // [N x d] the last N rows: this call's queries
    RowMatrix<T> k1, k2;          // [S x d]
    RowMatrix<T> v;               // [S x dv]
    T lambda = T(0);

    template <typename U>
    DiffInputs<U> cast() const {
        DiffInputs<U> c;
        c.q1_all = q1_all.template cast<U>();
        c.q2_all = q2_all.template cast<U>();
        c.q1 = q1.template cast<U>();
        c.q2 = q2.template cast<U>();
        c.k1 = k1.template cast<U>();
        c.k2 = k2.template cast<U>();
        c.v = v.template cast<U>();
        c.lambda = static_cast<U>(lambda);
        return c;
    }
};

template <typename T>
DiffInputs<T> random_diff_inputs(std::mt19937& rng, const KernelCase& c) {
    DiffInputs<T> in;
    in.q1_all = random_matrix<T>(rng, c.seq_len_kv, c.head_dim);
    in.q2_all = random_matrix<T>(rng, c.seq_len_kv, c.head_dim);
    in.q1 = in.q1_all.bottomRows(c.seq_len_q);
    in.q2 = in.q2_all.bottomRows(c.seq_len_q);
    in.k1 = random_matrix<T>(rng, c.seq_len_kv, c.head_dim);
    in.k2 = random_matrix<T>(rng, c.seq_len_kv, c.head_dim);
    if (c.key_ramp != 0) {
        const double last = static_cast<double>(std::max<Index>(c.seq_len_kv - 1, 1));
        for (Index j = 0; j < c.seq_len_kv; ++j) {
            const double position = c.key_ramp > 0 ? static_cast<double>(j) : last - static_cast<double>(j);
            const T factor = static_cast<T>(1 + std::abs(c.key_ramp) * position / last);
            in.k1.row(j) *= factor;
            in.k2.row(j) *= factor;
        }
    }
    in.v = random_matrix<T>(rng, c.seq_len_kv, c.value_dim);
    in.lambda = static_cast<T>(std::uniform_real_distribution<double>(0.1, 0.9)(rng));
    return in;
}

/// The DINT history of the S - N tokens before this call, from the reference run over the whole
/// sequence with the same options: A1 of the first S - N query rows (row m sees keys <= m under
/// the causal mask), its column sums (all S keys) and the sum of its O1 rows.
template <typename T>
DintHistory<T> reference_history(const DiffInputs<T>& in, const AttentionOptions& options) {
    const Index cached = in.k1.rows() - in.q1.rows();
    const RowMatrix<T> a1_all = reference::attention_map<T>(in.q1_all, in.k1, options);  // [S x S]
    const RowMatrix<T> earlier = a1_all.topRows(cached);                                 // [S-N x S]
    return reference::dint_history<T>(earlier, in.v);
}

/// A DintHistory with its sums converted to another scalar type.
template <typename To, typename From>
DintHistory<To> cast_history(const DintHistory<From>& history) {
    DintHistory<To> c;
    c.rows = history.rows;
    c.a1_column_sum = history.a1_column_sum.template cast<To>();
    c.o1_row_sum = history.o1_row_sum.template cast<To>();
    return c;
}

inline const char* integral_name(DintIntegral integral) {
    switch (integral) {
        case DintIntegral::causal_softmax:
            return "causal_softmax";
        case DintIntegral::causal_mean:
            return "causal_mean";
        case DintIntegral::global_mean:
            return "global_mean";
    }
    return "?";
}

}  // namespace diffattn::test

// ---------------------------------------------------------------------------------------------
// Instantiated once for the whole test_kernels executable, in support_instances.cpp (library
// test_kernels_support): the plain reference in float, double and long double (the oracle type of
// double) and the heavier helpers above. Every other TU of the executable sees these `extern
// template` declarations (DIFFATTN_TEST_SUPPORT_KERNELS is a usage requirement of that library)
// and only calls the shared copy, which saves compiling the same Eigen code (long double GEMMs
// above all) in each TU. TUs outside test_kernels (test_kernels_nomalloc) instantiate them as usual.
// ---------------------------------------------------------------------------------------------

/// The plain reference (include/diffattn/kernels/reference.hpp) in T, declared (PREFIX = extern)
/// or defined (PREFIX empty).
#define DIFFATTN_TEST_REFERENCE_INSTANCES(PREFIX, T)                                                               \
    PREFIX template decltype(diffattn::reference::mask_logits<T>) diffattn::reference::mask_logits<T>;             \
    PREFIX template decltype(diffattn::reference::masked_softmax<T>) diffattn::reference::masked_softmax<T>;       \
    PREFIX template decltype(diffattn::reference::masked_logits<T>) diffattn::reference::masked_logits<T>;         \
    PREFIX template decltype(diffattn::reference::attention_map<T>) diffattn::reference::attention_map<T>;         \
    PREFIX template decltype(diffattn::reference::softmax_attention_maps<T>)                                       \
        diffattn::reference::softmax_attention_maps<T>;                                                           \
    PREFIX template decltype(diffattn::reference::softmax_attention<T>) diffattn::reference::softmax_attention<T>; \
    PREFIX template decltype(diffattn::reference::diff_attention_maps<T>) diffattn::reference::diff_attention_maps<T>; \
    PREFIX template decltype(diffattn::reference::diff_attention<T>) diffattn::reference::diff_attention<T>;       \
    PREFIX template decltype(diffattn::reference::dint_history<T>) diffattn::reference::dint_history<T>;           \
    PREFIX template decltype(diffattn::reference::dint_attention_maps<T>) diffattn::reference::dint_attention_maps<T>; \
    PREFIX template decltype(diffattn::reference::dint_attention<T>) diffattn::reference::dint_attention<T>;

/// The helpers above for a kernel in T (oracle scalar W = Wide<T>).
#define DIFFATTN_TEST_HELPER_INSTANCES(PREFIX, T, W)                                                               \
    PREFIX template decltype(diffattn::test::random_matrix<T>) diffattn::test::random_matrix<T>;                   \
    PREFIX template decltype(diffattn::test::random_diff_inputs<T>) diffattn::test::random_diff_inputs<T>;         \
    PREFIX template diffattn::test::DiffInputs<W> diffattn::test::DiffInputs<T>::cast<W>() const;                 \
    PREFIX template decltype(diffattn::test::reference_history<T>) diffattn::test::reference_history<T>;           \
    PREFIX template decltype(diffattn::test::cast_history<T, W>) diffattn::test::cast_history<T, W>;               \
    PREFIX template decltype(diffattn::test::cast_history<W, T>) diffattn::test::cast_history<W, T>;               \
    PREFIX template decltype(diffattn::test::max_abs_diff<diffattn::RowMatrix<T>, diffattn::RowMatrix<T>>)         \
        diffattn::test::max_abs_diff<diffattn::RowMatrix<T>, diffattn::RowMatrix<T>>;                              \
    PREFIX template decltype(diffattn::test::max_abs_diff<diffattn::RowMatrix<T>, diffattn::RowMatrix<W>>)         \
        diffattn::test::max_abs_diff<diffattn::RowMatrix<T>, diffattn::RowMatrix<W>>;                              \
    PREFIX template decltype(diffattn::test::check_spec7<T, diffattn::RowMatrix<T>, diffattn::RowMatrix<W>>)       \
        diffattn::test::check_spec7<T, diffattn::RowMatrix<T>, diffattn::RowMatrix<W>>;

#if defined(DIFFATTN_TEST_SUPPORT_KERNELS)
DIFFATTN_TEST_REFERENCE_INSTANCES(extern, float)
DIFFATTN_TEST_REFERENCE_INSTANCES(extern, double)
DIFFATTN_TEST_REFERENCE_INSTANCES(extern, long double)
DIFFATTN_TEST_HELPER_INSTANCES(extern, float, double)
DIFFATTN_TEST_HELPER_INSTANCES(extern, double, long double)
#endif
