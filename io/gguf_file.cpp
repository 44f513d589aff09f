#include "io/gguf_file.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "base/error.hpp"
#include "base/mapped_file.hpp"

namespace qjit {

namespace {

constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
// Metadata arrays are vocabularies, merges and scores: a few hundred thousand values at most. Each
// value takes tens of bytes in memory, so the cap bounds what one array can make the reader allocate.
constexpr uint64_t kMaxArrayValues = uint64_t(1) << 24;

// GGUF's metadata value types, by the numbers the file stores (gguf.h's enum gguf_type).
enum class ValueType : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };
constexpr uint32_t kValueTypes = 13;

const char* value_type_name(ValueType type) {
    static constexpr const char* names[kValueTypes] = {"uint8",  "int8",   "uint16", "int16", "uint32",
                                                       "int32",  "float32", "bool",  "string", "array",
                                                       "uint64", "int64",  "float64"};
    return names[uint32_t(type)];
}

// The type a parsed value holds, by the variant's alternatives (whose order is not the file's).
const char* held_type_name(const GgufValue& value) {
    using enum ValueType;
    static constexpr ValueType held[] = {U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, U64, I64, F64, ARRAY};
    static_assert(std::size(held) == std::variant_size_v<decltype(GgufValue::value)>);
    return value_type_name(held[value.value.index()]);
}

// The fewest bytes a value of `type` takes in the file: what bounds a count by the bytes left.
uint64_t min_value_bytes(ValueType type) {
    switch (type) {
        case ValueType::U8:
        case ValueType::I8:
        case ValueType::BOOL: return 1;
        case ValueType::U16:
        case ValueType::I16: return 2;
        case ValueType::U32:
        case ValueType::I32:
        case ValueType::F32: return 4;
        case ValueType::U64:
        case ValueType::I64:
        case ValueType::F64:
        case ValueType::STRING: return 8;  // the length
        case ValueType::ARRAY: return 12;  // the element type and the count
    }
    return 1;
}

// Key length, value type and the smallest value (an empty key is refused by name later).
constexpr uint64_t kMinMetadataBytes = 8 + 4 + 1;
// Name length, dimension count, one dimension, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

struct TypeInfo {
    GgmlType type;
    const char* name;
    GgmlBlock block;
};

// ggml.c's type_traits: values per block (blck_size) and bytes per block (type_size, the
// ggml-common.h block structs).
constexpr TypeInfo kTypes[] = {
    {GgmlType::F32, "F32", {1, 4}},           {GgmlType::F16, "F16", {1, 2}},
    {GgmlType::Q4_0, "Q4_0", {32, 18}},       {GgmlType::Q4_1, "Q4_1", {32, 20}},
    {GgmlType::Q5_0, "Q5_0", {32, 22}},       {GgmlType::Q5_1, "Q5_1", {32, 24}},
    {GgmlType::Q8_0, "Q8_0", {32, 34}},       {GgmlType::Q8_1, "Q8_1", {32, 36}},
    {GgmlType::Q2_K, "Q2_K", {256, 84}},      {GgmlType::Q3_K, "Q3_K", {256, 110}},
    {GgmlType::Q4_K, "Q4_K", {256, 144}},     {GgmlType::Q5_K, "Q5_K", {256, 176}},
    {GgmlType::Q6_K, "Q6_K", {256, 210}},     {GgmlType::Q8_K, "Q8_K", {256, 292}},
    {GgmlType::IQ2_XXS, "IQ2_XXS", {256, 66}}, {GgmlType::IQ2_XS, "IQ2_XS", {256, 74}},
    {GgmlType::IQ3_XXS, "IQ3_XXS", {256, 98}}, {GgmlType::IQ1_S, "IQ1_S", {256, 50}},
    {GgmlType::IQ4_NL, "IQ4_NL", {32, 18}},   {GgmlType::IQ3_S, "IQ3_S", {256, 110}},
    {GgmlType::IQ2_S, "IQ2_S", {256, 82}},    {GgmlType::IQ4_XS, "IQ4_XS", {256, 136}},
    {GgmlType::I8, "I8", {1, 1}},             {GgmlType::I16, "I16", {1, 2}},
    {GgmlType::I32, "I32", {1, 4}},           {GgmlType::I64, "I64", {1, 8}},
    {GgmlType::F64, "F64", {1, 8}},           {GgmlType::IQ1_M, "IQ1_M", {256, 56}},
    {GgmlType::BF16, "BF16", {1, 2}},         {GgmlType::TQ1_0, "TQ1_0", {256, 54}},
    {GgmlType::TQ2_0, "TQ2_0", {256, 66}},    {GgmlType::MXFP4, "MXFP4", {32, 17}},
};

const TypeInfo* find_type(GgmlType type) {
    for (const TypeInfo& info : kTypes)
        if (info.type == type) return &info;
    return nullptr;
}

// A bounded little-endian cursor over the file. Every read checks the bytes left first; every
// error names the file and the entry being read (set_entry), so a message says what is wrong where.
class Reader {
public:
    Reader(const uint8_t* data, size_t size, const std::string& file_name)
        : data_(data), size_(size), file_name_(file_name) {}

