// A plain double-precision transcription of the formulas of docs/math.md for the layer and module tests:
// explicit loops, materialised attention matrices, weights looked up by their model-file names.
// Deliberately written without the library's layers (only its storage types), so it is an
// independent oracle for RMSNorm, SwiGLU, rotary, lambda and the multi-head modules (docs/math.md §2-4).
#pragma once

#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/parameters.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace naive {

using diffattn::Index;
using Mat = diffattn::RowMatrix<double>;

/// A [rows x cols] matrix of seeded uniform values in [-scale, scale) (SeededUniform): the same test
/// inputs on every platform.
template <typename T>
diffattn::RowMatrix<T> seeded(Index rows, Index cols, std::uint64_t seed, double scale = 1.0) {
    diffattn::SeededUniform random(seed);
    diffattn::RowMatrix<T> m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(scale * random.next());
    return m;
}

/// Model-file tensors by name; a 3-D tensor [H, r, c] is H matrices, 1-D and 2-D tensors one.
using Tensors = std::map<std::string, std::vector<Mat>>;

/// Copies every tensor of a parameter list (any scalar type) into double matrices by name,
/// with `prefix` stripped.
template <typename T>
Tensors tensors_of(const diffattn::ParameterList<T>& list, const std::string& prefix = "") {
    Tensors out;
    for (const auto& p : list) {
        std::vector<Mat> slices;
        for (const auto& s : p.slices) slices.push_back(s.map().template cast<double>());
        out[p.name.substr(prefix.size())] = slices;
    }
    return out;
}

/// y = x W^T
inline Mat linear(const Mat& x, const Mat& w) {
    Mat y = Mat::Zero(x.rows(), w.rows());
    for (Index n = 0; n < x.rows(); ++n)
        for (Index o = 0; o < w.rows(); ++o) {
            double sum = 0;
            for (Index i = 0; i < x.cols(); ++i) sum += x(n, i) * w(o, i);
            y(n, o) = sum;
        }
    return y;
}

/// docs/math.md §4: y = x / sqrt(mean(x^2) + eps) * w, w given as a [1 x F] row.
inline Mat rms_norm(const Mat& x, const Mat& w, double eps) {
    Mat y(x.rows(), x.cols());
    for (Index n = 0; n < x.rows(); ++n) {
        double ms = 0;
        for (Index i = 0; i < x.cols(); ++i) ms += x(n, i) * x(n, i);
        ms /= static_cast<double>(x.cols());
        for (Index i = 0; i < x.cols(); ++i) y(n, i) = x(n, i) / std::sqrt(ms + eps) * w(0, i);
    }
    return y;
}

/// docs/math.md §4: (silu(x Wg^T) * (x Wu^T)) Wd^T
inline Mat swiglu(const Mat& x, const Mat& wg, const Mat& wu, const Mat& wd) {
    Mat g = linear(x, wg), u = linear(x, wu);
    for (Index n = 0; n < g.rows(); ++n)
        for (Index i = 0; i < g.cols(); ++i) g(n, i) = g(n, i) / (1.0 + std::exp(-g(n, i))) * u(n, i);
    return linear(g, wd);
}

/// docs/math.md §3.1: interleaved rotary on a [N x d] map, positions first_position + n.
inline Mat rotary(const Mat& x, double theta, Index first_position = 0) {
    const Index d = x.cols();
    Mat y = x;
    for (Index n = 0; n < x.rows(); ++n)
        for (Index i = 0; i < d / 2; ++i) {
            const double angle = static_cast<double>(first_position + n) * std::pow(theta, -2.0 * i / d);
            const double c = std::cos(angle), s = std::sin(angle);
            y(n, 2 * i) = x(n, 2 * i) * c - x(n, 2 * i + 1) * s;
            y(n, 2 * i + 1) = x(n, 2 * i) * s + x(n, 2 * i + 1) * c;
        }
    return y;
}

/// docs/math.md §1: may query n see key j (N queries, S keys)?
inline bool allowed(bool causal, Index n, Index j, Index N, Index S) { return !causal || j <= n + (S - N); }

/// docs/math.md §2.1: row softmax of the allowed entries of `logits` (unscaled here), zeros elsewhere.
inline Mat masked_softmax(const Mat& logits, bool causal) {
    const Index N = logits.rows(), S = logits.cols();
    Mat a = Mat::Zero(N, S);
    for (Index n = 0; n < N; ++n) {
        double m = -std::numeric_limits<double>::infinity();
        for (Index j = 0; j < S; ++j)
            if (allowed(causal, n, j, N, S)) m = std::max(m, logits(n, j));
        if (!std::isfinite(m)) continue;
        double sum = 0;
        for (Index j = 0; j < S; ++j)
            if (allowed(causal, n, j, N, S)) sum += (a(n, j) = std::exp(logits(n, j) - m));
        for (Index j = 0; j < S; ++j) a(n, j) /= sum;
    }
    return a;
}

