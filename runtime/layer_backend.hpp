// The contract between a layer and a backend. Each backend answers "do you run this format" in
// one place (unsupported_reason), and a CPU backend runs the layer's plan of passes
// (runtime/layer_passes.hpp) through one entry (LayerBackend::run), fusing what it can: the
// portable path (runtime/cpu/portable_kernel.hpp) runs the passes one after another, the x86 JIT
// (runtime/cpu/jit_executor.hpp) fuses the gather, products and outliers into one dispatch. A new
// pass is a case in each backend's run; a new format feature is a line in each backend's answer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/weight_format.hpp"
#include "runtime/layer_passes.hpp"

struct qjit_linear;

namespace qjit {

enum class BackendKind {
    Portable,  // plain C++ on the CPU
    X86Jit,    // generated x86 kernels
    Cuda,      // generated CUDA kernels (runtime/cuda/cuda_layer.hpp), beside a CPU backend
};

// "the portable path", "the x86 JIT", "CUDA".
const char* backend_name(BackendKind kind);

// Why `kind` cannot run `format` ("" when it can): the portable path's answer
// (PortableBackend::unsupported_reason) or the generator's (jit/x86/cpu_kernel.hpp,
// jit/cuda/cuda_tiling.hpp), which the generator's check_spec applies too.
std::string unsupported_reason(BackendKind kind, const WeightFormat& format);

// Throws QJIT_ERROR_UNSUPPORTED "a <format name> layer does not run on <backend>: <why><detail>"
// when `kind` cannot run `format`.
void require_supported(BackendKind kind, const WeightFormat& format, const std::string& detail = "");

// A CPU backend of one layer, made for its plan.
class LayerBackend {
public:
    explicit LayerBackend(std::vector<Pass> passes) : passes_(std::move(passes)) {}
    virtual ~LayerBackend() = default;
    LayerBackend(const LayerBackend&) = delete;
    LayerBackend& operator=(const LayerBackend&) = delete;

    virtual BackendKind kind() const = 0;
    // The plan this backend runs.
    const std::vector<Pass>& passes() const { return passes_; }

    // y (m x N) = x (m x K, the original row order) * W: every pass of the plan on `layer`'s data.
    virtual void run(const qjit_linear& layer, const float* x, int64_t m, float* y) const = 0;

    // The describe string's first word (the kernel's name) and the backend's own fields
    // ("isa=... activations=..."), for `layer`.
    virtual std::string kernel_name(const qjit_linear& layer) const = 0;
    virtual std::string kernel_fields(const qjit_linear& layer) const = 0;
    // Bytes of scales, zero points and outliers a forward streams beside the codes, as this
    // backend holds them; flushing them from every cache (cold timing).
    virtual int64_t metadata_bytes(const qjit_linear& layer) const = 0;
    virtual void evict_metadata(const qjit_linear& layer) const = 0;

private:
    std::vector<Pass> passes_;
};

}  // namespace qjit
