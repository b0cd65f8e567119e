// The error bound of the BF16 products (docs/math.md §7.1), entry by entry, computed in double from
// the exact maps of the plain reference: what the kernels' bf16 paths are held to against the exact
// result, and what two bf16 paths (vdpbf16ps, the widened products) are held to against each other.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/reference.hpp"

#include "diff_inputs.hpp"

#include <algorithm>
#include <cmath>

namespace diffattn::test {

/// BF16's unit roundoff (8 significant bits, round to nearest): u = 2^-8.
inline constexpr double kBf16Roundoff = 1.0 / 256;

/// gamma_m of fp32 sums of m terms: m 2^-24 / (1 - m 2^-24).
inline double fp32_gamma(Index m) {
    const double e = static_cast<double>(m) * std::ldexp(1.0, -24);
    return e / (1 - e);
}

/// What a bound compares: a bf16 path with the exact result (exact), with the exact result of the
/// same call on Q, K and V rounded to BF16 (rounded_inputs: what is left is P's rounding and the fp32
/// sums), or two bf16 paths with each other (paths).
enum class Bf16Comparison { exact, rounded_inputs, paths };

/// The attention kinds of the tests.
enum class Bf16Kind { softmax, diff, dint };

/// Delta_n per query row of one map (docs/math.md §7.1): `coefficient` times the largest logit
/// magnitude s sum_i |q_ni k_ji| over the keys row n sees.
inline Vector<double> logit_error(const RowMatrix<double>& q, const RowMatrix<double>& k, const AttentionOptions& o,
                                  double coefficient) {
    const Index n_rows = q.rows(), keys = k.rows();
    const double s = reference::scale_of<double>(o, q.cols());
    const Index valid = reference::valid_len_of(o, keys);
    const RowMatrix<double> magnitudes = s * (q.cwiseAbs() * k.cwiseAbs().transpose());  // [N x S]
    Vector<double> delta = Vector<double>::Zero(n_rows);
    for (Index n = 0; n < n_rows; ++n) {
        for (Index j = 0; j < keys; ++j) {
            if (reference::key_allowed(o.mask, n, j, n_rows, keys, valid)) {
                delta[n] = std::max(delta[n], coefficient * magnitudes(n, j));
            }
        }
    }
    return delta;
}

/// The factors of one comparison: Delta's coefficient, the rounding term rho, and a slack on the
/// weights (the paths' weights are within e^{2 Delta} (1 + u) of the exact ones they are bounded by).
struct Bf16Factors {
    double logit = 0, rounding = 0;
    bool slack = false;
};

inline Bf16Factors bf16_factors(Bf16Comparison comparison, Index head_dim) {
    const double u = kBf16Roundoff, g = fp32_gamma(head_dim + 1);
    if (comparison == Bf16Comparison::exact) return {(1 + u) * (1 + u) * (1 + g) - 1, (1 + u) * (1 + u) - 1, false};
    if (comparison == Bf16Comparison::rounded_inputs) return {fp32_gamma(head_dim + 2), u, false};
    // Both paths sum the same exact products in fp32: logits within 2 gamma of each other; the
    // probabilities then round to BF16 values up to one BF16 step apart (2u).
    return {2 * g, 2 * u * (1 + u), true};
}

/// beta_n sum_j a_nj |v_jc| for one map a [N x S] with per-row delta (docs/math.md §7.1), times the
/// slack e^{2 Delta_n} (1 + u) where `slack_delta` is given.
inline RowMatrix<double> map_bound(const RowMatrix<double>& a, const Vector<double>& delta, double rounding,
                                   const RowMatrix<double>& v_abs, const Vector<double>* slack_delta) {
    const double u = kBf16Roundoff;
    RowMatrix<double> bound = a.cwiseAbs() * v_abs;  // [N x dv]
    for (Index n = 0; n < a.rows(); ++n) {
        double beta = std::expm1(2 * delta[n]) * (1 + u) * (1 + u) + rounding;
        if (slack_delta != nullptr) beta *= std::exp(2 * (*slack_delta)[n]) * (1 + u);
        bound.row(n) *= beta;
    }
    return bound;
}

/// The bound of one call of `kind` (softmax: Q1, K1, V) over the inputs' last N rows, entry by
/// entry [N x dv], not counting the fp32 arithmetic (docs/math.md §7.1: that part is §7's float
/// rule); for rounded_inputs, `in` holds the rounded inputs. `history_rows` earlier rows (a KV cache) are exact: they add nothing to the integral's
/// error. The maps come from the reference in double.
inline RowMatrix<double> bf16_bound(Bf16Comparison comparison, Bf16Kind kind, const DiffInputs<double>& in,
                                    DintIntegral integral, const AttentionOptions& o, const DintHistory<double>* history) {
    const Bf16Factors f = bf16_factors(comparison, in.q1.cols());
    const Bf16Factors exact = bf16_factors(Bf16Comparison::exact, in.q1.cols());
    const RowMatrix<double> v_abs = in.v.cwiseAbs();
    const auto map_of = [&](const RowMatrix<double>& q, const RowMatrix<double>& k, const RowMatrix<double>& a,
                            Vector<double>& delta) {
        delta = logit_error(q, k, o, f.logit);
        const Vector<double> full = logit_error(q, k, o, exact.logit);
        return map_bound(a, delta, f.rounding, v_abs, f.slack ? &full : nullptr);
    };
    Vector<double> delta1, delta2;
    if (kind == Bf16Kind::softmax) {
        return map_of(in.q1, in.k1, reference::attention_map<double>(in.q1, in.k1, o), delta1);
    }
    const double lambda = std::abs(in.lambda);
    const auto maps = kind == Bf16Kind::dint
                          ? reference::dint_attention_maps<double>(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda,
                                                                   integral, o, history)
                          : reference::diff_attention_maps<double>(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, o);
    const RowMatrix<double> o1_bound = map_of(in.q1, in.k1, maps.a1, delta1);
    RowMatrix<double> bound = o1_bound + lambda * map_of(in.q2, in.k2, maps.a2, delta2);
    if (kind == Bf16Kind::diff) return bound;

    const Index rows = in.q1.rows(), before = history != nullptr ? history->rows : 0;
    if (integral == DintIntegral::global_mean) {
        const RowMatrix<double> mean = o1_bound.colwise().sum() / static_cast<double>(std::max<Index>(rows, 1));
        for (Index n = 0; n < rows; ++n) bound.row(n) += lambda * mean;
        return bound;
    }
    if (integral == DintIntegral::causal_mean) {
        RowMatrix<double> running = RowMatrix<double>::Zero(1, in.v.cols());
        for (Index n = 0; n < rows; ++n) {
            running += o1_bound.row(n);
            bound.row(n) += lambda * running / static_cast<double>(before + n + 1);
        }
        return bound;
    }
    // causal_softmax: G's error eps_nj <= (1 / (R + n + 1)) sum_{m <= n} (e^{2 Delta_m} - 1) a1_mj,
    // so the integral map's logits are off by at most Delta^G_n = max_j eps_nj over the keys row n sees.
    const Vector<double> full1 = logit_error(in.q1, in.k1, o, exact.logit);
    const Index keys = in.k1.rows(), valid = reference::valid_len_of(o, keys);
    RowMatrix<double> running = RowMatrix<double>::Zero(1, keys);
    Vector<double> delta_g(rows), slack_g(rows);
    for (Index n = 0; n < rows; ++n) {
        const double slack = f.slack ? std::exp(2 * full1[n]) * (1 + kBf16Roundoff) : 1.0;
        running += std::expm1(2 * delta1[n]) * slack * maps.a1.row(n);
        delta_g[n] = slack_g[n] = 0;
        for (Index j = 0; j < keys; ++j) {
            if (!reference::key_allowed(o.mask, n, j, rows, keys, valid)) continue;
            delta_g[n] = std::max(delta_g[n], running(0, j) / static_cast<double>(before + n + 1));
        }
    }
    if (f.slack) {  // the integral map's own slack: its logits' full error
        RowMatrix<double> full_running = RowMatrix<double>::Zero(1, keys);
        for (Index n = 0; n < rows; ++n) {
            full_running += std::expm1(2 * full1[n]) * maps.a1.row(n);
            for (Index j = 0; j < keys; ++j) {
                if (!reference::key_allowed(o.mask, n, j, rows, keys, valid)) continue;
                slack_g[n] = std::max(slack_g[n], full_running(0, j) / static_cast<double>(before + n + 1));
            }
        }
    }
    return bound + lambda * map_bound(maps.integral, delta_g, f.rounding, v_abs, f.slack ? &slack_g : nullptr);
}

}  // namespace diffattn::test