/// softmax(s Q K^T + M), s = 1/sqrt(d)
inline Mat attention_map(const Mat& q, const Mat& k, bool causal) {
    Mat logits = linear(q, k) / std::sqrt(static_cast<double>(q.cols()));
    return masked_softmax(logits, causal);
}

/// docs/math.md §2.3: the integral term I (before the factor lambda) from A1.
inline Mat dint_integral(const Mat& a1, diffattn::DintIntegral mode, bool causal) {
    const Index N = a1.rows(), S = a1.cols();
    Mat g = Mat::Zero(N, S);
    for (Index n = 0; n < N; ++n) {
        const Index rows = mode == diffattn::DintIntegral::global_mean ? N : n + 1;
        for (Index m = 0; m < rows; ++m)
            for (Index j = 0; j < S; ++j) g(n, j) += a1(m, j) / static_cast<double>(rows);
    }
    if (mode != diffattn::DintIntegral::causal_softmax) return g;
    return masked_softmax(g, causal);  // softmax_M(G): only the keys query n may see
}

inline Mat cols(const Mat& m, Index first, Index count) { return m.middleCols(first, count); }

/// docs/math.md §2.5
inline double lambda_init(Index depth) { return 0.8 - 0.6 * std::exp(-0.3 * static_cast<double>(depth)); }
inline double lambda_full(const Tensors& p, Index depth) {
    auto dot = [](const Mat& a, const Mat& b) {
        double s = 0;
        for (Index i = 0; i < a.cols(); ++i) s += a(0, i) * b(0, i);
        return s;
    };
    return std::exp(dot(p.at("lambda_q1")[0], p.at("lambda_k1")[0])) -
           std::exp(dot(p.at("lambda_q2")[0], p.at("lambda_k2")[0])) + lambda_init(depth);
}

/// The maps of every head of one module call (docs/math.md §2-3), [N x S] each, and what they weigh.
struct ModuleMaps {
    std::vector<Mat> a1, a2;      ///< per head: softmax maps 1 and 2 (softmax: a1 only, a2 empty)
    std::vector<Mat> integral;    ///< per head: DINT's I (before the factor lambda); empty otherwise
    std::vector<Mat> combined;    ///< per head: the map the values are weighted by
    std::vector<Mat> values;      ///< per head: its value head [S x dv]
    double lambda = 0;            ///< diff, dint, shared_diff
};

