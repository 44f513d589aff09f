// The CUDA runtime pieces: the driver loader (which must fail cleanly without a GPU and work with
// one), NVRTC compilation, and the cubin caches in memory and on disk.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/nvrtc_compiler.hpp"
#include "runtime/cuda/cuda_driver.hpp"
#include "base/error.hpp"
#include "child_process.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;

namespace qjit {
namespace {

using cuda::DeviceBuffer;
using cuda::Driver;
using cuda::CompiledKernel;
using cuda::compile_cuda;
using cuda::compile_cuda_cached;
using test::files_starting;
using test::read_file;
using test::write_file;

// NVRTC is mandatory where the build found the toolkit, and the tests skip elsewhere.
#ifdef QJIT_EXPECT_NVRTC
#define REQUIRE_NVRTC()                                                   \
    do {                                                                  \
        std::string why;                                                  \
        ASSERT_TRUE(cuda::nvrtc_available(&why)) << why;             \
    } while (0)
#else
#define REQUIRE_NVRTC()                                                   \
    do {                                                                  \
        std::string why;                                                  \
        if (!cuda::nvrtc_available(&why)) GTEST_SKIP() << why;       \
    } while (0)
#endif

// Expects `body` to throw qjit::Error with `status` and a message containing `word`.
template <typename Body>
void expect_error(Body&& body, qjit_status status, const std::string& word) {
    try {
        body();
        ADD_FAILURE() << "no error; expected one naming '" << word << "'";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), status) << e.what();
        EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << "'" << e.what() << "' lacks '" << word << "'";
    }
}

// The process's driver, or null with the reason where this machine has none.
Driver* driver_or_null(std::string* why) {
    try {
        return &Driver::get();
    } catch (const Error& e) {
        *why = e.what();
        return nullptr;
    }
}

// Tensor-core and asynchronous-copy PTX (sm_80+): one warp multiplies a 16x16 by a 16x8 fp16 tile.
// With all inputs 1.0 every output is 16.
const char* const kMmaSource = R"(
extern "C" __global__ void mma_probe(const unsigned* a, const unsigned* b, float* d) {
    __shared__ __align__(16) unsigned staged[32 * 4];
    const unsigned lane = threadIdx.x;
    const unsigned slot = static_cast<unsigned>(__cvta_generic_to_shared(&staged[lane * 4]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(slot), "l"(a + lane * 4));
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(staged[lane * 4]), "r"(staged[lane * 4 + 1]), "r"(staged[lane * 4 + 2]), "r"(staged[lane * 4 + 3]),
          "r"(b[lane * 2]), "r"(b[lane * 2 + 1]));
    for (int i = 0; i < 4; ++i) d[lane * 4 + i] = c[i];
}
)";

// A small kernel whose source differs by `tag`, so that each test starts with cache misses.
std::string scale_source(const std::string& tag) {
    return "// " + tag + "\nextern \"C\" __global__ void scale(float* x, float f) { x[threadIdx.x] *= f; }\n";
}

// Whether `text` is not empty and made only of `allowed` characters.
bool made_of(const std::string& text, const char* allowed) {
    return !text.empty() && text.find_first_not_of(allowed) == std::string::npos;
}

bool is_elf(const std::vector<char>& image) {
    return image.size() > 4 && std::memcmp(image.data(), "\x7f" "ELF", 4) == 0;
}

// Sets (or with nullopt unsets) an environment variable for the scope.
class ScopedEnv {
public:
    ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
        if (const char* old = ::getenv(name)) old_ = old;
        if (value) ::setenv(name, value->c_str(), 1);
        else ::unsetenv(name);
    }
    ~ScopedEnv() {
        if (old_) ::setenv(name_, old_->c_str(), 1);
        else ::unsetenv(name_);
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* name_;
    std::optional<std::string> old_;
};

// ---- the driver ----

