#include "runtime/flash/sparse_ffn.hpp"

#include "base/error.hpp"
#include "runtime/flash/sparse_ffn_internal.hpp"

namespace qjit {

namespace {

void check_slots(const NeuronCache::Data& d, std::span<const int32_t> slots, int64_t m) {
    require(m >= 0, "sparse ffn: m ", m, " is negative");
    for (int32_t s : slots)
        require(s >= 0 && s < d.size, "sparse ffn: slot ", s, " is not occupied (size ", d.size, ")");
}

}  // namespace

void sparse_ffn_accumulate(const NeuronCache& cache, std::span<const int32_t> slots, const float* x, int64_t m,
                           float* y, ThreadPool& pool, SparseFfnPath path, const float* gate_activations) {
    const NeuronCache::Data& d = cache.data();
    check_slots(d, slots, m);
    const bool gates_given = d.header.activation == FfnActivation::SwiGlu && !d.has(NeuronPart::Gate);
    require(d.has(NeuronPart::Up) && d.has(NeuronPart::Down), "sparse ffn: the cache holds no up or no down part");
    require(gates_given == (gate_activations != nullptr),
            gates_given ? "sparse ffn: the cache holds no gates and no gate activations are given"
                        : "sparse ffn: gate activations are given for a cache that holds its gates");
    if (slots.empty() || m == 0) return;
    if (path == SparseFfnPath::Portable) sparse_ffn_portable(d, slots, x, m, y, gate_activations);
    else sparse_ffn_fast(d, slots, x, m, y, pool, gate_activations, path == SparseFfnPath::Fast);
}

void sparse_ffn_products(const NeuronCache& cache, NeuronPart part, std::span<const int32_t> slots, const float* x,
                         int64_t m, float* out, ThreadPool& pool, SparseFfnPath path) {
    const NeuronCache::Data& d = cache.data();
    check_slots(d, slots, m);
    require(part != NeuronPart::Down && d.has(part), "sparse ffn: products of a part the cache does not hold");
    if (slots.empty() || m == 0) return;
    if (path == SparseFfnPath::Portable) sparse_products_portable(d, part, slots, x, m, out);
    else sparse_products_fast(d, part, slots, x, m, out, pool, path == SparseFfnPath::Fast);
}

}  // namespace qjit
