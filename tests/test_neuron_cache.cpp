// NeuronCache against a plain model of its policy (std::map), over random activation traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "base/error.hpp"
#include "runtime/flash/neuron_cache.hpp"

namespace qjit {
namespace {

NeuronFileHeader cache_header(VectorCoding coding, FfnActivation activation, int64_t d_model, int64_t d_ff) {
    NeuronFileHeader h;
    h.layers = 1;
    h.d_model = d_model;
    h.d_ff = d_ff;
    h.activation = activation;
    h.has_bias = activation == FfnActivation::Relu;
    if (coding == VectorCoding::F16) {
        h.vector = f16_vector_layout(d_model);
    } else {
        WeightFormat f;
        f.bits = 3;
        f.group_size = 32;
        f.scale_type = ScaleType::F16;
        h.vector = quantized_vector_layout(f, d_model);
    }
    return h;
}

std::vector<NeuronPart> parts_of(const NeuronFileHeader& h) {
    if (h.activation == FfnActivation::SwiGlu) return {NeuronPart::Gate, NeuronPart::Up, NeuronPart::Down};
    return {NeuronPart::Up, NeuronPart::Down};
}

// The bytes a neuron's part is filled with: any bytes do, the cache only moves them.
std::vector<uint8_t> vector_of(const NeuronFileHeader& h, int32_t neuron, NeuronPart part) {
    std::mt19937 rng(uint32_t(neuron * 3 + int(part) + 1));
    std::vector<uint8_t> bytes(size_t(h.vector.bytes()));
    for (uint8_t& b : bytes) b = uint8_t(rng());
    return bytes;
}
float bias_of(int32_t neuron) { return float(neuron) * 0.5f + 1.0f; }

void fill_neuron(NeuronCache& cache, int32_t slot, int32_t neuron) {
    for (NeuronPart part : parts_of(cache.header())) cache.fill(slot, part, vector_of(cache.header(), neuron, part).data());
    if (cache.header().has_bias) cache.fill_bias(slot, bias_of(neuron));
}

// The policy as neuron_cache.hpp states it, on ordered maps.
struct CacheModel {
    int64_t capacity;
    int window;
    int64_t token = 0;
    struct Entry {
        int64_t last_active;
        bool pinned;
    };
    std::map<int32_t, Entry> resident;

