// The BF16 products of AMX tiles (tdpbf16ps: a 16 x 16 fp32 tile += a 16 x 32 BF16 tile times a
// 32 x 16 one), for the bf16_amx path of the tiled core and the projections
// (kernels/packed_tiles.hpp, layers/panel_products.hpp; docs/math.md §7.1, §10.1).
//
// The operands are bf16_dot.hpp's packings as they are: A as BF16 rows (a tile: 16 rows of 16
// words, lda words apart) and B as pair panels (a tile: 16 pair rows of 16 columns, ldb words
// apart), which is the layout tdpbf16ps pairs its operands in. C is computed in blocks of 2 x 2
// tiles (32 rows x 32 columns), the eight tile registers being the four accumulators, two A
// tiles and two B tiles, over the inner dimension 16 words (32 entries) a step. A tile that would
// read past the operands (the last rows of A, the last step of the inner dimension) is copied
// into a zero-padded tile first, so that only A [m x k_pairs] and B [k_pairs x 16 ceil(n / 16)]
// are read, as bf16_dot::multiply reads them.
//
// The kernel is written once over a tile unit: AmxTiles, the registers themselves (configured
// while the object lives), and EmulatedTiles, tdpbf16ps's definition in plain C++ (Intel's
// pseudo-code: each fp32 lane += its two products in turn, rounded to nearest even; BF16 denormals
// read as zero, fp32 denormals flushed). The tests hold the registers to the emulation, and a test
// build (DIFFATTN_EMULATE_AMX_TILES, tests/CMakeLists.txt) runs the emulation where the CPU has
// no AMX, so that the path's callers are exercised on every host.
#pragma once

#include "diffattn/core/cpu_features.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/bf16_dot.hpp"
#include "diffattn/kernels/bf16_rounding.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(DIFFATTN_X86_TARGETS)  // <immintrin.h>: core/x86_intrinsics.hpp, through core/types.hpp

#define DIFFATTN_BF16_TILES __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

namespace diffattn::detail::bf16_tiles {

using Word = bf16_dot::Word;

/// Rows of a tile, and its words (pairs of BF16) or floats per row: 64 bytes.
inline constexpr Index kTile = 16;
inline constexpr Index kRowBytes = 64;

/// Whether this build runs EmulatedTiles where the CPU has no AMX (a test build only).
#if defined(DIFFATTN_EMULATE_AMX_TILES)
inline constexpr bool kEmulatedWithoutAmx = true;
#else
inline constexpr bool kEmulatedWithoutAmx = false;
#endif

// The tile registers of both units: 0-3 the accumulators C(i, j) = tile 2 i + j, 4 + i the A tile
// of row i, 6 + j the B tile of column j; multiply_into(t) is C(i, j) += A(i) B(j).

/// The AMX tile registers, configured as eight tiles of 16 rows x 64 bytes while the object lives
/// (ldtilecfg when made, tilerelease when gone). Only where cpu_has_amx_bf16().
class AmxTiles {
public:
    DIFFATTN_BF16_TILES AmxTiles() {
        alignas(64) unsigned char config[64] = {};
        config[0] = 1;  // palette 1
        for (int t = 0; t < 8; ++t) {
            config[16 + 2 * t] = static_cast<unsigned char>(kRowBytes);  // bytes a row (little-endian 16 bits)
            config[48 + t] = static_cast<unsigned char>(kTile);          // rows
        }
        memory_barrier();
        _tile_loadconfig(config);
    }
    DIFFATTN_BF16_TILES ~AmxTiles() { _tile_release(); }
    AmxTiles(const AmxTiles&) = delete;
    AmxTiles& operator=(const AmxTiles&) = delete;

