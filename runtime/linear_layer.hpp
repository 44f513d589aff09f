// A quantized linear layer as the C API hands it out: its format and quantized metadata, how its
// CPU kernel was chosen, and one prepared layer per device it runs on (runtime/layer_backend.hpp),
// each owning its weights in its backend's layout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "format/packed_codes.hpp"
#include "format/panel_metadata.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/context.hpp"
#include "runtime/cpu/cpu_layer.hpp"
#include "runtime/cpu/cpu_tiling_choice.hpp"
#include "runtime/layer_backend.hpp"
#include "runtime/low_rank_pass.hpp"

struct qjit_linear {
    qjit_context* context = nullptr;
    qjit::QuantParams params;                // the format, its scales and zero points as quantized; the
                                             // last three left out where only the kernels hold them
    bool metadata_in_kernels = false;        // params' scales, zeros and offsets live in cpu's panel
                                             // layout only (layer_params reads them back)
    qjit::TilingChoice tuning;               // how the CPU kernel and tiling were chosen
    double kernel_ms = 0;                    // generating the CPU kernels' machine code
    std::unique_ptr<qjit::CpuLayer> cpu;     // the x86 JIT's or the portable path's: qjit_linear_forward
    std::unique_ptr<qjit::BackendLayer> gpu; // in a context with a GPU: the device's copy
    std::string description;
};

namespace qjit {

// Validates a matrix, picks its kernel and packs the codes for it. The backends it would run on
// (the CPU's, and CUDA in a context with a device) must run its format, or QJIT_ERROR_UNSUPPORTED
// names what they lack. A compensator (rank > 0) adds its
// pass after the products; the matrix's format then names it (params.low_rank is set here).
// `activations` overrides the context's activation path.
// `devices`: CpuOnly leaves out the context's GPU (a compensator's inner layers: the GPU's own
// compensator pass makes its inner layers itself).
enum class LayerDevices { CpuAndContextGpu, CpuOnly };
std::unique_ptr<qjit_linear> make_linear(qjit_context* context, QuantizedMatrix matrix,
                                         LowRankFactors compensator = {},
                                         std::optional<qjit_activations> activations = std::nullopt,
                                         LayerDevices devices = LayerDevices::CpuAndContextGpu);
// The same for codes packed already (a loaded file) with their validated params; they are
// repacked when the kernel picked here wants another panel width. Both overloads log one line
// when the context is verbose.
std::unique_ptr<qjit_linear> make_linear(qjit_context* context, QuantParams params, PackedCodes codes,
                                         LowRankFactors compensator = {},
                                         std::optional<qjit_activations> activations = std::nullopt);

// What every make_linear shares, for the other ways to make a layer (runtime/gptq_layer.hpp):
// the panel width the kernel of `choice` streams, and the layer around params and codes packed
// at that width (kernels emitted, passes planned, logged from `start` when verbose).
int layer_panel_columns(const TilingChoice& choice);
// In a context with a GPU the GPU layer is prepared from the quantized matrix these codes hold.
std::unique_ptr<qjit_linear> assemble_linear(qjit_context* context, QuantParams params, PackedCodes codes,
                                             TilingChoice choice, std::chrono::steady_clock::time_point start,
                                             LowRankFactors compensator = {},
                                             LayerDevices devices = LayerDevices::CpuAndContextGpu);

// An x86 JIT layer from parts prepared already (a pack file's: runtime/layer_pack.hpp): `params` the
// format alone, codes and metadata in the panel layout of choice.spec's kernels, which hold the
// layer's metadata (metadata_in_kernels). In a context with a GPU the GPU layer is prepared from
// what they hold.
std::unique_ptr<qjit_linear> assemble_prepared_linear(qjit_context* context, QuantParams params, PackedCodes codes,
                                                      PanelMetadata metadata, TilingChoice choice,
                                                      std::chrono::steady_clock::time_point start);

// The layer's params whole: its scales, zero points and offsets read back from the kernels' panel
// layout where the handle does not keep them (an x86 JIT layer whose metadata the layout holds
// exactly: a second copy would cost 1.5 bits a weight of a Q4_0 model).
qjit::QuantParams layer_params(const qjit_linear& layer);

// y (m x N) = x (m x K, original row order) * W: the layer's CPU backend runs its passes.
void linear_forward(const qjit_linear& layer, const float* x, int64_t m, float* y);

// ys[i] (m x N_i) = x * W_i for layers of one K that read the same inputs (checked by the caller):
// the x86 JIT's layers without outliers in one grouped dispatch, the others one by one; each output
// is what linear_forward computes, bit for bit.
void linear_forward_shared_input(std::span<const qjit_linear* const> layers, const float* x, int64_t m,
                                 float* const* ys);

// The layer's copy on `device` (a qjit_device read as an integer): QJIT_ERROR_INVALID_ARGUMENT for
// no such device, QJIT_ERROR_NO_DEVICE when the layer has no copy there.
const BackendLayer& layer_on(const qjit_linear& layer, int device);

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
