// fuzz_kernels: softmax_attention / diff_attention / dint_attention (kernels/*.hpp) on inputs
// decoded from the fuzzer's bytes, in float and double.
//
// Decoded (see decode_case): the kernel; N, S, d, dv up to 140 / 280 / 72 (crossing the 64-row
// query blocks and 128-key tiles); one shape made inconsistent; mask kind (also invalid enum
// values); valid_len (also out of range); scale (also 0, negative, NaN, Inf); lambda (also NaN,
// Inf, or finite in double but Inf in float); the DINT integral mode (also invalid); a
// DintHistory (none, consistent, or inconsistent in rows, sizes or values); out overlapping an
// input; inputs as column blocks of wider buffers; a pre-sized workspace; 1 or 2 threads (also
// 0 and negative); values with NaN / Inf.
//
// Contract checked:
//  - an invalid call throws a diffattn::Error; a valid one does not; nothing else escapes;
//  - a valid call writes every output entry; a query row allowed no key is exactly zero (docs/math.md §1);
//    a DINT history advances by N rows; a second call with the same workspace gives the same bits;
//  - on the kernel tests' domain (finite values with |x| <= 1, |lambda| <= 1, scale <= 2.5 or
//    the default, no or a consistent history) the output meets docs/math.md §7 against the plain
//    reference (kernels/reference.hpp), with exactly the check of the kernel tests
//    (tests/kernels/spec7_accuracy.hpp: spec7_accuracy). Outside it the "2x the plain error"
//    bound is decided by the rounding luck of single rows (docs/fuzzing.md), so only the other
//    checks apply there.
#include "fuzz_support.hpp"

// test_support.hpp gathers the kernel tests' helper headers, written for Catch2; only their plain
// functions (spec7_accuracy, Wide, forward_error_bound, cast_history) are used here.
#include <catch2/catch.hpp>

#include "test_support.hpp"

#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/reference.hpp"
#include "diffattn/kernels/softmax_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace diffattn;
using diffattn_fuzz::ByteReader;
using diffattn_fuzz::finding;

enum class Kernel { softmax, diff, dint };

const char* kernel_name(Kernel kernel) {
    switch (kernel) {
        case Kernel::softmax: return "softmax_attention";
        case Kernel::diff: return "diff_attention";
        case Kernel::dint: return "dint_attention";
    }
    return "?";
}

struct Shape {
    Index rows = 0;
    Index cols = 0;
    bool operator!=(const Shape& other) const { return rows != other.rows || cols != other.cols; }
};

/// The input matrices, in the order the value stream fills them.
enum Operand { kQ1, kK1, kV, kQ2, kK2, kOperands };
const char* const kOperandNames[kOperands] = {"Q1", "K1", "V", "Q2", "K2"};

/// What the bytes decode to; the same for the float and the double run.
struct Case {
    Kernel kernel = Kernel::softmax;
    Shape shape[kOperands];
    Shape out;
    AttentionOptions options;
    double lambda = 0;
    DintIntegral integral = DintIntegral::causal_softmax;
    int history_mode = 0;  // see make_history
    int history_param = 0;
    int alias = -1;        // out overlaps this operand's memory, or -1
    Index alias_offset = 0;
    Index pad = 0;         // extra elements per row of every buffer: heads as column blocks
    bool use_workspace = false;
    Index workspace_keys = 0;
    Index workspace_value_dim = 0;
    bool run_float = true;
    bool run_double = true;
    RowMatrix<double> values[kOperands];
    RowMatrix<double> q1_earlier;  // [S - N x d] queries of the cached tokens, for a consistent DINT history

