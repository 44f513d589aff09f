// compile_cuda's caches: a map in memory and a directory of cubin files (format below).
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "runtime/cuda/nvrtc_compiler.hpp"
#include "base/crc32.hpp"
#include "base/error.hpp"

namespace fs = std::filesystem;

namespace qjit::cuda {

namespace {

// A cache file, integers little-endian:
//   "QJITCUBN"  u32 format version  u32 key length  key  u64 cubin size  u32 CRC-32 of the cubin  cubin
constexpr std::string_view kMagic = "QJITCUBN";
constexpr uint32_t kFormatVersion = 1;
constexpr uint32_t kMaxKeyBytes = 1 << 16;  // a longer key means the file is damaged

uint64_t fnv1a64(std::string_view text) {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
    return hash;
}

std::string hex16(uint64_t value) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string text(16, '0');
    for (int i = 15; i >= 0; --i, value >>= 4) text[size_t(i)] = digits[value & 15];
    return text;
}

// Everything that determines the cubin. The source's length rides along with its hash, so that a
// hash collision would also need equal lengths.
std::string cache_key(const std::string& source, int arch) {
    std::string options;
    for (const std::string& option : nvrtc_options(arch)) options += " " + option;
    return concat("source=", hex16(fnv1a64(source)), " bytes=", source.size(), " arch=sm_", arch,
                  " nvrtc=", nvrtc_version(), " options=", options.substr(options.empty() ? 0 : 1));
}

fs::path cache_file(const std::string& cache_dir, const std::string& key, int arch) {
    return fs::path(cache_dir) / concat(hex16(fnv1a64(key)), "-sm", arch, ".cubin");
}

// ---- the file format ----

void put_uint(std::string& out, uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(char((value >> (8 * i)) & 0xff));
}

std::string encode(const std::string& key, const std::vector<char>& cubin) {
    std::string out(kMagic);
    put_uint(out, kFormatVersion, 4);
    put_uint(out, key.size(), 4);
    out += key;
    put_uint(out, cubin.size(), 8);
    put_uint(out, crc32(cubin.data(), cubin.size()), 4);
    out.append(cubin.data(), cubin.size());
    return out;
}

// Reads the fields of a file in order; any read past the end fails the whole parse.
class Reader {
public:
    explicit Reader(std::string_view data) : data_(data) {}

    std::optional<std::string_view> bytes(uint64_t count) {
        if (count > data_.size() - position_) return std::nullopt;
        std::string_view field = data_.substr(position_, size_t(count));
        position_ += size_t(count);
        return field;
    }
    std::optional<uint64_t> uint(int size) {
        auto field = bytes(uint64_t(size));
        if (!field) return std::nullopt;
        uint64_t value = 0;
        for (int i = size - 1; i >= 0; --i) value = (value << 8) | uint8_t((*field)[size_t(i)]);
        return value;
    }
    bool at_end() const { return position_ == data_.size(); }

private:
    std::string_view data_;
    size_t position_ = 0;
};

// The cubin in `data` if it is a whole, intact cache file for `key`.
std::optional<std::vector<char>> decode(std::string_view data, const std::string& key) {
    Reader in(data);
    if (in.bytes(kMagic.size()) != kMagic || in.uint(4) != kFormatVersion) return std::nullopt;
    const auto key_size = in.uint(4);
    if (!key_size || *key_size > kMaxKeyBytes || in.bytes(*key_size) != key) return std::nullopt;
    const auto cubin_size = in.uint(8);
    const auto checksum = cubin_size ? in.uint(4) : std::nullopt;
    const auto cubin = checksum ? in.bytes(*cubin_size) : std::nullopt;
    if (!cubin || cubin->empty() || !in.at_end() || crc32(cubin->data(), cubin->size()) != *checksum)
        return std::nullopt;
    return std::vector<char>(cubin->begin(), cubin->end());
}

std::optional<std::vector<char>> read_cache_file(const fs::path& path, const std::string& key) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return std::nullopt;
    return decode(data, key);
}

// Best effort: a cache that cannot be written is skipped, and the temporary file removed.
void write_cache_file(const fs::path& path, const std::string& key, const std::vector<char>& cubin) {
    static std::atomic<uint64_t> counter{0};
    std::error_code error;
    try {  // the throwing form: the error_code one is noexcept yet allocates
        fs::create_directories(path.parent_path());
    } catch (const fs::filesystem_error&) {
        return;
    }
    fs::path temporary = path;
    temporary += concat(".tmp-", ::getpid(), "-", counter++);
    const std::string data = encode(key, cubin);
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(data.data(), std::streamsize(data.size()));
    out.close();
    if (out) fs::rename(temporary, path, error);
    if (!out || error) fs::remove(temporary, error);
}

// ---- the memory cache ----

struct MemoryCache {
    std::mutex mutex;
    // Keyed by the key and the whole source: a hash collision cannot return the wrong kernel.
    std::unordered_map<std::string, CompiledKernel> kernels;
};

MemoryCache& memory_cache() {
    static MemoryCache cache;
    return cache;
}

std::optional<CompiledKernel> recall(const std::string& memory_key) {
    MemoryCache& cache = memory_cache();
    std::lock_guard lock(cache.mutex);
    auto found = cache.kernels.find(memory_key);
    if (found == cache.kernels.end()) return std::nullopt;
    return found->second;
}

void remember(const std::string& memory_key, const CompiledKernel& kernel) {
    MemoryCache& cache = memory_cache();
    std::lock_guard lock(cache.mutex);
    cache.kernels.emplace(memory_key, kernel);
}

CompiledKernel as_cached(CompiledKernel kernel) {
    kernel.from_cache = true;
    kernel.compile_ms = 0;
    return kernel;
}

}  // namespace

CompiledKernel compile_cuda_cached(const std::string& source, const std::string& name, int arch,
                                   const std::string& cache_dir) {
    const std::string key = cache_key(source, arch);
    const std::string memory_key = key + "\n" + source;
    if (auto kernel = recall(memory_key)) return as_cached(std::move(*kernel));

    const fs::path file = cache_dir.empty() ? fs::path() : cache_file(cache_dir, key, arch);
    if (!file.empty())
        if (auto cubin = read_cache_file(file, key)) {
            CompiledKernel kernel;
            kernel.cubin = std::move(*cubin);
            kernel.from_cache = true;
            remember(memory_key, kernel);
            return kernel;
        }

    // Compiled outside any lock: kernels of different keys compile in parallel.
    CompiledKernel kernel = compile_cuda(source, name, arch);
    if (!file.empty()) write_cache_file(file, key, kernel.cubin);
    remember(memory_key, kernel);
    return kernel;
}

void clear_memory_cubin_cache() {
    MemoryCache& cache = memory_cache();
    std::lock_guard lock(cache.mutex);
    cache.kernels.clear();
}

std::string default_cubin_cache_dir() {
    if (const char* path = std::getenv("QJIT_CUBIN_CACHE")) return path;  // "" disables the disk cache
    // The XDG spec asks that a relative $XDG_CACHE_HOME be ignored.
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/') return concat(xdg, "/qjit/cubin");
    if (const char* home = std::getenv("HOME"); home && *home) return concat(home, "/.cache/qjit/cubin");
    return "";
}

}  // namespace qjit::cuda
