// Core Eigen aliases used throughout diffattn.
//
// Every [tokens x features] matrix is row-major, so that a head is a `middleCols`
// block of a wider matrix and binds to the `Ref` aliases below without a copy
// (a column-major Ref over row-major data would silently copy).
#pragma once

#include "diffattn/core/x86_intrinsics.hpp"  // first: before Eigen includes the intrinsics

#include <Eigen/Core>

#include <cstdint>
#include <type_traits>

namespace diffattn {

using Index = Eigen::Index;

/// Row-major dynamic matrix: the storage type of every [tokens x features] buffer.
template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Column-major dynamic matrix: scratch whose columns are vectors (e.g. per-chunk column sums).
template <typename T>
using ColMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

/// Dynamic column vector (per-row statistics, weights, biases).
template <typename T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Read-only view of a row-major matrix or of a column block of one
/// (inner stride 1, any outer stride). Binds to RowMatrix, Map and middleCols without a copy.
template <typename T>
using ConstMatrixRef = Eigen::Ref<const RowMatrix<T>>;

/// Writable view of a row-major matrix or of a column block of one. The caller owns the storage.
template <typename T>
using MatrixRef = Eigen::Ref<RowMatrix<T>>;

/// Read-only / writable views of a contiguous vector.
template <typename T>
using ConstVectorRef = Eigen::Ref<const Vector<T>>;
template <typename T>
using VectorRef = Eigen::Ref<Vector<T>>;

/// Scalar of running sums over many rows: double for float, so a sum of N rows keeps float
/// accuracy instead of losing O(N eps).
template <typename T>
using Accumulator = std::conditional_t<std::is_same_v<T, float>, double, T>;

/// Map over a raw row-major buffer (file data, user memory).
template <typename T>
using RowMatrixMap = Eigen::Map<RowMatrix<T>>;
template <typename T>
using ConstRowMatrixMap = Eigen::Map<const RowMatrix<T>>;

}  // namespace diffattn
