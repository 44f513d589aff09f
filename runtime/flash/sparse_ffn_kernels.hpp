// The SIMD kernels of the sparse FFN's fast path, each compiled for AVX2 with FMA and for baseline
// x86-64, picked by the cache's ISA cap (its context's) and the variant in use: GCC vector types of 8 lanes, one lane per
// row of a vector (8 rows of a 32-row block), so the same arithmetic runs on every ISA (two SSE
// halves on the baseline). (Compiled for AVX-512 with 16 lanes they ran no faster than AVX2's:
// decoding codes to fp32, not the vector width, bounds them; bench_sparse_ffn measures them.) Codes are unpacked with shifts and masks to fp32 and multiplied in fp32;
// each group's sums get their scale and zero point once, as qjit's CPU kernels do.
#pragma once

#include <cstdint>

#include "runtime/flash/neuron_cache_data.hpp"

namespace qjit {

// The kernel variants, and which the entry points below take: the fastest the CPU runs (Fastest), or
// one named (for tests and benchmarks, so that every variant the CPU runs meets the oracle). Jit:
// the gate and up products of quantized vectors from generated kernels
// (runtime/flash/sparse_product_jit.hpp), where one serves the format, and the rest from the
// fastest hand-written table; Fastest is Jit wherever the CPU runs it.
enum class SparseFfnKernels { Fastest, Jit, Avx2, Baseline };
bool sparse_ffn_kernels_supported(SparseFfnKernels which);
// The fastest variant whose products take x in fp32 (no int8 rounding of the activations): what
// results compared with an exact oracle run on.
SparseFfnKernels exact_sparse_ffn_kernels();
// Throws an invalid-argument Error for a variant the CPU does not run.
void use_sparse_ffn_kernels(SparseFfnKernels which);

class SparseProductJit;
// The generated products of d's vectors when the variant in use takes them (Jit, Fastest) and
// one serves d's format; null otherwise.
const SparseProductJit* sparse_product_jit(const NeuronCache::Data& d);

// Asks for bytes [p, p + n) ahead of their use: the next of a token's scattered vectors, which the
// hardware prefetchers cannot guess.
inline void prefetch_bytes(const uint8_t* p, int64_t n) {
    for (int64_t at = 0; at < n; at += 64) __builtin_prefetch(p + at);
}

// The products of m rows of x with a slot's quantized gate or up vector (`part`): out[r].
// x_padded: [m][blocks * 32], zero past d_model; x_sums: [m][groups], the sum of each group's
// activations.
void column_products(const NeuronCache::Data& d, NeuronPart part, int64_t slot, const float* x_padded,
                     const float* x_sums, int64_t m, float* out);

// y[r][k] += sum over i < count of a[r * count + i] * down_{slots[i]}[k] for k in the 32-row
// blocks [b0, b1) (clipped to d_model). Quantized caches. Every slot listed is streamed: leave out
// those whose activations are all 0.
void down_accumulate(const NeuronCache::Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m,
                     int64_t b0, int64_t b1, float* y);

// F16 caches: out[r] = x[r] . row over n values (m rows of x, n apart), in the kernels of `isa`'s
// cap (the cache's) ...
void f16_products(qjit_isa isa, const uint16_t* row, const float* x, int64_t m, int64_t n, float* out);
// ... and the down accumulation over k in [k0, k1), as down_accumulate.
void f16_down_accumulate(const NeuronCache::Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m,
                         int64_t k0, int64_t k1, float* y);

// The functions above as one instruction set compiles them (sparse_ffn_kernels_<isa>.cpp, each
// built with its flags; runtime/flash/sparse_ffn_simd.hpp holds their bodies).
struct SparseFfnKernelTable {
    decltype(&qjit::column_products) column_products;
    decltype(&qjit::down_accumulate) down_accumulate;
    void (*f16_products)(const uint16_t* row, const float* x, int64_t m, int64_t n, float* out);
    decltype(&qjit::f16_down_accumulate) f16_down_accumulate;
};
const SparseFfnKernelTable& sparse_ffn_kernels_avx2();      // AVX2 with FMA
const SparseFfnKernelTable& sparse_ffn_kernels_baseline();  // baseline x86-64

}  // namespace qjit
