// Neuron vectors (format/neuron_record.hpp) against the oracle, and neuron files
// (io/neuron_file.hpp): the header's bytes, the layout arithmetic, files written and read back
// with plain reads, damaged headers and records refused by name, and a failing writer that leaves
// an existing file as it was.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "base/half.hpp"
#include "io/neuron_file.hpp"
#include "format/gptq_import.hpp"
#include "format/packed_codes.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/reference.hpp"
#include "gguf_writer.hpp"
#include "test_support.hpp"
#include "tools/checkpoint_writer.hpp"
#include "tools/random_gptq.hpp"

namespace qjit {
namespace {

namespace fs = std::filesystem;

template <typename Call>
void expect_error(Call&& call, qjit_status status, std::initializer_list<const char*> words) {
    try {
        call();
        ADD_FAILURE() << "no error; expected one naming " << *words.begin();
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), status) << e.what();
        for (const char* word : words)
            EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << "'" << e.what() << "' does not name '"
                                                                           << word << "'";
    }
}

struct TempDir {
    fs::path path;
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "qjit_neuron_XXXXXX").string();
        path = mkdtemp(pattern.data());
    }
    ~TempDir() { fs::remove_all(path); }
};

WeightFormat format_of(int bits, int64_t group, bool symmetric, bool float_offsets, ScaleType scales) {
    return WeightFormat{.bits = bits, .group_size = group, .symmetric = symmetric, .float_offsets = float_offsets,
                        .scale_type = scales};
}

// ---- vectors ----

// Every column of an RTN matrix encodes to a vector that dequantizes to the oracle's column, code
// by code and value by value, whatever the panel width the codes were packed at.
void expect_vectors_match_oracle(const WeightFormat& format, int64_t d_model) {
    SCOPED_TRACE(format.name() + " d_model " + std::to_string(d_model));
    const int64_t n = 11;
    const std::vector<float> w = test::random_floats(size_t(d_model * n), uint32_t(d_model * 31 + format.bits));
    const QuantizedMatrix matrix = quantize_rtn(format, d_model, n, w.data());
    const std::vector<float> oracle = dequantize(matrix);
    const NeuronVectorLayout layout = quantized_vector_layout(format, d_model);
    ASSERT_EQ(layout.d_model(), d_model);
    const int64_t stride = layout.bytes() + 12;  // vectors apart by more than their size: as a cache holds them
    std::vector<uint8_t> vectors(size_t(n * stride), 0xAB);
    for (int panel : {8, 16}) {
        const PackedCodes packed = pack_codes(matrix.codes.data(), format.bits, d_model, n, panel);
        std::vector<uint8_t> vector(static_cast<size_t>(layout.bytes()));
        std::vector<float> values(static_cast<size_t>(d_model));
        for (int64_t c = 0; c < n; ++c) {
            encode_quantized_vector(layout, matrix, packed, c, vector.data());
            dequantize_vector(layout, vector.data(), values.data());
            for (int64_t r = 0; r < d_model; ++r) {
                ASSERT_EQ(vector_code(layout, vector.data(), r), matrix.codes[size_t(r * n + c)]) << r << "," << c;
                ASSERT_EQ(values[size_t(r)], oracle[size_t(r * n + c)]) << r << "," << c;
            }
            std::copy(vector.begin(), vector.end(), vectors.begin() + c * stride);
        }
    }
    // The vectors side by side are the matrix again: its codes, and its values exactly.
    const VectorMatrix back = vectors_as_matrix(layout, vectors.data(), n, stride);
    const QuantizedMatrix rebuilt{back.params, unpack_codes(back.codes)};
    EXPECT_EQ(rebuilt.codes, matrix.codes);
    EXPECT_EQ(dequantize(rebuilt), oracle);
}

TEST(NeuronRecord, QuantizedVectorsMatchTheOracle) {
    for (int bits : {2, 3, 4, 8})
        for (ScaleType scales : {ScaleType::F16, ScaleType::F32})
            for (int zeros = 0; zeros < 3; ++zeros) {  // symmetric, asymmetric, float offsets
                expect_vectors_match_oracle(format_of(bits, 32, zeros == 0, zeros == 2, scales), 100);
                expect_vectors_match_oracle(format_of(bits, 64, zeros == 0, zeros == 2, scales), 129);
                expect_vectors_match_oracle(format_of(bits, 128, zeros == 0, zeros == 2, scales), 64);
            }
}

TEST(NeuronRecord, OnlyQuantizedVectorsMakeAMatrix) {
    const NeuronVectorLayout f16 = f16_vector_layout(64);
    const NeuronVectorLayout q4 = quantized_vector_layout(format_of(4, 32, false, false, ScaleType::F16), 64);
    std::vector<uint8_t> bytes(size_t(4 * q4.bytes()));
    expect_error([&] { vectors_as_matrix(f16, bytes.data(), 2, f16.bytes()); }, QJIT_ERROR_INVALID_ARGUMENT, {"fp16"});
    expect_error([&] { vectors_as_matrix(q4, bytes.data(), 2, q4.bytes() - 1); }, QJIT_ERROR_INVALID_ARGUMENT,
                 {"bytes apart"});
    expect_error([&] { vectors_as_matrix(q4, bytes.data(), 0, q4.bytes()); }, QJIT_ERROR_INVALID_ARGUMENT,
                 {"bytes apart"});
}

TEST(NeuronRecord, LayoutSizes) {
    const NeuronVectorLayout q4 = quantized_vector_layout(format_of(4, 32, false, false, ScaleType::F16), 100);
    EXPECT_EQ(q4.code_words(), 4 * 4);  // 4 blocks of 32 rows at 4 bits
    EXPECT_EQ(q4.scale_bytes(), 4 * 2);
    EXPECT_EQ(q4.zero_bytes(), 4);
    EXPECT_EQ(q4.bytes(), 64 + 8 + 4);
    const NeuronVectorLayout off = quantized_vector_layout(format_of(3, 64, false, true, ScaleType::F32), 129);
    EXPECT_EQ(off.bytes(), 5 * 3 * 4 + 3 * 4 + 3 * 4);
    EXPECT_EQ(f16_vector_layout(129).bytes(), 258);
}

