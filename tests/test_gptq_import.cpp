// Tests of the GPTQ importer. Known integer codes, zero points and scales are packed the way
// AutoGPTQ packs them (a transliteration of its QuantLinear.pack, written independently of the
// importer's bitstream reader), imported, and compared with what was packed: exactly for the
// integers, scales and the dequantized matrix, within a rounding bound for a forward pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "qjit/qjit.h"
#include "base/error.hpp"
#include "format/gptq_import.hpp"
#include "base/half.hpp"
#include "format/reference.hpp"

namespace {

// ---- what a checkpoint encodes ----

struct LayerSpec {
    int bits = 4;
    int64_t k = 64;
    int64_t n = 8;
    int group_size = 16;  // as in quantize_config: 16..256 or -1
    qjit_dtype scale_dtype = QJIT_DTYPE_F16;
    qjit_gptq_format format = QJIT_GPTQ_V2;
    bool act_order = false;
};

std::string describe(const LayerSpec& spec) {
    return qjit::concat("bits ", spec.bits, ", k ", spec.k, ", n ", spec.n, ", group_size ", spec.group_size,
                        spec.scale_dtype == QJIT_DTYPE_F16 ? ", f16" : spec.scale_dtype == QJIT_DTYPE_BF16 ? ", bf16" : ", f32",
                        spec.format == QJIT_GPTQ_V1 ? ", v1" : ", v2", spec.act_order ? ", act-order" : "");
}

// The integers and scales of a layer, rows in their original order.
struct KnownLayer {
    int bits = 0;
    int64_t k = 0;
    int64_t n = 0;
    int64_t rows_per_group = 0;
    int64_t groups = 0;
    std::vector<uint8_t> codes;   // [k][n]
    std::vector<uint16_t> zeros;  // [groups][n]
    std::vector<float> scales;    // [groups][n], exactly representable in the checkpoint's scale dtype
    std::vector<int32_t> g_idx;   // [k]; empty: row / rows_per_group

