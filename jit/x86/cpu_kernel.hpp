// What a generated x86 kernel computes (CpuKernelSpec), the knobs that shape it (CpuTiling), and
// how it is called (CpuKernelArgs). A kernel multiplies `rows` activation rows by one column panel
// of packed weights (format/packed_codes.hpp) over a range of groups and writes a rows x panel
// tile of fp32 outputs.
//
// The x86 generator family, in the five parts of the CUDA one (jit/cuda/cuda_tiling.hpp): the spec
// and tiling (CpuKernelSpec, CpuTiling: here); the tiling's text and parse (tiling_text,
// parse_tiling: jit/x86/cpu_tiling.hpp); kernel_name; unsupported_reason (here, check_spec
// applies it); generate (generate_cpu_kernel: jit/x86/gemm_emitter.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "format/packed_codes.hpp"
#include "format/panel_metadata.hpp"
#include "format/weight_format.hpp"
#include "jit/x86/isa_features.hpp"
#include "qjit/qjit.h"

namespace qjit::jit {

enum class ActivationPath {
    F32,   // exact: codes unpacked to fp32, fp32 FMAs; scale and zero applied once per group
    Int8,  // activations quantized to int8 per row and group; u8 x s8 integer dot products
};

// The tuner's knobs, named as the tiling text spells them ("tu=4,mb=4,prefetch=0,ku=1,ksplit=1").
struct CpuTiling {
    int tu = 4;        // column vectors: registers of columns per register block (panel = tu * lanes)
    int mb = 4;        // activation rows one kernel call handles (accumulators = tu * mb)
    int prefetch = 0;  // software prefetch of codes this many 32-row blocks ahead (0: none)
    int ku = 1;        // k-unroll: 32-row blocks per iteration of a group's block loop (must divide
                       // group_size / 32; the tail group always steps one block)
    int ksplit = 1;    // the runtime splits K into this many group ranges (partial sums added); a
                       // schedule knob: it does not change the generated code

    bool operator==(const CpuTiling&) const = default;
};

struct CpuKernelSpec {
    WeightFormat format = f16_scaled_format();  // the weights it reads (n and act-order do not change the code)
    IsaFeatures isa = IsaFeatures::of(QJIT_ISA_AVX512_VNNI);  // AVX2 at least
    ActivationPath path = ActivationPath::Int8;
    int rows = 1;                // activation rows of this kernel (1 .. tiling.mb, or a prompt tile's)
    CpuTiling tiling;
    // A kernel of part of a panel: its column vectors [first_vector, first_vector + vectors) of the
    // tiling.tu the panel holds (vectors 0: all of them). A prompt's taller row tiles run on such
    // kernels, which leave registers for more rows (prompt_tile, runtime/cpu/jit_executor.hpp).
    int first_vector = 0;
    int vectors = 0;
    // Each group's scales and zero points follow its codes in the panel's stream (PackedCodes'
    // metadata slots, format/inline_metadata.hpp), instead of streams of their own: set for every
    // format that allows it (inline_metadata_fits) by the layers' kernels.
    bool inline_metadata = false;

