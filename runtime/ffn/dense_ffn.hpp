// The Dense FFN strategy: one FFN's layers run one after another on every row, the gate and up
// products as one call over their shared input (one dispatch on the x86 JIT), the activation
// between them and the down product.
#pragma once

#include <cstdint>

#include "runtime/ffn/ffn_parts.hpp"

namespace qjit {

// hidden (m x H) = activation(x W_gate, x W_up) of x (m x K); gate (m x H) receives x W_gate (unused
// without a gate). The strategies that run something between the halves (Sharded) call the two.
void ffn_hidden(const FfnParts& parts, const float* x, int64_t m, float* hidden, float* gate);

// y (m x N) = the FFN of x (m x K), checked parts and activations. Steady-state calls allocate
// nothing (the calling thread's scratch only grows).
void dense_ffn_forward(const FfnParts& parts, const float* x, int64_t m, float* y);

}  // namespace qjit
