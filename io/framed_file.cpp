#include "io/framed_file.hpp"

#include <cstring>

#include "base/crc32.hpp"

namespace qjit {

namespace {

constexpr size_t kMagicBytes = 8;
constexpr size_t kPreambleBytes = kMagicBytes + 2 * sizeof(uint32_t);

void append_u32(std::string& out, uint32_t value) { out.append(reinterpret_cast<const char*>(&value), sizeof value); }

uint32_t read_u32(std::string_view image, size_t offset) {
    uint32_t value;
    std::memcpy(&value, image.data() + offset, sizeof value);
    return value;
}

}  // namespace

std::string write_framed(const FileKind& kind, uint32_t version, const nlohmann::json& header,
                         const std::function<void(std::string&)>& append_body) {
    const std::string header_text = header.dump();
    std::string image(kind.magic, kMagicBytes);
    append_u32(image, version);
    append_u32(image, uint32_t(header_text.size()));
    image += header_text;
    append_body(image);
    append_u32(image, crc32(image.data(), image.size()));
    return image;
}

Frame read_framed(const FileKind& kind, std::string_view image) {
    if (image.size() < kPreambleBytes + sizeof(uint32_t))
        fail(QJIT_ERROR_CORRUPT_DATA, "file is ", image.size(), " bytes, too short for a qjit ", kind.name,
             " (truncated?)");
    if (std::memcmp(image.data(), kind.magic, kMagicBytes) != 0)
        fail(QJIT_ERROR_CORRUPT_DATA, "not a qjit ", kind.name, " file (bad magic)");
    Frame frame;
    frame.version = read_u32(image, kMagicBytes);
    if (frame.version < kind.oldest_version || frame.version > kind.newest_version)
        fail(QJIT_ERROR_UNSUPPORTED, kind.name, " file format version ", frame.version, "; this qjit reads versions ",
             kind.oldest_version, " to ", kind.newest_version);
    frame.body_end = image.size() - sizeof(uint32_t);
    if (read_u32(image, frame.body_end) != crc32(image.data(), frame.body_end))
        fail(QJIT_ERROR_CORRUPT_DATA, "checksum mismatch: the file is corrupt or truncated");
    const uint32_t header_bytes = read_u32(image, kMagicBytes + sizeof(uint32_t));
    if (header_bytes > frame.body_end - kPreambleBytes)
        fail(QJIT_ERROR_CORRUPT_DATA, "header length runs past the end of the file");
    frame.header = JsonDocument(image.substr(kPreambleBytes, header_bytes), "header");
    if (!frame.header.root().is_object()) fail(QJIT_ERROR_CORRUPT_DATA, "header is not a JSON object");
    frame.body_begin = kPreambleBytes + header_bytes;
    return frame;
}

}  // namespace qjit
