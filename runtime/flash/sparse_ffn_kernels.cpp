#include "runtime/flash/sparse_ffn_kernels.hpp"

#include <atomic>

#include "base/error.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {

namespace {

using Data = NeuronCache::Data;

std::atomic<SparseFfnKernels> chosen{SparseFfnKernels::Fastest};

// The fastest hand-written variant the CPU runs.
SparseFfnKernels fastest_hand_written() {
    static const SparseFfnKernels best =
        sparse_ffn_kernels_supported(SparseFfnKernels::Avx2) ? SparseFfnKernels::Avx2 : SparseFfnKernels::Baseline;
    return best;
}

// The table of the variant in use, within the cap `isa` (the context's): a variant above it runs
// as the baseline.
const SparseFfnKernelTable& kernels(qjit_isa isa) {
    const SparseFfnKernels which = chosen.load(std::memory_order_relaxed);
    const bool avx2 = which == SparseFfnKernels::Avx2 ||
                      ((which == SparseFfnKernels::Fastest || which == SparseFfnKernels::Jit) &&
                       fastest_hand_written() == SparseFfnKernels::Avx2);
    return avx2 && isa >= QJIT_ISA_AVX2 ? sparse_ffn_kernels_avx2() : sparse_ffn_kernels_baseline();
}

}  // namespace

bool sparse_ffn_kernels_supported(SparseFfnKernels which) {
    switch (which) {
    case SparseFfnKernels::Avx2:
    case SparseFfnKernels::Jit: return cpu_supports(QJIT_ISA_AVX2);
    default: return true;
    }
}

SparseFfnKernels exact_sparse_ffn_kernels() { return fastest_hand_written(); }

void use_sparse_ffn_kernels(SparseFfnKernels which) {
    require(sparse_ffn_kernels_supported(which), "sparse FFN: this CPU does not run the kernels asked for");
    chosen.store(which, std::memory_order_relaxed);
}

const SparseProductJit* sparse_product_jit(const Data& d) {
    const SparseFfnKernels which = chosen.load(std::memory_order_relaxed);
    if (which != SparseFfnKernels::Fastest && which != SparseFfnKernels::Jit) return nullptr;
    return d.generated;
}

void column_products(const Data& d, NeuronPart part, int64_t slot, const float* x_padded, const float* x_sums,
                     int64_t m, float* out) {
    kernels(d.isa).column_products(d, part, slot, x_padded, x_sums, m, out);
}

void down_accumulate(const Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m, int64_t b0,
                     int64_t b1, float* y) {
    kernels(d.isa).down_accumulate(d, slots, count, a, m, b0, b1, y);
}

void f16_products(qjit_isa isa, const uint16_t* row, const float* x, int64_t m, int64_t n, float* out) {
    kernels(isa).f16_products(row, x, m, n, out);
}

void f16_down_accumulate(const Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m, int64_t k0,
                         int64_t k1, float* y) {
    kernels(d.isa).f16_down_accumulate(d, slots, count, a, m, k0, k1, y);
}

}  // namespace qjit