    int64_t group_of(int64_t row) const { return g_idx.empty() ? row / rows_per_group : g_idx[size_t(row)]; }
    size_t meta_index(int64_t row, int64_t column) const { return size_t(group_of(row) * n + column); }
    uint8_t code(int64_t row, int64_t column) const { return codes[size_t(row * n + column)]; }
    // W[row][column] = s * (q - z), computed in fp32 as the format defines it.
    float weight(int64_t row, int64_t column) const {
        const size_t meta = meta_index(row, column);
        return scales[meta] * (float(code(row, column)) - float(zeros[meta]));
    }
};

KnownLayer make_known_layer(const LayerSpec& spec, std::mt19937& rng) {
    KnownLayer layer;
    layer.bits = spec.bits;
    layer.k = spec.k;
    layer.n = spec.n;
    layer.rows_per_group = spec.group_size == QJIT_GROUP_PER_COLUMN ? spec.k : spec.group_size;
    layer.groups = (spec.k + layer.rows_per_group - 1) / layer.rows_per_group;
    const int max_code = (1 << spec.bits) - 1;

    std::uniform_int_distribution<int> code_dist(0, max_code);
    layer.codes.resize(size_t(spec.k * spec.n));
    for (uint8_t& code : layer.codes) code = uint8_t(code_dist(rng));

    std::uniform_int_distribution<int> zero_dist(0, max_code);  // what a GPTQ quantizer produces
    std::uniform_real_distribution<float> scale_dist(1e-4f, 0.05f);
    const size_t metadata = size_t(layer.groups * spec.n);
    layer.zeros.resize(metadata);
    layer.scales.resize(metadata);
    for (size_t i = 0; i < metadata; ++i) {
        layer.zeros[i] = uint16_t(zero_dist(rng));
        const float scale = scale_dist(rng);
        layer.scales[i] = spec.scale_dtype == QJIT_DTYPE_F16    ? qjit::round_to_half(scale)
                          : spec.scale_dtype == QJIT_DTYPE_BF16 ? qjit::bf16_to_float(qjit::float_to_bf16(scale))
                                                                : scale;
    }

    if (spec.act_order) {  // GPTQ's desc_act: a shuffle of the sorted grouping
        layer.g_idx.resize(size_t(spec.k));
        for (int64_t row = 0; row < spec.k; ++row) layer.g_idx[size_t(row)] = int32_t(row / layer.rows_per_group);
        std::shuffle(layer.g_idx.begin(), layer.g_idx.end(), rng);
    }
    return layer;
}

// ---- an AutoGPTQ-style packer ----

// AutoGPTQ's QuantLinear.pack for one run of values (a multiple of 32 long): 2, 4 and 8 bits put
// 32/bits values in a word, value j of the word at bit bits*j; 3 bits put 32 values in 3 words,
// with values 10 and 21 split across the word boundaries.
std::vector<uint32_t> autogptq_pack(const std::vector<uint32_t>& values, int bits) {
    std::vector<uint32_t> words;
    for (size_t i = 0; i < values.size(); i += 32) {
        const uint32_t* v = &values[i];
        if (bits == 3) {
            uint32_t word0 = 0, word1 = 0, word2 = 0;
            for (int j = 0; j < 10; ++j) word0 |= v[j] << (3 * j);
            word0 |= v[10] << 30;
            word1 |= (v[10] >> 2) & 1u;
            for (int j = 0; j < 10; ++j) word1 |= v[11 + j] << (3 * j + 1);
            word1 |= v[21] << 31;
            word2 |= (v[21] >> 1) & 3u;
            for (int j = 0; j < 10; ++j) word2 |= v[22 + j] << (3 * j + 2);
            words.insert(words.end(), {word0, word1, word2});
        } else {
            const int per_word = 32 / bits;
            for (int w = 0; w < bits; ++w) {
                uint32_t word = 0;
                for (int j = 0; j < per_word; ++j) word |= v[w * per_word + j] << (bits * j);
                words.push_back(word);
            }
        }
    }
    return words;
}

// Packs any number of values into ceil(count*bits/32) words: zero padding up to a multiple of 32
// values, packed as AutoGPTQ does, then the words holding nothing but padding dropped.
std::vector<uint32_t> pack_values(std::vector<uint32_t> values, int bits) {
    const size_t word_count = (values.size() * size_t(bits) + 31) / 32;
    values.resize((values.size() + 31) / 32 * 32, 0u);
    std::vector<uint32_t> words = autogptq_pack(values, bits);
    words.resize(word_count);
    return words;
}

// The tensors of a checkpoint and the storage they point into.
struct GptqCheckpoint {
    int bits = 0;
    int group_size = 0;
    qjit_dtype scale_dtype = QJIT_DTYPE_F16;
    qjit_gptq_format format = QJIT_GPTQ_V2;
    std::vector<int32_t> qweight;  // [ceil(k*bits/32)][n]
    std::vector<int32_t> qzeros;   // [groups][ceil(n*bits/32)]
    std::vector<uint16_t> scales_f16;
    std::vector<uint16_t> scales_bf16;
    std::vector<float> scales_f32;
    std::vector<int32_t> g_idx;    // empty: NULL