TEST(CudaRuntime, DriverLoadsOrSaysWhyNot) {
    std::string why;
    Driver* driver = driver_or_null(&why);
    if (!driver) {
        expect_error([] { Driver::get(); }, QJIT_ERROR_NO_DEVICE, "no CUDA device");
        expect_error([] { Driver::get(); }, QJIT_ERROR_NO_DEVICE, why);  // remembered, same reason
        return;
    }
    ASSERT_GE(driver->device_count(), 1);
    const GpuProperties p = driver->properties(0);
    EXPECT_FALSE(p.name.empty());
    EXPECT_GE(p.arch(), 70);
    EXPECT_GT(p.sm_count, 0);
    EXPECT_GE(p.shared_memory_per_sm, 64 * 1024);
    EXPECT_GE(p.shared_memory_per_block_optin, 48 * 1024);
    EXPECT_GT(p.l2_bytes, 0);
    EXPECT_GT(p.global_memory_bytes, int64_t(1) << 30);
    EXPECT_GT(p.driver_version, 0);
    EXPECT_GT(p.peak_bandwidth_gbps(), 100.0) << p.memory_bus_bits << " bits at " << p.memory_clock_khz << " kHz";
    EXPECT_EQ(p.fingerprint().rfind(p.name + " sm_", 0), 0u) << p.fingerprint();
    const int count = driver->device_count();
    expect_error([&] { driver->properties(count); }, QJIT_ERROR_NO_DEVICE, "the driver sees");
    expect_error([&] { driver->make_current(-1); }, QJIT_ERROR_NO_DEVICE, "device -1 requested");
}

TEST(CudaRuntime, BrokenDriverLibrariesAreNoDevice) {
    expect_error([] { cuda::check_driver_library("/nonexistent/libcuda.so.1"); }, QJIT_ERROR_NO_DEVICE,
                 "/nonexistent/libcuda.so.1 could not be loaded");
    // A library that loads but is not a CUDA driver.
    expect_error([] { cuda::check_driver_library("libm.so.6"); }, QJIT_ERROR_NO_DEVICE, "libm.so.6 has no cuInit");
}

TEST(CudaRuntime, FingerprintAndPeakBandwidth) {
    GpuProperties h100;
    h100.name = "NVIDIA H100 80GB HBM3";
    h100.compute_major = 9;
    h100.sm_count = 132;
    h100.shared_memory_per_sm = 228 * 1024;
    h100.l2_bytes = 50 * 1024 * 1024;
    h100.memory_bus_bits = 5120;
    h100.memory_clock_khz = 2619000;
    EXPECT_EQ(h100.arch(), 90);
    EXPECT_EQ(h100.fingerprint(), "NVIDIA H100 80GB HBM3 sm_90 SMs=132 smem=228K L2=50M bus=5120");
    EXPECT_NEAR(h100.peak_bandwidth_gbps(), 3352.3, 0.1);

    GpuProperties odd = h100;  // an L2 that is no whole number of MiB is given in KiB
    odd.compute_major = 8;
    odd.compute_minor = 6;
    odd.l2_bytes = 3 * 1024 * 1024 / 2;
    EXPECT_EQ(odd.fingerprint(), "NVIDIA H100 80GB HBM3 sm_86 SMs=132 smem=228K L2=1536K bus=5120");
}

// Only on a machine with a GPU: memory, copies, a compiled module, a launch and events.
TEST(CudaRuntime, MemoryCopiesAndALaunchOnTheDevice) {
    std::string why;
    Driver* driver = driver_or_null(&why);
    if (!driver) GTEST_SKIP() << why;
    driver->make_current(0);
    driver->make_current(0);  // the retained context is reused

    std::vector<uint8_t> host(1000);
    for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i * 7);
    DeviceBuffer source(host.data(), host.size());
    EXPECT_EQ(source.size(), host.size());
    DeviceBuffer copy(host.size());
    driver->copy_device_async(copy.get(), source.get(), host.size(), nullptr);
    driver->memset_async(copy.get() + 10, 0xab, 20, nullptr);
    driver->synchronize_stream(nullptr);
    std::vector<uint8_t> back(host.size());
    driver->copy_to_host(back.data(), copy.get(), back.size());
    std::fill(host.begin() + 10, host.begin() + 30, uint8_t(0xab));
    EXPECT_EQ(back, host);

    DeviceBuffer moved = std::move(copy);
    EXPECT_EQ(copy.get(), 0u);
    EXPECT_NE(moved.get(), 0u);
    EXPECT_EQ(driver->allocate(0), 0u);
    expect_error([&] { driver->allocate(size_t(1) << 52); }, QJIT_ERROR_OUT_OF_MEMORY, "cuMemAlloc");

    const GpuProperties p = driver->properties(0);
    std::string no_nvrtc;
    if (!cuda::nvrtc_available(&no_nvrtc)) GTEST_SKIP() << no_nvrtc;
    if (p.arch() < 80) GTEST_SKIP() << "the probe kernel needs sm_80, this is sm_" << p.arch();
    const CompiledKernel kernel = compile_cuda(kMmaSource, "mma_probe", p.arch());
    cuda::CUmodule module = driver->load_module(kernel.cubin);
    cuda::CUfunction function = driver->function(module, "mma_probe");
    expect_error([&] { driver->function(module, "no_such_kernel"); }, QJIT_ERROR_INTERNAL, "no_such_kernel");
    if (p.shared_memory_per_block_optin >= 64 * 1024) driver->set_dynamic_shared_memory(function, 64 * 1024);

    const std::vector<uint32_t> ones(32 * 4, 0x3c003c00u);  // pairs of fp16 1.0
    DeviceBuffer a(ones.data(), ones.size() * 4), b(ones.data(), 32 * 2 * 4), d(32 * 4 * sizeof(float));
    cuda::CUdeviceptr a_ptr = a.get(), b_ptr = b.get(), d_ptr = d.get();
    void* arguments[] = {&a_ptr, &b_ptr, &d_ptr};
    cuda::CUevent start = driver->create_event(), stop = driver->create_event();
    driver->record_event(start, nullptr);
    driver->launch(function, 1, 1, 1, 32, 0, nullptr, arguments);
    driver->record_event(stop, nullptr);
    EXPECT_GE(driver->elapsed_ms(start, stop), 0.0f);
    std::vector<float> result(32 * 4);
    driver->copy_to_host(result.data(), d.get(), result.size() * sizeof(float));
    EXPECT_EQ(result, std::vector<float>(32 * 4, 16.0f));
    driver->destroy_event(start);
    driver->destroy_event(stop);
    driver->unload_module(module);
}