TEST(NeuronRecord, F16Vectors) {
    const int64_t d_model = 129, stride = 3;
    const std::vector<float> w = test::random_floats(size_t(d_model * stride), 5, -4.0f, 4.0f);
    const NeuronVectorLayout layout = f16_vector_layout(d_model);
    EXPECT_EQ(layout.coding, VectorCoding::F16);
    std::vector<uint8_t> vector(static_cast<size_t>(layout.bytes()));
    encode_f16_vector(layout, w.data() + 1, stride, vector.data());
    std::vector<float> values(static_cast<size_t>(d_model));
    dequantize_vector(layout, vector.data(), values.data());
    for (int64_t r = 0; r < d_model; ++r)
        EXPECT_EQ(values[size_t(r)], half_to_float(float_to_half(w[size_t(r * stride + 1)])));
    expect_error([] { f16_vector_layout(0); }, QJIT_ERROR_INVALID_ARGUMENT, {"d_model"});
}

TEST(NeuronRecord, RefusesFormatsByName) {
    WeightFormat mixed = format_of(4, 32, false, false, ScaleType::F16);
    mixed.group_bits = {2, 4, 2, 4};
    expect_error([&] { quantized_vector_layout(mixed, 128); }, QJIT_ERROR_INVALID_ARGUMENT, {"mixed widths"});
    WeightFormat act = format_of(4, 32, false, false, ScaleType::F16);
    act.act_order = true;
    expect_error([&] { quantized_vector_layout(act, 128); }, QJIT_ERROR_INVALID_ARGUMENT, {"act-order"});
    WeightFormat second = format_of(4, 32, false, false, ScaleType::SecondOrder);
    expect_error([&] { quantized_vector_layout(second, 128); }, QJIT_ERROR_INVALID_ARGUMENT, {"second-order"});
    WeightFormat outliers = format_of(4, 32, false, false, ScaleType::F16);
    outliers.outliers = 1;
    expect_error([&] { quantized_vector_layout(outliers, 128); }, QJIT_ERROR_INVALID_ARGUMENT, {"outliers"});
    WeightFormat compensated = format_of(4, 32, false, false, ScaleType::F16);
    compensated.low_rank = {.rank = 1, .bits = 8};
    expect_error([&] { quantized_vector_layout(compensated, 128); }, QJIT_ERROR_INVALID_ARGUMENT, {"compensator"});
    expect_error([] { quantized_vector_layout(format_of(7, 32, false, false, ScaleType::F16), 128); },
                 QJIT_ERROR_INVALID_ARGUMENT, {"bits"});

    // A matrix of another format than the layout's is refused.
    const std::vector<float> w = test::random_floats(64 * 8, 1);
    const QuantizedMatrix matrix = quantize_rtn(format_of(4, 32, false, false, ScaleType::F16), 64, 8, w.data());
    const PackedCodes packed = pack_codes(matrix.codes.data(), 4, 64, 8, 8);
    const NeuronVectorLayout other = quantized_vector_layout(format_of(4, 32, true, false, ScaleType::F16), 64);
    std::vector<uint8_t> out(size_t(other.bytes()));
    expect_error([&] { encode_quantized_vector(other, matrix, packed, 0, out.data()); }, QJIT_ERROR_INVALID_ARGUMENT,
                 {"q4g32_asym"});
}

// ---- headers ----

NeuronFileHeader make_header(FfnActivation activation, bool bundled, const NeuronVectorLayout& vector,
                             int64_t layers = 2, int64_t d_ff = 20, int64_t alignment = 512) {
    NeuronFileHeader h;
    h.layers = layers;
    h.d_model = vector.d_model();
    h.d_ff = d_ff;
    h.activation = activation;
    h.has_bias = activation == FfnActivation::Relu;
    h.bundled = bundled;
    h.alignment = alignment;
    h.vector = vector;
    return h;
}

void expect_same_header(const NeuronFileHeader& a, const NeuronFileHeader& b) {
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.d_model, b.d_model);
    EXPECT_EQ(a.d_ff, b.d_ff);
    EXPECT_EQ(a.activation, b.activation);
    EXPECT_EQ(a.has_bias, b.has_bias);
    EXPECT_EQ(a.bundled, b.bundled);
    EXPECT_EQ(a.alignment, b.alignment);
    EXPECT_EQ(a.vector.coding, b.vector.coding);
    EXPECT_TRUE(a.vector.format == b.vector.format) << a.vector.format.name() << " vs " << b.vector.format.name();
}

std::vector<NeuronFileHeader> sample_headers() {
    std::vector<NeuronFileHeader> headers;
    for (bool bundled : {true, false}) {
        headers.push_back(make_header(FfnActivation::SwiGlu, bundled,
                                      quantized_vector_layout(format_of(4, 32, false, false, ScaleType::F16), 100)));
        headers.push_back(make_header(FfnActivation::Relu, bundled,
                                      quantized_vector_layout(format_of(3, 64, true, false, ScaleType::F32), 129)));
        headers.push_back(make_header(FfnActivation::SwiGlu, bundled,
                                      quantized_vector_layout(format_of(2, 32, false, true, ScaleType::F16), 64)));
        headers.push_back(make_header(FfnActivation::Relu, bundled,
                                      quantized_vector_layout(format_of(8, 128, false, false, ScaleType::F32), 100)));
        headers.push_back(make_header(FfnActivation::SwiGlu, bundled, f16_vector_layout(100), 2, 20, 4096));
    }
    return headers;
}

TEST(NeuronFile, HeaderRoundTrip) {
    for (const NeuronFileHeader& h : sample_headers()) {
        const std::vector<uint8_t> bytes = encode_neuron_file_header(h);
        ASSERT_EQ(int64_t(bytes.size()), h.alignment);
        expect_same_header(parse_neuron_file_header(bytes.data(), bytes.size()), h);
    }
}

