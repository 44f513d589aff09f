#include "base/crc32.hpp"

#include <array>
#include <cstring>

namespace qjit {

namespace {

// Slicing by 8: table[k][b] is the CRC of byte b followed by k zero bytes, so that 8 bytes are
// folded with 8 independent lookups instead of a chain of 8 dependent ones (neuron records are
// checked as they are loaded, several KB each).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables() {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (int k = 1; k < 8; ++k) t[k][i] = t[0][t[k - 1][i] & 0xffu] ^ (t[k - 1][i] >> 8);
    return t;
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
    static const Tables t = make_tables();
    const auto* bytes = static_cast<const uint8_t*>(data);
    crc = ~crc;
    for (; size >= 8; size -= 8, bytes += 8) {
        uint32_t low, high;
        std::memcpy(&low, bytes, 4);  // little-endian, as the CRC reads bytes in order
        std::memcpy(&high, bytes + 4, 4);
        low ^= crc;
        crc = t[7][low & 0xffu] ^ t[6][(low >> 8) & 0xffu] ^ t[5][(low >> 16) & 0xffu] ^ t[4][low >> 24] ^
              t[3][high & 0xffu] ^ t[2][(high >> 8) & 0xffu] ^ t[1][(high >> 16) & 0xffu] ^ t[0][high >> 24];
    }
    for (; size > 0; --size, ++bytes) crc = t[0][(crc ^ *bytes) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

}  // namespace qjit
