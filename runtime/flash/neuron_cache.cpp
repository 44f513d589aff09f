#include "runtime/flash/neuron_cache.hpp"

#include <algorithm>
#include <cstring>

#include "base/error.hpp"
#include "jit/x86/sparse_product_kernel.hpp"
#include "runtime/flash/neuron_cache_data.hpp"
#include "runtime/flash/sparse_product_jit.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {

namespace {

using Data = NeuronCache::Data;

// The parts in file order (NeuronFileHeader::part_list's answer, kept here so the cache needs
// nothing else of the file's code).
std::vector<NeuronPart> parts_of(const NeuronFileHeader& header) {
    if (header.activation == FfnActivation::SwiGlu) return {NeuronPart::Gate, NeuronPart::Up, NeuronPart::Down};
    return {NeuronPart::Up, NeuronPart::Down};
}

void check_header(const NeuronFileHeader& h) {
    require(h.d_model >= 1 && h.d_model == h.vector.d_model(), "neuron cache: d_model ", h.d_model,
            " does not match the vector layout's ", h.vector.d_model());
    require(h.d_ff >= 1 && h.d_ff < (int64_t(1) << 31), "neuron cache: d_ff ", h.d_ff, " out of range");
    require(!h.has_bias || h.activation == FfnActivation::Relu, "neuron cache: biases need a Relu FFN");
    if (h.vector.coding == VectorCoding::Quantized) {
        const WeightFormat& f = h.vector.format;
        require(f.uniform_bits() && !f.second_order_scales() && !f.act_order && f.outliers == 0 &&
                    !f.low_rank.present(),
                "neuron cache: vector format ", f.name(), " is not a uniform neuron vector format");
        require(f.bits == 2 || f.bits == 3 || f.bits == 4 || f.bits == 8, "neuron cache: ", f.bits, "-bit codes");
        // The kernels take a 32-row block to lie in one group, or in two of 16 rows.
        require(f.group_size == 16 || (f.group_size >= 32 && f.group_size % 32 == 0) || f.group_size >= h.d_model,
                "neuron cache: group size ", f.group_size, " (16, a multiple of 32, or per column)");
    }
}

// Moves the contents and bookkeeping of slot `from` into slot `to` (a hole).
void move_slot(Data& d, int64_t from, int64_t to) {
    for (NeuronPart part : d.parts) {
        uint8_t* vectors = d.vectors[int(part)].data();
        std::memcpy(vectors + to * d.vector_bytes, vectors + from * d.vector_bytes, size_t(d.vector_bytes));
    }
    if (!d.bias.empty()) d.bias[size_t(to)] = d.bias[size_t(from)];
    const int32_t neuron = d.slot_neuron[size_t(from)];
    d.slot_neuron[size_t(to)] = neuron;
    d.neuron_slot[size_t(neuron)] = int32_t(to);
    d.last_active[size_t(to)] = d.last_active[size_t(from)];
    d.pinned[size_t(to)] = d.pinned[size_t(from)];
}

// Deletes the neuron in `slot`: the last occupied slot moves into the hole.
void delete_slot(Data& d, int64_t slot) {
    const int64_t last = d.size - 1;
    d.neuron_slot[size_t(d.slot_neuron[size_t(slot)])] = -1;
    if (d.pinned[size_t(slot)]) --d.pinned_count;
    if (slot != last) move_slot(d, last, slot);
    d.slot_neuron[size_t(last)] = -1;
    d.pinned[size_t(last)] = 0;
    d.size = last;
}

int32_t append(Data& d, int32_t neuron, bool pinned) {
    const int32_t slot = int32_t(d.size++);
    d.slot_neuron[size_t(slot)] = neuron;
    d.neuron_slot[size_t(neuron)] = slot;
    d.last_active[size_t(slot)] = d.token;
    d.pinned[size_t(slot)] = pinned;
    if (pinned) ++d.pinned_count;
    return slot;
}

// Evicts the `count` least recently active unpinned neurons not listed active in token `now` (ties:
// lower id first). The caller has checked that there are that many.
void evict_lru(Data& d, int64_t count, int64_t now) {
    if (count <= 0) return;
    int64_t n = 0;
    for (int64_t s = 0; s < d.size; ++s) {
        const int32_t neuron = d.slot_neuron[size_t(s)];
        if (!d.pinned[size_t(s)] && d.active_token[size_t(neuron)] != now) d.victims[size_t(n++)] = neuron;
    }
    const auto older = [&](int32_t a, int32_t b) {
        const int64_t la = d.last_active[size_t(d.neuron_slot[size_t(a)])];
        const int64_t lb = d.last_active[size_t(d.neuron_slot[size_t(b)])];
        return la != lb ? la < lb : a < b;
    };
    std::nth_element(d.victims.begin(), d.victims.begin() + (count - 1), d.victims.begin() + n, older);
    // Collect first: deleting moves slots, which the comparison above reads.
    for (int64_t i = 0; i < count; ++i) delete_slot(d, d.neuron_slot[size_t(d.victims[size_t(i)])]);
}

// The parts a cache holds: `parts` (checked against the file's, put in file order), or the file's.
std::vector<NeuronPart> held_parts(const NeuronFileHeader& header, std::span<const NeuronPart> parts) {
    const std::vector<NeuronPart> all = parts_of(header);
    if (parts.empty()) return all;
    std::vector<NeuronPart> held;
    for (NeuronPart part : all)
        if (std::find(parts.begin(), parts.end(), part) != parts.end()) held.push_back(part);
    require(held.size() == parts.size(), "neuron cache: the parts asked for are not distinct parts of the file");
    return held;
}

}  // namespace

