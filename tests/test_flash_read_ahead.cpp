// A flash FFN's reads ahead (FlashFfnOptions::read_ahead) and the resident cache's partial
// admission: the results equal the dense oracle whatever the reads ahead guessed, the counters
// say which neurons came from them, reads ahead that no forward takes are dropped, and a fault in
// them is reported by the forward that needs them.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "runtime/flash/flash_ffn.hpp"
#include "faulty_storage.hpp"
#include "flash_test_files.hpp"
#include "test_support.hpp"

namespace qjit {
namespace {

using namespace test;  // flash_test_files.hpp

std::vector<int32_t> every_neuron(const NeuronFileHeader& h) {
    std::vector<int32_t> all(size_t(h.d_ff));
    std::iota(all.begin(), all.end(), 0);
    return all;
}

// Runs `layer` on x (m rows) and checks y against the oracle over `active` (every neuron when empty).
void expect_layer(FlashFfn& ffn, const TestFile& f, int64_t layer, const std::vector<float>& x, int64_t m,
                  std::vector<int32_t> active = {}) {
    SCOPED_TRACE(concat("layer ", layer, " m ", m));
    if (active.empty()) active = every_neuron(f.header);
    std::vector<float> y(size_t(m * f.header.d_model), -1.0f), expected;
    std::vector<double> bound;
    ffn.forward(layer, x.data(), m, y.data());
    oracle(f.header, f.dense[size_t(layer)], active, x.data(), m, expected, bound);
    expect_within(y, expected, bound);
}

FlashFfnOptions reading_ahead(int64_t budget = 0) {
    FlashFfnOptions options;
    options.read_ahead = true;
    options.dram_budget_bytes = budget;
    return options;
}

TEST(FlashFfnReadAhead, EveryNeuronOfTheNextLayerIsReadAheadAndTakenFromThere) {
    for (const bool bundled : {true, false}) {
        SCOPED_TRACE(concat("bundled ", bundled));
        const FfnCase c{4, 32, false, FfnActivation::SwiGlu, bundled, 100, 77};
        const TestFile f = test_file(bundled ? "ahead-bundled" : "ahead-split", c, 3, 31);
        const NeuronFileHeader& h = f.header;
        ThreadPool pool(2);
        FlashFfn ffn(f.storage(), reading_ahead(), pool);
        const int64_t layer_bytes = h.d_ff * h.record_bytes() * int64_t(h.record_first_parts().size());
        for (const int64_t m : {int64_t(1), int64_t(4)}) {
            const auto x = random_floats(size_t(m * h.d_model), 40 + uint32_t(m));
            ffn.reset_counters();
            expect_layer(ffn, f, 0, x, m);
            EXPECT_EQ(ffn.counters().read_ahead_neurons, h.d_ff) << "layer 1's, started before layer 0 returned";
            EXPECT_EQ(ffn.counters().read_ahead_used, 0);
            expect_layer(ffn, f, 1, x, m);
            expect_layer(ffn, f, 2, x, m);
            const FlashFfnCounters& c = ffn.counters();
            EXPECT_EQ(c.read_ahead_neurons, 2 * h.d_ff) << "nothing ahead of the last layer";
            EXPECT_EQ(c.read_ahead_used, 2 * h.d_ff);
            EXPECT_EQ(c.neurons_loaded, 3 * h.d_ff);
            EXPECT_EQ(c.bytes_read, 3 * layer_bytes) << "each layer read once, ahead or not";
        }
    }
}

TEST(FlashFfnReadAhead, ResidentNeuronsAreNotReadAheadAndMissesAreReadOnDemand) {
    const FfnCase c{8, 32, false, FfnActivation::Relu, true, 64, 90};
    const TestFile f = test_file("ahead-lists", c, 2, 37);
    const NeuronFileHeader& h = f.header;
    ThreadPool pool(1);
    const int64_t capacity = 30;
    FlashFfn ffn(f.storage(), reading_ahead(h.layers * (NeuronCache::fixed_bytes(h) + capacity * NeuronCache::slot_bytes(h))),
                 pool);
    ASSERT_EQ(ffn.resident_capacity(), capacity);
    std::vector<int32_t> pinned(10);
    std::iota(pinned.begin(), pinned.end(), 0);
    ffn.pin(1, pinned);
    const auto x = random_floats(size_t(h.d_model), 5);
    expect_layer(ffn, f, 0, x, 1);
    EXPECT_EQ(ffn.counters().read_ahead_neurons, h.d_ff - 10) << "the pinned neurons of layer 1 are resident";

    // Layer 1 with a caller's list takes the listed neurons it read ahead and reads none.
    const std::vector<int32_t> listed{3, 12, 40, 89};
    std::vector<float> y(size_t(h.d_model)), expected;
    std::vector<double> bound;
    const FlashFfnCounters before = ffn.counters();
    ffn.forward(1, x.data(), 1, y.data(), &listed);
    oracle(h, f.dense[1], listed, x.data(), 1, expected, bound);
    expect_within(y, expected, bound);
    EXPECT_EQ(ffn.counters().read_ahead_used - before.read_ahead_used, 3) << "12, 40 and 89; 3 is pinned";
    EXPECT_EQ(ffn.counters().reads - before.reads, 1) << "one read: the reads ahead, taken; nothing on demand";

    // A caller's list chooses for its own layer only: nothing is read ahead after it.
    ffn.forward(0, x.data(), 1, y.data(), &listed);
    EXPECT_EQ(ffn.counters().read_ahead_neurons, h.d_ff - 10);
}

TEST(FlashFfnReadAhead, ReadsAheadNoForwardTakesAreDropped) {
    const FfnCase c{4, 32, true, FfnActivation::SwiGlu, true, 64, 40};
    const TestFile f = test_file("ahead-dropped", c, 3, 43);
    const NeuronFileHeader& h = f.header;
    ThreadPool pool(2);
    FlashFfn ffn(f.storage(), reading_ahead(), pool);
    const auto x = random_floats(size_t(2 * h.d_model), 7);
    expect_layer(ffn, f, 0, x, 2);
    expect_layer(ffn, f, 2, x, 2);  // skips layer 1: its reads ahead are not layer 2's
    EXPECT_EQ(ffn.counters().read_ahead_used, 0);
    EXPECT_EQ(ffn.counters().neurons_loaded, 2 * h.d_ff);
    expect_layer(ffn, f, 0, x, 2);
    std::vector<float> part = ffn.read_part(1, NeuronPart::Up);  // waits for and drops them too
    EXPECT_EQ(part.size(), size_t(h.d_model * h.d_ff));
    expect_layer(ffn, f, 1, x, 2);
    EXPECT_EQ(ffn.counters().read_ahead_used, 0);
}

TEST(FlashFfnReadAhead, AFaultInTheReadsAheadIsReportedByTheForwardThatNeedsThem) {
    const FfnCase c{4, 32, false, FfnActivation::SwiGlu, true, 64, 30};
    TestFile f = test_file("ahead-faults", c, 2, 21);
    const NeuronFileHeader& h = f.header;
    const auto x = random_floats(size_t(h.d_model), 3);
    std::vector<float> y(size_t(h.d_model));
    ThreadPool pool(1);
    {  // a damaged record
        std::string damaged = f.bytes;
        damaged[size_t(h.record_offset(1, 17, NeuronPart::Up) + 5)] ^= 0x10;
        FlashFfn ffn(make_memory_storage(damaged, 512), reading_ahead(), pool);
        ffn.forward(0, x.data(), 1, y.data());
        EXPECT_EQ(ffn.counters().read_ahead_neurons, h.d_ff);
        try {
            ffn.forward(1, x.data(), 1, y.data());
            ADD_FAILURE() << "the damaged record was computed on";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA);
            EXPECT_NE(std::string(e.what()).find("layer 1 neuron 17"), std::string::npos) << e.what();
        }
    }
    {  // a failed read: reported once; the next forward reads again and computes on good data
        auto faulty = std::make_unique<FaultyStorage>(f.storage());
        FaultyStorage& storage = *faulty;
        FlashFfn ffn(std::move(faulty), reading_ahead(), pool);
        // Call 1 read the header, 2 is layer 0's own reads, 3 layer 1's reads ahead.
        storage.fail_on_call = 3;
        expect_layer(ffn, f, 0, x, 1);
        EXPECT_THROW(ffn.forward(1, x.data(), 1, y.data()), Error) << "its reads ahead failed";
        expect_layer(ffn, f, 1, x, 1);
        EXPECT_EQ(storage.calls(), 4);
    }
}

TEST(FlashFfnPartialAdmission, AWindowCacheTooSmallForTheActiveNeuronsKeepsAsManyAsFit) {
    const FfnCase c{4, 32, false, FfnActivation::Relu, true, 64, 50};
    const TestFile f = test_file("partial-admission", c, 1, 13);
    const NeuronFileHeader& h = f.header;
    ThreadPool pool(1);
    FlashFfnOptions options;
    options.window = 2;
    options.dram_budget_bytes = NeuronCache::fixed_bytes(h) + 20 * NeuronCache::slot_bytes(h);
    FlashFfn ffn(f.storage(), options, pool);
    ASSERT_EQ(ffn.resident_capacity(), 20);
    const auto x = random_floats(size_t(h.d_model), 17);
    std::vector<int32_t> pinned{45, 46, 47, 48, 49};
    ffn.pin(0, pinned);
    ffn.reset_counters();
    expect_layer(ffn, f, 0, x, 1);  // all 50 active: 5 pinned, 15 admitted, 30 transient
    EXPECT_EQ(ffn.counters().cache_hits, 5);
    EXPECT_EQ(ffn.counters().neurons_loaded, 45);
    expect_layer(ffn, f, 0, x, 1);
    EXPECT_EQ(ffn.counters().cache_hits, 5 + 20) << "the 15 admitted stayed";
    EXPECT_EQ(ffn.counters().neurons_loaded, 45 + 30);
}

}  // namespace
}  // namespace qjit
