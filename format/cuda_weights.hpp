// A quantized matrix in the layout the CUDA kernels read (jit/cuda/cuda_source.hpp), on the host:
//   codes  [np][kp / 32 * bits] uint32: column by column, K in 32-code blocks (format/cuda_code_layout.hpp)
//   scales [num_groups][np] fp16 (when the layer's scales are fp16-exact) or fp32
//   zeros  [num_groups][np] uint16, asymmetric only; with float offsets the offsets in their place,
//          at the scales' type
// Super-block scales (ggml's K-quants) stay as the file holds them: the scales are fp16 d
// [num_groups / 8][np] followed by the int8 scale codes [num_groups][np], and float offsets fp16
// dmin and the uint8 min codes likewise; the kernels form d * code and -(dmin * code).
// pack_fragment_codes gives the same codes in fragment order (format/cuda_code_layout.hpp), the
// mma kernel's layout.
// kp = padded_k(k), np = padded_n(n); padding holds zero codes, zero scales and zero points, so
// it contributes nothing. Rows stay in storage order (act-order: activations are gathered).
#pragma once

#include <cstdint>
#include <vector>

#include "format/quantized_matrix.hpp"

namespace qjit {

struct CudaWeights {
    int bits = 0;
    int64_t k = 0, n = 0, kp = 0, np = 0, num_groups = 0;
    bool f16_scales = true;
    bool super_block = false;           // scales (and offsets) in super_block_scales (super_block_offsets)
    std::vector<uint32_t> codes;
    std::vector<uint16_t> scales_f16;  // when f16_scales
    std::vector<float> scales_f32;     // otherwise
    std::vector<uint16_t> zeros;       // empty when symmetric or with float offsets
    std::vector<uint16_t> offsets_f16; // float offsets, when f16_scales
    std::vector<float> offsets_f32;    // float offsets, otherwise
    std::vector<uint8_t> super_block_scales, super_block_offsets;  // d and scale codes, dmin and min codes

    // Bytes of the codes in either device layout (also when `codes` was not packed).
    int64_t code_bytes() const { return np * (kp / 32) * bits * 4; }
    // What the kernels' scale argument points to: fp16, fp32 or super-block scales.
    const void* scale_data() const;
    int64_t scale_bytes() const;
    // What the kernels' zero-point argument points to: the integer zero points or the float
    // offsets (nullptr and 0 bytes when symmetric).
    const void* zero_point_data() const;
    int64_t zero_point_bytes() const;
};

CudaWeights pack_cuda_weights(const QuantizedMatrix& matrix);
// The same without the codes (left empty), and the codes alone: the two halves of pack_cuda_weights.
CudaWeights pack_cuda_metadata(const QuantizedMatrix& matrix);
std::vector<uint32_t> pack_block_codes(const QuantizedMatrix& matrix);
// The codes in fragment order: [np / 8][kp / 128][32 lanes][bits] words.
std::vector<uint32_t> pack_fragment_codes(const QuantizedMatrix& matrix);

// Packs one block's 32 codes at `bits` into `words` (bits words, zeroed first) per
// format/cuda_code_layout.hpp.
void pack_cuda_block(int bits, const uint8_t (&codes)[32], uint32_t* words);

// The code of (row, column) read back from the packed layout (the tests' independent check).
int unpack_cuda_code(const CudaWeights& weights, int64_t row, int64_t column);
// The same from fragment-ordered codes of a bits-wide matrix with kp padded rows.
int unpack_fragment_code(const std::vector<uint32_t>& codes, int bits, int64_t kp, int64_t row, int64_t column);

// Whether every scale and float offset is exactly an fp16 number (then the device stores both as
// fp16, else both as fp32).
bool scales_and_offsets_exact_in_f16(const QuantParams& params);

}  // namespace qjit
