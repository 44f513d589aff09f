// The FFN activations over arrays, written once for every FFN that applies them (the strategies of
// runtime/ffn/, the Llama model's own loop in models/llama_model.cpp): the hidden values
// activation(x W_gate, x W_up) computed in place over x W_up. Each value is computed alike wherever
// a range starts, so a caller may split an array among threads at any index.
#pragma once

#include <cstdint>

#include "base/simd_family.hpp"

namespace qjit {

// up[i] = silu(gate[i]) * up[i], a vector at a time with the vector SiLU (base/activations.hpp), in
// the family of `isa` (base/simd_family.hpp). The result is the same in every family.
void swiglu_in_place(qjit_isa isa, float* up, const float* gate, int64_t count);
// up[i] = gelu(gate[i]) * up[i] (Gemma's GELU-gated FFN), likewise with the vector GELU: the same
// result in every family.
void geglu_in_place(qjit_isa isa, float* up, const float* gate, int64_t count);
// up[i] = gelu(up[i]), GELU's tanh approximation.
void gelu_in_place(float* up, int64_t count);
// up[i] = max(0, up[i]).
void relu_in_place(float* up, int64_t count);

}  // namespace qjit
