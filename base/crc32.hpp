// Checksums of saved files: CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), and CRC-32C
// (Castagnoli, reflected polynomial 0x82F63B78), which x86's SSE4.2 computes in hardware at about
// 8 bytes a cycle: the one for gigabytes checked at every open (pack files).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qjit {

uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// The same CRC-32C by table lookups alone (what crc32c runs without SSE4.2): for tests.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

}  // namespace qjit
