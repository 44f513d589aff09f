// File storage: O_DIRECT reads through one io_uring per storage object, or a pool of threads
// calling pread.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#ifdef QJIT_HAVE_LIBURING
#include <liburing.h>
#endif

#include "base/error.hpp"
#include "runtime/flash/storage.hpp"

namespace qjit {
namespace {

constexpr int kMaxRingDepth = 256;
constexpr int64_t kMaxUringRead = int64_t(1) << 30;  // a longer request goes as several reads
constexpr int kMaxPreadThreads = 64;

// What the engines share: the open file and how to report a failed read.
struct OpenFile {
    OpenFile() = default;
    OpenFile(const OpenFile&) = delete;
    OpenFile& operator=(const OpenFile&) = delete;
    ~OpenFile() {
        if (fd >= 0) ::close(fd);
    }

    std::string path;
    int fd = -1;
    std::string description;  // describe()

    [[noreturn]] void fail_read(int64_t offset, int error) const {
        fail(QJIT_ERROR_IO, description, ": read at offset ", offset, " failed: ", std::strerror(error));
    }
    [[noreturn]] void fail_short(int64_t offset, int64_t got, int64_t length) const {
        fail(QJIT_ERROR_IO, description, ": read past end of file at offset ", offset, " (got ", got, " of ", length,
             " bytes)");
    }
};

// Threads that claim requests from a shared index, each calling pread until its request is done.
// Created on first use and kept; the first error of a batch wins and is rethrown by run().
class PreadPool {
public:
    explicit PreadPool(const OpenFile& file) : file_(file) {}
    ~PreadPool() {
        {
            std::lock_guard lock(mutex_);
            stop_ = true;
        }
        start_.notify_all();
        for (std::thread& t : threads_) t.join();
    }

    // Throws the first error once every thread has stopped.
    void run(std::span<const ReadRequest> requests, int queue_depth, StorageCounters& counters) {
        const int workers = int(std::min<size_t>({size_t(queue_depth), size_t(kMaxPreadThreads), requests.size()}));
        if (workers == 0) return;
        std::unique_lock lock(mutex_);
        while (int(threads_.size()) < workers) {
            const int index = int(threads_.size());
            threads_.emplace_back([this, index] { work(index); });
        }
        requests_ = requests;
        next_.store(0, std::memory_order_relaxed);
        failed_.store(false, std::memory_order_relaxed);
        error_ = nullptr;
        bytes_ = 0;
        completed_ = 0;
        participants_ = workers;
        running_ = workers;
        ++generation_;
        start_.notify_all();
        done_.wait(lock, [&] { return running_ == 0; });
        counters.bytes_read += bytes_;
        counters.reads += completed_;
        if (error_) std::rethrow_exception(error_);
    }

private:
    void work(int index) {
        uint64_t seen = 0;
        std::unique_lock lock(mutex_);
        for (;;) {
            start_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            if (index >= participants_) continue;
            lock.unlock();
            int64_t bytes = 0, completed = 0;
            std::exception_ptr error;
            try {
                for (size_t i; !failed_.load(std::memory_order_relaxed) &&
                               (i = next_.fetch_add(1, std::memory_order_relaxed)) < requests_.size();) {
                    read_one(requests_[i]);
                    bytes += requests_[i].length;
                    ++completed;
                }
            } catch (...) {
                error = std::current_exception();
                failed_.store(true, std::memory_order_relaxed);
            }
            lock.lock();
            bytes_ += bytes;
            completed_ += completed;
            if (error && !error_) error_ = error;
            if (--running_ == 0) done_.notify_one();
        }
    }

    void read_one(const ReadRequest& r) const {
        int64_t done = 0;
        while (done < r.length) {
            const ssize_t got = ::pread(file_.fd, static_cast<char*>(r.buffer) + done, size_t(r.length - done),
                                        off_t(r.offset + done));
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) file_.fail_read(r.offset + done, errno);
            if (got == 0) file_.fail_short(r.offset, done, r.length);
            done += got;
        }
    }