    qjit_gptq_tensors tensors() const {
        qjit_gptq_tensors t{};
        t.bits = bits;
        t.group_size = group_size;
        t.qweight = qweight.data();
        t.qzeros = qzeros.data();
        t.scales = scale_dtype == QJIT_DTYPE_F16    ? static_cast<const void*>(scales_f16.data())
                   : scale_dtype == QJIT_DTYPE_BF16 ? static_cast<const void*>(scales_bf16.data())
                                                    : static_cast<const void*>(scales_f32.data());
        t.scale_dtype = scale_dtype;
        t.g_idx = g_idx.empty() ? nullptr : g_idx.data();
        t.checkpoint_format = format;
        return t;
    }
};

GptqCheckpoint pack_checkpoint(const KnownLayer& layer, const LayerSpec& spec) {
    GptqCheckpoint checkpoint;
    checkpoint.bits = spec.bits;
    checkpoint.group_size = spec.group_size;
    checkpoint.scale_dtype = spec.scale_dtype;
    checkpoint.format = spec.format;
    checkpoint.g_idx = layer.g_idx;

    // qweight: each column packed along K.
    const int64_t n = layer.n;
    const int64_t weight_rows = (layer.k * spec.bits + 31) / 32;
    checkpoint.qweight.resize(size_t(weight_rows * n));
    for (int64_t column = 0; column < n; ++column) {
        std::vector<uint32_t> column_codes(size_t(layer.k));
        for (int64_t row = 0; row < layer.k; ++row) column_codes[size_t(row)] = layer.code(row, column);
        const std::vector<uint32_t> words = pack_values(column_codes, spec.bits);
        for (int64_t w = 0; w < weight_rows; ++w) checkpoint.qweight[size_t(w * n + column)] = int32_t(words[size_t(w)]);
    }

    // qzeros: each group's zero points packed along N. v1 as GPTQModel writes it: for 2, 4 and 8
    // bits the true zeros are packed and then a 1 in every field is subtracted from each whole
    // word (borrowing across fields); for 3 bits 1 is subtracted per field, modulo 8.
    const uint32_t field_mask = (1u << spec.bits) - 1u;
    const bool v1 = spec.format == QJIT_GPTQ_V1;
    for (int64_t group = 0; group < layer.groups; ++group) {
        std::vector<uint32_t> fields(static_cast<size_t>(n));
        for (int64_t column = 0; column < n; ++column) {
            const uint32_t zero = layer.zeros[size_t(group * n + column)];
            fields[size_t(column)] = (v1 && spec.bits == 3 ? zero - 1u : zero) & field_mask;
        }
        const uint32_t one_per_field = spec.bits == 2 ? 0x55555555u : spec.bits == 4 ? 0x11111111u : 0x01010101u;
        for (uint32_t word : pack_values(fields, spec.bits))
            checkpoint.qzeros.push_back(int32_t(v1 && spec.bits != 3 ? word - one_per_field : word));
    }

    for (float scale : layer.scales) {
        checkpoint.scales_f16.push_back(qjit::float_to_half(scale));
        checkpoint.scales_bf16.push_back(qjit::float_to_bf16(scale));
        checkpoint.scales_f32.push_back(scale);
    }
    return checkpoint;
}

// ---- expectations ----

// P = stable argsort(group of each row), computed the obvious way.
std::vector<int32_t> expected_row_order(const KnownLayer& layer) {
    std::vector<int32_t> order(size_t(layer.k));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return layer.group_of(a) < layer.group_of(b); });
    return order;
}

std::vector<float> dense_weights(const KnownLayer& layer) {
    std::vector<float> w(size_t(layer.k * layer.n));
    for (int64_t row = 0; row < layer.k; ++row)
        for (int64_t column = 0; column < layer.n; ++column) w[size_t(row * layer.n + column)] = layer.weight(row, column);
    return w;
}

// Bound on |y - exact| for an fp32 kernel that sums products within a group and then across
// groups: no product is rounded more than (rows per group + groups + a few) times, each time by at
// most FLT_EPSILON relative to the sum of magnitudes |x| |s| (q + z).
double forward_tolerance(const KnownLayer& layer, const float* x_row, int64_t column) {
    double magnitude = 0.0;
    for (int64_t row = 0; row < layer.k; ++row) {
        const size_t meta = layer.meta_index(row, column);
        magnitude += std::fabs(double(x_row[row])) * std::fabs(double(layer.scales[meta])) *
                     (double(layer.code(row, column)) + double(layer.zeros[meta]));
    }
    return double(layer.rows_per_group + layer.groups + 4) * FLT_EPSILON * magnitude;
}

