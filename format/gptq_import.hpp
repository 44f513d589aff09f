// Import of GPTQ layers as AutoGPTQ and GPTQModel store them.
//
// The GPTQ format, for a layer of K inputs and N outputs quantized to `bits` bits in groups of
// `group_size` rows along K (G = ceil(K / group_size) groups; group_size -1 means one group):
//
//   qweight  int32 [ceil(K*bits/32)][N]. Each column is a little-endian bitstream of its K codes:
//            code k sits at bit bits*k of the column, counting bit 0 of word 0 first, so word
//            (bits*k)/32 holds it. For 2, 4 and 8 bits that is 32/bits codes per word; for 3 bits
//            it is 32 codes in 3 words, codes 10 and 21 split across a word boundary.
//   qzeros   int32 [G][ceil(N*bits/32)]. The zero points of each group, packed along N by the
//            same bitstream rule. "gptq_v2" stores the zero points as they are. "gptq" (v1) stores
//            zero - 1 the way AutoGPTQ and GPTQModel write it: for 2, 4 and 8 bits they pack the
//            true zeros, then subtract 0x55555555, 0x11111111 or 0x01010101 (a 1 in every field)
//            from each whole int32 word, so a zero of 0 becomes the field 2^bits - 1 and borrows 1
//            from the next field up; their kernels add the constant back to the whole word, and so
//            does qjit. For 3 bits (fields straddle words) they subtract and add 1 per field,
//            modulo 8. Reading v1 field by field (field + 1) is wrong twice over for a zero of 0:
//            it reads 2^bits, and the next field of the word one too low.
//            What v1 cannot hold: the round trip is exact for zeros 0 .. 2^bits - 1 (all a GPTQ
//            quantizer produces), but a zero of 2^bits, which "field + 1" seemed to allow, has no
//            v1 encoding; a layer that needs it must be written as v2.
//   scales   fp16, bf16 or fp32 [G][N].
//   g_idx    int32 [K], the group of each row; absent means k / group_size. With act-order
//            (desc_act) GPTQ quantizes rows in a permuted order, so g_idx is a shuffle of that,
//            but every group still holds exactly group_size rows (the last one the remainder).
//
// Dequantized, W[k][n] = scales[g][n] * (code[k][n] - zero[g][n]) with g = g_idx[k].
#pragma once

#include <cstdint>

#include "qjit/qjit.h"
#include "format/quantized_matrix.hpp"

namespace qjit {

// The layer's metadata without its codes: format, scales, zero points and (act-order) the row
// order, checked as import_gptq checks them. What a packer needs besides qweight itself.
QuantParams import_gptq_params(int64_t k, int64_t n, const qjit_gptq_tensors& tensors);

// Converts GPTQ tensors to the logical matrix. With act-order, rows are sorted by group (a stable
// sort, so rows keep their order within a group) and the sort is recorded in row_order; a g_idx
// that is already sorted gives the plain layout. Throws an Error naming the bad argument.
QuantizedMatrix import_gptq(int64_t k, int64_t n, const qjit_gptq_tensors& tensors);

}  // namespace qjit
