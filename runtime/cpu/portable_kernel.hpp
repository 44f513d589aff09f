// The portable CPU path: plain C++, multithreaded over column panels. It serves every format and
// stays as the fallback for what the generated kernels do not cover.
#pragma once

#include <cstdint>

#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/cpu/thread_pool.hpp"

namespace qjit {

struct PortableTiling {
    static constexpr int kChunkColumns = 64;  // columns one task accumulates (inside one packed panel)
    static constexpr int kBatchRows = 4;      // activation rows sharing one decode of a weight row
};

// y[m][n] = sum_r x[m][r] * W[r][n] with x already in storage row order (act-order gathered).
void portable_forward(const QuantParams& params, const PackedCodes& codes, const float* x, int64_t m, float* y,
                      ThreadPool& pool);

}  // namespace qjit
