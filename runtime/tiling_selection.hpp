// How a layer gets its kernel and tiling at creation: a forced tiling, this context's earlier
// choice, this machine's record in the tuning database, or a timed search on synthetic weights
// of the layer's shape within the context's budget (stored for next time).
#pragma once

#include <optional>
#include <string>

#include "jit/x86/cpu_kernel.hpp"
#include "runtime/context.hpp"
#include "runtime/quantized_matrix.hpp"

namespace qjit {

struct TilingChoice {
    std::optional<jit::CpuKernelSpec> spec;  // none: the portable path runs the layer
    qjit_tiling_source source = QJIT_TILING_PORTABLE;
    std::string kernel_key;                  // empty for the portable path
    std::string tiling;                      // tiling_text() of spec
    double tuning_ms = 0;
    double measured_us = 0;                  // 0: untimed
    int timed = 0, ranked = 0;               // candidates timed / rankable by this layer's search
    std::string warning;                     // about the tuning database
};

// Throws an invalid-argument Error for a forced tiling the layer cannot use. A database that
// cannot be read or written never fails the call: it is reported in `warning`.
TilingChoice choose_tiling(qjit_context& context, const QuantParams& params);

// "hit", "miss, searched", ... for log lines.
const char* tiling_source_name(qjit_tiling_source source);

}  // namespace qjit