    std::string describe() const {
        std::ostringstream s;
        s << kernel_name(kernel) << " N=" << shape[kQ1].rows << " S=" << shape[kK1].rows << " d=" << shape[kQ1].cols
          << " dv=" << shape[kV].cols << " mask=" << static_cast<int>(options.mask);
        for (int i = 0; i < kOperands; ++i) s << " " << kOperandNames[i] << "=" << shape[i].rows << "x" << shape[i].cols;
        s << " out=" << out.rows << "x" << out.cols;
        if (options.valid_len) s << " valid_len=" << *options.valid_len;
        if (options.scale) s << " scale=" << *options.scale;
        s << " threads=" << options.threads << " lambda=" << lambda << " integral=" << static_cast<int>(integral)
          << " history_mode=" << history_mode << " alias=" << alias << " pad=" << pad
          << " workspace=" << use_workspace;
        return s.str();
    }
};

// ---- Decoding -------------------------------------------------------------------------------

constexpr Index kQueryEdges[] = {63, 64, 65, 66, 100, 127, 128, 129, 130, 140};    // N
constexpr Index kExtraKeyEdges[] = {1, 2, 63, 64, 65, 127, 128, 129, 130, 140};   // S - N
constexpr Index kWidthEdges[] = {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 72};   // d, dv

/// Mostly 0..16 (cheap), else one of the tile-edge lengths.
template <std::size_t Count>
Index decode_length(std::uint8_t code, const Index (&edges)[Count]) {
    if (code < 200) return code % 17;
    return edges[(code - 200) % Count];
}

double decode_value(std::uint8_t code, double magnitude, bool specials) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    static const double special[16] = {std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN(),
                                       inf, -inf, 1e30, -1e30, 3e38, -3e38, 1e-40, 5e-324, 0.0, -0.0, 100, -100, 1e5, -1e5};
    if (specials && code >= 240) return special[code - 240];
    return (code - 127.5) / 127.5 * magnitude;
}

Case decode_case(ByteReader& in) {
    Case c;
    c.kernel = static_cast<Kernel>(in.byte() % 3);
    const Index n = decode_length(in.byte(), kQueryEdges);
    const std::uint8_t s_code = in.byte();
    const Index s = s_code == 255 ? std::max<Index>(n - 1, 0) : n + decode_length(s_code, kExtraKeyEdges);
    const Index d = decode_length(in.byte(), kWidthEdges);
    const Index dv = decode_length(in.byte(), kWidthEdges);
    c.shape[kQ1] = c.shape[kQ2] = {n, d};
    c.shape[kK1] = c.shape[kK2] = {s, d};
    c.shape[kV] = {s, dv};
    c.out = {n, dv};

    // One dimension off by one.
    if (const std::uint8_t code = in.byte(); code >= 160) {
        Index* dims[] = {&c.shape[kQ2].rows, &c.shape[kQ2].cols, &c.shape[kK2].rows, &c.shape[kK2].cols,
                         &c.shape[kK1].cols, &c.shape[kV].rows,  &c.out.rows,        &c.out.cols};
        Index& dim = *dims[code % 8];
        dim = (dim == 0 || (code / 8) % 2 == 1) ? dim + 1 : dim - 1;
    }

    const std::uint8_t mask_code = in.byte();
    c.options.mask = static_cast<MaskKind>(mask_code < 200 ? mask_code % 2 : mask_code - 210);  // -10 .. 45

    const std::uint8_t valid_mode = in.byte(), valid_value = in.byte();
    if (valid_mode >= 200) {
        const Index special[] = {-1, s + 1, s + 100, std::numeric_limits<Index>::min(), std::numeric_limits<Index>::max(), -s};
        c.options.valid_len = special[valid_value % 6];
    } else if (valid_mode >= 100) {
        c.options.valid_len = valid_value % (s + 1);
    }

    const std::uint8_t scale_mode = in.byte(), scale_value = in.byte();
    if (scale_mode >= 200) {
        const double special[] = {0.0, -0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                                  std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                                  1e-300, 1e300, std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max()};
        c.options.scale = special[scale_value % 10];
    } else if (scale_mode >= 100) {
        c.options.scale = (scale_value + 1) / 32.0;  // (0, 8]
    }

    const std::uint8_t lambda_mode = in.byte(), lambda_value = in.byte();
    if (lambda_mode >= 200) {
        const double special[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                  -std::numeric_limits<double>::infinity(), 1e300, -1e300, 0.0, 1e-300,
                                  1e39 /* finite in double, Inf in float */};
        c.lambda = special[lambda_value % 8];
    } else {
        c.lambda = (lambda_value - 100) / 50.0;  // [-2, 3.1]
    }

    const std::uint8_t integral_code = in.byte();
    c.integral = static_cast<DintIntegral>(integral_code < 240 ? integral_code % 3 : integral_code - 237);  // 3 .. 18
    c.history_mode = in.byte() % 8;
    c.history_param = in.byte();
    if (const std::uint8_t code = in.byte(); code >= 200) c.alias = (code - 200) % (c.kernel == Kernel::softmax ? 3 : 5);
    c.alias_offset = in.u16();
    if (const std::uint8_t code = in.byte(); code >= 192) c.pad = code % 4;
    c.use_workspace = in.byte() >= 128;
    c.workspace_keys = 2 * Index{in.byte()};
    c.workspace_value_dim = in.byte() % 150;
    const std::uint8_t precision = in.byte() % 3;
    c.run_float = precision != 1;
    c.run_double = precision != 0;
    if (const std::uint8_t code = in.byte(); code >= 250) {
        const int invalid_threads[] = {0, -1, -2, std::numeric_limits<int>::min(), 0, -1};
        c.options.threads = invalid_threads[code - 250];
    } else {
        c.options.threads = 1 + code % 2;
    }
    const std::uint8_t value_code = in.byte();
    const double magnitudes[] = {1.0, 0.25, 3.0, 8.0};
    const double magnitude = magnitudes[value_code % 4];
    const bool specials = value_code >= 192;

    const auto fill = [&](RowMatrix<double>& m, Shape shape) {
        m.resize(shape.rows, shape.cols);
        for (Index i = 0; i < m.size(); ++i) m.data()[i] = decode_value(in.byte(), magnitude, specials);
    };
    for (int i = 0; i < kOperands; ++i) fill(c.values[i], c.shape[i]);
    if (c.kernel == Kernel::dint) fill(c.q1_earlier, {std::max<Index>(s - n, 0), c.shape[kQ1].cols});
    return c;
}

