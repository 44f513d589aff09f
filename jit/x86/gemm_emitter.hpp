// Generates the x86 kernel of a CpuKernelSpec (AVX2 / AVX-512, with or without VNNI; exact fp32
// or int8 activations).
#pragma once

#include <memory>
#include <optional>
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

// Quads of a group whose int16 pair sums (vpmaddubsw) a kernel with integer sub-block scales adds
// in int16 before one vpmaddwd by the scale codes: as many as stay clear of int16 overflow for the
// largest code and activation (1: each quad's pairs go to vpmaddwd, as without integer scales).
int pair_sum_depth(const CpuKernelSpec& spec);

// Whether a kernel without VNNI or integer sub-block scales adds a whole group's vpmaddubsw pair
// sums in int16 (vpaddw) in its accumulators and widens them once, in the group's epilogue
// (vpmaddwd by ones), instead of once per quad: where the group is one 32-row block or less and its
// sums stay clear of int16 overflow for the largest code and activation (4-bit groups of 32).
bool group_sums_in_int16(const CpuKernelSpec& spec);

// Accumulator registers: rows x tu int32 (or fp32) sums, and as many int16 pair sums with
// pair_sum_depth > 1.
int accumulator_registers(const CpuKernelSpec& spec);

// Whether the int8 dot products without VNNI sum vpmaddubsw's int16 pairs by vpmaddwd with a
// register of ones (not with integer sub-block scales, whose vpmaddwd multiplies by scale codes).
bool pairs_sum_by_ones(const CpuKernelSpec& spec);

// Constant registers a codebook takes: its table, and on the f32 path a byte mask.
int codebook_constants(const CpuKernelSpec& spec);

// The kernel of a prompt's row tiles on panels tiled as `spec`: a part of the panel (a divisor of
// tiling.tu column vectors, first_vector 0) with the most rows the registers allow (up to 16),
// the part chosen for the most accumulators, ties to more rows; none when no part takes more rows
// than tiling.mb, or when the kernel reads activations as embedded broadcasts (each dot product
// loads its own: taller tiles save nothing there). A layer's tiling is tuned for its tuning batch
// (often 1, where wide panels and one row win); the panels' layout stays, and a prompt runs each
// part of a panel in turn.
std::optional<CpuKernelSpec> prompt_tile(const CpuKernelSpec& spec);

// Whether a kernel fills one register with a row's activations right before each dot product, one
// register serving every row: a kernel of one column vector (each broadcast feeds one dot) with
// integer sub-block scales, whose int16 pair sums double the accumulators, on an ISA of 16 vector
// registers (AVX2), so the registers freed go to more rows. Elsewhere the taller prompt tiles this
// allows measured slower on long rows (K = 8192, 64 rows: Q4_0 under AVX2 14.6-17.3 against 13.1 ms;
// Q4_K and Q6_K under AVX-512 without VNNI, 11.1-11.9 and 15.8-16.5 against 8.5-8.6 and 11.7-11.8).
bool broadcasts_per_dot(const CpuKernelSpec& spec);

// Registers holding broadcast activations: none with embedded broadcasts, one where
// broadcasts_per_dot, else one per row.
int activation_broadcasts(const CpuKernelSpec& spec);

// Weight, unpack and activation-broadcast registers of the main loop (not counting accumulators
// and constants).
int main_scratch_registers(const CpuKernelSpec& spec);

// What the vector registers a tiling leaves free hold, where they suffice: first a symmetric
// format's zero point (broadcast once, not per group), then the output tile (each group's
// epilogue adds to registers, stored once at the end, instead of loading and storing the tile in
// memory per group: a store-to-load round trip in every group's dependency chain). The same
// arithmetic in the same order either way, so the results are bit for bit the same.
struct SpareRegisterUse {
    bool zero_point = false;
    bool output_tile = false;
};
SpareRegisterUse spare_register_use(const CpuKernelSpec& spec);

}  // namespace qjit::jit
