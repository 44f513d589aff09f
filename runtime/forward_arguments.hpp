// The checks every forward entry point makes on its activations (qjit_linear_forward_on,
// qjit_moe_forward, the CUDA calls), with the limits qjit.h documents.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/error.hpp"

namespace qjit {

// One forward's activations: at most 2^31 - 1 rows and 2^40 values in x or y.
inline constexpr int64_t kMaxRows = (int64_t(1) << 31) - 1;
inline constexpr int64_t kMaxActivations = int64_t(1) << 40;

// m in 1 .. 2^31 - 1.
inline void require_row_count(int64_t m) { require(m >= 1 && m <= kMaxRows, "m is ", m, "; expected 1 .. 2^31 - 1"); }

// A device forward's row count: 1 .. 2^24 (the CUDA entry points).
inline void require_device_rows(int64_t m) { require(m >= 1 && m <= (1 << 24), "m is ", m, "; expected 1 .. 2^24"); }

// x (m x K) and y (m x N): within the activation limit, and not overlapping.
inline void require_activations(const float* x, int64_t m, int64_t k, const float* y, int64_t n) {
    require_row_count(m);
    // Checked before the overlap test below, whose byte arithmetic they keep from overflowing.
    require(m <= kMaxActivations / std::max(k, n), "m is ", m, "; m x max(K, N) = ", m, " x ", std::max(k, n),
            " is more than the 2^40 activations a forward may take");
    const auto* x_begin = reinterpret_cast<const char*>(x);
    const auto* y_begin = reinterpret_cast<const char*>(y);
    const bool overlap = x_begin < y_begin + m * n * int64_t(sizeof(float)) &&
                         y_begin < x_begin + m * k * int64_t(sizeof(float));
    require(!overlap, "x and y overlap");
}

}  // namespace qjit
