// Generates the x86 kernel of a CpuKernelSpec (AVX2 / AVX-512, with or without VNNI; exact fp32
// or int8 activations).
#pragma once

#include <memory>
#include <vector>

#include "jit/x86/cpu_kernel.hpp"
#include "format/panel_metadata.hpp"
#include "jit/x86/jit_generator.hpp"

namespace qjit::jit {

using CpuKernelFn = void (*)(const CpuKernelArgs*);

// Throws check_spec's Error for a spec it rejects.
std::unique_ptr<JitGenerator> generate_cpu_kernel(const CpuKernelSpec& spec);

// Vector registers the group epilogue borrows from the scratch set: scale, zero, factor, output.
inline constexpr int kEpilogueTemporaries = 4;

// The code widths a kernel of `spec` handles: its format's bits, or the widths of a mixed format.
std::vector<int> kernel_widths(const CpuKernelSpec& spec);

// Bytes of the fp16 (scale, zero) pair of one 16-column second-order group: the packer's table.
inline constexpr int kSecondOrderPairBytes = PanelMetadataLayout::kSecondOrderPairBytes;

// Whether the kernel reads activations as EVEX embedded-broadcast memory operands (AVX-512 with
// an instruction that takes one: vfmadd231ps, vpdpbusd) instead of broadcast registers.
bool embedded_broadcast(const CpuKernelSpec& spec);

// Whether the kernel merges a code's bit planes into one byte before its dot products (3-, 5- and
// 6-bit codes on the int8 path).
bool merges_code_planes(const CpuKernelSpec& spec);

// Constant registers a codebook takes: its table, and on the f32 path a byte mask.
int codebook_constants(const CpuKernelSpec& spec);

// Weight, unpack and activation-broadcast registers of the main loop (not counting accumulators
// and constants).
int main_scratch_registers(const CpuKernelSpec& spec);

}  // namespace qjit::jit
