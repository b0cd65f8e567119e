// detail::few_rows_logits and few_rows_accumulate, compiled for the build machine's vector ISA
// (diffattn::native, as the examples and benchmarks are): with AVX-512 their loops in
// kernels/few_rows_simd.hpp against sums in double, over head and value dims that are and are
// not multiples of 16 (and of the 64 or 128 columns a value sweep holds), key counts below, at and
// past a 16-key step, strided and contiguous rows, rows that share a sweep; non-finite keys, which
// must reach their own logit only; keys and values stored as half / bfloat16; and keys in a KV
// cache's blocks of 16 (kernels/key_rows.hpp). (The portable test builds cover the Eigen paths.)
#include "diffattn/kernels/few_rows_products.hpp"
#include "diffattn/kernels/tiling.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

using namespace diffattn;

namespace {

/// Rows of S with any row stride, as the kernels take a cache's rows.
template <typename S>
using StridedOf = Eigen::Ref<const RowMatrix<S>, 0, Eigen::OuterStride<>>;
using Strided = StridedOf<float>;

/// Fills m with draws of `normal`, entry by entry in storage order, rounded to m's scalar.
template <typename M>
void fill_normal(M& m, std::normal_distribution<float>& normal, std::mt19937& rng) {
    using S = typename M::Scalar;
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<S>(normal(rng));
}

/// |got - sum| <= 4 eps_f32 * d * sum |q_i k_i|, the bound of a float dot product of d terms
/// in any order (with room for the scale's rounding).
bool near(float got, double exact, double magnitude, Index d) {
    return std::abs(static_cast<double>(got) - exact) <=
           4.0 * std::numeric_limits<float>::epsilon() * static_cast<double>(d + 1) * magnitude + 1e-30;
}

/// Checks tile [rows x keys + 16] = scale * queries [rows x d] times keys 0..keys-1 (key(j, i):
/// entry i of key j, as a float) against sums in double, and that the columns past `keys` still
/// hold -7 (nothing written past the tile).
template <typename Queries, typename Key>
void check_logits_tile(const RowMatrix<float>& tile, const Queries& queries, Index keys, Index d, float scale,
                       const Key& key) {
    Index wrong = 0, written_past = 0;
    for (Index r = 0; r < queries.rows(); ++r) {
        for (Index j = 0; j < keys; ++j) {
            double exact = 0, magnitude = 0;
            for (Index i = 0; i < d; ++i) {
                const double term = static_cast<double>(queries(r, i)) * key(j, i);
                exact += term;
                magnitude += std::abs(term);
            }
            if (!near(tile(r, j), scale * exact, scale * magnitude, d)) ++wrong;
        }
        for (Index j = keys; j < tile.cols(); ++j) written_past += tile(r, j) != -7.0f;
    }
    CHECK(wrong == 0);
    CHECK(written_past == 0);
}

}  // namespace

TEST_CASE("few_rows_logits: scaled dots of few query rows with a key tile, native build", "[kernels][few_rows]") {
    std::mt19937 rng(20261124);
    std::normal_distribution<float> normal;
    const float scale = 0.375f;
    for (Index d : {1, 7, 16, 17, 32, 40, 48, 64, 100, 128, 256}) {
        for (Index keys : {1, 5, 15, 16, 17, 33, 128}) {
            for (Index rows : {1, 3, 7}) {
                for (Index key_padding : {3, 0}) {
                    // Keys as a strided column block (a call's own projections) or contiguous rows (a KV
                    // cache's head-major block, which the AVX-512 path reads at fixed offsets).
                    RowMatrix<float> k(keys, d + key_padding), q(rows, d + 5), tile(rows, keys + 16);
                    fill_normal(k, normal, rng);
                    fill_normal(q, normal, rng);
                    tile.setConstant(-7.0f);
                    const Strided key_rows(k.leftCols(d)), query_rows(q.middleCols(2, d));
                    auto logits = tile.leftCols(keys);
                    detail::few_rows_logits(logits, query_rows, key_rows, scale);
                    INFO("d " << d << ", keys " << keys << ", rows " << rows << ", key padding " << key_padding);
                    check_logits_tile(tile, query_rows, keys, d, scale,
                                      [&](Index j, Index i) { return key_rows(j, i); });
                }
            }
        }
    }
}