NeuronCache::NeuronCache(const NeuronFileHeader& header, int64_t capacity, int window, std::vector<NeuronPart> parts,
                         qjit_isa isa, const SparseKernelTuning& tuning)
    : data_(new Data) {
    check_header(header);
    require(capacity >= 0 && capacity <= header.d_ff, "neuron cache: capacity ", capacity, " outside [0, d_ff ",
            header.d_ff, "]");
    require(window >= 0, "neuron cache: window ", window, " is negative");
    Data& d = *data_;
    d.header = header;
    d.capacity = capacity;
    d.window = window;
    d.parts = held_parts(header, parts);
    d.quantized = header.vector.coding == VectorCoding::Quantized;
    d.isa = best_isa_up_to(isa);
    d.d_model = header.d_model;
    d.vector_bytes = header.vector.bytes();
    if (d.quantized) {
        const WeightFormat& f = header.vector.format;
        d.bits = f.bits;
        d.group_size = f.group_size;
        d.blocks = (d.d_model + 31) / 32;
        d.groups = f.num_groups();
        d.group_blocks = d.group_size >= d.d_model ? d.blocks : d.group_size / 32;
        d.scale_bytes = f.scale_bytes();
        d.zero_bytes = f.zero_point_bytes();
        d.scales_offset = header.vector.scales_offset();
        d.zeros_offset = header.vector.zeros_offset();
        require(d.blocks * d.bits == header.vector.code_words(), "neuron cache: code words disagree");
    }
    // (padded at the end for the generated products' reads past a vector)
    for (NeuronPart part : d.parts)
        d.vectors[int(part)].assign(size_t(capacity * d.vector_bytes + jit::kSparseVectorPadding), 0);
    if (header.has_bias) d.bias.assign(size_t(capacity), 0.0f);
    d.slot_neuron.assign(size_t(capacity), -1);
    d.neuron_slot.assign(size_t(header.d_ff), -1);
    d.last_active.assign(size_t(capacity), 0);
    d.pinned.assign(size_t(capacity), 0);
    d.active_token.assign(size_t(header.d_ff), -1);
    d.victims.assign(size_t(capacity), 0);
    d.generated = SparseProductJit::for_cache(d, tuning);
}

NeuronCache::~NeuronCache() = default;
NeuronCache::NeuronCache(NeuronCache&&) noexcept = default;
NeuronCache& NeuronCache::operator=(NeuronCache&&) noexcept = default;

