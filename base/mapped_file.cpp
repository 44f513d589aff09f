#include "base/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"

namespace qjit {

MappedFile::MappedFile(const std::string& path, Pages pages) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(QJIT_ERROR_IO, "cannot open '", path, "': ", std::strerror(errno));
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        const int error = errno;
        ::close(fd);
        fail(QJIT_ERROR_IO, "cannot stat '", path, "': ", std::strerror(error));
    }
    if (!S_ISREG(info.st_mode)) {
        ::close(fd);
        fail(QJIT_ERROR_IO, "'", path, "' is not a regular file");
    }
    size_ = size_t(info.st_size);
    if (size_ > 0) {
        void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | (pages == Pages::AllNow ? MAP_POPULATE : 0), fd, 0);
        if (mapping == MAP_FAILED) {
            const int error = errno;
            ::close(fd);
            fail(QJIT_ERROR_IO, "cannot map '", path, "' (", size_, " bytes): ", std::strerror(error));
        }
        data_ = static_cast<const uint8_t*>(mapping);
    }
    ::close(fd);  // the mapping keeps the file's pages
}

MappedFile::~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(const uint8_t* at, size_t bytes) const {
    if (data_ == nullptr || at < data_ || at > data_ + size_ || bytes > size_t(data_ + size_ - at)) return;
    const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
    const uintptr_t first = (uintptr_t(at) + page - 1) / page * page, end = (uintptr_t(at) + bytes) / page * page;
    // Advice only: a failure leaves the pages mapped, which costs memory, not correctness.
    if (end > first) ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

}  // namespace qjit
