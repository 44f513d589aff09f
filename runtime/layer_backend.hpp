// The contract between a layer and the backends that run it. There is one backend per device
// kind: the portable path and the x86 JIT on the CPU (runtime/cpu/), generated CUDA kernels on a
// GPU (runtime/cuda/). Each answers "do you run this format" in one place (unsupported_reason)
// and prepares, from a quantized matrix and its plan of passes (runtime/layer_passes.hpp), a
// BackendLayer that owns its weights in its own layout and runs the plan, fusing what it can.
// A new pass is a case in each backend's run; a new format feature is a line in each answer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "format/weight_format.hpp"
#include "qjit/qjit.h"
#include "runtime/layer_passes.hpp"

namespace qjit {

enum class BackendKind {
    Portable,  // plain C++ on the CPU
    X86Jit,    // generated x86 kernels
    Cuda,      // generated CUDA kernels
};

enum class Device { Cpu, Cuda };

Device device_of(BackendKind kind);
// "the portable path", "the x86 JIT", "CUDA".
const char* backend_name(BackendKind kind);

// Why `kind` cannot run `format` ("" when it can): the portable path's answer
// (PortableLayer::unsupported_reason) or the generator's (jit/x86/cpu_kernel.hpp,
// jit/cuda/cuda_tiling.hpp), which the generator's check_spec applies too.
std::string unsupported_reason(BackendKind kind, const WeightFormat& format);

// Throws QJIT_ERROR_UNSUPPORTED "a <format name> layer does not run on <backend>: <why><detail>"
// when `kind` cannot run `format`.
void require_supported(BackendKind kind, const WeightFormat& format, const std::string& detail = "");

// Rows of a row-major matrix in some device's memory: a layer's activations or its outputs.
template <typename Pointer>
struct TensorViewOf {
    Pointer data = nullptr;
    int64_t rows = 0;
    qjit_dtype dtype = QJIT_DTYPE_F32;
    Device device = Device::Cpu;
};
using ConstTensorView = TensorViewOf<const void*>;
using TensorView = TensorViewOf<void*>;

class BackendLayer;

// One layer of a grouped call (the experts of a MoE layer): its rows of the shared activations
// and where its count x N outputs go.
struct GroupedRows {
    int index = 0;  // the caller's, for messages
    const BackendLayer* layer = nullptr;
    const int32_t* rows = nullptr;  // row of x of each of its rows
    int64_t count = 0;
    float* out = nullptr;
};

// `member`'s rows of x (rows x k) one after another in dst (count x k).
void gather_grouped_rows(const GroupedRows& member, const float* x, int64_t k, float* dst);

// A layer as one backend prepared it: its weights in the backend's layout, and the plan it runs.
class BackendLayer {
public:
    BackendLayer(BackendKind kind, std::vector<Pass> passes) : kind_(kind), passes_(std::move(passes)) {}
    virtual ~BackendLayer() = default;
    BackendLayer(const BackendLayer&) = delete;
    BackendLayer& operator=(const BackendLayer&) = delete;

    BackendKind kind() const { return kind_; }
    Device device() const { return device_of(kind_); }
    // The plan this layer runs.
    const std::vector<Pass>& passes() const { return passes_; }

    // y (m x N) = x (m x K, the original row order) * W and every later pass of the plan, m =
    // x.rows = y.rows, both in this layer's device memory at a dtype it takes. `stream`: the queue
    // a device enqueues on (a CUstream for CUDA); the CPU ignores it.
    virtual void run(const ConstTensorView& x, const TensorView& y, void* stream = nullptr) const = 0;

    // Each layer of `group` (all of this layer's kind and K; N may differ) on its rows of x (rows x K,
    // fp32 in host memory). Here: one after another on gathered rows; a backend that can runs
    // them in one dispatch.
    virtual void run_grouped(std::span<const GroupedRows> group, const float* x, int64_t k) const;

    // The describe string's first word (the kernel's name) and the backend's own fields
    // ("isa=... activations=...").
    virtual std::string kernel_name() const = 0;
    virtual std::string kernel_fields() const = 0;
    // Bytes a forward streams (codes, metadata, compensator), and flushing them from every cache
    // (cold timing; a no-op where the host cannot reach them).
    virtual int64_t weight_bytes() const = 0;
    virtual void evict() const = 0;

private:
    BackendKind kind_;
    std::vector<Pass> passes_;
};

}  // namespace qjit
