// Named parameter views: one list, four uses (loading, seeded initialisation, counting, and the
// tensor table a checkpoint is checked against before anything is allocated).
//
// Every module describes its tensors once, by model-file name and file shape, from its
// configuration, with views of the storage the tensor goes to, or none (a table entry only: the
// loader checks every name and shape of a checkpoint against it before it allocates the model).
// The loader checks each file tensor against the shape and copies it in; the seeded initialiser
// fills the same views; the parameter count is the sum of the shapes (and is checked against the
// documented closed-form formulas).
//
// A tensor's storage may be split: a 3-D file tensor [H, rows, cols] (Shared DIFF's per-head
// factors) goes to H slices of [rows x cols] that live inside wider compute-friendly matrices, and
// the row blocks of a 2-D tensor may go to other rows (DiffLlama's halves pairing, stored_head()).
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_matrix.hpp"
#include "diffattn/io/safetensors_format.hpp"  // detail::ends_with

#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace diffattn {

/// A writable [rows x cols] row-major view with an outer stride (a matrix, a vector seen as one
/// row, or a block of a wider row-major matrix), or whole rows of a weight stored in another format
/// than f32 (`stored`), which are written by encoding them (LinearWeight::store_rows).
template <typename T>
struct ParameterSlice {
    T* data = nullptr;
    Index rows = 0;
    Index cols = 0;
    Index outer_stride = 0;
    LinearWeight<T>* stored = nullptr;  ///< not null: rows [first_row, first_row + rows) of this weight
    Index first_row = 0;

    using Map = Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>>;
    /// The slice as a matrix (not a stored slice).
    Map map() const { return Map(data, rows, cols, Eigen::OuterStride<>(outer_stride)); }

    static ParameterSlice of(WeightMatrix<T>& m) { return {m.data(), m.rows(), m.cols(), m.cols()}; }
    static ParameterSlice of(Vector<T>& v) { return {v.data(), 1, v.size(), v.size()}; }
    static ParameterSlice of(LinearWeight<T>& w) { return rows_of(w, 0, w.rows()); }
    /// Rows [row, row + rows) x columns [col, col + cols) of a row-major matrix.
    static ParameterSlice block(WeightMatrix<T>& m, Index row, Index col, Index rows, Index cols) {
        return {m.data() + row * m.cols() + col, rows, cols, m.cols()};
    }
    /// Rows [row, row + count) of a weight in any format.
    static ParameterSlice rows_of(LinearWeight<T>& w, Index row, Index count) {
        if (w.format() == WeightFormat::f32) return block(w.dense(), row, 0, count, w.cols());
        return {nullptr, count, w.cols(), w.cols(), &w, row};
    }

    /// Writes row r of the slice from values[0, cols). ErrorType naming `what` for a weight the
    /// stored format cannot hold.
    template <typename ErrorType = OptionError>
    void write_rows(Index r, const ConstMatrixRef<T>& values, const std::string& what) const {
        if (stored != nullptr) {
            stored->template store_rows<ErrorType>(first_row + r, values, what);
        } else {
            map().middleRows(r, values.rows()) = values;
        }
    }
};

/// One tensor of the model file.
template <typename T>
struct Parameter {
    std::string name;                     ///< e.g. "model.layers.0.self_attn.q_proj.weight"
    std::vector<Index> shape;             ///< shape in the file, e.g. {out, in}, {d}, {H, D, r}
    std::vector<ParameterSlice<T>> slices;///< storage in file order: 1 slice for a plain 1-D / 2-D tensor,
                                          ///< shape[0] for a 3-D one, one per row block when reordered;
                                          ///< none in a tensor table (no storage yet)
    bool linear_weight = false;           ///< a LinearWeight: stored in the model's weight format
    bool output_head = false;             ///< the weight the logits are computed with (stored_format)

    /// Number of scalars.
    Index size() const {
        return std::accumulate(shape.begin(), shape.end(), Index(1), std::multiplies<Index>());
    }
    /// True for 1-D tensors (norm weights, lambda vectors).
    bool is_vector() const { return shape.size() == 1; }
};

/// The tensors of a module, in model-file order, each with a view of its storage.
template <typename T>
class ParameterList {
public:
    using Item = Parameter<T>;