// Checks the imported matrix holds exactly the known integers and scales.
void expect_matches_known(const qjit::QuantizedMatrix& matrix, const KnownLayer& layer, const LayerSpec& spec) {
    const qjit::QuantParams& p = matrix.params;
    ASSERT_EQ(p.k, layer.k);
    ASSERT_EQ(p.n, layer.n);
    EXPECT_EQ(p.bits, layer.bits);
    EXPECT_EQ(p.group_size, layer.rows_per_group);
    EXPECT_EQ(p.f16_scales(), spec.scale_dtype == QJIT_DTYPE_F16);
    EXPECT_EQ(p.scales, layer.scales);
    EXPECT_EQ(p.zeros, layer.zeros);

    const std::vector<int32_t> order = expected_row_order(layer);
    std::vector<int32_t> identity(order.size());
    std::iota(identity.begin(), identity.end(), 0);
    if (order == identity)
        EXPECT_TRUE(p.row_order.empty());
    else
        EXPECT_EQ(p.row_order, order);

    ASSERT_EQ(matrix.codes.size(), layer.codes.size());
    int64_t wrong_codes = 0;
    for (int64_t r = 0; r < layer.k; ++r) {
        const int64_t original_row = order[size_t(r)];
        EXPECT_EQ(layer.group_of(original_row), r / layer.rows_per_group) << "storage row " << r;
        for (int64_t column = 0; column < layer.n; ++column)
            wrong_codes += matrix.codes[size_t(r * layer.n + column)] != layer.code(original_row, column);
    }
    EXPECT_EQ(wrong_codes, 0);
}

const std::vector<int> kAllBits = {2, 3, 4, 8};

// ---- tests of the importer ----

TEST(GptqImport, RoundTripIsBitExact) {
    std::mt19937 rng(1234);
    for (int bits : kAllBits)
        for (int64_t k : {32, 64, 172, 1000})
            for (int group_size : {16, 32, 128, QJIT_GROUP_PER_COLUMN})
                for (int64_t n : {1, 7, 64, 33})
                    for (qjit_dtype dtype : {QJIT_DTYPE_F16, QJIT_DTYPE_BF16, QJIT_DTYPE_F32})
                        for (qjit_gptq_format format : {QJIT_GPTQ_V1, QJIT_GPTQ_V2}) {
                            const LayerSpec spec{bits, k, n, group_size, dtype, format, false};
                            SCOPED_TRACE(describe(spec));
                            const KnownLayer layer = make_known_layer(spec, rng);
                            const GptqCheckpoint checkpoint = pack_checkpoint(layer, spec);
                            const qjit::QuantizedMatrix matrix = qjit::import_gptq(k, n, checkpoint.tensors());
                            expect_matches_known(matrix, layer, spec);
                            EXPECT_EQ(qjit::dequantize(matrix), dense_weights(layer));
                        }
}

TEST(GptqImport, ThreeBitValuesStraddleWordBoundaries) {
    // One column of 32 three-bit codes, all zero but codes 10 and 21, which are 7 (binary 111).
    // Code 10 takes bits 30-31 of word 0 and bit 0 of word 1; code 21 bit 31 of word 1 and bits
    // 0-1 of word 2.
    const int32_t qweight[3] = {int32_t(0xC0000000u), int32_t(0x80000001u), 3};
    const int32_t qzeros[1] = {0};
    const float scales[1] = {1.0f};
    qjit_gptq_tensors tensors{};
    tensors.bits = 3;
    tensors.group_size = QJIT_GROUP_PER_COLUMN;
    tensors.qweight = qweight;
    tensors.qzeros = qzeros;
    tensors.scales = scales;
    tensors.scale_dtype = QJIT_DTYPE_F32;
    tensors.checkpoint_format = QJIT_GPTQ_V2;
    const qjit::QuantizedMatrix matrix = qjit::import_gptq(32, 1, tensors);
    for (int row = 0; row < 32; ++row) EXPECT_EQ(matrix.codes[size_t(row)], row == 10 || row == 21 ? 7 : 0) << row;
}