TEST(NeuronFile, LayoutArithmetic) {
    for (const NeuronFileHeader& h : sample_headers()) {
        SCOPED_TRACE(h.vector.format.name() + (h.bundled ? " bundled" : " split"));
        const std::vector<NeuronPart> parts = h.part_list();
        ASSERT_EQ(int(parts.size()), h.parts());
        EXPECT_EQ(h.payload_bytes(), h.parts_per_record() * h.vector.bytes() + (h.has_bias ? 8 : 4));
        EXPECT_EQ(h.record_bytes() % h.alignment, 0);
        EXPECT_GE(h.record_bytes(), h.payload_bytes());
        EXPECT_LT(h.record_bytes() - h.payload_bytes(), h.alignment);
        std::set<int64_t> starts;
        for (int64_t layer = 0; layer < h.layers; ++layer)
            for (int64_t neuron = 0; neuron < h.d_ff; ++neuron)
                for (NeuronPart part : parts) {
                    const int64_t at = h.record_offset(layer, neuron, part);
                    EXPECT_EQ(at % h.alignment, 0);
                    EXPECT_GE(at, h.data_offset());
                    EXPECT_LE(at + h.record_bytes(), h.file_bytes());
                    if (h.bundled) EXPECT_EQ(at, h.record_offset(layer, neuron, parts[0]));
                    starts.insert(at);
                    const int64_t vector_end = h.vector_offset_in_record(part) + h.vector.bytes();
                    EXPECT_LE(vector_end, h.payload_bytes() - 4 - (h.has_bias ? 4 : 0));
                }
        // Distinct records, each record_bytes apart: none overlaps another, and they fill the data.
        EXPECT_EQ(int64_t(starts.size()), h.layers * h.records_per_layer());
        int64_t expected = h.data_offset();
        for (int64_t at : starts) {
            EXPECT_EQ(at, expected);
            expected += h.record_bytes();
        }
        EXPECT_EQ(expected, h.file_bytes());
        if (h.has_bias) EXPECT_EQ(h.bias_offset_in_record(), h.parts_per_record() * h.vector.bytes());
        EXPECT_NE(h.record_seed(0, 1, parts[0]), h.record_seed(1, 0, parts[0]));
        EXPECT_NE(h.record_seed(0, 1, NeuronPart::Up), h.record_seed(0, 1, NeuronPart::Down));
    }
    const NeuronFileHeader relu = sample_headers()[1];
    expect_error([&] { relu.record_offset(0, 0, NeuronPart::Gate); }, QJIT_ERROR_INVALID_ARGUMENT, {"gate"});
    expect_error([&] { relu.record_offset(0, relu.d_ff, NeuronPart::Up); }, QJIT_ERROR_INVALID_ARGUMENT, {"neuron"});
}

// Field offsets in the header (io/neuron_file.cpp).
constexpr size_t kCrcAt = 65;

std::vector<uint8_t> with_field(std::vector<uint8_t> bytes, size_t at, uint64_t value, int width) {
    for (int i = 0; i < width; ++i) bytes[at + size_t(i)] = uint8_t(value >> (8 * i));
    const uint32_t crc = crc32(bytes.data(), kCrcAt);
    std::memcpy(bytes.data() + kCrcAt, &crc, 4);
    return bytes;
}

void expect_corrupt_header(const std::vector<uint8_t>& bytes, const char* word, size_t size = 0) {
    expect_error([&] { parse_neuron_file_header(bytes.data(), size ? size : bytes.size()); }, QJIT_ERROR_CORRUPT_DATA,
                 {"neuron file header", word});
}

TEST(NeuronFile, RefusesDamagedHeaders) {
    const NeuronFileHeader h = sample_headers()[0];  // SwiGlu, q4g32_asym, bundled
    const std::vector<uint8_t> good = encode_neuron_file_header(h);
    expect_corrupt_header(good, "truncated", 40);
    std::vector<uint8_t> magic = good;
    magic[3] = 'X';
    expect_corrupt_header(magic, "magic");
    expect_corrupt_header(with_field(good, 8, 4, 4), "version");
    expect_corrupt_header(with_field(good, 8, 0, 4), "version");
    std::vector<uint8_t> crc = good;
    crc[25] ^= 1;
    expect_corrupt_header(crc, "CRC");
    expect_corrupt_header(with_field(good, 12, 0, 8), "layers");
    expect_corrupt_header(with_field(good, 20, 0, 8), "d_model");
    expect_corrupt_header(with_field(good, 28, uint64_t(1) << 31, 8), "d_ff");
    expect_corrupt_header(with_field(good, 36, 2, 1), "activation");
    expect_corrupt_header(with_field(good, 37, 1, 1), "has_bias");
    expect_corrupt_header(with_field(good, 38, 2, 1), "bundled");
    expect_corrupt_header(with_field(good, 39, 1000, 8), "alignment");
    expect_corrupt_header(with_field(good, 39, 256, 8), "alignment");
    expect_corrupt_header(with_field(good, 47, 2, 1), "coding");
    expect_corrupt_header(with_field(good, 47, 1, 1), "F16");
    expect_corrupt_header(with_field(good, 48, 7, 4), "bits");
    expect_corrupt_header(with_field(good, 48, 1u << 31, 4), "bits");
    expect_corrupt_header(with_field(good, 52, 0, 8), "group_size");
    expect_corrupt_header(with_field(good, 60, 2, 1), "symmetric");
    expect_corrupt_header(with_field(good, 61, 2, 1), "float_offsets");
    expect_corrupt_header(with_field(with_field(good, 60, 1, 1), 61, 1, 1), "float offsets");
    expect_corrupt_header(with_field(good, 62, 2, 1), "scale_type");
    expect_corrupt_header(with_field(good, 63, 2, 1), "gate_apart");
    expect_corrupt_header(with_field(good, 64, 2, 1), "has_sparsity");
    expect_corrupt_header(with_field(with_field(good, 38, 0, 1), 63, 1, 1), "gate_apart");  // split
    expect_corrupt_header(with_field(with_field(with_field(good, 36, 0, 1), 37, 1, 1), 64, 1, 1), "has_sparsity");
    // 2^40 layers of 2^30 neurons: more than 2^62 bytes.
    expect_corrupt_header(with_field(with_field(good, 12, uint64_t(1) << 40, 8), 28, uint64_t(1) << 30, 8), "2^62");
    expect_corrupt_header(with_field(good, 12, uint64_t(1) << 63, 8), "layers");
}

