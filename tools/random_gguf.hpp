// Random GGUF tensors of ggml's block types, for the programs that time qjit's import and kernels
// (and the tests of the import): random bytes, with each block's fp16 scale fields (d, m, dmin)
// set by the caller's draw, so that timings see normal numbers and tests any they choose.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "qjit/qjit.h"

namespace qjit_tools {

struct GgmlBlockShape {
    int values = 0, bytes = 0;        // values per block, bytes per block
    std::vector<int> half_fields;     // byte offsets of the block's fp16 d, m or dmin
};

// The block of each type qjit imports (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K .. Q6_K); values 0 for
// another type.
GgmlBlockShape ggml_block_shape(qjit_ggml_type type);

// n rows of k values (k a whole number of blocks): random bytes, every fp16 field `draw_half()`.
std::vector<uint8_t> random_gguf_tensor(qjit_ggml_type type, int64_t k, int64_t n, uint64_t seed,
                                        const std::function<uint16_t()>& draw_half);

// An fp16 scale of a benchmark's tensor: normal, between 2^-10 and 2^-7, of either sign.
uint16_t benchmark_half(uint64_t random);

}  // namespace qjit_tools
