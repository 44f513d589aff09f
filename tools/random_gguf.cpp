#include "tools/random_gguf.hpp"

#include "tools/random_gptq.hpp"

namespace qjit_tools {

GgmlBlockShape ggml_block_shape(qjit_ggml_type type) {
    switch (type) {  // ggml-common.h's block structs
        case QJIT_GGML_Q4_0: return {32, 18, {0}};
        case QJIT_GGML_Q4_1: return {32, 20, {0, 2}};
        case QJIT_GGML_Q5_0: return {32, 22, {0}};
        case QJIT_GGML_Q5_1: return {32, 24, {0, 2}};
        case QJIT_GGML_Q8_0: return {32, 34, {0}};
        case QJIT_GGML_Q2_K: return {256, 84, {80, 82}};
        case QJIT_GGML_Q3_K: return {256, 110, {108}};
        case QJIT_GGML_Q4_K: return {256, 144, {0, 2}};
        case QJIT_GGML_Q5_K: return {256, 176, {0, 2}};
        case QJIT_GGML_Q6_K: return {256, 210, {208}};
        case QJIT_GGML_IQ4_NL: return {32, 18, {0}};
        case QJIT_GGML_IQ4_XS: return {256, 136, {0}};
        default: return {};
    }
}

std::vector<uint8_t> random_gguf_tensor(qjit_ggml_type type, int64_t k, int64_t n, uint64_t seed,
                                        const std::function<uint16_t()>& draw_half) {
    const GgmlBlockShape block = ggml_block_shape(type);
    if (block.values == 0 || k % block.values != 0) return {};
    std::vector<uint8_t> bytes(size_t(n * (k / block.values) * block.bytes));
    Rng rng(seed);
    for (size_t i = 0; i < bytes.size(); i += 8) {
        const uint64_t word = rng.next();
        for (size_t j = 0; j < 8 && i + j < bytes.size(); ++j) bytes[i + j] = uint8_t(word >> (8 * j));
    }
    for (size_t b = 0; b < bytes.size(); b += size_t(block.bytes))
        for (const int field : block.half_fields) {
            const uint16_t half = draw_half();
            bytes[b + size_t(field)] = uint8_t(half);
            bytes[b + size_t(field) + 1] = uint8_t(half >> 8);
        }
    return bytes;
}

uint16_t benchmark_half(uint64_t random) {
    const uint32_t sign = random & 1, exponent = 5 + (random >> 1) % 4, mantissa = (random >> 8) & 0x3ff;
    return uint16_t(sign << 15 | exponent << 10 | mantissa);
}

}  // namespace qjit_tools