TEST(NeuronFile, GateApartRecordsFillTheLayerGatesFirst) {
    NeuronFileHeader h = make_header(FfnActivation::SwiGlu, true,
                                     quantized_vector_layout(format_of(4, 32, false, false, ScaleType::F16), 100), 3, 21);
    h.gate_apart = true;
    h.has_sparsity = true;
    expect_same_header(parse_neuron_file_header(encode_neuron_file_header(h).data(), size_t(h.alignment)), h);
    EXPECT_TRUE(parse_neuron_file_header(encode_neuron_file_header(h).data(), size_t(h.alignment)).gate_apart);
    ASSERT_EQ(h.record_first_parts(), (std::vector<NeuronPart>{NeuronPart::Gate, NeuronPart::Up}));
    EXPECT_EQ(h.parts_in_record(NeuronPart::Gate), 1);
    EXPECT_EQ(h.parts_in_record(NeuronPart::Up), 2);
    EXPECT_EQ(h.record_first_part(NeuronPart::Down), NeuronPart::Up);
    EXPECT_EQ(h.vector_offset_in_record(NeuronPart::Down), h.vector.bytes());
    EXPECT_EQ(h.payload_bytes(), 2 * h.vector.bytes() + 4);
    EXPECT_EQ(h.data_offset(), h.alignment + h.sparsity_bytes());
    EXPECT_GE(h.sparsity_bytes(), 4 * (1 + h.layers + h.layers * h.d_ff) + 4);
    std::vector<std::pair<int64_t, int64_t>> records;  // (offset, bytes)
    for (int64_t layer = 0; layer < h.layers; ++layer)
        for (int64_t neuron = 0; neuron < h.d_ff; ++neuron) {
            records.emplace_back(h.record_offset(layer, neuron, NeuronPart::Gate), h.record_bytes(NeuronPart::Gate));
            records.emplace_back(h.record_offset(layer, neuron, NeuronPart::Up), h.record_bytes(NeuronPart::Up));
            EXPECT_EQ(h.record_offset(layer, neuron, NeuronPart::Down), records.back().first);
            if (neuron > 0) EXPECT_LT(h.record_offset(layer, neuron - 1, NeuronPart::Gate), records.back().first);
        }
    std::sort(records.begin(), records.end());
    int64_t expected = h.data_offset();
    for (const auto& [at, bytes] : records) {
        EXPECT_EQ(at, expected);
        EXPECT_EQ(at % h.alignment, 0);
        expected += bytes;
    }
    EXPECT_EQ(expected, h.file_bytes());
    NeuronFileHeader relu = sample_headers()[1];
    relu.gate_apart = true;
    expect_error([&] { validate(relu); }, QJIT_ERROR_INVALID_ARGUMENT, {"gate_apart"});
}

TEST(NeuronFile, SparsitySectionRoundTripsAndDamageIsNamed) {
    NeuronFileHeader h = sample_headers()[0];
    h.has_sparsity = true;
    FfnSparsity sparsity;
    sparsity.target = 0.4f;
    sparsity.thresholds = {0.25f, 0.5f};
    for (int64_t i = 0; i < h.layers * h.d_ff; ++i) sparsity.neuron_scales.push_back(0.5f + 0.01f * float(i));
    const std::vector<uint8_t> bytes = encode_ffn_sparsity(h, sparsity);
    ASSERT_EQ(int64_t(bytes.size()), h.sparsity_bytes());
    const FfnSparsity back = parse_ffn_sparsity(h, bytes.data(), bytes.size());
    EXPECT_EQ(back.target, sparsity.target);
    EXPECT_EQ(back.thresholds, sparsity.thresholds);
    EXPECT_EQ(back.neuron_scales, sparsity.neuron_scales);

    std::vector<uint8_t> damaged = bytes;
    damaged[9] ^= 1;
    expect_error([&] { parse_ffn_sparsity(h, damaged.data(), damaged.size()); }, QJIT_ERROR_CORRUPT_DATA, {"CRC"});
    expect_error([&] { parse_ffn_sparsity(h, bytes.data(), 12); }, QJIT_ERROR_CORRUPT_DATA, {"truncated"});
    FfnSparsity negative = sparsity;
    negative.thresholds[1] = -1.0f;
    expect_error([&] { encode_ffn_sparsity(h, negative); }, QJIT_ERROR_INVALID_ARGUMENT, {"threshold 1"});
    FfnSparsity nan = sparsity;
    nan.neuron_scales[7] = std::nanf("");
    expect_error([&] { encode_ffn_sparsity(h, nan); }, QJIT_ERROR_INVALID_ARGUMENT, {"neuron scale 7"});
    // A NaN written with a valid CRC is refused on reading too.
    std::vector<uint8_t> forged = bytes;
    const float bad = -2.0f;
    std::memcpy(forged.data() + 8, &bad, 4);  // layer 1's threshold
    const size_t crc_at = size_t(4 * (1 + h.layers + h.layers * h.d_ff));
    const uint32_t crc = crc32(forged.data(), crc_at);
    std::memcpy(forged.data() + crc_at, &crc, 4);
    expect_error([&] { parse_ffn_sparsity(h, forged.data(), forged.size()); }, QJIT_ERROR_CORRUPT_DATA, {"threshold 1"});
    FfnSparsity short_scales = sparsity;
    short_scales.neuron_scales.pop_back();
    expect_error([&] { encode_ffn_sparsity(h, short_scales); }, QJIT_ERROR_INVALID_ARGUMENT, {"neuron scales"});
}

TEST(NeuronFile, AWriterWithASparsitySectionFinishesOnlyOnceItIsSet) {
    TempDir dir;
    NeuronFileHeader h = sample_headers()[0];
    h.has_sparsity = true;
    NeuronFileWriter writer((dir.path / "ffn.qnf").string(), h);
    const auto w = test::random_floats(size_t(h.d_model * h.d_ff), 3);
    for (int64_t l = 0; l < h.layers; ++l) writer.add_layer(quantize_ffn_layer(h, w.data(), w.data(), w.data(), nullptr));
    expect_error([&] { writer.finish(); }, QJIT_ERROR_INVALID_ARGUMENT, {"set_sparsity"});
    EXPECT_FALSE(fs::exists(dir.path / "ffn.qnf"));
    writer.set_sparsity({0.5f, std::vector<float>(size_t(h.layers), 0.1f), std::vector<float>(size_t(h.layers * h.d_ff), 1.0f)});
    writer.finish();
    EXPECT_EQ(int64_t(fs::file_size(dir.path / "ffn.qnf")), h.file_bytes());
}

