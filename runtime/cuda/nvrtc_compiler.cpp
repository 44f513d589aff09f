#include "runtime/cuda/nvrtc_compiler.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <memory>

#include "base/error.hpp"

namespace qjit::cuda {

namespace {

// nvrtc.h's types, declared here so that building needs no toolkit.
using nvrtcResult = int;
using nvrtcProgram = struct NvrtcProgram_st*;
constexpr nvrtcResult kNvrtcSuccess = 0;
constexpr nvrtcResult kNvrtcOutOfMemory = 1;  // NVRTC_ERROR_OUT_OF_MEMORY

// The entry points qjit uses, with the signatures nvrtc.h documents.
struct Nvrtc {
    nvrtcResult (*version)(int* major, int* minor);
    const char* (*get_error_string)(nvrtcResult result);
    nvrtcResult (*create_program)(nvrtcProgram* program, const char* source, const char* name, int header_count,
                                  const char* const* headers, const char* const* include_names);
    nvrtcResult (*destroy_program)(nvrtcProgram* program);
    nvrtcResult (*compile_program)(nvrtcProgram program, int option_count, const char* const* options);
    nvrtcResult (*get_program_log_size)(nvrtcProgram program, size_t* bytes);
    nvrtcResult (*get_program_log)(nvrtcProgram program, char* log);
    nvrtcResult (*get_ptx_size)(nvrtcProgram program, size_t* bytes);
    nvrtcResult (*get_ptx)(nvrtcProgram program, char* ptx);
    nvrtcResult (*get_cubin_size)(nvrtcProgram program, size_t* bytes);
    nvrtcResult (*get_cubin)(nvrtcProgram program, char* cubin);
    // Optional (NVRTC 11.2+): lets an unsupported architecture be reported as such.
    nvrtcResult (*get_num_supported_archs)(int* count);
    nvrtcResult (*get_supported_archs)(int* archs);

    std::string version_text;  // "13.0"

    std::string describe(nvrtcResult result) const {
        const char* text = get_error_string(result);
        return text ? text : concat("nvrtcResult ", result);
    }

    void check(nvrtcResult result, const char* function, const std::string& name) const {
        if (result == kNvrtcSuccess) return;
        fail(result == kNvrtcOutOfMemory ? QJIT_ERROR_OUT_OF_MEMORY : QJIT_ERROR_INTERNAL, function, " failed for ",
             name, ": ", describe(result));
    }

