#include "runtime/cuda/cuda_driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "base/error.hpp"

namespace qjit::cuda {

namespace {

// The few constants of cuda.h that qjit needs (cuda.h itself is not included: see the header).
constexpr CUresult kSuccess = 0;
constexpr CUresult kErrorOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY
enum DeviceAttribute : int {               // CUdevice_attribute
    kMultiprocessorCount = 16,
    kMemoryClockRate = 36,  // kHz
    kGlobalMemoryBusWidth = 37,
    kL2CacheSize = 38,
    kComputeCapabilityMajor = 75,
    kComputeCapabilityMinor = 76,
    kMaxSharedMemoryPerMultiprocessor = 81,
    kMaxSharedMemoryPerBlockOptin = 97,
};
constexpr int kFuncAttributeMaxDynamicSharedSizeBytes = 8;  // CUfunction_attribute

// The driver's entry points, with the signatures cuda.h documents, under their ABI names.
struct EntryPoints {
    CUresult (*init)(unsigned flags);
    CUresult (*driver_get_version)(int* version);
    CUresult (*device_get_count)(int* count);
    CUresult (*device_get)(CUdevice* device, int ordinal);
    CUresult (*device_get_name)(char* name, int length, CUdevice device);
    CUresult (*device_get_attribute)(int* value, int attribute, CUdevice device);
    CUresult (*device_total_mem)(size_t* bytes, CUdevice device);
    CUresult (*primary_ctx_retain)(CUcontext* context, CUdevice device);
    CUresult (*ctx_set_current)(CUcontext context);
    CUresult (*mem_alloc)(CUdeviceptr* pointer, size_t bytes);
    CUresult (*mem_free)(CUdeviceptr pointer);
    CUresult (*memcpy_htod)(CUdeviceptr dst, const void* src, size_t bytes);
    CUresult (*memcpy_dtoh)(void* dst, CUdeviceptr src, size_t bytes);
    CUresult (*memcpy_dtod_async)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
    CUresult (*memset_d8_async)(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream);
    CUresult (*module_load_data)(CUmodule* module, const void* image);
    CUresult (*module_unload)(CUmodule module);
    CUresult (*module_get_function)(CUfunction* function, CUmodule module, const char* name);
    CUresult (*func_set_attribute)(CUfunction function, int attribute, int value);
    CUresult (*launch_kernel)(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                              unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                              CUstream stream, void** parameters, void** extra);
    CUresult (*event_create)(CUevent* event, unsigned flags);
    CUresult (*event_destroy)(CUevent event);
    CUresult (*event_record)(CUevent event, CUstream stream);
    CUresult (*event_synchronize)(CUevent event);
    CUresult (*event_elapsed_time)(float* milliseconds, CUevent start, CUevent stop);
    CUresult (*stream_synchronize)(CUstream stream);
    CUresult (*ctx_synchronize)();
    CUresult (*get_error_string)(CUresult error, const char** text);
    CUresult (*get_error_name)(CUresult error, const char** text);
};

std::string last_dl_error() {
    const char* text = ::dlerror();
    return text ? text : "unknown error";
}

// Looks `symbols` up in turn (newest ABI name first) and stores the first one found in `slot`.
template <typename Function>
void resolve(void* library, const std::string& path, Function*& slot, std::initializer_list<const char*> symbols) {
    for (const char* symbol : symbols)
        if (void* address = ::dlsym(library, symbol)) {
            slot = reinterpret_cast<Function*>(address);
            return;
        }
    fail(QJIT_ERROR_NO_DEVICE, "no CUDA device: ", path, " has no ", *symbols.begin(), " (", last_dl_error(),
         "); the driver is too old or not NVIDIA's");
}

EntryPoints resolve_entry_points(void* library, const std::string& path) {
    EntryPoints api{};
    resolve(library, path, api.init, {"cuInit"});
    resolve(library, path, api.driver_get_version, {"cuDriverGetVersion"});
    resolve(library, path, api.device_get_count, {"cuDeviceGetCount"});
    resolve(library, path, api.device_get, {"cuDeviceGet"});
    resolve(library, path, api.device_get_name, {"cuDeviceGetName"});
    resolve(library, path, api.device_get_attribute, {"cuDeviceGetAttribute"});
    resolve(library, path, api.device_total_mem, {"cuDeviceTotalMem_v2"});
    resolve(library, path, api.primary_ctx_retain, {"cuDevicePrimaryCtxRetain"});
    resolve(library, path, api.ctx_set_current, {"cuCtxSetCurrent"});
    resolve(library, path, api.mem_alloc, {"cuMemAlloc_v2"});
    resolve(library, path, api.mem_free, {"cuMemFree_v2"});
    resolve(library, path, api.memcpy_htod, {"cuMemcpyHtoD_v2"});
    resolve(library, path, api.memcpy_dtoh, {"cuMemcpyDtoH_v2"});
    resolve(library, path, api.memcpy_dtod_async, {"cuMemcpyDtoDAsync_v2"});
    resolve(library, path, api.memset_d8_async, {"cuMemsetD8Async"});
    resolve(library, path, api.module_load_data, {"cuModuleLoadData"});
    resolve(library, path, api.module_unload, {"cuModuleUnload"});
    resolve(library, path, api.module_get_function, {"cuModuleGetFunction"});
    resolve(library, path, api.func_set_attribute, {"cuFuncSetAttribute"});
    resolve(library, path, api.launch_kernel, {"cuLaunchKernel"});
    resolve(library, path, api.event_create, {"cuEventCreate"});
    resolve(library, path, api.event_destroy, {"cuEventDestroy_v2"});
    resolve(library, path, api.event_record, {"cuEventRecord"});
    resolve(library, path, api.event_synchronize, {"cuEventSynchronize"});
    // cuda.h 12.8+ maps cuEventElapsedTime to _v2; older drivers only have the original.
    resolve(library, path, api.event_elapsed_time, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
    resolve(library, path, api.stream_synchronize, {"cuStreamSynchronize"});
    resolve(library, path, api.ctx_synchronize, {"cuCtxSynchronize"});
    resolve(library, path, api.get_error_string, {"cuGetErrorString"});
    resolve(library, path, api.get_error_name, {"cuGetErrorName"});
    return api;
}

// The library stays loaded on success: Driver never unloads it.
std::pair<void*, EntryPoints> open_driver_library(const std::string& path) {
    void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) fail(QJIT_ERROR_NO_DEVICE, "no CUDA device: ", path, " could not be loaded (", last_dl_error(), ")");
    try {
        return {library, resolve_entry_points(library, path)};
    } catch (...) {
        ::dlclose(library);
        throw;
    }
}

std::string driver_library_path() {
    const char* path = std::getenv("QJIT_CUDA_DRIVER_LIBRARY");
    return path && *path ? path : "libcuda.so.1";
}

}  // namespace

struct Driver::Api {
    EntryPoints call{};
    int driver_version = 0;
    std::mutex mutex;                      // guards contexts
    std::map<int, CUcontext> contexts;     // retained primary contexts by ordinal

