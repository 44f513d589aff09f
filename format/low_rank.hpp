// The low-rank compensator of a layer (MiLo): W ~ Wq + U V with U: K x rank and V: rank x N, so
// that y = x Wq + (x U) V. Each factor is stored at the format's LowRankTerms::bits:
//   8 or 3: symmetric codes with one scale per column, as quantize_rtn makes them (zero point
//           2^(bits-1); for 3 bits code = round(7 w / (2 s)) + 4 with s the column's max |w|);
//   16:     fp16 values.
// U's rows are in the layer's original row order (x U reads x before any act-order gather).
#pragma once

#include <cstdint>
#include <vector>

#include "format/quantized_matrix.hpp"

namespace qjit {

// One factor, rows x cols, in one of the two storages above.
struct LowRankFactor {
    QuantizedMatrix codes;      // bits 8 or 3: per-column symmetric codes
    std::vector<float> values;  // bits 16: the fp16 values, held exactly in fp32, rows x cols row-major
};

struct LowRankFactors {
    int rank = 0;
    int bits = 0;   // 8, 3 or 16
    LowRankFactor u;  // K x rank
    LowRankFactor v;  // rank x N
};

// Checks bits against what a compensator may be stored at: 8, 3 or 16.
void validate_low_rank_bits(int bits);

// Stores dense factors u (k x rank) and v (rank x n), row-major fp32, at `bits`.
LowRankFactors quantize_low_rank(int bits, int64_t k, int64_t n, int rank, const float* u, const float* v);

// A factor back as dense fp32, rows x cols row-major (the oracle's input).
std::vector<float> dequantize_factor(const LowRankFactor& factor, int bits);

// Throws an invalid-argument Error unless the factors are a compensator of a K x N layer:
// 1 <= rank <= min(K, N, kMaxLowRank), the bits, the shapes, finite values, valid codes.
void validate(const LowRankFactors& factors, int64_t k, int64_t n);

// Bytes the compensator stores: codes packed at `bits` plus one fp32 scale per column, or fp16
// values.
int64_t stored_bytes(const LowRankFactors& factors);

}  // namespace qjit
