#include "runtime/flash/sparse_ffn_kernels.hpp"

#include <atomic>

namespace qjit {

namespace {

using Data = NeuronCache::Data;

std::atomic<bool> baseline_only{false};

// The fastest variant the CPU runs, picked at run time (not by ifunc clones, so that sanitizer
// builds and any x86-64 take the same route).
const SparseFfnKernelTable& kernels() {
    static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return avx2 && !baseline_only.load(std::memory_order_relaxed) ? sparse_ffn_kernels_avx2()
                                                                   : sparse_ffn_kernels_baseline();
}

}  // namespace

void sparse_ffn_baseline_kernels(bool on) { baseline_only.store(on, std::memory_order_relaxed); }

void column_products(const Data& d, NeuronPart part, int64_t slot, const float* x_padded, const float* x_sums,
                     int64_t m, float* out) {
    kernels().column_products(d, part, slot, x_padded, x_sums, m, out);
}

void down_accumulate(const Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m, int64_t b0,
                     int64_t b1, float* y) {
    kernels().down_accumulate(d, slots, count, a, m, b0, b1, y);
}

void f16_products(const uint16_t* row, const float* x, int64_t m, int64_t n, float* out) {
    kernels().f16_products(row, x, m, n, out);
}

void f16_down_accumulate(const Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m, int64_t k0,
                         int64_t k1, float* y) {
    kernels().f16_down_accumulate(d, slots, count, a, m, k0, k1, y);
}

}  // namespace qjit
