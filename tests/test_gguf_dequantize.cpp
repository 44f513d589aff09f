// ggml's dequantizers (io/gguf_dequantize.cpp): one hand-built block per type whose values are
// derived by hand from the block layout (chosen so that every product is exact), pseudo-random rows
// against checksums of the gguf package's numpy results (bit for bit), whole tensors, and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "io/gguf_dequantize.hpp"
#include "gguf_writer.hpp"

namespace qjit {
namespace {

std::vector<float> dequantized(GgmlType type, const std::vector<uint8_t>& bytes, int64_t k) {
    std::vector<float> out(static_cast<size_t>(k));
    dequantize_gguf_row(type, bytes.data(), k, out.data());
    return out;
}

// Appends a block's bytes: fp16 constants are written as their bit patterns.
void append(std::vector<uint8_t>* block, std::initializer_list<uint8_t> bytes) { block->insert(block->end(), bytes); }
void append_fp16(std::vector<uint8_t>* block, uint16_t bits) { append(block, {uint8_t(bits), uint8_t(bits >> 8)}); }
void append_repeated(std::vector<uint8_t>* block, size_t count, uint8_t byte) {
    block->insert(block->end(), count, byte);
}

constexpr uint16_t kHalfOne = 0x3c00, kHalfHalf = 0x3800, kHalfQuarter = 0x3400, kHalfEighth = 0x3000,
                   kHalfMinusOne = 0xbc00, kHalfTwo = 0x4000;

// 16 bytes whose low nibbles count 0..15 up and high nibbles 15..0 down.
void append_nibble_ramp(std::vector<uint8_t>* block) {
    for (int j = 0; j < 16; ++j) block->push_back(uint8_t(j | (15 - j) << 4));
}

TEST(GgufDequantize, FloatTypes) {
    std::vector<uint8_t> f32(8);
    const float f32_values[2] = {1.5f, -0.0625f};
    std::memcpy(f32.data(), f32_values, sizeof f32_values);
    EXPECT_EQ(dequantized(GgmlType::F32, f32, 2), (std::vector<float>{1.5f, -0.0625f}));
    // 1.0, -2.0, 65504 (the largest fp16), 2^-24 (the smallest subnormal).
    EXPECT_EQ(dequantized(GgmlType::F16, {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00}, 4),
              (std::vector<float>{1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24)}));
    // 1.5 and -3.0 as the upper halves of their fp32 patterns.
    EXPECT_EQ(dequantized(GgmlType::BF16, {0xc0, 0x3f, 0x40, 0xc0}, 2), (std::vector<float>{1.5f, -3.0f}));
}

// d = 0.5; value j = d * (low nibble j - 8), value 16 + j = d * (high nibble j - 8).
TEST(GgufDequantize, Q4_0) {
    std::vector<uint8_t> block;
    append_fp16(&block, kHalfHalf);
    append_nibble_ramp(&block);
    const std::vector<float> out = dequantized(GgmlType::Q4_0, block, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], 0.5f * float(j - 8)) << j;
        EXPECT_EQ(out[16 + j], 0.5f * float(7 - j)) << j;
    }
    EXPECT_EQ(out[0], -4.0f);
    EXPECT_EQ(out[31], -4.0f);
    EXPECT_EQ(out[16], 3.5f);
}

// d = 0.25, m = -1: d * q + m.
TEST(GgufDequantize, Q4_1) {
    std::vector<uint8_t> block;
    append_fp16(&block, kHalfQuarter);
    append_fp16(&block, kHalfMinusOne);
    append_nibble_ramp(&block);
    const std::vector<float> out = dequantized(GgmlType::Q4_1, block, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], 0.25f * float(j) - 1.0f) << j;
        EXPECT_EQ(out[16 + j], 0.25f * float(15 - j) - 1.0f) << j;
    }
    EXPECT_EQ(out[15], 2.75f);
}