TEST(GptqImport, V1AndV2ImportTheSameMatrix) {
    std::mt19937 rng(99);
    for (int bits : kAllBits)
        for (bool act_order : {false, true}) {
            LayerSpec spec{bits, 172, 33, 32, QJIT_DTYPE_F16, QJIT_GPTQ_V2, act_order};
            SCOPED_TRACE(describe(spec));
            KnownLayer layer = make_known_layer(spec, rng);
            const GptqCheckpoint v2 = pack_checkpoint(layer, spec);
            spec.format = QJIT_GPTQ_V1;
            const GptqCheckpoint v1 = pack_checkpoint(layer, spec);
            ASSERT_NE(v1.qzeros, v2.qzeros);

            const qjit::QuantizedMatrix from_v1 = qjit::import_gptq(spec.k, spec.n, v1.tensors());
            const qjit::QuantizedMatrix from_v2 = qjit::import_gptq(spec.k, spec.n, v2.tensors());
            EXPECT_EQ(from_v1.codes, from_v2.codes);
            EXPECT_EQ(from_v1.params.zeros, from_v2.params.zeros);
            EXPECT_EQ(from_v1.params.scales, from_v2.params.scales);
            EXPECT_EQ(from_v1.params.row_order, from_v2.params.row_order);
            EXPECT_EQ(from_v1.params.symmetric, from_v2.params.symmetric);
            EXPECT_EQ(from_v1.params.zeros, layer.zeros);
        }
}

// A v1 zero of 0 is stored as the field 2^bits - 1 and (2, 4, 8 bits) borrows from the field
// above it in the same word. Group g here has a zero of 0 in column g only, so every field
// position of every word (first, middle, last, and for 3 bits the ones straddling two words)
// holds a 0 once; the last two groups are all 0 and all 2^bits - 1.
TEST(GptqImport, V1ZeroPointsOfZeroAtEveryFieldPosition) {
    std::mt19937 rng(2024);
    for (int bits : kAllBits)
        for (int64_t n : {int64_t(32), int64_t(70)}) {  // 70: a last word only partly filled
            const int64_t groups = n + 2;
            const LayerSpec spec{bits, groups * 16, n, 16, QJIT_DTYPE_F16, QJIT_GPTQ_V1, false};
            SCOPED_TRACE(describe(spec));
            KnownLayer layer = make_known_layer(spec, rng);
            const uint16_t max_code = uint16_t((1 << bits) - 1);
            std::uniform_int_distribution<int> nonzero(1, max_code);
            for (int64_t g = 0; g < groups; ++g)
                for (int64_t c = 0; c < n; ++c) {
                    uint16_t& zero = layer.zeros[size_t(g * n + c)];
                    zero = g == n ? 0 : g == n + 1 ? max_code : g == c ? 0 : uint16_t(nonzero(rng));
                }
            const GptqCheckpoint checkpoint = pack_checkpoint(layer, spec);
            const qjit::QuantizedMatrix matrix = qjit::import_gptq(spec.k, spec.n, checkpoint.tensors());
            expect_matches_known(matrix, layer, spec);
            EXPECT_EQ(qjit::dequantize(matrix), dense_weights(layer));
        }
}

TEST(GptqImport, ActOrderSortsRowsByGroupAndDequantizesInOriginalOrder) {
    std::mt19937 rng(7);
    for (int bits : kAllBits)
        for (auto [k, group_size] : {std::pair<int64_t, int>{64, 16}, {172, 32}, {1000, 128}, {1000, 256}})
            for (qjit_gptq_format format : {QJIT_GPTQ_V1, QJIT_GPTQ_V2}) {
                const LayerSpec spec{bits, k, 33, group_size, QJIT_DTYPE_F32, format, true};
                SCOPED_TRACE(describe(spec));
                const KnownLayer layer = make_known_layer(spec, rng);
                const GptqCheckpoint checkpoint = pack_checkpoint(layer, spec);
                const qjit::QuantizedMatrix matrix = qjit::import_gptq(spec.k, spec.n, checkpoint.tensors());
                EXPECT_TRUE(matrix.params.act_order);
                expect_matches_known(matrix, layer, spec);
                EXPECT_EQ(qjit::dequantize(matrix), dense_weights(layer));
            }
}

