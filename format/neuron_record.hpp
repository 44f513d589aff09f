// One FFN neuron as a neuron file stores it (io/neuron_file.hpp): its vectors (the column of
// the up projection, of the gate projection when the FFN is gated, and the row of the down
// projection), each quantized on its own over the model dimension.
//
// A neuron i of an FFN  y = sum_i a_i * down[i][:],  a_i = act(x . up[:, i] (+ bias_i))  or, gated,
// a_i = silu(x . gate[:, i]) * (x . up[:, i]),  owns three vectors of d_model values. Each is one
// column of a d_model x d_ff qjit matrix (up, gate, and down transposed), quantized in a uniform
// qjit format with groups along d_model, so a neuron's data never shares a scale with another's.
//
// A vector's bytes, in this order (little-endian):
//     codes   column_words(format) uint32 words: the column's 32-row blocks in the packed
//             layout with one column per panel (format/packed_codes.hpp, format/code_planes.hpp)
//     scales  num_groups scales at the format's scale type (fp16 or fp32)
//     zeros   num_groups zero points: none (symmetric), a uint8 code, or a float offset at the
//             scales' type (float offsets)
// or, for unquantized vectors (VectorCoding::F16), d_model fp16 values.
#pragma once

#include <cstdint>

#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"
#include "format/weight_format.hpp"

namespace qjit {

enum class VectorCoding : uint8_t {
    Quantized,  // a uniform qjit format (bits 2, 3, 4 or 8; fp16 or fp32 scales)
    F16,        // fp16 values
};

// The parts of a neuron, in the order a bundle stores them.
enum class NeuronPart : uint8_t { Gate = 0, Up = 1, Down = 2 };

struct NeuronVectorLayout {
    VectorCoding coding = VectorCoding::Quantized;
    WeightFormat format;  // Quantized: k = d_model, n = 1; uniform widths, no act-order, outliers,
                          // compensator or second-order scales

    int64_t d_model() const { return format.k; }
    int64_t code_words() const;  // Quantized: 32-row blocks x bits; F16: 0
    int64_t scale_bytes() const;  // all groups' scales; F16: 0
    int64_t zero_bytes() const;   // all groups' zero points; F16: 0
    int64_t value_bytes() const;  // F16: 2 * d_model; Quantized: 0
    // Bytes of one vector: code_words() * 4 + scale_bytes() + zero_bytes() + value_bytes().
    int64_t bytes() const;
    // Byte offsets of the parts inside a vector.
    int64_t scales_offset() const { return code_words() * 4; }
    int64_t zeros_offset() const { return scales_offset() + scale_bytes(); }
};

// A layout for vectors of d_model values: quantized in `format` (its shape is set here) or fp16.
// Throws an invalid-argument Error naming what the format has that a neuron vector cannot.
NeuronVectorLayout quantized_vector_layout(WeightFormat format, int64_t d_model);
NeuronVectorLayout f16_vector_layout(int64_t d_model);

// Column `column` of `matrix` (its format is layout.format with any n) as a vector, written to
// out[0, layout.bytes()). `packed`: the matrix's codes packed at any panel width.
void encode_quantized_vector(const NeuronVectorLayout& layout, const QuantizedMatrix& matrix,
                             const PackedCodes& packed, int64_t column, uint8_t* out);
// d_model values, value r at values[r * stride], as an F16 vector.
void encode_f16_vector(const NeuronVectorLayout& layout, const float* values, int64_t stride, uint8_t* out);

// The d_model x n matrix whose column c is the quantized vector at vectors + c * stride: its params
// and its codes packed one column per panel (what make_linear takes). Throws an invalid-argument
// Error for F16 vectors.
struct VectorMatrix {
    QuantParams params;
    PackedCodes codes;
};
VectorMatrix vectors_as_matrix(const NeuronVectorLayout& layout, const uint8_t* vectors, int64_t n, int64_t stride);

// The code of row r of a quantized vector.
uint8_t vector_code(const NeuronVectorLayout& layout, const uint8_t* vector, int64_t row);
// The dequantized vector (d_model values): the oracle of every kernel.
void dequantize_vector(const NeuronVectorLayout& layout, const uint8_t* vector, float* out);

}  // namespace qjit