// d = 1, qh = 0xAAAAAAAA: the odd values get the fifth bit; q - 16.
TEST(GgufDequantize, Q5_0) {
    std::vector<uint8_t> block;
    append_fp16(&block, kHalfOne);
    append(&block, {0xaa, 0xaa, 0xaa, 0xaa});
    append_nibble_ramp(&block);
    const std::vector<float> out = dequantized(GgmlType::Q5_0, block, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], float(j + 16 * (j & 1) - 16)) << j;
        EXPECT_EQ(out[16 + j], float(15 - j + 16 * (j & 1) - 16)) << j;
    }
    EXPECT_EQ(out[0], -16.0f);
    EXPECT_EQ(out[1], 1.0f);
    EXPECT_EQ(out[17], 14.0f);
}

// d = 0.5, m = 2, qh = 0x0000FFFF: values 0..15 get the fifth bit; d * q + m.
TEST(GgufDequantize, Q5_1) {
    std::vector<uint8_t> block;
    append_fp16(&block, kHalfHalf);
    append_fp16(&block, kHalfTwo);
    append(&block, {0xff, 0xff, 0x00, 0x00});
    append_nibble_ramp(&block);
    const std::vector<float> out = dequantized(GgmlType::Q5_1, block, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], 0.5f * float(j + 16) + 2.0f) << j;
        EXPECT_EQ(out[16 + j], 0.5f * float(15 - j) + 2.0f) << j;
    }
    EXPECT_EQ(out[0], 10.0f);
    EXPECT_EQ(out[31], 2.0f);
}

// d = 0.125, codes 8i - 128 (int8): value i = i - 16.
TEST(GgufDequantize, Q8_0) {
    std::vector<uint8_t> block;
    append_fp16(&block, kHalfEighth);
    for (int i = 0; i < 32; ++i) block.push_back(uint8_t(int8_t(8 * i - 128)));
    const std::vector<float> out = dequantized(GgmlType::Q8_0, block, 32);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], float(i - 16)) << i;
}

// Scale byte s = s | (15 - s) << 4 (scale s, min 15 - s), every code byte 0b11100100 (value i's
// code is (i % 128) / 32), d = 1, dmin = 0.5: (d * s) * q - dmin * (15 - s).
TEST(GgufDequantize, Q2_K) {
    std::vector<uint8_t> block;
    for (int s = 0; s < 16; ++s) block.push_back(uint8_t(s | (15 - s) << 4));
    append_repeated(&block, 64, 0xe4);
    append_fp16(&block, kHalfOne);
    append_fp16(&block, kHalfHalf);
    const std::vector<float> out = dequantized(GgmlType::Q2_K, block, 256);
    for (int i = 0; i < 256; ++i) {
        const int s = i / 16, q = i % 128 / 32;
        EXPECT_EQ(out[i], float(s * q) - 0.5f * float(15 - s)) << i;
    }
    EXPECT_EQ(out[0], -7.5f);
    EXPECT_EQ(out[100], 13.5f);
    EXPECT_EQ(out[255], 45.0f);
}

// Scale codes 24 + s (scales s - 8) packed by hand: low nibbles 8..15 and 0..7 in bytes 0..7
// (0x08, 0x19, ..., 0x7F), top bits 1 for s < 8 and 2 for s >= 8 in bytes 8..11 (0b10100101);
// hmask bytes 0x0F (values 128.. lose 4), code bytes 0b11100100, d = 0.5.
TEST(GgufDequantize, Q3_K) {
    std::vector<uint8_t> block;
    append_repeated(&block, 32, 0x0f);
    append_repeated(&block, 64, 0xe4);
    append(&block, {0x08, 0x19, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f, 0xa5, 0xa5, 0xa5, 0xa5});
    append_fp16(&block, kHalfHalf);
    const std::vector<float> out = dequantized(GgmlType::Q3_K, block, 256);
    for (int i = 0; i < 256; ++i) {
        const int scale = i / 16 - 8, q = i % 128 / 32 - (i >= 128 ? 4 : 0);
        EXPECT_EQ(out[i], 0.5f * float(scale) * float(q)) << i;
    }
    EXPECT_EQ(out[127], -1.5f);
    EXPECT_EQ(out[200], -4.0f);
    EXPECT_EQ(out[255], -3.5f);
}