// ---- Buffers --------------------------------------------------------------------------------

template <typename T>
using StridedMap = Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

Index stride_of(Shape shape, Index pad) { return std::max<Index>(shape.cols + pad, 1); }

/// Elements from the first to one past the last entry of a strided view (0 when empty).
Index span_of(Shape shape, Index pad) {
    return shape.rows == 0 || shape.cols == 0 ? 0 : (shape.rows - 1) * stride_of(shape, pad) + shape.cols;
}

/// The operands and the output of one run in T, each a strided view of its own buffer, except
/// that the output may be placed inside an operand's buffer (aliasing).
template <typename T>
struct Buffers {
    std::vector<T> storage[kOperands];
    std::vector<T> out_storage;
    bool out_aliases = false;

    explicit Buffers(const Case& c) {
        const Index out_span = span_of(c.out, c.pad);
        const bool alias = c.alias >= 0 && out_span > 0 && span_of(c.shape[c.alias], c.pad) > 0;
        Index alias_offset = 0;
        for (int i = 0; i < kOperands; ++i) {
            Index size = span_of(c.shape[i], c.pad);
            if (alias && i == c.alias) {
                alias_offset = c.alias_offset % size;  // out starts inside the operand's span: they overlap
                size = std::max(size, alias_offset + out_span);
            }
            storage[i].assign(static_cast<std::size_t>(size + 1), T(0));  // + 1: never a null pointer
        }
        out_storage.assign(static_cast<std::size_t>(out_span + 1), T(0));
        out_aliases = alias;
        out_data = alias ? storage[c.alias].data() + alias_offset : out_storage.data();
        out.emplace(out_data, c.out.rows, c.out.cols, Eigen::OuterStride<>(stride_of(c.out, c.pad)));
        out->setConstant(std::numeric_limits<T>::quiet_NaN());  // unwritten entries show up as NaN
        for (int i = 0; i < kOperands; ++i) {
            operand.emplace_back(storage[i].data(), c.shape[i].rows, c.shape[i].cols,
                                 Eigen::OuterStride<>(stride_of(c.shape[i], c.pad)));
            operand.back() = c.values[i].template cast<T>();
        }
    }

