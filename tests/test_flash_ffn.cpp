// FFN layers served from a neuron file (runtime/flash/flash_ffn.hpp, include/qjit/qjit_flash.h):
// against the dense oracle restricted to the active neurons, the cache's budget, counters, and
// faults in the storage reported rather than computed on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/half.hpp"
#include "io/neuron_file.hpp"
#include "format/reference.hpp"
#include "qjit/qjit_flash.h"
#include "runtime/flash/flash_ffn.hpp"
#include "jit/x86/sparse_product_kernel.hpp"
#include "tuner/cpu_isa.hpp"
#include "tuner/tuning_db.hpp"
#include "faulty_storage.hpp"
#include "flash_test_files.hpp"
#include "test_support.hpp"

namespace qjit {
namespace {

namespace fs = std::filesystem;

using namespace test;  // flash_test_files.hpp

// Active sets with the temporal correlation windowing feeds on: each token keeps most of the last
// token's neurons and adds fresh ones.
std::vector<int32_t> next_active(const std::vector<int32_t>& last, int64_t d_ff, double fraction, std::mt19937& rng) {
    std::set<int32_t> next;
    std::bernoulli_distribution keep(0.6);
    for (int32_t id : last)
        if (keep(rng)) next.insert(id);
    std::uniform_int_distribution<int32_t> any(0, int32_t(d_ff - 1));
    while (double(next.size()) < fraction * double(d_ff)) next.insert(any(rng));
    std::vector<int32_t> ids(next.begin(), next.end());
    std::shuffle(ids.begin(), ids.end(), rng);  // any order is allowed
    return ids;
}

class FlashFfnOracle : public ::testing::TestWithParam<FfnCase> {};

TEST_P(FlashFfnOracle, EqualsDenseOracleRestrictedToActiveNeurons) {
    const FfnCase c = GetParam();
    const TestFile f = test_file(case_name(c), c, 2, 7);
    const NeuronFileHeader& h = f.header;
    const std::vector<DenseLayer>& dense = f.dense;

    ThreadPool pool(2);
    FlashFfnOptions options;
    options.window = 2;
    options.dram_budget_bytes = h.layers * (NeuronCache::fixed_bytes(h) + NeuronCache::slot_bytes(h) * (h.d_ff / 2));
    FlashFfn ffn(f.storage(), options, pool);
    ASSERT_EQ(ffn.resident_capacity(), h.d_ff / 2);
    const std::vector<int32_t> hot = {0, 3, int32_t(h.d_ff - 1)};
    ffn.pin(1, hot);

    std::mt19937 rng(11);
    std::vector<int32_t> active;
    std::vector<float> y, expected;
    std::vector<double> bound;
    for (int token = 0; token < 8; ++token) {
        // A wider set now and then: more than the window's room, so some neurons go transient.
        active = next_active(active, h.d_ff, token == 5 ? 0.7 : 0.25, rng);
        for (int64_t layer = 0; layer < h.layers; ++layer) {
            const int64_t m = token % 2 ? 3 : 1;
            const auto x = test::random_floats(size_t(m * h.d_model), 100 + uint32_t(token));
            y.assign(size_t(m * h.d_model), -1.0f);
            const FlashFfnCounters before = ffn.counters();
            ffn.forward(layer, x.data(), m, y.data(), &active);
            oracle(h, dense[size_t(layer)], active, x.data(), m, expected, bound);
            SCOPED_TRACE(concat("token ", token, " layer ", layer, " m ", m));
            test::expect_within(y, expected, bound);
            const FlashFfnCounters& after = ffn.counters();
            EXPECT_EQ(after.active_neurons - before.active_neurons, int64_t(active.size()));
            EXPECT_EQ((after.cache_hits - before.cache_hits) + (after.neurons_loaded - before.neurons_loaded),
                      int64_t(active.size()))
                << "every active neuron is either a hit or loaded";
        }
    }
    EXPECT_GT(ffn.counters().cache_hits, 0) << "the window keeps neurons across tokens";
}

std::vector<FfnCase> oracle_cases() {
    std::vector<FfnCase> cases;
    for (int bits : {2, 3, 4, 8, 16})
        for (FfnActivation activation : {FfnActivation::Relu, FfnActivation::SwiGlu})
            cases.push_back({bits, 32, false, activation, bits % 2 == 0, 100, 77});
    cases.push_back({4, 64, true, FfnActivation::Relu, true, 129, 64});
    cases.push_back({3, 128, false, FfnActivation::SwiGlu, false, 160, 33});
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Formats, FlashFfnOracle, ::testing::ValuesIn(oracle_cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(FlashFfn, EveryNeuronWithoutAListOrPredictorEqualsTheDenseFfn) {
    const FfnCase c{4, 32, false, FfnActivation::SwiGlu, true, 64, 48};
    const TestFile f = test_file("dense", c, 1, 3);
    const NeuronFileHeader& h = f.header;
    ThreadPool pool(2);
    FlashFfn ffn(f.storage(), {}, pool);  // no budget: nothing resident
    EXPECT_EQ(ffn.resident_capacity(), 0);
    const auto x = test::random_floats(size_t(h.d_model), 5);
    std::vector<float> y(size_t(h.d_model)), expected;
    std::vector<double> bound;
    ffn.forward(0, x.data(), 1, y.data());
    std::vector<int32_t> all(size_t(h.d_ff));
    std::iota(all.begin(), all.end(), 0);
    oracle(h, f.dense[0], all, x.data(), 1, expected, bound);
    test::expect_within(y, expected, bound);
    EXPECT_EQ(ffn.counters().neurons_loaded, h.d_ff);
    EXPECT_EQ(ffn.counters().bytes_read, h.d_ff * h.record_bytes());
}

TEST(FlashFfn, ResidentCachesStayWithinTheBudget) {
    const FfnCase c{4, 32, false, FfnActivation::Relu, true, 64, 100};
    const TestFile f = test_file("budget", c, 3, 9);
    const NeuronFileHeader& h = f.header;
    ThreadPool pool(1);
    for (const int64_t budget : {int64_t(0), int64_t(12345), 3 * (NeuronCache::fixed_bytes(h) + NeuronCache::slot_bytes(h) * 40),
                                 int64_t(1) << 40}) {
        FlashFfnOptions options;
        options.dram_budget_bytes = budget;
        FlashFfn ffn(f.storage(), options, pool);
        const int64_t fixed = NeuronCache::fixed_bytes(h), slot = NeuronCache::slot_bytes(h);
        const int64_t resident_bytes = h.layers * (fixed + ffn.resident_capacity() * slot);
        if (ffn.resident_capacity() > 0) EXPECT_LE(resident_bytes, budget) << "budget " << budget;
        EXPECT_LE(ffn.resident_capacity(), h.d_ff);
        EXPECT_EQ(ffn.resident_capacity(), std::clamp<int64_t>((budget / h.layers - fixed) / slot, 0, h.d_ff));
    }
}

TEST(FlashFfn, RefusesBadArguments) {
    const FfnCase c{4, 32, false, FfnActivation::Relu, true, 64, 20};
    const TestFile f = test_file("arguments", c, 1, 1);
    const NeuronFileHeader& h = f.header;
    ThreadPool pool(1);
    FlashFfn ffn(f.storage(), {}, pool);
    std::vector<float> x(size_t(h.d_model), 1.0f), y(size_t(h.d_model));
    const auto status_of = [](auto&& call) {
        try {
            call();
        } catch (const Error& e) {
            return e.status();
        }
        return QJIT_OK;
    };
    const std::vector<int32_t> out_of_range{0, 20}, twice{1, 1};
    EXPECT_EQ(status_of([&] { ffn.forward(1, x.data(), 1, y.data()); }), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] { ffn.forward(0, x.data(), 0, y.data()); }), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] { ffn.forward(0, x.data(), 1, y.data(), &out_of_range); }), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] { ffn.forward(0, x.data(), 1, y.data(), &twice); }), QJIT_ERROR_INVALID_ARGUMENT);
    const std::vector<int32_t> one{2};
    EXPECT_EQ(status_of([&] { ffn.pin(0, one); }), QJIT_ERROR_INVALID_ARGUMENT) << "no budget, no room to pin";
}

