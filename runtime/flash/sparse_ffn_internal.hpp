// The two paths of sparse_ffn_accumulate (runtime/flash/sparse_ffn.cpp dispatches).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "base/activations.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "runtime/flash/neuron_cache_data.hpp"

namespace qjit {

// A neuron's activation from its products: Relu max(0, u + bias); SwiGlu silu(g) * u.
template <typename T>
T ffn_activation(FfnActivation activation, T g, T u, T bias) {
    if (activation == FfnActivation::Relu) return std::max(T(0), u + bias);
    return silu(g) * u;
}

// gate_activations: null when the cache holds the gates (or the FFN has none).
void sparse_ffn_portable(const NeuronCache::Data& d, std::span<const int32_t> slots, const float* x, int64_t m,
                         float* y, const float* gate_activations);
// int8_products: the generated gate and up products (int8 x) where the kernel choice and the
// format allow them; false: products with x in fp32.
void sparse_ffn_fast(const NeuronCache::Data& d, std::span<const int32_t> slots, const float* x, int64_t m, float* y,
                     ThreadPool& pool, const float* gate_activations, bool int8_products);
void sparse_products_portable(const NeuronCache::Data& d, NeuronPart part, std::span<const int32_t> slots,
                              const float* x, int64_t m, float* out);
void sparse_products_fast(const NeuronCache::Data& d, NeuronPart part, std::span<const int32_t> slots, const float* x,
                          int64_t m, float* out, ThreadPool& pool, bool int8_products);

}  // namespace qjit
