// GGUF weight tensors as qjit matrices, exactly: the K x N matrix import_gguf_matrix returns
// dequantizes (format/reference.hpp) to the transpose of what ggml's dequantizer gives for the
// tensor (io/gguf_dequantize.hpp, the gguf Python package's numbers), bit for bit.
//
// A GGUF weight has dims {K, N}: N rows of K values, each row a run of blocks along K. Each block's
// sub-blocks become K-groups of one output column; ggml's codes become qjit's codes, widened where
// qjit has no such width (5 and 6 bits are held in 8), and its scale arithmetic becomes a scale and
// a zero point or float offset per group, computed so that the oracle's
// scale * (code - zero) or scale * code + offset performs ggml's fp32 operations:
//
//   type   stored as          scale        zero / offset
//   Q4_0   q4g32_sym          d (fp16)     8
//   Q4_1   q4g32_off          d (fp16)     m (fp16)
//   Q5_0   q8g32_asym         d (fp16)     16 (5-bit codes in 8-bit)
//   Q5_1   q8g32_off          d (fp16)     m (fp16) (5-bit codes in 8-bit)
//   Q8_0   q8g32_sym          d (fp16)     128 (the int8 codes plus 128)
//   Q2_K   q2g16_off_s32      d * sc       -(dmin * m)
//   Q3_K   q3g16_sym_s32      d * (sc-32)  4
//   Q4_K   q4g32_off_s32      d * sc       -(dmin * m)
//   Q5_K   q8g32_off_s32      d * sc       -(dmin * m) (5-bit codes in 8-bit)
//   Q6_K   q8g16_asym_s32     d * sc       32 (6-bit codes in 8-bit)
//
// Any other type (F32, F16 and BF16 are not quantized: requantize them or run them dense; the IQ,
// TQ, Q8_1, Q8_K and MXFP4 types) is refused with QJIT_ERROR_UNSUPPORTED naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "io/gguf_file.hpp"
#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"
#include "format/weight_format.hpp"

namespace qjit {

// Whether import_gguf_matrix takes `type`.
bool gguf_import_supported(GgmlType type);

// The format a k x n tensor of `type` is stored in (k = 0: the format's name without a shape, e.g.
// q4g32_sym rather than q4col_sym for a single block). QJIT_ERROR_UNSUPPORTED for a type not
// imported.
WeightFormat gguf_import_format(GgmlType type, int64_t k = 0, int64_t n = 0);

// How a type is stored, for describe strings and documentation: "Q6_K as q8g16_asym_s32 (6-bit
// codes in 8-bit, zero 32; scale d * sc)". QJIT_ERROR_UNSUPPORTED for a type not imported.
std::string gguf_import_name(GgmlType type);

// The k x n matrix of the tensor whose n rows of k values lie in `data` (bytes long), as a GGUF
// file stores a {k, n} tensor. Refusals, each naming what is wrong: QJIT_ERROR_UNSUPPORTED for a
// type not imported; QJIT_ERROR_INVALID_ARGUMENT for a null `data`, a shape outside qjit's limits,
// a k that is not a whole number of the type's blocks, a byte count other than
// n * (k / block values) * block bytes, or a block whose fp16 scale fields (d, m, dmin) are
// infinite or NaN (ggml would give non-finite weights; qjit stores finite scales only).
QuantizedMatrix import_gguf_matrix(GgmlType type, const uint8_t* data, size_t bytes, int64_t k, int64_t n);

// The same import straight into the packed layout (format/packed_codes.hpp), without the k x n
// codes in between: what a layer made from the tensor needs, in one pass over the file's bytes that
// threads can share by panels. import_gguf_params_shell makes the same checks as
// import_gguf_matrix and returns its params with every zero point set and the scales and offsets
// sized; import_gguf_panels then writes every word of the panels [first_panel, end_panel) of
// `codes` (from unwritten_packed_codes or zeroed_packed_codes at the format's bits, k and n and any
// panel width), the padding columns' zero, and the scales and offsets
// of their columns, refusing a non-finite scale field as import_gguf_matrix does. Together they
// give import_gguf_matrix's params and pack_codes of its codes, word for word.
QuantParams import_gguf_params_shell(GgmlType type, const uint8_t* data, size_t bytes, int64_t k, int64_t n);
void import_gguf_panels(GgmlType type, const uint8_t* data, int64_t first_panel, int64_t end_panel, QuantParams& params,
                        PackedCodes& codes);

}  // namespace qjit