    int lanes() const { return isa.lanes(); }
    int kernel_vectors() const { return vectors > 0 ? vectors : tiling.tu; }
    int panel_columns() const { return tiling.tu * lanes(); }  // of the packed layout
    bool vnni() const { return isa.vnni; }
    int64_t padded_k() const { return (format.k + 31) / 32 * 32; }
    // Rows per group as the kernel walks them: 16 or a multiple of 32 (one group: k rounded up to 32).
    int64_t group_rows() const { return format.per_column() ? padded_k() : format.group_size; }
    // Groups over the padded rows: for groups of 16 this can be one more than over k (a group of
    // padding only, whose metadata is zero), so that a 32-row block always holds two whole groups.
    int64_t num_groups() const { return (padded_k() + group_rows() - 1) / group_rows(); }
    // Largest activation magnitude of the int8 path. Without VNNI, vpmaddubsw adds two u8 x s8
    // products into int16: 8-bit codes (255) and codebook values (up to 241) need |x| <= 64 to stay
    // clear of saturation.
    int int8_activation_max() const { return !vnni() && format.value_bits() == 8 ? 63 : 127; }
    // Whether the kernel multiplies super-block formats' integer sub-block scale codes into its
    // integer sums (vpmaddwd by the codes instead of by ones, on the int8 path without VNNI) and
    // applies the super-block's fp16 values once per 256 rows, instead of a float epilogue per group.
    bool integer_sub_block_scales() const {
        return path == ActivationPath::Int8 && !vnni() && format.super_block_scales();
    }
    // Rows of K that share one int8 activation step: a super-block where the integer sums run over
    // one (integer_sub_block_scales), else a group. The sums stay per group.
    int64_t activation_group_rows() const { return integer_sub_block_scales() ? kSuperBlockRows : group_rows(); }
};

// The K-groups a kernel's group ranges (K-split parts) start on and its group loop steps by: 2 for
// groups of 16 (a 32-row block holds two), a super-block's groups with super-block scales (the
// kernel finds each super-block's super-scales at the start of its range), else 1.
int64_t groups_per_kernel_step(const CpuKernelSpec& spec);

// The panel layout of the scales and zero points of spec's kernels (format/panel_metadata.hpp).
PanelMetadataLayout metadata_layout(const CpuKernelSpec& spec);
// Bytes of the scales and zero points spec's kernels read beside their codes, for `format`'s N
// columns: none where they read them inline.
PanelMetadataSizes beside_codes_metadata_sizes(const CpuKernelSpec& spec, const WeightFormat& format);
// Whether a kernel of `spec`'s format can read its metadata inline: plain per-group scales (no
// super-block or second-order ones), one width, and groups of whole 32-row blocks.
bool inline_metadata_fits(const CpuKernelSpec& spec);
// Bytes of one group's metadata slot in a panel of spec's kernels: the panel's scales and zero
// points or offsets, padded to a vector, so that the codes after it stay aligned.
int64_t inline_slot_bytes(const CpuKernelSpec& spec);
// The layout the kernels of `spec` read `codes` (packed at spec's panel width) in: metadata slots
// after every group when spec.inline_metadata, else none.
void assign_kernel_slots(const CpuKernelSpec& spec, PackedCodes& codes);
// Words of the stream the kernels of `spec` read for n columns: codes, and slots where inline.
int64_t kernel_stream_words(const CpuKernelSpec& spec, int64_t n);

// A name that says what the kernel is, in the style used across qjit (describe strings, the
// tuning database, dumps), starting with its format's name: q4g128_asym_gemm_i8_avx512vnni_tu4mb4pf0.
std::string kernel_name(const CpuKernelSpec& spec);
// The same without the tiling: what the code computes, the start of the tuning database's kernel
// key: q4g128_asym_gemm_i8_avx512vnni.
std::string kernel_family_name(const CpuKernelSpec& spec);

// Why no generated kernel computes `format` ("" when one does): its bits, group size, mixed widths
// or second-order scales. The x86 JIT's one answer to "do you run this format"; check_spec
// refuses the same, and what depends on the ISA and tiling besides.
std::string unsupported_reason(const WeightFormat& format);

// Throws an Error when the spec cannot be generated: QJIT_ERROR_UNSUPPORTED for its format
// (unsupported_reason) or ISA, QJIT_ERROR_INVALID_ARGUMENT for a tiling out of range or one whose
// registers do not fit the ISA's register file.
void check_spec(const CpuKernelSpec& spec);

// Vector registers the kernel's main loop needs (accumulators, weights, temporaries, constants,
// activation broadcasts), and how many the ISA has.
int vector_registers_needed(const CpuKernelSpec& spec);
int vector_registers_available(IsaFeatures isa);

// Arguments of a generated kernel: void kernel(const CpuKernelArgs*).
struct CpuKernelArgs {
    const uint32_t* codes;  // the panel's first block of the group range
    const void* scales;     // [groups][panel] fp16 or fp32, from the first group of the range; second-order:
                            // [groups][panel / 16] fp16 (scale, zero) pairs; super-block: per super-block,
                            // [panel] fp16 d then [groups of the super-block][panel] code bytes
    const void* zeros;      // [groups][panel] u8 (asymmetric only); second-order: zero | scale code << 4;
                            // float offsets: fp16 or fp32 as the scales; super-block: as its scales (dmin,
                            // min codes)
    const void* x;          // activations [rows][padded_k]: int8 (Int8) or fp32 (F32), from the range's first row
    const float* x_scale;   // [rows][num_groups]: int8 step per row and group (Int8 only; the same for
                            // every group of an activation group, CpuKernelSpec::activation_group_rows)
    const float* x_sum;     // [rows][num_groups]: per row and group, the sum of the activations
                            // (Int8: of the int8 values)
    float* y;               // [rows][panel] output tile, overwritten
    int64_t full_groups;    // groups of group_size rows to process (even for groups of 16)
    int64_t tail_blocks;    // then one more group of this many 32-row blocks (0: none; groups >= 32 only)
    const uint8_t* group_bits;  // mixed widths: each group's width, from the range's first group
};

}  // namespace qjit::jit
