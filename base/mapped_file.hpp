// A file mapped read-only into memory. Checkpoint tensors are read in place from the mapping, so
// opening a checkpoint costs no copy and only the pages a layer reads are ever loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qjit {

class MappedFile {
public:
    // Whether every page is mapped at once (MAP_POPULATE: one pass of the kernel over a file
    // that is read whole, instead of a fault per page), or each on its first read.
    enum class Pages { OnFirstRead, AllNow };

    // Throws QJIT_ERROR_IO naming the path when it cannot be opened, is not a regular file, or
    // cannot be mapped. An empty file maps to size() 0 and a null data().
    explicit MappedFile(const std::string& path, Pages pages = Pages::OnFirstRead);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

    // Drops the mapping's pages that lie wholly inside [at, at + bytes) from this process's memory
    // (they stay in the page cache, and a later read maps them again): for bytes read once, such
    // as a weight tensor made into a layer, so that they do not count in the resident size. A
    // range outside the mapping is ignored.
    void release(const uint8_t* at, size_t bytes) const;

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace qjit
