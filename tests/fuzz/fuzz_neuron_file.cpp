// libFuzzer target: the neuron file header parser (io/neuron_file.cpp) on arbitrary bytes, then,
// for a header that parses, the record check on the first records that lie inside the input.
// Built twice: as is, where nearly every mutation of a header fails its CRC, and with
// QJIT_FUZZ_FIX_CHECKSUM, where the header's CRC is set right so that mutations reach the fields.
// Only a qjit::Error may come of the bytes; anything else (a crash, a sanitizer report, another
// exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "io/neuron_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* input, size_t size) {
    std::vector<uint8_t> bytes(input, input + size);
#ifdef QJIT_FUZZ_FIX_CHECKSUM
    constexpr size_t kCrcAt = 63;  // the header's fields end here (io/neuron_file.hpp)
    if (size >= kCrcAt + 4) {
        const uint32_t crc = qjit::crc32(bytes.data(), kCrcAt);
        for (int i = 0; i < 4; ++i) bytes[kCrcAt + size_t(i)] = uint8_t(crc >> (8 * i));
    }
#endif
    const uint8_t* data = bytes.data();
    try {
        const qjit::NeuronFileHeader header = qjit::parse_neuron_file_header(data, size);
        const std::vector<qjit::NeuronPart> parts = header.part_list();
        const int64_t record_bytes = header.record_bytes();
        // The first few neurons only: d_ff may be 2^31 - 1.
        for (int64_t neuron = 0; neuron < header.d_ff && neuron < 8; ++neuron)
            for (size_t p = 0; p < parts.size(); p += size_t(header.parts_per_record())) {
                const int64_t at = header.record_offset(0, neuron, parts[p]);
                if (at > int64_t(size) || record_bytes > int64_t(size) - at) continue;
                try {
                    qjit::check_record(header, 0, neuron, parts[p], data + at);
                } catch (const qjit::Error&) {
                }
            }
    } catch (const qjit::Error&) {
    }
    return 0;
}
