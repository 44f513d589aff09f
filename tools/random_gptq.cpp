#include "tools/random_gptq.hpp"

#include <algorithm>
#include <bit>
#include <utility>

namespace qjit_tools {

namespace {

constexpr float kScaleMin = 0.01f;
constexpr float kScaleMax = 0.02f;

// Bits of the fp16 number nearest below `value`, a positive normal fp16 number (as the scales are).
uint16_t half_bits(float value) {
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    const uint32_t exponent = ((bits >> 23) & 0xffu) - 127u + 15u;  // rebias from fp32 to fp16
    const uint32_t mantissa = (bits >> 13) & 0x3ffu;                // keep the top 10 of 23 bits
    return uint16_t((exponent << 10) | mantissa);
}

}  // namespace

void random_gptq(int64_t k, int64_t n, int bits, int group, uint64_t seed, GptqTensors* out, bool symmetric) {
    Rng rng(seed);
    const int64_t rows_per_group = group == QJIT_GROUP_PER_COLUMN ? k : group;
    const int64_t groups = (k + rows_per_group - 1) / rows_per_group;
    out->qweight.resize(size_t((k * bits + 31) / 32 * n));
    out->qzeros.resize(size_t(groups * ((n * bits + 31) / 32)));
    out->scales.resize(size_t(groups * n));
    for (int32_t& word : out->qweight) word = int32_t(uint32_t(rng.next()));
    for (int32_t& word : out->qzeros) word = int32_t(uint32_t(rng.next()));
    if (symmetric) {  // each row of qzeros: N fields of `bits` bits, packed from bit 0 of word 0
        const int64_t row_words = (n * bits + 31) / 32;
        std::fill(out->qzeros.begin(), out->qzeros.end(), 0);
        for (int64_t g = 0; g < groups; ++g)
            for (int64_t bit = 0; bit < n * bits; ++bit)
                if ((bit % bits) == bits - 1)  // the top bit of each field: 2^(bits-1)
                    out->qzeros[size_t(g * row_words + bit / 32)] |= int32_t(uint32_t(1) << (bit % 32));
    }
    for (uint16_t& scale : out->scales) scale = half_bits(rng.uniform(kScaleMin, kScaleMax));
    out->view = qjit_gptq_tensors{};
    out->view.bits = bits;
    out->view.group_size = group;
    out->view.qweight = out->qweight.data();
    out->view.qzeros = out->qzeros.data();
    out->view.scales = out->scales.data();
    out->view.scale_dtype = QJIT_DTYPE_F16;
    out->view.g_idx = nullptr;
    out->view.checkpoint_format = QJIT_GPTQ_V2;
}

void shuffle_groups(int64_t k, int group, uint64_t seed, GptqTensors* tensors) {
    tensors->g_idx.resize(size_t(k));
    for (int64_t row = 0; row < k; ++row) tensors->g_idx[size_t(row)] = int32_t(row / group);
    Rng rng(seed);
    for (int64_t i = k - 1; i > 0; --i)  // Fisher-Yates
        std::swap(tensors->g_idx[size_t(i)], tensors->g_idx[size_t(rng.next() % uint64_t(i + 1))]);
    tensors->view.g_idx = tensors->g_idx.data();
}

}  // namespace qjit_tools
