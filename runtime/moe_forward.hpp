// The grouped mixture-of-experts forward: the quantized layers of several experts (same K and N),
// each applied to its own token rows, as one call. The experts of one backend run as one grouped
// call of that backend (BackendLayer::run_grouped): on the x86 JIT every expert's rows are prepared
// in one dispatch and all products run in another (runtime/cpu/jit_grouped.cpp). The per-expert
// outputs are then scattered back to token order, weighted and summed per token in expert order. Decoding gives each expert only a few rows, so E dispatches of E calls, each
// ending on a barrier, would cost more than the work between them.
#pragma once

#include <cstdint>

#include "qjit/qjit.h"
#include "runtime/cpu/thread_pool.hpp"

namespace qjit {

// y (m x N) = sum over experts e and their rows i of weights[i] * (x[rows[i]] W_e); tokens no
// expert takes get zeros. The arguments are valid (runtime/c_api_moe.cpp checks them): layers
// of one K and N, rows in [0, m) and distinct within an expert. Steady-state calls do not allocate
// (the calling thread's scratch only grows).
void moe_forward(const qjit_expert_rows* experts, int num_experts, const float* x, int64_t m, float* y,
                 ThreadPool& pool);

}  // namespace qjit