    const OpenFile& file_;
    std::mutex mutex_;
    std::condition_variable start_, done_;
    std::vector<std::thread> threads_;
    // The batch, guarded by mutex_ (requests_ is only written while no worker runs).
    std::span<const ReadRequest> requests_;
    uint64_t generation_ = 0;
    int participants_ = 0;
    int running_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
    int64_t bytes_ = 0, completed_ = 0;
    std::atomic<size_t> next_{0};
    std::atomic<bool> failed_{false};
};

#ifdef QJIT_HAVE_LIBURING
// One ring; keeps up to queue_depth reads in flight, refilling as completions arrive and
// resubmitting the rest of a short read.
class UringReader {
public:
    // Returns 0, or the negative errno of io_uring_queue_init.
    int init() {
        const int rc = io_uring_queue_init(kMaxRingDepth, &ring_, 0);
        ready_ = rc == 0;
        return rc;
    }
    ~UringReader() {
        if (ready_) io_uring_queue_exit(&ring_);
    }

    void run(const OpenFile& file, std::span<const ReadRequest> requests, int queue_depth, StorageCounters& counters) {
        const int depth = std::min(queue_depth, kMaxRingDepth);
        std::vector<int64_t> done(requests.size(), 0);
        size_t next = 0, finished = 0;
        int in_flight = 0;
        std::exception_ptr error;  // the first; in-flight reads are drained before it is thrown
        auto submit = [&](size_t i) {
            io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: in_flight <= depth <= entries
            const ReadRequest& r = requests[i];
            const auto length = unsigned(std::min<int64_t>(r.length - done[i], kMaxUringRead));
            io_uring_prep_read(sqe, file.fd, static_cast<char*>(r.buffer) + done[i], length, uint64_t(r.offset + done[i]));
            sqe->user_data = i;
            ++in_flight;
        };
        if (broken_) fail(QJIT_ERROR_IO, file.description, ": its io_uring failed to submit earlier");
        while (finished < requests.size() || in_flight > 0) {
            while (!error && in_flight < depth && next < requests.size()) submit(next++);
            if (error) {
                // Wait only for reads the kernel took; the rest stay queued in a ring now unusable.
                if (in_flight == int(io_uring_sq_ready(&ring_))) {
                    broken_ = in_flight > 0;
                    break;
                }
                io_uring_cqe* unused = nullptr;
                io_uring_wait_cqe(&ring_, &unused);
            } else if (const int rc = io_uring_submit_and_wait(&ring_, 1);
                       rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
                error = capture([&] { file.fail_read(requests[next - 1].offset, -rc); });
                continue;
            }
            io_uring_cqe* cqe = nullptr;
            while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
                const size_t i = size_t(cqe->user_data);
                const int res = cqe->res;
                io_uring_cqe_seen(&ring_, cqe);
                --in_flight;
                const ReadRequest& r = requests[i];
                if (res == -EINTR || res == -EAGAIN) {
                    if (!error) submit(i);
                } else if (res < 0) {
                    if (!error) error = capture([&] { file.fail_read(r.offset + done[i], -res); });
                } else if (res == 0) {
                    if (!error) error = capture([&] { file.fail_short(r.offset, done[i], r.length); });
                } else if ((done[i] += res) < r.length) {
                    if (!error) submit(i);
                } else {
                    ++finished;
                    counters.bytes_read += r.length;
                    ++counters.reads;
                }
            }
        }
        if (error) std::rethrow_exception(error);
    }

private:
    template <typename Throw>
    static std::exception_ptr capture(Throw&& body) {
        try {
            body();
        } catch (...) {
            return std::current_exception();
        }
        return nullptr;
    }

    io_uring ring_{};
    bool ready_ = false;
    bool broken_ = false;
};
#endif

