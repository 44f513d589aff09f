// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), for checksumming saved files.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qjit {

uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace qjit
