// Writing a file so that readers see the old contents or the new, never a mix: the bytes go to a
// temporary file beside it, which is flushed to disk and renamed over it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace qjit {

// QJIT_ERROR_IO naming the file and the reason; an existing file is left as it was.
void replace_file(const std::string& path, std::string_view bytes);

// The same for a file written piece by piece (one too large to hold in memory whole). Until
// commit() succeeds, the file at `path` is untouched; a replacement destroyed uncommitted removes
// its temporary file. Every failure is QJIT_ERROR_IO naming the file.
class FileReplacement {
public:
    explicit FileReplacement(std::string path);
    ~FileReplacement();
    FileReplacement(const FileReplacement&) = delete;
    FileReplacement& operator=(const FileReplacement&) = delete;

    void write(const void* data, size_t bytes);
    void write_zeros(size_t bytes);
    uint64_t offset() const { return offset_; }  // bytes written so far
    // Flushes the temporary file to disk and renames it over the path.
    void commit();

private:
    [[noreturn]] void fail_writing(int error);

    std::string path_, temporary_;
    FILE* file_ = nullptr;
    uint64_t offset_ = 0;
};

}  // namespace qjit
