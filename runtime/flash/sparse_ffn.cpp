#include "runtime/flash/sparse_ffn.hpp"

#include "base/error.hpp"
#include "runtime/flash/sparse_ffn_internal.hpp"

namespace qjit {

void sparse_ffn_accumulate(const NeuronCache& cache, std::span<const int32_t> slots, const float* x, int64_t m,
                           float* y, ThreadPool& pool, SparseFfnPath path) {
    const NeuronCache::Data& d = cache.data();
    require(m >= 0, "sparse ffn: m ", m, " is negative");
    for (int32_t s : slots)
        require(s >= 0 && s < d.size, "sparse ffn: slot ", s, " is not occupied (size ", d.size, ")");
    if (slots.empty() || m == 0) return;
    if (path == SparseFfnPath::Portable) sparse_ffn_portable(d, slots, x, m, y);
    else sparse_ffn_fast(d, slots, x, m, y, pool);
}

}  // namespace qjit
