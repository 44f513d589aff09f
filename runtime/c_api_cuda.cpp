// The C API's CUDA entry points: device queries and the layer's CUDA forward, timing and tuning.
#include <algorithm>
#include <cstring>

#include "qjit/qjit.h"
#include "base/error.hpp"
#include "runtime/cuda/cuda_driver.hpp"
#include "runtime/cuda/cuda_layer.hpp"
#include "runtime/forward_arguments.hpp"
#include "runtime/linear_layer.hpp"

using namespace qjit;

namespace {

const cuda::CudaLayer& cuda_side(const qjit_linear* layer) {
    require(layer != nullptr, "layer is NULL");
    return static_cast<const cuda::CudaLayer&>(layer_on(*layer, QJIT_DEVICE_CUDA));
}

}  // namespace

extern "C" {

qjit_status qjit_cuda_device_count(int* count) {
    return guarded([&] {
        require(count != nullptr, "count is NULL");
        *count = 0;
        const int found = cuda::Driver::get().device_count();
        if (found == 0) fail(QJIT_ERROR_NO_DEVICE, "no CUDA device: the driver sees none");
        *count = found;
    });
}

qjit_status qjit_cuda_get_device_info(int ordinal, qjit_cuda_device_info* info) {
    return guarded([&] {
        require(info != nullptr, "info is NULL");
        cuda::Driver& driver = cuda::Driver::get();
        const int count = driver.device_count();
        if (ordinal < 0 || ordinal >= count)
            fail(QJIT_ERROR_NO_DEVICE, "no CUDA device ", ordinal, ": the driver sees ", count);
        const GpuProperties p = driver.properties(ordinal);
        *info = {};
        std::strncpy(info->name, p.name.c_str(), sizeof info->name - 1);
        info->ordinal = p.ordinal;
        info->compute_major = p.compute_major;
        info->compute_minor = p.compute_minor;
        info->sm_count = p.sm_count;
        info->shared_memory_per_sm = p.shared_memory_per_sm;
        info->shared_memory_per_block = p.shared_memory_per_block_optin;
        info->l2_bytes = p.l2_bytes;
        info->global_memory_bytes = p.global_memory_bytes;
        info->memory_bus_bits = p.memory_bus_bits;
        info->memory_clock_khz = p.memory_clock_khz;
        info->peak_bandwidth_gbps = p.peak_bandwidth_gbps();
        info->driver_version = p.driver_version;
    });
}

qjit_status qjit_linear_forward_cuda(qjit_linear* layer, const void* x, void* y, int64_t m, qjit_dtype dtype,
                                     void* stream) {
    return qjit_linear_forward_on(layer, QJIT_DEVICE_CUDA, x, y, m, dtype, stream);
}

qjit_status qjit_linear_benchmark_cuda(qjit_linear* layer, int64_t m, qjit_dtype dtype, int repeats,
                                       double* median_us) {
    return guarded([&] {
        const cuda::CudaLayer& cuda = cuda_side(layer);
        require(median_us != nullptr, "median_us is NULL");
        require_device_rows(m);
        require(repeats >= 1 && repeats <= 100000, "repeats is ", repeats, "; expected 1 .. 100000");
        *median_us = cuda.time_forward_us(m, cuda::activation_type(dtype), repeats);
    });
}

qjit_status qjit_linear_get_tuning_cuda(qjit_linear* layer, int64_t m, qjit_dtype dtype, qjit_linear_tuning* tuning) {
    return guarded([&] {
        const cuda::CudaLayer& cuda = cuda_side(layer);
        require(tuning != nullptr, "tuning is NULL");
        require_device_rows(m);
        const cuda::CudaTilingChoice& c = cuda.tiling_for(cuda::activation_type(dtype), m);
        tuning->source = c.source;
        tuning->kernel_key = c.kernel_key.c_str();
        tuning->tiling = c.tiling.c_str();
        tuning->tuning_ms = c.tuning_ms;
        tuning->kernel_ms = c.compile_ms;
        tuning->measured_us = c.measured_us;
        tuning->candidates_timed = c.timed;
        tuning->candidates_ranked = c.ranked;
        tuning->warning = c.warning.c_str();
    });
}

}  // extern "C"
