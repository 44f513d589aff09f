// The generated kernels of a neuron cache's sparse passes (jit/x86/sparse_product_kernel.hpp) for
// its vector format: the gate and up products, a kernel per count of activation rows (1 .. 4), and
// the down sums (1 or 2 rows), each with the tiling the one tuning sequence chose for it
// (tuner/tuning_sequence.hpp: the context's choices, its tuning database, else timed on synthetic
// vectors of that format); and the activations prepared as the products read them (int8 per row and
// group, in their block order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jit/x86/sparse_product_kernel.hpp"
#include "runtime/flash/neuron_cache_data.hpp"

namespace qjit {

// x as the generated kernels read it (SparseProductArgs's x, x_scale and x_sum).
struct SparseActivations {
    std::vector<int8_t> values;  // [m][x_stride]
    std::vector<float> scales;   // [m][padded_groups]
    std::vector<float> sums;     // [m][padded_groups]
};

class SparseProductJit {
public:
    // The kernels of a cache's vectors under its ISA cap, each pass's and row count's tiling chosen
    // through `tuning` (records keyed "q4g32_asym_sparse_i8_avx2 K=576 m=2 threads=1"), generated
    // once per set of tilings in a process (thread-safe). Null when no generated kernel computes
    // them: fp16 vectors, 16-row groups, no AVX2 (jit::sparse_product_unsupported_reason).
    static const SparseProductJit* for_cache(const NeuronCache::Data& d, const SparseKernelTuning& tuning);

    // The kernels of d's vectors for `isa`, every row count with `tiling` (narrowed to the
    // registers where more rows need them): how tests reach each variant. Throws check_spec's Error.
    SparseProductJit(const NeuronCache::Data& d, jit::IsaFeatures isa, jit::SparseProductTiling tiling);
    ~SparseProductJit();

    // m rows of x (d_model each) quantized and laid out for the kernels.
    void prepare(const float* x, int64_t m, SparseActivations& out) const;
    // out[i * m + r] = slots[i]'s vector (in `vectors`, the cache's buffer of one part) . row r of
    // the prepared x, for i < count and r < m.
    void products(const uint8_t* vectors, const int32_t* slots, int64_t count, const SparseActivations& x,
                  int64_t m, float* out) const;

    // y[r][k] += sum over i < count of a[r * count + i] * the down vector of slots[i] at k, for k in
    // the 32-row blocks [b0, b1) (clipped to d_model), r < m: down_accumulate's contract.
    void down(const uint8_t* vectors, const int32_t* slots, int64_t count, const float* a, int64_t m, int64_t b0,
              int64_t b1, float* y) const;

    // The kernels' names, the products' per row count, then the down pass's
    // ("q4g32_asym_sparse_i8_avx2_v2pf0, ..._m2, ..., q4g32_asym_sparse_down_avx2_b2pf1, ...").
    std::string describe() const;

    // Replaces the kernel of one pass and row count by one generated with `tiling`.
    void use_tiling(jit::SparsePass pass, int rows, jit::SparseProductTiling tiling);

private:

    jit::SparseProductSpec spec_;  // pass, rows and tiling vary by kernel
    std::unique_ptr<jit::JitGenerator> products_[4];  // [rows - 1]
    std::unique_ptr<jit::JitGenerator> down_[2];      // [rows - 1]; null where the registers do not fit
};

}  // namespace qjit
