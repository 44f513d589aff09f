#include "jit/x86/cpu_kernel.hpp"
#include "base/error.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "format/code_planes.hpp"
#include "jit/x86/gemm_emitter.hpp"

namespace qjit::jit {

namespace {

}  // namespace

std::string kernel_family_name(const CpuKernelSpec& spec) {
    return spec.format.kernel_name() + (spec.path == ActivationPath::Int8 ? "_gemm_i8_" : "_gemm_f32_") +
           spec.isa.tag();
}

std::string kernel_name(const CpuKernelSpec& spec) {
    TextStream name;
    name << kernel_family_name(spec) << "_tu" << spec.tiling.tu << "mb" << spec.rows << "pf"
         << spec.tiling.prefetch_blocks;
    if (spec.tiling.unroll_blocks > 1) name << "ku" << spec.tiling.unroll_blocks;
    return name.str();
}

int vector_registers_available(IsaFeatures isa) { return isa.vector_registers(); }

int vector_registers_needed(const CpuKernelSpec& spec) {
    const bool int8_without_vnni = spec.path == ActivationPath::Int8 && !spec.vnni();
    const int accumulators = spec.tiling.tu * spec.rows;
    int constants = int8_without_vnni ? 1 : 0;
    for (int width : kernel_widths(spec)) constants += int(code_planes(width).size());
    return accumulators + std::max(main_scratch_registers(spec), kEpilogueTemporaries) + constants;
}

void check_spec(const CpuKernelSpec& spec) {
    auto reject = [&](const std::string& why) { throw std::invalid_argument(kernel_name(spec) + ": " + why); };
    if (!spec.isa.avx2) reject("needs AVX2 or better");
    if (spec.format.bits != 2 && spec.format.bits != 3 && spec.format.bits != 4 && spec.format.bits != 8) reject("bits must be 2, 3, 4 or 8");
    if (spec.format.k < 1) reject("k must be positive");
    if (spec.group_rows() != 16 && (spec.group_rows() < 32 || spec.group_rows() % 32 != 0))
        reject("group size must be 16 or a multiple of 32");
    if (spec.tiling.tu < 1 || spec.tiling.rows < 1 || spec.tiling.prefetch_blocks < 0 ||
        spec.tiling.unroll_blocks < 1)
        reject("tiling values must be positive (prefetch >= 0)");
    if (spec.tiling.unroll_blocks > 1 && (spec.group_rows() < 32 || (spec.group_rows() / 32) % spec.tiling.unroll_blocks))
        reject("k-unroll " + std::to_string(spec.tiling.unroll_blocks) + " does not divide the " +
               std::to_string(spec.group_rows() / 32) + " blocks of a group");
    if (spec.rows < 1 || spec.rows > spec.tiling.rows) reject("rows must be 1 .. tiling.rows");
    if (!spec.format.uniform_bits()) {
        for (int width : kernel_widths(spec))
            if (width != 2 && width != 4) reject("mixed groups must be 2 or 4 bits");
        if (spec.group_rows() < 32) reject("mixed widths need groups of 32 rows or more");
        if (spec.format.symmetric) reject("mixed widths need asymmetric zero points");
    }
    if (spec.format.second_order_scales() && (spec.panel_columns() % 16 != 0 || spec.format.symmetric))
        reject("second-order scales need asymmetric zero points and panels of whole 16-column groups");
    if (vector_registers_needed(spec) > vector_registers_available(spec.isa))
        reject("needs " + std::to_string(vector_registers_needed(spec)) + " vector registers; the ISA has " +
               std::to_string(vector_registers_available(spec.isa)));
}

}  // namespace qjit::jit
