// Storing dense low-rank factors (format/low_rank.hpp) at 8 or 3 bits (round to nearest, a scale
// per column) or as fp16 values.
#pragma once

#include <cstdint>

#include "format/low_rank.hpp"

namespace qjit {

// Stores dense factors u (k x rank) and v (rank x n), row-major fp32, at `bits`.
LowRankFactors quantize_low_rank(int bits, int64_t k, int64_t n, int rank, const float* u, const float* v);

}  // namespace qjit
