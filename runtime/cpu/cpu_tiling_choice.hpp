// How a CPU layer gets its kernel and tiling at creation: the tuner's one sequence
// (tuner/tuning_sequence.hpp) over the x86 JIT's target, which ranks tilings with the performance
// model and times candidates on synthetic weights of the layer's shape.
#pragma once

#include <optional>
#include <string>

#include "format/quantized_matrix.hpp"
#include "jit/x86/cpu_kernel.hpp"
#include "runtime/context.hpp"
#include "tuner/tuning_sequence.hpp"

namespace qjit {

struct TilingChoice : TuningOutcome {
    std::optional<jit::CpuKernelSpec> spec;  // none: the portable path runs the layer
    TilingChoice() { source = QJIT_TILING_PORTABLE; }
};

// Throws an invalid-argument Error for a forced tiling the layer cannot use. A database that
// cannot be read or written never fails the call: it is reported in `warning`. `activations`
// overrides the context's activation path (a compensator's inner layers follow their layer's).
TilingChoice choose_tiling(qjit_context& context, const QuantParams& params,
                           std::optional<qjit_activations> activations = std::nullopt);

}  // namespace qjit