TEST(GptqImport, SortedGIdxIsNotActOrder) {
    std::mt19937 rng(5);
    const LayerSpec spec{4, 172, 7, 32, QJIT_DTYPE_F16, QJIT_GPTQ_V1, false};
    KnownLayer layer = make_known_layer(spec, rng);
    GptqCheckpoint checkpoint = pack_checkpoint(layer, spec);
    for (int64_t row = 0; row < spec.k; ++row) checkpoint.g_idx.push_back(int32_t(row / 32));
    const qjit::QuantizedMatrix matrix = qjit::import_gptq(spec.k, spec.n, checkpoint.tensors());
    EXPECT_FALSE(matrix.params.act_order);
    expect_matches_known(matrix, layer, spec);
}

// ---- through the C API ----

class GptqCApi : public ::testing::Test {
protected:
    void SetUp() override {
        qjit_context_options options;
        qjit_context_options_init(&options);
        tuning_db_path_ = ::testing::TempDir() + "qjit_test_gptq_import_tuning.yaml";
        options.tuning_db_path = tuning_db_path_.c_str();
        options.activations = QJIT_ACTIVATIONS_F32;  // exact: these tests check the import, not int8 activations
        ASSERT_EQ(qjit_context_create(&options, &context_), QJIT_OK) << qjit_last_error();
    }
    void TearDown() override { qjit_context_destroy(context_); }

    // Creates a layer from the checkpoint, expecting success.
    qjit_linear* create(const KnownLayer& layer, const GptqCheckpoint& checkpoint) {
        const qjit_gptq_tensors tensors = checkpoint.tensors();
        qjit_linear* linear = nullptr;
        EXPECT_EQ(qjit_linear_create_from_gptq(context_, layer.k, layer.n, &tensors, &linear), QJIT_OK)
            << qjit_last_error();
        return linear;
    }

    qjit_context* context_ = nullptr;
    std::string tuning_db_path_;
};