    T* out_data = nullptr;
    std::optional<StridedMap<T>> out;
    std::vector<StridedMap<T>> operand;
};

// ---- Validity and histories -----------------------------------------------------------------

/// Why the call is invalid under the documented contract, or "" when it is valid.
template <typename T>
std::string invalid_reason(const Case& c, bool out_aliases, const DintHistory<T>* history) {
    const Shape q1 = c.shape[kQ1], k1 = c.shape[kK1], v = c.shape[kV];
    const bool differential = c.kernel != Kernel::softmax;
    const Index seq_len_kv = k1.rows, cached = k1.rows - q1.rows;
    if (differential && c.shape[kQ2] != q1) return "Q2 and Q1 differ in shape";
    if (differential && c.shape[kK2] != k1) return "K2 and K1 differ in shape";
    if (k1.cols != q1.cols) return "K1 and Q1 differ in columns";
    if (v.rows != k1.rows) return "V and K1 differ in rows";
    if (k1.rows < q1.rows) return "S < N";
    if (c.out.rows != q1.rows || c.out.cols != v.cols) return "out is not N x dv";
    if (out_aliases) return "out overlaps an input";
    if (c.options.valid_len && (*c.options.valid_len < 0 || *c.options.valid_len > seq_len_kv)) return "valid_len out of [0, S]";
    if (c.options.scale && !(std::isfinite(*c.options.scale) && *c.options.scale > 0)) return "scale not finite and > 0";
    if (c.options.scale && !(std::isfinite(static_cast<T>(*c.options.scale)) && static_cast<T>(*c.options.scale) > 0)) {
        return "scale not finite and > 0 in T";
    }
    if (!c.options.scale && q1.cols == 0 && q1.rows > 0) return "no default scale for d = 0";
    if (c.options.mask != MaskKind::none && c.options.mask != MaskKind::causal) return "unknown mask kind";
    if (c.options.threads < 1) return "threads < 1";
    if (differential && !std::isfinite(static_cast<T>(c.lambda))) return "lambda not finite (in T)";
    if (c.kernel != Kernel::dint) return "";
    switch (c.integral) {
        case DintIntegral::global_mean:
            if (c.options.mask != MaskKind::none) return "global_mean with a causal mask";
            if (history != nullptr && history->rows != 0) return "global_mean with history rows";
            return "";
        case DintIntegral::causal_mean:
        case DintIntegral::causal_softmax: break;
        default: return "unknown DintIntegral";
    }
    if (history == nullptr) return cached != 0 ? "causal integral with S > N and no history" : "";
    if (history->rows != cached) return "history rows != S - N";
    if (history->rows > 0 && c.integral == DintIntegral::causal_mean && history->o1_row_sum.size() != v.cols) {
        return "history o1_row_sum size != dv";
    }
    if (history->rows > 0 && c.integral == DintIntegral::causal_softmax && history->a1_column_sum.size() < cached) {
        return "history a1_column_sum shorter than S - N";
    }
    return "";
}