// The fuzz corpus's seeds are valid files, versions 1 to 3, with a sparsity section and its
// gates apart: the fuzzer starts from them.
TEST(NeuronFile, FuzzSeedsParse) {
    const fs::path corpus = fs::path(QJIT_SOURCE_DIR) / "tests/fuzz/seeds/fuzz_neuron_file";
    int seeds = 0, with_sparsity = 0;
    for (const auto& entry : fs::directory_iterator(corpus)) {
        SCOPED_TRACE(entry.path().filename().string());
        const std::string text = test::read_file(entry.path());
        const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
        const NeuronFileHeader h = parse_neuron_file_header(bytes, text.size());
        ASSERT_EQ(int64_t(text.size()), h.file_bytes());
        if (h.has_sparsity) {
            ++with_sparsity;
            EXPECT_EQ(int64_t(parse_ffn_sparsity(h, bytes + h.alignment, text.size() - size_t(h.alignment)).thresholds.size()),
                      h.layers);
        }
        for (int64_t neuron = 0; neuron < h.d_ff; ++neuron)
            for (NeuronPart first : h.record_first_parts())
                check_record(h, 0, neuron, first, bytes + h.record_offset(0, neuron, first));
        ++seeds;
    }
    EXPECT_GE(seeds, 5);
    EXPECT_GE(with_sparsity, 2);
}

TEST(NeuronFile, VersionOneHeadersStillParse) {
    for (const NeuronFileHeader& h : sample_headers()) {
        std::vector<uint8_t> bytes = encode_neuron_file_header(h);
        bytes[8] = 1;                                     // version 1 ...
        bytes.erase(bytes.begin() + 63, bytes.begin() + 65);  // ... had no gate_apart, has_sparsity
        const uint32_t crc = crc32(bytes.data(), 63);
        std::memcpy(bytes.data() + 63, &crc, 4);
        const NeuronFileHeader read = parse_neuron_file_header(bytes.data(), bytes.size());
        expect_same_header(read, h);
        EXPECT_FALSE(read.crc32c_records) << "version 1 records carry CRC-32";
    }
}

// ---- files ----

struct LayerData {
    std::vector<float> up, gate, down, bias;  // as a checkpoint holds them
    FfnLayerWeights weights;
};

std::vector<LayerData> make_layers(const NeuronFileHeader& h) {
    std::vector<LayerData> layers(size_t(h.layers));
    const size_t count = size_t(h.d_model * h.d_ff);
    for (int64_t l = 0; l < h.layers; ++l) {
        LayerData& d = layers[size_t(l)];
        d.up = test::random_floats(count, uint32_t(10 * l + 1));
        d.gate = test::random_floats(count, uint32_t(10 * l + 2));
        d.down = test::random_floats(count, uint32_t(10 * l + 3));
        d.bias = test::random_floats(size_t(h.d_ff), uint32_t(10 * l + 4));
        d.weights = quantize_ffn_layer(h, d.up.data(), d.gate.data(), d.down.data(), d.bias.data());
    }
    return layers;
}

void write_neuron_file(const std::string& path, const NeuronFileHeader& h, const std::vector<LayerData>& layers) {
    NeuronFileWriter writer(path, h);
    for (const LayerData& d : layers) writer.add_layer(d.weights);
    writer.finish();
}

std::vector<uint8_t> pread_bytes(int fd, int64_t offset, int64_t size) {
    std::vector<uint8_t> bytes(static_cast<size_t>(size));
    EXPECT_EQ(pread(fd, bytes.data(), bytes.size(), off_t(offset)), ssize_t(size));
    return bytes;
}

// The values the file must hold for `part` of `neuron`: the oracle's column (quantized) or the fp16
// rounding of the weights.
std::vector<float> expected_vector(const NeuronFileHeader& h, const LayerData& d, NeuronPart part, int64_t neuron) {
    std::vector<float> values(size_t(h.d_model));
    for (int64_t r = 0; r < h.d_model; ++r) {
        if (h.vector.coding == VectorCoding::F16) {
            const float w = part == NeuronPart::Down ? d.down[size_t(neuron * h.d_model + r)]
                            : part == NeuronPart::Up ? d.up[size_t(r * h.d_ff + neuron)]
                                                     : d.gate[size_t(r * h.d_ff + neuron)];
            values[size_t(r)] = half_to_float(float_to_half(w));
        }
    }
    if (h.vector.coding == VectorCoding::Quantized) {
        const QuantizedMatrix& m = part == NeuronPart::Down ? d.weights.down_t
                                   : part == NeuronPart::Up ? d.weights.up
                                                            : d.weights.gate;
        const std::vector<float> oracle = dequantize(m);
        for (int64_t r = 0; r < h.d_model; ++r) values[size_t(r)] = oracle[size_t(r * h.d_ff + neuron)];
    }
    return values;
}

TEST(NeuronFile, WritesFilesThatReadBack) {
    TempDir dir;
    for (const NeuronFileHeader& h : sample_headers()) {
        SCOPED_TRACE(h.vector.format.name() + (h.bundled ? " bundled" : " split"));
        const std::string path = (dir.path / "ffn.qneur").string();
        const std::vector<LayerData> layers = make_layers(h);
        write_neuron_file(path, h, layers);
        ASSERT_EQ(int64_t(fs::file_size(path)), h.file_bytes());
        EXPECT_TRUE(test::files_starting(dir.path, "ffn.qneur.tmp").empty());

        const int fd = open(path.c_str(), O_RDONLY);
        ASSERT_GE(fd, 0);
        const std::vector<uint8_t> head = pread_bytes(fd, 0, h.alignment);
        const NeuronFileHeader read = parse_neuron_file_header(head.data(), head.size());
        expect_same_header(read, h);
        const std::vector<NeuronPart> parts = read.part_list();
        std::vector<float> values(size_t(h.d_model));
        for (int64_t l = 0; l < h.layers; ++l)
            for (int64_t i = 0; i < h.d_ff; ++i)
                for (NeuronPart part : parts) {
                    const NeuronPart first = h.bundled ? parts[0] : part;
                    const std::vector<uint8_t> record =
                        pread_bytes(fd, read.record_offset(l, i, part), read.record_bytes());
                    ASSERT_NO_THROW(check_record(read, l, i, first, record.data()));
                    for (int64_t b = read.payload_bytes(); b < read.record_bytes(); ++b) ASSERT_EQ(record[size_t(b)], 0);
                    dequantize_vector(read.vector, record.data() + read.vector_offset_in_record(part), values.data());
                    ASSERT_EQ(values, expected_vector(h, layers[size_t(l)], part, i)) << l << " " << i;
                    if (h.has_bias) {
                        float bias;
                        std::memcpy(&bias, record.data() + read.bias_offset_in_record(), 4);
                        ASSERT_EQ(bias, layers[size_t(l)].bias[size_t(i)]);
                    }
                }
        close(fd);
    }
}