// y = x W through the layer, against a double-precision product with the known dense W.
void expect_forward_matches(qjit_linear* linear, const KnownLayer& layer, int64_t m, std::mt19937& rng) {
    std::uniform_real_distribution<float> x_dist(-1.0f, 1.0f);
    std::vector<float> x(size_t(m * layer.k));
    for (float& value : x) value = x_dist(rng);
    std::vector<float> y(size_t(m * layer.n), std::numeric_limits<float>::quiet_NaN());
    ASSERT_EQ(qjit_linear_forward(linear, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();

    const std::vector<float> w = dense_weights(layer);
    for (int64_t i = 0; i < m; ++i) {
        const float* x_row = &x[size_t(i * layer.k)];
        for (int64_t column = 0; column < layer.n; ++column) {
            double exact = 0.0;
            for (int64_t row = 0; row < layer.k; ++row) exact += double(x_row[row]) * double(w[size_t(row * layer.n + column)]);
            EXPECT_NEAR(y[size_t(i * layer.n + column)], exact, forward_tolerance(layer, x_row, column))
                << "m " << m << ", row " << i << ", column " << column;
        }
    }
}

TEST_F(GptqCApi, ForwardMatchesTheKnownMatrix) {
    std::mt19937 rng(42);
    for (int bits : kAllBits)
        for (auto [k, n, group_size] : {std::tuple<int64_t, int64_t, int>{64, 7, 16}, {172, 33, 32}, {1000, 64, 128}})
            for (bool act_order : {false, true}) {
                const LayerSpec spec{bits, k, n, group_size, QJIT_DTYPE_F16, QJIT_GPTQ_V1, act_order};
                SCOPED_TRACE(describe(spec));
                const KnownLayer layer = make_known_layer(spec, rng);
                const GptqCheckpoint checkpoint = pack_checkpoint(layer, spec);
                qjit_linear* linear = create(layer, checkpoint);
                ASSERT_NE(linear, nullptr);

                qjit_linear_info info{};
                ASSERT_EQ(qjit_linear_get_info(linear, &info), QJIT_OK) << qjit_last_error();
                EXPECT_EQ(info.k, k);
                EXPECT_EQ(info.n, n);
                EXPECT_EQ(info.bits, bits);
                EXPECT_EQ(info.group_size, group_size);
                EXPECT_EQ(info.act_order != 0, act_order);

                // The dense matrix, in the original row order; each weight within a rounding or two.
                std::vector<float> dequantized(size_t(k * n));
                ASSERT_EQ(qjit_linear_dequantize(linear, dequantized.data()), QJIT_OK) << qjit_last_error();
                for (int64_t row = 0; row < k; ++row)
                    for (int64_t column = 0; column < n; ++column) {
                        const size_t meta = layer.meta_index(row, column);
                        const double bound = 2.0 * FLT_EPSILON * layer.scales[meta] *
                                             (double(layer.code(row, column)) + double(layer.zeros[meta]));
                        ASSERT_NEAR(dequantized[size_t(row * n + column)], layer.weight(row, column), bound)
                            << "row " << row << ", column " << column;
                    }

                for (int64_t m : {1, 3, 16}) expect_forward_matches(linear, layer, m, rng);
                qjit_linear_destroy(linear);
            }
}

TEST_F(GptqCApi, DetectsSymmetricZeroPoints) {
    std::mt19937 rng(3);
    for (int bits : kAllBits)
        for (qjit_gptq_format format : {QJIT_GPTQ_V1, QJIT_GPTQ_V2}) {
            const LayerSpec spec{bits, 172, 33, 32, QJIT_DTYPE_F16, format, true};
            SCOPED_TRACE(describe(spec));
            KnownLayer layer = make_known_layer(spec, rng);
            std::fill(layer.zeros.begin(), layer.zeros.end(), uint16_t(1u << (bits - 1)));
            const GptqCheckpoint symmetric = pack_checkpoint(layer, spec);
            EXPECT_TRUE(qjit::import_gptq(spec.k, spec.n, symmetric.tensors()).params.symmetric);

            qjit_linear* linear = create(layer, symmetric);
            ASSERT_NE(linear, nullptr);
            qjit_linear_info info{};
            ASSERT_EQ(qjit_linear_get_info(linear, &info), QJIT_OK) << qjit_last_error();
            EXPECT_NE(info.symmetric, 0);
            expect_forward_matches(linear, layer, 3, rng);
            qjit_linear_destroy(linear);

            // One zero point off the middle makes the layer asymmetric.
            layer.zeros.back() = uint16_t((1u << (bits - 1)) - 1);
            const GptqCheckpoint asymmetric = pack_checkpoint(layer, spec);
            EXPECT_FALSE(qjit::import_gptq(spec.k, spec.n, asymmetric.tensors()).params.symmetric);
            linear = create(layer, asymmetric);
            ASSERT_NE(linear, nullptr);
            ASSERT_EQ(qjit_linear_get_info(linear, &info), QJIT_OK) << qjit_last_error();
            EXPECT_EQ(info.symmetric, 0);
            qjit_linear_destroy(linear);
        }
}

TEST_F(GptqCApi, RejectsBadInputsWithAMessage) {
    std::mt19937 rng(11);
    const LayerSpec spec{4, 64, 8, 16, QJIT_DTYPE_F16, QJIT_GPTQ_V1, true};
    const KnownLayer layer = make_known_layer(spec, rng);
    const GptqCheckpoint checkpoint = pack_checkpoint(layer, spec);

    std::vector<int32_t> g_idx_out_of_range = layer.g_idx;
    g_idx_out_of_range[5] = 4;  // groups are 0..3
    std::vector<int32_t> g_idx_negative = layer.g_idx;
    g_idx_negative[0] = -1;
    std::vector<int32_t> g_idx_unequal = layer.g_idx;  // group 0 gets 15 rows, group 1 17
    *std::find(g_idx_unequal.begin(), g_idx_unequal.end(), 0) = 1;
    std::vector<uint16_t> infinite_scales = checkpoint.scales_f16;
    infinite_scales[3] = 0x7c00;

    struct BadCase {
        std::string name;
        int64_t k, n;
        std::function<void(qjit_gptq_tensors&)> spoil;
        std::string message_mentions;
    };
    const std::vector<BadCase> cases = {
        {"null qweight", 64, 8, [](qjit_gptq_tensors& t) { t.qweight = nullptr; }, "qweight"},
        {"null qzeros", 64, 8, [](qjit_gptq_tensors& t) { t.qzeros = nullptr; }, "qzeros"},
        {"null scales", 64, 8, [](qjit_gptq_tensors& t) { t.scales = nullptr; }, "scales"},
        {"bits 5", 64, 8, [](qjit_gptq_tensors& t) { t.bits = 5; }, "bits"},
        {"bits 0", 64, 8, [](qjit_gptq_tensors& t) { t.bits = 0; }, "bits"},
        {"group 0", 64, 8, [](qjit_gptq_tensors& t) { t.group_size = 0; }, "group_size"},
        {"group 100", 64, 8, [](qjit_gptq_tensors& t) { t.group_size = 100; }, "group_size"},
        {"k 0", 0, 8, [](qjit_gptq_tensors&) {}, "k"},
        {"n 0", 64, 0, [](qjit_gptq_tensors&) {}, "n"},
        {"g_idx entry out of range", 64, 8, [&](qjit_gptq_tensors& t) { t.g_idx = g_idx_out_of_range.data(); }, "g_idx"},
        {"g_idx entry negative", 64, 8, [&](qjit_gptq_tensors& t) { t.g_idx = g_idx_negative.data(); }, "g_idx"},
        {"g_idx unequal groups", 64, 8, [&](qjit_gptq_tensors& t) { t.g_idx = g_idx_unequal.data(); }, "group 0"},
        {"checkpoint_format 0", 64, 8, [](qjit_gptq_tensors& t) { t.checkpoint_format = static_cast<qjit_gptq_format>(0); },
         "checkpoint_format"},
        {"checkpoint_format 3", 64, 8, [](qjit_gptq_tensors& t) { t.checkpoint_format = static_cast<qjit_gptq_format>(3); },
         "checkpoint_format"},
        {"scale_dtype 7", 64, 8, [](qjit_gptq_tensors& t) { t.scale_dtype = static_cast<qjit_dtype>(7); }, "scale_dtype"},
        {"infinite scale", 64, 8, [&](qjit_gptq_tensors& t) { t.scales = infinite_scales.data(); }, "scales"},
    };
    for (const BadCase& bad : cases) {
        SCOPED_TRACE(bad.name);
        qjit_gptq_tensors tensors = checkpoint.tensors();
        bad.spoil(tensors);
        qjit_linear* linear = nullptr;
        EXPECT_EQ(qjit_linear_create_from_gptq(context_, bad.k, bad.n, &tensors, &linear), QJIT_ERROR_INVALID_ARGUMENT);
        const std::string message = qjit_last_error();
        EXPECT_NE(message.find(bad.message_mentions), std::string::npos) << "message: " << message;
        qjit_linear_destroy(linear);
    }

    qjit_linear* linear = nullptr;
    EXPECT_EQ(qjit_linear_create_from_gptq(context_, 64, 8, nullptr, &linear), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_STRNE(qjit_last_error(), "");
    qjit_linear_destroy(linear);
}

}  // namespace
