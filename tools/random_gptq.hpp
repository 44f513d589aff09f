// Random GPTQ layers for programs that time qjit (qjit-tune, the benchmarks): a kernel's speed
// does not depend on the weights' values, and importing GPTQ tensors is far faster than
// quantizing fp32 weights, so timing tools make their layers this way.
#pragma once

#include <cstdint>
#include <vector>

#include "qjit/qjit.h"

namespace qjit_tools {

// splitmix64: fast and good enough for filling benchmark weights.
class Rng {
public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [lo, hi).
    float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 40) * 0x1p-24f; }

private:
    uint64_t state_;
};

// GPTQ v2 tensors with every int32 word of qweight random (codes cover their whole range), zero
// points random too (or all 2^(bits-1) when `symmetric`) and fp16 scales random in [0.01, 0.02),
// the range real checkpoints have.
struct GptqTensors {
    std::vector<int32_t> qweight;
    std::vector<int32_t> qzeros;
    std::vector<uint16_t> scales;
    std::vector<int32_t> g_idx;  // empty: no act-order
    qjit_gptq_tensors view{};    // points into the vectors above
};

// group: rows per group, or QJIT_GROUP_PER_COLUMN.
void random_gptq(int64_t k, int64_t n, int bits, int group, uint64_t seed, GptqTensors* out, bool symmetric = false);

// Gives random_gptq's tensors act-order: a g_idx in which each group still has `group` rows, spread
// over the K rows in a random order, as GPTQ's desc_act leaves them. k must be a multiple of group.
void shuffle_groups(int64_t k, int group, uint64_t seed, GptqTensors* tensors);

}  // namespace qjit_tools
