// The frame qjit's binary files share (layer files, tensor-parallel MLP files), and the way they
// are read: nothing in a file is trusted before its size, magic, version, checksum and header
// agree, and whatever is wrong is reported as corrupt data naming the file.
//
//   8-byte magic
//   u32 version
//   u32 header length H
//   H bytes of JSON     an object: the file's own fields
//   the body            the file's own sections
//   u32 CRC-32          of every byte before it
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "base/mapped_file.hpp"
#include "io/json_document.hpp"

namespace qjit {

struct FileKind {
    const char* magic;  // 8 characters
    const char* name;   // in messages: "layer", "tensor-parallel MLP"
    uint32_t oldest_version, newest_version;
};

// The whole file: the frame around the header and what append_body appends.
std::string write_framed(const FileKind& kind, uint32_t version, const nlohmann::json& header,
                         const std::function<void(std::string&)>& append_body);

struct Frame {
    uint32_t version = 0;
    JsonDocument header;  // an object
    size_t body_begin = 0, body_end = 0;  // the body's bytes in the image
};

// The frame of `image`, checked; QJIT_ERROR_CORRUPT_DATA for a short, foreign, damaged or malformed
// file, QJIT_ERROR_UNSUPPORTED for a version outside the kind's.
Frame read_framed(const FileKind& kind, std::string_view image);

// Runs read(): a header field missing or of the wrong type, and contents that fail their checks
// (an invalid-argument Error), become QJIT_ERROR_CORRUPT_DATA.
template <typename Read>
auto reading_contents(Read&& read) -> decltype(read()) {
    try {
        return read();
    } catch (const nlohmann::json::exception& e) {
        fail(QJIT_ERROR_CORRUPT_DATA, "header is missing a field or has a wrong type: ", e.what());
    } catch (const Error& e) {
        if (e.status() != QJIT_ERROR_INVALID_ARGUMENT) throw;
        fail(QJIT_ERROR_CORRUPT_DATA, "inconsistent contents: ", e.what());
    }
}

// Maps the file at `path` (nothing is allocated for it, and a directory or device is refused before
// a byte is read), runs read(bytes), and names the path in any Error it throws.
template <typename Read>
auto read_mapped(const std::string& path, Read&& read) -> decltype(read(std::string_view())) {
    const MappedFile file(path);
    try {
        return read(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()));
    } catch (const Error& e) {
        fail(e.status(), "'", path, "': ", e.what());
    }
}

}  // namespace qjit
