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

// Runs `command` + a temporary name for `path`'s output, then renames it to `path`, so that
// concurrent test processes never load a half-written file.
void build_into(const std::filesystem::path& path, const std::string& command) {
    const std::string temporary = path.string() + "." + std::to_string(getpid());
    std::string output;
    if (run_command(command + temporary, output) != 0)
        throw std::runtime_error("the host emulation of a CUDA source does not compile:\n" + output);
    std::filesystem::rename(temporary, path);
}

void write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
}

// The shim, copied into the cache with its precompiled form beside it (<name>.gch, which g++ and
// clang++ both take in place of an -include'd header): its standard headers are most of a kernel's
// compile time. Named by the compiler flags and the text it is made of.
std::filesystem::path precompiled_shim(const std::filesystem::path& folder, const std::string& flags) {
    const std::string text = read_text(std::string(QJIT_SOURCE_DIR) + "/tests/cuda_host/cuda_host_shim.hpp");
    const std::string half = read_text(std::string(QJIT_SOURCE_DIR) + "/base/half.hpp");
    const std::filesystem::path shim =
        folder / ("shim-" + std::to_string(std::hash<std::string>{}(flags + text + half)) + ".hpp");
    const std::filesystem::path precompiled = shim.string() + ".gch";
    if (std::filesystem::exists(precompiled)) return shim;
    const std::filesystem::path copy = shim.string() + "." + std::to_string(getpid());
    write_text(copy, text);
    std::filesystem::rename(copy, shim);
    build_into(precompiled, flags + " -x c++-header " + shim.string() + " -o ");
    return shim;
}

// The library for `source`: built into the cache on a miss.
std::string library_for(const std::string& source) {
    const std::filesystem::path folder = QJIT_HOST_KERNEL_CACHE;
    const std::string flags = std::string(QJIT_HOST_CXX) + " -std=c++20 -O1 -fPIC -w -pthread -I" + QJIT_SOURCE_DIR;
    // Once per process: the folder, and the shim read, hashed and looked up (or built).
    static const std::filesystem::path shim = [&] {
        std::filesystem::create_directories(folder);
        return precompiled_shim(folder, flags);
    }();
    const std::filesystem::path library =
        folder / (std::to_string(std::hash<std::string>{}(shim.string() + source)) + ".so");
    if (std::filesystem::exists(library)) return library;
    const std::filesystem::path kernel = library.string() + "." + std::to_string(getpid()) + ".cu";
    write_text(kernel, source);
    try {
        build_into(library, flags + " -shared -include " + shim.string() + " -x c++ " + kernel.string() + " -o ");
    } catch (...) {
        std::filesystem::remove(kernel);
        throw;
    }
    std::filesystem::remove(kernel);
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
