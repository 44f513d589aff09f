// What a NeuronCache holds, as the kernels read it (runtime/flash/sparse_ffn*.cpp). Internal to the
// flash runtime and its tests.
//
// Every part (gate, up, down; quantized or F16) is stored as the file stores its vectors
// (format/neuron_record.hpp), contiguous per slot: vectors[part][slot * vector_bytes ...]. A slot's
// vector is then one run of memory, whichever slots a token touches (scattered slots cost no more
// than compact ones), filling or moving a slot is one copy, and each product or axpy streams it
// whole; the kernels decode a quantized column's 32-row blocks on their own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/flash/neuron_cache.hpp"

namespace qjit {

class SparseProductJit;

struct NeuronCache::Data {
    static constexpr int kParts = 3;  // indexed by NeuronPart

    NeuronFileHeader header;
    int64_t capacity = 0;
    int window = 0;
    std::vector<NeuronPart> parts;  // the parts held, in file order
    bool quantized = true;
    qjit_isa isa = QJIT_ISA_PORTABLE;  // the cap of the kernels that read the cache (its context's ISA)
    const SparseProductJit* generated = nullptr;  // its generated kernels (a process's, shared); null: none fit

    // The vector format (quantized) and its derived sizes.
    int bits = 0;
    int64_t d_model = 0;
    int64_t group_size = 0;
    int64_t blocks = 0;        // 32-row blocks of a vector
    int64_t groups = 0;
    int64_t group_blocks = 0;  // blocks a group spans (all when per column; 0 for 16-row groups)
    int scale_bytes = 0;
    int zero_bytes = 0;        // 0 when symmetric
    int64_t vector_bytes = 0;  // one part's vector in the file
    int64_t scales_offset = 0;  // where a quantized vector's scales and zero points start in it
    int64_t zeros_offset = 0;

    std::vector<uint8_t> vectors[kParts];  // [slot][vector_bytes] per part present
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

    bool has(NeuronPart part) const { return std::find(parts.begin(), parts.end(), part) != parts.end(); }

    const uint8_t* vector(NeuronPart part, int64_t slot) const {
        return vectors[int(part)].data() + slot * vector_bytes;
    }
    const uint16_t* f16_row(NeuronPart part, int64_t slot) const {
        return reinterpret_cast<const uint16_t*>(vector(part, slot));
    }
};

}  // namespace qjit
