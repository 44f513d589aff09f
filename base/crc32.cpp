#include "base/crc32.hpp"

#include <array>
#include <cstring>

#include <nmmintrin.h>

namespace qjit {

namespace {

// Slicing by 8 (Intel's method): table[j][b] is the CRC of byte b followed by j zero bytes, so eight
// table lookups advance the CRC by eight bytes at once, several times faster than one lookup a byte.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables(uint32_t polynomial) {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? polynomial ^ (c >> 1) : c >> 1;
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (size_t j = 1; j < t.size(); ++j) t[j][i] = t[0][t[j - 1][i] & 0xffu] ^ (t[j - 1][i] >> 8);
    return t;
}

uint32_t sliced_crc(const Tables& t, const void* data, size_t size, uint32_t crc) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    crc = ~crc;
    for (; size >= 8; size -= 8, bytes += 8) {
        uint32_t low, high;
        std::memcpy(&low, bytes, 4);  // little-endian loads: the reflected CRC takes bytes in order
        std::memcpy(&high, bytes + 4, 4);
        low ^= crc;
        crc = t[7][low & 0xffu] ^ t[6][(low >> 8) & 0xffu] ^ t[5][(low >> 16) & 0xffu] ^ t[4][low >> 24] ^
              t[3][high & 0xffu] ^ t[2][(high >> 8) & 0xffu] ^ t[1][(high >> 16) & 0xffu] ^ t[0][high >> 24];
    }
    for (; size > 0; --size, ++bytes) crc = t[0][(crc ^ *bytes) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

__attribute__((target("sse4.2"))) uint32_t hardware_crc32c(const void* data, size_t size, uint32_t crc) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    uint64_t c = ~crc;
    for (; size >= 8; size -= 8, bytes += 8) {
        uint64_t word;
        std::memcpy(&word, bytes, 8);
        c = _mm_crc32_u64(c, word);
    }
    uint32_t c32 = uint32_t(c);
    for (; size > 0; --size, ++bytes) c32 = _mm_crc32_u8(c32, *bytes);
    return ~c32;
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
    static const Tables t = make_tables(0xEDB88320u);
    return sliced_crc(t, data, size, crc);
}

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
    static const Tables t = make_tables(0x82F63B78u);
    return sliced_crc(t, data, size, crc);
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
    static const bool hardware = __builtin_cpu_supports("sse4.2");
    return hardware ? hardware_crc32c(data, size, crc) : crc32c_portable(data, size, crc);
}

}  // namespace qjit