    // The tile numbers must be literals (GCC's intrinsics paste them into the instruction).
    DIFFATTN_BF16_TILES void zero(int t) {
        switch (t) {
            case 0: _tile_zero(0); break;
            case 1: _tile_zero(1); break;
            case 2: _tile_zero(2); break;
            default: _tile_zero(3); break;
        }
    }
    DIFFATTN_BF16_TILES void load(int t, const void* p, Index stride_bytes) {
        memory_barrier();
        switch (t) {
            case 0: _tile_loadd(0, p, stride_bytes); break;
            case 1: _tile_loadd(1, p, stride_bytes); break;
            case 2: _tile_loadd(2, p, stride_bytes); break;
            case 3: _tile_loadd(3, p, stride_bytes); break;
            case 4: _tile_loadd(4, p, stride_bytes); break;
            case 5: _tile_loadd(5, p, stride_bytes); break;
            case 6: _tile_loadd(6, p, stride_bytes); break;
            default: _tile_loadd(7, p, stride_bytes); break;
        }
        memory_barrier();
    }
    DIFFATTN_BF16_TILES void store(int t, void* p, Index stride_bytes) {
        switch (t) {
            case 0: _tile_stored(0, p, stride_bytes); break;
            case 1: _tile_stored(1, p, stride_bytes); break;
            case 2: _tile_stored(2, p, stride_bytes); break;
            default: _tile_stored(3, p, stride_bytes); break;
        }
    }
    DIFFATTN_BF16_TILES void multiply_into(int t) {
        switch (t) {
            case 0: _tile_dpbf16ps(0, 4, 6); break;
            case 1: _tile_dpbf16ps(1, 4, 7); break;
            case 2: _tile_dpbf16ps(2, 5, 6); break;
            default: _tile_dpbf16ps(3, 5, 7); break;
        }
    }

private:
    // GCC's tile intrinsics are asm statements that do not say which memory they read: ldtilecfg
    // names 8 of its 64 bytes and tileloadd none, so GCC 12 at -O2 drops the stores of the tile
    // sizes before ldtilecfg and may move the stores that fill an edge tile past its tileloadd. A
    // compiler barrier before and after each keeps those stores where they are written. (Clang's
    // builtins state their operands; there the barrier changes nothing.)
    static void memory_barrier() { __asm__ __volatile__("" ::: "memory"); }
};

/// tdpbf16ps by its definition, on eight tiles in memory: the reference for AmxTiles.
class EmulatedTiles {
public:
    void zero(int t) { std::memset(tiles_[t], 0, sizeof tiles_[t]); }
    void load(int t, const void* p, Index stride_bytes) {
        for (Index r = 0; r < kTile; ++r) {
            std::memcpy(tiles_[t][r], static_cast<const unsigned char*>(p) + r * stride_bytes, kRowBytes);
        }
    }
    void store(int t, void* p, Index stride_bytes) const {
        for (Index r = 0; r < kTile; ++r) {
            std::memcpy(static_cast<unsigned char*>(p) + r * stride_bytes, tiles_[t][r], kRowBytes);
        }
    }
    void multiply_into(int t) {
        float c[kTile][kTile];
        Word a[kTile][kTile], b[kTile][kTile];
        std::memcpy(c, tiles_[t], sizeof c);
        std::memcpy(a, tiles_[4 + t / 2], sizeof a);
        std::memcpy(b, tiles_[6 + t % 2], sizeof b);
        for (Index m = 0; m < kTile; ++m) {
            for (Index k = 0; k < kTile; ++k) {
                const float a0 = low(a[m][k]), a1 = high(a[m][k]);
                for (Index n = 0; n < kTile; ++n) {
                    c[m][n] = flushed(flushed(c[m][n] + a0 * low(b[k][n])) + a1 * high(b[k][n]));
                }
            }
        }
        std::memcpy(tiles_[t], c, sizeof c);
    }

private:
    /// A BF16 value as fp32, a denormal read as zero (of its sign).
    static float widened(std::uint32_t bits) {
        const bool denormal = (bits & 0x7f80u) == 0;
        return bf16_value(static_cast<std::uint16_t>(denormal ? bits & 0x8000u : bits));
    }
    static float low(Word w) { return widened(w & 0xffffu); }
    static float high(Word w) { return widened(w >> 16); }
    static float flushed(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x; }

