// What a NeuronCache holds, as the kernels read it (runtime/flash/sparse_ffn*.cpp). Internal to the
// flash runtime and its tests.
//
// Quantized files:
//   gate, up  the slots are the columns of a packed matrix in panels of kPanel columns, exactly
//             qjit's CPU layout (format/packed_codes.hpp):
//                 codes[((panel * blocks + block) * bits + word) * kPanel + column]
//             with the metadata in panel order as the x86 kernels stream it (CpuKernelArgs):
//                 scales[(panel * groups + group) * kPanel + column]   (fp16 or fp32)
//                 zeros [(panel * groups + group) * kPanel + column]   (u8, or float offsets at the
//                                                                       scales' type; none symmetric)
//             so a panel's 8 columns are one 8-lane vector per row.
//   down      each slot's vector bytes as the file stores them (format/neuron_record.hpp), contiguous
//             per slot: a row is streamed whole by one axpy.
// F16 files: every part as plain rows [slot][d_model] of fp16.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/half.hpp"
#include "runtime/flash/neuron_cache.hpp"

namespace qjit {

struct NeuronCache::Data {
    static constexpr int kPanel = 8;
    static constexpr int kParts = 3;  // indexed by NeuronPart

    NeuronFileHeader header;
    int64_t capacity = 0;
    int window = 0;
    std::vector<NeuronPart> parts;  // the file's parts, in file order
    bool quantized = true;

    // The vector format (quantized) and its derived sizes.
    int bits = 0;
    int64_t d_model = 0;
    int64_t group_size = 0;
    int64_t blocks = 0;        // 32-row blocks of a vector
    int64_t groups = 0;
    int64_t column_words = 0;  // blocks * bits
    int scale_bytes = 0;
    int zero_bytes = 0;        // 0 when symmetric
    int64_t vector_bytes = 0;  // one part's vector in the file
    int64_t panels = 0;        // ceil(capacity / kPanel)

    struct Columns {
        std::vector<uint32_t> codes;
        std::vector<uint8_t> scales;
        std::vector<uint8_t> zeros;
    };
    Columns columns[kParts];             // quantized gate and up (indexed by part; down's unused)
    std::vector<uint8_t> down;           // quantized down: [slot][vector_bytes]
    std::vector<uint16_t> rows[kParts];  // F16: [slot][d_model] per part present
    std::vector<float> bias;             // [capacity] when the file has biases

    // Bookkeeping.
    int64_t size = 0;
    int64_t pinned_count = 0;
    int64_t token = 0;                      // begin_token calls so far
    std::vector<int32_t> slot_neuron;       // [capacity]; -1 free
    std::vector<int32_t> neuron_slot;       // [d_ff]; -1 not resident
    std::vector<int64_t> last_active;       // [capacity] token a slot's neuron was last active
    std::vector<uint8_t> pinned;            // [capacity]
    std::vector<int64_t> active_token;      // [d_ff] the token a neuron was last listed active in
    std::vector<int32_t> victims;           // [capacity] scratch of the eviction

    bool has(NeuronPart part) const { return header.activation == FfnActivation::SwiGlu || part != NeuronPart::Gate; }

    const uint32_t* panel_codes(NeuronPart part, int64_t panel) const {
        return columns[int(part)].codes.data() + panel * column_words * kPanel;
    }
    const uint8_t* panel_scales(NeuronPart part, int64_t panel) const {
        return columns[int(part)].scales.data() + panel * groups * kPanel * scale_bytes;
    }
    const uint8_t* panel_zeros(NeuronPart part, int64_t panel) const {
        return columns[int(part)].zeros.data() + panel * groups * kPanel * zero_bytes;
    }
    // A scale (or float offset) at the scales' type.
    float meta_float(const uint8_t* at) const {
        if (scale_bytes == 2) {
            uint16_t h;
            std::memcpy(&h, at, 2);
            return half_to_float(h);
        }
        float f;
        std::memcpy(&f, at, 4);
        return f;
    }
    const uint8_t* down_vector(int64_t slot) const { return down.data() + slot * vector_bytes; }
    const uint16_t* f16_row(NeuronPart part, int64_t slot) const { return rows[int(part)].data() + slot * d_model; }
};

}  // namespace qjit
