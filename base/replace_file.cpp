#include "base/replace_file.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.hpp"

namespace qjit {

FileReplacement::FileReplacement(std::string path) : path_(std::move(path)) {
    static std::atomic<unsigned> counter{0};
    temporary_ = concat(path_, ".tmp.", getpid(), ".", counter++);
    file_ = std::fopen(temporary_.c_str(), "wb");
    if (!file_) fail(QJIT_ERROR_IO, "cannot create '", temporary_, "': ", std::strerror(errno));
}

FileReplacement::~FileReplacement() {
    if (file_ == nullptr) return;  // committed, or failed and cleaned up
    std::fclose(file_);
    std::remove(temporary_.c_str());
}

void FileReplacement::fail_writing(int error) {
    std::fclose(file_);
    file_ = nullptr;
    std::remove(temporary_.c_str());
    fail(QJIT_ERROR_IO, "cannot write '", temporary_, "': ", std::strerror(error));
}

void FileReplacement::write(const void* data, size_t bytes) {
    require(file_ != nullptr, "the replacement of '", path_, "' is closed");
    if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) fail_writing(errno);
    offset_ += bytes;
}

void FileReplacement::write_zeros(size_t bytes) {
    static const std::vector<char> zeros(4096, 0);
    for (size_t left = bytes; left > 0;) {
        const size_t piece = std::min(left, zeros.size());
        write(zeros.data(), piece);
        left -= piece;
    }
}

void FileReplacement::commit() {
    require(file_ != nullptr, "the replacement of '", path_, "' is closed");
    if (std::fflush(file_) != 0 || fsync(fileno(file_)) != 0) fail_writing(errno);
    const int closed = std::fclose(file_);
    const int close_errno = errno;
    file_ = nullptr;
    if (closed != 0) {
        std::remove(temporary_.c_str());
        fail(QJIT_ERROR_IO, "cannot write '", temporary_, "': ", std::strerror(close_errno));
    }
    if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
        const int rename_errno = errno;
        std::remove(temporary_.c_str());
        fail(QJIT_ERROR_IO, "cannot rename '", temporary_, "' to '", path_, "': ", std::strerror(rename_errno));
    }
}

void replace_file(const std::string& path, std::string_view bytes) {
    FileReplacement replacement(path);
    replacement.write(bytes.data(), bytes.size());
    replacement.commit();
}

}  // namespace qjit