/// docs/math.md §3: the maps of every head of one multi-head attention module on x [N x D],
/// positions 0 .. N-1. `p` holds the module's tensors named relative to "self_attn.".
inline ModuleMaps attention_maps(const diffattn::AttentionConfig& c, const Tensors& p, const Mat& x) {
    using diffattn::AttentionKind;
    const Index N = x.rows(), H = c.n_heads, Hkv = c.n_kv_heads > 0 ? c.n_kv_heads : H, rep = H / Hkv;
    const bool causal = c.causal;
    const double theta = c.rope_theta;
    const AttentionKind kind = c.kind;
    ModuleMaps maps;

    if (kind == AttentionKind::softmax) {  // docs/math.md §3.2
        const Index d = c.d_model / H;
        Mat q = linear(x, p.at("q_proj.weight")[0]), k = linear(x, p.at("k_proj.weight")[0]);
        Mat v = linear(x, p.at("v_proj.weight")[0]);
        for (Index h = 0; h < H; ++h) {
            const Index g = h / rep;
            maps.a1.push_back(
                attention_map(rotary(cols(q, h * d, d), theta), rotary(cols(k, g * d, d), theta), causal));
            maps.combined.push_back(maps.a1.back());
            maps.values.push_back(cols(v, g * d, d));
        }
        return maps;
    }

    if (kind == AttentionKind::diff_v2) {  // docs/math.md §3.4
        const Index d = c.given_head_dim, group = 2 * H / Hkv;
        Mat q = linear(x, p.at("q_proj.weight")[0]), k = linear(x, p.at("k_proj.weight")[0]);
        Mat v = linear(x, p.at("v_proj.weight")[0]), l = linear(x, p.at("lambda_proj.weight")[0]);
        std::vector<Mat> a;
        for (Index t = 0; t < 2 * H; ++t) {
            const Index g = t / group;
            a.push_back(attention_map(rotary(cols(q, t * d, d), theta), rotary(cols(k, g * d, d), theta), causal));
        }
        for (Index h = 0; h < H; ++h) {
            Mat combined = a[2 * h];
            for (Index n = 0; n < N; ++n) {
                const double gate = 1.0 / (1.0 + std::exp(-l(n, h)));
                combined.row(n) -= gate * a[2 * h + 1].row(n);
            }
            maps.a1.push_back(a[2 * h]);
            maps.a2.push_back(a[2 * h + 1]);
            maps.combined.push_back(combined);
            maps.values.push_back(cols(v, (2 * h / group) * d, d));  // both maps of head h read one kv head
        }
        return maps;
    }

    if (kind == AttentionKind::gda) {  // docs/math.md §9
        const Index d = c.given_head_dim > 0 ? c.given_head_dim : c.d_model / H / 2, gr = c.gda_group_ratio;
        Mat q = linear(x, p.at("q_proj.weight")[0]), k = linear(x, p.at("k_proj.weight")[0]);
        Mat v = linear(x, p.at("v_proj.weight")[0]);
        maps.lambda = lambda_full(p, c.depth);
        for (Index h = 0; h < H; ++h) {
            const Index group = h / gr, kv = h / rep;  // q_proj: each group's gr signal heads, then its noise head
            const Mat q1 = rotary(cols(q, (group * (gr + 1) + h % gr) * d, d), theta);
            const Mat q2 = rotary(cols(q, (group * (gr + 1) + gr) * d, d), theta);
            maps.a1.push_back(attention_map(q1, rotary(cols(k, 2 * kv * d, d), theta), causal));
            maps.a2.push_back(attention_map(q2, rotary(cols(k, (2 * kv + 1) * d, d), theta), causal));
            maps.combined.push_back(maps.a1.back() - maps.lambda * maps.a2.back());
            maps.values.push_back(cols(v, kv * 2 * d, 2 * d));
        }
        return maps;
    }

    // diff, dint, shared_diff (docs/math.md §3.1, 3.3): the maps of head h.
    const Index d = c.d_model / H / 2;
    std::vector<Mat> q1(H), q2(H), k1(H), k2(H), vh(H);
    if (kind == AttentionKind::shared_diff) {
        Mat v = linear(x, p.at("v_proj.weight")[0]);
        for (Index h = 0; h < H; ++h) {
            auto project = [&](const char* base, const char* factor) {
                const Mat& a = p.at(std::string(factor) + "_a")[h];  // [D x r]
                const Mat& b = p.at(std::string(factor) + "_b")[h];  // [d x r]
                Mat w = p.at(std::string(base) + "_base.weight")[0].transpose() + a * b.transpose();  // [D x d]
                return rotary(x * w, theta);
            };
            q1[h] = project("q", "q1"), q2[h] = project("q", "q2");
            k1[h] = project("k", "k1"), k2[h] = project("k", "k2");
            vh[h] = cols(v, h * 2 * d, 2 * d);
        }
    } else {
        Mat q = linear(x, p.at("q_proj.weight")[0]), k = linear(x, p.at("k_proj.weight")[0]);
        Mat v = linear(x, p.at("v_proj.weight")[0]);
        for (Index h = 0; h < H; ++h) {
            const Index g = h / rep;
            const bool per_head = c.gqa_pairing == diffattn::DiffGqaPairing::per_head;
            const Index key1 = per_head ? 2 * g : (2 * h) / rep, key2 = per_head ? 2 * g + 1 : (2 * h + 1) / rep;
            q1[h] = rotary(cols(q, 2 * h * d, d), theta);
            q2[h] = rotary(cols(q, (2 * h + 1) * d, d), theta);
            k1[h] = rotary(cols(k, key1 * d, d), theta);
            k2[h] = rotary(cols(k, key2 * d, d), theta);
            vh[h] = cols(v, g * 2 * d, 2 * d);
        }
    }
    maps.lambda = lambda_full(p, c.depth);
    for (Index h = 0; h < H; ++h) {
        maps.a1.push_back(attention_map(q1[h], k1[h], causal));
        maps.a2.push_back(attention_map(q2[h], k2[h], causal));
        Mat a = maps.a1[h] - maps.lambda * maps.a2[h];
        if (kind == AttentionKind::dint) {
            maps.integral.push_back(dint_integral(maps.a1[h], c.dint_integral, causal));
            a += maps.lambda * maps.integral[h];
        }
        maps.combined.push_back(a);
        maps.values.push_back(vh[h]);
    }
    return maps;
}

/// docs/math.md §3: one multi-head attention module on x [N x D], positions 0 .. N-1. `p` holds the
/// module's tensors named relative to "self_attn.". The heads are combined maps times values;
/// the DIFF family then normalises each head (subln) and scales it by (1 - lambda_init) unless dint.
inline Mat attention(const diffattn::AttentionConfig& c, const Tensors& p, const Mat& x) {
    using diffattn::AttentionKind;
    const ModuleMaps maps = attention_maps(c, p, x);
    const Index H = c.n_heads, dv = maps.values[0].cols();
    const bool diff_family = c.kind != AttentionKind::softmax && c.kind != AttentionKind::diff_v2;
    Mat heads(x.rows(), H * dv);
    for (Index h = 0; h < H; ++h) {
        Mat o = maps.combined[h] * maps.values[h];
        if (diff_family) {
            o = rms_norm(o, p.at("subln.weight")[0], 1e-5);
            if (c.kind != AttentionKind::dint) o *= 1.0 - lambda_init(c.depth);
        }
        heads.middleCols(h * dv, dv) = o;
    }
    return linear(heads, p.at(c.kind == AttentionKind::diff_v2 ? "o_proj.weight" : "out_proj.weight")[0]);
}

}  // namespace naive