    alignas(64) unsigned char tiles_[8][kTile][kRowBytes] = {};
};

/// multiply (below) on the tile unit `tiles`.
template <typename Tiles>
DIFFATTN_BF16_TILES void multiply_on(Tiles& tiles, const Word* a, Index lda, Index m, const Word* b, Index ldb,
                                     Index n, Index k_pairs, float* c, Index ldc, float alpha, bool accumulate) {
    alignas(64) Word zeros[kTile * kTile] = {}, a_edge[2][kTile * kTile], b_edge[2][kTile * kTile];
    alignas(64) float c_edge[kTile * kTile];
    const Index word_stride = static_cast<Index>(sizeof(Word)) * lda, pair_stride = static_cast<Index>(sizeof(Word)) * ldb;
    for (Index n0 = 0; n0 < n; n0 += 2 * kTile) {
        const Index cols[2] = {std::min(kTile, n - n0), std::clamp<Index>(n - n0 - kTile, 0, kTile)};
        for (Index m0 = 0; m0 < m; m0 += 2 * kTile) {
            const Index rows[2] = {std::min(kTile, m - m0), std::clamp<Index>(m - m0 - kTile, 0, kTile)};
            const auto full = [&](int t) { return rows[t / 2] == kTile && cols[t % 2] == kTile; };
            const auto used = [&](int t) { return rows[t / 2] > 0 && cols[t % 2] > 0; };
            const auto c_tile = [&](int t) { return c + (m0 + kTile * (t / 2)) * ldc + n0 + kTile * (t % 2); };
            // A whole tile accumulates C in the register; a partial one adds it in the epilogue.
            for (int t = 0; t < 4; ++t) {
                if (accumulate && full(t)) {
                    tiles.load(t, c_tile(t), static_cast<Index>(sizeof(float)) * ldc);
                } else {
                    tiles.zero(t);
                }
            }
            for (Index w0 = 0; w0 < k_pairs; w0 += kTile) {
                const Index words = std::min(kTile, k_pairs - w0);
                for (int i = 0; i < 2; ++i) {
                    const Word* rows_i = a + (m0 + kTile * i) * lda + w0;
                    if (rows[i] == 0) {
                        tiles.load(4 + i, zeros, kRowBytes);
                    } else if (rows[i] == kTile && words == kTile) {
                        tiles.load(4 + i, rows_i, word_stride);
                    } else {
                        std::fill(a_edge[i], a_edge[i] + kTile * kTile, Word{0});
                        for (Index r = 0; r < rows[i]; ++r) std::copy_n(rows_i + r * lda, words, a_edge[i] + r * kTile);
                        tiles.load(4 + i, a_edge[i], kRowBytes);
                    }
                }
                for (int j = 0; j < 2; ++j) {
                    const Word* panel_j = b + w0 * ldb + n0 + kTile * j;
                    if (cols[j] == 0) {
                        tiles.load(6 + j, zeros, kRowBytes);
                    } else if (words == kTile) {
                        tiles.load(6 + j, panel_j, pair_stride);
                    } else {
                        std::fill(b_edge[j], b_edge[j] + kTile * kTile, Word{0});
                        for (Index r = 0; r < words; ++r) std::copy_n(panel_j + r * ldb, kTile, b_edge[j] + r * kTile);
                        tiles.load(6 + j, b_edge[j], kRowBytes);
                    }
                }
                for (int t = 0; t < 4; ++t) {
                    if (used(t)) tiles.multiply_into(t);
                }
            }
            for (int t = 0; t < 4; ++t) {
                if (!used(t)) continue;
                float* out = c_tile(t);
                if (full(t)) {
                    tiles.store(t, out, static_cast<Index>(sizeof(float)) * ldc);
                    if (!accumulate && alpha != 1.0f) {
                        for (Index r = 0; r < kTile; ++r) {
                            for (Index j = 0; j < kTile; ++j) out[r * ldc + j] *= alpha;
                        }
                    }
                    continue;
                }
                tiles.store(t, c_edge, kRowBytes);
                for (Index r = 0; r < rows[t / 2]; ++r) {
                    for (Index j = 0; j < cols[t % 2]; ++j) {
                        const float sum = c_edge[r * kTile + j];
                        out[r * ldc + j] = accumulate ? out[r * ldc + j] + sum : alpha * sum;
                    }
                }
            }
        }
    }
}

/// C [m x n] (row-major, ldc floats a row) = alpha * A B, or += A B when `accumulate` (alpha
/// unused), for A as BF16 rows (lda words apart, k_pairs words used) and B as pair panels (ldb
/// words a row, k_pairs rows used, ldb >= 16 ceil(n / 16)): bf16_dot::multiply's contract, on the
/// AMX tiles (or, in a test build on a CPU without them, on EmulatedTiles).
DIFFATTN_BF16_TILES inline void multiply(const Word* a, Index lda, Index m, const Word* b, Index ldb, Index n,
                                         Index k_pairs, float* c, Index ldc, float alpha, bool accumulate) {
    if (m <= 0 || n <= 0) return;
    if (kEmulatedWithoutAmx && !cpu_has_amx_bf16()) {
        EmulatedTiles tiles;
        return multiply_on(tiles, a, lda, m, b, ldb, n, k_pairs, c, ldc, alpha, accumulate);
    }
    AmxTiles tiles;
    multiply_on(tiles, a, lda, m, b, ldb, n, k_pairs, c, ldc, alpha, accumulate);
}

}  // namespace diffattn::detail::bf16_tiles

#endif  // DIFFATTN_X86_TARGETS
