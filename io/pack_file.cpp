#include "io/pack_file.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "io/framed_file.hpp"
#include "io/json_integer.hpp"

namespace qjit {

namespace {

constexpr char kMagic[8] = {'Q', 'J', 'I', 'T', 'P', 'A', 'C', 'K'};
constexpr size_t kPreambleBytes = sizeof kMagic + 2 * sizeof(uint32_t);
constexpr size_t kTrailerBytes = 2 * sizeof(uint64_t) + sizeof(uint32_t);
constexpr size_t kMaxEntries = size_t(1) << 20;

template <typename T>
T read_value(const uint8_t* at) {
    T value;
    std::memcpy(&value, at, sizeof value);
    return value;
}

PackSection read_section(const nlohmann::json& json, uint64_t body_end) {
    constexpr int64_t kMaxOffset = std::numeric_limits<int64_t>::max();
    PackSection s{uint64_t(json_integer_field(json, "offset", 0, kMaxOffset)),
                  uint64_t(json_integer_field(json, "bytes", 0, kMaxOffset)),
                  uint32_t(json_integer_field(json, "crc32c", 0, std::numeric_limits<uint32_t>::max()))};
    require(s.offset >= kPreambleBytes && s.offset % kPackAlignment == 0, "a section starts at ", s.offset,
            ", not a multiple of ", kPackAlignment, " inside the body");
    require(s.offset <= body_end && s.bytes <= body_end - s.offset, "a section of ", s.bytes, " bytes at ", s.offset,
            " runs past the sections' end at ", body_end);
    return s;
}

// Sections may not share bytes: each belongs to one buffer. (An empty one holds none.)
void require_apart(std::vector<PackSection> sections) {
    std::erase_if(sections, [](const PackSection& s) { return s.bytes == 0; });
    std::sort(sections.begin(), sections.end(), [](const PackSection& a, const PackSection& b) { return a.offset < b.offset; });
    for (size_t i = 1; i < sections.size(); ++i)
        require(sections[i - 1].offset + sections[i - 1].bytes <= sections[i].offset, "sections at ",
                sections[i - 1].offset, " and ", sections[i].offset, " overlap");
}

}  // namespace

std::optional<uint32_t> pack_table_checksum(const uint8_t* image, size_t bytes) {
    constexpr size_t kPlaceBytes = 2 * sizeof(uint64_t);
    if (bytes < kPreambleBytes + kPlaceBytes) return std::nullopt;
    const uint8_t* place = image + bytes - kPlaceBytes;
    const uint64_t table_offset = read_value<uint64_t>(place), table_bytes = read_value<uint64_t>(place + 8);
    if (table_offset < kPreambleBytes || table_offset > bytes - kPlaceBytes ||
        table_bytes != bytes - kPlaceBytes - table_offset)
        return std::nullopt;
    return crc32(place, kPlaceBytes, crc32(image + table_offset, table_bytes));
}

PackWriter::PackWriter(std::string path, std::string source) : file_(std::move(path)), source_(std::move(source)) {
    file_.write(kMagic, sizeof kMagic);
    const uint32_t words[2] = {kPackFileVersion, 0};
    file_.write(words, sizeof words);
}

PackSection PackWriter::write_section(const void* data, size_t bytes) {
    file_.write_zeros(size_t((kPackAlignment - file_.offset() % kPackAlignment) % kPackAlignment));
    PackSection section{file_.offset(), bytes, crc32c(data, bytes)};
    file_.write(data, bytes);
    return section;
}

void PackWriter::add_entry(std::string name, nlohmann::json fields, std::vector<PackSection> sections) {
    const auto at = std::lower_bound(names_.begin(), names_.end(), name);
    require(at == names_.end() || *at != name, "the pack has an entry named '", name, "' already");
    names_.insert(at, name);
    nlohmann::json entry = {{"name", std::move(name)}, {"fields", std::move(fields)}, {"sections", nlohmann::json::array()}};
    for (const PackSection& s : sections)
        entry["sections"].push_back({{"offset", s.offset}, {"bytes", s.bytes}, {"crc32c", s.crc32c}});
    entries_.push_back(std::move(entry));
}

void PackWriter::commit() {
    const std::string table = nlohmann::json{{"source", source_}, {"entries", entries_}}.dump();
    const uint64_t place[2] = {file_.offset(), table.size()};
    file_.write(table.data(), table.size());
    file_.write(place, sizeof place);
    const uint32_t crc = crc32(place, sizeof place, crc32(table.data(), table.size()));
    file_.write(&crc, sizeof crc);
    file_.commit();
}

std::shared_ptr<const PackFile> PackFile::open(const std::string& path) {
    auto mapping = std::make_shared<const MappedFile>(path, MappedFile::Pages::AllNow);
    const uint8_t* data = mapping->data();
    const size_t size = mapping->size();
    return parse(data, size, std::move(mapping), path);
}

std::shared_ptr<const PackFile> PackFile::parse(const uint8_t* data, size_t size, std::shared_ptr<const void> keeper,
                                                const std::string& name) {
    auto pack = std::make_shared<PackFile>();
    pack->path_ = name;
    pack->data_ = data;
    pack->keeper_ = std::move(keeper);
    try {
        if (size < kPreambleBytes + kTrailerBytes)
            fail(QJIT_ERROR_CORRUPT_DATA, "file is ", size, " bytes, too short for a qjit pack (truncated?)");
        if (std::memcmp(data, kMagic, sizeof kMagic) != 0) fail(QJIT_ERROR_CORRUPT_DATA, "not a qjit pack file (bad magic)");
        const uint32_t version = read_value<uint32_t>(data + sizeof kMagic);
        if (version != kPackFileVersion)
            fail(QJIT_ERROR_UNSUPPORTED, "pack file format version ", version, "; this qjit reads version ",
                 kPackFileVersion);
        const uint8_t* place = data + size - kTrailerBytes;
        const uint64_t table_offset = read_value<uint64_t>(place), table_bytes = read_value<uint64_t>(place + 8);
        const std::optional<uint32_t> crc = pack_table_checksum(data, size - sizeof(uint32_t));
        if (!crc)
            fail(QJIT_ERROR_CORRUPT_DATA, "the table's place (", table_bytes, " bytes at ", table_offset,
                 ") does not fit the file's ", size, " bytes (truncated?)");
        if (read_value<uint32_t>(place + 16) != *crc)
            fail(QJIT_ERROR_CORRUPT_DATA, "the table's checksum does not match: the file is corrupt");
        pack->table_ = JsonDocument(std::string_view(reinterpret_cast<const char*>(data) + table_offset, table_bytes),
                                    "the table");
        const nlohmann::json& table = pack->table_.root();
        reading_contents([&] {
            pack->source_ = table.at("source").get<std::string>();
            const nlohmann::json& entries = table.at("entries");
            require(entries.is_array() && entries.size() <= kMaxEntries, "entries is not an array of at most ",
                    kMaxEntries);
            std::vector<PackSection> all;
            std::vector<std::string> names;
            for (const nlohmann::json& e : entries) {
                PackEntry entry{e.at("name").get<std::string>(), &e.at("fields"), {}};
                require(entry.fields->is_object(), "the fields of entry '", entry.name, "' are not an object");
                const nlohmann::json& sections = e.at("sections");
                require(sections.is_array(), "the sections of entry '", entry.name, "' are not an array");
                for (const nlohmann::json& s : sections) entry.sections.push_back(read_section(s, table_offset));
                all.insert(all.end(), entry.sections.begin(), entry.sections.end());
                names.push_back(entry.name);
                pack->entries_.push_back(std::move(entry));
            }
            std::sort(names.begin(), names.end());
            const auto twice = std::adjacent_find(names.begin(), names.end());
            require(twice == names.end(), "two entries are named '", twice == names.end() ? "" : *twice, "'");
            require_apart(std::move(all));
        });
    } catch (const Error& e) {
        fail(e.status(), "'", name, "': ", e.what());
    }
    return pack;
}

const PackEntry* PackFile::find(const std::string& name) const {
    for (const PackEntry& entry : entries_)
        if (entry.name == name) return &entry;
    return nullptr;
}

bool PackFile::intact(const PackSection& section) const {
    return crc32c(data(section), section.bytes) == section.crc32c;
}

}  // namespace qjit
