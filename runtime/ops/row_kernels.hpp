// The row-wise ops of a forward, one kernel per instruction-set family (base/simd_family.hpp):
// RMSNorm and RoPE over one row, and the largest value of a range (the classifier's argmax).
#pragma once

#include <cstdint>

#include "base/simd_family.hpp"
#include "qjit/qjit_ops.h"

namespace qjit::ops {

// out = weight * x / sqrt(mean(x^2) + eps) over `size` values; out may be x.
using RmsNormRow = void (*)(const float* x, const float* weight, int64_t size, float eps, float* out);
// Rotates each head of x (row_size values) by `rotations` (cos, sin per pair; head_size / 2 pairs).
using RopeRow = void (*)(float* x, int64_t row_size, int head_size, const float* rotations, qjit_rope_pairs pairs);

// The largest value of a range and the first index holding it, relative to the range's start
// (-1 when every value is -inf or NaN); NaN values never win and set has_nan.
struct RangeMaximum {
    float value;
    int64_t index;
    bool has_nan;
};
// Over x[0, count), count < kArgmaxRangeLimit (the lanes count in 32-bit integers).
using ArgmaxRange = RangeMaximum (*)(const float* x, int64_t count);
inline constexpr int64_t kArgmaxRangeLimit = int64_t(1) << 30;

extern const PerFamily<RmsNormRow> kRmsNormRow;
extern const PerFamily<RopeRow> kRopeRow;
extern const PerFamily<ArgmaxRange> kArgmaxRange;

}  // namespace qjit::ops
