// The CPU kernel a layer's format needs, and tilings as text ("tu=3,mb=8,prefetch=4,ku=1,ksplit=1":
// the form of options.tiling, describe strings and the tuning database): the x86 family's
// tiling_text and parse_tiling, as jit/cuda/cuda_tiling.hpp's for CUDA.
#pragma once

#include <optional>
#include <string>

#include "format/quantized_matrix.hpp"
#include "jit/x86/cpu_kernel.hpp"

namespace qjit::jit {

// The kernel that computes this format with the instruction set `isa` and the activation path
// asked for (AUTO: the default for the bit width); its tiling is left at the defaults. Nothing
// when only the portable path serves it (no AVX2, a format the generator refuses:
// jit::unsupported_reason, or zero points above 255).
std::optional<CpuKernelSpec> cpu_kernel_format(qjit_isa isa, qjit_activations activations, const QuantParams& params);

// The kernel of an asymmetric fp16-scaled format given by its parts, tiling at the defaults: how
// tests and benchmarks name a problem without a layer.
CpuKernelSpec cpu_kernel_spec(qjit_isa isa, ActivationPath path, int bits, int64_t k, int64_t group_size);

// The default activation path of the generated kernels for weights of `bits` bits.
ActivationPath default_activation_path(int bits);

// All five knobs as text.
std::string tiling_text(const CpuTiling& tiling);
// Parses tiling_text's form; knobs left out keep `base`'s values. Throws an invalid-argument Error
// naming the bad item.
CpuTiling parse_tiling(const std::string& text, CpuTiling base = {});

// `spec` with the knobs named in `text` overridden (parse_tiling) and spec.rows set to the
// tiling's. Throws an invalid-argument Error for malformed text or a tiling the kernel cannot use.
CpuKernelSpec with_tiling_text(CpuKernelSpec spec, const std::string& text);

}  // namespace qjit::jit
