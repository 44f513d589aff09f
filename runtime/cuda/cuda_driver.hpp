// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1") so that libqjit loads and
// runs on machines without a GPU or driver. Only the handful of entry points qjit uses are
// declared here (by their versioned ABI names), so building needs no CUDA headers either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tuner/gpu_properties.hpp"

namespace qjit::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = uint64_t;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

// The loaded driver. Every call checks its CUresult and throws qjit::Error: QJIT_ERROR_NO_DEVICE
// when the library, the driver or a device is missing, QJIT_ERROR_OUT_OF_MEMORY for allocation
// failures, QJIT_ERROR_INTERNAL otherwise, naming the call and the driver's error string.
class Driver {
public:
    // The process-wide driver, loaded and cuInit'ed on first use; throws QJIT_ERROR_NO_DEVICE
    // with the reason ("libcuda.so.1 not found: ...", "cuInit failed: ...") when unusable. The
    // failure is remembered: later calls throw the same message without retrying.
    static Driver& get();

    int device_count();
    GpuProperties properties(int ordinal);

    // Makes the device's primary context current on the calling thread (retained once per device
    // for the life of the process).
    void make_current(int ordinal);

    CUdeviceptr allocate(size_t bytes);  // on the current context; 0 bytes gives 0
    void free(CUdeviceptr pointer) noexcept;
    void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes);
    void copy_to_host(void* dst, CUdeviceptr src, size_t bytes);
    void copy_device_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
    void memset_async(CUdeviceptr dst, uint8_t value, size_t bytes, CUstream stream);

    CUmodule load_module(const std::vector<char>& cubin);
    void unload_module(CUmodule module) noexcept;
    CUfunction function(CUmodule module, const std::string& name);
    void set_dynamic_shared_memory(CUfunction function, int bytes);  // opts in above 48 KiB
    void launch(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                unsigned shared_bytes, CUstream stream, void** arguments);

    CUevent create_event();
    void destroy_event(CUevent event) noexcept;
    void record_event(CUevent event, CUstream stream);
    float elapsed_ms(CUevent start, CUevent stop);  // waits for `stop`
    void synchronize_stream(CUstream stream);
    void synchronize_context();  // waits for all work queued on the current context

private:
    Driver();
    struct Api;
    Api* api_;  // leaked on purpose: the driver must outlive static destructors that free memory
};

// Opens the driver library at `path` and resolves every entry point Driver uses, without
// initializing the driver; throws what Driver::get() would (QJIT_ERROR_NO_DEVICE naming the
// library and what is missing). Driver::get() loads $QJIT_CUDA_DRIVER_LIBRARY, else libcuda.so.1;
// this lets tests check broken libraries without touching the process-wide driver.
void check_driver_library(const std::string& path);

// Owns one device allocation of the current context.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    DeviceBuffer(const void* host, size_t bytes);  // allocates and uploads
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    CUdeviceptr get() const { return pointer_; }
    size_t size() const { return bytes_; }

private:
    CUdeviceptr pointer_ = 0;
    size_t bytes_ = 0;
};

// A device copy of `values` (no allocation when empty).
template <typename T>
DeviceBuffer upload(const std::vector<T>& values) {
    return values.empty() ? DeviceBuffer() : DeviceBuffer(values.data(), values.size() * sizeof(T));
}

// `buffer`, reallocated to `bytes` when smaller: scratch that only grows.
CUdeviceptr grown(DeviceBuffer& buffer, size_t bytes);

// Blocks of `threads` threads that cover `count` elements.
inline unsigned blocks_for(int64_t count, unsigned threads) { return unsigned((count + threads - 1) / threads); }

}  // namespace qjit::cuda
