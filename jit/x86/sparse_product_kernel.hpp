// The generated kernels of the flash FFN's sparse passes over the quantized vectors of a neuron
// cache (format/neuron_record.hpp: 32-row blocks of bit-plane words, then the groups' scales and
// zero points), one vector per neuron:
// - Products: for each slot a list names, the dot products of `rows` activation rows with the
//   slot's gate or up vector. The vector lanes hold rows of a block, not columns as in the dense
//   kernels (jit/x86/cpu_kernel.hpp): one load, a shift and a mask lay a block's 32 codes in a
//   register, in an order of rows of their own (sparse_block_row); the activations are int8 per
//   row and group, stored in that order, so one u8 x s8 dot product takes the block.
// - Down: the listed slots' down vectors weighted by each row's activations and summed, for a
//   range of 32-row blocks of the output: the codes unpacked as above, widened to fp32, and
//   multiplied into sums that stay in registers while the slots stream past.
//
// The x86 family in its parts: the spec and tiling (here), kernel_name, unsupported_reason and
// check_spec (here), generate (generate_sparse_kernel: jit/x86/sparse_product_emitter.cpp and
// jit/x86/sparse_down_emitter.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "format/weight_format.hpp"
#include "jit/x86/isa_features.hpp"
#include "jit/x86/jit_generator.hpp"

namespace qjit::jit {

enum class SparsePass { Products, Down };

// The tuner's knobs ("v2pf1", "b2pf0").
struct SparseProductTiling {
    int vectors = 1;   // Products: slots one pass reads together (1 .. 4): independent chains
    int blocks = 1;    // Down: 32-row blocks of the output one pass holds in registers (1 or 2)
    int prefetch = 0;  // 1: the vectors of later slots are prefetched while this one computes

    bool operator==(const SparseProductTiling&) const = default;
};

// The tuning database's form: "vectors=2,blocks=1,prefetch=1".
std::string tiling_text(const SparseProductTiling& tiling);
// Parses tiling_text's form; knobs left out keep their defaults. Throws an invalid-argument Error
// naming the bad item (the ranges are check_spec's).
SparseProductTiling parse_sparse_tiling(const std::string& text);

// Bytes past a slot's vector that a kernel may read (the last group's padding blocks and a whole
// chunk of eight groups' scales and zero points): what a buffer of vectors must add at its end.
inline constexpr int64_t kSparseVectorPadding = 256;

struct SparseProductSpec {
    WeightFormat format;        // the vectors' format: k = d_model, n = 1
    int64_t vector_bytes = 0;   // a slot's vector (format/neuron_record.hpp's NeuronVectorLayout::bytes)
    IsaFeatures isa = IsaFeatures::of(QJIT_ISA_AVX2);
    SparsePass pass = SparsePass::Products;
    int rows = 1;               // activation rows (Products: 1 .. 4; Down: 1 or 2)
    SparseProductTiling tiling;

    // Blocks of a group as the kernel walks them (a per-column vector: all of them).
    int64_t group_blocks() const { return format.per_column() ? (format.k + 31) / 32 : format.group_size / 32; }
    int64_t groups() const { return format.num_groups(); }
    // Groups rounded up to the chunks of eight whose scales the kernel converts at once.
    int64_t padded_groups() const { return (groups() + 7) / 8 * 8; }
    // Bytes of a row of activations: every group's blocks, the last group's padding blocks included.
    int64_t x_stride() const { return groups() * group_blocks() * 32; }
    int64_t scales_offset() const { return (format.k + 31) / 32 * format.bits * 4; }
    int64_t zeros_offset() const { return scales_offset() + groups() * format.scale_bytes(); }
    // Largest int8 activation: vpmaddubsw sums two u8 x s8 products into int16, so 8-bit codes
    // (up to 255) need |x| <= 63 without VNNI.
    int activation_max() const { return !isa.vnni && format.bits == 8 ? 63 : 127; }
};

struct SparseProductArgs {
    const uint8_t* vectors;  // slot 0's vector; slot s's is vector_bytes * s further
    const int32_t* slots;    // [count]
    int64_t count;
    const int8_t* x;         // [rows][x_stride()]: each block in sparse_block_row order, 0 past d_model
    const float* x_scale;    // [rows][padded_groups()]: each row's and group's int8 step, 0 past the groups
    const float* x_sum;      // [rows][padded_groups()]: x_scale times the sum of the group's int8 values
    float* out;              // out[i * out_stride + r]: slots[i]'s product with row r
    int64_t out_stride;
};

using SparseProductFn = void (*)(const SparseProductArgs*);

struct SparseDownArgs {
    const uint8_t* vectors;  // slot 0's down vector; slot s's is vector_bytes * s further
    const int32_t* slots;    // [count]
    int64_t count;
    const float* a;          // a[r * a_stride + i]: row r's activation of slots[i]
    int64_t a_stride;
    float* out;              // [rows][out_stride]: block b's 32 sums at out + r * out_stride + 32 * (b -
                             // first_block), in sparse_block_row order; the kernel adds to them
    int64_t out_stride;
    int64_t first_block, end_block;  // the blocks [first, end) of each vector
};

using SparseDownFn = void (*)(const SparseDownArgs*);

// The row (0 .. 31) of a block whose code the kernel unpacks to byte `k` (0 .. 31) of its register,
// for codes of `bits` bits: where the activations of that row go.
int sparse_block_row(int bits, int k);

// "q4g32_asym_sparse_i8_avx2vnni_v2pf1", "q4g32_asym_sparse_down_avx2_b1pf0": the vectors' format,
// the pass, the ISA, the tiling and, past one row, the rows ("_m4").
std::string kernel_name(const SparseProductSpec& spec);

// Why no generated kernel computes products of vectors in `format` ("" when one does).
std::string sparse_product_unsupported_reason(const WeightFormat& format);

// Throws QJIT_ERROR_UNSUPPORTED for the format or ISA, QJIT_ERROR_INVALID_ARGUMENT for rows,
// tiling or a vector size that disagrees with the format.
void check_spec(const SparseProductSpec& spec);

// Vector registers the kernel needs (accumulators, totals, scratch, constants); 16 at most.
int vector_registers_needed(const SparseProductSpec& spec);

// Throws check_spec's Error for a spec it rejects. The kernel's function is a SparseProductFn or a
// SparseDownFn, as spec.pass says.
std::unique_ptr<JitGenerator> generate_sparse_kernel(const SparseProductSpec& spec);

}  // namespace qjit::jit
