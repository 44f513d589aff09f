#include "base/replace_file.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/error.hpp"

namespace qjit {

void replace_file(const std::string& path, std::string_view bytes) {
    static std::atomic<unsigned> counter{0};
    const std::string temporary = concat(path, ".tmp.", getpid(), ".", counter++);
    FILE* file = std::fopen(temporary.c_str(), "wb");
    if (!file) fail(QJIT_ERROR_IO, "cannot create '", temporary, "': ", std::strerror(errno));
    const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size() &&
                         std::fflush(file) == 0 && fsync(fileno(file)) == 0;
    const int write_errno = errno;
    if (std::fclose(file) != 0 || !written) {
        std::remove(temporary.c_str());
        fail(QJIT_ERROR_IO, "cannot write '", temporary, "': ", std::strerror(write_errno));
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
        const int rename_errno = errno;
        std::remove(temporary.c_str());
        fail(QJIT_ERROR_IO, "cannot rename '", temporary, "' to '", path, "': ", std::strerror(rename_errno));
    }
}

}  // namespace qjit