// Faults: what a storage or a file gets wrong is reported, and nothing is computed on it.
TestFile fault_file(bool bundled) {
    const FfnCase c{4, 32, false, FfnActivation::SwiGlu, bundled, 64, 30};
    return test_file(bundled ? "faults-bundled" : "faults-split", c, 2, 21);
}

qjit_status forward_status(const std::string& bytes, std::string* message) {
    try {
        ThreadPool pool(1);
        FlashFfn ffn(make_memory_storage(bytes, 512), {}, pool);
        std::vector<float> x(64, 0.5f), y(64);
        for (int64_t layer = 0; layer < ffn.header().layers; ++layer) ffn.forward(layer, x.data(), 1, y.data());
    } catch (const Error& e) {
        *message = e.what();
        return e.status();
    }
    return QJIT_OK;
}

TEST(FlashFfnFaults, ADamagedRecordIsReportedWithItsLayerAndNeuron) {
    for (const bool bundled : {true, false}) {
        TestFile f = fault_file(bundled);
        std::string message;
        ASSERT_EQ(forward_status(f.bytes, &message), QJIT_OK) << message;
        const int64_t offset = f.header.record_offset(1, 17, NeuronPart::Up) + 5;
        f.bytes[size_t(offset)] ^= 0x10;
        EXPECT_EQ(forward_status(f.bytes, &message), QJIT_ERROR_CORRUPT_DATA) << "bundled " << bundled;
        EXPECT_NE(message.find("layer 1"), std::string::npos) << message;
        EXPECT_NE(message.find("17"), std::string::npos) << message;
    }
}

