// out [n][d_ff] = x [n][d_model] . w [d_model][d_ff], fp32, over a thread pool: the products a
// predictor or a sparsity threshold is calibrated on (fit time only, not the forward's path).
#pragma once

#include <cstdint>

#include "runtime/cpu/thread_pool.hpp"

namespace qjit {

void dense_product(const float* x, int64_t n, const float* w, int64_t d_model, int64_t d_ff, float* out,
                   ThreadPool& pool);

}  // namespace qjit
