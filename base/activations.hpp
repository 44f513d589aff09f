// The feed-forward activations, written once for every forward that applies them: the Llama model
// (models/llama_model.cpp), tensor-parallel MLPs (runtime/tp_mlp.cpp) and the flash FFN's kernels and
// predictor (runtime/flash/).
#pragma once

#include <cmath>
#include <type_traits>

#include "base/float_vectors.hpp"

namespace qjit {

// SiLU (swish): v * sigmoid(v), rounded as llama2.c's run.c computes it, v * (1 / (1 + e^-v)).
// float or double.
template <typename T>
inline T silu(T v) {
    return v * (T(1) / (T(1) + std::exp(-v)));
}

// The same on a float vector, with exp_lanes (within 2.5 ulp of std::exp): for loops compiled per
// instruction-set family (base/simd_family.hpp).
template <typename V>
    requires(!std::is_arithmetic_v<V>)
[[gnu::always_inline]] inline V silu(V v) {
    return v * (1.0f / (1.0f + exp_lanes(-v)));
}

// GELU, the tanh approximation: 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))).
inline float gelu(float v) {
    constexpr float kSqrt2OverPi = 0.7978845608f;
    return 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
}

// The same on a float vector, as 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)): v / (1 + e^(-2u)) with
// exp_lanes (a tanh of its own would cost more and round no better).
template <typename V>
    requires(!std::is_arithmetic_v<V>)
[[gnu::always_inline]] inline V gelu(V v) {
    constexpr float kTwoSqrt2OverPi = 2.0f * 0.7978845608f;
    const V u2 = kTwoSqrt2OverPi * (v + 0.044715f * v * v * v);
    return v * (1.0f / (1.0f + exp_lanes(-u2)));
}

}  // namespace qjit