    // "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"
    std::string describe(CUresult result) const {
        const char* name = nullptr;
        const char* text = nullptr;
        if (call.get_error_name(result, &name) != kSuccess || !name) return concat("CUresult ", result);
        if (call.get_error_string(result, &text) != kSuccess || !text) return name;
        return concat(name, " (", text, ")");
    }

    void check(CUresult result, const char* function) const {
        if (result == kSuccess) return;
        fail(result == kErrorOutOfMemory ? QJIT_ERROR_OUT_OF_MEMORY : QJIT_ERROR_INTERNAL, function, " failed: ",
             describe(result));
    }

    CUdevice device(int ordinal) const {
        int count = 0;
        check(call.device_get_count(&count), "cuDeviceGetCount");
        if (ordinal < 0 || ordinal >= count)
            fail(QJIT_ERROR_NO_DEVICE, "no CUDA device: device ", ordinal, " requested, the driver sees ", count);
        CUdevice device = 0;
        check(call.device_get(&device, ordinal), "cuDeviceGet");
        return device;
    }
};

void check_driver_library(const std::string& path) {
    ::dlclose(open_driver_library(path).first);
}

Driver::Driver() : api_(nullptr) {
    auto api = std::make_unique<Api>();
    // On failure the library stays loaded: unloading a driver after a failed cuInit buys nothing.
    api->call = open_driver_library(driver_library_path()).second;
    const CUresult init = api->call.init(0);
    if (init != kSuccess) fail(QJIT_ERROR_NO_DEVICE, "no CUDA device: cuInit failed: ", api->describe(init));
    api->check(api->call.driver_get_version(&api->driver_version), "cuDriverGetVersion");
    api_ = api.release();
}

Driver& Driver::get() {
    struct Loaded {
        Driver* driver = nullptr;  // leaked on purpose, like Api
        qjit_status status = QJIT_OK;
        std::string failure;
    };
    // A magic static: thread-safe, and the failure is kept so that later calls do not retry.
    static const Loaded loaded = [] {
        Loaded result;
        try {
            result.driver = new Driver();
        } catch (const Error& e) {
            result.status = e.status();
            result.failure = e.what();
        }
        return result;
    }();
    if (!loaded.driver) throw Error(loaded.status, loaded.failure);
    return *loaded.driver;
}

int Driver::device_count() {
    int count = 0;
    api_->check(api_->call.device_get_count(&count), "cuDeviceGetCount");
    return count;
}

GpuProperties Driver::properties(int ordinal) {
    const CUdevice device = api_->device(ordinal);
    auto attribute = [&](DeviceAttribute which) {
        int value = 0;
        api_->check(api_->call.device_get_attribute(&value, which, device), "cuDeviceGetAttribute");
        return value;
    };
    GpuProperties p;
    p.ordinal = ordinal;
    char name[256] = {};
    api_->check(api_->call.device_get_name(name, int(sizeof name) - 1, device), "cuDeviceGetName");
    p.name = name;
    p.compute_major = attribute(kComputeCapabilityMajor);
    p.compute_minor = attribute(kComputeCapabilityMinor);
    p.sm_count = attribute(kMultiprocessorCount);
    p.shared_memory_per_sm = attribute(kMaxSharedMemoryPerMultiprocessor);
    p.shared_memory_per_block_optin = attribute(kMaxSharedMemoryPerBlockOptin);
    p.l2_bytes = attribute(kL2CacheSize);
    size_t total = 0;
    api_->check(api_->call.device_total_mem(&total, device), "cuDeviceTotalMem");
    p.global_memory_bytes = int64_t(total);
    p.memory_bus_bits = attribute(kGlobalMemoryBusWidth);
    p.memory_clock_khz = attribute(kMemoryClockRate);
    p.driver_version = api_->driver_version;
    return p;
}

void Driver::make_current(int ordinal) {
    CUcontext context = nullptr;
    {
        std::lock_guard lock(api_->mutex);
        auto found = api_->contexts.find(ordinal);
        if (found == api_->contexts.end()) {
            const CUdevice device = api_->device(ordinal);
            api_->check(api_->call.primary_ctx_retain(&context, device), "cuDevicePrimaryCtxRetain");
            found = api_->contexts.emplace(ordinal, context).first;
        }
        context = found->second;
    }
    api_->check(api_->call.ctx_set_current(context), "cuCtxSetCurrent");
}

CUdeviceptr Driver::allocate(size_t bytes) {
    if (bytes == 0) return 0;
    CUdeviceptr pointer = 0;
    api_->check(api_->call.mem_alloc(&pointer, bytes), "cuMemAlloc");
    return pointer;
}

// Errors are ignored: at exit the context may already be gone, and there is nothing to do anyway.
void Driver::free(CUdeviceptr pointer) noexcept {
    if (pointer) api_->call.mem_free(pointer);
}

void Driver::copy_to_device(CUdeviceptr dst, const void* src, size_t bytes) {
    if (bytes) api_->check(api_->call.memcpy_htod(dst, src, bytes), "cuMemcpyHtoD");
}

void Driver::copy_to_host(void* dst, CUdeviceptr src, size_t bytes) {
    if (bytes) api_->check(api_->call.memcpy_dtoh(dst, src, bytes), "cuMemcpyDtoH");
}

void Driver::copy_device_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    if (bytes) api_->check(api_->call.memcpy_dtod_async(dst, src, bytes, stream), "cuMemcpyDtoDAsync");
}

