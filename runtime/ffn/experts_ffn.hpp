// The Experts FFN strategy (a mixture of experts): every expert is a whole FFN (FfnParts) of one
// shape, run on the token rows routed to it. Each of the three products runs as one grouped call
// across the experts (runtime/ffn/grouped_products.hpp: one dispatch on the x86 JIT, however few rows
// an expert has), the activation once over every expert's hidden rows, and each token's expert
// outputs are weighted and summed in expert order (runtime/ffn/expert_sum.hpp).
#pragma once

#include <cstdint>
#include <span>

#include "runtime/ffn/ffn_parts.hpp"

namespace qjit {

// y (m x N) = sum over experts e and their routed rows i of weights[i] * FFN_e(x[rows[i]]); tokens no
// expert takes get zeros. routes[e] is expert e's; the arguments are valid (runtime/c_api_ffn.cpp
// checks them): parts of one shape and activation, rows in [0, m) and distinct within a route.
// Steady-state calls do not allocate (the calling thread's scratch only grows).
void experts_ffn_forward(std::span<const FfnParts> experts, const qjit_ffn_route* routes, const float* x, int64_t m,
                         float* y);

}  // namespace qjit
