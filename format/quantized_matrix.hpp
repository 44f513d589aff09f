// The logical form of a group-quantized K x N matrix: one integer code per weight plus per-group
// scales and zero points. Quantizers and importers produce it, the reference oracle consumes it,
// and packers turn it into the layout a kernel streams.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qjit/qjit.h"

namespace qjit {

// K and N stay below 2^31: row indices are stored as int32.
inline constexpr int64_t kMaxDimension = int64_t(1) << 31;

// W[k][n] = scales[g][n] * (code[k][n] - zeros[g][n]),  g = k / group_size (k in storage order).
struct QuantParams {
    int64_t k = 0;
    int64_t n = 0;
    int bits = 0;
    int64_t group_size = 0;   // rows per group; equals k when per column
    bool symmetric = false;   // all zero points are 2^(bits-1)
    qjit_dtype scale_dtype = QJIT_DTYPE_F32;  // precision the scales were given in (values are exact in fp32)
    std::vector<float> scales;      // [num_groups][n]
    std::vector<uint16_t> zeros;    // [num_groups][n]; up to 2^bits (GPTQ v1 "zero - 1" can reach it)
    std::vector<int32_t> row_order; // empty: identity; else storage row r holds original row row_order[r]

    int64_t num_groups() const { return (k + group_size - 1) / group_size; }
    bool act_order() const { return !row_order.empty(); }
    int max_code() const { return (1 << bits) - 1; }
};

struct QuantizedMatrix {
    QuantParams params;
    std::vector<uint8_t> codes;  // [k][n], rows in storage order
};

// One activation row in storage row order: dst[r] = src[row_order[r]] (a copy without act-order).
void gather_row(const QuantParams& params, const float* src, float* dst);

// Checks bits and group size against what qjit supports, naming `what` in the message.
void validate_bits(int bits);
// Maps a user group size (QJIT_GROUP_PER_COLUMN or 16..256) to rows per group for k rows.
int64_t resolve_group_size(int group_size, int64_t k);

// Throws unless the matrix is self-consistent: sizes, code and zero ranges, finite scales,
// row_order a permutation.
void validate(const QuantizedMatrix& matrix);
void validate(const QuantParams& params);

// Short format name used in kernel names and describe strings, e.g. "q4g128_asym", "q8col_sym".
std::string format_name(const QuantParams& params);

}  // namespace qjit
