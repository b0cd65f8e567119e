// The type of every weight matrix: a row-major Eigen matrix with value semantics whose storage
// comes from the weight pool (core/weight_pool.hpp), so that a model's matrices lie packed on
// 2 MB pages.
//
// It is an Eigen::Map over its block, so every Eigen expression, Eigen::Ref and block of it reads
// the pooled storage in place. Unlike a Map it owns that storage and behaves as RowMatrix does:
// copies are deep, assigning an expression of another shape reallocates, resize() reallocates
// when the shape changes (contents then unspecified), and moves take the storage over.
// What writes through the Map itself (noalias(), a block, +=) keeps the shape, as a Map's writes
// do, and Eigen asserts that the shapes agree: give the shape first (resize) where it may differ.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/memory_limit.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_pool.hpp"

#include <memory>
#include <new>
#include <utility>

namespace diffattn {

template <typename T>
class WeightMatrix : public Eigen::Map<RowMatrix<T>, Eigen::AlignedMax> {
    static_assert(WeightPool::kAlignment % EIGEN_MAX_ALIGN_BYTES == 0, "pool blocks must meet Eigen's alignment");

public:
    using Base = Eigen::Map<RowMatrix<T>, Eigen::AlignedMax>;

    /// An empty [0 x 0] matrix.
    WeightMatrix() : Base(nullptr, 0, 0) {}
    /// A [rows x cols] matrix of zeros. ShapeError for a negative shape or one larger than the
    /// machine's memory.
    WeightMatrix(Index rows, Index cols) : WeightMatrix() {
        reallocate(rows, cols);
        this->setZero();
    }
    WeightMatrix(const WeightMatrix& other) : WeightMatrix() { assign(other); }
    WeightMatrix(WeightMatrix&& other) noexcept : WeightMatrix() { swap(other); }
    /// A copy of an Eigen expression (RowMatrix<T>::Random(r, c), a block of another matrix, ...).
    template <typename Derived>
    WeightMatrix(const Eigen::DenseBase<Derived>& other) : WeightMatrix() {  // NOLINT: converts as RowMatrix does
        assign(other.derived());
    }

    WeightMatrix& operator=(const WeightMatrix& other) {
        if (this != &other) assign(other);
        return *this;
    }
    WeightMatrix& operator=(WeightMatrix&& other) noexcept {
        WeightMatrix(std::move(other)).swap(*this);
        return *this;
    }
    template <typename Derived>
    WeightMatrix& operator=(const Eigen::DenseBase<Derived>& other) {
        assign(other.derived());
        return *this;
    }

    /// Gives the matrix the shape [rows x cols]: new storage, contents unspecified, when it differs.
    void resize(Index rows, Index cols) {
        if (rows != this->rows() || cols != this->cols()) reallocate(rows, cols);
    }

    void swap(WeightMatrix& other) noexcept {
        T* const data = this->data();
        const Index rows = this->rows(), cols = this->cols();
        rebind(other.data(), other.rows(), other.cols());
        other.rebind(data, rows, cols);
        storage_.swap(other.storage_);
    }

private:
    // Another shape gets new storage, written before the old is released, so a source that reads
    // this matrix (its transpose, a block of it) is still intact while it is copied.
    template <typename Source>
    void assign(const Source& source) {
        if (source.rows() == this->rows() && source.cols() == this->cols()) {
            Base::operator=(source);
            return;
        }
        WeightMatrix fresh;
        fresh.reallocate(source.rows(), source.cols());
        static_cast<Base&>(fresh) = source;
        swap(fresh);
    }

    // A negative shape, or one larger than the machine's memory, is refused before anything is
    // allocated (the zeros would touch every page).
    void reallocate(Index rows, Index cols) {
        require<ShapeError>(rows >= 0 && cols >= 0, "WeightMatrix: a shape of ", rows, " x ", cols);
        require_memory(static_cast<long double>(rows) * static_cast<long double>(cols) *
                           static_cast<long double>(sizeof(T)),
                       "WeightMatrix: ", rows, " x ", cols, " weights");
        WeightPool::Block block = weight_pool().allocate(static_cast<std::size_t>(rows * cols) * sizeof(T));
        storage_ = std::move(block.owner);
        rebind(static_cast<T*>(block.data), rows, cols);
    }

    // Points the Map at other storage: Eigen's documented way is to construct the Map anew in place.
    void rebind(T* data, Index rows, Index cols) noexcept { new (static_cast<Base*>(this)) Base(data, rows, cols); }

    std::shared_ptr<const void> storage_;  // keeps the pool's chunk holding data() alive
};

}  // namespace diffattn
