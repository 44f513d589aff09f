// CRC-32 (base/crc32.hpp): the standard check value, and the sliced loop against the plain
// one-byte-at-a-time definition at every length and alignment.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "base/crc32.hpp"

namespace qjit {
namespace {

uint32_t bitwise_crc32(const uint8_t* bytes, size_t size, uint32_t crc) {
    crc = ~crc;
    for (size_t i = 0; i < size; ++i) {
        crc ^= bytes[i];
        for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
    }
    return ~crc;
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

}  // namespace
}  // namespace qjit