TEST_CASE("few_rows_logits: contiguous and strided keys give the same logits, bit for bit, native build",
          "[kernels][few_rows]") {
    // The two layouts take different code (fixed offsets, or a stride) that must add each key's
    // products in the same order.
    std::mt19937 rng(20261125);
    std::normal_distribution<float> normal;
    for (Index d : {16, 32, 64, 128}) {
        for (Index keys : {7, 16, 45}) {
            RowMatrix<float> dense(keys, d), padded(keys, d + 16), q(3, d);
            fill_normal(dense, normal, rng);
            fill_normal(q, normal, rng);
            padded.leftCols(d) = dense;
            RowMatrix<float> from_dense(3, keys), from_padded(3, keys);
            detail::few_rows_logits(from_dense, Strided(q), Strided(dense), 0.125f);
            detail::few_rows_logits(from_padded, Strided(q), Strided(padded.leftCols(d)), 0.125f);
            INFO("d " << d << ", keys " << keys);
            CHECK(from_dense == from_padded);
        }
    }
}

TEMPLATE_TEST_CASE("few_rows_key_logits: keys in a KV cache's blocks of 16, native build", "[kernels][few_rows]",
                   float, Eigen::half, Eigen::bfloat16) {
    // The blocked loops (whole blocks, the last block's keys masked; a range from a block's start)
    // and the rows they fall back to (a range from inside a block) against sums in double of the
    // stored keys, for one query matrix and for two (few_rows_key_logits_of_two); unused slots of
    // the last block hold NaN, which must reach no logit.
    using S = TestType;
    std::mt19937 rng(20261127);
    std::normal_distribution<float> normal;
    const float scale = 0.375f;
    for (Index d : {1, 3, 7, 16, 17, 32, 40, 64, 100, 128}) {
        for (Index keys : {1, 5, 15, 16, 17, 33, 128}) {
            for (Index begin : {0, 16, 5}) {
                const Index total = begin + keys;
                RowMatrix<S> k(total, d);
                fill_normal(k, normal, rng);
                Vector<S> store = Vector<S>::Constant(detail::whole_key_blocks(total) * d,
                                                      S(std::numeric_limits<float>::quiet_NaN()));
                for (Index r = 0; r < total; ++r) {
                    for (Index i = 0; i < d; ++i) store(detail::KeyRows<S>::blocked_entry(r, i, d)) = k(r, i);
                }
                const auto blocked = detail::KeyRows<S>::blocked(store.data(), total, d);
                for (Index rows : {1, 2, 3, 4, 7}) {  // one to four rows per read of the blocks
                    RowMatrix<float> q(rows, d), tile(rows, keys + 16), key_tile(kKeyTile, d);
                    fill_normal(q, normal, rng);
                    tile.setConstant(-7.0f);
                    auto logits = tile.leftCols(keys);
                    detail::few_rows_key_logits(logits, Strided(q), blocked, begin, keys, scale, key_tile);
                    INFO("d " << d << ", keys " << keys << " from " << begin << ", rows " << rows);
                    const auto key = [&](Index j, Index i) { return static_cast<float>(k(begin + j, i)); };
                    check_logits_tile(tile, q, keys, d, scale, key);
                    // Two query matrices over the same keys (DIFF V2's pair), their rows in turn
                    // per read of the blocks.
                    RowMatrix<float> q2(rows, d), tile1(rows, keys + 16), tile2(rows, keys + 16);
                    fill_normal(q2, normal, rng);
                    tile1.setConstant(-7.0f);
                    tile2.setConstant(-7.0f);
                    auto logits1 = tile1.leftCols(keys);
                    auto logits2 = tile2.leftCols(keys);
                    detail::few_rows_key_logits_of_two(logits1, Strided(q), logits2, Strided(q2), blocked, begin, keys,
                                                       scale, key_tile);
                    check_logits_tile(tile1, q, keys, d, scale, key);
                    check_logits_tile(tile2, q2, keys, d, scale, key);
                }
            }
        }
    }
}