    size_t offset() const { return offset_; }
    size_t left() const { return size_ - offset_; }
    void set_entry(std::string entry) { entry_ = std::move(entry); }

    template <typename... Parts>
    [[noreturn]] void corrupt(Parts&&... parts) const {
        fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "': ", entry_, entry_.empty() ? "" : ": ",
             std::forward<Parts>(parts)...);
    }

    const uint8_t* bytes(uint64_t count, const char* what) {
        if (count > left())
            corrupt("truncated: ", what, " needs ", count, " bytes at byte ", offset_, ", and the file ends at byte ",
                    size_);
        const uint8_t* at = data_ + offset_;
        offset_ += size_t(count);
        return at;
    }
    uint64_t little_endian(size_t count, const char* what) {
        const uint8_t* at = bytes(count, what);
        uint64_t bits = 0;
        for (size_t i = count; i-- > 0;) bits = bits << 8 | at[i];
        return bits;
    }
    uint8_t u8(const char* what) { return uint8_t(little_endian(1, what)); }
    uint16_t u16(const char* what) { return uint16_t(little_endian(2, what)); }
    uint32_t u32(const char* what) { return uint32_t(little_endian(4, what)); }
    uint64_t u64(const char* what) { return little_endian(8, what); }

    std::string string(const char* what) {
        const uint64_t length = u64(what);
        if (length > left())
            corrupt(what, " is ", length, " bytes long, more than the ", left(), " bytes left in the file");
        const uint8_t* at = bytes(length, what);
        return std::string(reinterpret_cast<const char*>(at), size_t(length));
    }