int64_t NeuronCache::slot_bytes(const NeuronFileHeader& header, std::span<const NeuronPart> parts) {
    // Vectors, bias, and per slot: neuron id, last active token, pinned flag, eviction scratch.
    const int64_t vectors = int64_t(held_parts(header, parts).size()) * header.vector.bytes();
    return vectors + (header.has_bias ? 4 : 0) + 4 + 8 + 1 + 4;
}

int64_t NeuronCache::fixed_bytes(const NeuronFileHeader& header, std::span<const NeuronPart> parts) {
    const int64_t padding = int64_t(held_parts(header, parts).size()) * jit::kSparseVectorPadding;
    return header.d_ff * int64_t(sizeof(int32_t) + sizeof(int64_t)) + padding;  // neuron_slot, active_token
}

bool NeuronCache::holds(NeuronPart part) const { return data_->has(part); }

int64_t NeuronCache::capacity() const { return data_->capacity; }
int64_t NeuronCache::pinned() const { return data_->pinned_count; }
int64_t NeuronCache::size() const { return data_->size; }
int NeuronCache::window() const { return data_->window; }
const NeuronFileHeader& NeuronCache::header() const { return data_->header; }
const NeuronCache::Data& NeuronCache::data() const { return *data_; }

int64_t NeuronCache::memory_bytes() const {
    const Data& d = *data_;
    const auto bytes = [](const auto& v) { return int64_t(v.capacity() * sizeof(v[0])); };
    int64_t total = bytes(d.bias) + bytes(d.slot_neuron) + bytes(d.neuron_slot) +
                    bytes(d.last_active) + bytes(d.pinned) + bytes(d.active_token) + bytes(d.victims);
    for (const std::vector<uint8_t>& v : d.vectors) total += bytes(v);
    return total;
}

int32_t NeuronCache::neuron_at(int32_t slot) const {
    require(slot >= 0 && slot < data_->capacity, "neuron cache: slot ", slot, " out of range");
    return data_->slot_neuron[size_t(slot)];
}

bool NeuronCache::is_pinned(int32_t slot) const {
    require(slot >= 0 && slot < data_->capacity, "neuron cache: slot ", slot, " out of range");
    return data_->pinned[size_t(slot)] != 0;
}

int32_t NeuronCache::slot_of(int32_t neuron) const {
    require(neuron >= 0 && neuron < data_->header.d_ff, "neuron cache: neuron ", neuron, " out of range");
    return data_->neuron_slot[size_t(neuron)];
}

std::vector<int32_t> NeuronCache::pin(std::span<const int32_t> neurons) {
    Data& d = *data_;
    for (const int32_t n : neurons) {
        require(n >= 0 && n < d.header.d_ff, "neuron cache: pinned neuron ", n, " out of range");
        require(d.neuron_slot[size_t(n)] < 0, "neuron cache: pinned neuron ", n, " is already resident");
    }
    std::vector<int32_t> sorted(neurons.begin(), neurons.end());  // a model pins thousands at once
    std::sort(sorted.begin(), sorted.end());
    const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    require(twice == sorted.end(), "neuron cache: pinned neuron ", twice == sorted.end() ? 0 : *twice, " given twice");
    const int64_t count = int64_t(neurons.size());
    require(d.pinned_count + count <= d.capacity, "neuron cache: ", count, " neurons to pin do not fit beside ",
            d.pinned_count, " pinned in capacity ", d.capacity);
    evict_lru(d, d.size + count - d.capacity, -2);  // between tokens: none is active

    std::vector<int32_t> slots;
    slots.reserve(neurons.size());
    for (int32_t n : neurons) slots.push_back(append(d, n, true));
    return slots;
}

