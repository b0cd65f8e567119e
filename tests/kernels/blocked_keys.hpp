// Keys laid out as a KV cache stores them, in blocks of 16 keys entry by entry (HeadBlocks::
// blocked_keys, kernels/key_rows.hpp), for the kernel tests that read keys there
// (test_half_kv.cpp, test_gda_attention.cpp).
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/key_rows.hpp"
#include "diffattn/layers/head_blocks.hpp"

namespace diffattn::test {

/// One head's keys `rows` [S x d] stored in blocks of 16 (the padding keys filled with -77), and
/// the kernels' key operand over them.
template <typename S>
struct BlockedKeys {
    Vector<S> store;
    detail::KeyRows<S> keys;

    explicit BlockedKeys(const RowMatrix<S>& rows)
        : store(Vector<S>::Constant(detail::whole_key_blocks(rows.rows()) * rows.cols(), S(-77.0f))) {
        const auto blocks = HeadBlocks<S>::blocked_keys(store.data(), 1, rows.cols(), rows.rows());
        blocks.write_rows(0, rows);
        keys = blocks.as_const().keys(0, rows.rows());
    }
};

}  // namespace diffattn::test