class FileStorage final : public Storage {
public:
    FileStorage(const std::string& path, const FileStorageOptions& options) : pool_(file_) {
        file_.path = path;
        file_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (options.direct ? O_DIRECT : 0));
        if (file_.fd < 0) {
            const int error = errno;
            if (error == EINVAL && options.direct)
                fail(QJIT_ERROR_IO, "cannot open ", path, ": the file system refuses O_DIRECT (", std::strerror(error), ")");
            fail(QJIT_ERROR_IO, "cannot open ", path, ": ", std::strerror(error));
        }
        struct stat st{};
        if (::fstat(file_.fd, &st) != 0) fail_with_errno("fstat");
        size_ = st.st_size;
        if (S_ISBLK(st.st_mode)) {
            uint64_t bytes = 0;
            if (::ioctl(file_.fd, BLKGETSIZE64, &bytes) != 0) fail_with_errno("ioctl(BLKGETSIZE64)");
            size_ = int64_t(bytes);
        }
        block_size_ = options.direct ? direct_alignment(S_ISBLK(st.st_mode)) : 512;
        choose_engine(options.engine);
        file_.description = concat("file ", path, " (", uring_ ? "io_uring" : "pread", options.direct ? ", O_DIRECT" : "",
                                   ", block ", block_size_, ")");
    }
    int64_t size() const override { return size_; }
    int64_t block_size() const override { return block_size_; }
    std::string describe() const override { return file_.description; }

    void read(std::span<const ReadRequest> requests, int queue_depth) override {
        check_read_requests(*this, requests, queue_depth);
#ifdef QJIT_HAVE_LIBURING
        if (uring_) return uring_->run(file_, requests, queue_depth, counters_);
#endif
        pool_.run(requests, queue_depth, counters_);
    }

private:
    [[noreturn]] void fail_with_errno(const char* what) const {
        const int error = errno;
        fail(QJIT_ERROR_IO, file_.path, ": ", what, " failed: ", std::strerror(error));
    }

    // What O_DIRECT needs of offsets and buffers: statx's DIOALIGN where the kernel reports it, a
    // block device's logical block size, else 4096.
    int64_t direct_alignment(bool block_device) const {
#ifdef STATX_DIOALIGN
        struct statx sx{};
        if (::statx(file_.fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
            if (sx.stx_dio_offset_align == 0)
                fail(QJIT_ERROR_IO, "cannot open ", file_.path, ": the file system refuses O_DIRECT for it");
            return std::max<int64_t>(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
        }
#endif
        int logical = 0;
        if (block_device && ::ioctl(file_.fd, BLKSSZGET, &logical) == 0 && logical > 0) return logical;
        return 4096;
    }

    void choose_engine(ReadEngine engine) {
        if (engine == ReadEngine::Pread) return;
#ifdef QJIT_HAVE_LIBURING
        auto ring = std::make_unique<UringReader>();
        if (const int rc = ring->init(); rc == 0) {
            uring_ = std::move(ring);
            return;
        } else if (engine == ReadEngine::IoUring) {
            fail(QJIT_ERROR_UNSUPPORTED, "io_uring for ", file_.path, " refused: io_uring_queue_init: ", std::strerror(-rc));
        }
#else
        if (engine == ReadEngine::IoUring)
            fail(QJIT_ERROR_UNSUPPORTED, "io_uring for ", file_.path, ": qjit was built without liburing");
#endif
    }

    OpenFile file_;
    int64_t size_ = 0;
    int64_t block_size_ = 512;
#ifdef QJIT_HAVE_LIBURING
    std::unique_ptr<UringReader> uring_;
#else
    static constexpr bool uring_ = false;
#endif
    PreadPool pool_;
};

}  // namespace

std::unique_ptr<Storage> open_file_storage(const std::string& path, const FileStorageOptions& options) {
    return std::make_unique<FileStorage>(path, options);
}

}  // namespace qjit
