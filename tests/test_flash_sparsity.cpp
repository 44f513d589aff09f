// Calibrated SwiGLU sparsity (runtime/flash/ffn_sparsity.hpp) and the flash FFN that serves it with
// its gates resident: the calibration zeroes its target share, the FFN equals the oracle over each
// row's neurons above the threshold (every format, both layouts that keep gates apart, odd shapes,
// one row and several), reads up and down only, and the C API writes and serves such a file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <vector>

#include "qjit/qjit_flash.h"
#include "runtime/flash/ffn_sparsity.hpp"
#include "runtime/flash/flash_ffn.hpp"
#include "flash_test_files.hpp"

namespace qjit {
namespace {

using namespace test;  // flash_test_files.hpp

double silu_of(double g) { return g / (1 + std::exp(-g)); }

// Row r's gate products in double: g[r][i].
std::vector<double> gate_products(const NeuronFileHeader& h, const DenseLayer& d, const float* x, int64_t m) {
    std::vector<double> g(size_t(m * h.d_ff), 0.0);
    for (int64_t r = 0; r < m; ++r)
        for (int64_t k = 0; k < h.d_model; ++k)
            for (int64_t i = 0; i < h.d_ff; ++i)
                g[size_t(r * h.d_ff + i)] += double(x[r * h.d_model + k]) * d.gate[size_t(k * h.d_ff + i)];
    return g;
}

TEST(FfnSparsityCalibration, ZeroesTheTargetShareOfItsRows) {
    const int64_t d_model = 70, d_ff = 45, n = 33;  // odd everything
    const auto gate = test::random_floats(size_t(d_model * d_ff), 1), up = test::random_floats(size_t(d_model * d_ff), 2);
    const auto down_t = test::random_floats(size_t(d_model * d_ff), 3), x = test::random_floats(size_t(n * d_model), 4);
    ThreadPool pool(2);
    for (SparsityScore score : {SparsityScore::Gate, SparsityScore::GateWeighted}) {
        float last_threshold = -1;
        for (double target : {0.0, 0.25, 0.5, 0.9}) {
            SCOPED_TRACE(concat(score == SparsityScore::Gate ? "gate" : "weighted", " target ", target));
            const LayerSparsity s =
                calibrate_layer_sparsity(gate.data(), up.data(), down_t.data(), d_model, d_ff, x.data(), n, target, score, pool);
            EXPECT_NEAR(s.zeroed_fraction, target, 1.5 / double(n * d_ff));
            EXPECT_GT(s.threshold, last_threshold);
            last_threshold = s.threshold;
            ASSERT_EQ(int64_t(s.neuron_scales.size()), d_ff);
            const double mean = std::accumulate(s.neuron_scales.begin(), s.neuron_scales.end(), 0.0) / double(d_ff);
            EXPECT_NEAR(mean, 1.0, 1e-5);
            if (score == SparsityScore::Gate) {
                for (float c : s.neuron_scales) EXPECT_EQ(c, 1.0f);
            } else {
                // Proportional to rms(x . up_i) * |down_i|: compare two neurons' ratio.
                const auto weight = [&](int64_t i) {
                    double u2 = 0, d2 = 0;
                    for (int64_t r = 0; r < n; ++r) {
                        double u = 0;
                        for (int64_t k = 0; k < d_model; ++k) u += double(x[size_t(r * d_model + k)]) * up[size_t(k * d_ff + i)];
                        u2 += u * u;
                    }
                    for (int64_t k = 0; k < d_model; ++k) d2 += double(down_t[size_t(k * d_ff + i)]) * down_t[size_t(k * d_ff + i)];
                    return std::sqrt(u2 / double(n)) * std::sqrt(d2);
                };
                EXPECT_NEAR(s.neuron_scales[3] / s.neuron_scales[40], weight(3) / weight(40), 1e-4);
            }
        }
    }
    EXPECT_THROW(calibrate_layer_sparsity(gate.data(), up.data(), down_t.data(), d_model, d_ff, x.data(), n, 1.0,
                                          SparsityScore::Gate, pool),
                 Error);
}

struct SparseCase {
    int bits;  // 16: fp16 vectors
    bool gate_apart;  // else split
};

// A file whose thresholds sit in the widest gap between the scores of the rows the test runs, so
// that no neuron lies close enough to one for fp32 rounding to flip it.
struct SparseFile {
    TestFile file;
    FfnSparsity sparsity;
    std::vector<std::vector<float>> rows;  // per layer: the rows the test runs (kRows x d_model)
};
constexpr int64_t kRows = 4;

SparseFile sparse_file(const SparseCase& c) {
    const FfnCase shape{c.bits, 32, false, FfnActivation::SwiGlu, true, 100, 77};
    NeuronFileHeader h = header_of(shape, 2);
    h.bundled = c.gate_apart;
    h.gate_apart = c.gate_apart;
    h.has_sparsity = true;
    const fs::path path = scratch_dir(concat("sparse-", c.bits, c.gate_apart ? "-apart" : "-split")) / "ffn.qnf";
    SparseFile f;
    f.file.header = h;
    f.sparsity.target = 0.5f;
    {
        NeuronFileWriter writer(path.string(), h);
        std::vector<FfnLayerWeights> layers;
        for (int64_t l = 0; l < h.layers; ++l) {
            const uint32_t seed = 50 + 10 * uint32_t(l);
            const auto up = random_floats(size_t(h.d_model * h.d_ff), seed);
            const auto gate = random_floats(size_t(h.d_model * h.d_ff), seed + 1);
            const auto down = random_floats(size_t(h.d_ff * h.d_model), seed + 2);
            const FfnLayerWeights w = quantize_ffn_layer(h, up.data(), gate.data(), down.data(), nullptr);
            writer.add_layer(w);
            DenseLayer d{dense_of(h, w.up, w.up_f32), dense_of(h, w.gate, w.gate_f32), dense_of(h, w.down_t, w.down_t_f32), {}};
            const auto scales = random_floats(size_t(h.d_ff), seed + 3, 0.5f, 1.5f);
            const auto x = random_floats(size_t(kRows * h.d_model), seed + 4);
            const std::vector<double> g = gate_products(h, d, x.data(), kRows);
            std::vector<double> scores;
            for (size_t j = 0; j < g.size(); ++j) scores.push_back(std::fabs(silu_of(g[j])) * scales[j % size_t(h.d_ff)]);
            std::sort(scores.begin(), scores.end());
            size_t widest = scores.size() / 4;  // the widest gap in the middle half
            for (size_t j = scores.size() / 4; j < scores.size() * 3 / 4; ++j)
                if (scores[j + 1] - scores[j] > scores[widest + 1] - scores[widest]) widest = j;
            f.sparsity.thresholds.push_back(float((scores[widest] + scores[widest + 1]) / 2));
            f.sparsity.neuron_scales.insert(f.sparsity.neuron_scales.end(), scales.begin(), scales.end());
            f.file.dense.push_back(std::move(d));
            f.rows.push_back(x);
        }
        writer.set_sparsity(f.sparsity);
        writer.finish();
    }
    f.file.bytes = read_file(path);
    return f;
}

// The oracle row by row over the neurons above the threshold in that row; returns the union.
std::vector<int32_t> masked_oracle(const SparseFile& f, int64_t layer, const float* x, int64_t m,
                                   std::vector<float>& y, std::vector<double>& bound) {
    const NeuronFileHeader& h = f.file.header;
    const DenseLayer& d = f.file.dense[size_t(layer)];
    const std::vector<double> g = gate_products(h, d, x, m);
    std::vector<int32_t> all_active;
    y.clear();
    bound.clear();
    for (int64_t r = 0; r < m; ++r) {
        std::vector<int32_t> active;
        for (int32_t i = 0; i < int32_t(h.d_ff); ++i)
            if (std::fabs(silu_of(g[size_t(r * h.d_ff + i)])) * f.sparsity.neuron_scales[size_t(layer * h.d_ff + i)] >
                f.sparsity.thresholds[size_t(layer)])
                active.push_back(i);
        std::vector<float> row_y;
        std::vector<double> row_bound;
        oracle(h, d, active, x + r * h.d_model, 1, row_y, row_bound);
        y.insert(y.end(), row_y.begin(), row_y.end());
        bound.insert(bound.end(), row_bound.begin(), row_bound.end());
        all_active.insert(all_active.end(), active.begin(), active.end());
    }
    std::sort(all_active.begin(), all_active.end());
    all_active.erase(std::unique(all_active.begin(), all_active.end()), all_active.end());
    return all_active;
}

// What the resident gates of the file take: the smallest budget an FFN of it accepts.
int64_t resident_gate_bytes(const SparseFile& f, ThreadPool& pool, qjit_context* gate_context = nullptr) {
    FlashFfnOptions unbounded;
    unbounded.dram_budget_bytes = int64_t(1) << 40;
    return FlashFfn(f.file.storage(), unbounded, pool, gate_context).resident_gate_bytes();
}

// The bytes a token reads for one neuron of a file served with resident gates: its up and down records.
int64_t token_bytes_per_neuron(const NeuronFileHeader& h) {
    int64_t bytes = 0;
    for (NeuronPart first : h.record_first_parts())
        if (first != NeuronPart::Gate) bytes += h.record_bytes(first);
    return bytes;
}

class FlashFfnSparsity : public ::testing::TestWithParam<SparseCase> {
protected:
    void expect_sparse_ffn_equals_the_oracle(qjit_context* gate_context);
};

// Both ways to hold the gates: as the file stores them, and (quantized files) as a layer per FFN
// layer of a context.
TEST_P(FlashFfnSparsity, ResidentGatesEqualTheOracleOverEachRowsNeuronsAboveTheThreshold) {
    test::ContextPtr context = test::make_test_context(2);
    for (qjit_context* gate_context : {static_cast<qjit_context*>(nullptr), context.get()}) {
        SCOPED_TRACE(gate_context ? "gates as layers" : "gates as stored");
        expect_sparse_ffn_equals_the_oracle(gate_context);
        if (HasFailure()) return;
    }
}

void FlashFfnSparsity::expect_sparse_ffn_equals_the_oracle(qjit_context* gate_context) {
    const SparseFile f = sparse_file(GetParam());
    const NeuronFileHeader& h = f.file.header;
    ThreadPool pool(2);
    FlashFfnOptions gates_only;  // room for the gates and nothing else: every token reads
    const int64_t gate_bytes = resident_gate_bytes(f, pool, gate_context);
    const int64_t stored_gate_bytes = h.layers * h.d_ff * h.vector.bytes();
    if (gate_context && h.vector.coding == VectorCoding::Quantized) {
        EXPECT_GT(gate_bytes, stored_gate_bytes / 2) << "the layers hold the codes, scales and zero points";
        EXPECT_LT(gate_bytes, stored_gate_bytes * 2);
    } else {
        ASSERT_GE(gate_bytes, stored_gate_bytes);
    }
    gates_only.dram_budget_bytes = gate_bytes;
    FlashFfn ffn(f.file.storage(), gates_only, pool, gate_context);
    EXPECT_EQ(ffn.gates_as_layers(), gate_context && h.vector.coding == VectorCoding::Quantized);
    ASSERT_NE(ffn.sparsity(), nullptr);
    EXPECT_EQ(ffn.resident_capacity(), 0);
    EXPECT_EQ(ffn.counters().bytes_read, 0) << "the gates' reads at creation are not a token's";
    const int64_t per_neuron = token_bytes_per_neuron(h);

    std::vector<float> y, expected;
    std::vector<double> bound;
    for (int64_t m : {int64_t(1), kRows}) {
        for (int64_t layer = 0; layer < h.layers; ++layer) {
            SCOPED_TRACE(concat("layer ", layer, " m ", m));
            const float* x = f.rows[size_t(layer)].data();
            const std::vector<int32_t> active = masked_oracle(f, layer, x, m, expected, bound);
            ASSERT_GT(active.size(), 0u);
            if (m == 1) ASSERT_LT(int64_t(active.size()), h.d_ff) << "the threshold skips neurons";
            y.assign(size_t(m * h.d_model), -1.0f);
            const FlashFfnCounters before = ffn.counters();
            ffn.forward(layer, x, m, y.data());
            test::expect_within(y, expected, bound);
            const FlashFfnCounters& after = ffn.counters();
            EXPECT_EQ(after.active_neurons - before.active_neurons, int64_t(active.size()));
            EXPECT_EQ(after.bytes_read - before.bytes_read, int64_t(active.size()) * per_neuron)
                << "up and down read for the active neurons, and no gate";
        }
    }
    // A list of the caller's takes every listed neuron in every row, with its gate unmasked.
    const std::vector<int32_t> listed{0, 5, 76};
    std::vector<double> list_bound;
    oracle(h, f.file.dense[1], listed, f.rows[1].data(), kRows, expected, list_bound);
    y.assign(size_t(kRows * h.d_model), -1.0f);
    ffn.forward(1, f.rows[1].data(), kRows, y.data(), &listed);
    test::expect_within(y, expected, list_bound);
}

INSTANTIATE_TEST_SUITE_P(Formats, FlashFfnSparsity,
                         ::testing::Values(SparseCase{2, true}, SparseCase{3, false}, SparseCase{4, true},
                                           SparseCase{8, false}, SparseCase{16, true}),
                         [](const auto& info) {
                             return concat(info.param.bits == 16 ? std::string("f16") : concat("q", info.param.bits),
                                           info.param.gate_apart ? "_gate_apart" : "_split");
                         });

TEST(FlashFfnSparsityOptions, WithoutSparsityTheFileServesEveryNeuronAndTheBudgetCoversTheGates) {
    const SparseFile f = sparse_file({4, true});
    const NeuronFileHeader& h = f.file.header;
    ThreadPool pool(1);
    FlashFfnOptions off;
    off.use_sparsity = false;
    FlashFfn plain(f.file.storage(), off, pool);
    EXPECT_EQ(plain.sparsity(), nullptr);
    EXPECT_EQ(plain.resident_gate_bytes(), 0);
    std::vector<float> y(size_t(h.d_model)), expected;
    std::vector<double> bound;
    std::vector<int32_t> all(size_t(h.d_ff));
    std::iota(all.begin(), all.end(), 0);
    plain.forward(0, f.rows[0].data(), 1, y.data());
    oracle(h, f.file.dense[0], all, f.rows[0].data(), 1, expected, bound);
    test::expect_within(y, expected, bound);
    EXPECT_EQ(plain.counters().bytes_read, h.d_ff * (h.record_bytes(NeuronPart::Gate) + h.record_bytes(NeuronPart::Up)));

    FlashFfnOptions small;
    small.dram_budget_bytes = 1000;  // below the gates
    try {
        FlashFfn refused(f.file.storage(), small, pool);
        ADD_FAILURE() << "a budget below the resident gates was taken";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("resident gates"), std::string::npos) << e.what();
    }
    // all_resident_bytes is exactly the budget that holds every neuron beside the gates.
    FlashFfnOptions budget;
    budget.dram_budget_bytes = plain.all_resident_bytes();
    EXPECT_EQ(FlashFfn(f.file.storage(), budget, pool).resident_capacity(), h.d_ff);
    budget.dram_budget_bytes -= 1;
    EXPECT_EQ(FlashFfn(f.file.storage(), budget, pool).resident_capacity(), h.d_ff - 1);
}

// Reads ahead predict the next layer's neurons with its own thresholds on this layer's input: on
// the same input they name exactly the neurons it needs; on another, what they missed is read then.
TEST(FlashFfnSparsityOptions, ReadsAheadNameTheNextLayersNeuronsAboveItsThresholds) {
    const SparseFile f = sparse_file({4, true});
    const NeuronFileHeader& h = f.file.header;
    ThreadPool pool(2);
    FlashFfnOptions options;
    options.read_ahead = true;
    options.dram_budget_bytes = resident_gate_bytes(f, pool);
    FlashFfn ffn(f.file.storage(), options, pool);
    const int64_t per_neuron = token_bytes_per_neuron(h);
    std::vector<float> y(size_t(kRows * h.d_model)), expected;
    std::vector<double> bound;
    for (const int input_of_layer_1 : {0, 1}) {
        SCOPED_TRACE(concat("layer 1 on the rows of layer ", input_of_layer_1));
        ffn.reset_counters();
        const float* x0 = f.rows[0].data();
        const float* x1 = f.rows[size_t(input_of_layer_1)].data();
        masked_oracle(f, 0, x0, kRows, expected, bound);
        ffn.forward(0, x0, kRows, y.data());
        test::expect_within(y, expected, bound);
        const std::vector<int32_t> predicted = masked_oracle(f, 1, x0, kRows, expected, bound);
        EXPECT_EQ(ffn.counters().read_ahead_neurons, int64_t(predicted.size()));
        const int64_t layer_0_bytes = ffn.counters().bytes_read;

        const std::vector<int32_t> active = masked_oracle(f, 1, x1, kRows, expected, bound);
        ffn.forward(1, x1, kRows, y.data());
        test::expect_within(y, expected, bound);
        std::vector<int32_t> both;
        std::set_intersection(active.begin(), active.end(), predicted.begin(), predicted.end(), std::back_inserter(both));
        const FlashFfnCounters& c = ffn.counters();
        EXPECT_EQ(c.read_ahead_used, int64_t(both.size()));
        EXPECT_EQ(c.bytes_read - layer_0_bytes, int64_t(predicted.size() + active.size() - both.size()) * per_neuron)
            << "the reads ahead and the misses, each read once";
        if (input_of_layer_1 == 0) EXPECT_EQ(both.size(), active.size()) << "the same input: no miss";
    }
}

TEST(FlashFfnSparsityCApi, WritesACalibratedFileAndServesItWithResidentGates) {
    const fs::path dir = scratch_dir("sparsity-c-api");
    const std::string path = (dir / "ffn.qnf").string();
    qjit_flash_file_options file;
    qjit_flash_file_options_init(&file);
    file.layers = 2;
    file.d_model = 96;
    file.d_ff = 130;
    file.activation = QJIT_FFN_SWIGLU;
    file.quant.group_size = 32;
    file.alignment = 512;
    file.sparsity = 0.6;
    qjit_flash_writer* writer = nullptr;
    ASSERT_EQ(qjit_flash_writer_create(path.c_str(), &file, &writer), QJIT_OK) << qjit_last_error();
    const auto up = random_floats(size_t(96 * 130), 1), gate = random_floats(size_t(96 * 130), 2);
    const auto down = random_floats(size_t(130 * 96), 3);
    const int64_t rows = 40;
    const auto calibration = random_floats(size_t(rows * 96), 4);
    EXPECT_STATUS(qjit_flash_writer_add_layer(writer, up.data(), gate.data(), down.data(), nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "add_layer_calibrated");
    EXPECT_STATUS(qjit_flash_writer_add_layer_calibrated(writer, up.data(), gate.data(), down.data(), nullptr, 4),
                  QJIT_ERROR_INVALID_ARGUMENT, "calibration");
    for (int l = 0; l < 2; ++l)
        ASSERT_EQ(qjit_flash_writer_add_layer_calibrated(writer, up.data(), gate.data(), down.data(),
                                                         calibration.data(), rows),
                  QJIT_OK)
            << qjit_last_error();
    ASSERT_EQ(qjit_flash_writer_finish(writer), QJIT_OK) << qjit_last_error();
    qjit_flash_writer_destroy(writer);

    auto context = test::make_test_context(2);
    qjit_flash_options options;
    qjit_flash_options_init(&options);
    options.direct_io = 0;
    options.dram_budget_bytes = 1 << 22;
    qjit_flash_ffn* raw = nullptr;
    ASSERT_EQ(qjit_flash_ffn_create(context.get(), path.c_str(), &options, &raw), QJIT_OK) << qjit_last_error();
    std::unique_ptr<qjit_flash_ffn, decltype(&qjit_flash_ffn_destroy)> ffn(raw, qjit_flash_ffn_destroy);
    qjit_flash_ffn_info info;
    ASSERT_EQ(qjit_flash_ffn_get_info(ffn.get(), &info), QJIT_OK);
    EXPECT_EQ(info.gate_apart, 1);
    EXPECT_NEAR(info.sparsity, 0.6, 1e-6);
    EXPECT_GT(info.resident_gate_bytes, 0);
    // On its own calibration rows, each layer runs 40 % of the (row, neuron) pairs.
    std::vector<float> y(96);
    for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(qjit_flash_ffn_forward(ffn.get(), 0, calibration.data() + r * 96, 1, y.data(), nullptr, 0), QJIT_OK);
    qjit_flash_counters counters;
    ASSERT_EQ(qjit_flash_ffn_get_counters(ffn.get(), &counters), QJIT_OK);
    EXPECT_NEAR(double(counters.active_neurons) / double(rows * 130), 0.4, 0.02);

    file.sparsity = 0.5;
    file.activation = QJIT_FFN_RELU;
    EXPECT_STATUS(qjit_flash_writer_create(path.c_str(), &file, &writer), QJIT_ERROR_INVALID_ARGUMENT, "sparsity");
    file.activation = QJIT_FFN_SWIGLU;
    file.sparsity_score = 7;
    EXPECT_STATUS(qjit_flash_writer_create(path.c_str(), &file, &writer), QJIT_ERROR_INVALID_ARGUMENT, "sparsity_score");
}

}  // namespace
}  // namespace qjit
