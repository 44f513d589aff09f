// Pack files: a model's layers as their kernels read them, written once and memory-mapped at later
// starts instead of rebuilt (runtime/layer_pack.hpp says what an entry holds). This file is the
// container: named entries, each with JSON fields and byte sections, and the checks that come
// before anything in it is trusted.
//
// Layout (little-endian):
//   "QJITPACK"        8-byte magic
//   u32 version       kPackFileVersion
//   u32 zero
//   sections          each at a multiple of kPackAlignment (the gaps are zero bytes), so that a
//                     mapped section is page-aligned, as the kernels' panels are
//   the table         JSON at offset T, L bytes: {"source": "...", "entries": [{"name": "...",
//                     "fields": {...}, "sections": [{"offset", "bytes", "crc32c"}, ...]}, ...]}
//   u64 T, u64 L      the table's place
//   u32 CRC-32        of the table and the two u64 before it
// The file's size is T + L + 20. "source" names what the pack was made from (the caller's key:
// a stale pack is one whose source differs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/mapped_file.hpp"
#include "base/replace_file.hpp"
#include "io/json_document.hpp"

namespace qjit {

// Version 2: 6-bit super-block scale codes are packed four to three bytes in the panels.
inline constexpr uint32_t kPackFileVersion = 2;
inline constexpr uint64_t kPackAlignment = 4096;

struct PackSection {
    uint64_t offset = 0;
    uint64_t bytes = 0;
    uint32_t crc32c = 0;  // of its bytes (base/crc32.hpp)
};

struct PackEntry {
    std::string name;
    const nlohmann::json* fields = nullptr;  // an object: the entry's own description, in the pack's table
    std::vector<PackSection> sections;
};

// Writes a pack beside its path and renames it over the path at commit(): an existing pack stays
// whole until then, and a writer destroyed uncommitted leaves it as it was. QJIT_ERROR_IO for a
// file that cannot be written; QJIT_ERROR_INVALID_ARGUMENT for a name given twice.
class PackWriter {
public:
    PackWriter(std::string path, std::string source);

    PackSection write_section(const void* data, size_t bytes);
    void add_entry(std::string name, nlohmann::json fields, std::vector<PackSection> sections);
    void commit();

private:
    FileReplacement file_;
    std::string source_;
    nlohmann::json entries_ = nlohmann::json::array();
    std::vector<std::string> names_;  // sorted, to refuse a name given twice
};

// The CRC-32 a pack image ends with, for the image's first `bytes` bytes (everything but the
// CRC): of its table and the table's place, when that place lies inside them (fuzz targets append
// it to their inputs); nullopt when it does not.
std::optional<uint32_t> pack_table_checksum(const uint8_t* image, size_t bytes);

// A pack mapped read-only, every page at once. Opening checks the frame and the table: the size,
// magic and version, the table's checksum and fields, every section inside the body, aligned and
// apart from the others, names unique. The sections' own checksums are checked by intact(), which
// callers run (on many threads) before trusting a section. QJIT_ERROR_IO when the file cannot be
// opened; QJIT_ERROR_CORRUPT_DATA (naming the file) when any check fails; QJIT_ERROR_UNSUPPORTED for
// another version.
class PackFile {
public:
    static std::shared_ptr<const PackFile> open(const std::string& path);
    // The same over bytes already in memory (tests and the fuzz target); `keeper` keeps them alive.
    static std::shared_ptr<const PackFile> parse(const uint8_t* data, size_t size, std::shared_ptr<const void> keeper,
                                                 const std::string& name);

    const std::string& path() const { return path_; }
    const std::string& source() const { return source_; }
    const std::vector<PackEntry>& entries() const { return entries_; }
    const PackEntry* find(const std::string& name) const;

    const uint8_t* data(const PackSection& section) const { return data_ + section.offset; }
    bool intact(const PackSection& section) const;
    // What keeps the bytes mapped: borrowed buffers of a section hold it (base/page_buffer.hpp).
    const std::shared_ptr<const void>& keeper() const { return keeper_; }

private:
    std::string path_, source_;
    const uint8_t* data_ = nullptr;
    std::shared_ptr<const void> keeper_;
    JsonDocument table_;
    std::vector<PackEntry> entries_;  // in file order; their fields lie in table_
};

}  // namespace qjit
