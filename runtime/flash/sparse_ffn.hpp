// The FFN over the neurons in a cache: for m rows of x (d_model each), the activations of the
// given slots (a dot product of x with each slot's gate and up vectors), then the down
// projection over those slots' rows, added to y (m x d_model).
#pragma once

#include <cstdint>
#include <span>

#include "runtime/cpu/thread_pool.hpp"
#include "runtime/flash/neuron_cache.hpp"

namespace qjit {

enum class SparseFfnPath : uint8_t {
    Fast,      // the fastest path for the format on this machine
    FastF32,   // the fastest whose gate and up products take x in fp32, not int8 (exact)
    Portable,  // plain C++ over the same layout (the reference for tests)
};

// y[r][:] += sum over s in slots of a_s(x[r]) * down_s, a_s as the file's activation says. A SwiGlu
// cache that does not hold the gates takes the gate activations instead: gate_activations[i * m + r]
// for slots[i] and row r (silu(x . gate), or 0 where the neuron sits the row out), so that
// a_s = gate_activation * (x . up_s).
void sparse_ffn_accumulate(const NeuronCache& cache, std::span<const int32_t> slots, const float* x, int64_t m,
                           float* y, ThreadPool& pool, SparseFfnPath path = SparseFfnPath::Fast,
                           const float* gate_activations = nullptr);

// out[i * m + r] = x[r] . the `part` vector of slots[i] (gate or up; a part the cache holds).
void sparse_ffn_products(const NeuronCache& cache, NeuronPart part, std::span<const int32_t> slots, const float* x,
                         int64_t m, float* out, ThreadPool& pool, SparseFfnPath path = SparseFfnPath::Fast);

}  // namespace qjit