    std::vector<int> supported_archs() const {
        int count = 0;
        if (!get_num_supported_archs || !get_supported_archs || get_num_supported_archs(&count) != kNvrtcSuccess)
            return {};
        std::vector<int> archs(size_t(std::max(count, 0)));
        if (count > 0 && get_supported_archs(archs.data()) != kNvrtcSuccess) return {};
        return archs;
    }
};

std::string last_dl_error() {
    const char* text = ::dlerror();
    return text ? text : "unknown error";
}

template <typename Function>
Function* find_symbol(void* library, const char* symbol) {
    return reinterpret_cast<Function*>(::dlsym(library, symbol));
}

template <typename Function>
void resolve(void* library, const std::string& path, Function*& slot, const char* symbol) {
    slot = find_symbol<Function>(library, symbol);
    if (!slot) fail(QJIT_ERROR_NO_DEVICE, "no NVRTC: ", path, " has no ", symbol, " (", last_dl_error(), ")");
}

std::unique_ptr<Nvrtc> resolve_nvrtc(void* library, const std::string& path) {
    auto nvrtc = std::make_unique<Nvrtc>();
    resolve(library, path, nvrtc->version, "nvrtcVersion");
    resolve(library, path, nvrtc->get_error_string, "nvrtcGetErrorString");
    resolve(library, path, nvrtc->create_program, "nvrtcCreateProgram");
    resolve(library, path, nvrtc->destroy_program, "nvrtcDestroyProgram");
    resolve(library, path, nvrtc->compile_program, "nvrtcCompileProgram");
    resolve(library, path, nvrtc->get_program_log_size, "nvrtcGetProgramLogSize");
    resolve(library, path, nvrtc->get_program_log, "nvrtcGetProgramLog");
    resolve(library, path, nvrtc->get_ptx_size, "nvrtcGetPTXSize");
    resolve(library, path, nvrtc->get_ptx, "nvrtcGetPTX");
    resolve(library, path, nvrtc->get_cubin_size, "nvrtcGetCUBINSize");
    resolve(library, path, nvrtc->get_cubin, "nvrtcGetCUBIN");
    nvrtc->get_num_supported_archs = find_symbol<nvrtcResult(int*)>(library, "nvrtcGetNumSupportedArchs");
    nvrtc->get_supported_archs = find_symbol<nvrtcResult(int*)>(library, "nvrtcGetSupportedArchs");
    int major = 0, minor = 0;
    if (nvrtc->version(&major, &minor) != kNvrtcSuccess)
        fail(QJIT_ERROR_NO_DEVICE, "no NVRTC: nvrtcVersion failed in ", path);
    nvrtc->version_text = concat(major, ".", minor);
    return nvrtc;
}

struct LoadedNvrtc {
    std::unique_ptr<Nvrtc> nvrtc;  // null when none could be loaded
    std::string failure;
};

// Tries $QJIT_NVRTC_LIBRARY, then the sonames of the toolkits qjit knows. The library that loads
// stays loaded for the life of the process.
LoadedNvrtc load_nvrtc() {
    std::vector<std::string> candidates;
    if (const char* path = std::getenv("QJIT_NVRTC_LIBRARY"); path && *path) candidates.emplace_back(path);
    for (const char* soname : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) candidates.emplace_back(soname);

    LoadedNvrtc loaded;
    std::string tried;
    for (const std::string& path : candidates) {
        void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!library) {
            tried += concat(tried.empty() ? "" : "; ", last_dl_error());
            continue;
        }
        try {
            loaded.nvrtc = resolve_nvrtc(library, path);
            return loaded;
        } catch (const Error& e) {
            ::dlclose(library);
            tried += concat(tried.empty() ? "" : "; ", e.what());
        }
    }
    loaded.failure = concat("no NVRTC: it could not be loaded (", tried, ")");
    return loaded;
}

const LoadedNvrtc& loaded_nvrtc() {
    static const LoadedNvrtc loaded = load_nvrtc();  // thread-safe; a failure is not retried
    return loaded;
}

const Nvrtc& require_nvrtc() {
    const LoadedNvrtc& loaded = loaded_nvrtc();
    if (!loaded.nvrtc) fail(QJIT_ERROR_NO_DEVICE, loaded.failure);
    return *loaded.nvrtc;
}

void require_supported(const Nvrtc& nvrtc, int arch) {
    require(arch > 0, "CUDA architecture ", arch, " is not valid (expected e.g. 80 for sm_80)");
    const std::vector<int> archs = nvrtc.supported_archs();
    if (archs.empty() || std::find(archs.begin(), archs.end(), arch) != archs.end()) return;
    std::string list;
    for (int a : archs) list += concat(list.empty() ? "" : " ", "sm_", a);
    fail(QJIT_ERROR_NO_DEVICE, "no NVRTC for sm_", arch, ": NVRTC ", nvrtc.version_text, " supports ", list);
}

// NVRTC's sizes count a terminating NUL; logs also end in newlines.
std::string trim_text(std::string text) {
    while (!text.empty() && (text.back() == '\0' || text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
}

// One nvrtcProgram, destroyed with the object.
class Program {
public:
    Program(const Nvrtc& nvrtc, const std::string& source, const std::string& name) : nvrtc_(nvrtc), name_(name) {
        const std::string file_name = (name.empty() ? "qjit_kernel" : name) + ".cu";
        nvrtc_.check(nvrtc_.create_program(&program_, source.c_str(), file_name.c_str(), 0, nullptr, nullptr),
                     "nvrtcCreateProgram", name_);
    }
    ~Program() { nvrtc_.destroy_program(&program_); }
    Program(const Program&) = delete;
    Program& operator=(const Program&) = delete;

    nvrtcResult compile(const std::vector<std::string>& options) {
        std::vector<const char*> arguments;
        for (const std::string& option : options) arguments.push_back(option.c_str());
        return nvrtc_.compile_program(program_, int(arguments.size()), arguments.data());
    }

    std::string log() const {
        std::string text = read<std::string>(nvrtc_.get_program_log_size, nvrtc_.get_program_log, "nvrtcGetProgramLog");
        return trim_text(std::move(text));
    }
    std::vector<char> cubin() const {
        return read<std::vector<char>>(nvrtc_.get_cubin_size, nvrtc_.get_cubin, "nvrtcGetCUBIN");
    }
    // Empty where this NVRTC keeps no PTX for a real architecture (13.0 does keep it).
    std::string ptx() const {
        size_t bytes = 0;
        if (nvrtc_.get_ptx_size(program_, &bytes) != kNvrtcSuccess || bytes == 0) return {};
        return trim_text(read<std::string>(nvrtc_.get_ptx_size, nvrtc_.get_ptx, "nvrtcGetPTX"));
    }

private:
    template <typename Bytes>
    Bytes read(nvrtcResult (*size_of)(nvrtcProgram, size_t*), nvrtcResult (*copy)(nvrtcProgram, char*),
               const char* function) const {
        size_t bytes = 0;
        nvrtc_.check(size_of(program_, &bytes), function, name_);
        Bytes data(bytes, '\0');
        if (bytes) nvrtc_.check(copy(program_, data.data()), function, name_);
        return data;
    }

    const Nvrtc& nvrtc_;
    std::string name_;
    nvrtcProgram program_ = nullptr;
};

}  // namespace

bool nvrtc_available(std::string* why) {
    const LoadedNvrtc& loaded = loaded_nvrtc();
    if (!loaded.nvrtc && why) *why = loaded.failure;
    return loaded.nvrtc != nullptr;
}

std::string nvrtc_version() { return require_nvrtc().version_text; }

std::vector<std::string> nvrtc_options(int arch) {
    // -default-device: helpers in the generated source need no __device__.
    return {concat("-arch=sm_", arch), "-std=c++17", "-default-device"};
}

CompiledKernel compile_cuda(const std::string& source, const std::string& name, int arch) {
    const Nvrtc& nvrtc = require_nvrtc();
    require_supported(nvrtc, arch);
    const auto start = std::chrono::steady_clock::now();

    Program program(nvrtc, source, name);
    const nvrtcResult compiled = program.compile(nvrtc_options(arch));
    CompiledKernel kernel;
    kernel.log = program.log();
    if (compiled != kNvrtcSuccess)
        fail(QJIT_ERROR_INTERNAL, "NVRTC could not compile ", name, " for sm_", arch, ": ", nvrtc.describe(compiled),
             "\n", kernel.log);
    kernel.cubin = program.cubin();
    if (kernel.cubin.empty()) fail(QJIT_ERROR_INTERNAL, "NVRTC produced no cubin for ", name, " (sm_", arch, ")");
    kernel.ptx = program.ptx();

    kernel.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return kernel;
}

}  // namespace qjit::cuda
