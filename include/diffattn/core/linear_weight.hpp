// The weight of one linear layer, nn.Linear's W [out x in], in a storage format
// (core/weight_format.hpp, docs/math.md §10), and the read-only view the products take.
//
// In the f32 format the weight is a WeightMatrix<T> (core/weight_matrix.hpp), an Eigen matrix on
// the weight pool: every Eigen expression reads it as before. In the other formats it is the rows'
// bytes on the weight pool, written once (store_rows, the loader's copy of a file's blocks) and
// read by the products (layers/linear.hpp), which decode a row's blocks as they multiply
// them; decode_rows gives the weights back as T, exactly as the products see them.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/memory_limit.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_blocks.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/core/weight_matrix.hpp"
#include "diffattn/core/weight_pool.hpp"

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace diffattn {

/// A read-only view of a weight [rows x cols] in any format: what a product reads. Cheap to copy;
/// valid while the weight it views lives. Built implicitly from a LinearWeight, a WeightMatrix or
/// any row-major matrix (an f32 view).
template <typename T>
struct WeightView {
    WeightFormat format = WeightFormat::f32;
    Index rows = 0;
    Index cols = 0;
    const T* dense = nullptr;              ///< f32: row r at dense + r * outer_stride
    Index outer_stride = 0;                ///< f32: scalars from a row to the next
    const unsigned char* bytes = nullptr;  ///< other formats: row r at bytes + r * row_bytes
    Index row_bytes = 0;                   ///< other formats: bytes of one row

    WeightView() = default;
    WeightView(const ConstMatrixRef<T>& m)  // NOLINT: an f32 weight converts as Ref does
        : rows(m.rows()), cols(m.cols()), dense(m.data()), outer_stride(m.outerStride()) {}
    template <typename Derived>
    WeightView(const Eigen::MatrixBase<Derived>& m) : WeightView(ConstMatrixRef<T>(m)) {}  // NOLINT

    /// The f32 weight as an Eigen view (format f32 only).
    Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>> matrix() const {
        return {dense, rows, cols, Eigen::OuterStride<>(outer_stride)};
    }
    /// Row r's bytes (formats other than f32).
    const unsigned char* row(Index r) const { return bytes + r * row_bytes; }
    /// Rows [first, first + count).
    WeightView middle_rows(Index first, Index count) const {
        WeightView v = *this;
        v.rows = count;
        if (format == WeightFormat::f32) {
            v.dense = dense + first * outer_stride;
        } else {
            v.bytes = bytes + first * row_bytes;
        }
        return v;
    }
    /// Bytes a product reads: every row once.
    double stored_bytes() const {
        return static_cast<double>(rows) *
               static_cast<double>(format == WeightFormat::f32 ? cols * Index(sizeof(T)) : row_bytes);
    }
};

template <typename T>
class LinearWeight {
public:
    /// An empty [0 x 0] weight in the f32 format.
    LinearWeight() = default;
    /// A [rows x cols] weight of zeros in `format`. ShapeError for a negative shape, one larger
    /// than the machine's memory, or a block format whose blocks do not tile a row (can_store).
    LinearWeight(Index rows, Index cols, WeightFormat format = WeightFormat::f32) { allocate(rows, cols, format); }
    /// An f32 weight holding `m` (any Eigen expression: a copy).
    template <typename Derived>
    LinearWeight(const Eigen::DenseBase<Derived>& m) : dense_(m) {}  // NOLINT: converts as WeightMatrix does
    /// Copies are deep in every format, as WeightMatrix's are.
    LinearWeight(const LinearWeight& other) : format_(other.format_), dense_(other.dense_) {
        if (format_ != WeightFormat::f32) {
            allocate(other.rows_, other.cols_, format_);
            if (rows_ > 0) std::memcpy(data(), other.data(), static_cast<std::size_t>(rows_ * row_bytes()));
        }
    }
    LinearWeight(LinearWeight&&) noexcept = default;
    LinearWeight& operator=(const LinearWeight& other) {
        if (this != &other) *this = LinearWeight(other);
        return *this;
    }
    LinearWeight& operator=(LinearWeight&&) noexcept = default;

    /// f32: the weight becomes a copy of `m`, of its shape (as WeightMatrix's assignment). Other
    /// formats: `m`'s rows are encoded in this weight's format (store_rows), shape kept or reallocated.
    template <typename Derived>
    LinearWeight& operator=(const Eigen::DenseBase<Derived>& m) {
        if (format_ == WeightFormat::f32) {
            dense_ = m;
            return *this;
        }
        if (m.rows() != rows_ || m.cols() != cols_) allocate(m.rows(), m.cols(), format_);
        const RowMatrix<T> rows = m;
        store_rows(0, rows, "LinearWeight");
        return *this;
    }

    WeightFormat format() const { return format_; }
    Index rows() const { return format_ == WeightFormat::f32 ? dense_.rows() : rows_; }
    Index cols() const { return format_ == WeightFormat::f32 ? dense_.cols() : cols_; }
    /// Bytes of one stored row.
    Index row_bytes() const { return diffattn::row_bytes(format_, cols(), Index(sizeof(T))); }
    /// Bytes the weight occupies: rows() row_bytes().
    double stored_bytes() const { return static_cast<double>(rows()) * static_cast<double>(row_bytes()); }

    /// The f32 weight as an Eigen matrix. OptionError in another format.
    WeightMatrix<T>& dense() {
        require_dense();
        return dense_;
    }
    const WeightMatrix<T>& dense() const {
        require_dense();
        return dense_;
    }

    /// The view a product reads.
    WeightView<T> view() const {
        if (format_ == WeightFormat::f32) return WeightView<T>(ConstMatrixRef<T>(dense_));
        WeightView<T> v;
        v.format = format_;
        v.rows = rows_;
        v.cols = cols_;
        v.bytes = static_cast<const unsigned char*>(bytes_.get());
        v.row_bytes = row_bytes();
        return v;
    }
    operator WeightView<T>() const { return view(); }  // NOLINT: every product takes a view

    /// Row r's bytes, to be written in this weight's own format (the loader's copy of stored blocks).
    unsigned char* stored_row(Index r) { return data() + r * row_bytes(); }
    const unsigned char* stored_row(Index r) const { return data() + r * row_bytes(); }

    /// Encodes `rows` [n x cols] into rows [first, first + n). ErrorType (naming `what`, the row and
    /// the column) for a weight the format cannot store (detail::first_unstorable_weight): the rows
    /// before it are written.
    template <typename ErrorType = OptionError>
    void store_rows(Index first, const ConstMatrixRef<T>& rows, const std::string& what) {
        require<ShapeError>(rows.cols() == cols() && first >= 0 && first + rows.rows() <= this->rows(),
                            "LinearWeight::store_rows: rows [", first, ", ", first + rows.rows(), ") of width ",
                            rows.cols(), " do not fit a weight of ", this->rows(), " x ", cols());
        for (Index r = 0; r < rows.rows(); ++r) {
            const T* x = rows.row(r).data();
            const Index bad = detail::first_unstorable_weight(format_, x, cols());
            require<ErrorType>(bad < 0, what, ": weight [", first + r, ", ", bad, "] = ", bad < 0 ? T(0) : x[bad],
                               " cannot be stored as ", to_string(format_), unstorable_reason());
            detail::encode_row(format_, x, cols(), stored_row(first + r));
        }
    }

    /// out [count x cols] = rows [first, first + count) as T: the weights the products multiply.
    void decode_rows(Index first, Index count, MatrixRef<T> out) const {
        for (Index r = 0; r < count; ++r) detail::decode_row(format_, stored_row(first + r), cols(), out.row(r).data());
    }
    /// Every row as T.
    RowMatrix<T> decoded() const {
        RowMatrix<T> out(rows(), cols());
        decode_rows(0, rows(), out);
        return out;
    }

    /// This weight in `format` (a copy; encoded from its decoded rows when the formats differ).
    /// ShapeError when the rows cannot be cut into blocks, OptionError for an unstorable weight.
    LinearWeight converted(WeightFormat format, const std::string& what = "LinearWeight") const {
        if (format == format_) return *this;
        LinearWeight out(rows(), cols(), format);
        if (format == WeightFormat::f32) {
            decode_rows(0, rows(), out.dense_);
        } else {
            out.store_rows(0, format_ == WeightFormat::f32 ? RowMatrix<T>(dense_) : decoded(), what);
        }
        return out;
    }

private:
    void allocate(Index rows, Index cols, WeightFormat format) {
        require<ShapeError>(can_store(format, cols), "LinearWeight: rows of ", cols, " weights are not whole ",
                            kWeightBlock, "-weight blocks of ", to_string(format));
        format_ = format;
        if (format == WeightFormat::f32) {
            dense_ = WeightMatrix<T>(rows, cols);
            bytes_.reset();
            rows_ = cols_ = 0;
            return;
        }
        require<ShapeError>(rows >= 0 && cols >= 0, "LinearWeight: a shape of ", rows, " x ", cols);
        const Index bytes = diffattn::row_bytes(format, cols, Index(sizeof(T)));
        require_memory(static_cast<long double>(rows) * static_cast<long double>(bytes), "LinearWeight: ", rows,
                       " x ", cols, " weights in ", to_string(format));
        WeightPool::Block block = weight_pool().allocate(static_cast<std::size_t>(rows * bytes));
        if (block.data != nullptr) std::memset(block.data, 0, static_cast<std::size_t>(rows * bytes));
        bytes_ = std::shared_ptr<void>(std::move(block.owner), block.data);
        dense_ = WeightMatrix<T>();
        rows_ = rows;
        cols_ = cols;
    }

    unsigned char* data() const {
        return format_ == WeightFormat::f32 ? reinterpret_cast<unsigned char*>(const_cast<T*>(dense_.data()))
                                            : static_cast<unsigned char*>(bytes_.get());
    }
    const char* unstorable_reason() const {
        return format_ == WeightFormat::bf16 ? " (it would round to infinity)"
                                             : " (not finite, or its block's scale would exceed f16's 65504)";
    }
    void require_dense() const {
        require<OptionError>(format_ == WeightFormat::f32, "LinearWeight: the weight is stored as ",
                             to_string(format_), ", not as an f32 matrix (decoded() gives its values)");
    }

    WeightFormat format_ = WeightFormat::f32;
    WeightMatrix<T> dense_;            // f32
    std::shared_ptr<void> bytes_;      // other formats: rows_ x row_bytes() on the weight pool
    Index rows_ = 0, cols_ = 0;        // other formats
};

}  // namespace diffattn