// The K-quant scales and mins of sub-blocks 0..7: scales {1, 2, 3, 4, 17, 33, 49, 63}, mins
// {5, 6, 7, 8, 18, 34, 50, 62}, packed by hand: bytes 0..3 hold scales 0..3 with the top bits of
// scales 4..7 (1, 2, 3, 3) above; bytes 4..7 the mins likewise (top bits 1, 2, 3, 3); bytes
// 8..11 the low nibbles of scale and min 4..7.
constexpr int kKScales[8] = {1, 2, 3, 4, 17, 33, 49, 63};
constexpr int kKMins[8] = {5, 6, 7, 8, 18, 34, 50, 62};
void append_k_scales(std::vector<uint8_t>* block) {
    append(block, {0x41, 0x82, 0xc3, 0xc4, 0x45, 0x86, 0xc7, 0xc8, 0x21, 0x21, 0x21, 0xef});
}
// Code bytes: each 32-byte chunk is low nibbles l % 16, high nibbles 15 - l % 16.
void append_k_nibbles(std::vector<uint8_t>* block) {
    for (int chunk = 0; chunk < 4; ++chunk)
        for (int l = 0; l < 32; ++l) block->push_back(uint8_t((l & 15) | (15 - (l & 15)) << 4));
}
int k_nibble(int i) { return (i / 32) % 2 == 0 ? i % 16 : 15 - i % 16; }

// d = 0.5, dmin = 0.25: (d * scale) * q - dmin * min per 32 values.
TEST(GgufDequantize, Q4_K) {
    std::vector<uint8_t> block;
    append_fp16(&block, kHalfHalf);
    append_fp16(&block, kHalfQuarter);
    append_k_scales(&block);
    append_k_nibbles(&block);
    const std::vector<float> out = dequantized(GgmlType::Q4_K, block, 256);
    for (int i = 0; i < 256; ++i) {
        const int j = i / 32;
        EXPECT_EQ(out[i], 0.5f * float(kKScales[j]) * float(k_nibble(i)) - 0.25f * float(kKMins[j])) << i;
    }
    EXPECT_EQ(out[0], -1.25f);
    EXPECT_EQ(out[224], 457.0f);
    EXPECT_EQ(out[255], -15.5f);
}

// As Q4_K, with qh bytes 0x55: the even sub-blocks' values get the fifth bit (16).
TEST(GgufDequantize, Q5_K) {
    std::vector<uint8_t> block;
    append_fp16(&block, kHalfHalf);
    append_fp16(&block, kHalfQuarter);
    append_k_scales(&block);
    append_repeated(&block, 32, 0x55);
    append_k_nibbles(&block);
    const std::vector<float> out = dequantized(GgmlType::Q5_K, block, 256);
    for (int i = 0; i < 256; ++i) {
        const int j = i / 32, q = k_nibble(i) + (j % 2 == 0 ? 16 : 0);
        EXPECT_EQ(out[i], 0.5f * float(kKScales[j]) * float(q) - 0.25f * float(kKMins[j])) << i;
    }
    EXPECT_EQ(out[0], 6.75f);
    EXPECT_EQ(out[255], -15.5f);
}

// ql bytes low l % 16, high 15 - l % 16; qh bytes 0b11100100 (value f of a half takes bits
// (f / 32)); int8 scales s - 8; d = 0.5: (d * scale) * (code - 32).
TEST(GgufDequantize, Q6_K) {
    std::vector<uint8_t> block;
    for (int i = 0; i < 128; ++i) block.push_back(uint8_t((i & 15) | (15 - (i & 15)) << 4));
    append_repeated(&block, 64, 0xe4);
    for (int s = 0; s < 16; ++s) block.push_back(uint8_t(int8_t(s - 8)));
    append_fp16(&block, kHalfHalf);
    const std::vector<float> out = dequantized(GgmlType::Q6_K, block, 256);
    for (int i = 0; i < 256; ++i) {
        const int f = i % 128, l = f % 64;
        const int low = f < 64 ? l % 16 : 15 - l % 16;
        const int code = low | (f / 32) << 4;
        EXPECT_EQ(out[i], 0.5f * float(i / 16 - 8) * float(code - 32)) << i;
    }
    EXPECT_EQ(out[0], 128.0f);
    EXPECT_EQ(out[255], 56.0f);
}

