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

// Whether the floats [a, a + a_count) and [b, b + b_count) share an address.
inline bool overlaps(const float* a, int64_t a_count, const float* b, int64_t b_count) {
    const auto* a_begin = reinterpret_cast<const char*>(a);
    const auto* b_begin = reinterpret_cast<const char*>(b);
    return a_begin < b_begin + b_count * int64_t(sizeof(float)) && b_begin < a_begin + a_count * int64_t(sizeof(float));
}

// x (m x K) and y (m x N): within the activation limit, and not overlapping.
inline void require_activations(const float* x, int64_t m, int64_t k, const float* y, int64_t n) {
    require_row_count(m);
    // Checked before the overlap test below, whose byte arithmetic they keep from overflowing.
    require(m <= kMaxActivations / std::max(k, n), "m is ", m, "; m x max(K, N) = ", m, " x ", std::max(k, n),
            " is more than the 2^40 activations a forward may take");
    require(!overlaps(x, m * k, y, m * n), "x and y overlap");
}

}  // namespace qjit
