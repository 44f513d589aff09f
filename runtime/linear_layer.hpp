// A quantized linear layer as the C API hands it out: the packed weights, their metadata, the
// backend that runs its plan of passes (runtime/layer_backend.hpp) and a description of both.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "runtime/context.hpp"
#include "runtime/cuda/cuda_layer.hpp"
#include "runtime/cpu/jit_executor.hpp"
#include "runtime/layer_backend.hpp"
#include "runtime/layer_passes.hpp"
#include "runtime/low_rank_pass.hpp"
#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/cpu/cpu_tiling_choice.hpp"

struct qjit_linear {
    qjit_context* context = nullptr;
    qjit::QuantParams params;
    qjit::PackedCodes codes;
    std::unique_ptr<qjit::LayerBackend> backend;  // runs the forward's passes: the x86 JIT or the portable path
    const qjit::JitExecutor* jit = nullptr;       // the backend when it is the x86 JIT (the grouped MoE call runs its halves)
    qjit::TilingChoice tuning;               // how the kernel and tiling were chosen
    double kernel_ms = 0;                    // generating the kernels' machine code
    std::unique_ptr<qjit::LowRankPass> low_rank;  // null: no compensator
    std::unique_ptr<qjit::cuda::CudaLayer> cuda;   // in a context with a CUDA device: the uploaded weights
    std::string description;
};

namespace qjit {

// Validates a matrix, picks its kernel and packs the codes for it. The backends it would run on
// (the CPU's, and CUDA in a context with a device) must run its format, or QJIT_ERROR_UNSUPPORTED
// names what they lack. A compensator (rank > 0) adds its
// pass after the products; the matrix's format then names it (params.low_rank is set here).
// `activations` overrides the context's activation path.
std::unique_ptr<qjit_linear> make_linear(qjit_context* context, QuantizedMatrix matrix,
                                         LowRankFactors compensator = {},
                                         std::optional<qjit_activations> activations = std::nullopt);
// The same for codes packed already (a loaded file) with their validated params; they are
// repacked when the kernel picked here wants another panel width. Both overloads log one line
// when the context is verbose.
std::unique_ptr<qjit_linear> make_linear(qjit_context* context, QuantParams params, PackedCodes codes,
                                         LowRankFactors compensator = {});

// What every make_linear shares, for the other ways to make a layer (runtime/gptq_layer.hpp):
// the panel width the kernel of `choice` streams, and the layer around params and codes packed
// at that width (kernels emitted, passes planned, logged from `start` when verbose).
int layer_panel_columns(const TilingChoice& choice);
std::unique_ptr<qjit_linear> assemble_linear(qjit_context* context, QuantParams params, PackedCodes codes,
                                             TilingChoice choice, std::chrono::steady_clock::time_point start,
                                             LowRankFactors compensator = {});

// y (m x N) = x (m x K, original row order) * W: the layer's backend runs its passes.
void linear_forward(const qjit_linear& layer, const float* x, int64_t m, float* y);

// The logical matrix back from the packed layer (the oracle's input), without its compensator.
QuantizedMatrix unpack_linear(const qjit_linear& layer);
// The layer's compensator as stored (rank 0: none).
LowRankFactors unpack_low_rank(const qjit_linear& layer);

// Bytes a forward streams: packed codes, scales and (asymmetric only) zero points, and the
// compensator's.
int64_t weight_bytes(const qjit_linear& layer);

// Flushes everything a forward of the layer reads from every cache (cold timing).
void evict_layer_from_caches(const qjit_linear& layer);

}  // namespace qjit