// ggml's IQ4_NL levels, written out here from the IQ4_NL definition.
constexpr int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// d = 0.5; value j = d * level[low nibble j], value 16 + j = d * level[high nibble j].
TEST(GgufDequantize, IQ4_NL) {
    std::vector<uint8_t> block;
    append_fp16(&block, kHalfHalf);
    append_nibble_ramp(&block);
    const std::vector<float> out = dequantized(GgmlType::IQ4_NL, block, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], 0.5f * float(kLevels[j])) << j;
        EXPECT_EQ(out[16 + j], 0.5f * float(kLevels[15 - j])) << j;
    }
    EXPECT_EQ(out[0], -63.5f);
}

// d = 0.25; sub-block j's 6-bit scale is j + 28 (low nibble j + 12 & 15 in scales_l, the top bits
// in scales_h), so scale - 32 = j - 4; each sub-block's nibbles are the ramp.
TEST(GgufDequantize, IQ4_XS) {
    std::vector<uint8_t> block;
    append_fp16(&block, kHalfQuarter);
    uint16_t scales_h = 0;
    uint8_t scales_l[4] = {};
    for (int j = 0; j < 8; ++j) {
        const int code = j + 28;
        scales_l[j / 2] = uint8_t(scales_l[j / 2] | (code & 15) << (4 * (j % 2)));
        scales_h = uint16_t(scales_h | (code >> 4) << (2 * j));
    }
    append(&block, {uint8_t(scales_h), uint8_t(scales_h >> 8), scales_l[0], scales_l[1], scales_l[2], scales_l[3]});
    for (int j = 0; j < 8; ++j) append_nibble_ramp(&block);
    ASSERT_EQ(block.size(), 136u);
    const std::vector<float> out = dequantized(GgmlType::IQ4_XS, block, 256);
    for (int i = 0; i < 256; ++i) {
        const int v = i % 32, nibble = v < 16 ? v : 31 - v;
        EXPECT_EQ(out[i], 0.25f * float(i / 32 - 4) * float(kLevels[nibble])) << i;
    }
    EXPECT_EQ(out[0], 127.0f);  // 0.25 * -4 * -127
}

// A row of several blocks dequantizes block after block.
TEST(GgufDequantize, RowsOfSeveralBlocks) {
    std::vector<uint8_t> row;
    for (const uint16_t d : {kHalfHalf, kHalfTwo}) {
        append_fp16(&row, d);
        append_nibble_ramp(&row);
    }
    const std::vector<float> out = dequantized(GgmlType::Q4_0, row, 64);
    EXPECT_EQ(out[0], -4.0f);
    EXPECT_EQ(out[32], -16.0f);
    EXPECT_EQ(out[63], -16.0f);
    EXPECT_EQ(out[48], 14.0f);
}

// The recipe of tests/gguf_reference_checksums.py: splitmix64 bytes seeded with the type number,
// each block's 16-bit floats kept finite and below 2 by clearing their exponent's top bit.
std::vector<uint8_t> pseudo_random_row(GgmlType type, int64_t values, const std::vector<int>& float_offsets) {
    GgmlBlock block;
    EXPECT_TRUE(ggml_block_of(type, &block));
    std::vector<uint8_t> bytes(size_t(values / block.values * block.bytes));
    uint64_t state = uint64_t(type);
    for (size_t at = 0; at < bytes.size(); at += 8) {
        state += 0x9E3779B97F4A7C15ull;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        for (size_t i = 0; i < 8 && at + i < bytes.size(); ++i) bytes[at + i] = uint8_t(z >> (8 * i));
    }
    for (size_t b = 0; b < bytes.size(); b += size_t(block.bytes))
        for (const int offset : float_offsets) bytes[b + size_t(offset) + 1] &= 0xbf;
    return bytes;
}

