// Builds GGUF files byte by byte for the reader's tests and the fuzz seeds. Every field is written
// as the format lays it out, little-endian, so a test can also write what no valid file holds: a
// count that lies, an unknown type, an offset that overlaps another tensor.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace qjit::test {

// GGUF's metadata value type numbers.
enum GgufValueTypeNumber : uint32_t {
    kGgufUint8 = 0,
    kGgufInt8 = 1,
    kGgufUint16 = 2,
    kGgufInt16 = 3,
    kGgufUint32 = 4,
    kGgufInt32 = 5,
    kGgufFloat32 = 6,
    kGgufBool = 7,
    kGgufString = 8,
    kGgufArray = 9,
    kGgufUint64 = 10,
    kGgufInt64 = 11,
    kGgufFloat64 = 12,
};

// Byte offsets of the header's fields.
constexpr size_t kGgufVersionAt = 4;
constexpr size_t kGgufTensorCountAt = 8;
constexpr size_t kGgufMetadataCountAt = 16;

template <typename T>
void append_le(std::string* out, T value) {
    if constexpr (std::is_same_v<T, float>) {
        append_le(out, std::bit_cast<uint32_t>(value));
    } else if constexpr (std::is_same_v<T, double>) {
        append_le(out, std::bit_cast<uint64_t>(value));
    } else {
        using Bits = std::make_unsigned_t<T>;
        for (size_t i = 0; i < sizeof(T); ++i) out->push_back(char(uint8_t(Bits(value) >> (8 * i))));
    }
}

// Overwrites sizeof(T) bytes at `at` (a header field, a length) with `value`.
template <typename T>
void patch_le(std::string* file, size_t at, T value) {
    std::string bytes;
    append_le(&bytes, value);
    file->replace(at, bytes.size(), bytes);
}

inline void append_gguf_string(std::string* out, const std::string& text) {
    append_le(out, uint64_t(text.size()));
    out->append(text);
}

template <typename T>
constexpr uint32_t gguf_type_number() {
    if constexpr (std::is_same_v<T, uint8_t>) return kGgufUint8;
    else if constexpr (std::is_same_v<T, int8_t>) return kGgufInt8;
    else if constexpr (std::is_same_v<T, uint16_t>) return kGgufUint16;
    else if constexpr (std::is_same_v<T, int16_t>) return kGgufInt16;
    else if constexpr (std::is_same_v<T, uint32_t>) return kGgufUint32;
    else if constexpr (std::is_same_v<T, int32_t>) return kGgufInt32;
    else if constexpr (std::is_same_v<T, float>) return kGgufFloat32;
    else if constexpr (std::is_same_v<T, bool>) return kGgufBool;
    else if constexpr (std::is_same_v<T, std::string>) return kGgufString;
    else if constexpr (std::is_same_v<T, uint64_t>) return kGgufUint64;
    else if constexpr (std::is_same_v<T, int64_t>) return kGgufInt64;
    else {
        static_assert(std::is_same_v<T, double>, "not a GGUF value type");
        return kGgufFloat64;
    }
}

// The bytes of one value, without its type.
template <typename T>
std::string gguf_payload(const T& value) {
    std::string bytes;
    if constexpr (std::is_same_v<T, std::string>) append_gguf_string(&bytes, value);
    else if constexpr (std::is_same_v<T, bool>) bytes.push_back(value ? 1 : 0);
    else append_le(&bytes, value);
    return bytes;
}

struct GgufTensorSpec {
    std::string name;
    uint32_t type = 0;  // the ggml type number
    std::vector<uint64_t> dims;
    std::string data;
    std::optional<uint64_t> offset;  // in the data section; by default the next aligned place after the last
};

class GgufWriter {
public:
    explicit GgufWriter(uint32_t version = 3) : version_(version) {}

    // Where the data section and the tensors are placed; the file says so only through a
    // general.alignment entry, which the caller writes.
    GgufWriter& place_at_multiples_of(uint64_t alignment) {
        alignment_ = alignment;
        return *this;
    }
    // Header counts that differ from what follows.
    GgufWriter& claim_counts(uint64_t tensors, uint64_t metadata) {
        claimed_tensors_ = tensors;
        claimed_metadata_ = metadata;
        return *this;
    }

    template <typename T>
    GgufWriter& value(const std::string& key, const T& value) {
        return raw(key, gguf_type_number<T>(), gguf_payload(value));
    }
    GgufWriter& value(const std::string& key, const char* text) { return value(key, std::string(text)); }

    template <typename T>
    GgufWriter& array(const std::string& key, const std::vector<T>& values) {
        std::string payload;
        append_le(&payload, gguf_type_number<T>());
        append_le(&payload, uint64_t(values.size()));
        for (const T& element : values) payload += gguf_payload<T>(element);
        return raw(key, kGgufArray, payload);
    }

    // A metadata entry whose type number and value bytes are taken as given.
    GgufWriter& raw(const std::string& key, uint32_t type, const std::string& payload) {
        append_gguf_string(&metadata_, key);
        append_le(&metadata_, type);
        metadata_ += payload;
        ++metadata_count_;
        return *this;
    }

    GgufWriter& tensor(GgufTensorSpec spec) {
        tensors_.push_back(std::move(spec));
        return *this;
    }

    std::string bytes() const {
        std::string file = "GGUF";
        append_le(&file, version_);
        append_le(&file, claimed_tensors_.value_or(tensors_.size()));
        append_le(&file, claimed_metadata_.value_or(metadata_count_));
        file += metadata_;
        std::vector<uint64_t> offsets;
        uint64_t next = 0;
        for (const GgufTensorSpec& spec : tensors_) {
            offsets.push_back(spec.offset.value_or(round_up(next)));
            next = offsets.back() + spec.data.size();
            append_gguf_string(&file, spec.name);
            append_le(&file, uint32_t(spec.dims.size()));
            for (const uint64_t dim : spec.dims) append_le(&file, dim);
            append_le(&file, spec.type);
            append_le(&file, offsets.back());
        }
        // The data section: no padding after the last tensor, so that cutting any byte truncates.
        const size_t data_start = size_t(round_up(file.size()));
        for (size_t i = 0; i < tensors_.size(); ++i) {
            if (tensors_[i].data.empty()) continue;  // a tensor that lies past the end of the file
            const size_t at = data_start + size_t(offsets[i]);
            if (file.size() < at + tensors_[i].data.size()) file.resize(at + tensors_[i].data.size(), '\0');
            file.replace(at, tensors_[i].data.size(), tensors_[i].data);
        }
        return file;
    }

private:
    uint64_t round_up(uint64_t at) const { return (at + alignment_ - 1) / alignment_ * alignment_; }

    uint32_t version_;
    uint64_t alignment_ = 32;
    std::optional<uint64_t> claimed_tensors_, claimed_metadata_;
    std::string metadata_;
    uint64_t metadata_count_ = 0;
    std::vector<GgufTensorSpec> tensors_;
};

}  // namespace qjit::test