    int64_t pinned() const {
        int64_t n = 0;
        for (const auto& [id, e] : resident) n += e.pinned;
        return n;
    }
    // Evicts `count` unpinned neurons not in `active`, least recently active first, then lower id.
    int64_t evict(int64_t count, const std::set<int32_t>& active) {
        if (count <= 0) return 0;
        std::vector<std::pair<int64_t, int32_t>> candidates;
        for (const auto& [id, e] : resident)
            if (!e.pinned && !active.count(id)) candidates.push_back({e.last_active, id});
        std::sort(candidates.begin(), candidates.end());
        for (int64_t i = 0; i < count; ++i) resident.erase(candidates[size_t(i)].second);
        return count;
    }
    // false when the active neurons do not fit (nothing changes then).
    bool begin_token(const std::vector<int32_t>& active, int64_t& hits, std::vector<int32_t>& missing,
                     int64_t& evicted) {
        int64_t unpinned_active = 0;
        for (int32_t n : active) unpinned_active += !(resident.count(n) && resident[n].pinned);
        if (pinned() + unpinned_active > capacity) return false;
        ++token;
        hits = 0;
        evicted = 0;
        missing.clear();
        const std::set<int32_t> active_set(active.begin(), active.end());
        for (int32_t n : active) {
            auto it = resident.find(n);
            if (it != resident.end()) {
                it->second.last_active = token;
                ++hits;
            } else {
                missing.push_back(n);
            }
        }
        for (auto it = resident.begin(); it != resident.end();) {
            if (!it->second.pinned && token - it->second.last_active > window) {
                it = resident.erase(it);
                ++evicted;
            } else {
                ++it;
            }
        }
        evicted += evict(int64_t(resident.size() + missing.size()) - capacity, active_set);
        for (int32_t n : missing) resident[n] = {token, false};
        return true;
    }
    void pin(int32_t n) {
        evict(int64_t(resident.size()) + 1 - capacity, {});
        resident[n] = {token, true};
    }
    void clear_unpinned() {
        std::erase_if(resident, [](const auto& item) { return !item.second.pinned; });
    }
};

// Every resident neuron's slot holds what it was filled with; ids and slots agree; the resident set
// is the model's.
void expect_consistent(const NeuronCache& cache, const CacheModel& model) {
    const NeuronFileHeader& h = cache.header();
    ASSERT_EQ(cache.size(), int64_t(model.resident.size()));
    ASSERT_LE(cache.size(), cache.capacity());
    std::vector<uint8_t> got(size_t(h.vector.bytes()));
    for (int32_t slot = 0; slot < cache.capacity(); ++slot) {
        const int32_t neuron = cache.neuron_at(slot);
        if (slot >= cache.size()) {
            EXPECT_EQ(neuron, -1) << "free slot " << slot;
            continue;
        }
        ASSERT_GE(neuron, 0) << "occupied slot " << slot;
        ASSERT_TRUE(model.resident.count(neuron)) << "neuron " << neuron << " should have left";
        EXPECT_EQ(cache.slot_of(neuron), slot);
        for (NeuronPart part : parts_of(h)) {
            cache.read_vector(slot, part, got.data());
            ASSERT_EQ(got, vector_of(h, neuron, part)) << "neuron " << neuron << " part " << int(part);
        }
        if (h.has_bias) EXPECT_EQ(cache.bias(slot), bias_of(neuron));
    }
    for (int32_t n = 0; n < h.d_ff; ++n)
        if (!model.resident.count(n)) EXPECT_EQ(cache.slot_of(n), -1) << "neuron " << n;
}

void run_trace(const NeuronFileHeader& h, int64_t capacity, int window, int pins, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "capacity " << capacity << " window " << window << " pins " << pins
                                    << " seed " << seed);
    NeuronCache cache(h, capacity, window);
    CacheModel model{capacity, window};
    const int64_t memory = cache.memory_bytes();
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(size_t(h.d_ff));
    for (int32_t i = 0; i < h.d_ff; ++i) ids[size_t(i)] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    const std::vector<int32_t> pinned(ids.begin(), ids.begin() + pins);
    const std::vector<int32_t> pin_slots = cache.pin(pinned);
    for (size_t i = 0; i < pinned.size(); ++i) {
        fill_neuron(cache, pin_slots[i], pinned[i]);
        model.pin(pinned[i]);
    }
    expect_consistent(cache, model);

