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

uint32_t bitwise_crc32(const uint8_t* bytes, size_t size, uint32_t crc) {
    return bitwise_crc(0xEDB88320u, bytes, size, crc);
}

TEST(Crc32, StandardCheckValue) {
    const char text[] = "123456789";
    EXPECT_EQ(crc32(text, 9), 0xCBF43926u);
    EXPECT_EQ(crc32(text, 0), 0u);
}

TEST(Crc32, EqualsTheBitwiseDefinitionAtEveryLengthOffsetAndSeed) {
    std::mt19937 rng(5);
    std::vector<uint8_t> bytes(300);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    for (size_t offset = 0; offset < 8; ++offset)
        for (size_t size = 0; offset + size <= bytes.size(); size += 7)
            for (const uint32_t seed : {0u, 0x12345678u})
                ASSERT_EQ(crc32(bytes.data() + offset, size, seed), bitwise_crc32(bytes.data() + offset, size, seed))
                    << "offset " << offset << " size " << size;
    // Chained calls continue one CRC.
    EXPECT_EQ(crc32(bytes.data() + 100, 200, crc32(bytes.data(), 100)), crc32(bytes.data(), 300));
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
    std::mt19937 rng(9);
    std::vector<uint8_t> bytes(300);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    for (size_t offset = 0; offset < 8; ++offset)
        for (size_t size = 0; offset + size <= bytes.size(); size += 5)
            for (const uint32_t seed : {0u, 0x9abcdef0u}) {
                const uint32_t expected = bitwise_crc(0x82F63B78u, bytes.data() + offset, size, seed);
                ASSERT_EQ(crc32c(bytes.data() + offset, size, seed), expected) << "offset " << offset << " size " << size;
                ASSERT_EQ(crc32c_portable(bytes.data() + offset, size, seed), expected);
            }
    EXPECT_EQ(crc32c(bytes.data() + 99, 201, crc32c(bytes.data(), 99)), crc32c(bytes.data(), 300));
}

}  // namespace
}  // namespace qjit
