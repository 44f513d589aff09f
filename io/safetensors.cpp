#include "io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/error.hpp"
#include "io/json_document.hpp"
#include "io/json_integer.hpp"

namespace qjit {

namespace {

// A header is metadata: real ones are kilobytes to a few megabytes.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

template <typename... Parts>
[[noreturn]] void corrupt(const std::string& file_name, Parts&&... parts) {
    fail(QJIT_ERROR_CORRUPT_DATA, "safetensors file '", file_name, "': ", std::forward<Parts>(parts)...);
}

// A JSON number that is a non-negative integer (not a float, not negative).
bool read_count(const nlohmann::json& value, uint64_t* out) {
    const std::optional<int64_t> count = json_integer(value, 0, std::numeric_limits<int64_t>::max());
    if (count) *out = uint64_t(*count);
    return count.has_value();
}

struct Extent {
    uint64_t begin, end;
    const std::string* name;
};

SafetensorsTensor read_entry(const std::string& name, const nlohmann::json& entry, const uint8_t* data,
                             uint64_t data_bytes, const std::string& file_name, std::vector<Extent>* extents) {
    if (!entry.is_object()) corrupt(file_name, "tensor '", name, "' is not a JSON object");
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string()) corrupt(file_name, "tensor '", name, "' has no string \"dtype\"");
    if (shape == entry.end() || !shape->is_array()) corrupt(file_name, "tensor '", name, "' has no \"shape\" list");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2)
        corrupt(file_name, "tensor '", name, "' has no \"data_offsets\" pair");

    SafetensorsTensor tensor;
    tensor.dtype = dtype->get<std::string>();
    uint64_t elements = 1;
    for (const nlohmann::json& extent : *shape) {
        uint64_t size = 0;
        if (!read_count(extent, &size))
            corrupt(file_name, "tensor '", name, "' has a shape entry ", extent.dump(), " that is not a count");
        if (size != 0 && elements > std::numeric_limits<uint64_t>::max() / size)
            corrupt(file_name, "tensor '", name, "' has a shape whose size overflows");
        elements *= size;
        tensor.shape.push_back(int64_t(size));
    }
    uint64_t begin = 0, end = 0;
    if (!read_count((*offsets)[0], &begin) || !read_count((*offsets)[1], &end) || begin > end)
        corrupt(file_name, "tensor '", name, "' has data_offsets ", offsets->dump(), "; expected [begin, end], begin <= end");
    if (end > data_bytes)
        corrupt(file_name, "tensor '", name, "' has data_offsets [", begin, ", ", end, "] past the end of the data (",
                data_bytes, " bytes): the file is truncated or the offsets are wrong");
    const uint64_t element_bytes = safetensors_dtype_bytes(tensor.dtype);
    if (element_bytes != 0 && (elements > std::numeric_limits<uint64_t>::max() / element_bytes ||
                               end - begin != elements * element_bytes))
        corrupt(file_name, "tensor '", name, "' holds ", end - begin, " bytes; its dtype ", tensor.dtype, " and shape ",
                shape->dump(), " need ", elements, " x ", element_bytes);
    tensor.data = data + begin;
    tensor.bytes = size_t(end - begin);
    extents->push_back({begin, end, &name});
    return tensor;
}

}  // namespace

size_t safetensors_dtype_bytes(const std::string& dtype) {
    if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
    if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
    if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
    if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
    return 0;
}

std::map<std::string, SafetensorsTensor> parse_safetensors(const uint8_t* file, size_t size,
                                                           const std::string& file_name) {
    if (size < 8) corrupt(file_name, "the file is ", size, " bytes, shorter than the 8-byte header length");
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | file[i];  // little-endian
    if (header_bytes > size - 8)
        corrupt(file_name, "the header is ", header_bytes, " bytes, larger than the ", size - 8,
                " bytes after its length: the file is truncated or not safetensors");
    if (header_bytes > kMaxHeaderBytes)
        corrupt(file_name, "the header is ", header_bytes, " bytes; more than ", kMaxHeaderBytes, " is not a header");

    const JsonDocument document(std::string_view(reinterpret_cast<const char*>(file) + 8, header_bytes),
                                "safetensors file '" + file_name + "': the header");
    const nlohmann::json& header = document.root();
    if (!header.is_object()) corrupt(file_name, "the header is not a JSON object");

    const uint8_t* data = file + 8 + header_bytes;
    const uint64_t data_bytes = size - 8 - header_bytes;
    std::map<std::string, SafetensorsTensor> tensors;
    std::vector<Extent> extents;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") continue;
        const auto [where, inserted] = tensors.emplace(name, SafetensorsTensor{});
        where->second = read_entry(where->first, entry, data, data_bytes, file_name, &extents);
    }
    // Empty tensors hold no bytes and overlap nothing; among the others, sorted by start, each must
    // start at or after the end of the one before.
    std::erase_if(extents, [](const Extent& e) { return e.begin == e.end; });
    std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < extents.size(); ++i)
        if (extents[i].begin < extents[i - 1].end)
            corrupt(file_name, "tensors '", *extents[i - 1].name, "' [", extents[i - 1].begin, ", ", extents[i - 1].end,
                    ") and '", *extents[i].name, "' [", extents[i].begin, ", ", extents[i].end, ") overlap");
    return tensors;
}

}  // namespace qjit