// Version 3 checksums records with CRC-32C; a version-2 file (CRC-32) is written and read as one.
TEST(NeuronFile, RecordChecksumsFollowTheVersion) {
    TempDir dir;
    for (const bool crc32c_records : {true, false}) {
        SCOPED_TRACE(crc32c_records ? "version 3" : "version 2");
        NeuronFileHeader h = sample_headers()[0];
        h.crc32c_records = crc32c_records;
        const std::string path = (dir.path / "ffn.qneur").string();
        write_neuron_file(path, h, make_layers(h));
        const std::string file = test::read_file(path);
        const auto* bytes = reinterpret_cast<const uint8_t*>(file.data());
        EXPECT_EQ(bytes[8], crc32c_records ? 3 : 2);
        const NeuronFileHeader read = parse_neuron_file_header(bytes, file.size());
        EXPECT_EQ(read.crc32c_records, crc32c_records);
        const NeuronPart first = read.part_list()[0];
        const uint8_t* record = bytes + read.record_offset(1, 2, first);
        const int64_t crc_at = read.payload_bytes(first) - 4;
        const uint32_t seed = read.record_seed(1, 2, first);
        uint32_t stored;
        std::memcpy(&stored, record + crc_at, 4);  // little-endian, as the file stores it
        EXPECT_EQ(stored,
                  crc32c_records ? crc32c(record, size_t(crc_at), seed) : crc32(record, size_t(crc_at), seed));
        EXPECT_NO_THROW(check_record(read, 1, 2, first, record));
        NeuronFileHeader other = read;  // the other checksum does not pass the record
        other.crc32c_records = !crc32c_records;
        expect_error([&] { check_record(other, 1, 2, first, record); }, QJIT_ERROR_CORRUPT_DATA, {"damaged"});
    }
}

TEST(NeuronFile, DamagedAndMisplacedRecordsFail) {
    TempDir dir;
    for (const NeuronFileHeader& h : {sample_headers()[0], sample_headers()[6]}) {  // bundled SwiGlu, split Relu
        const std::string path = (dir.path / "ffn.qneur").string();
        write_neuron_file(path, h, make_layers(h));
        const std::string file = test::read_file(path);
        const auto record = [&](int64_t l, int64_t i, NeuronPart part) {
            const int64_t at = h.record_offset(l, i, part);
            return std::vector<uint8_t>(file.begin() + at, file.begin() + at + h.record_bytes());
        };
        const NeuronPart first = h.part_list()[0];
        for (int64_t byte : {int64_t(0), h.vector.bytes() + 1, h.payload_bytes() - 1}) {
            std::vector<uint8_t> damaged = record(1, 3, first);
            damaged[size_t(byte)] ^= 0x10;
            expect_error([&] { check_record(h, 1, 3, first, damaged.data()); }, QJIT_ERROR_CORRUPT_DATA,
                         {"layer 1 neuron 3", "damaged"});
        }
        // Another neuron's, another layer's or (split) another part's record in this place.
        const std::vector<uint8_t> other = record(0, 2, first);
        expect_error([&] { check_record(h, 0, 5, first, other.data()); }, QJIT_ERROR_CORRUPT_DATA,
                     {"layer 0 neuron 5"});
        expect_error([&] { check_record(h, 1, 2, first, other.data()); }, QJIT_ERROR_CORRUPT_DATA,
                     {"layer 1 neuron 2"});
        if (!h.bundled) {
            const std::vector<uint8_t> down = record(0, 2, NeuronPart::Down);
            expect_error([&] { check_record(h, 0, 2, NeuronPart::Up, down.data()); }, QJIT_ERROR_CORRUPT_DATA,
                         {"part up"});
        }
    }
}

TEST(NeuronFile, FailingWriterLeavesTheOldFile) {
    TempDir dir;
    const NeuronFileHeader h = sample_headers()[0];
    const std::vector<LayerData> layers = make_layers(h);
    const fs::path path = dir.path / "ffn.qneur";
    test::write_file(path, "old contents");
    const auto expect_untouched = [&] {
        EXPECT_EQ(test::read_file(path), "old contents");
        EXPECT_TRUE(test::files_starting(dir.path, "ffn.qneur.tmp").empty());
    };

    expect_error([&] { NeuronFileWriter((dir.path / "missing" / "ffn.qneur").string(), h); }, QJIT_ERROR_IO,
                 {"missing/ffn.qneur"});

    {  // a layer of the wrong shape
        NeuronFileWriter writer(path.string(), h);
        writer.add_layer(layers[0].weights);
        FfnLayerWeights wrong = layers[1].weights;
        NeuronFileHeader narrow = h;
        narrow.d_ff = h.d_ff - 1;
        wrong.gate = quantize_rtn(h.vector.format, h.d_model, narrow.d_ff, layers[1].gate.data());
        expect_error([&] { writer.add_layer(wrong); }, QJIT_ERROR_INVALID_ARGUMENT, {"layer 1 gate", "d_ff"});
        FfnLayerWeights other_format = layers[1].weights;
        other_format.up = quantize_rtn(format_of(8, 32, false, false, ScaleType::F16), h.d_model, h.d_ff,
                                       layers[1].up.data());
        expect_error([&] { writer.add_layer(other_format); }, QJIT_ERROR_INVALID_ARGUMENT, {"layer 1 up", "q8g32"});
        FfnLayerWeights biased = layers[1].weights;
        biased.bias.assign(size_t(h.d_ff), 1.0f);
        expect_error([&] { writer.add_layer(biased); }, QJIT_ERROR_INVALID_ARGUMENT, {"bias"});
        expect_error([&] { writer.finish(); }, QJIT_ERROR_INVALID_ARGUMENT, {"1 of 2 layers"});
    }
    expect_untouched();

    {  // too many layers
        NeuronFileWriter writer(path.string(), h);
        for (const LayerData& d : layers) writer.add_layer(d.weights);
        expect_error([&] { writer.add_layer(layers[0].weights); }, QJIT_ERROR_INVALID_ARGUMENT, {"2 layers"});
    }
    expect_untouched();

    write_neuron_file(path.string(), h, layers);
    EXPECT_EQ(int64_t(fs::file_size(path)), h.file_bytes());
    EXPECT_TRUE(test::files_starting(dir.path, "ffn.qneur.tmp").empty());
}

