// libFuzzer target: the neuron file header parser (io/neuron_file.cpp) on arbitrary bytes, then,
// for a header that parses, its sparsity section when it has one and the record check on the first
// records that lie inside the input.
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
    // The header's fields end here (io/neuron_file.hpp): version 1 before gate_apart, has_sparsity.
    const size_t crc_at = size >= 12 && bytes[8] == 1 ? 63 : 65;
    if (size >= crc_at + 4) {
        const uint32_t crc = qjit::crc32(bytes.data(), crc_at);
        for (int i = 0; i < 4; ++i) bytes[crc_at + size_t(i)] = uint8_t(crc >> (8 * i));
    }
#endif
    const uint8_t* data = bytes.data();
    try {
        const qjit::NeuronFileHeader header = qjit::parse_neuron_file_header(data, size);
        if (header.has_sparsity && header.alignment < int64_t(size)) {
            try {
                qjit::parse_ffn_sparsity(header, data + header.alignment, size - size_t(header.alignment));
            } catch (const qjit::Error&) {
            }
        }
        // The first few neurons only: d_ff may be 2^31 - 1.
        for (int64_t neuron = 0; neuron < header.d_ff && neuron < 8; ++neuron)
            for (const qjit::NeuronPart first : header.record_first_parts()) {
                const int64_t at = header.record_offset(0, neuron, first);
                if (at > int64_t(size) || header.record_bytes(first) > int64_t(size) - at) continue;
                try {
                    qjit::check_record(header, 0, neuron, first, data + at);
                } catch (const qjit::Error&) {
                }
            }
    } catch (const qjit::Error&) {
    }
    return 0;
}
