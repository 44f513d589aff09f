// A generated CUDA source built for the host emulation (cuda_host_shim.hpp) into a shared library
// by the C++ compiler that built the tests, and its kernels launched on CPU threads. Libraries are
// cached by a hash of the source and the shim, in the build tree, so reruns only load them.
#pragma once

#include <cstddef>
#include <string>

namespace qjit::test {

struct HostGrid {
    unsigned x = 1, y = 1, z = 1;
};

class HostModule {
public:
    // Compiles `source` (or finds it in the cache); throws std::runtime_error with the compiler's
    // output when it does not compile.
    explicit HostModule(const std::string& source);
    ~HostModule();
    HostModule(const HostModule&) = delete;
    HostModule& operator=(const HostModule&) = delete;

    // Runs kernel `entry` over `grid` blocks of `threads` threads with `shared_bytes` of dynamic
    // shared memory; `args` must have the kernel's parameter types exactly.
    template <typename... Args>
    void launch(const char* entry, HostGrid grid, unsigned threads, size_t shared_bytes, Args... args) const {
        using Kernel = void (*)(Args...);
        const Kernel kernel = reinterpret_cast<Kernel>(symbol(entry));
        auto call = [&] { kernel(args...); };
        run(grid, threads, shared_bytes, [](void* context) { (*static_cast<decltype(call)*>(context))(); }, &call);
    }

private:
    void* symbol(const char* name) const;
    void run(HostGrid grid, unsigned threads, size_t shared_bytes, void (*call)(void*), void* context) const;

    void* library_ = nullptr;
};

}  // namespace qjit::test