void Driver::memset_async(CUdeviceptr dst, uint8_t value, size_t bytes, CUstream stream) {
    if (bytes) api_->check(api_->call.memset_d8_async(dst, value, bytes, stream), "cuMemsetD8Async");
}

CUmodule Driver::load_module(const std::vector<char>& cubin) {
    if (cubin.empty()) fail(QJIT_ERROR_INTERNAL, "cuModuleLoadData: empty cubin");
    CUmodule module = nullptr;
    api_->check(api_->call.module_load_data(&module, cubin.data()), "cuModuleLoadData");
    return module;
}

void Driver::unload_module(CUmodule module) noexcept {
    if (module) api_->call.module_unload(module);
}

CUfunction Driver::function(CUmodule module, const std::string& name) {
    CUfunction function = nullptr;
    const CUresult result = api_->call.module_get_function(&function, module, name.c_str());
    if (result != kSuccess)
        fail(QJIT_ERROR_INTERNAL, "cuModuleGetFunction(", name, ") failed: ", api_->describe(result));
    return function;
}

void Driver::set_dynamic_shared_memory(CUfunction function, int bytes) {
    api_->check(api_->call.func_set_attribute(function, kFuncAttributeMaxDynamicSharedSizeBytes, bytes),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
}

void Driver::launch(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                    unsigned shared_bytes, CUstream stream, void** arguments) {
    api_->check(api_->call.launch_kernel(function, grid_x, grid_y, grid_z, block_x, 1, 1, shared_bytes, stream,
                                         arguments, nullptr),
                "cuLaunchKernel");
}

CUevent Driver::create_event() {
    CUevent event = nullptr;
    api_->check(api_->call.event_create(&event, 0), "cuEventCreate");  // 0: CU_EVENT_DEFAULT, timed
    return event;
}

void Driver::destroy_event(CUevent event) noexcept {
    if (event) api_->call.event_destroy(event);
}

void Driver::record_event(CUevent event, CUstream stream) {
    api_->check(api_->call.event_record(event, stream), "cuEventRecord");
}

float Driver::elapsed_ms(CUevent start, CUevent stop) {
    api_->check(api_->call.event_synchronize(stop), "cuEventSynchronize");
    float milliseconds = 0;
    api_->check(api_->call.event_elapsed_time(&milliseconds, start, stop), "cuEventElapsedTime");
    return milliseconds;
}

void Driver::synchronize_stream(CUstream stream) {
    api_->check(api_->call.stream_synchronize(stream), "cuStreamSynchronize");
}

void Driver::synchronize_context() { api_->check(api_->call.ctx_synchronize(), "cuCtxSynchronize"); }

DeviceBuffer::DeviceBuffer(size_t bytes) : pointer_(Driver::get().allocate(bytes)), bytes_(bytes) {}

DeviceBuffer::DeviceBuffer(const void* host, size_t bytes) : DeviceBuffer(bytes) {
    Driver::get().copy_to_device(pointer_, host, bytes);  // on failure the destructor frees
}

CUdeviceptr grown(DeviceBuffer& buffer, size_t bytes) {
    if (buffer.size() < bytes) buffer = DeviceBuffer(bytes);
    return buffer.get();
}

DeviceBuffer::~DeviceBuffer() {
    if (pointer_) Driver::get().free(pointer_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (pointer_) Driver::get().free(pointer_);
        pointer_ = std::exchange(other.pointer_, 0);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

}  // namespace qjit::cuda
