// The low-rank compensator of a layer (MiLo): W ~ Wq + U V with U: K x rank and V: rank x N, so
// that y = x Wq + (x U) V. Both factors are stored as (dimension x rank) matrices, U as it is and V
// transposed, so that each has one scale per rank component (U's columns, V's rows). Each is
// stored at the format's LowRankTerms::bits:
//   8 or 3: symmetric codes, one scale per rank component, as quantize_rtn makes them per column
//           (zero point 2^(bits-1); for 3 bits code = round(7 w / (2 s)) + 4 with s the largest
//           |w| of the component);
//   16:     fp16 values.
// One scale per component rather than per output column: a rank-r V over N outputs then stores r
// scales instead of N, which on a 4096-wide layer at rank 16 is 64 bytes instead of 16 KiB (a
// third of V's INT3 codes), and on small layers the difference between 4 % and 40 % extra memory.
// U's rows are in the layer's original row order (x U reads x before any act-order gather).
#pragma once

#include <cstdint>
#include <vector>

#include "format/quantized_matrix.hpp"

namespace qjit {

// One factor, dimension x rank, in one of the two storages above.
struct LowRankFactor {
    QuantizedMatrix codes;      // bits 8 or 3: per-column (per-component) symmetric codes
    std::vector<float> values;  // bits 16: the fp16 values, held exactly in fp32, row-major
};

struct LowRankFactors {
    int rank = 0;
    int bits = 0;      // 8, 3 or 16
    LowRankFactor u;   // U: K x rank
    LowRankFactor vt;  // V transposed: N x rank
};

// A rows x cols row-major matrix as cols x rows (V and its stored transpose, both ways).
template <typename T>
std::vector<T> transposed(const T* values, int64_t rows, int64_t cols) {
    std::vector<T> out(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = values[r * cols + c];
    return out;
}

// Checks bits against what a compensator may be stored at: 8, 3 or 16.
void validate_low_rank_bits(int bits);

// Checks a compensator's rank against a K x N layer: 1 .. min(K, N, kMaxLowRank).
void validate_low_rank_rank(int rank, int64_t k, int64_t n);

// The factors back as dense fp32, row-major (the oracle's input): U as K x rank, V as rank x N.
std::vector<float> dense_u(const LowRankFactors& factors);
std::vector<float> dense_v(const LowRankFactors& factors);

// Throws an invalid-argument Error unless the factors are a compensator of a K x N layer:
// 1 <= rank <= min(K, N, kMaxLowRank), the bits, the shapes, finite values, valid codes.
void validate(const LowRankFactors& factors, int64_t k, int64_t n);

// Bytes a rank-`rank` compensator of a K x N layer stores at `bits`: codes packed at `bits` plus one
// fp32 scale per component and factor, or fp16 values.
int64_t low_rank_stored_bytes(int rank, int bits, int64_t k, int64_t n);

// Factors stored as codes run as inner layers of per-column symmetric formats, on every backend:
// U (K x rank) split into groups of 128 rows, each with a copy of its column's scale (so the int8
// path quantizes x per group and the tuner may split K); V (rank x N) turned back from V
// transposed, with unit scales (V's scales belong to its rows, which a per-column kernel cannot
// apply: they multiply x U instead). The last two are the inverses.
QuantizedMatrix low_rank_u_matrix(QuantizedMatrix u);
QuantizedMatrix low_rank_v_matrix(const QuantizedMatrix& vt);
QuantizedMatrix u_from_low_rank_matrix(QuantizedMatrix u);
QuantizedMatrix vt_from_low_rank_matrix(const QuantizedMatrix& v, const std::vector<float>& scales);

}  // namespace qjit