/// The DintHistory the call gets (history_mode 0: none). `consistent` tells whether the
/// reference reads it as the kernel does (then the outputs are compared).
///   1 consistent: built by the reference from the S - N earlier query rows (as the tests do)
///   2 rows off by 1 or 2     3 o1_row_sum one entry too many or too few
///   4 a1_column_sum short    5 a1_column_sum longer than S with a nonzero tail
///   6 a NaN / Inf in a sum   7 a fresh DintHistory{} (rows 0, empty sums)
template <typename T>
std::optional<DintHistory<T>> make_history(const Case& c, const RowMatrix<T>& q1, const RowMatrix<T>& k1,
                                           const RowMatrix<T>& v, bool& consistent) {
    using W = test::Wide<T>;
    consistent = false;
    if (c.kernel != Kernel::dint || c.history_mode == 0) return std::nullopt;
    if (c.history_mode == 7) {
        consistent = k1.rows() == q1.rows();
        return DintHistory<T>{};
    }
    const Index cached = std::max<Index>(k1.rows() - q1.rows(), 0);
    DintHistory<T> history;
    history.rows = cached;
    history.o1_row_sum = Vector<T>::Zero(v.cols());
    history.a1_column_sum = Vector<T>::Zero(k1.rows());
    const bool shapes_fit = k1.rows() >= q1.rows() && q1.cols() == k1.cols() && v.rows() == k1.rows() &&
                            c.q1_earlier.rows() == cached && c.q1_earlier.cols() == q1.cols();
    if (shapes_fit) {
        // As the DINT tests: A1 of all S query rows in Wide<T> from the T inputs, rounded once to T.
        RowMatrix<W> q1_all(k1.rows(), q1.cols());
        q1_all.topRows(cached) = c.q1_earlier.template cast<T>().template cast<W>();
        q1_all.bottomRows(q1.rows()) = q1.template cast<W>();
        try {
            const RowMatrix<W> a1 = reference::attention_map<W>(q1_all, k1.template cast<W>(), c.options);
            history = test::cast_history<T>(reference::dint_history<W>(a1.topRows(cached), v.template cast<W>()));
            consistent = c.history_mode == 1;
        } catch (const Error&) {
            // Options the reference rejects: the call is invalid anyway; keep the zero history.
        }
    }
    const int param = c.history_param;
    switch (c.history_mode) {
        case 2: history.rows += param % 4 < 2 ? -(1 + param % 2) : 1 + param % 2; break;
        case 3: history.o1_row_sum = Vector<T>::Zero(v.cols() + ((param % 2 == 1 || v.cols() == 0) ? 1 : -1)); break;
        case 4: history.a1_column_sum.conservativeResize(std::max<Index>(cached - 1 - param % 3, 0)); break;
        case 5: {
            const Index old_size = history.a1_column_sum.size();
            history.a1_column_sum.conservativeResize(old_size + 1 + param % 4);
            history.a1_column_sum.tail(1 + param % 4).setConstant(T(0.5));
            break;
        }
        case 6: {
            const T bad = param % 2 == 0 ? std::numeric_limits<T>::quiet_NaN() : std::numeric_limits<T>::infinity();
            if (history.o1_row_sum.size() > 0) history.o1_row_sum[param % history.o1_row_sum.size()] = bad;
            if (history.a1_column_sum.size() > 0) history.a1_column_sum[param % history.a1_column_sum.size()] = bad;
            break;
        }
        default: break;
    }
    return history;
}

// ---- One run in T ---------------------------------------------------------------------------

template <typename T>
void call_kernel(const Case& c, Buffers<T>& b, StridedMap<T>& out, DintHistory<T>* history,
                 AttentionWorkspace<T>* workspace) {
    const ConstMatrixRef<T> q1 = b.operand[kQ1], k1 = b.operand[kK1], v = b.operand[kV];
    const ConstMatrixRef<T> q2 = b.operand[kQ2], k2 = b.operand[kK2];
    const T lambda = static_cast<T>(c.lambda);
    switch (c.kernel) {
        case Kernel::softmax: softmax_attention(q1, k1, v, out, c.options, workspace); break;
        case Kernel::diff: diff_attention(q1, k1, q2, k2, v, lambda, out, c.options, workspace); break;
        case Kernel::dint: dint_attention(q1, k1, q2, k2, v, lambda, c.integral, out, c.options, history, workspace); break;
    }
}

