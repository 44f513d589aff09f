#include "runtime/flash/storage.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "base/error.hpp"

namespace qjit {

void check_read_requests(const Storage& storage, std::span<const ReadRequest> requests, int queue_depth) {
    require(queue_depth >= 1, storage.describe(), ": queue depth ", queue_depth, " is not positive");
    const int64_t block = storage.block_size();
    const int64_t size = storage.size();
    for (const ReadRequest& r : requests) {
        require(r.length > 0, storage.describe(), ": read at offset ", r.offset, " has length ", r.length);
        require(r.offset >= 0 && r.offset % block == 0, storage.describe(), ": read offset ", r.offset,
                " is not a multiple of the block size ", block);
        require(r.length % block == 0, storage.describe(), ": read at offset ", r.offset, " has length ", r.length,
                ", not a multiple of the block size ", block);
        require(r.buffer != nullptr && reinterpret_cast<uintptr_t>(r.buffer) % uint64_t(block) == 0,
                storage.describe(), ": buffer of the read at offset ", r.offset, " is not aligned to ", block, " bytes");
        if (r.offset > size || r.length > size - r.offset)
            fail(QJIT_ERROR_IO, storage.describe(), ": read past end of file at offset ", r.offset, " (length ",
                 r.length, ", size ", size, ")");
    }
}

namespace {

class MemoryStorage final : public Storage {
public:
    MemoryStorage(std::string bytes, int64_t block_size) : bytes_(std::move(bytes)), block_size_(block_size) {
        require(block_size > 0, "memory storage: block size ", block_size, " is not positive");
    }
    int64_t size() const override { return int64_t(bytes_.size()); }
    int64_t block_size() const override { return block_size_; }
    void read(std::span<const ReadRequest> requests, int queue_depth) override {
        check_read_requests(*this, requests, queue_depth);
        for (const ReadRequest& r : requests) {
            std::memcpy(r.buffer, bytes_.data() + r.offset, size_t(r.length));
            counters_.bytes_read += r.length;
            ++counters_.reads;
        }
    }
    std::string describe() const override { return concat("memory (", bytes_.size(), " bytes)"); }

private:
    std::string bytes_;
    int64_t block_size_;
};

class Fd {
public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }

private:
    int fd_;
};

[[noreturn]] void fail_page_cache(const std::string& path, const char* what) {
    fail(QJIT_ERROR_IO, "page cache of ", path, ": ", what, " failed: ", std::strerror(errno));
}

}  // namespace

std::unique_ptr<Storage> make_memory_storage(std::string bytes, int64_t block_size) {
    return std::make_unique<MemoryStorage>(std::move(bytes), block_size);
}

double page_cache_fraction(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) fail_page_cache(path, "open");
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) fail_page_cache(path, "fstat");
    if (st.st_size == 0) return 0.0;
    void* map = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd.get(), 0);
    if (map == MAP_FAILED) fail_page_cache(path, "mmap");
    const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    const size_t pages = (size_t(st.st_size) + page - 1) / page;
    std::unique_ptr<unsigned char[]> resident;
    try {
        resident.reset(new unsigned char[pages]);
    } catch (...) {
        ::munmap(map, size_t(st.st_size));
        throw;
    }
    const int rc = ::mincore(map, size_t(st.st_size), resident.get());
    const int saved = errno;
    ::munmap(map, size_t(st.st_size));
    errno = saved;
    if (rc != 0) fail_page_cache(path, "mincore");
    size_t cached = 0;
    for (size_t i = 0; i < pages; ++i) cached += resident[i] & 1;
    return double(cached) / double(pages);
}

double drop_from_page_cache(const std::string& path) {
    {
        Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (fd.get() < 0) fail_page_cache(path, "open");
        if (::fdatasync(fd.get()) != 0) fail_page_cache(path, "fdatasync");
        // posix_fadvise returns the error instead of setting errno.
        if (const int rc = ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED); rc != 0) {
            errno = rc;
            fail_page_cache(path, "posix_fadvise(DONTNEED)");
        }
    }
    return page_cache_fraction(path);
}

void AlignedFree::operator()(void* p) const { std::free(p); }

std::unique_ptr<uint8_t[], AlignedFree> aligned_buffer(int64_t bytes, int64_t alignment) {
    require(bytes >= 0, "aligned buffer: size ", bytes, " is negative");
    require(alignment > 0 && (alignment & (alignment - 1)) == 0 && alignment % int64_t(sizeof(void*)) == 0,
            "aligned buffer: alignment ", alignment, " is not a power of two multiple of ", sizeof(void*));
    const int64_t rounded = std::max<int64_t>(alignment, (bytes + alignment - 1) / alignment * alignment);
    void* p = nullptr;
    if (::posix_memalign(&p, size_t(alignment), size_t(rounded)) != 0) throw std::bad_alloc();
    return std::unique_ptr<uint8_t[], AlignedFree>(static_cast<uint8_t*>(p));
}

}  // namespace qjit
