// A layer's CUDA side: at creation (in a context with a CUDA device) its weights are uploaded and
// the tiling for the context's activation type and tuning batch is chosen the way CPU tilings
// are (forced, this context's earlier choice, the database, a timed search within the budget,
// or the model's pick); other batch buckets and types get theirs on first use, untimed (database
// or model).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/context.hpp"
#include "runtime/cuda_executor.hpp"
#include "runtime/quantized_matrix.hpp"

namespace qjit {

struct CudaTilingChoice {
    qjit_tiling_source source = QJIT_TILING_MODEL;
    std::string kernel_key;
    std::string tiling;
    double tuning_ms = 0, compile_ms = 0, measured_us = 0;
    int timed = 0, ranked = 0;
    std::string warning;
};

struct CudaLayer {
    std::unique_ptr<CudaExecutor> executor;
    std::mutex mutex;  // guards choices
    std::map<std::pair<jit::cuda::ActivationType, int64_t>, CudaTilingChoice> choices;  // by type and bucket
};

// Uploads the matrix and tunes the context's default bucket. Throws QJIT_ERROR_UNSUPPORTED for a
// format without CUDA kernels (e.g. groups of 16 rows).
std::unique_ptr<CudaLayer> make_cuda_layer(qjit_context& context, const QuantizedMatrix& matrix);

// The choice serving (activations, bucket of m rows), made and installed now if missing.
const CudaTilingChoice& cuda_tiling_for(qjit_context& context, CudaLayer& layer, jit::cuda::ActivationType activations,
                                        int64_t m);

}  // namespace qjit