TEST(NeuronFile, QuantizeFfnLayerChecksItsInputs) {
    const NeuronFileHeader relu = sample_headers()[1];
    const std::vector<float> w = test::random_floats(size_t(relu.d_model * relu.d_ff), 3);
    expect_error([&] { quantize_ffn_layer(relu, w.data(), nullptr, w.data(), nullptr); },
                 QJIT_ERROR_INVALID_ARGUMENT, {"biases"});
    const NeuronFileHeader swiglu = sample_headers()[0];
    expect_error([&] { quantize_ffn_layer(swiglu, w.data(), nullptr, w.data(), nullptr); },
                 QJIT_ERROR_INVALID_ARGUMENT, {"missing"});
}

// ---- qjit-flash-convert ----

// A random Llama model of 2 layers as a GGUF file of F32 tensors: d_model 64, d_ff 40.
struct TinyLlama {
    static constexpr int64_t kLayers = 2, kDim = 64, kHidden = 40, kVocab = 4;
    std::vector<std::vector<float>> gate, up, down;  // as the file holds them: [out][in]
    std::string bytes;
};

TinyLlama tiny_llama() {
    TinyLlama m;
    auto values = [seed = 1u](int64_t count) mutable { return test::random_floats(size_t(count), seed++); };
    test::GgufWriter writer;
    writer.value("general.architecture", std::string("llama"))
        .value("llama.block_count", uint32_t(TinyLlama::kLayers))
        .value("llama.embedding_length", uint32_t(TinyLlama::kDim))
        .value("llama.feed_forward_length", uint32_t(TinyLlama::kHidden))
        .value("llama.attention.head_count", uint32_t(2))
        .value("llama.attention.head_count_kv", uint32_t(2))
        .value("llama.rope.freq_base", 10000.0f)
        .value("llama.attention.layer_norm_rms_epsilon", 1e-5f)
        .value("llama.context_length", uint32_t(16))
        .value("tokenizer.ggml.model", "gpt2")
        .array("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "c", "d"});
    const auto add = [&](const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v) {
        writer.tensor(test::GgufTensorSpec{name, 0, std::move(dims),
                                           std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4),
                                           std::nullopt});
    };
    const uint64_t dim = TinyLlama::kDim, hidden = TinyLlama::kHidden;
    add("token_embd.weight", {dim, uint64_t(TinyLlama::kVocab)}, values(TinyLlama::kDim * TinyLlama::kVocab));
    for (int64_t l = 0; l < TinyLlama::kLayers; ++l) {
        const std::string block = "blk." + std::to_string(l) + ".";
        add(block + "attn_norm.weight", {dim}, values(TinyLlama::kDim));
        for (const char* name : {"attn_q", "attn_k", "attn_v", "attn_output"})
            add(block + name + ".weight", {dim, dim}, values(TinyLlama::kDim * TinyLlama::kDim));
        add(block + "ffn_norm.weight", {dim}, values(TinyLlama::kDim));
        m.gate.push_back(values(TinyLlama::kDim * TinyLlama::kHidden));
        m.up.push_back(values(TinyLlama::kDim * TinyLlama::kHidden));
        m.down.push_back(values(TinyLlama::kDim * TinyLlama::kHidden));
        add(block + "ffn_gate.weight", {dim, hidden}, m.gate.back());
        add(block + "ffn_up.weight", {dim, hidden}, m.up.back());
        add(block + "ffn_down.weight", {hidden, dim}, m.down.back());
    }
    add("output_norm.weight", {dim}, values(TinyLlama::kDim));
    m.bytes = writer.bytes();
    return m;
}

