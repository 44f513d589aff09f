// The GGUF reader (io/gguf_file.cpp) on files built byte by byte (tests/gguf_writer.hpp):
// every value type read back, tensors found where they lie, and each malformed file refused with
// QJIT_ERROR_CORRUPT_DATA naming the file and the problem.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "io/gguf_file.hpp"
#include "gguf_writer.hpp"
#include "test_support.hpp"

namespace qjit {
namespace {

using test::GgufTensorSpec;
using test::GgufWriter;

constexpr uint32_t kF32 = 0, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12;

std::shared_ptr<const GgufFile> parse(const std::string& bytes) {
    return GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test.gguf");
}

// Expects the file refused with QJIT_ERROR_CORRUPT_DATA and a message naming the file and `problem`.
void expect_refused(const std::string& bytes, const std::string& problem) {
    try {
        parse(bytes);
        ADD_FAILURE() << "a file with " << problem << " was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << e.what();
        EXPECT_NE(std::string(e.what()).find("'test.gguf'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(problem), std::string::npos) << "'" << e.what() << "' does not say '"
                                                                          << problem << "'";
    }
}

// Expects `call` to throw QJIT_ERROR_CORRUPT_DATA with a message containing each of `words`.
template <typename Call>
void expect_corrupt_call(Call&& call, std::initializer_list<const char*> words) {
    try {
        call();
        ADD_FAILURE() << "no error; expected one naming " << *words.begin();
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << e.what();
        for (const char* word : words) EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
}

std::string bytes_counting_from(uint8_t first, size_t count) {
    std::string bytes;
    for (size_t i = 0; i < count; ++i) bytes.push_back(char(uint8_t(first + i)));
    return bytes;
}

GgufTensorSpec f32_tensor(const std::string& name, std::vector<uint64_t> dims, uint8_t first_byte) {
    uint64_t elements = 1;
    for (const uint64_t dim : dims) elements *= dim;
    return {name, kF32, std::move(dims), bytes_counting_from(first_byte, size_t(elements * 4)), std::nullopt};
}

// A small file of every feature the reader has: metadata of several types and three tensors
// (F32, Q4_0 and Q8_0), none of whose sizes is a multiple of the alignment.
std::string small_file(uint32_t version) {
    return GgufWriter(version)
        .value("general.architecture", "llama")
        .value("llama.block_count", uint32_t(2))
        .array("tokenizer.ggml.tokens", std::vector<std::string>{"<s>", "a", "bc"})
        .tensor(f32_tensor("norm.weight", {3}, 1))
        .tensor({"blk.0.weight", kQ4_0, {32, 2}, bytes_counting_from(50, 36), std::nullopt})
        .tensor({"blk.1.weight", kQ8_0, {64}, bytes_counting_from(90, 68), std::nullopt})
        .bytes();
}

TEST(GgufFile, ReadsEveryValueTypeAndArrays) {
    for (const uint32_t version : {2u, 3u}) {
        SCOPED_TRACE(version);
        const std::string bytes = GgufWriter(version)
                                      .value("u8", uint8_t(200))
                                      .value("i8", int8_t(-100))
                                      .value("u16", uint16_t(60000))
                                      .value("i16", int16_t(-30000))
                                      .value("u32", uint32_t(4000000000u))
                                      .value("i32", int32_t(-2000000000))
                                      .value("f32", 1.5f)
                                      .value("yes", true)
                                      .value("no", false)
                                      .value("text", "héllo")
                                      .value("u64", uint64_t(1) << 63)
                                      .value("i64", int64_t(-1) << 40)
                                      .value("f64", 0.1)
                                      .value("positive_i32", int32_t(7))
                                      .array("strings", std::vector<std::string>{"a", "", "ccc"})
                                      .array("scores", std::vector<float>{-1.0f, 0.25f})
                                      .array("types", std::vector<int32_t>{1, -2, 3})
                                      .array("bytes", std::vector<uint8_t>{9, 8})
                                      .array("flags", std::vector<bool>{true, false})
                                      .array("wide", std::vector<uint64_t>{uint64_t(1) << 63})
                                      .array("doubles", std::vector<double>{2.5})
                                      .array("empty", std::vector<int64_t>{})
                                      .bytes();
        const auto file = parse(bytes);
        EXPECT_EQ(file->version(), version);
        EXPECT_EQ(file->metadata().size(), 22u);
        EXPECT_TRUE(file->tensors().empty());
        EXPECT_EQ(file->get_uint("u8"), 200u);
        EXPECT_EQ(file->get_uint("u16"), 60000u);
        EXPECT_EQ(file->get_uint("u32"), 4000000000u);
        EXPECT_EQ(file->get_uint("u64"), uint64_t(1) << 63);
        EXPECT_EQ(file->get_uint("positive_i32"), 7u);
        EXPECT_EQ(std::get<int8_t>(file->metadata().at("i8").value), -100);
        EXPECT_EQ(std::get<int16_t>(file->metadata().at("i16").value), -30000);
        EXPECT_EQ(std::get<int32_t>(file->metadata().at("i32").value), -2000000000);
        EXPECT_EQ(std::get<int64_t>(file->metadata().at("i64").value), int64_t(-1) << 40);
        EXPECT_TRUE(std::get<bool>(file->metadata().at("yes").value));
        EXPECT_FALSE(std::get<bool>(file->metadata().at("no").value));
        EXPECT_EQ(file->get_float("f32"), 1.5);
        EXPECT_EQ(file->get_float("f64"), 0.1);
        EXPECT_EQ(file->get_string("text"), "héllo");
        EXPECT_TRUE(file->has("text"));
        EXPECT_FALSE(file->has("absent"));
        EXPECT_EQ(file->get_string_array("strings"), (std::vector<std::string>{"a", "", "ccc"}));
        EXPECT_EQ(file->get_float_array("scores"), (std::vector<float>{-1.0f, 0.25f}));
        EXPECT_EQ(file->get_int_array("types"), (std::vector<int64_t>{1, -2, 3}));
        EXPECT_EQ(file->get_int_array("bytes"), (std::vector<int64_t>{9, 8}));
        EXPECT_TRUE(file->get_int_array("empty").empty());
        const GgufArray& flags = *std::get<std::shared_ptr<const GgufArray>>(file->metadata().at("flags").value);
        ASSERT_EQ(flags.size(), 2u);
        EXPECT_TRUE(std::get<bool>(flags[0].value));
        EXPECT_FALSE(std::get<bool>(flags[1].value));
        const GgufArray& doubles = *std::get<std::shared_ptr<const GgufArray>>(file->metadata().at("doubles").value);
        EXPECT_EQ(std::get<double>(doubles.at(0).value), 2.5);
    }
}

TEST(GgufFile, FindsTensorsWithTheirDataPointers) {
    for (const uint32_t version : {2u, 3u}) {
        SCOPED_TRACE(version);
        const std::string bytes = small_file(version);
        const auto file = parse(bytes);
        const uint8_t* base = reinterpret_cast<const uint8_t*>(bytes.data());
        ASSERT_EQ(file->tensors().size(), 3u);
        // Header 24 bytes, metadata 45 + 33 + 75, tensor infos 43 + 52 + 44: 316, so the data starts at 320.
        const size_t data_start = 320;
        const GgufTensor& norm = file->tensor("norm.weight");
        EXPECT_EQ(norm.type, GgmlType::F32);
        EXPECT_EQ(norm.dims, (std::vector<int64_t>{3}));
        EXPECT_EQ(norm.bytes, 12u);
        EXPECT_EQ(norm.data, base + data_start);
        EXPECT_EQ(norm.elements(), 3);
        EXPECT_EQ(norm.rows(), 1);
        const GgufTensor& q4 = file->tensor("blk.0.weight");
        EXPECT_EQ(q4.type, GgmlType::Q4_0);
        EXPECT_EQ(q4.dims, (std::vector<int64_t>{32, 2}));
        EXPECT_EQ(q4.bytes, 36u);
        EXPECT_EQ(q4.data, base + data_start + 32);  // after the 12 bytes of norm.weight, aligned
        EXPECT_EQ(q4.rows(), 2);
        EXPECT_EQ(q4.data[0], 50);
        const GgufTensor* q8 = file->find("blk.1.weight");
        ASSERT_NE(q8, nullptr);
        EXPECT_EQ(q8->data, base + data_start + 96);
        EXPECT_EQ(q8->bytes, 68u);
        EXPECT_EQ(q8->data + q8->bytes, base + bytes.size());
        EXPECT_EQ(file->tensors()[2].name, "blk.1.weight");  // in file order
        EXPECT_EQ(file->find("absent"), nullptr);
        expect_corrupt_call([&] { file->tensor("absent"); }, {"test.gguf", "no tensor 'absent'"});
    }
}

TEST(GgufFile, HonoursGeneralAlignment) {
    const std::string bytes = GgufWriter()
                                  .place_at_multiples_of(64)
                                  .value("general.alignment", uint32_t(64))
                                  .tensor(f32_tensor("a", {5}, 0))
                                  .tensor(f32_tensor("b", {2, 2}, 100))
                                  .bytes();
    const auto file = parse(bytes);
    const uint8_t* base = reinterpret_cast<const uint8_t*>(bytes.data());
    EXPECT_EQ((file->tensor("a").data - base) % 64, 0);
    EXPECT_EQ(file->tensor("b").data - file->tensor("a").data, 64);
    EXPECT_EQ(file->tensor("b").data[0], 100);
}

TEST(GgufFile, OpensAFileOnDisk) {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("qjit_gguf_" + std::to_string(getpid()) + ".gguf");
    test::write_file(path, small_file(3));
    const auto file = GgufFile::open(path.string());
    std::filesystem::remove(path);  // the mapping keeps the data
    EXPECT_EQ(file->file_name(), path.string());
    EXPECT_EQ(file->get_string("general.architecture"), "llama");
    EXPECT_EQ(file->tensor("blk.1.weight").data[67], uint8_t(90 + 67));
    try {
        GgufFile::open(path.string());
        ADD_FAILURE() << "a missing file opened";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_IO) << e.what();
    }
}

TEST(GgufFile, RefusesEveryTruncation) {
    for (const uint32_t version : {2u, 3u}) {
        const std::string bytes = small_file(version);
        for (size_t length = 0; length < bytes.size(); ++length) {
            SCOPED_TRACE(length);
            try {
                parse(bytes.substr(0, length));
                ADD_FAILURE() << "a file cut to " << length << " of " << bytes.size() << " bytes was accepted";
            } catch (const Error& e) {
                EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << e.what();
                const std::string message = e.what();
                EXPECT_TRUE(message.find("truncated") != std::string::npos ||
                            message.find("bytes left") != std::string::npos)
                    << message;
            }
        }
        EXPECT_NO_THROW(parse(bytes));
    }
}

TEST(GgufFile, RefusesHugeCounts) {
    const std::string valid = small_file(3);
    std::string bytes = valid;
    test::patch_le(&bytes, test::kGgufTensorCountAt, uint64_t(1) << 60);
    expect_refused(bytes, "the tensor count is 1152921504606846976, more than the");
    bytes = valid;
    test::patch_le(&bytes, test::kGgufMetadataCountAt, uint64_t(1) << 60);
    expect_refused(bytes, "the metadata count is 1152921504606846976");
    bytes = valid;
    test::patch_le(&bytes, test::kGgufMetadataCountAt, ~uint64_t(0));
    expect_refused(bytes, "the metadata count is 18446744073709551615");

    // The first key's length, then an array's length, then a string inside it.
    bytes = valid;
    test::patch_le(&bytes, 24, uint64_t(1) << 60);
    expect_refused(bytes, "metadata entry 0: the key is 1152921504606846976 bytes long");
    std::string array = GgufWriter().array("tokens", std::vector<std::string>{"x"}).bytes();
    const size_t length_at = 24 + 8 + 6 + 4 + 4;  // header, key, value type, element type
    test::patch_le(&array, length_at, uint64_t(1) << 60);
    expect_refused(array, "metadata key 'tokens': the array's length is 1152921504606846976");
    array = GgufWriter().array("tokens", std::vector<std::string>{"x"}).bytes();
    test::patch_le(&array, length_at + 8, uint64_t(-1));
    expect_refused(array, "a string is 18446744073709551615 bytes long");

    // An array the file does hold, but longer than any metadata.
    const std::vector<uint8_t> many((size_t(1) << 24) + 1, 7);
    expect_refused(GgufWriter().array("many", many).bytes(), "the array holds 16777217 uint8 values");
}

TEST(GgufFile, RefusesBadMagicAndVersions) {
    const std::string valid = small_file(3);
    std::string bytes = valid;
    bytes[3] = 'G';
    expect_refused(bytes, "does not start with \"GGUF\"");
    expect_refused("", "truncated: the magic needs 4 bytes at byte 0");
    const auto with_version = [&](uint32_t version) {
        std::string edited = valid;
        test::patch_le(&edited, test::kGgufVersionAt, version);
        return edited;
    };
    expect_refused(with_version(1), "version 1 (GGUFv1");
    expect_refused(with_version(0x03000000u), "version 3 byte-swapped: big-endian GGUF files are not supported");
    expect_refused(with_version(0x02000000u), "big-endian");
    expect_refused(with_version(4), "version 4 is not supported");
    expect_refused(with_version(0), "version 0 is not supported");
}

TEST(GgufFile, RefusesUnknownAndMalformedValues) {
    expect_refused(GgufWriter().raw("odd", 13, "").bytes(), "metadata key 'odd': the value type 13 is unknown");
    std::string element_type;
    test::append_le(&element_type, uint32_t(13));
    test::append_le(&element_type, uint64_t(0));
    expect_refused(GgufWriter().raw("odd", test::kGgufArray, element_type).bytes(), "element type 13 is unknown");
    std::string nested;
    test::append_le(&nested, uint32_t(test::kGgufArray));
    test::append_le(&nested, uint64_t(0));
    expect_refused(GgufWriter().raw("nested", test::kGgufArray, nested).bytes(), "nested arrays are not supported");
    expect_refused(GgufWriter().raw("flag", test::kGgufBool, std::string(1, '\2')).bytes(),
                   "metadata key 'flag': a bool holds 2, not 0 or 1");
    expect_refused(GgufWriter().value("", uint8_t(1)).bytes(), "metadata entry 0: the key is empty");
    expect_refused(GgufWriter().value("k", uint8_t(1)).value("k", "again").bytes(),
                   "metadata key 'k': the key appears twice");
}

TEST(GgufFile, RefusesBadTensorInfos) {
    const auto with_tensor = [](uint32_t type, std::vector<uint64_t> dims, std::string data = std::string()) {
        return GgufWriter().tensor({"t", type, std::move(dims), std::move(data), std::nullopt}).bytes();
    };
    expect_refused(with_tensor(31, {4}), "tensor 't': the ggml type 31 is unknown");
    expect_refused(with_tensor(4, {32}), "the ggml type 4 is unknown");  // Q4_2, removed from ggml
    expect_refused(with_tensor(kF32, {}), "tensor 't': it has 0 dimensions; a GGUF tensor has 1 to 4");
    expect_refused(with_tensor(kF32, {1, 1, 1, 1, 1}), "it has 5 dimensions");
    expect_refused(with_tensor(kF32, {4, 0}), "tensor 't': dimension 1 is 0");
    expect_refused(with_tensor(kF32, {uint64_t(1) << 32, uint64_t(1) << 32}), "overflows");
    expect_refused(with_tensor(kF32, {uint64_t(1) << 62}), "take more bytes than a size_t counts");
    expect_refused(with_tensor(kQ4_0, {16, 2}), "dims[0] is 16, not a multiple of the 32 values of a Q4_0 block");
    expect_refused(with_tensor(kQ4_K, {128}), "not a multiple of the 256 values of a Q4_K block");
    expect_refused(GgufWriter().tensor(f32_tensor("same", {2}, 0)).tensor(f32_tensor("same", {2}, 0)).bytes(),
                   "tensor 'same': the name appears twice");
}

TEST(GgufFile, RefusesMisplacedTensors) {
    GgufTensorSpec misaligned = f32_tensor("m", {2}, 0);
    misaligned.offset = 8;
    expect_refused(GgufWriter().tensor(misaligned).bytes(),
                   "tensor 'm': the data offset 8 is not a multiple of the alignment (32)");
    GgufTensorSpec beyond = f32_tensor("far", {2}, 0);
    beyond.offset = 1024;
    beyond.data.clear();
    expect_refused(GgufWriter().tensor(beyond).bytes(), "tensor 'far' (8 bytes at offset 1024");
    expect_refused(GgufWriter().tensor(beyond).bytes(), "runs past the end of the file");
    GgufTensorSpec huge_offset = f32_tensor("huge", {2}, 0);
    huge_offset.offset = uint64_t(-32);
    huge_offset.data.clear();
    expect_refused(GgufWriter().tensor(huge_offset).bytes(), "tensor 'huge' (8 bytes at offset 18446744073709551584");
    GgufTensorSpec second = f32_tensor("second", {4}, 0);
    second.offset = 0;
    expect_refused(GgufWriter().tensor(f32_tensor("first", {16}, 0)).tensor(second).bytes(),
                   "tensors 'first' [0, 64) and 'second' [0, 16) overlap");
    GgufTensorSpec inside = f32_tensor("inside", {4}, 0);
    inside.offset = 32;
    expect_refused(GgufWriter().tensor(f32_tensor("outer", {16}, 0)).tensor(inside).bytes(),
                   "tensors 'outer' [0, 64) and 'inside' [32, 48) overlap");
}

TEST(GgufFile, RefusesABadAlignment) {
    expect_refused(GgufWriter().value("general.alignment", uint32_t(48)).bytes(),
                   "general.alignment is 48, not a power of two");
    expect_refused(GgufWriter().value("general.alignment", uint32_t(0)).bytes(), "general.alignment is 0");
    expect_refused(GgufWriter().value("general.alignment", uint64_t(32)).bytes(),
                   "general.alignment is of type uint64; GGUF requires a uint32");
}

TEST(GgufFile, WrongTypeMetadataReadsAreRefusedByName) {
    const auto file = parse(GgufWriter()
                                .value("name", "llama")
                                .value("negative", int32_t(-3))
                                .value("ratio", 0.5f)
                                .value("count", uint32_t(3))
                                .array("ids", std::vector<int32_t>{1, 2})
                                .array("names", std::vector<std::string>{"a"})
                                .array("scores", std::vector<float>{1.0f})
                                .array("wide", std::vector<uint64_t>{~uint64_t(0)})
                                .bytes());
    expect_corrupt_call([&] { file->get_uint("name"); }, {"test.gguf", "'name' is of type string, not an unsigned"});
    expect_corrupt_call([&] { file->get_uint("negative"); }, {"'negative' is of type int32 holding -3"});
    expect_corrupt_call([&] { file->get_uint("ratio"); }, {"'ratio' is of type float32"});
    expect_corrupt_call([&] { file->get_uint("ids"); }, {"'ids' is of type array"});
    expect_corrupt_call([&] { file->get_float("count"); }, {"'count' is of type uint32, not a float32 or float64"});
    expect_corrupt_call([&] { file->get_string("count"); }, {"'count' is of type uint32, not a string"});
    expect_corrupt_call([&] { file->get_string_array("name"); }, {"'name' is of type string, not an array"});
    expect_corrupt_call([&] { file->get_string_array("ids"); }, {"'ids' is an array of int32, not of strings"});
    expect_corrupt_call([&] { file->get_float_array("names"); }, {"'names' is an array of string, not of float32"});
    expect_corrupt_call([&] { file->get_int_array("scores"); }, {"'scores' is an array of float32, not of integers"});
    expect_corrupt_call([&] { file->get_int_array("wide"); }, {"'wide' is an array of uint64"});
    expect_corrupt_call([&] { file->get_uint("absent"); }, {"test.gguf", "no metadata key 'absent'"});
    expect_corrupt_call([&] { file->get_string_array("absent"); }, {"no metadata key 'absent'"});
}

TEST(GgufFile, KnowsGgmlTypesByNumber) {
    const struct {
        GgmlType type;
        const char* name;
        int64_t values, bytes;
    } expected[] = {
        {GgmlType::F32, "F32", 1, 4},          {GgmlType::F16, "F16", 1, 2},
        {GgmlType::BF16, "BF16", 1, 2},        {GgmlType::Q4_0, "Q4_0", 32, 18},
        {GgmlType::Q4_1, "Q4_1", 32, 20},      {GgmlType::Q5_0, "Q5_0", 32, 22},
        {GgmlType::Q5_1, "Q5_1", 32, 24},      {GgmlType::Q8_0, "Q8_0", 32, 34},
        {GgmlType::Q8_1, "Q8_1", 32, 36},      {GgmlType::Q2_K, "Q2_K", 256, 84},
        {GgmlType::Q3_K, "Q3_K", 256, 110},    {GgmlType::Q4_K, "Q4_K", 256, 144},
        {GgmlType::Q5_K, "Q5_K", 256, 176},    {GgmlType::Q6_K, "Q6_K", 256, 210},
        {GgmlType::Q8_K, "Q8_K", 256, 292},    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66},
        {GgmlType::IQ2_XS, "IQ2_XS", 256, 74}, {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98},
        {GgmlType::IQ1_S, "IQ1_S", 256, 50},   {GgmlType::IQ4_NL, "IQ4_NL", 32, 18},
        {GgmlType::IQ3_S, "IQ3_S", 256, 110},  {GgmlType::IQ2_S, "IQ2_S", 256, 82},
        {GgmlType::IQ4_XS, "IQ4_XS", 256, 136}, {GgmlType::IQ1_M, "IQ1_M", 256, 56},
        {GgmlType::TQ1_0, "TQ1_0", 256, 54},   {GgmlType::TQ2_0, "TQ2_0", 256, 66},
        {GgmlType::MXFP4, "MXFP4", 32, 17},    {GgmlType::I8, "I8", 1, 1},
        {GgmlType::I16, "I16", 1, 2},          {GgmlType::I32, "I32", 1, 4},
        {GgmlType::I64, "I64", 1, 8},          {GgmlType::F64, "F64", 1, 8},
    };
    for (const auto& type : expected) {
        SCOPED_TRACE(type.name);
        GgmlBlock block;
        ASSERT_TRUE(ggml_block_of(type.type, &block));
        EXPECT_EQ(block.values, type.values);
        EXPECT_EQ(block.bytes, type.bytes);
        EXPECT_EQ(ggml_type_name(type.type), type.name);
    }
    GgmlBlock block;
    for (const uint32_t unknown : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u}) {
        EXPECT_FALSE(ggml_block_of(GgmlType(unknown), &block)) << unknown;
        EXPECT_EQ(ggml_type_name(GgmlType(unknown)), "type " + std::to_string(unknown));
    }
}

// The fuzz corpus's seeds parse: the fuzzer starts from valid files.
TEST(GgufFile, FuzzSeedsParse) {
    const std::filesystem::path corpus = std::filesystem::path(QJIT_SOURCE_DIR) / "tests/fuzz/seeds/fuzz_gguf";
    int seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
        SCOPED_TRACE(entry.path().filename().string());
        const std::string bytes = test::read_file(entry.path());
        const auto file = parse(bytes);
        EXPECT_FALSE(file->tensors().empty());
        ++seeds;
    }
    EXPECT_GE(seeds, 3);
}

// Writes the seeds of tests/fuzz/fuzz_gguf.cpp: the small file in versions 2 and 3, and a version
// 3 file with a 64-byte alignment, every value type and a tensor of each dequantized type.
//   QJIT_FUZZ_SEED_DIR=tests/fuzz/seeds qjit_tests --gtest_also_run_disabled_tests --gtest_filter='*GgufFuzzSeeds'
TEST(GgufFile, DISABLED_WritesGgufFuzzSeeds) {
    const char* dir = std::getenv("QJIT_FUZZ_SEED_DIR");
    if (!dir) GTEST_SKIP() << "set QJIT_FUZZ_SEED_DIR to the corpus folder";
    const std::filesystem::path folder = std::filesystem::path(dir) / "fuzz_gguf";
    std::filesystem::create_directories(folder);
    test::write_file(folder / "small_v2", small_file(2));
    test::write_file(folder / "small_v3", small_file(3));
    GgufWriter every_type;
    every_type.place_at_multiples_of(64)
        .value("general.alignment", uint32_t(64))
        .value("general.name", "seed")
        .value("u8", uint8_t(1))
        .value("i8", int8_t(-1))
        .value("u16", uint16_t(2))
        .value("i16", int16_t(-2))
        .value("i32", int32_t(-3))
        .value("f32", 0.5f)
        .value("bool", true)
        .value("u64", uint64_t(4))
        .value("i64", int64_t(-4))
        .value("f64", 0.25)
        .array("tokens", std::vector<std::string>{"a", "b"})
        .array("scores", std::vector<float>{0.0f, -1.0f});
    // One tensor per dequantized type: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, BF16, with
    // bytes that keep every fp16 scale finite.
    const struct {
        uint32_t type;
        uint64_t values, bytes;
    } types[] = {{0, 1, 4},    {1, 1, 2},      {2, 32, 18},    {3, 32, 20},    {6, 32, 22},
                 {7, 32, 24},  {8, 32, 34},    {10, 256, 84},  {11, 256, 110}, {12, 256, 144},
                 {13, 256, 176}, {14, 256, 210}, {30, 1, 2}};
    for (const auto& type : types) {
        const uint64_t values = type.values == 1 ? 8 : type.values;
        const std::string data(size_t(values / type.values * type.bytes), char(0x21));
        every_type.tensor({"t" + std::to_string(type.type), type.type, {values}, data, std::nullopt});
    }
    test::write_file(folder / "every_type_v3", every_type.bytes());
}

}  // namespace
}  // namespace qjit
