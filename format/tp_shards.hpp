// Tensor-parallel shards of quantized matrices (docs/tensor-parallel.md): a column-parallel
// matrix's columns and a row-parallel matrix's rows, cut from the whole matrix without requantizing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "format/quantized_matrix.hpp"

namespace qjit {

// Whether order[i] == i for every i: a permutation that moves nothing.
bool is_identity(std::span<const int32_t> order);

// The original rows in storage order: row_order for an act-order matrix, else 0 .. K-1.
std::vector<int32_t> storage_row_order(const QuantParams& params);

// The matrix's columns `columns` (original indices, distinct), in that order. Unless they are all
// of them in order, the result records them: permuted_columns, column_order[j] = columns[j]. Rows,
// groups and act-order stay as they are.
QuantizedMatrix select_columns(const QuantizedMatrix& matrix, std::span<const int32_t> columns);

// Storage rows [first, first + count) as a matrix of their own, rows in storage order and no
// act-order (its inputs arrive in that order). The rows must be whole groups (the last may be the
// remainder of K); one group per column is split into groups of `count` rows with its scales.
QuantizedMatrix select_storage_rows(const QuantizedMatrix& matrix, int64_t first, int64_t count);

}  // namespace qjit
