#include "runtime/cuda/support_module.hpp"

#include "base/error.hpp"
#include "jit/cuda/cuda_source.hpp"
#include "runtime/cuda/nvrtc_compiler.hpp"

namespace qjit::cuda {

SupportModule::SupportModule(const GpuProperties& device, const std::string& cubin_cache_dir)
    : ordinal_(device.ordinal) {
    Driver& driver = Driver::get();
    driver.make_current(ordinal_);
    const CompiledKernel compiled =
        compile_cuda_cached(jit::cuda::support_kernels_source(), "qjit_support", device.arch(), cubin_cache_dir);
    module_ = driver.load_module(compiled.cubin);
}

SupportModule::~SupportModule() {
    Driver& driver = Driver::get();
    try {
        driver.make_current(ordinal_);
    } catch (const Error&) {
    }
    driver.unload_module(module_);
}

CUfunction SupportModule::function(const char* name) const { return Driver::get().function(module_, name); }

CUfunction SupportModule::typed(const char* name, jit::cuda::ActivationType type) const {
    return function(concat(name, type == jit::cuda::ActivationType::F16 ? "_f16" : "_bf16").c_str());
}

}  // namespace qjit::cuda
