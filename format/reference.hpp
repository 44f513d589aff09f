// The oracle: dequantize to fp32, then multiply with double accumulation. Every fast path is
// tested against it; it is never a fast path itself.
#pragma once

#include <cstdint>
#include <vector>

#include "format/low_rank.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit {

// The dense matrix as W[k][n] (fp32), rows in the original order (act-order undone).
std::vector<float> dequantize(const QuantizedMatrix& matrix);

// y[m][n] = sum_k x[m][k] * W[k][n], x in the original row order, accumulated in double.
void reference_forward(const QuantizedMatrix& matrix, const float* x, int64_t m, float* y);

// The same for a layer with a low-rank compensator: y = x Wq + (x U) V, with x U taken first, as the
// kernels take it.
void reference_forward(const QuantizedMatrix& matrix, const LowRankFactors& compensator, const float* x, int64_t m,
                       float* y);

// Wq + U V as a dense W[k][n], original row order.
std::vector<float> dequantize(const QuantizedMatrix& matrix, const LowRankFactors& compensator);

}  // namespace qjit
