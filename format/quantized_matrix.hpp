// The logical form of a group-quantized K x N matrix: one integer code per weight plus per-group
// scales and zero points. Quantizers and importers produce it, the reference oracle consumes it,
// and packers turn it into the layout a kernel streams.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/weight_format.hpp"
#include "qjit/qjit.h"

namespace qjit {

// A format's data: per-group scales and zero points, and the row permutation of an act-order
// layer (the format says whether there is one; validate() checks that they agree).
struct QuantParams : WeightFormat {
    std::vector<float> scales;      // [num_groups][n]; exact in fp32 whatever scale_type says
    std::vector<uint16_t> zeros;    // [num_groups][n]; up to 2^bits (layer files saved before GPTQ v1 was read word-wise may hold it)
    std::vector<int32_t> row_order; // act_order: storage row r holds original row row_order[r]; else empty

    const WeightFormat& format() const { return *this; }
};

struct QuantizedMatrix {
    QuantParams params;
    std::vector<uint8_t> codes;  // [k][n], rows in storage order
};

// Throws unless the matrix is self-consistent: its format valid, sizes, code and zero ranges,
// finite scales, row_order a permutation exactly when the format is act-order.
void validate(const QuantizedMatrix& matrix);
void validate(const QuantParams& params);

// Bytes the format stores, by the usual accounting: codes at `bits`, scales at their type, zero
// points at `bits` when asymmetric, the act-order permutation as int32 (a compensator is counted
// by low_rank_stored_bytes).
int64_t stored_bytes(const QuantParams& params);

}  // namespace qjit
