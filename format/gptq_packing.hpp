// GPTQ qweight straight into the packed layout (format/packed_codes.hpp), with no [k][n] byte
// matrix in between: the fast path of layer creation. import_gptq + pack_codes is its oracle.
//
// Without act-order a 32-row block of one column is `bits` GPTQ words in and `bits` packed words
// out, a fixed bit permutation per bit width, so full blocks are converted word by word. Rows a
// block cannot cover whole (a last block of K % 32 rows) and act-order rows (gathered by
// row_order) are moved code by code.
#pragma once

#include <cstdint>
#include <vector>

#include "format/packed_codes.hpp"

namespace qjit {

// Packs the columns of panels [first_panel, end_panel) of `out` from `qweight` (GPTQ int32
// [ceil(K*bits/32)][N], see format/gptq_import.hpp). `out` says bits, K, N and the panel width; it
// may come from unwritten_packed_codes, since every word of the panels is written, padding
// included. row_order is the layer's (storage row r holds original row row_order[r]; empty: none).
// Touches only those panels' words, so threads may pack disjoint panel ranges of one `out` at
// once. Without act-order each qweight word of those columns is read once.
void pack_gptq_panels(const int32_t* qweight, const std::vector<int32_t>& row_order, int64_t first_panel,
                      int64_t end_panel, PackedCodes& out);

}  // namespace qjit