TEST_CASE("few_rows_logits: a non-finite key reaches its own logit only, native build", "[kernels][few_rows]") {
    for (Index d : {16, 24}) {
        RowMatrix<float> k = RowMatrix<float>::Ones(20, d), q = RowMatrix<float>::Ones(1, d), tile(1, 20);
        k(3, d - 1) = std::numeric_limits<float>::quiet_NaN();
        k(17, 0) = std::numeric_limits<float>::infinity();
        detail::few_rows_logits(tile, Strided(q), Strided(k), 1.0f);
        for (Index j = 0; j < 20; ++j) {
            INFO("d " << d << ", key " << j);
            if (j == 3) {
                CHECK(std::isnan(tile(0, j)));
            } else if (j == 17) {
                CHECK(tile(0, j) == std::numeric_limits<float>::infinity());
            } else {
                CHECK(tile(0, j) == static_cast<float>(d));
            }
        }
    }
}

TEST_CASE("few_rows_accumulate: probabilities times value rows, native build", "[kernels][few_rows]") {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    for (Index dv : {1, 16, 31, 32, 40, 48, 64, 65, 80, 96, 100, 112, 128, 200}) {
        for (Index keys : {1, 15, 16, 17, 128}) {
            for (Index rows : {1, 3, 7}) {
                RowMatrix<float> v(keys, dv + 3), p(rows, keys + 2), acc(rows, dv + 16);
                fill_normal(v, normal, rng);
                fill_normal(p, normal, rng);
                fill_normal(acc, normal, rng);
                const RowMatrix<float> before = acc;
                const Strided values(v.leftCols(dv));
                detail::few_rows_accumulate(acc.leftCols(dv), p.leftCols(keys), values);
                Index wrong = 0, written_past = 0;
                for (Index r = 0; r < rows; ++r) {
                    for (Index c = 0; c < dv; ++c) {
                        double exact = before(r, c), magnitude = std::abs(static_cast<double>(before(r, c)));
                        for (Index j = 0; j < keys; ++j) {
                            const double term = static_cast<double>(p(r, j)) * values(j, c);
                            exact += term;
                            magnitude += std::abs(term);
                        }
                        if (!near(acc(r, c), exact, magnitude, keys)) ++wrong;
                    }
                    for (Index c = dv; c < acc.cols(); ++c) written_past += acc(r, c) != before(r, c);
                }
                INFO("dv " << dv << ", keys " << keys << ", rows " << rows);
                CHECK(wrong == 0);
                CHECK(written_past == 0);
            }
        }
    }
}

TEST_CASE("few_rows_accumulate with a second output: each output that of its own call, bit for bit, native build",
          "[kernels][few_rows]") {
    // DINT causal_mean's decode step takes O and O1 = A1 V from one sweep of each value tile
    // (SecondProduct); each must be the single-output sum checked above, in the same order.
    std::mt19937 rng(13);
    std::normal_distribution<float> normal;
    const auto check = [&](auto stored_scalar) {
        using S = decltype(stored_scalar);
        for (Index dv : {1, 31, 32, 48, 64, 65, 96, 128, 200}) {
            for (Index keys : {1, 17, 128}) {
                for (Index rows : {1, 3}) {
                    RowMatrix<S> v(keys, dv + 3);
                    RowMatrix<float> p(rows, keys + 2), p2(rows, keys + 2), acc(rows, dv + 16), acc2(rows, dv + 16);
                    fill_normal(v, normal, rng);
                    for (RowMatrix<float>* m : {&p, &p2, &acc, &acc2}) {
                        fill_normal(*m, normal, rng);
                    }
                    RowMatrix<float> alone = acc, alone2 = acc2;
                    const StridedOf<S> values(v.leftCols(dv));
                    if constexpr (detail::kFewRowsRead<float, S>) {
                        detail::few_rows_accumulate(acc.leftCols(dv), p.leftCols(keys), values,
                                                    detail::SecondProduct{acc2.leftCols(dv), p2.leftCols(keys)});
                        detail::few_rows_accumulate(alone.leftCols(dv), p.leftCols(keys), values);
                        detail::few_rows_accumulate(alone2.leftCols(dv), p2.leftCols(keys), values);
                        INFO("dv " << dv << ", keys " << keys << ", rows " << rows);
                        CHECK(acc == alone);  // the columns past dv too: untouched by both
                        CHECK(acc2 == alone2);
                    } else {
                        SUCCEED("this ISA widens half-precision rows before the products (rows_as)");
                    }
                }
            }
        }
    };
    check(float{});
    check(Eigen::half{});
    check(Eigen::bfloat16{});
}

