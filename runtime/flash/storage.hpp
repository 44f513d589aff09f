// Where weights live when they are not all in memory: a storage object reads byte ranges into
// caller buffers, many at once. A file on a block device (O_DIRECT through io_uring, or a pool of
// pread calls), host memory, or a test's storage that fails on demand.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace qjit {

struct ReadRequest {
    int64_t offset = 0;  // a multiple of block_size()
    int64_t length = 0;  // a multiple of block_size()
    void* buffer = nullptr;  // aligned to block_size()
};

struct StorageCounters {
    int64_t bytes_read = 0;
    int64_t reads = 0;  // requests completed
};

// A storage object is used by one thread at a time; its reads may run on threads of its own.
class Storage {
public:
    virtual ~Storage() = default;
    virtual int64_t size() const = 0;
    // The alignment of offsets, lengths and buffers every read needs.
    virtual int64_t block_size() const = 0;
    // Reads every request, up to `queue_depth` in flight at once. Throws QJIT_ERROR_IO naming the
    // storage, the offset and the cause on a failed or short read (a request past size() included);
    // the buffers' contents are then unspecified.
    virtual void read(std::span<const ReadRequest> requests, int queue_depth) = 0;
    // "file PATH (io_uring, O_DIRECT, block 4096)", "memory (N bytes)"
    virtual std::string describe() const = 0;
    const StorageCounters& counters() const { return counters_; }

protected:
    StorageCounters counters_;
};

// Throws unless the requests meet `storage`'s contract: QJIT_ERROR_INVALID_ARGUMENT for a queue
// depth < 1, a misaligned offset, length or buffer or a length <= 0, QJIT_ERROR_IO ("read past end of file")
// for a range past size(); the message names the storage and the offset. Every implementation
// checks its requests with it before reading.
void check_read_requests(const Storage& storage, std::span<const ReadRequest> requests, int queue_depth);

enum class ReadEngine : uint8_t {
    Auto,     // io_uring when the kernel allows it, else Pread
    IoUring,  // liburing (refused when qjit is built without it or the kernel refuses)
    Pread,    // a pool of threads calling pread
};

struct FileStorageOptions {
    bool direct = true;  // O_DIRECT: reads from the device, never the page cache
    ReadEngine engine = ReadEngine::Auto;
};

// Opens `path` for reading. Throws QJIT_ERROR_IO naming the path and cause (missing, unreadable,
// O_DIRECT refused by the file system).
std::unique_ptr<Storage> open_file_storage(const std::string& path, const FileStorageOptions& options = {});
// A copy of `bytes` in memory, served with the given block size.
std::unique_ptr<Storage> make_memory_storage(std::string bytes, int64_t block_size = 512);

// Evicts `path` from the page cache (fsync, then POSIX_FADV_DONTNEED) and returns the fraction of
// its pages still cached afterwards (mincore), so a benchmark can show its reads reach the device.
double drop_from_page_cache(const std::string& path);
double page_cache_fraction(const std::string& path);

// A buffer aligned for direct reads, freed with std::free.
struct AlignedFree {
    void operator()(void* p) const;
};
std::unique_ptr<uint8_t[], AlignedFree> aligned_buffer(int64_t bytes, int64_t alignment);

}  // namespace qjit
