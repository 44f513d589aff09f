// Picks the CPU kernel and tiling for a layer. Today a fixed heuristic (the register budget of
// the ISA, the panel no wider than the layer); the timed search of the tuner replaces it.
#pragma once

#include <optional>
#include <string>

#include "jit/x86/cpu_kernel.hpp"
#include "runtime/quantized_matrix.hpp"

namespace qjit {

struct CpuPlanRequest {
    qjit_isa isa;                  // what the context may use
    qjit_activations activations;  // AUTO: the default path
    std::string tiling;            // empty, or a forced "tu=4,mb=4,prefetch=8,ksplit=1" (any subset of the keys)
    int threads = 1;               // threads a forward runs on
};

// The kernel spec (with rows = tiling.rows) for a layer, or nothing when only the portable path
// serves it (no AVX2, or zero points above 255). Throws an invalid-argument Error for a malformed
// or unusable forced tiling.
std::optional<jit::CpuKernelSpec> plan_cpu_kernel(const CpuPlanRequest& request, const QuantParams& params);

// The default activation path of the generated kernels for weights of `bits` bits.
jit::ActivationPath default_activation_path(int bits);

}  // namespace qjit
