#include "runtime/tp_mlp_cuda.hpp"

#include "base/error.hpp"
#include "runtime/context.hpp"
#include "runtime/cuda/cuda_driver.hpp"
#include "runtime/cuda/cuda_layer.hpp"
#include "runtime/cuda/support_module.hpp"
#include "runtime/forward_arguments.hpp"
#include "runtime/tp_mlp.hpp"

namespace qjit {

// The device forward's own state, made on its first call: the support kernels and the
// intermediate activations (the up projection, activated in place, and the gate's).
struct TpMlpDeviceScratch {
    TpMlpDeviceScratch(const GpuProperties& device, const std::string& cubin_cache_dir)
        : ordinal(device.ordinal), support(device, cubin_cache_dir) {}
    ~TpMlpDeviceScratch() {
        try {
            cuda::Driver::get().make_current(ordinal);  // the buffers are freed on their device
        } catch (const Error&) {
        }
    }
    int ordinal;
    cuda::SupportModule support;
    cuda::DeviceBuffer hidden, gate;
};

namespace {

void check_arguments(const qjit_tp_mlp& mlp, const qjit_device_communicator& comm, const void* x, int64_t m,
                     qjit_dtype dtype, const void* y) {
    require(comm.rank == mlp.rank && comm.world_size == mlp.world_size, "the communicator is rank ", comm.rank, " of ",
            comm.world_size, "; this MLP's shards are rank ", mlp.rank, " of ", mlp.world_size);
    require(mlp.world_size == 1 || comm.all_reduce_sum, "the communicator lacks all_reduce_sum");
    if (needs_all_gather(mlp))
        fail(QJIT_ERROR_UNSUPPORTED, "the naive algorithm's all-gather and permutation have no device path: make the "
             "shards with QJIT_TP_AWARE, whose forward needs only the all-reduce");
    cuda::activation_type(dtype);  // F16 or BF16
    require_device_rows(m);
    require(x != nullptr, "x is NULL");
    require(y != nullptr, "y is NULL");
}

}  // namespace

void tp_mlp_forward_cuda(qjit_tp_mlp& mlp, const qjit_device_communicator& comm, const void* x, int64_t m,
                         qjit_dtype dtype, void* y, void* stream_pointer) {
    check_arguments(mlp, comm, x, m, dtype, y);
    const BackendLayer& up = layer_on(*mlp.up, QJIT_DEVICE_CUDA);
    const BackendLayer& down = layer_on(*mlp.down, QJIT_DEVICE_CUDA);
    const BackendLayer* gate = mlp.gate ? &layer_on(*mlp.gate, QJIT_DEVICE_CUDA) : nullptr;
    const GpuProperties& device = *mlp.context->gpu;

    std::lock_guard lock(mlp.device_mutex);
    cuda::Driver& driver = cuda::Driver::get();
    driver.make_current(device.ordinal);
    if (!mlp.device_scratch)
        mlp.device_scratch = std::make_shared<TpMlpDeviceScratch>(device, mlp.context->cubin_cache_dir);
    TpMlpDeviceScratch& scratch = *mlp.device_scratch;
    const jit::cuda::ActivationType type = cuda::activation_type(dtype);
    const auto stream = static_cast<cuda::CUstream>(stream_pointer);
    long long count = m * mlp.shard_n1();
    cuda::CUdeviceptr hidden = cuda::grown(scratch.hidden, size_t(count) * 2);

    up.run({x, m, dtype, Device::Cuda}, {reinterpret_cast<void*>(hidden), m, dtype, Device::Cuda}, stream);
    const unsigned blocks = cuda::blocks_for(count, cuda::kSupportThreads);
    if (gate) {
        cuda::CUdeviceptr gated = cuda::grown(scratch.gate, size_t(count) * 2);
        gate->run({x, m, dtype, Device::Cuda}, {reinterpret_cast<void*>(gated), m, dtype, Device::Cuda}, stream);
        void* args[] = {&hidden, &gated, &count};
        driver.launch(scratch.support.typed("qjit_swiglu", type), blocks, 1, 1, cuda::kSupportThreads, 0, stream, args);
    } else {
        void* args[] = {&hidden, &count};
        driver.launch(scratch.support.typed("qjit_gelu", type), blocks, 1, 1, cuda::kSupportThreads, 0, stream, args);
    }
    down.run({reinterpret_cast<const void*>(hidden), m, dtype, Device::Cuda}, {y, m, dtype, Device::Cuda}, stream);
    if (mlp.world_size == 1) return;
    const int code = comm.all_reduce_sum(comm.user, y, m * mlp.n2, dtype, stream_pointer);
    if (code == 0) return;
    // All-ones bits are a NaN in fp16 and bf16 alike.
    driver.memset_async(reinterpret_cast<cuda::CUdeviceptr>(y), 0xff, size_t(m * mlp.n2) * 2, stream);
    const char* text = comm.error_string ? comm.error_string(comm.user, code) : nullptr;
    fail(QJIT_ERROR_COMMUNICATION, "the communicator's all_reduce_sum failed on rank ", comm.rank, " of ",
         comm.world_size, ": error ", code, text ? concat(" (", text, ")") : std::string());
}

}  // namespace qjit
