#include "cuda_host/host_module.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace qjit::test {

namespace {

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw std::runtime_error("cannot read " + path);
    return text.str();
}

// Runs `command`, returning its exit status and appending its output to `output`.
int run_command(const std::string& command, std::string& output) {
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    if (!pipe) throw std::runtime_error("cannot run " + command);
    std::array<char, 4096> buffer;
    while (size_t read = std::fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), read);
    return pclose(pipe);
}

// The library for `source`: built into the cache on a miss (a temporary name, then a rename, so
// that concurrent test processes never load a half-written file).
std::string library_for(const std::string& source) {
    const std::string shim = std::string(QJIT_SOURCE_DIR) + "/tests/cuda_host/cuda_host_shim.hpp";
    const std::string command_prefix = std::string(QJIT_HOST_CXX) +
                                       " -std=c++20 -O1 -fPIC -shared -w -pthread -include " + shim + " -I" +
                                       QJIT_SOURCE_DIR + " -x c++ ";
    const size_t key = std::hash<std::string>{}(command_prefix + read_text(shim) + source);
    const std::filesystem::path folder = QJIT_HOST_KERNEL_CACHE;
    std::filesystem::create_directories(folder);
    const std::filesystem::path library = folder / (std::to_string(key) + ".so");
    if (std::filesystem::exists(library)) return library;
    const std::string stem = (folder / (std::to_string(key) + "." + std::to_string(getpid()))).string();
    {
        std::ofstream out(stem + ".cu", std::ios::binary);
        out << source;
    }
    std::string output;
    const int status = run_command(command_prefix + stem + ".cu -o " + stem + ".so", output);
    std::filesystem::remove(stem + ".cu");
    if (status != 0) throw std::runtime_error("the host emulation of a CUDA source does not compile:\n" + output);
    std::filesystem::rename(stem + ".so", library);
    return library;
}

}  // namespace

HostModule::HostModule(const std::string& source) {
    const std::string path = library_for(source);
    library_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library_) throw std::runtime_error("cannot load " + path + ": " + dlerror());
}

HostModule::~HostModule() {
    if (library_) dlclose(library_);
}

void* HostModule::symbol(const char* name) const {
    void* found = dlsym(library_, name);
    if (!found) throw std::runtime_error(std::string("no kernel ") + name + " in the host module");
    return found;
}

void HostModule::run(HostGrid grid, unsigned threads, size_t shared_bytes, void (*call)(void*), void* context) const {
    using Launch = void (*)(unsigned, unsigned, unsigned, unsigned, size_t, void (*)(void*), void*);
    reinterpret_cast<Launch>(symbol("qjit_host_launch"))(grid.x, grid.y, grid.z, threads, shared_bytes, call, context);
}

}  // namespace qjit::test