    /// A tensor of file shape `shape` stored in `slices`, which hold its elements in file order
    /// (a 3-D [n, rows, cols] tensor: n slices [rows x cols]), or only named and shaped when
    /// `slices` is empty (a tensor table).
    /// `linear_weight`: the tensor is a LinearWeight (stored in the model's weight format).
    void add(std::string name, std::vector<Index> shape, std::vector<ParameterSlice<T>> slices,
             bool linear_weight = false) {
        Index stored = 0;
        for (const ParameterSlice<T>& slice : slices) stored += slice.rows * slice.cols;
        Item item{std::move(name), std::move(shape), std::move(slices), linear_weight};
        require<ShapeError>(item.slices.empty() || stored == item.size(), "ParameterList: tensor ", item.name,
                            " has ", item.size(), " elements but its storage ", stored);
        items_.push_back(std::move(item));
    }
    /// A 2-D tensor [rows, cols] in `m`, or a table entry when `m` is null.
    void add(std::string name, Index rows, Index cols, WeightMatrix<T>* m) {
        add(std::move(name), {rows, cols}, m ? std::vector<ParameterSlice<T>>{ParameterSlice<T>::of(*m)}
                                             : std::vector<ParameterSlice<T>>{});
    }
    /// A 2-D tensor [rows, cols] in the weight `w` (any format), or a table entry when `w` is null.
    void add(std::string name, Index rows, Index cols, LinearWeight<T>* w) {
        add(std::move(name), {rows, cols}, w ? std::vector<ParameterSlice<T>>{ParameterSlice<T>::of(*w)}
                                             : std::vector<ParameterSlice<T>>{},
            true);
    }
    /// A 1-D tensor [size] in `v`, or a table entry when `v` is null.
    void add(std::string name, Index size, Vector<T>* v) {
        add(std::move(name), {size}, v ? std::vector<ParameterSlice<T>>{ParameterSlice<T>::of(*v)}
                                       : std::vector<ParameterSlice<T>>{});
    }

    const std::vector<Item>& items() const { return items_; }
    std::vector<Item>& items() { return items_; }
    auto begin() { return items_.begin(); }
    auto end() { return items_.end(); }
    auto begin() const { return items_.begin(); }
    auto end() const { return items_.end(); }
    std::size_t size() const { return items_.size(); }

    /// Total number of scalars.
    Index parameter_count() const {
        Index total = 0;
        for (const Item& item : items_) total += item.size();
        return total;
    }

private:
    std::vector<Item> items_;
};

/// A portable seeded generator of uniform values in [-1, 1): the same numbers on every platform
/// and standard library (std::uniform_real_distribution is implementation-defined, this is not).
class SeededUniform {
public:
    explicit SeededUniform(std::uint64_t seed) : state_(seed) {}

    /// SplitMix64 step mapped to [-1, 1) with 53 random bits.
    double next() {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
    }

private:
    std::uint64_t state_;
};

/// Seeded initialisation for demos and tests (not a training recipe):
///  - norm weights (`*norm.weight`, `*layernorm.weight`, `subln.weight`): 1 + 0.1 u
///  - lambda vectors (`lambda_q1` ...): 0.1 u (the official code draws them from N(0, 0.1^2))
///  - every other tensor: u / sqrt(fan_in), fan_in = last dimension (nn.Linear's bound);
///    the token embedding uses u (Shared DIFF's `*_a` [H, D, r] factors use fan_in = D).
/// with u uniform in [-1, 1). Tensors are filled in list order from one stream, so the values
/// depend only on the seed and the configuration.
template <typename T>
void init_parameters_uniform(ParameterList<T>& parameters, std::uint64_t seed) {
    SeededUniform random(seed);
    for (Parameter<T>& p : parameters) {
        const bool is_norm = p.is_vector() && detail::ends_with(p.name, "norm.weight");
        const bool is_subln = detail::ends_with(p.name, "subln.weight");
        const bool is_lambda = p.name.find("lambda_") != std::string::npos && p.is_vector();
        const bool is_embedding = detail::ends_with(p.name, "embed_tokens.weight");
        // fan_in: the contracted dimension. 3-D Shared DIFF factors: `*_a` [H, D, r] is applied as
        // X a (fan_in D), `*_b` [H, d, r] as (X a) b^T (fan_in r).
        const bool is_a_factor = p.shape.size() == 3 && detail::ends_with(p.name, "_a");
        const double fan_in = static_cast<double>(is_a_factor ? p.shape[1] : p.shape.back());
        RowMatrix<T> row;
        for (const ParameterSlice<T>& slice : p.slices) {
            row.resize(1, slice.cols);
            for (Index r = 0; r < slice.rows; ++r) {
                for (Index c = 0; c < slice.cols; ++c) {
                    const double u = random.next();
                    double value = u / std::sqrt(fan_in);
                    if (is_norm || is_subln) value = 1.0 + 0.1 * u;
                    else if (is_lambda) value = 0.1 * u;
                    else if (is_embedding) value = u;
                    row(0, c) = static_cast<T>(value);
                }
                slice.write_rows(r, row, p.name);
            }
        }
    }
}

}  // namespace diffattn
