// The GGUF file format (llama.cpp's model files, versions 2 and 3), read in place from a mapped file.
//
//   magic "GGUF", version (uint32), tensor count (uint64), metadata count (uint64)
//   metadata: key (string), value type (uint32), value      strings are a uint64 length + bytes
//   tensor infos: name, dimension count (uint32), dimensions (uint64 each, innermost first),
//                 ggml type (uint32), offset (uint64, from the start of the data section)
//   padding to `general.alignment` (default 32), then the data section
//
// Every count, length and offset is checked against the file before it is used: a file that is
// truncated, declares more entries than it could hold, has a tensor outside the data section or
// overlapping another, an unaligned tensor, an unknown value or tensor type, or a tensor whose
// innermost dimension is not a whole number of its type's blocks is refused with
// QJIT_ERROR_CORRUPT_DATA naming the file and what is wrong. Nothing of a refused file is returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace qjit {

// ggml's tensor types, by the numbers GGUF stores (ggml.h's enum ggml_type).
enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

// "Q4_K", "F32", ...; "type 31" for a number ggml does not define.
std::string ggml_type_name(GgmlType type);

// Values per block and bytes per block of a type (1 and the element size for F32, F16, BF16 and the
// integer types); false for a number ggml does not define.
struct GgmlBlock {
    int64_t values = 0;
    int64_t bytes = 0;
};
bool ggml_block_of(GgmlType type, GgmlBlock* block);

// One metadata value. Arrays hold values of one type (GGUF forbids nested arrays of mixed types;
// nested arrays are refused).
struct GgufValue;
using GgufArray = std::vector<GgufValue>;
struct GgufValue {
    std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, uint64_t, int64_t,
                 double, std::shared_ptr<const GgufArray>>
        value;
};

struct GgufTensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    std::vector<int64_t> dims;      // innermost first, as GGUF stores them (a weight is [in, out]: dims[0] = K)
    const uint8_t* data = nullptr;  // inside the file's mapping
    size_t bytes = 0;

    int64_t elements() const;
    int64_t rows() const { return elements() / dims.at(0); }  // the product of dims[1..]
};

class MappedFile;

class GgufFile {
public:
    // Maps and parses `path`: QJIT_ERROR_IO when it cannot be opened, QJIT_ERROR_CORRUPT_DATA as
    // above.
    static std::shared_ptr<const GgufFile> open(const std::string& path);
    // Parses a file already in memory (tests and the fuzzer); `data` must outlive the result.
    static std::shared_ptr<const GgufFile> parse(const uint8_t* data, size_t size, const std::string& file_name);

    uint32_t version() const { return version_; }
    const std::string& file_name() const { return file_name_; }
    const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
    const std::vector<GgufTensor>& tensors() const { return tensors_; }

    // The tensor of that name, or nullptr.
    const GgufTensor* find(const std::string& name) const;
    // The tensor of that name; QJIT_ERROR_CORRUPT_DATA naming it when absent.
    const GgufTensor& tensor(const std::string& name) const;
    // Drops a tensor's pages of the file mapping from memory until it is read again
    // (MappedFile::release): for a tensor read once into a layer. Nothing for a parsed buffer.
    void release(const GgufTensor& tensor) const;

    bool has(const std::string& key) const { return metadata_.count(key) != 0; }
    // A metadata value of the expected kind; QJIT_ERROR_CORRUPT_DATA naming the key when it is
    // absent or of another type. get_uint accepts any unsigned or non-negative signed integer type,
    // get_float float32 or float64.
    uint64_t get_uint(const std::string& key) const;
    double get_float(const std::string& key) const;
    const std::string& get_string(const std::string& key) const;
    bool get_bool(const std::string& key) const;
    // Arrays, under the same rules: of strings (a vocabulary), of float32 (token scores),
    // of integers (token types; get_int_array accepts any integer type whose values fit int64).
    std::vector<std::string> get_string_array(const std::string& key) const;
    std::vector<float> get_float_array(const std::string& key) const;
    std::vector<int64_t> get_int_array(const std::string& key) const;

private:
    GgufFile() = default;
    void read_contents(const uint8_t* data, size_t size);
    const GgufValue& value_of(const std::string& key) const;
    const GgufArray& array_of(const std::string& key) const;

    std::shared_ptr<const MappedFile> mapping_;  // null for parse()
    std::string file_name_;
    uint32_t version_ = 0;
    std::map<std::string, GgufValue> metadata_;
    std::vector<GgufTensor> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

}  // namespace qjit
