// The row-wise ops of a forward, one kernel per instruction-set family (base/simd_family.hpp):
// RMSNorm and RoPE over one row.
#pragma once

#include <cstdint>

#include "base/simd_family.hpp"
#include "qjit/qjit_ops.h"

namespace qjit::ops {

// out = weight * x / sqrt(mean(x^2) + eps) over `size` values; out may be x.
using RmsNormRow = void (*)(const float* x, const float* weight, int64_t size, float eps, float* out);
// Rotates each head of x (row_size values) by `rotations` (cos, sin per pair; head_size / 2 pairs).
using RopeRow = void (*)(float* x, int64_t row_size, int head_size, const float* rotations, qjit_rope_pairs pairs);

extern const PerFamily<RmsNormRow> kRmsNormRow;
extern const PerFamily<RopeRow> kRopeRow;

}  // namespace qjit::ops
