// The neurons of one FFN layer that are in memory: preallocated to its capacity, nothing
// reallocated once running (the memory management of "LLM in a flash"). Slots [0, size()) are
// occupied; deleting a neuron moves the last occupied slot into its hole, new neurons are
// appended. Pinned neurons stay for good; the others stay while they were active within the last
// `window` tokens.
//
// The slots hold each part's vector (format/neuron_record.hpp) as the file stores it, contiguous
// per slot, which is what the kernels read (runtime/flash/sparse_ffn.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "io/neuron_file.hpp"
#include "qjit/qjit.h"
#include "tuner/tuning_sequence.hpp"

namespace qjit {

// How the generated kernels that read a cache get their tilings (runtime/flash/sparse_product_jit.hpp):
// the one tuning sequence over a context's memory and tuning database, under its policy; without
// a memory, the model's pick, untimed and remembered nowhere.
struct SparseKernelTuning {
    TuningMemory* memory = nullptr;
    TuningPolicy policy;
};

class NeuronCache {
public:
    // window: tokens a neuron stays resident after it was last active: at token t it stays while
    // t - last_active <= window (0: only while active; 1: also when active at the previous token).
    // parts: the parts the cache holds (empty: all the file's; a FlashFfn with resident gates keeps
    // them in a cache of their own and up and down in another).
    // isa: the cap of the kernels that read it, the context's ISA (AUTO: the CPU's best, for tests).
    // tuning: how the generated kernels that read it get their tilings.
    NeuronCache(const NeuronFileHeader& header, int64_t capacity, int window, std::vector<NeuronPart> parts = {},
                qjit_isa isa = QJIT_ISA_AUTO, const SparseKernelTuning& tuning = {});

    // Bytes one slot takes (the parts held, bias, bookkeeping): a DRAM budget divided by it is a
    // capacity.
    static int64_t slot_bytes(const NeuronFileHeader& header, std::span<const NeuronPart> parts = {});
    // Bytes a cache takes whatever its capacity (the tables indexed by neuron id, the padding after
    // each part's vectors): memory_bytes() is fixed_bytes + capacity * slot_bytes.
    static int64_t fixed_bytes(const NeuronFileHeader& header, std::span<const NeuronPart> parts = {});
    bool holds(NeuronPart part) const;

    int64_t capacity() const;
    int64_t size() const;
    int64_t pinned() const;  // pinned neurons, resident for good
    int window() const;
    int64_t memory_bytes() const;  // what the constructor allocated

    // Pins neurons (distinct, not resident yet; at most the capacity with those already pinned):
    // returns their slots, which the caller fills before the next begin_token. Evicts the least
    // recently active unpinned neurons when the cache is full (which moves slots: call it between
    // tokens, not while a plan's slots are in use).
    std::vector<int32_t> pin(std::span<const int32_t> neurons);

    struct TokenPlan {
        std::vector<int32_t> slots;          // the slot of each active neuron, in the order given
        std::vector<int32_t> missing;        // the active neurons that were not resident ...
        std::vector<int32_t> missing_slots;  // ... and the slots appended for them, to be filled
        int64_t hits = 0;                    // active neurons already resident
        int64_t evicted = 0;                 // neurons deleted by this call
    };
    // Starts a token whose active neurons are `active` (distinct ids below d_ff): deletes the
    // unpinned, inactive neurons whose window has passed, then appends the missing ones (evicting
    // the least recently active unpinned, inactive neurons, ties by lower id, if the capacity
    // requires). Throws an invalid-argument Error, the cache unchanged, for a bad id or when the
    // active neurons cannot fit beside the pinned ones. Reuses plan's vectors; plan.slots stay
    // valid until the next begin_token, pin or clear_unpinned.
    void begin_token(std::span<const int32_t> active, TokenPlan& plan);
    // Deletes every unpinned neuron.
    void clear_unpinned();

    // Fills a slot's part (one the cache holds) from a record's vector bytes (and the neuron's bias, when the file has them).
    void fill(int32_t slot, NeuronPart part, const uint8_t* vector);
    void fill_bias(int32_t slot, float bias);
    // The inverse of fill: a slot's part as the record's vector bytes (vector.bytes() of them), and
    // its bias (0 without biases). For tests and for writing a cache back out.
    void read_vector(int32_t slot, NeuronPart part, uint8_t* out) const;
    float bias(int32_t slot) const;

    int32_t neuron_at(int32_t slot) const;  // -1 for a free slot
    bool is_pinned(int32_t slot) const;
    int32_t slot_of(int32_t neuron) const;  // -1 when not resident

    const NeuronFileHeader& header() const;

    // What the kernels read: layout and bookkeeping in runtime/flash/neuron_cache_data.hpp.
    struct Data;
    const Data& data() const;

    ~NeuronCache();
    NeuronCache(NeuronCache&&) noexcept;
    NeuronCache& operator=(NeuronCache&&) noexcept;

private:
    std::unique_ptr<Data> data_;
};

}  // namespace qjit
