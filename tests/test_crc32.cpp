// CRC-32 and CRC-32C (base/crc32.hpp): the standard check values, and the sliced and hardware loops
// against the plain one-byte-at-a-time definition at every length and alignment.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "base/crc32.hpp"

namespace qjit {
namespace {

uint32_t bitwise_crc(uint32_t polynomial, const uint8_t* bytes, size_t size, uint32_t crc) {
    crc = ~crc;
    for (size_t i = 0; i < size; ++i) {
        crc ^= bytes[i];
        for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? polynomial ^ (crc >> 1) : crc >> 1;
    }
    return ~crc;
}

using Crc = uint32_t (*)(const void*, size_t, uint32_t);

// `crc` equals the bitwise CRC of `polynomial` at every offset of 0..7, every size in steps of
// `step` and two seeds, and chained calls continue one CRC.
void expect_the_bitwise_definition(Crc crc, uint32_t polynomial, uint32_t random_seed, size_t step, uint32_t crc_seed) {
    std::mt19937 rng(random_seed);
    std::vector<uint8_t> bytes(300);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    for (size_t offset = 0; offset < 8; ++offset)
        for (size_t size = 0; offset + size <= bytes.size(); size += step)
            for (const uint32_t seed : {0u, crc_seed})
                ASSERT_EQ(crc(bytes.data() + offset, size, seed), bitwise_crc(polynomial, bytes.data() + offset, size, seed))
                    << "offset " << offset << " size " << size;
    EXPECT_EQ(crc(bytes.data() + 100, 200, crc(bytes.data(), 100, 0)), crc(bytes.data(), 300, 0));
}

TEST(Crc32, StandardCheckValue) {
    const char text[] = "123456789";
    EXPECT_EQ(crc32(text, 9), 0xCBF43926u);
    EXPECT_EQ(crc32(text, 0), 0u);
}

TEST(Crc32, EqualsTheBitwiseDefinitionAtEveryLengthOffsetAndSeed) {
    expect_the_bitwise_definition(crc32, 0xEDB88320u, 5, 7, 0x12345678u);
}

TEST(Crc32c, StandardCheckValue) {
    const char text[] = "123456789";
    EXPECT_EQ(crc32c(text, 9), 0xE3069283u);
    EXPECT_EQ(crc32c_portable(text, 9), 0xE3069283u);
    EXPECT_EQ(crc32c(text, 0), 0u);
}

// crc32c runs SSE4.2's instruction where the CPU has it: both it and the table loop must equal the
// definition.
TEST(Crc32c, HardwareAndTablesEqualTheBitwiseDefinition) {
    expect_the_bitwise_definition(crc32c, 0x82F63B78u, 9, 5, 0x9abcdef0u);
    expect_the_bitwise_definition(crc32c_portable, 0x82F63B78u, 9, 5, 0x9abcdef0u);
}

}  // namespace
}  // namespace qjit
