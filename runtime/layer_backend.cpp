#include "runtime/layer_backend.hpp"

#include "base/error.hpp"
#include "jit/cuda/cuda_tiling.hpp"
#include "jit/x86/cpu_kernel.hpp"
#include "runtime/cpu/portable_kernel.hpp"

namespace qjit {

const char* backend_name(BackendKind kind) {
    switch (kind) {
        case BackendKind::Portable: return "the portable path";
        case BackendKind::X86Jit: return "the x86 JIT";
        case BackendKind::Cuda: return "CUDA";
    }
    return "an unknown backend";
}

std::string unsupported_reason(BackendKind kind, const WeightFormat& format) {
    switch (kind) {
        case BackendKind::Portable: return PortableBackend::unsupported_reason(format);
        case BackendKind::X86Jit: return jit::unsupported_reason(format);
        case BackendKind::Cuda: return jit::cuda::unsupported_reason(format);
    }
    return "unknown backend";
}

void require_supported(BackendKind kind, const WeightFormat& format, const std::string& detail) {
    const std::string why = unsupported_reason(kind, format);
    if (!why.empty())
        fail(QJIT_ERROR_UNSUPPORTED, "a ", format.name(), " layer does not run on ", backend_name(kind), ": ", why, detail);
}

}  // namespace qjit
