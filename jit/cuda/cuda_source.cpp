#include "jit/cuda/cuda_source.hpp"

#include "jit/cuda/cuda_source_writer.hpp"

namespace qjit::jit::cuda {

GeneratedKernel generate_kernel(const CudaKernelSpec& spec) {
    check_spec(spec);
    CudaKernelSpec source_spec = spec;
    source_spec.tiling.split_k = 1;  // a launch-time choice: one source for every split
    GeneratedKernel kernel;
    kernel.name = kernel_name(spec);
    CudaSourceWriter writer(source_spec);
    if (needs_mixed_kernel(spec.format)) {
        kernel.entry = "qjit_mixed_gemv";
        kernel.source = writer.mixed_gemv();
    } else if (spec.tiling.kind == KernelKind::Gemv) {
        kernel.entry = "qjit_gemv";
        kernel.source = writer.gemv();
    } else if (spec.tiling.kind == KernelKind::Mma) {
        kernel.entry = "qjit_mma";
        kernel.source = writer.mma();
    } else {
        kernel.entry = "qjit_gemm";
        kernel.source = writer.gemm();
    }
    kernel.threads = unsigned(spec.tiling.warps * 32);
    kernel.shared_bytes = shared_memory_bytes(spec);
    return kernel;
}

}  // namespace qjit::jit::cuda