TEST_CASE("few_rows_accumulate: rows accumulated together equal each row's own call, bit for bit, native build",
          "[kernels][few_rows]") {
    // A GQA group's rows share each value packet's load (up to 4 rows a sweep, 2 where dv > 64);
    // each row's sums must stay those of a call of that row alone.
    std::mt19937 rng(17);
    std::normal_distribution<float> normal;
    const auto check = [&](auto stored_scalar) {
        using S = decltype(stored_scalar);
        for (Index dv : {16, 31, 32, 48, 64, 65, 96, 128, 200}) {
            for (Index rows : {2, 3, 4, 5, 8}) {
                RowMatrix<S> v(45, dv);
                RowMatrix<float> p(rows, 45), acc(rows, dv + 16);
                fill_normal(v, normal, rng);
                fill_normal(p, normal, rng);
                fill_normal(acc, normal, rng);
                RowMatrix<float> alone = acc;
                if constexpr (detail::kFewRowsRead<float, S>) {
                    detail::few_rows_accumulate(acc.leftCols(dv), p, StridedOf<S>(v));
                    for (Index r = 0; r < rows; ++r) {
                        detail::few_rows_accumulate(alone.block(r, 0, 1, dv), p.middleRows(r, 1), StridedOf<S>(v));
                    }
                    INFO("dv " << dv << ", rows " << rows);
                    CHECK(acc == alone);  // the columns past dv too: untouched by both
                } else {
                    SUCCEED("this ISA widens half-precision rows before the products (rows_as)");
                }
            }
        }
    };
    check(float{});
    check(Eigen::half{});
}

TEST_CASE("few-row products of half-precision keys and values equal those of their float values, bit for bit, "
          "native build",
          "[kernels][few_rows][half_kv]") {
    std::mt19937 rng(12);
    std::normal_distribution<float> normal;
    const auto check = [&](auto stored_scalar) {
        using S = decltype(stored_scalar);
        using StridedStored = StridedOf<S>;
        for (Index d : {5, 16, 32, 45, 64, 80, 128}) {
            RowMatrix<S> rows(37, d);  // the key rows, then the value rows
            RowMatrix<float> q(2, d), p(2, 37);
            fill_normal(rows, normal, rng);
            fill_normal(q, normal, rng);
            fill_normal(p, normal, rng);
            const RowMatrix<float> widened = rows.template cast<float>();
            if constexpr (detail::kFewRowsRead<float, S>) {
                RowMatrix<float> logits_stored(2, 37), logits_float(2, 37);
                detail::few_rows_logits(logits_stored, Strided(q), StridedStored(rows), 0.5f);
                detail::few_rows_logits(logits_float, Strided(q), Strided(widened), 0.5f);
                RowMatrix<float> acc_stored = RowMatrix<float>::Zero(2, d), acc_float = acc_stored;
                detail::few_rows_accumulate(acc_stored, p, StridedStored(rows));
                detail::few_rows_accumulate(acc_float, p, Strided(widened));
                INFO("d " << d);
                CHECK(logits_stored == logits_float);
                CHECK(acc_stored == acc_float);
            } else {
                SUCCEED("this ISA widens half-precision rows before the products (rows_as)");
            }
        }
    };
    check(Eigen::half{});
    check(Eigen::bfloat16{});
}