    // A count of entries taking `min_bytes` or more each: no more than the bytes left could hold,
    // so that a hostile count fails here instead of sizing an allocation.
    uint64_t count(uint64_t min_bytes, const char* what) {
        const uint64_t count = u64(what);
        if (count > left() / min_bytes)
            corrupt(what, " is ", count, ", more than the ", left(), " bytes left could hold at ", min_bytes,
                    " bytes or more each");
        return count;
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t offset_ = 0;
    const std::string& file_name_;
    std::string entry_;
};

// A value type number read as `what`, refused when GGUF does not define it.
ValueType read_value_type(Reader& in, const char* what) {
    const uint32_t number = in.u32(what);
    if (number >= kValueTypes) in.corrupt(what, " ", number, " is unknown (GGUF value types are 0 to 12)");
    return ValueType(number);
}

GgufValue read_value(Reader& in, ValueType type);

GgufValue read_array(Reader& in) {
    const ValueType element_type = read_value_type(in, "the array's element type");
    if (element_type == ValueType::ARRAY) in.corrupt("an array of arrays (nested arrays are not supported)");
    const uint64_t count = in.count(min_value_bytes(element_type), "the array's length");
    if (count > kMaxArrayValues)
        in.corrupt("the array holds ", count, " ", value_type_name(element_type), " values; more than ",
                   kMaxArrayValues, " is not metadata");
    auto array = std::make_shared<GgufArray>();
    array->reserve(size_t(count));  // bounded by the bytes left, which hold every value
    for (uint64_t i = 0; i < count; ++i) array->push_back(read_value(in, element_type));
    return GgufValue{std::shared_ptr<const GgufArray>(std::move(array))};
}

GgufValue read_value(Reader& in, ValueType type) {
    constexpr const char* what = "the value";
    switch (type) {
        case ValueType::U8: return GgufValue{in.u8(what)};
        case ValueType::I8: return GgufValue{int8_t(in.u8(what))};
        case ValueType::U16: return GgufValue{in.u16(what)};
        case ValueType::I16: return GgufValue{int16_t(in.u16(what))};
        case ValueType::U32: return GgufValue{in.u32(what)};
        case ValueType::I32: return GgufValue{int32_t(in.u32(what))};
        case ValueType::F32: return GgufValue{std::bit_cast<float>(in.u32(what))};
        case ValueType::BOOL: {
            const uint8_t byte = in.u8(what);
            if (byte > 1) in.corrupt("a bool holds ", int(byte), ", not 0 or 1");
            return GgufValue{byte == 1};
        }
        case ValueType::STRING: return GgufValue{in.string("a string")};
        case ValueType::ARRAY: return read_array(in);
        case ValueType::U64: return GgufValue{in.u64(what)};
        case ValueType::I64: return GgufValue{int64_t(in.u64(what))};
        case ValueType::F64: return GgufValue{std::bit_cast<double>(in.u64(what))};
    }
    in.corrupt("the value type ", uint32_t(type), " is unknown");
}

// Versions 2 and 3 share one layout (3 only allows big-endian files, which are refused here).
uint32_t read_version(Reader& in) {
    const uint8_t* magic = in.bytes(4, "the magic");
    if (std::memcmp(magic, kMagic, 4) != 0) in.corrupt("the file does not start with \"GGUF\": it is not a GGUF file");
    const uint32_t version = in.u32("the version");
    if (version == 1) in.corrupt("version 1 (GGUFv1, uint32 counts) is not supported; versions 2 and 3 are");
    const uint32_t swapped = (version >> 24) | (version >> 8 & 0xff00u) | (version << 8 & 0xff0000u) | (version << 24);
    if (version != 0 && (version & 0xffffu) == 0)
        in.corrupt("the version reads as ", version, ", which is version ", swapped,
                   " byte-swapped: big-endian GGUF files are not supported");
    if (version != 2 && version != 3) in.corrupt("version ", version, " is not supported; versions 2 and 3 are");
    return version;
}

uint32_t alignment_of(const std::map<std::string, GgufValue>& metadata, const Reader& in) {
    const auto found = metadata.find("general.alignment");
    if (found == metadata.end()) return kDefaultAlignment;
    const uint32_t* alignment = std::get_if<uint32_t>(&found->second.value);
    if (alignment == nullptr)
        in.corrupt("general.alignment is of type ", held_type_name(found->second), "; GGUF requires a uint32");
    if (!std::has_single_bit(*alignment)) in.corrupt("general.alignment is ", *alignment, ", not a power of two");
    return *alignment;
}

// One tensor info: name, dimensions, type and offset, each checked as it is read.
GgufTensor read_tensor_info(Reader& in, uint32_t alignment, uint64_t* offset) {
    GgufTensor tensor;
    const uint32_t dim_count = in.u32("the dimension count");
    if (dim_count < 1 || dim_count > kMaxDims)
        in.corrupt("it has ", dim_count, " dimensions; a GGUF tensor has 1 to ", kMaxDims);
    uint64_t elements = 1;
    for (uint32_t i = 0; i < dim_count; ++i) {
        const uint64_t dim = in.u64("a dimension");
        if (dim == 0) in.corrupt("dimension ", i, " is 0");
        if (dim > uint64_t(std::numeric_limits<int64_t>::max()) / elements)
            in.corrupt("its dimensions hold more than 2^63 - 1 values (the count overflows)");
        elements *= dim;
        tensor.dims.push_back(int64_t(dim));
    }
    const uint32_t type_number = in.u32("the ggml type");
    tensor.type = GgmlType(type_number);
    const TypeInfo* type = find_type(tensor.type);
    if (type == nullptr) in.corrupt("the ggml type ", type_number, " is unknown");
    if (tensor.dims[0] % type->block.values != 0)
        in.corrupt("dims[0] is ", tensor.dims[0], ", not a multiple of the ", type->block.values, " values of a ",
                   type->name, " block");
    const uint64_t blocks = elements / uint64_t(type->block.values);
    if (blocks > std::numeric_limits<size_t>::max() / uint64_t(type->block.bytes))
        in.corrupt("its ", elements, " ", type->name, " values take more bytes than a size_t counts");
    tensor.bytes = size_t(blocks * uint64_t(type->block.bytes));
    *offset = in.u64("the data offset");
    if (*offset % alignment != 0)
        in.corrupt("the data offset ", *offset, " is not a multiple of the alignment (", alignment, ")");
    return tensor;
}

void read_metadata(Reader& in, uint64_t count, std::map<std::string, GgufValue>* metadata) {
    for (uint64_t i = 0; i < count; ++i) {
        in.set_entry(concat("metadata entry ", i));
        std::string key = in.string("the key");
        if (key.empty()) in.corrupt("the key is empty");
        in.set_entry(concat("metadata key '", key, "'"));
        if (metadata->count(key) != 0) in.corrupt("the key appears twice");
        const ValueType type = read_value_type(in, "the value type");
        metadata->emplace(std::move(key), read_value(in, type));
    }
}

// The tensors in file order, indexed by name; returns each one's offset in the data section.
std::vector<uint64_t> read_tensor_infos(Reader& in, uint64_t count, uint32_t alignment,
                                        std::vector<GgufTensor>* tensors, std::map<std::string, size_t>* index) {
    std::vector<uint64_t> offsets;
    for (uint64_t i = 0; i < count; ++i) {
        in.set_entry(concat("tensor info ", i));
        std::string name = in.string("the name");
        in.set_entry(concat("tensor '", name, "'"));
        if (index->count(name) != 0) in.corrupt("the name appears twice");
        uint64_t offset = 0;
        GgufTensor tensor = read_tensor_info(in, alignment, &offset);
        tensor.name = std::move(name);
        index->emplace(tensor.name, tensors->size());
        tensors->push_back(std::move(tensor));
        offsets.push_back(offset);
    }
    return offsets;
}

// The data section starts at the next multiple of the alignment after the tensor infos. Each
// tensor must lie inside the file (the padding after the last one may be cut off) and overlap no
// other; then it points into `data`.
void place_tensors(const Reader& in, const uint8_t* data, size_t size, uint32_t alignment,
                   const std::vector<uint64_t>& offsets, std::vector<GgufTensor>* tensors) {
    const uint64_t data_start = (uint64_t(in.offset()) + alignment - 1) / alignment * alignment;
    const uint64_t data_bytes = data_start <= size ? size - data_start : 0;
    struct Extent {
        uint64_t begin, end;
        const std::string* name;
    };
    std::vector<Extent> extents;
    for (size_t i = 0; i < tensors->size(); ++i) {
        GgufTensor& tensor = (*tensors)[i];
        if (offsets[i] > data_bytes || tensor.bytes > data_bytes - offsets[i])
            in.corrupt("tensor '", tensor.name, "' (", tensor.bytes, " bytes at offset ", offsets[i],
                       " of the data section, which starts at byte ", data_start, ") runs past the end of the file (",
                       size, " bytes): the file is truncated or the offset is wrong");
        tensor.data = data + data_start + offsets[i];
        extents.push_back({offsets[i], offsets[i] + tensor.bytes, &tensor.name});
    }
    // Sorted by start, each must start at or after the end of the one before (ties in file order).
    std::stable_sort(extents.begin(), extents.end(),
                     [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < extents.size(); ++i)
        if (extents[i].begin < extents[i - 1].end)
            in.corrupt("tensors '", *extents[i - 1].name, "' [", extents[i - 1].begin, ", ", extents[i - 1].end,
                       ") and '", *extents[i].name, "' [", extents[i].begin, ", ", extents[i].end,
                       ") overlap in the data section");
}

}  // namespace

std::string ggml_type_name(GgmlType type) {
    const TypeInfo* info = find_type(type);
    return info ? std::string(info->name) : concat("type ", uint32_t(type));
}

bool ggml_block_of(GgmlType type, GgmlBlock* block) {
    const TypeInfo* info = find_type(type);
    if (info != nullptr) *block = info->block;
    return info != nullptr;
}

int64_t GgufTensor::elements() const {
    int64_t count = 1;
    for (const int64_t dim : dims) count *= dim;
    return count;
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
    auto mapping = std::make_shared<const MappedFile>(path);
    std::shared_ptr<GgufFile> file(new GgufFile());
    file->file_name_ = path;
    file->mapping_ = mapping;
    file->read_contents(mapping->data(), mapping->size());
    return file;
}

std::shared_ptr<const GgufFile> GgufFile::parse(const uint8_t* data, size_t size, const std::string& file_name) {
    std::shared_ptr<GgufFile> file(new GgufFile());
    file->file_name_ = file_name;
    file->read_contents(data, size);
    return file;
}

void GgufFile::read_contents(const uint8_t* data, size_t size) {
    Reader in(data, size, file_name_);
    version_ = read_version(in);
    const uint64_t tensor_count = in.count(kMinTensorInfoBytes, "the tensor count");
    const uint64_t metadata_count = in.count(kMinMetadataBytes, "the metadata count");
    read_metadata(in, metadata_count, &metadata_);
    in.set_entry("");
    const uint32_t alignment = alignment_of(metadata_, in);
    const std::vector<uint64_t> offsets = read_tensor_infos(in, tensor_count, alignment, &tensors_, &tensor_index_);
    in.set_entry("");
    place_tensors(in, data, size, alignment, offsets, &tensors_);
}

const GgufTensor* GgufFile::find(const std::string& name) const {
    const auto found = tensor_index_.find(name);
    return found == tensor_index_.end() ? nullptr : &tensors_[found->second];
}

void GgufFile::release(const GgufTensor& tensor) const {
    if (mapping_) mapping_->release(tensor.data, tensor.bytes);
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
    const GgufTensor* found = find(name);
    if (found == nullptr) fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "' has no tensor '", name, "'");
    return *found;
}