// ---- NVRTC ----

TEST(Nvrtc, VersionIsMajorDotMinor) {
    REQUIRE_NVRTC();
    const std::string version = cuda::nvrtc_version();
    const size_t dot = version.find('.');
    ASSERT_NE(dot, std::string::npos) << version;
    EXPECT_TRUE(made_of(version.substr(0, dot), "0123456789") && made_of(version.substr(dot + 1), "0123456789"))
        << version;
}

TEST(Nvrtc, CompilesTensorCoreCodeForSm80AndSm90) {
    REQUIRE_NVRTC();
    for (int arch : {80, 90}) {
        const CompiledKernel kernel = compile_cuda(kMmaSource, "mma_probe", arch);
        EXPECT_TRUE(is_elf(kernel.cubin)) << "sm_" << arch;
        EXPECT_FALSE(kernel.from_cache);
        EXPECT_GT(kernel.compile_ms, 0.0);
        // NVRTC 13 keeps the PTX of a real-architecture compile; older ones may not.
        if (!kernel.ptx.empty()) {
            EXPECT_NE(kernel.ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
            EXPECT_NE(kernel.ptx.find(".target sm_" + std::to_string(arch)), std::string::npos);
            EXPECT_NE(kernel.ptx.back(), '\0');
        }
    }
}

TEST(Nvrtc, CompileErrorsCarryTheLog) {
    REQUIRE_NVRTC();
    const std::string bad = "extern \"C\" __global__ void broken(float* x) { x[0] = undeclared_name; }\n";
    expect_error([&] { compile_cuda(bad, "broken_kernel", 80); }, QJIT_ERROR_INTERNAL, "undeclared_name");
    expect_error([&] { compile_cuda(bad, "broken_kernel", 80); }, QJIT_ERROR_INTERNAL, "error");
    expect_error([&] { compile_cuda(bad, "broken_kernel", 80); }, QJIT_ERROR_INTERNAL, "broken_kernel");
}

TEST(Nvrtc, BadArchitecturesAreRefused) {
    REQUIRE_NVRTC();
    expect_error([] { compile_cuda(scale_source("arch"), "scale", 0); }, QJIT_ERROR_INVALID_ARGUMENT, "architecture");
    try {
        compile_cuda(scale_source("arch"), "scale", 30);  // gone from every NVRTC qjit loads
        ADD_FAILURE() << "sm_30 compiled";
    } catch (const Error& e) {
        // NO_DEVICE where NVRTC lists its architectures, else NVRTC's own complaint.
        EXPECT_TRUE(e.status() == QJIT_ERROR_NO_DEVICE || e.status() == QJIT_ERROR_INTERNAL) << e.what();
        EXPECT_NE(std::string(e.what()).find("sm_30"), std::string::npos) << e.what();
    }
}

// ---- the caches ----

class CubinCache : public ::testing::Test {
protected:
    void SetUp() override {
        REQUIRE_NVRTC();
        char pattern[] = "/tmp/qjit_cubin_cache_XXXXXX";
        ASSERT_NE(::mkdtemp(pattern), nullptr);
        root_ = pattern;
        dir_ = (root_ / "cache" / "cubin").string();  // made by the first store
        source_ = scale_source(::testing::UnitTest::GetInstance()->current_test_info()->name());
        cuda::clear_memory_cubin_cache();
    }
    void TearDown() override {
        if (!root_.empty()) fs::remove_all(root_);
    }

    CompiledKernel compile(int arch = 80) { return compile_cuda_cached(source_, "scale", arch, dir_); }

    // The one cache file, checked to be named "<16 hex digits>-sm80.cubin" with no temporary beside it.
    fs::path only_file() {
        std::vector<fs::path> files = files_starting(dir_, "");
        EXPECT_EQ(files.size(), 1u);
        if (files.size() != 1) return {};
        const std::string name = files[0].filename().string();
        EXPECT_TRUE(name.size() == 27 && made_of(name.substr(0, 16), "0123456789abcdef") &&
                    name.substr(16) == "-sm80.cubin")
            << name;
        return files[0];
    }

    // Compiles with a cold memory cache and expects NVRTC to have run again (the file was refused),
    // then that the file was rewritten: a second cold compile reads it.
    void expect_recompiled_and_repaired() {
        cuda::clear_memory_cubin_cache();
        const CompiledKernel fresh = compile();
        EXPECT_FALSE(fresh.from_cache);
        EXPECT_TRUE(is_elf(fresh.cubin));
        cuda::clear_memory_cubin_cache();
        const CompiledKernel reread = compile();
        EXPECT_TRUE(reread.from_cache);
        EXPECT_EQ(reread.cubin, fresh.cubin);
    }

    fs::path root_;
    std::string dir_;
    std::string source_;
};

TEST_F(CubinCache, MemoryHitIsIdenticalAndAnotherArchIsAMiss) {
    const CompiledKernel first = compile_cuda_cached(source_, "scale", 80, "");
    EXPECT_FALSE(first.from_cache);
    EXPECT_GT(first.compile_ms, 0.0);
    const CompiledKernel second = compile_cuda_cached(source_, "scale", 80, "");
    EXPECT_TRUE(second.from_cache);
    EXPECT_EQ(second.compile_ms, 0.0);
    EXPECT_EQ(second.cubin, first.cubin);
    EXPECT_EQ(second.ptx, first.ptx);  // memory keeps the PTX
    EXPECT_FALSE(compile_cuda_cached(source_, "scale", 90, "").from_cache);
    EXPECT_FALSE(compile_cuda_cached(source_ + " ", "scale", 80, "").from_cache);
    EXPECT_FALSE(fs::exists(dir_));  // "" means no disk cache
}

TEST_F(CubinCache, DiskHitAfterTheMemoryIsCleared) {
    const CompiledKernel compiled = compile();
    EXPECT_FALSE(compiled.from_cache);
    const fs::path file = only_file();
    cuda::clear_memory_cubin_cache();
    const CompiledKernel loaded = compile();
    EXPECT_TRUE(loaded.from_cache);
    EXPECT_EQ(loaded.compile_ms, 0.0);
    EXPECT_EQ(loaded.cubin, compiled.cubin);
    EXPECT_TRUE(loaded.ptx.empty());  // the disk keeps only the cubin
    // "QJITCUBN", u32 version, u32 key size, key, u64 cubin size, u32 CRC, cubin.
    const std::string data = read_file(file);
    ASSERT_GT(data.size(), 28 + compiled.cubin.size());
    EXPECT_EQ(data.substr(0, 8), "QJITCUBN");
    uint32_t key_size = 0;
    std::memcpy(&key_size, data.data() + 12, 4);  // little-endian, like x86
    EXPECT_EQ(data.size(), 28 + key_size + compiled.cubin.size());
    const std::string key = data.substr(16, key_size);
    EXPECT_NE(key.find("arch=sm_80"), std::string::npos) << key;
    EXPECT_NE(key.find("nvrtc=" + cuda::nvrtc_version()), std::string::npos) << key;
    EXPECT_EQ(data.substr(data.size() - compiled.cubin.size()),
              std::string(compiled.cubin.begin(), compiled.cubin.end()));
    // Another architecture is another file.
    EXPECT_FALSE(compile(90).from_cache);
    EXPECT_EQ(files_starting(dir_, "").size(), 2u);
}

TEST_F(CubinCache, CorruptPayloadIsRecompiledAndReplaced) {
    compile();
    const fs::path file = only_file();
    std::string data = read_file(file);
    data[data.size() - 100] ^= 0x20;  // inside the cubin: only the CRC notices
    write_file(file, data);
    expect_recompiled_and_repaired();
    EXPECT_NE(read_file(file), data);
    only_file();
}

TEST_F(CubinCache, TruncatedFileIsRecompiled) {
    compile();
    const fs::path file = only_file();
    const std::string data = read_file(file);
    for (size_t keep : {data.size() - 1, size_t(40), size_t(10), size_t(0)}) {
        write_file(file, data.substr(0, keep));
        expect_recompiled_and_repaired();
        EXPECT_EQ(read_file(file).size(), data.size()) << "kept " << keep;
    }
}

TEST_F(CubinCache, FileOfAnotherKeyIsNotTrusted) {
    compile();
    const fs::path file = only_file();
    const std::string own = read_file(file);
    // A valid file of another source, under this source's name.
    const std::string other_dir = (root_ / "other").string();
    compile_cuda_cached(scale_source("another source"), "scale", 80, other_dir);
    fs::copy_file(files_starting(other_dir, "").at(0), file, fs::copy_options::overwrite_existing);
    expect_recompiled_and_repaired();
    const std::string repaired = read_file(file);
    EXPECT_EQ(repaired.size(), own.size());
    EXPECT_NE(repaired.find(concat("bytes=", source_.size())), std::string::npos);  // the key names this source
}

TEST_F(CubinCache, UnusableDirectoryStillCompiles) {
    write_file(root_ / "a_file", "not a directory");
    dir_ = (root_ / "a_file" / "cubin").string();
    const CompiledKernel kernel = compile();
    EXPECT_FALSE(kernel.from_cache);
    EXPECT_TRUE(is_elf(kernel.cubin));
    EXPECT_TRUE(compile().from_cache);  // memory still works
    EXPECT_EQ(read_file(root_ / "a_file"), "not a directory");
}

// A cache folder this process may not write: kernels still compile, files already there are still
// read, and nothing is added or changed.
TEST_F(CubinCache, ReadOnlyFolderStillCompilesAndReads) {
    compile();
    const fs::path file = only_file();
    const std::string stored = read_file(file);
    ::chmod(root_.c_str(), 0755);  // mkdtemp made it 0700
    ::chmod(dir_.c_str(), 0555);
    cuda::clear_memory_cubin_cache();
    const int status = test::run_unprivileged([&] {
        if (!compile().from_cache) return 2;
        const CompiledKernel other = compile_cuda_cached(source_ + "// other\n", "scale", 80, dir_);
        return !other.from_cache && is_elf(other.cubin) ? 0 : 3;
    });
    ::chmod(dir_.c_str(), 0755);
    if (status == test::kCannotDropRoot) GTEST_SKIP() << "cannot run a child without root's rights";
    EXPECT_EQ(status, 0) << "2: the stored file was not read, 3: the other kernel did not compile";
    EXPECT_EQ(read_file(only_file()), stored);
}

TEST_F(CubinCache, ConcurrentCompilesAgree) {
    const std::vector<std::string> sources = {source_ + "// a\n", source_ + "// b\n"};
    std::vector<std::vector<char>> cubins(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < cubins.size(); ++t)
        threads.emplace_back([&, t] { cubins[t] = compile_cuda_cached(sources[t % 2], "scale", 80, dir_).cubin; });
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(cubins[0], cubins[2]);
    EXPECT_EQ(cubins[1], cubins[3]);
    EXPECT_TRUE(is_elf(cubins[0]) && is_elf(cubins[1]));
    EXPECT_EQ(files_starting(dir_, "").size(), 2u);  // no temporary files left behind
}

TEST(CubinCacheDir, FollowsTheEnvironment) {
    {
        ScopedEnv cache("QJIT_CUBIN_CACHE", "/somewhere/cubins");
        EXPECT_EQ(cuda::default_cubin_cache_dir(), "/somewhere/cubins");
    }
    {
        ScopedEnv cache("QJIT_CUBIN_CACHE", "");
        EXPECT_EQ(cuda::default_cubin_cache_dir(), "");
    }
    ScopedEnv cache("QJIT_CUBIN_CACHE", std::nullopt);
    {
        ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
        EXPECT_EQ(cuda::default_cubin_cache_dir(), "/xdg/qjit/cubin");
    }
    ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
    {
        ScopedEnv home("HOME", "/home/someone");
        EXPECT_EQ(cuda::default_cubin_cache_dir(), "/home/someone/.cache/qjit/cubin");
    }
    ScopedEnv home("HOME", std::nullopt);
    EXPECT_EQ(cuda::default_cubin_cache_dir(), "");
}

}  // namespace
}  // namespace qjit
