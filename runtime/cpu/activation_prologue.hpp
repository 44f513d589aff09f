// Prepares activations for the generated kernels: gathers act-order rows, pads K to whole 32-row
// blocks, and per row and group either quantizes to int8 (step = max|x| / qmax over the group, or
// over its super-block for kernels with integer sub-block scales; round to nearest) or keeps fp32,
// recording the group sums the kernels' zero-point correction needs.
#pragma once

#include <cstdint>

#include "jit/x86/cpu_kernel.hpp"
#include "runtime/cpu/thread_pool.hpp"

namespace qjit {

struct PreparedActivations {
    const void* x;        // [m][padded_k] int8 or fp32
    const float* scale;   // [m][groups] int8 step (int8 path only)
    const float* sum;     // [m][groups]
    const float* source = nullptr;  // the rows as given, [m][k] fp32 in the original order (the outlier
                                    // term reads them)
    const float* source_transposed = nullptr;  // the same as [k][m] (runtime/cpu/outlier_add.hpp), for
                                               // several rows of a layer with outliers; null otherwise
};

// Fills per-thread buffers that only grow (so steady-state forwards do not allocate); the result
// stays valid until this thread prepares again. Rows are spread over `pool` when there are many.
// `row_order` (k entries) is the gather pass fused in, or null when the layer has none.
PreparedActivations prepare_activations(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* x,
                                        int64_t m, ThreadPool& pool);

// Where one prepared row goes, in buffers the caller owns (the grouped MoE call keeps the rows of
// every expert at once, so the per-thread buffers above do not serve it).
struct PreparedRow {
    void* x;       // [padded_k] int8 or fp32
    float* scale;  // [groups] int8 step (int8 path only)
    float* sum;    // [groups]
};

// One row of prepare_activations: `src` is one row of K activations in their original order.
void prepare_activation_row(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* src,
                            const PreparedRow& out);

}  // namespace qjit