namespace {

// An integer of any width and sign as int64; nullopt for another kind, or a uint64 past 2^63 - 1.
std::optional<int64_t> as_int64(const GgufValue& value) {
    return std::visit(
        [](const auto& held) -> std::optional<int64_t> {
            using T = std::decay_t<decltype(held)>;
            if constexpr (std::is_same_v<T, uint64_t>) {
                if (held > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
                return int64_t(held);
            } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
                return int64_t(held);
            } else {
                return std::nullopt;
            }
        },
        value.value);
}

}  // namespace

const GgufValue& GgufFile::value_of(const std::string& key) const {
    const auto found = metadata_.find(key);
    if (found == metadata_.end())
        fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "' has no metadata key '", key, "'");
    return found->second;
}

const GgufArray& GgufFile::array_of(const std::string& key) const {
    const GgufValue& value = value_of(key);
    const auto* array = std::get_if<std::shared_ptr<const GgufArray>>(&value.value);
    if (array == nullptr)
        fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "': metadata key '", key, "' is of type ",
             held_type_name(value), ", not an array");
    return **array;
}

uint64_t GgufFile::get_uint(const std::string& key) const {
    const GgufValue& value = value_of(key);
    if (const uint64_t* wide = std::get_if<uint64_t>(&value.value)) return *wide;
    const std::optional<int64_t> integer = as_int64(value);
    if (!integer || *integer < 0)
        fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "': metadata key '", key, "' is of type ",
             held_type_name(value), integer ? concat(" holding ", *integer) : std::string(),
             ", not an unsigned integer");
    return uint64_t(*integer);
}

