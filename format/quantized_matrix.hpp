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

// Second-order scales: each K-group's scales quantized again, to 4-bit codes, in groups of
// kColumns output columns with an fp16 scale and zero per such group:
//     scale[g][c] = float(scale2[g][c / 16]) * (code[g][c] - float(zero2[g][c / 16]))   (fp32)
struct SecondOrderScales {
    static constexpr int kColumns = 16;
    static constexpr int kBits = 4;
    std::vector<uint8_t> codes;    // [num_groups][n], each below 16
    std::vector<uint16_t> scales;  // [num_groups][ceil(n / 16)] fp16
    std::vector<uint16_t> zeros;   // [num_groups][ceil(n / 16)] fp16

    static int64_t column_groups(int64_t n) { return (n + kColumns - 1) / kColumns; }
    // The fp32 scale of group g, column c (what every kernel computes, in this order).
    float scale(int64_t n, int64_t g, int64_t c) const;
    bool operator==(const SecondOrderScales&) const = default;
};

// Super-block scales (ggml's K-quants): per 256 rows and column an fp16 super-scale d (and, with
// float offsets, a super-min dmin), and per K-group and column an integer scale code (and min
// code) of the format's scale_code_bits, signed when the format is symmetric:
//     scale[g][c]  = float(d[g / G][c]) * scale_code[g][c]          (exact in fp32)
//     offset[g][c] = -(float(dmin[g / G][c]) * min_code[g][c])       G = 256 / group_size groups per super-block
struct SuperBlockScales {
    std::vector<int8_t> scale_codes;  // [num_groups][n]
    std::vector<uint8_t> min_codes;   // [num_groups][n]; float offsets only
    std::vector<uint16_t> scales;     // [super_blocks][n] fp16 d
    std::vector<uint16_t> mins;       // [super_blocks][n] fp16 dmin; float offsets only

    static int64_t groups_per_super_block(const WeightFormat& f) { return kSuperBlockRows / f.group_size; }
    // The fp32 scale and offset of group g, column c (what every kernel computes).
    float scale(const WeightFormat& f, int64_t g, int64_t c) const;
    float offset(const WeightFormat& f, int64_t g, int64_t c) const;
    bool operator==(const SuperBlockScales&) const = default;
};

// Sparse outliers: W[r][c] += value, kept apart from the codes, by output column (CSR over the
// columns of W, i.e. over the output features; rows ascending within a column). Rows are storage
// rows (act-order: permuted, like the codes).
struct SparseOutliers {
    std::vector<int64_t> column_start;  // [n + 1]: column c's outliers are [column_start[c], column_start[c + 1])
    std::vector<int32_t> rows;          // [count]
    std::vector<uint16_t> values;       // [count] fp16, added to the dequantized weight

    int64_t count() const { return int64_t(rows.size()); }
    bool operator==(const SparseOutliers&) const = default;
};

// Outliers from (row, column, value) triples in any order: sorted into columns. Throws for a
// position outside k x n or given twice.
struct OutlierEntry {
    int32_t row;
    int32_t column;
    float value;
};
SparseOutliers make_sparse_outliers(int64_t k, int64_t n, std::vector<OutlierEntry> entries);

// A format's data: per-group scales and zero points, and the row permutation of an act-order
// layer (the format says whether there is one; validate() checks that they agree).
struct QuantParams : WeightFormat {
    std::vector<float> scales;      // [num_groups][n]; exact in fp32 whatever scale_type says (second-order:
                                    // second_order's values, dequantized)
    std::vector<uint16_t> zeros;    // [num_groups][n]; up to 2^bits (layer files saved before GPTQ v1 was
                                    // read word-wise may hold it); empty with float offsets
    std::vector<float> offsets;     // float_offsets: [num_groups][n], exact at the scales' type; else empty
    std::vector<int32_t> row_order; // act_order: storage row r holds original row row_order[r]; else empty
    std::vector<int32_t> column_order; // permuted_columns: output column j is original column column_order[j]
                                       // (distinct, >= 0; a shard's may skip columns); else empty
    SecondOrderScales second_order; // scale_type SecondOrder; else empty
    SuperBlockScales super_block;   // scale_type SuperBlock (scales and offsets hold their values); else empty
    SparseOutliers outliers_data;   // `outliers` entries; column_start empty when there are none

    const WeightFormat& format() const { return *this; }
};

struct QuantizedMatrix {
    QuantParams params;
    std::vector<uint8_t> codes;  // [k][n], rows in storage order
};

// Throws unless the matrix is self-consistent: its format valid, sizes, code and zero ranges (per
// group width), finite scales, finite offsets exactly when the format has them (fp16 values with fp16 scales), row_order a permutation exactly when the format is act-order,
// column_order N distinct original columns exactly when the format has permuted columns,
// second-order scales that dequantize to `scales`, super-block codes in range whose values are
// `scales` and `offsets`, outliers in range, sorted and finite.
void validate(const QuantizedMatrix& matrix);
void validate(const QuantParams& params);

// Quantizes scales [num_groups][n] to second-order scales: per group and 16 columns, min-max
// asymmetric 4-bit codes with the fp16 scale and zero; returns them with params.scales replaced by
// their dequantized values. Nothing else of params changes.
SecondOrderScales quantize_second_order(int64_t num_groups, int64_t n, const std::vector<float>& scales);
std::vector<float> dequantize_second_order(const SecondOrderScales& s, int64_t num_groups, int64_t n);

// Sets params.scales (and, with float offsets, params.offsets) to the values of params.super_block:
// sized and filled; or, already sized, filled in columns [first_column, end_column) only, so that
// threads can share the work by columns.
void expand_super_block_scales(QuantParams& params);
void expand_super_block_columns(QuantParams& params, int64_t first_column, int64_t end_column);

// Bytes the format stores, by the usual accounting: codes at their group's width, scales at their
// type (second-order: 4-bit codes plus an fp16 scale and zero per 16 columns; super-block: scale and
// min codes at scale_code_bits plus fp16 d and dmin per 256 rows and column), zero points at
// their group's width when asymmetric (float offsets at the scales' type), the act-order permutation as int32, outliers as an fp16
// value and an int32 row each plus an int64 start per column (a compensator is counted by
// low_rank_stored_bytes).
int64_t stored_bytes(const QuantParams& params);

}  // namespace qjit