// Bit for bit what gguf 0.19's numpy dequantizers give (tests/gguf_reference_checksums.py prints
// the table): scales over the whole finite fp16 range below 2 and every code, so a wrong bit,
// nibble, sign, scale or rounding changes the checksum.
TEST(GgufDequantize, MatchesGgufPyBitForBit) {
    const struct {
        GgmlType type;
        std::vector<int> float_offsets;
        uint32_t crc;
    } expected[] = {
        {GgmlType::F32, {2}, 0x1d5fa622u},     {GgmlType::F16, {0}, 0xf75a2001u},
        {GgmlType::BF16, {0}, 0x3875ca52u},    {GgmlType::Q4_0, {0}, 0xa273f9a9u},
        {GgmlType::Q4_1, {0, 2}, 0xbb7f5a1bu}, {GgmlType::Q5_0, {0}, 0x8841ab36u},
        {GgmlType::Q5_1, {0, 2}, 0x70adc842u}, {GgmlType::Q8_0, {0}, 0x88853f4cu},
        {GgmlType::Q2_K, {80, 82}, 0xb88919a3u}, {GgmlType::Q3_K, {108}, 0x6237351cu},
        {GgmlType::Q4_K, {0, 2}, 0xa48063eau}, {GgmlType::Q5_K, {0, 2}, 0xbfdfef19u},
        {GgmlType::Q6_K, {208}, 0xbd8cc2a8u},  {GgmlType::IQ4_NL, {0}, 0x9b600cb5u},
        {GgmlType::IQ4_XS, {0}, 0x07b3cd02u},
    };
    constexpr int64_t kValues = 4096;
    for (const auto& type : expected) {
        SCOPED_TRACE(ggml_type_name(type.type));
        const std::vector<float> out =
            dequantized(type.type, pseudo_random_row(type.type, kValues, type.float_offsets), kValues);
        EXPECT_EQ(crc32(out.data(), out.size() * sizeof(float)), type.crc);
    }
}

// A parsed tensor of two rows dequantizes to [rows][k] in stored order.
TEST(GgufDequantize, WholeTensor) {
    std::string data;
    for (const uint16_t d : {kHalfOne, kHalfHalf}) {  // row 0, then row 1
        test::append_le(&data, d);
        for (int i = 0; i < 32; ++i) data.push_back(char(int8_t(i - 16)));
    }
    const std::string bytes = test::GgufWriter().tensor({"w", 8, {32, 2}, data, std::nullopt}).bytes();
    const auto file = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "w.gguf");
    const std::vector<float> values = dequantize_gguf(file->tensor("w"));
    ASSERT_EQ(values.size(), 64u);
    EXPECT_EQ(values[0], -16.0f);
    EXPECT_EQ(values[31], 15.0f);
    EXPECT_EQ(values[32], -8.0f);
    EXPECT_EQ(values[63], 7.5f);
}

TEST(GgufDequantize, RefusesOtherTypesAndBadShapes) {
    const std::vector<uint8_t> bytes(512);
    float out[256];
    for (const GgmlType type : {GgmlType::IQ2_XXS, GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::TQ1_0, GgmlType::I32,
                                GgmlType::F64, GgmlType::MXFP4, GgmlType(31)}) {
        EXPECT_FALSE(gguf_dequantize_supported(type));
        try {
            dequantize_gguf_row(type, bytes.data(), 256, out);
            ADD_FAILURE() << ggml_type_name(type) << " was dequantized";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_UNSUPPORTED);
            const std::string refusal = "dequantizing ggml " + ggml_type_name(type) + " tensors is not supported";
            EXPECT_NE(std::string(e.what()).find(refusal), std::string::npos) << e.what();
        }
    }
    EXPECT_TRUE(gguf_dequantize_supported(GgmlType::Q6_K));
    try {
        dequantize_gguf_row(GgmlType::Q4_K, bytes.data(), 128, out);
        ADD_FAILURE() << "half a Q4_K block was dequantized";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("k = 128 is not a whole number of Q4_K blocks"), std::string::npos)
            << e.what();
    }
    GgufTensor short_tensor{"short", GgmlType::Q4_0, {32, 2}, bytes.data(), 18};
    try {
        dequantize_gguf(short_tensor);
        ADD_FAILURE() << "a tensor with too few bytes was dequantized";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("'short' holds 18 bytes, not 2 rows of 18"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace qjit
