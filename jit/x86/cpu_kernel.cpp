#include "jit/x86/cpu_kernel.hpp"
#include "base/error.hpp"

#include <algorithm>
#include <sstream>

#include "format/code_planes.hpp"
#include "format/inline_metadata.hpp"
#include "jit/x86/gemm_emitter.hpp"

namespace qjit::jit {

std::string kernel_family_name(const CpuKernelSpec& spec) {
    return spec.format.kernel_name() + (spec.path == ActivationPath::Int8 ? "_gemm_i8_" : "_gemm_f32_") +
           spec.isa.tag() + (spec.inline_metadata ? "_inline" : "");
}

bool inline_metadata_fits(const CpuKernelSpec& spec) {
    const WeightFormat& f = spec.format;
    return !f.super_block_scales() && !f.second_order_scales() && f.uniform_bits() && spec.group_rows() % 32 == 0;
}

PanelMetadataLayout metadata_layout(const CpuKernelSpec& spec) {
    return {spec.format, spec.panel_columns(), spec.num_groups()};
}

PanelMetadataSizes beside_codes_metadata_sizes(const CpuKernelSpec& spec, const WeightFormat& format) {
    return spec.inline_metadata ? PanelMetadataSizes{} : panel_metadata_sizes(format, metadata_layout(spec));
}

int64_t inline_slot_bytes(const CpuKernelSpec& spec) {
    const int64_t vector_bytes = int64_t(spec.lanes()) * 4;
    const int64_t bytes = inline_metadata_bytes(metadata_layout(spec));
    return (bytes + vector_bytes - 1) / vector_bytes * vector_bytes;
}

void assign_kernel_slots(const CpuKernelSpec& spec, PackedCodes& codes) {
    codes.slot_group_blocks = spec.inline_metadata ? spec.group_rows() / 32 : 0;
    codes.slot_words = spec.inline_metadata ? inline_slot_bytes(spec) / 4 : 0;
}

int64_t kernel_stream_words(const CpuKernelSpec& spec, int64_t n) {
    PackedCodes layout;
    layout.bits = spec.format.bits;
    layout.k = spec.format.k;
    layout.n = n;
    layout.panel_columns = spec.panel_columns();
    assign_block_widths(layout, block_widths(spec.format));
    assign_kernel_slots(spec, layout);
    return layout.num_panels() * layout.panel_words();
}

std::string kernel_name(const CpuKernelSpec& spec) {
    TextStream name;
    name << kernel_family_name(spec) << "_tu" << spec.tiling.tu << "mb" << spec.rows << "pf" << spec.tiling.prefetch;
    if (spec.tiling.ku > 1) name << "ku" << spec.tiling.ku;
    if (spec.vectors > 0) name << "_v" << spec.first_vector << "+" << spec.vectors;
    return name.str();
}

int vector_registers_available(IsaFeatures isa) { return isa.vector_registers(); }

int vector_registers_needed(const CpuKernelSpec& spec) {
    const int accumulators = accumulator_registers(spec);
    int constants = pairs_sum_by_ones(spec) ? 1 : 0;
    for (int width : kernel_widths(spec)) constants += int(code_planes(width).size());
    constants += codebook_constants(spec);
    return accumulators + std::max(main_scratch_registers(spec), kEpilogueTemporaries) + constants;
}

int64_t groups_per_kernel_step(const CpuKernelSpec& spec) {
    if (spec.format.super_block_scales()) return kSuperBlockRows / spec.group_rows();
    return spec.group_rows() == 16 ? 2 : 1;
}

std::string unsupported_reason(const WeightFormat& format) {
    if (format.bits < 2 || format.bits > 8 || format.bits == 7) return "bits must be 2, 3, 4, 5, 6 or 8";
    if (format.k < 1) return "k must be positive";
    // Per column, the kernels walk one group over K rounded up to 32 rows.
    if (!format.per_column() && format.group_size != 16 && (format.group_size < 32 || format.group_size % 32 != 0))
        return "group size must be 16 or a multiple of 32";
    if (!format.uniform_bits()) {
        for (uint8_t width : format.group_bits)
            if (width != 2 && width != 4) return "mixed groups must be 2 or 4 bits";
        if (!format.per_column() && format.group_size < 32) return "mixed widths need groups of 32 rows or more";
        if (format.symmetric) return "mixed widths need asymmetric zero points";
    }
    if (format.second_order_scales() && format.symmetric) return "second-order scales need asymmetric zero points";
    if (format.super_block_scales() &&
        (format.per_column() || (format.group_size != 16 && format.group_size != 32) || format.k % kSuperBlockRows != 0))
        return "super-block scales need groups of 16 or 32 rows and K a multiple of 256";
    return "";
}

void check_spec(const CpuKernelSpec& spec) {
    // What the machine or the format lacks is unsupported; a tiling out of range is a bad argument.
    auto refuse = [&](const std::string& why) { fail(QJIT_ERROR_UNSUPPORTED, kernel_name(spec), ": ", why); };
    auto reject = [&](const std::string& why) { fail(QJIT_ERROR_INVALID_ARGUMENT, kernel_name(spec), ": ", why); };
    if (!spec.isa.avx2) refuse("needs AVX2 or better");
    if (const std::string why = unsupported_reason(spec.format); !why.empty()) refuse(why);
    if (spec.tiling.tu < 1 || spec.tiling.mb < 1 || spec.tiling.prefetch < 0 || spec.tiling.ku < 1)
        reject("tiling values must be positive (prefetch >= 0)");
    if (spec.tiling.ku > 1 && (spec.group_rows() < 32 || (spec.group_rows() / 32) % spec.tiling.ku))
        reject("k-unroll " + std::to_string(spec.tiling.ku) + " does not divide the " +
               std::to_string(spec.group_rows() / 32) + " blocks of a group");
    if (spec.vectors == 0 && (spec.rows < 1 || spec.rows > spec.tiling.mb)) reject("rows must be 1 .. tiling.mb");
    if (spec.vectors != 0 && (spec.rows < 1 || spec.first_vector < 0 || spec.vectors < 0 ||
                              spec.first_vector + spec.vectors > spec.tiling.tu))
        reject("a kernel of part of a panel needs rows >= 1 and its vectors within the panel's tu");
    if (spec.inline_metadata && !inline_metadata_fits(spec))
        refuse("inline metadata needs plain per-group scales, one width and groups of whole 32-row blocks");
    if (spec.format.second_order_scales() && spec.panel_columns() % 16 != 0)
        reject("second-order scales need panels of whole 16-column groups");
    if (vector_registers_needed(spec) > vector_registers_available(spec.isa))
        reject("needs " + std::to_string(vector_registers_needed(spec)) + " vector registers; the ISA has " +
               std::to_string(vector_registers_available(spec.isa)));
}

}  // namespace qjit::jit