// rows x cols row-major, transposed.
std::vector<float> transposed(const std::vector<float>& values, int64_t rows, int64_t cols) {
    std::vector<float> t(values.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = values[size_t(r * cols + c)];
    return t;
}

// Where the converter lies: build/tools/ beside build/tests/, where this binary is.
fs::path converter_path() {
    return fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "tools" / "qjit-flash-convert";
}

// Every record of layer `l` of a converted file checks and holds the weights (up, gate
// [d_model][d_ff], down [d_ff][d_model]) quantized as the header says.
void expect_layer_converted(const NeuronFileHeader& h, const uint8_t* data, int64_t l, std::vector<float> up,
                            std::vector<float> gate, std::vector<float> down) {
    LayerData d{std::move(up), std::move(gate), std::move(down), {}, {}};
    d.weights = quantize_ffn_layer(h, d.up.data(), d.gate.data(), d.down.data(), nullptr);
    std::vector<float> values(static_cast<size_t>(h.d_model));
    for (int64_t i = 0; i < h.d_ff; ++i)
        for (NeuronPart part : h.part_list()) {
            const uint8_t* record = data + h.record_offset(l, i, part);
            ASSERT_NO_THROW(check_record(h, l, i, h.bundled ? NeuronPart::Gate : part, record));
            dequantize_vector(h.vector, record + h.vector_offset_in_record(part), values.data());
            ASSERT_EQ(values, expected_vector(h, d, part, i)) << "layer " << l << " neuron " << i;
        }
}

// The converter beside this test binary (build/tools/ next to build/tests/), on a tiny GGUF model:
// every record checks and holds the RTN quantization of the model's weights.
TEST(NeuronFile, ConvertsGgufModels) {
    const fs::path tool = converter_path();
    if (!fs::exists(tool)) GTEST_SKIP() << tool << " is not built";
    TempDir dir;
    const TinyLlama model = tiny_llama();
    test::write_file(dir.path / "tiny.gguf", model.bytes);
    for (const std::string flags : {"--bits 3 --group 32 --alignment 512", "--f16 --split --alignment 1024"}) {
        SCOPED_TRACE(flags);
        const fs::path out = dir.path / "tiny.qneur";
        const std::string command = tool.string() + " --gguf " + (dir.path / "tiny.gguf").string() + " --out " +
                                    out.string() + " " + flags + " >/dev/null";
        ASSERT_EQ(std::system(command.c_str()), 0) << command;
        const std::string file = test::read_file(out);
        const auto* data = reinterpret_cast<const uint8_t*>(file.data());
        const NeuronFileHeader h = parse_neuron_file_header(data, file.size());
        ASSERT_EQ(int64_t(file.size()), h.file_bytes());
        EXPECT_EQ(h.layers, TinyLlama::kLayers);
        EXPECT_EQ(h.d_model, TinyLlama::kDim);
        EXPECT_EQ(h.d_ff, TinyLlama::kHidden);
        EXPECT_EQ(h.activation, FfnActivation::SwiGlu);
        for (int64_t l = 0; l < h.layers; ++l)
            expect_layer_converted(h, data, l, transposed(model.up[size_t(l)], h.d_ff, h.d_model),
                                   transposed(model.gate[size_t(l)], h.d_ff, h.d_model),
                                   transposed(model.down[size_t(l)], h.d_model, h.d_ff));
    }
}

// The converter on a GPTQ checkpoint of 2 layers: its projections dequantized, then quantized again.
TEST(NeuronFile, ConvertsGptqCheckpoints) {
    const fs::path tool = converter_path();
    if (!fs::exists(tool)) GTEST_SKIP() << tool << " is not built";
    TempDir dir;
    const int64_t d_model = 96, d_ff = 64, layers = 2;
    std::vector<qjit_tools::GptqTensors> tensors(size_t(3 * layers));
    std::vector<qjit_tools::CheckpointLayerTensors> entries;
    for (int64_t l = 0; l < layers; ++l) {
        const std::string prefix = "model.layers." + std::to_string(l) + ".mlp.";
        const char* names[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int m = 0; m < 3; ++m) {
            const int64_t k = m == 2 ? d_ff : d_model, n = m == 2 ? d_model : d_ff;
            qjit_tools::GptqTensors& t = tensors[size_t(3 * l + m)];
            qjit_tools::random_gptq(k, n, 4, 32, uint64_t(10 * l + m + 1), &t);
            entries.push_back({prefix + names[m], k, n, t.view});
        }
    }
    fs::create_directories(dir.path / "ckpt");
    qjit_tools::write_gptq_checkpoint((dir.path / "ckpt").string(), entries, {});
    const fs::path out = dir.path / "ffn.qneur";
    const std::string command = tool.string() + " --gptq " + (dir.path / "ckpt").string() + " --out " +
                                out.string() + " --bits 8 --group 32 --split --alignment 512 >/dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const std::string file = test::read_file(out);
    const auto* data = reinterpret_cast<const uint8_t*>(file.data());
    const NeuronFileHeader h = parse_neuron_file_header(data, file.size());
    ASSERT_EQ(int64_t(file.size()), h.file_bytes());
    EXPECT_EQ(h.layers, layers);
    EXPECT_EQ(h.d_model, d_model);
    EXPECT_EQ(h.d_ff, d_ff);
    EXPECT_EQ(h.vector.format.name(), "q8g32_asym");
    for (int64_t l = 0; l < layers; ++l) {
        const auto dense = [&](int m, int64_t k, int64_t n) {
            return dequantize(import_gptq(k, n, tensors[size_t(3 * l + m)].view));
        };
        expect_layer_converted(h, data, l, dense(1, d_model, d_ff), dense(0, d_model, d_ff), dense(2, d_ff, d_model));
    }
}

// Writes the fuzz corpus's seeds: one-layer files of two neurons, small enough to mutate quickly.
//   QJIT_FUZZ_SEED_DIR=tests/fuzz/seeds qjit_tests --gtest_also_run_disabled_tests \
//       --gtest_filter='*WritesNeuronFuzzSeeds'
TEST(NeuronFile, DISABLED_WritesNeuronFuzzSeeds) {
    const char* dir = std::getenv("QJIT_FUZZ_SEED_DIR");
    if (!dir) GTEST_SKIP() << "set QJIT_FUZZ_SEED_DIR to the corpus folder";
    const fs::path out = fs::path(dir) / "fuzz_neuron_file";
    fs::create_directories(out);
    const NeuronFileHeader seeds[] = {
        make_header(FfnActivation::SwiGlu, true,
                    quantized_vector_layout(format_of(4, 32, false, false, ScaleType::F16), 64), 1, 2),
        make_header(FfnActivation::Relu, false,
                    quantized_vector_layout(format_of(3, 32, true, false, ScaleType::F32), 40), 1, 2),
        make_header(FfnActivation::SwiGlu, true, f16_vector_layout(32), 1, 2),
    };
    int index = 0;
    for (const NeuronFileHeader& h : seeds) write_neuron_file((out / ("seed" + std::to_string(index++))).string(), h,
                                                              make_layers(h));
    // Version 2's additions, the gates apart and a sparsity section, in seed3 (seeds 0-2 stay
    // version 1 files); the same as version 3 (CRC-32C records) in seed4.
    for (const bool crc32c_records : {false, true}) {
        NeuronFileHeader sparse = seeds[0];
        sparse.gate_apart = sparse.has_sparsity = true;
        sparse.crc32c_records = crc32c_records;
        NeuronFileWriter writer((out / (crc32c_records ? "seed4" : "seed3")).string(), sparse);
        for (const LayerData& d : make_layers(sparse)) writer.add_layer(d.weights);
        writer.set_sparsity({0.5f, {0.1f}, {1.0f, 0.8f}});
        writer.finish();
    }
}

}  // namespace
}  // namespace qjit