TEST(FlashFfnFaults, ATruncatedOrPaddedFileIsRefusedAtCreation) {
    const TestFile f = fault_file(true);
    std::string message;
    EXPECT_EQ(forward_status(f.bytes.substr(0, f.bytes.size() - 512), &message), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_NE(message.find("truncated"), std::string::npos) << message;
    EXPECT_EQ(forward_status(f.bytes + std::string(512, '\0'), &message), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_EQ(forward_status(f.bytes.substr(0, 512), &message), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_EQ(forward_status(std::string(), &message), QJIT_ERROR_CORRUPT_DATA);
    std::string bad_header = f.bytes;
    bad_header[0] ^= 1;
    EXPECT_EQ(forward_status(bad_header, &message), QJIT_ERROR_CORRUPT_DATA);
}

qjit_status status_of(const std::function<void()>& call, std::string* message = nullptr) {
    try {
        call();
    } catch (const Error& e) {
        if (message != nullptr) *message = e.what();
        return e.status();
    }
    return QJIT_OK;
}

TEST(FlashFfnFaults, StorageFaultsAreReportedAndLaterCallsComputeOnGoodDataOnly) {
    const TestFile f = fault_file(false);
    const NeuronFileHeader& h = f.header;
    ThreadPool pool(2);
    FlashFfnOptions options;
    options.window = 4;
    options.dram_budget_bytes = h.layers * NeuronCache::slot_bytes(h) * h.d_ff;  // room for every neuron
    auto faulty = std::make_unique<test::FaultyStorage>(make_memory_storage(f.bytes, 512));
    test::FaultyStorage* knobs = faulty.get();
    FlashFfn ffn(std::move(faulty), options, pool);
    FlashFfn clean(make_memory_storage(f.bytes, 512), options, pool);
    const auto x = test::random_floats(size_t(h.d_model), 8);
    std::vector<float> y(size_t(h.d_model)), expected(size_t(h.d_model));
    const std::vector<int32_t> active{1, 5, 17, 29};
    clean.forward(1, x.data(), 1, expected.data(), &active);
    const auto expect_clean_result = [&] {
        std::fill(y.begin(), y.end(), 0.0f);
        ASSERT_EQ(status_of([&] { ffn.forward(1, x.data(), 1, y.data(), &active); }), QJIT_OK);
        for (size_t j = 0; j < y.size(); ++j) ASSERT_EQ(y[j], expected[j]) << "output " << j;
    };

    std::string message;
    knobs->fail_on_call = knobs->calls() + 1;
    EXPECT_EQ(status_of([&] { ffn.forward(1, x.data(), 1, y.data(), &active); }, &message), QJIT_ERROR_IO);
    EXPECT_NE(message.find("injected"), std::string::npos) << message;
    expect_clean_result();  // the neurons whose read failed are read again, not taken as resident

    const std::vector<int32_t> more{2, 6, 18};
    knobs->truncate_at = h.record_offset(1, 18, NeuronPart::Down);
    EXPECT_EQ(status_of([&] { ffn.forward(1, x.data(), 1, y.data(), &more); }, &message), QJIT_ERROR_IO);
    EXPECT_NE(message.find("past end"), std::string::npos) << message;
    knobs->truncate_at = -1;

    const int64_t damaged = h.record_offset(0, 9, NeuronPart::Gate) + 40;
    knobs->corrupt_begin = damaged;
    knobs->corrupt_end = damaged + 1;
    const std::vector<int32_t> nine{9};
    EXPECT_EQ(status_of([&] { ffn.forward(0, x.data(), 1, y.data(), &nine); }, &message), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_NE(message.find("neuron 9"), std::string::npos) << message;
    knobs->corrupt_begin = knobs->corrupt_end = 0;
    expect_clean_result();

    knobs->fail_on_call = knobs->calls() + 1;
    EXPECT_EQ(status_of([&] { ffn.pin(0, nine); }), QJIT_ERROR_IO);
    ASSERT_EQ(status_of([&] { ffn.pin(0, nine); }), QJIT_OK) << "a failed pin leaves nothing pinned";
}

// ---- the C API ----
struct FlashFfnDeleter {
    void operator()(qjit_flash_ffn* f) const { qjit_flash_ffn_destroy(f); }
};
using FlashFfnPtr = std::unique_ptr<qjit_flash_ffn, FlashFfnDeleter>;

// A two-layer ReLU file of q4g32 vectors (96 x 200) through the C API's writer; its biases of -2
// leave a few neurons active per token.
void write_relu_file(const std::string& path) {
    qjit_flash_file_options file;
    qjit_flash_file_options_init(&file);
    file.layers = 2;
    file.d_model = 96;
    file.d_ff = 200;
    file.activation = QJIT_FFN_RELU;
    file.has_bias = 1;
    file.quant.group_size = 32;
    file.alignment = 4096;
    qjit_flash_writer* writer = nullptr;
    ASSERT_EQ(qjit_flash_writer_create(path.c_str(), &file, &writer), QJIT_OK) << qjit_last_error();
    const auto up = test::random_floats(size_t(96 * 200), 1), down = test::random_floats(size_t(200 * 96), 2);
    std::vector<float> bias(200, -2.0f);
    for (int l = 0; l < 2; ++l)
        ASSERT_EQ(qjit_flash_writer_add_layer(writer, up.data(), nullptr, down.data(), bias.data()), QJIT_OK)
            << qjit_last_error();
    EXPECT_FALSE(fs::exists(path)) << "nothing is at the path before finish";
    ASSERT_EQ(qjit_flash_writer_finish(writer), QJIT_OK) << qjit_last_error();
    qjit_flash_writer_destroy(writer);
}

TEST(FlashFfnCApi, WritesAFileAndRunsItWithAPredictor) {
    const fs::path dir = scratch_dir("c-api");
    const std::string path = (dir / "ffn.qnf").string();
    ASSERT_NO_FATAL_FAILURE(write_relu_file(path));

    auto context = test::make_test_context(2);
    qjit_flash_options options;
    qjit_flash_options_init(&options);
    options.dram_budget_bytes = 1 << 20;
    qjit_flash_ffn* raw = nullptr;
    const qjit_status created = qjit_flash_ffn_create(context.get(), path.c_str(), &options, &raw);
    if (created == QJIT_ERROR_IO && std::string(qjit_last_error()).find("O_DIRECT") != std::string::npos)
        GTEST_SKIP() << "this file system refuses O_DIRECT: " << qjit_last_error();
    ASSERT_EQ(created, QJIT_OK) << qjit_last_error();
    FlashFfnPtr ffn(raw);

    qjit_flash_ffn_info info;
    ASSERT_EQ(qjit_flash_ffn_get_info(ffn.get(), &info), QJIT_OK);
    EXPECT_EQ(info.layers, 2);
    EXPECT_EQ(info.d_ff, 200);
    EXPECT_STREQ(info.format, "q4g32_asym");
    EXPECT_GT(info.resident_neurons, 0);

    const auto calibration = test::random_floats(size_t(64 * 96), 3);
    ASSERT_EQ(qjit_flash_ffn_fit_predictor(ffn.get(), 0, calibration.data(), 64, 0.99, 0.0f), QJIT_OK)
        << qjit_last_error();
    const auto x = test::random_floats(96, 4);
    std::vector<float> by_predictor(96), by_list(96), all(96);
    ASSERT_EQ(qjit_flash_ffn_forward(ffn.get(), 0, x.data(), 1, by_predictor.data(), nullptr, 0), QJIT_OK)
        << qjit_last_error();
    qjit_flash_counters counters;
    ASSERT_EQ(qjit_flash_ffn_get_counters(ffn.get(), &counters), QJIT_OK);
    EXPECT_EQ(counters.tokens, 1);
    EXPECT_GT(counters.predicted, 0);
    EXPECT_LT(counters.predicted, 200);
    EXPECT_GT(counters.bytes_read, 0);
    // Layer 1 has no predictor: every neuron takes part, which equals the explicit full list.
    std::vector<int32_t> ids(200);
    std::iota(ids.begin(), ids.end(), 0);
    ASSERT_EQ(qjit_flash_ffn_forward(ffn.get(), 1, x.data(), 1, all.data(), nullptr, 0), QJIT_OK);
    ASSERT_EQ(qjit_flash_ffn_forward(ffn.get(), 1, x.data(), 1, by_list.data(), ids.data(), 200), QJIT_OK);
    for (int j = 0; j < 96; ++j) EXPECT_FLOAT_EQ(all[size_t(j)], by_list[size_t(j)]);
    ASSERT_EQ(qjit_flash_ffn_reset_counters(ffn.get()), QJIT_OK);
    ASSERT_EQ(qjit_flash_ffn_get_counters(ffn.get(), &counters), QJIT_OK);
    EXPECT_EQ(counters.tokens, 0);

    EXPECT_STATUS(qjit_flash_ffn_forward(ffn.get(), 2, x.data(), 1, all.data(), nullptr, 0),
                  QJIT_ERROR_INVALID_ARGUMENT, "layer");
    EXPECT_STATUS(qjit_flash_ffn_forward(nullptr, 0, x.data(), 1, all.data(), nullptr, 0),
                  QJIT_ERROR_INVALID_ARGUMENT, "ffn");
    qjit_flash_ffn* missing = nullptr;
    EXPECT_STATUS(qjit_flash_ffn_create(context.get(), (dir / "missing.qnf").c_str(), &options, &missing),
                  QJIT_ERROR_IO, "missing.qnf");
    EXPECT_EQ(missing, nullptr);
    qjit_flash_options bad = options;
    for (int activations : {-1, 99}) {
        bad.activations = activations;
        EXPECT_STATUS(qjit_flash_ffn_create(context.get(), path.c_str(), &bad, &missing), QJIT_ERROR_INVALID_ARGUMENT,
                      "options.activations");
        EXPECT_EQ(missing, nullptr);
    }
}

// The generated sparse kernels take their tilings through the one tuning sequence: a context with
// a tuning database times them and stores a record per pass and row count, under the context's ISA
// cap; a later context makes its kernels from what the database holds.
TEST(FlashFfnCApi, SparseKernelTilingsGoThroughTheTuningDatabase) {
    if (!cpu_supports(QJIT_ISA_AVX2)) GTEST_SKIP() << "the generated sparse kernels need AVX2";
    const fs::path dir = scratch_dir("c-api-tuning");
    const std::string path = (dir / "ffn.qnf").string(), db_path = (dir / "tuning.yaml").string();
    ASSERT_NO_FATAL_FAILURE(write_relu_file(path));
    const auto kernels_of_a_new_context = [&]() -> std::string {
        qjit_context_options o;
        qjit_context_options_init(&o);
        o.num_threads = 1;
        o.max_isa = QJIT_ISA_AVX2;
        o.tuning_db_path = db_path.c_str();
        o.tuning_budget_ms = 20;
        qjit_context* raw_context = nullptr;
        EXPECT_EQ(qjit_context_create(&o, &raw_context), QJIT_OK) << qjit_last_error();
        const test::ContextPtr context(raw_context);
        qjit_flash_options options;
        qjit_flash_options_init(&options);
        options.direct_io = 0;
        qjit_flash_ffn* raw = nullptr;
        EXPECT_EQ(qjit_flash_ffn_create(context.get(), path.c_str(), &options, &raw), QJIT_OK) << qjit_last_error();
        const FlashFfnPtr ffn(raw);
        qjit_flash_ffn_info info{};
        EXPECT_EQ(qjit_flash_ffn_get_info(ffn.get(), &info), QJIT_OK);
        return info.kernels;
    };

    const std::string timed = kernels_of_a_new_context();
    EXPECT_NE(timed.find("q4g32_asym_sparse_i8_avx2_v"), std::string::npos) << timed;
    EXPECT_NE(timed.find("q4g32_asym_sparse_down_avx2_b"), std::string::npos) << timed;
    TuningDb db(db_path);
    std::vector<TuningRecord> sparse;
    for (TuningRecord r : db.records())
        if (r.kernel_key.find("_sparse_") != std::string::npos) sparse.push_back(r);
    std::set<std::string> keys;
    for (const TuningRecord& r : sparse) {
        keys.insert(r.kernel_key);
        EXPECT_GT(r.time_us, 0) << r.kernel_key;
        EXPECT_NO_THROW(jit::parse_sparse_tiling(r.tiling)) << r.tiling;
    }
    for (int m = 1; m <= 4; ++m)
        EXPECT_EQ(keys.count(concat("q4g32_asym_sparse_i8_avx2 K=96 m=", m, " threads=1")), 1u) << m;
    EXPECT_EQ(keys.count("q4g32_asym_sparse_down_avx2 K=96 m=1 threads=1"), 1u);

    // Every record set to one chain and no prefetch: the next context's kernels are those.
    for (TuningRecord& r : sparse) r.tiling = "vectors=1,blocks=1,prefetch=0";
    db.store(sparse);
    const std::string stored = kernels_of_a_new_context();
    size_t named = 0;
    for (size_t at = 0; (at = stored.find("_sparse_", at)) != std::string::npos; ++at) {
        const std::string name = stored.substr(at, stored.find(',', at) - at);
        EXPECT_TRUE(name.find("_v1pf0") != std::string::npos || name.find("_b1pf0") != std::string::npos) << name;
        ++named;
    }
    EXPECT_EQ(named, sparse.size()) << stored;
}

TEST(FlashFfnCApi, AFailedWriteLeavesTheExistingFileAlone) {
    const fs::path dir = scratch_dir("c-api-write");
    const std::string path = (dir / "ffn.qnf").string();
    test::write_file(path, "what was there");
    qjit_flash_file_options file;
    qjit_flash_file_options_init(&file);
    file.layers = 2;
    file.d_model = 32;
    file.d_ff = 8;
    qjit_flash_writer* writer = nullptr;
    ASSERT_EQ(qjit_flash_writer_create(path.c_str(), &file, &writer), QJIT_OK) << qjit_last_error();
    const auto w = test::random_floats(32 * 8, 1);
    ASSERT_EQ(qjit_flash_writer_add_layer(writer, w.data(), nullptr, w.data(), nullptr), QJIT_OK);
    EXPECT_STATUS(qjit_flash_writer_finish(writer), QJIT_ERROR_INVALID_ARGUMENT, "layer");  // one of two
    qjit_flash_writer_destroy(writer);
    EXPECT_EQ(test::read_file(path), "what was there");

    file.activation = QJIT_FFN_SWIGLU;
    file.has_bias = 1;
    EXPECT_STATUS(qjit_flash_writer_create(path.c_str(), &file, &writer), QJIT_ERROR_INVALID_ARGUMENT, "bias");
    file.has_bias = 0;
    file.quant.bits = 7;
    EXPECT_STATUS(qjit_flash_writer_create(path.c_str(), &file, &writer), QJIT_ERROR_INVALID_ARGUMENT, "bits");
}

}  // namespace
}  // namespace qjit
