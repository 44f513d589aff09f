// A layer's CUDA side: at creation (in a context with a CUDA device) its weights are uploaded and
// the tiling for the context's activation type and tuning batch is chosen by the tuner's one
// sequence (tuner/tuning_sequence.hpp: forced, this context's earlier choice, the database, the
// model's pick or a timed search within the budget); other batch buckets and types get theirs on first use, untimed (database
// or model).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/context.hpp"
#include "tuner/tuning_sequence.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/cuda_low_rank.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit::cuda {

struct CudaTilingChoice : TuningOutcome {
    double compile_ms = 0;  // NVRTC for the chosen tiling (0 on a cubin cache hit)
};

struct CudaLayer {
    std::unique_ptr<CudaExecutor> executor;
    std::unique_ptr<CudaLowRank> low_rank;  // null: no compensator
    std::mutex mutex;  // guards choices
    std::map<std::pair<jit::cuda::ActivationType, int64_t>, CudaTilingChoice> choices;  // by type and bucket
};

// Uploads the matrix and tunes the context's default bucket. `matrix` gives the layer's matrix on
// every call, for as long as the layer lives (runtime/cuda/cuda_executor.hpp). Which formats CUDA
// runs is jit::cuda::unsupported_reason, which a layer asks first (runtime/layer_backend.hpp);
// this throws QJIT_ERROR_UNSUPPORTED for those it refuses all the same.
// A compensator's pass (`low_rank`, null for none, outliving the layer) runs after the product.
std::unique_ptr<CudaLayer> make_cuda_layer(qjit_context& context, CudaExecutor::MatrixSource matrix,
                                           const LowRankPass* low_rank = nullptr);

// The choice serving (activations, bucket of m rows), made and installed now if missing.
const CudaTilingChoice& cuda_tiling_for(qjit_context& context, CudaLayer& layer, jit::cuda::ActivationType activations,
                                        int64_t m);

// y = x W (+ (x U) V with a compensator) for m rows, enqueued on `stream`; the tilings of m's
// bucket are chosen first where missing.
void forward(qjit_context& context, CudaLayer& layer, CUdeviceptr x, CUdeviceptr y, int64_t m,
             jit::cuda::ActivationType type, CUstream stream);
// The median time of that forward over `repeats` calls, L2 flushed before each.
double time_forward_us(qjit_context& context, CudaLayer& layer, int64_t m, jit::cuda::ActivationType type,
                       int repeats);

}  // namespace qjit::cuda
