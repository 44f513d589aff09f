// libFuzzer target: the neuron file header parser (format/neuron_file.cpp) on arbitrary bytes, then,
// for a header that parses, the record check on the first records that lie inside the input.
// Only a qjit::Error may come of the bytes; anything else (a crash, a sanitizer report, another
// exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/error.hpp"
#include "format/neuron_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const qjit::NeuronFileHeader header = qjit::parse_neuron_file_header(data, size);
        const std::vector<qjit::NeuronPart> parts = header.part_list();
        const int64_t record_bytes = header.record_bytes();
        int checked = 0;
        for (int64_t neuron = 0; neuron < header.d_ff && checked < 8; ++neuron)
            for (size_t p = 0; p < parts.size(); p += size_t(header.parts_per_record())) {
                const int64_t at = header.record_offset(0, neuron, parts[p]);
                if (at > int64_t(size) || record_bytes > int64_t(size) - at) continue;
                try {
                    qjit::check_record(header, 0, neuron, parts[p], data + at);
                } catch (const qjit::Error&) {
                }
                ++checked;
            }
    } catch (const qjit::Error&) {
    }
    return 0;
}
