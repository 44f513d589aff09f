#include "runtime/layer_backend.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "base/scratch.hpp"
#include "jit/cuda/cuda_tiling.hpp"
#include "jit/x86/cpu_kernel.hpp"
#include "runtime/cpu/portable_kernel.hpp"

namespace qjit {

Device device_of(BackendKind kind) { return kind == BackendKind::Cuda ? Device::Cuda : Device::Cpu; }

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
        case BackendKind::Portable: return PortableLayer::unsupported_reason(format);
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

void gather_grouped_rows(const GroupedRows& member, const float* x, int64_t k, float* dst) {
    for (int64_t i = 0; i < member.count; ++i)
        std::copy(x + member.rows[i] * k, x + (member.rows[i] + 1) * k, dst + i * k);
}

void BackendLayer::run_grouped(std::span<const GroupedRows> group, const float* x, int64_t k) const {
    thread_local std::vector<float> gathered;
    for (const GroupedRows& member : group) {
        float* rows = grow(gathered, size_t(member.count * k));
        gather_grouped_rows(member, x, k, rows);
        member.layer->run({rows, member.count}, {member.out, member.count});
    }
}

}  // namespace qjit