/// Calls the kernel; returns the diffattn::Error message, or nullopt when it returned.
template <typename T>
std::optional<std::string> try_kernel(const Case& c, Buffers<T>& b, StridedMap<T>& out, DintHistory<T>* history,
                                      AttentionWorkspace<T>* workspace) {
    try {
        call_kernel(c, b, out, history, workspace);
    } catch (const Error& e) {
        return std::string(e.what());
    } catch (const std::exception& e) {
        finding(c.describe(), ": exception that is not a diffattn::Error: ", e.what());
    }
    return std::nullopt;
}

/// DIFFATTN_FUZZ_VERBOSE=1: one line per run saying what was checked (to see what a corpus covers).
template <typename... Parts>
void note(Parts&&... parts) {
    static const bool verbose = std::getenv("DIFFATTN_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "  %s\n", diffattn::detail::concat(std::forward<Parts>(parts)...).c_str());
}

template <typename Matrix>
long double max_abs_or_zero(const Matrix& m) {
    return m.size() == 0 ? 0.0L : test::max_abs(m);
}

template <typename T>
void run(const Case& c) {
    using W = test::Wide<T>;
    const char* type = sizeof(T) == sizeof(float) ? "float" : "double";
    Buffers<T> b(c);
    const RowMatrix<T> q1 = b.operand[kQ1], k1 = b.operand[kK1], v = b.operand[kV];
    const RowMatrix<T> q2 = b.operand[kQ2], k2 = b.operand[kK2];
    bool consistent_history = false;
    const std::optional<DintHistory<T>> history_before = make_history<T>(c, q1, k1, v, consistent_history);
    std::optional<DintHistory<T>> history = history_before;
    DintHistory<T>* history_arg = history ? &*history : nullptr;
    AttentionWorkspace<T> workspace;
    if (c.use_workspace) workspace.reserve(0, c.workspace_keys, 0, c.workspace_value_dim);
    AttentionWorkspace<T>* workspace_arg = c.use_workspace ? &workspace : nullptr;

    const std::string invalid = invalid_reason<T>(c, b.out_aliases, history_arg);
    const std::optional<std::string> error = try_kernel(c, b, *b.out, history_arg, workspace_arg);
    const std::string what = c.describe() + " in " + type;
    if (!invalid.empty()) {
        if (!error) finding(what, ": invalid call (", invalid, ") was accepted");
        note(type, " rejected as expected (", invalid, ")");
        return;
    }
    if (error) finding(what, ": valid call was rejected: ", *error);

    const RowMatrix<T> out = *b.out;
    const Index n = q1.rows(), s = k1.rows();
    const Index valid_len = c.options.valid_len ? *c.options.valid_len : s;
    // docs/math.md §1: a query allowed no key has an all-zero row, whatever the values (even NaN).
    for (Index row = 0; row < n; ++row) {
        if (!reference::row_has_allowed_key(c.options.mask, row, n, s, valid_len) && !out.row(row).isZero(0)) {
            finding(what, ": row ", row, " sees no key but its output is not zero");
        }
    }
    if (history && history->rows != history_before->rows + n) {
        finding(what, ": the history has ", history->rows, " rows after the call, not ", history_before->rows + n);
    }
    // The same call again with the now-used workspace: the same bits (stale scratch would show).
    if (c.use_workspace && c.options.threads == 1) {
        std::optional<DintHistory<T>> again_history = history_before;
        std::vector<T> again_storage(b.out_storage.size());
        StridedMap<T> again(again_storage.data(), c.out.rows, c.out.cols, Eigen::OuterStride<>(stride_of(c.out, c.pad)));
        if (const auto again_error = try_kernel(c, b, again, again_history ? &*again_history : nullptr, workspace_arg)) {
            finding(what, ": the second call with the same workspace was rejected: ", *again_error);
        }
        for (Index i = 0; i < out.rows(); ++i) {
            for (Index j = 0; j < out.cols(); ++j) {
                const T x = out(i, j), y = again(i, j);
                if (!(x == y || (std::isnan(x) && std::isnan(y)))) {
                    finding(what, ": the second call with the same workspace differs at (", i, ", ", j, "): ", x, " vs ", y);
                }
            }
        }
    }

    // docs/math.md §7 against the reference, on the kernel tests' domain.
    if (history && !consistent_history) return note(type, " valid, not compared: inconsistent history");
    long double max_input = 0;
    bool finite = true;
    for (const RowMatrix<T>* m : {&q1, &k1, &v, &q2, &k2}) {
        finite = finite && test::all_finite(*m);
        max_input = std::max(max_input, max_abs_or_zero(*m));
    }
    if (history) finite = finite && history_before->o1_row_sum.allFinite() && history_before->a1_column_sum.allFinite();
    const double scale = c.options.scale ? *c.options.scale : (q1.cols() > 0 ? 1.0 / std::sqrt(double(q1.cols())) : 1.0);
    const long double max_logit = scale * max_abs_or_zero(q1) * max_abs_or_zero(k1) * q1.cols();
    const long double max_logit2 = scale * max_abs_or_zero(q2) * max_abs_or_zero(k2) * q2.cols();
    const T lambda = static_cast<T>(c.lambda);
    if (!finite || max_input > 1 || std::fabs(static_cast<double>(lambda)) > 1 || scale > 2.5) {
        return note(type, " valid, not compared: outside the kernel tests' domain");
    }
    RowMatrix<T> plain;
    RowMatrix<W> oracle;
    long double fallback = test::forward_error_bound<T>(q1.cols(), s, std::max(max_logit, max_logit2), max_abs_or_zero(v));
    try {
        const RowMatrix<W> q1w = q1.template cast<W>(), k1w = k1.template cast<W>(), vw = v.template cast<W>();
        const RowMatrix<W> q2w = q2.template cast<W>(), k2w = k2.template cast<W>();
        const W lambda_w = static_cast<W>(lambda);
        switch (c.kernel) {
            case Kernel::softmax:
                plain = reference::softmax_attention<T>(q1, k1, v, c.options);
                oracle = reference::softmax_attention<W>(q1w, k1w, vw, c.options);
                break;
            case Kernel::diff:
                plain = reference::diff_attention<T>(q1, k1, q2, k2, v, lambda, c.options);
                oracle = reference::diff_attention<W>(q1w, k1w, q2w, k2w, vw, lambda_w, c.options);
                fallback *= 2;  // two maps
                break;
            case Kernel::dint: {
                std::optional<DintHistory<W>> wide_history;
                if (history_before) wide_history = test::cast_history<W>(*history_before);
                plain = reference::dint_attention<T>(q1, k1, q2, k2, v, lambda, c.integral, c.options,
                                                     history_before ? &*history_before : nullptr);
                oracle = reference::dint_attention<W>(q1w, k1w, q2w, k2w, vw, lambda_w, c.integral, c.options,
                                                      wide_history ? &*wide_history : nullptr);
                fallback *= 3;  // three maps
                break;
            }
        }
    } catch (const Error& e) {
        finding(what, ": the kernel accepted the call but the reference rejected it: ", e.what());
    }
    const test::Accuracy accuracy = test::spec7_accuracy<T>(out, plain, oracle, fallback);
    if (!accuracy.ok()) {
        finding(what, ": docs/math.md §7 violated: fast error ", static_cast<double>(accuracy.fast_error), ", plain ", type,
                " reference error ", static_cast<double>(accuracy.plain_error), ", tolerance ",
                static_cast<double>(accuracy.tolerance));
    }
    note(type, " valid, docs/math.md §7 ok: fast error ", static_cast<double>(accuracy.fast_error), " <= tolerance ",
         static_cast<double>(accuracy.tolerance), " (", c.describe(), ")");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    ByteReader in(data, size);
    const Case c = decode_case(in);
    if (c.run_float) run<float>(c);
    if (c.run_double) run<double>(c);
    return 0;
}