    NeuronCache::TokenPlan plan;
    std::vector<int32_t> missing;
    const int32_t hot = int32_t(std::min<int64_t>(h.d_ff, capacity + 6));  // a working set near the capacity
    for (int step = 0; step < 300; ++step) {
        const int kind = int(rng() % 40);
        if (kind == 0) {
            cache.clear_unpinned();
            model.clear_unpinned();
        } else if (kind == 1 && model.pinned() < capacity) {
            std::vector<int32_t> free;
            for (int32_t n = 0; n < h.d_ff; ++n)
                if (!model.resident.count(n)) free.push_back(n);
            const int32_t n = free[rng() % free.size()];
            const std::vector<int32_t> one{n};
            fill_neuron(cache, cache.pin(one)[0], n);
            model.pin(n);
        } else {
            // Mostly from the hot set, sometimes beyond it, now and then more than fits.
            const int64_t room = capacity - model.pinned() + pins;
            const int64_t count = int64_t(rng() % uint32_t(std::min<int64_t>(h.d_ff, room + 2) + 1));
            std::vector<int32_t> pool(ids.begin(), ids.begin() + (rng() % 4 == 0 ? h.d_ff : hot));
            std::shuffle(pool.begin(), pool.end(), rng);
            const std::vector<int32_t> active(pool.begin(), pool.begin() + std::min<int64_t>(count, int64_t(pool.size())));
            int64_t hits = 0, evicted = 0;
            const bool fits = model.begin_token(active, hits, missing, evicted);
            if (!fits) {
                const int64_t size = cache.size();
                EXPECT_THROW(cache.begin_token(active, plan), Error);
                EXPECT_EQ(cache.size(), size);
            } else {
                cache.begin_token(active, plan);
                EXPECT_EQ(plan.hits, hits);
                EXPECT_EQ(plan.missing, missing);
                EXPECT_EQ(plan.evicted, evicted);
                ASSERT_EQ(plan.slots.size(), active.size());
                ASSERT_EQ(plan.missing_slots.size(), plan.missing.size());
                for (size_t i = 0; i < plan.missing.size(); ++i)
                    fill_neuron(cache, plan.missing_slots[i], plan.missing[i]);
                for (size_t i = 0; i < active.size(); ++i) EXPECT_EQ(cache.neuron_at(plan.slots[i]), active[i]);
            }
        }
        expect_consistent(cache, model);
        if (testing::Test::HasFailure()) return;
    }
    for (int32_t n : pinned) EXPECT_GE(cache.slot_of(n), 0) << "pinned neuron " << n << " was evicted";
    EXPECT_EQ(cache.memory_bytes(), memory);
}

TEST(NeuronCache, FollowsItsPolicyOverRandomTraces) {
    const NeuronFileHeader headers[] = {
        cache_header(VectorCoding::Quantized, FfnActivation::SwiGlu, 100, 64),
        cache_header(VectorCoding::Quantized, FfnActivation::Relu, 129, 50),
        cache_header(VectorCoding::F16, FfnActivation::SwiGlu, 37, 40),
    };
    uint32_t seed = 1;
    for (const NeuronFileHeader& h : headers)
        for (int window : {0, 1, 4})
            for (int64_t capacity : {int64_t(5), int64_t(13), int64_t(33)})
                for (int pins : {0, 3}) run_trace(h, capacity, window, pins, seed++);
}

TEST(NeuronCache, WindowKeepsRecentNeurons) {
    const NeuronFileHeader h = cache_header(VectorCoding::Quantized, FfnActivation::SwiGlu, 64, 32);
    NeuronCache cache(h, 16, 1);
    NeuronCache::TokenPlan plan;
    const std::vector<int32_t> first{1, 2, 3}, second{3, 4}, third{5};
    cache.begin_token(first, plan);
    cache.begin_token(second, plan);  // 1 and 2 were active one token ago: they stay
    EXPECT_EQ(plan.hits, 1);
    EXPECT_EQ(plan.evicted, 0);
    EXPECT_GE(cache.slot_of(1), 0);
    cache.begin_token(third, plan);  // two tokens ago: gone
    EXPECT_EQ(plan.evicted, 2);
    EXPECT_EQ(cache.slot_of(1), -1);
    EXPECT_GE(cache.slot_of(3), 0);
    EXPECT_EQ(cache.size(), 3);
}

TEST(NeuronCache, TooManyActiveNeuronsIsAnError) {
    const NeuronFileHeader h = cache_header(VectorCoding::Quantized, FfnActivation::SwiGlu, 64, 32);
    NeuronCache cache(h, 4, 0);
    const std::vector<int32_t> pins{7, 8};
    cache.pin(pins);
    NeuronCache::TokenPlan plan;
    const std::vector<int32_t> active{7, 1, 2, 3};  // 7 is pinned: 3 more do not fit in the 2 left
    try {
        cache.begin_token(active, plan);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_STREQ(e.what(), "neuron cache: 3 active neurons do not fit beside 2 pinned in capacity 4");
    }
    EXPECT_EQ(cache.size(), 2);
    const std::vector<int32_t> twice{1, 1}, outside{32};
    EXPECT_THROW(cache.begin_token(twice, plan), Error);
    EXPECT_THROW(cache.begin_token(outside, plan), Error);
    const std::vector<int32_t> fits{7, 1, 2};
    cache.begin_token(fits, plan);
    EXPECT_EQ(plan.hits, 1);
    EXPECT_EQ(plan.missing, (std::vector<int32_t>{1, 2}));
}

TEST(NeuronCache, MemoryIsCloseToTheFilesBytesPerNeuron) {
    for (FfnActivation activation : {FfnActivation::Relu, FfnActivation::SwiGlu}) {
        const NeuronFileHeader h = cache_header(VectorCoding::Quantized, activation, 4096, 1024);
        const int64_t capacity = 500;
        NeuronCache cache(h, capacity, 1);
        // A record's vectors, bias slot and CRC.
        const int64_t record = h.parts() * h.vector.bytes() + (h.has_bias ? 4 : 0) + 4;
        EXPECT_LE(cache.memory_bytes(), capacity * record * 5 / 4);
        EXPECT_GE(cache.memory_bytes(), capacity * h.parts() * h.vector.bytes());
        // slot_bytes, plus the per-neuron maps and the last panel's padding columns.
        EXPECT_LE(cache.memory_bytes(),
                  capacity * NeuronCache::slot_bytes(h) + 12 * h.d_ff + 8 * h.parts() * h.vector.bytes());
    }
}

}  // namespace
}  // namespace qjit