void NeuronCache::begin_token(std::span<const int32_t> active, TokenPlan& plan) {
    Data& d = *data_;
    const int64_t now = d.token + 1;
    // Check everything before changing anything. active_token marks the list; undone on a throw.
    int64_t unpinned_active = 0, missing = 0;
    for (size_t i = 0; i < active.size(); ++i) {
        const int32_t n = active[i];
        const bool ok = n >= 0 && n < d.header.d_ff && d.active_token[size_t(n)] != now;
        if (!ok) {
            for (size_t j = 0; j < i; ++j) d.active_token[size_t(active[j])] = -1;
            require(n >= 0 && n < d.header.d_ff, "neuron cache: active neuron ", n, " out of range [0, ",
                    d.header.d_ff, ")");
            fail(QJIT_ERROR_INVALID_ARGUMENT, "neuron cache: active neuron ", n, " given twice");
        }
        d.active_token[size_t(n)] = now;
        const int32_t slot = d.neuron_slot[size_t(n)];
        if (slot < 0 || !d.pinned[size_t(slot)]) ++unpinned_active;
    }
    if (d.pinned_count + unpinned_active > d.capacity) {
        for (int32_t n : active) d.active_token[size_t(n)] = -1;
        fail(QJIT_ERROR_INVALID_ARGUMENT, "neuron cache: ", unpinned_active, " active neurons do not fit beside ",
             d.pinned_count, " pinned in capacity ", d.capacity);
    }
    d.token = now;
    plan.slots.clear();
    plan.missing.clear();
    plan.missing_slots.clear();
    plan.slots.reserve(active.size());  // no-ops once the plan has served a token as large
    plan.hits = 0;
    plan.evicted = 0;
    for (int32_t n : active) {
        const int32_t slot = d.neuron_slot[size_t(n)];
        if (slot >= 0) {
            d.last_active[size_t(slot)] = now;
            ++plan.hits;
        } else {
            ++missing;
        }
    }
    // Deletions, from the top down, so the slot moved into a hole has been looked at already.
    for (int64_t s = d.size - 1; s >= 0; --s)
        if (!d.pinned[size_t(s)] && now - d.last_active[size_t(s)] > d.window) {
            delete_slot(d, s);
            ++plan.evicted;
        }
    const int64_t room = d.size + missing - d.capacity;
    evict_lru(d, room, now);
    plan.evicted += std::max<int64_t>(room, 0);
    // No slot moves from here on: the slots recorded stay valid.
    for (int32_t n : active) {
        int32_t slot = d.neuron_slot[size_t(n)];
        if (slot < 0) {
            slot = append(d, n, false);
            plan.missing.push_back(n);
            plan.missing_slots.push_back(slot);
        }
        plan.slots.push_back(slot);
    }
}

void NeuronCache::clear_unpinned() {
    Data& d = *data_;
    for (int64_t s = d.size - 1; s >= 0; --s)
        if (!d.pinned[size_t(s)]) delete_slot(d, s);
}

namespace {

// The bytes of a slot's part: a record's vector as the file stores it.
uint8_t* slot_vector(Data& d, int32_t slot, NeuronPart part) {
    require(slot >= 0 && slot < d.capacity, "neuron cache: slot ", slot, " out of range");
    require(d.has(part), "neuron cache: it holds no ", part == NeuronPart::Gate ? "gate" : part == NeuronPart::Up ? "up" : "down",
            " part");
    return d.vectors[int(part)].data() + slot * d.vector_bytes;
}

}  // namespace

void NeuronCache::fill(int32_t slot, NeuronPart part, const uint8_t* vector) {
    std::memcpy(slot_vector(*data_, slot, part), vector, size_t(data_->vector_bytes));
}

void NeuronCache::read_vector(int32_t slot, NeuronPart part, uint8_t* out) const {
    std::memcpy(out, slot_vector(*data_, slot, part), size_t(data_->vector_bytes));
}

void NeuronCache::fill_bias(int32_t slot, float bias) {
    require(slot >= 0 && slot < data_->capacity, "neuron cache: slot ", slot, " out of range");
    require(!data_->bias.empty(), "neuron cache: the file has no biases");
    data_->bias[size_t(slot)] = bias;
}

float NeuronCache::bias(int32_t slot) const {
    require(slot >= 0 && slot < data_->capacity, "neuron cache: slot ", slot, " out of range");
    return data_->bias.empty() ? 0.0f : data_->bias[size_t(slot)];
}

}  // namespace qjit