double GgufFile::get_float(const std::string& key) const {
    const GgufValue& value = value_of(key);
    if (const float* narrow = std::get_if<float>(&value.value)) return *narrow;
    if (const double* wide = std::get_if<double>(&value.value)) return *wide;
    fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "': metadata key '", key, "' is of type ",
         held_type_name(value), ", not a float32 or float64");
}

bool GgufFile::get_bool(const std::string& key) const {
    const GgufValue& value = value_of(key);
    const bool* flag = std::get_if<bool>(&value.value);
    if (flag == nullptr)
        fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "': metadata key '", key, "' is of type ",
             held_type_name(value), ", not a bool");
    return *flag;
}

const std::string& GgufFile::get_string(const std::string& key) const {
    const GgufValue& value = value_of(key);
    const std::string* text = std::get_if<std::string>(&value.value);
    if (text == nullptr)
        fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "': metadata key '", key, "' is of type ",
             held_type_name(value), ", not a string");
    return *text;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
    std::vector<std::string> strings;
    for (const GgufValue& element : array_of(key)) {
        const std::string* text = std::get_if<std::string>(&element.value);
        if (text == nullptr)
            fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "': metadata key '", key, "' is an array of ",
                 held_type_name(element), ", not of strings");
        strings.push_back(*text);
    }
    return strings;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
    std::vector<float> values;
    for (const GgufValue& element : array_of(key)) {
        const float* value = std::get_if<float>(&element.value);
        if (value == nullptr)
            fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "': metadata key '", key, "' is an array of ",
                 held_type_name(element), ", not of float32");
        values.push_back(*value);
    }
    return values;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
    std::vector<int64_t> values;
    for (const GgufValue& element : array_of(key)) {
        const std::optional<int64_t> integer = as_int64(element);
        if (!integer)
            fail(QJIT_ERROR_CORRUPT_DATA, "GGUF file '", file_name_, "': metadata key '", key, "' is an array of ",
                 held_type_name(element), ", not of integers that fit an int64");
        values.push_back(*integer);
    }
    return values;
}

}  // namespace qjit
