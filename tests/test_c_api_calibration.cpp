// Calibration through the C API: qjit_calibration_* (H = sum of x^T x over a layer's inputs),
// qjit_linear_create_calibrated with GPTQ and the 2/4/16 mixed format, the new config fields and
// info fields, bad arguments, and save/load of a GPTQ layer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "format/low_rank.hpp"
#include "models/binary_files.hpp"
#include "models/llama2_checkpoint.hpp"
#include "models/llama2_tokenizer.hpp"
#include "models/llama_eval.hpp"
#include "models/llama_model.hpp"
#include "models/mixed_budget.hpp"
#include "test_support.hpp"

namespace {

using qjit::test::ContextPtr;
using qjit::test::LinearPtr;

// An odd N (no kernel tile divides it); K a whole number of 32-row groups and one short group.
constexpr int64_t kK = 200, kN = 75;
constexpr int kGroup = 32;

struct CalibrationDeleter {
    void operator()(qjit_calibration* c) const { qjit_calibration_destroy(c); }
};
using CalibrationPtr = std::unique_ptr<qjit_calibration, CalibrationDeleter>;

CalibrationPtr make_calibration(int64_t k) {
    qjit_calibration* raw = nullptr;
    EXPECT_EQ(qjit_calibration_create(k, &raw), QJIT_OK) << qjit_last_error();
    return CalibrationPtr(raw);
}

// Inputs as a layer sees them: a few latent directions shared by every feature (strong
// correlations), per-feature magnitudes spread over a decade, a little independent noise. Each
// value is rounded to a multiple of 1/16 within [-2, 2], so every sum of products x_i x_j over a
// few thousand rows is exact in double and in float: H does not depend on how rows are batched.
std::vector<float> correlated_inputs(int64_t m, int64_t k, uint32_t seed) {
    constexpr int kLatent = 6;
    std::mt19937 mixing_rng(7);  // the same distribution for every seed
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> mixing(size_t(kLatent * k));
    std::vector<double> magnitude(static_cast<size_t>(k));
    for (double& v : mixing) v = normal(mixing_rng);
    for (int64_t c = 0; c < k; ++c) magnitude[size_t(c)] = std::pow(10.0, -double(c % 11) / 10.0);
    std::mt19937 rng(seed);
    std::vector<float> x(size_t(m * k));
    std::vector<double> latent(kLatent);
    for (int64_t r = 0; r < m; ++r) {
        for (double& v : latent) v = normal(rng);
        for (int64_t c = 0; c < k; ++c) {
            double v = 0.1 * normal(rng);
            for (int j = 0; j < kLatent; ++j) v += latent[size_t(j)] * mixing[size_t(j * k + c)] / 3.0;
            v = std::clamp(v * magnitude[size_t(c)], -2.0, 2.0);
            x[size_t(r * k + c)] = float(std::round(v * 16.0) / 16.0);
        }
    }
    return x;
}

std::vector<float> normal_weights(int64_t k, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> w(size_t(k * n));
    for (float& v : w) v = normal(rng);
    return w;
}

qjit_quant_config config_of(qjit_quant_method method, int bits = 3, int group = kGroup) {
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.method = method;
    config.bits = bits;
    config.group_size = group;
    return config;
}

LinearPtr create_calibrated(qjit_context* context, const qjit_quant_config& config, const qjit_calibration* calibration,
                            const std::vector<float>& w, int64_t k = kK, int64_t n = kN,
                            qjit_weight_layout layout = QJIT_LAYOUT_K_BY_N) {
    qjit_linear* raw = nullptr;
    EXPECT_EQ(qjit_linear_create_calibrated(context, &config, calibration, k, n, w.data(), layout, &raw), QJIT_OK)
        << qjit_last_error();
    return LinearPtr(raw);
}

std::vector<float> dequantized(const qjit_linear* layer, int64_t k = kK, int64_t n = kN) {
    std::vector<float> w(size_t(k * n), std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(qjit_linear_dequantize(layer, w.data()), QJIT_OK) << qjit_last_error();
    return w;
}

qjit_linear_info info_of(const qjit_linear* layer) {
    qjit_linear_info info{};
    EXPECT_EQ(qjit_linear_get_info(layer, &info), QJIT_OK) << qjit_last_error();
    return info;
}

// ||x W_layer - x W||_F over the rows of x: the layer's forward against the fp32 product in double.
double output_error(qjit_linear* layer, const std::vector<float>& x, const std::vector<float>& w, int64_t k,
                    int64_t n) {
    const int64_t m = int64_t(x.size()) / k;
    std::vector<float> y(size_t(m * n));
    EXPECT_EQ(qjit_linear_forward(layer, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
    double sum = 0.0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < n; ++c) {
            double exact = 0.0;
            for (int64_t r = 0; r < k; ++r) exact += double(x[size_t(i * k + r)]) * double(w[size_t(r * n + c)]);
            const double d = double(y[size_t(i * n + c)]) - exact;
            sum += d * d;
        }
    return std::sqrt(sum);
}

// X^T X (K x K) in double: exact for correlated_inputs' values, and then exact in float too.
std::vector<float> gram(const std::vector<float>& x, int64_t k) {
    const int64_t m = int64_t(x.size()) / k;
    std::vector<double> h(size_t(k * k), 0.0);
    for (int64_t r = 0; r < m; ++r)
        for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) h[size_t(i * k + j)] += double(x[size_t(r * k + i)]) * x[size_t(r * k + j)];
    std::vector<float> out(h.size());
    for (size_t i = 0; i < h.size(); ++i) {
        out[i] = float(h[i]);
        EXPECT_EQ(double(out[i]), h[i]) << "H[" << i / size_t(k) << "][" << i % size_t(k) << "] is not exact in float";
    }
    return out;
}

TEST(CApiCalibration, QuantConfigInitSetsTheCalibratedDefaults) {
    qjit_quant_config config;
    std::memset(&config, 0x5a, sizeof config);
    qjit_quant_config_init(&config);
    EXPECT_EQ(config.method, QJIT_QUANT_RTN);
    EXPECT_EQ(config.act_order, 0);
    EXPECT_EQ(config.damp, 0.01);
    EXPECT_EQ(config.mixed_alpha, 0.25);
    EXPECT_EQ(config.outlier_fraction, 0.002);
    EXPECT_EQ(config.second_order_scales, 1);
}

TEST(CApiCalibration, BadArgumentsAreNamed) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    qjit_calibration* raw = nullptr;
    EXPECT_STATUS(qjit_calibration_create(kK, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "calibration");
    EXPECT_STATUS(qjit_calibration_create(0, &raw), QJIT_ERROR_INVALID_ARGUMENT, "k is 0");
    EXPECT_EQ(raw, nullptr);
    EXPECT_STATUS(qjit_calibration_create(-5, &raw), QJIT_ERROR_INVALID_ARGUMENT, "k is -5");
    EXPECT_STATUS(qjit_calibration_create(int64_t(1) << 20, &raw), QJIT_ERROR_INVALID_ARGUMENT, "K x K");
    EXPECT_EQ(qjit_calibration_destroy(nullptr), QJIT_OK);

    const CalibrationPtr calibration = make_calibration(kK);
    ASSERT_TRUE(calibration);
    std::vector<float> x = correlated_inputs(4, kK, 1);
    EXPECT_STATUS(qjit_calibration_add(nullptr, x.data(), 4), QJIT_ERROR_INVALID_ARGUMENT, "calibration is NULL");
    EXPECT_STATUS(qjit_calibration_add(calibration.get(), nullptr, 4), QJIT_ERROR_INVALID_ARGUMENT, "x is NULL");
    EXPECT_STATUS(qjit_calibration_add(calibration.get(), x.data(), 0), QJIT_ERROR_INVALID_ARGUMENT, "m is 0");
    EXPECT_STATUS(qjit_calibration_add(calibration.get(), x.data(), -1), QJIT_ERROR_INVALID_ARGUMENT, "m is -1");
    EXPECT_STATUS(qjit_calibration_add(calibration.get(), x.data(), int64_t(1) << 40), QJIT_ERROR_INVALID_ARGUMENT,
                  "m is");
    x[size_t(2 * kK + 7)] = nan;
    EXPECT_STATUS(qjit_calibration_add(calibration.get(), x.data(), 4), QJIT_ERROR_INVALID_ARGUMENT, "x[2][7]");
    x[size_t(2 * kK + 7)] = std::numeric_limits<float>::infinity();
    EXPECT_STATUS(qjit_calibration_add(calibration.get(), x.data(), 4), QJIT_ERROR_INVALID_ARGUMENT, "x[2][7]");
    int64_t rows = -1;
    EXPECT_EQ(qjit_calibration_rows(calibration.get(), &rows), QJIT_OK);
    EXPECT_EQ(rows, 0) << "a refused batch adds nothing";
    EXPECT_STATUS(qjit_calibration_rows(nullptr, &rows), QJIT_ERROR_INVALID_ARGUMENT, "calibration is NULL");
    EXPECT_STATUS(qjit_calibration_rows(calibration.get(), nullptr), QJIT_ERROR_INVALID_ARGUMENT, "rows is NULL");

    std::vector<float> h = gram(correlated_inputs(16, kK, 2), kK);
    EXPECT_STATUS(qjit_calibration_set_hessian(nullptr, h.data()), QJIT_ERROR_INVALID_ARGUMENT, "calibration is NULL");
    EXPECT_STATUS(qjit_calibration_set_hessian(calibration.get(), nullptr), QJIT_ERROR_INVALID_ARGUMENT, "h is NULL");
    std::vector<float> bad = h;
    bad[size_t(3 * kK + 5)] += 1.0f;  // H[3][5] != H[5][3]
    EXPECT_STATUS(qjit_calibration_set_hessian(calibration.get(), bad.data()), QJIT_ERROR_INVALID_ARGUMENT, "h[3][5]");
    bad = h;
    bad[size_t(4 * kK + 4)] = -1.0f;
    EXPECT_STATUS(qjit_calibration_set_hessian(calibration.get(), bad.data()), QJIT_ERROR_INVALID_ARGUMENT, "h[4][4]");
    bad = h;
    bad[size_t(1 * kK + 9)] = nan;
    EXPECT_STATUS(qjit_calibration_set_hessian(calibration.get(), bad.data()), QJIT_ERROR_INVALID_ARGUMENT, "h[1][9]");

    std::vector<float> diagonal(size_t(kK), 1.0f);
    EXPECT_STATUS(qjit_calibration_set_diagonal(nullptr, diagonal.data()), QJIT_ERROR_INVALID_ARGUMENT,
                  "calibration is NULL");
    EXPECT_STATUS(qjit_calibration_set_diagonal(calibration.get(), nullptr), QJIT_ERROR_INVALID_ARGUMENT,
                  "diagonal is NULL");
    diagonal[11] = -0.5f;
    EXPECT_STATUS(qjit_calibration_set_diagonal(calibration.get(), diagonal.data()), QJIT_ERROR_INVALID_ARGUMENT,
                  "diagonal[11]");
    diagonal[11] = nan;
    EXPECT_STATUS(qjit_calibration_set_diagonal(calibration.get(), diagonal.data()), QJIT_ERROR_INVALID_ARGUMENT,
                  "diagonal[11]");
    // Rows cannot be added on top of a diagonal alone.
    const CalibrationPtr diagonal_only = make_calibration(kK);
    diagonal[11] = 1.0f;
    ASSERT_EQ(qjit_calibration_set_diagonal(diagonal_only.get(), diagonal.data()), QJIT_OK) << qjit_last_error();
    x = correlated_inputs(4, kK, 1);
    EXPECT_STATUS(qjit_calibration_add(diagonal_only.get(), x.data(), 4), QJIT_ERROR_INVALID_ARGUMENT, "diagonal");
}

TEST(CApiCalibration, BadLayerArgumentsAreNamed) {
    const ContextPtr context = qjit::test::make_test_context();
    const std::vector<float> w = normal_weights(kK, kN, 3);
    const std::vector<float> x = correlated_inputs(64, kK, 4);
    const CalibrationPtr calibration = make_calibration(kK);
    ASSERT_EQ(qjit_calibration_add(calibration.get(), x.data(), 64), QJIT_OK) << qjit_last_error();
    const qjit_quant_config gptq = config_of(QJIT_QUANT_GPTQ);
    qjit_linear* layer = reinterpret_cast<qjit_linear*>(&layer);  // set to NULL on failure
    auto create = [&](const qjit_quant_config* config, const qjit_calibration* cal, int64_t k = kK,
                      qjit_weight_layout layout = QJIT_LAYOUT_K_BY_N) {
        return qjit_linear_create_calibrated(context.get(), config, cal, k, kN, w.data(), layout, &layer);
    };
    EXPECT_STATUS(qjit_linear_create_calibrated(context.get(), &gptq, calibration.get(), kK, kN, w.data(),
                                                QJIT_LAYOUT_K_BY_N, nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "layer");
    EXPECT_STATUS(qjit_linear_create_calibrated(nullptr, &gptq, calibration.get(), kK, kN, w.data(),
                                                QJIT_LAYOUT_K_BY_N, &layer),
                  QJIT_ERROR_INVALID_ARGUMENT, "context is NULL");
    EXPECT_EQ(layer, nullptr);
    EXPECT_STATUS(create(nullptr, calibration.get()), QJIT_ERROR_INVALID_ARGUMENT, "config is NULL");
    EXPECT_STATUS(qjit_linear_create_calibrated(context.get(), &gptq, calibration.get(), kK, kN, nullptr,
                                                QJIT_LAYOUT_K_BY_N, &layer),
                  QJIT_ERROR_INVALID_ARGUMENT, "weights is NULL");
    EXPECT_STATUS(create(&gptq, calibration.get(), kK, static_cast<qjit_weight_layout>(7)),
                  QJIT_ERROR_INVALID_ARGUMENT, "layout");
    EXPECT_STATUS(qjit_linear_create_calibrated(context.get(), &gptq, calibration.get(), 0, kN, w.data(),
                                                QJIT_LAYOUT_K_BY_N, &layer),
                  QJIT_ERROR_INVALID_ARGUMENT, "k is 0");

    // The calibration's K against the layer's: both named.
    const std::vector<float> w_small = normal_weights(96, kN, 5);
    const qjit_quant_config rtn = config_of(QJIT_QUANT_RTN);
    for (const qjit_quant_config* config : {&gptq, &rtn}) {
        qjit_status status = qjit_linear_create_calibrated(context.get(), config, calibration.get(), 96, kN,
                                                           w_small.data(), QJIT_LAYOUT_K_BY_N, &layer);
        EXPECT_EQ(status, QJIT_ERROR_INVALID_ARGUMENT);
        const std::string message = qjit_last_error();
        EXPECT_NE(message.find("K = 200"), std::string::npos) << message;
        EXPECT_NE(message.find("K = 96"), std::string::npos) << message;
    }

    // GPTQ without a calibration, by either call.
    EXPECT_STATUS(create(&gptq, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "GPTQ needs a calibration");
    EXPECT_STATUS(qjit_linear_create_from_f32(context.get(), &gptq, kK, kN, w.data(), QJIT_LAYOUT_K_BY_N, &layer),
                  QJIT_ERROR_INVALID_ARGUMENT, "GPTQ needs a calibration");
    const CalibrationPtr empty = make_calibration(kK);
    EXPECT_STATUS(create(&gptq, empty.get()), QJIT_ERROR_INVALID_ARGUMENT, "empty");
    const qjit_quant_config mixed_config = config_of(QJIT_QUANT_MIXED);
    EXPECT_STATUS(create(&mixed_config, empty.get()), QJIT_ERROR_INVALID_ARGUMENT, "empty");

    struct BadField {
        const char* word;
        void (*change)(qjit_quant_config&);
    };
    const BadField gptq_fields[] = {
        {"bits", [](qjit_quant_config& c) { c.bits = 7; }},
        {"damp", [](qjit_quant_config& c) { c.damp = -0.01; }},
        {"damp", [](qjit_quant_config& c) { c.damp = 1.5; }},
        {"damp", [](qjit_quant_config& c) { c.damp = std::nan(""); }},
        {"group_size", [](qjit_quant_config& c) { c.group_size = 48; }},
        {"method", [](qjit_quant_config& c) { c.method = static_cast<qjit_quant_method>(5); }},
        {"rank", [](qjit_quant_config& c) { c.rank = 4; }},
    };
    for (const BadField& field : gptq_fields) {
        qjit_quant_config config = gptq;
        field.change(config);
        SCOPED_TRACE(field.word);
        EXPECT_STATUS(create(&config, calibration.get()), QJIT_ERROR_INVALID_ARGUMENT, field.word);
    }
    const BadField mixed_fields[] = {
        {"group_size", [](qjit_quant_config& c) { c.group_size = 16; }},
        {"group_size", [](qjit_quant_config& c) { c.group_size = QJIT_GROUP_PER_COLUMN; }},
        {"group_size", [](qjit_quant_config& c) { c.group_size = 256; }},  // one group over K = 200
        {"symmetric", [](qjit_quant_config& c) { c.symmetric = 1; }},
        {"mixed_alpha", [](qjit_quant_config& c) { c.mixed_alpha = 1.01; }},
        {"mixed_alpha", [](qjit_quant_config& c) { c.mixed_alpha = -0.1; }},
        {"mixed_alpha", [](qjit_quant_config& c) { c.mixed_alpha = std::nan(""); }},
        {"outlier_fraction", [](qjit_quant_config& c) { c.outlier_fraction = 0.006; }},
        {"outlier_fraction", [](qjit_quant_config& c) { c.outlier_fraction = -0.001; }},
        {"damp", [](qjit_quant_config& c) { c.damp = 2.0; }},
    };
    for (const BadField& field : mixed_fields) {
        qjit_quant_config config = mixed_config;
        field.change(config);
        SCOPED_TRACE(field.word);
        EXPECT_STATUS(create(&config, calibration.get()), QJIT_ERROR_INVALID_ARGUMENT, field.word);
        EXPECT_STATUS(create(&config, nullptr), QJIT_ERROR_INVALID_ARGUMENT, field.word);
    }
    // Act-order orders rows by the calibration's diagonal: MIXED without one has none.
    qjit_quant_config act_order = mixed_config;
    act_order.act_order = 1;
    EXPECT_STATUS(create(&act_order, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "act_order");
    EXPECT_EQ(layer, nullptr);
}

// H accumulated over batches of any size is H of all rows at once, and set_hessian(X^T X) is
// add(X): the layers quantized with each dequantize alike (bit for bit).
// MiLo's base and the 2/4/16 budget through the C API: defaults, refusals, and what a layer stores.
TEST(CApiCalibration, MiloBaseAndMixedBudget) {
    qjit_quant_config defaults;
    std::memset(&defaults, 0x5a, sizeof defaults);
    qjit_quant_config_init(&defaults);
    EXPECT_EQ(defaults.milo_base, QJIT_QUANT_HQQ);
    EXPECT_EQ(defaults.mixed_bits_per_weight, 0.0);
    EXPECT_EQ(defaults.float_offsets, QJIT_FLOAT_OFFSETS_BY_METHOD);

    const ContextPtr context = qjit::test::make_test_context();
    const std::vector<float> w = normal_weights(kK, kN, 23);
    const std::vector<float> x = correlated_inputs(300, kK, 24);
    const CalibrationPtr calibration = make_calibration(kK);
    ASSERT_EQ(qjit_calibration_add(calibration.get(), x.data(), 300), QJIT_OK) << qjit_last_error();
    qjit_linear* layer = reinterpret_cast<qjit_linear*>(&layer);
    auto create = [&](const qjit_quant_config& config, const qjit_calibration* cal) {
        const qjit_status status =
            qjit_linear_create_calibrated(context.get(), &config, cal, kK, kN, w.data(), QJIT_LAYOUT_K_BY_N, &layer);
        if (status == QJIT_OK) qjit_linear_destroy(layer);
        else EXPECT_EQ(layer, nullptr);
        return status;
    };
    qjit_quant_config milo = config_of(QJIT_QUANT_MILO);
    milo.rank = 4;
    for (int bad : {-1, 2, 4, 99}) {
        qjit_quant_config config = milo;
        std::memcpy(&config.milo_base, &bad, sizeof bad);
        EXPECT_STATUS(create(config, calibration.get()), QJIT_ERROR_INVALID_ARGUMENT, "milo_base");
    }
    milo.milo_base = QJIT_QUANT_GPTQ;
    EXPECT_STATUS(create(milo, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "GPTQ base needs a calibration");
    qjit_quant_config offsets = milo;
    offsets.float_offsets = 1;
    EXPECT_STATUS(create(offsets, calibration.get()), QJIT_ERROR_INVALID_ARGUMENT, "float_offsets");
    qjit_quant_config gptq_offsets = config_of(QJIT_QUANT_GPTQ);
    gptq_offsets.float_offsets = 1;
    EXPECT_STATUS(create(gptq_offsets, calibration.get()), QJIT_ERROR_INVALID_ARGUMENT, "float_offsets");

    // A GPTQ base under the compensator; HQQ with offsets, calibrated.
    {
        const LinearPtr made = create_calibrated(context.get(), milo, calibration.get(), w);
        qjit_linear_info info{};
        ASSERT_EQ(qjit_linear_get_info(made.get(), &info), QJIT_OK);
        EXPECT_EQ(info.low_rank, 4);
        EXPECT_EQ(info.bits, 3);
        qjit_quant_config hqq = config_of(QJIT_QUANT_HQQ);
        hqq.float_offsets = 1;
        const LinearPtr with_offsets = create_calibrated(context.get(), hqq, calibration.get(), w);
        ASSERT_EQ(qjit_linear_get_info(with_offsets.get(), &info), QJIT_OK);
        EXPECT_EQ(info.float_offsets, 1);
    }

    // The budget: refused when not a number or negative, or below every group in 2 bits; met otherwise.
    qjit_quant_config mixed = config_of(QJIT_QUANT_MIXED, 4, 32);
    for (double bad : {-1.0, double(NAN), double(INFINITY)}) {
        mixed.mixed_bits_per_weight = bad;
        EXPECT_STATUS(create(mixed, calibration.get()), QJIT_ERROR_INVALID_ARGUMENT, "mixed_bits_per_weight");
    }
    mixed.mixed_bits_per_weight = 1.5;
    EXPECT_STATUS(create(mixed, calibration.get()), QJIT_ERROR_INVALID_ARGUMENT, "below");
    int64_t last_wide = -1;
    for (double budget : {2.9, 3.3, 3.7}) {
        mixed.mixed_bits_per_weight = budget;
        const LinearPtr made = create_calibrated(context.get(), mixed, calibration.get(), w);
        qjit_linear_info info{};
        ASSERT_EQ(qjit_linear_get_info(made.get(), &info), QJIT_OK);
        EXPECT_LE(double(info.stored_bytes) * 8.0 / double(kK * kN), budget);
        EXPECT_GT(info.wide_groups, last_wide);
        last_wide = info.wide_groups;
    }
}

// The pieces of a budget shared by many matrices: each group's gain from 4 bits, and the stored bits at a
// count of 4-bit groups, which the layers quantized at that share then store at most.
TEST(CApiCalibration, MixedGainsAndStoredBits) {
    const ContextPtr context = qjit::test::make_test_context();
    const std::vector<float> w = normal_weights(kK, kN, 31);
    const std::vector<float> x = correlated_inputs(300, kK, 32);
    const CalibrationPtr calibration = make_calibration(kK);
    ASSERT_EQ(qjit_calibration_add(calibration.get(), x.data(), 300), QJIT_OK) << qjit_last_error();
    qjit_quant_config mixed = config_of(QJIT_QUANT_MIXED, 4, 32);
    const int64_t groups = (kK + 31) / 32;  // 7: the last of 8 rows
    std::vector<double> gains(static_cast<size_t>(groups), -1.0);
    ASSERT_EQ(qjit_mixed_widening_gains(&mixed, calibration.get(), kK, kN, w.data(), QJIT_LAYOUT_K_BY_N, gains.data()),
              QJIT_OK)
        << qjit_last_error();
    for (double g : gains) EXPECT_GT(g, 0.0);  // 4 bits err less than 2 on every group of these weights
    // Both layouts give the same gains.
    const std::vector<float> w_n_by_k = qjit::transposed(w.data(), kK, kN);
    std::vector<double> again(static_cast<size_t>(groups));
    ASSERT_EQ(qjit_mixed_widening_gains(&mixed, calibration.get(), kK, kN, w_n_by_k.data(), QJIT_LAYOUT_N_BY_K,
                                        again.data()),
              QJIT_OK);
    EXPECT_EQ(gains, again);

    double previous = 0.0;
    for (int64_t wide = 0; wide <= groups; ++wide) {
        double bits = 0.0;
        ASSERT_EQ(qjit_mixed_stored_bits(&mixed, kK, kN, wide, &bits), QJIT_OK) << qjit_last_error();
        // Each group widened stores more, but the last: with no 2-bit group left there are no outliers.
        if (wide < groups) EXPECT_GT(bits, previous);
        previous = bits;
        // A layer given exactly that share stores no more, with at least that many groups in 4 bits
        // (all of them: an ordinary 4-bit layer).
        mixed.mixed_bits_per_weight = (bits + 0.5) / double(kK * kN);
        const LinearPtr made = create_calibrated(context.get(), mixed, calibration.get(), w);
        qjit_linear_info info{};
        ASSERT_EQ(qjit_linear_get_info(made.get(), &info), QJIT_OK);
        EXPECT_LE(double(info.stored_bytes) * 8.0, bits + 8.0) << wide << " groups";  // bytes round up
        EXPECT_TRUE(info.wide_groups >= wide || (info.bits == 4 && info.wide_groups == 0))
            << wide << " groups; the layer has " << info.wide_groups;
    }
    double bits = 0.0;
    EXPECT_STATUS(qjit_mixed_stored_bits(&mixed, kK, kN, groups + 1, &bits), QJIT_ERROR_INVALID_ARGUMENT, "wide_groups");
    const qjit_quant_config gptq = config_of(QJIT_QUANT_GPTQ);
    EXPECT_STATUS(qjit_mixed_stored_bits(&gptq, kK, kN, 0, &bits), QJIT_ERROR_INVALID_ARGUMENT, "QJIT_QUANT_MIXED");
    EXPECT_STATUS(qjit_mixed_widening_gains(&mixed, nullptr, kK, kN, w.data(), QJIT_LAYOUT_K_BY_N, gains.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "calibration is NULL");
    EXPECT_STATUS(qjit_mixed_widening_gains(&mixed, calibration.get(), 96, kN, w.data(), QJIT_LAYOUT_K_BY_N,
                                            gains.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "K = 200");
    EXPECT_STATUS(qjit_mixed_widening_gains(&mixed, calibration.get(), kK, kN, w.data(), QJIT_LAYOUT_K_BY_N, nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "gains is NULL");
}

// The rank a byte budget allows: its compensator within the fraction of the base's bytes, one more over.
TEST(CApiCalibration, RankWithinBudget) {
    qjit_quant_config config = config_of(QJIT_QUANT_MILO, 3, 32);
    for (int bits : {8, 3, 16})
        for (double fraction : {0.02, 0.1, 0.25}) {
            SCOPED_TRACE(testing::Message() << bits << "-bit factors, fraction " << fraction);
            config.low_rank_bits = bits;
            int rank = -1;
            ASSERT_EQ(qjit_rank_within_budget(&config, kK, kN, fraction, &rank), QJIT_OK) << qjit_last_error();
            // RTN at the same format: its stored bytes are the base's.
            qjit_quant_config base = config_of(QJIT_QUANT_RTN, 3, 32);
            const ContextPtr context = qjit::test::make_test_context();
            const std::vector<float> w = normal_weights(kK, kN, 2);
            const LinearPtr made = create_calibrated(context.get(), base, nullptr, w);
            qjit_linear_info info{};
            ASSERT_EQ(qjit_linear_get_info(made.get(), &info), QJIT_OK);
            const double allowed = fraction * double(info.stored_bytes);
            if (rank > 0) {
                qjit_quant_config milo = config;
                milo.rank = rank;
                const LinearPtr with_rank = create_calibrated(context.get(), milo, nullptr, w);
                qjit_linear_info milo_info{};
                ASSERT_EQ(qjit_linear_get_info(with_rank.get(), &milo_info), QJIT_OK);
                EXPECT_LE(double(milo_info.low_rank_bytes), allowed);
                EXPECT_EQ(milo_info.stored_bytes - milo_info.low_rank_bytes, info.stored_bytes);
            }
            qjit_quant_config more = config;
            more.rank = rank + 1;
            const LinearPtr over = create_calibrated(context.get(), more, nullptr, w);
            qjit_linear_info over_info{};
            ASSERT_EQ(qjit_linear_get_info(over.get(), &over_info), QJIT_OK);
            EXPECT_GT(double(over_info.low_rank_bytes), allowed);
        }
    int rank = 0;
    EXPECT_STATUS(qjit_rank_within_budget(nullptr, kK, kN, 0.1, &rank), QJIT_ERROR_INVALID_ARGUMENT, "config is NULL");
    EXPECT_STATUS(qjit_rank_within_budget(&config, kK, kN, 0.1, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "rank");
    EXPECT_STATUS(qjit_rank_within_budget(&config, kK, kN, 0.0, &rank), QJIT_ERROR_INVALID_ARGUMENT, "fraction");
    EXPECT_STATUS(qjit_rank_within_budget(&config, kK, kN, NAN, &rank), QJIT_ERROR_INVALID_ARGUMENT, "fraction");
    EXPECT_STATUS(qjit_rank_within_budget(&config, 0, kN, 0.1, &rank), QJIT_ERROR_INVALID_ARGUMENT, "k is 0");
    config.low_rank_bits = 5;
    EXPECT_STATUS(qjit_rank_within_budget(&config, kK, kN, 0.1, &rank), QJIT_ERROR_INVALID_ARGUMENT, "bits");
}

TEST(CApiCalibration, BatchesAndAGivenHessianEqualOneAdd) {
    const ContextPtr context = qjit::test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32);
    const std::vector<float> w = normal_weights(kK, kN, 6);
    constexpr int64_t kRows = 700;
    const std::vector<float> x = correlated_inputs(kRows, kK, 7);

    const CalibrationPtr whole = make_calibration(kK), batched = make_calibration(kK), given = make_calibration(kK);
    ASSERT_EQ(qjit_calibration_add(whole.get(), x.data(), kRows), QJIT_OK) << qjit_last_error();
    int64_t done = 0;
    for (int64_t batch : {1, 37, 256, 300, 106}) {
        ASSERT_EQ(qjit_calibration_add(batched.get(), x.data() + done * kK, batch), QJIT_OK) << qjit_last_error();
        done += batch;
    }
    ASSERT_EQ(done, kRows);
    const std::vector<float> h = gram(x, kK);
    ASSERT_EQ(qjit_calibration_set_hessian(given.get(), h.data()), QJIT_OK) << qjit_last_error();
    int64_t rows = 0;
    EXPECT_EQ(qjit_calibration_rows(batched.get(), &rows), QJIT_OK);
    EXPECT_EQ(rows, kRows);
    EXPECT_EQ(qjit_calibration_rows(given.get(), &rows), QJIT_OK);
    EXPECT_EQ(rows, 0) << "a given Hessian counts no rows";

    for (const qjit_quant_method method : {QJIT_QUANT_GPTQ, QJIT_QUANT_MIXED}) {
        for (const int act_order : {0, 1}) {
            SCOPED_TRACE(testing::Message() << "method " << int(method) << ", act_order " << act_order);
            qjit_quant_config config = config_of(method);
            config.act_order = act_order;
            const LinearPtr from_whole = create_calibrated(context.get(), config, whole.get(), w);
            const LinearPtr from_batches = create_calibrated(context.get(), config, batched.get(), w);
            const LinearPtr from_hessian = create_calibrated(context.get(), config, given.get(), w);
            ASSERT_TRUE(from_whole && from_batches && from_hessian);
            const std::vector<float> expected = dequantized(from_whole.get());
            EXPECT_EQ(dequantized(from_batches.get()), expected);
            EXPECT_EQ(dequantized(from_hessian.get()), expected);
        }
    }
}

// Both weight layouts give the same layer.
TEST(CApiCalibration, LayoutsGiveTheSameLayer) {
    const ContextPtr context = qjit::test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32);
    const std::vector<float> w = normal_weights(kK, kN, 8);
    const std::vector<float> x = correlated_inputs(512, kK, 9);
    const CalibrationPtr calibration = make_calibration(kK);
    ASSERT_EQ(qjit_calibration_add(calibration.get(), x.data(), 512), QJIT_OK) << qjit_last_error();
    const qjit_quant_config config = config_of(QJIT_QUANT_GPTQ);
    const LinearPtr k_by_n = create_calibrated(context.get(), config, calibration.get(), w);
    const LinearPtr n_by_k = create_calibrated(context.get(), config, calibration.get(),
                                               qjit::transposed(w.data(), kK, kN), kK, kN, QJIT_LAYOUT_N_BY_K);
    ASSERT_TRUE(k_by_n && n_by_k);
    EXPECT_EQ(dequantized(k_by_n.get()), dequantized(n_by_k.get()));
}

// On correlated inputs GPTQ's outputs are closer to the fp32 layer's than RTN's at 2, 3 and 4 bits,
// with and without act-order, on held-out inputs of the same distribution.
TEST(CApiCalibration, GptqBeatsRtnOnCorrelatedInputs) {
    const ContextPtr context = qjit::test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32);
    const std::vector<float> w = normal_weights(kK, kN, 10);
    const std::vector<float> x = correlated_inputs(2048, kK, 11);
    const std::vector<float> held_out = correlated_inputs(256, kK, 12);
    const CalibrationPtr calibration = make_calibration(kK);
    ASSERT_EQ(qjit_calibration_add(calibration.get(), x.data(), 2048), QJIT_OK) << qjit_last_error();
    for (const int bits : {2, 3, 4}) {
        const qjit_quant_config rtn = config_of(QJIT_QUANT_RTN, bits);
        qjit_linear* raw = nullptr;
        ASSERT_EQ(qjit_linear_create_from_f32(context.get(), &rtn, kK, kN, w.data(), QJIT_LAYOUT_K_BY_N, &raw),
                  QJIT_OK)
            << qjit_last_error();
        const LinearPtr rtn_layer(raw);
        const double rtn_error = output_error(rtn_layer.get(), held_out, w, kK, kN);
        for (const int act_order : {0, 1}) {
            qjit_quant_config gptq = config_of(QJIT_QUANT_GPTQ, bits);
            gptq.act_order = act_order;
            const LinearPtr layer = create_calibrated(context.get(), gptq, calibration.get(), w);
            ASSERT_TRUE(layer);
            const qjit_linear_info info = info_of(layer.get());
            EXPECT_EQ(info.bits, bits);
            EXPECT_EQ(info.group_size, kGroup);
            EXPECT_EQ(info.act_order, act_order);
            EXPECT_EQ(info.wide_groups, 0);
            EXPECT_EQ(info.second_order_scales, 0);
            EXPECT_EQ(info.outliers, 0);
            const double error = output_error(layer.get(), held_out, w, kK, kN);
            std::printf("%d-bit g%d%s: output error GPTQ %.4g, RTN %.4g (%.2fx)\n", bits, kGroup,
                        act_order ? " act-order" : "", error, rtn_error, rtn_error / error);
            EXPECT_LT(error, 0.9 * rtn_error) << bits << " bits, act_order " << act_order;
        }
    }
}

// The 2/4/16 format with and without a calibration: ceil(alpha G) groups in 4 bits, floor(f K N)
// outliers, second-order scales, 2.5 .. 3.2 bits per weight at group 32; with a calibration its
// outputs beat the calibration-free layer's. On the portable path and on the generated kernels.
class CApiCalibrationMixed : public ::testing::TestWithParam<qjit_isa> {};

TEST_P(CApiCalibrationMixed, LayersReportTheirStorage) {
    const ContextPtr context = qjit::test::make_test_context(2, GetParam(), QJIT_ACTIVATIONS_F32);
    constexpr int64_t k = 512, n = 96;
    const std::vector<float> w = normal_weights(k, n, 13);
    const std::vector<float> x = correlated_inputs(2048, k, 14);
    const std::vector<float> held_out = correlated_inputs(128, k, 15);
    const CalibrationPtr calibration = make_calibration(k);
    ASSERT_EQ(qjit_calibration_add(calibration.get(), x.data(), 2048), QJIT_OK) << qjit_last_error();

    const int64_t groups = k / kGroup;
    double errors[2][2] = {};  // [calibrated][outliers]
    for (const bool calibrated : {false, true}) {
        for (const double outliers : {0.0, 0.002}) {
            SCOPED_TRACE(testing::Message() << (calibrated ? "calibrated" : "no calibration") << ", outliers "
                                            << outliers);
            qjit_quant_config config = config_of(QJIT_QUANT_MIXED);
            config.outlier_fraction = outliers;
            const LinearPtr layer = create_calibrated(context.get(), config, calibrated ? calibration.get() : nullptr,
                                                      w, k, n);
            ASSERT_TRUE(layer);
            const qjit_linear_info info = info_of(layer.get());
            EXPECT_EQ(info.bits, 4);
            EXPECT_EQ(info.group_size, kGroup);
            EXPECT_EQ(info.wide_groups, int64_t(std::ceil(0.25 * double(groups))));
            EXPECT_EQ(info.outliers, int64_t(std::floor(outliers * double(k * n))));
            EXPECT_EQ(info.second_order_scales, 1);
            EXPECT_EQ(info.act_order, 0);
            const double bits_per_weight = double(info.stored_bytes) * 8.0 / double(k * n);
            EXPECT_GE(bits_per_weight, 2.5);
            EXPECT_LE(bits_per_weight, 3.2);
            errors[calibrated][outliers > 0] = output_error(layer.get(), held_out, w, k, n);
            std::printf("mixed %s, outliers %g: %.3f bits per weight, output error %.4g\n",
                        calibrated ? "calibrated" : "uncalibrated", outliers, bits_per_weight,
                        errors[calibrated][outliers > 0]);
        }
    }
    EXPECT_LT(errors[1][0], errors[0][0]);
    EXPECT_LT(errors[1][1], errors[0][1]);
    EXPECT_LT(errors[1][1], errors[1][0]) << "outliers help";

    // Act-order with a calibration; fp16 scales when asked.
    qjit_quant_config config = config_of(QJIT_QUANT_MIXED);
    config.act_order = 1;
    config.second_order_scales = 0;
    const LinearPtr layer = create_calibrated(context.get(), config, calibration.get(), w, k, n);
    ASSERT_TRUE(layer);
    const qjit_linear_info info = info_of(layer.get());
    EXPECT_EQ(info.act_order, 1);
    EXPECT_EQ(info.second_order_scales, 0);
    EXPECT_EQ(info.wide_groups, int64_t(std::ceil(0.25 * double(groups))));

    // Through qjit_linear_create_from_f32 MIXED is the calibration-free layer.
    qjit_linear* raw = nullptr;
    const qjit_quant_config plain = config_of(QJIT_QUANT_MIXED);
    ASSERT_EQ(qjit_linear_create_from_f32(context.get(), &plain, k, n, w.data(), QJIT_LAYOUT_K_BY_N, &raw), QJIT_OK)
        << qjit_last_error();
    const LinearPtr from_f32(raw);
    const LinearPtr uncalibrated = create_calibrated(context.get(), plain, nullptr, w, k, n);
    EXPECT_EQ(dequantized(from_f32.get(), k, n), dequantized(uncalibrated.get(), k, n));
}

INSTANTIATE_TEST_SUITE_P(Isa, CApiCalibrationMixed, ::testing::Values(QJIT_ISA_PORTABLE, QJIT_ISA_AUTO),
                         [](const auto& info) { return std::string(info.param == QJIT_ISA_PORTABLE ? "Portable" : "Jit"); });

// A GPTQ layer (act-order: a stored row order) saved and loaded dequantizes and runs alike.
TEST(CApiCalibration, GptqLayerSaveLoadRoundTrip) {
    const ContextPtr context = qjit::test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32);
    const std::vector<float> w = normal_weights(kK, kN, 16);
    const std::vector<float> x = correlated_inputs(1024, kK, 17);
    const CalibrationPtr calibration = make_calibration(kK);
    ASSERT_EQ(qjit_calibration_add(calibration.get(), x.data(), 1024), QJIT_OK) << qjit_last_error();
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("qjit_calibration_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    for (const int act_order : {0, 1}) {
        qjit_quant_config config = config_of(QJIT_QUANT_GPTQ, 4);
        config.act_order = act_order;
        const LinearPtr layer = create_calibrated(context.get(), config, calibration.get(), w);
        ASSERT_TRUE(layer);
        const std::string path = (dir / ("gptq" + std::to_string(act_order) + ".qjit")).string();
        ASSERT_EQ(qjit_linear_save(layer.get(), path.c_str()), QJIT_OK) << qjit_last_error();
        qjit_linear* raw = nullptr;
        ASSERT_EQ(qjit_linear_load(context.get(), path.c_str(), &raw), QJIT_OK) << qjit_last_error();
        const LinearPtr loaded(raw);
        EXPECT_EQ(dequantized(loaded.get()), dequantized(layer.get()));
        EXPECT_EQ(info_of(loaded.get()).act_order, act_order);
        EXPECT_EQ(info_of(loaded.get()).stored_bytes, info_of(layer.get()).stored_bytes);
        const std::vector<float> probe = correlated_inputs(3, kK, 18);
        std::vector<float> y(3 * kN), y_loaded(3 * kN);
        ASSERT_EQ(qjit_linear_forward(layer.get(), probe.data(), 3, y.data()), QJIT_OK);
        ASSERT_EQ(qjit_linear_forward(loaded.get(), probe.data(), 3, y_loaded.data()), QJIT_OK);
        EXPECT_EQ(y, y_loaded);
    }
    std::filesystem::remove_all(dir);
}

// stories260K with its tokenizer: the first 30 evaluation sequences (reference tokens) and 32
// calibration paragraphs from 400 on, tokenized by run.c's encoder (checked against the reference).
struct Stories {
    std::shared_ptr<const qjit_models::llama::Weights> checkpoint;
    std::vector<std::vector<int>> calibration;
    std::vector<uint16_t> tokens;  // the first 30 evaluation sequences
    qjit_context_options options;
};

std::optional<Stories> load_stories(std::string* missing) {
    namespace llama2 = qjit_models::llama2;
    const std::string models = QJIT_SHARED_MODELS_DIR;
    const std::string checkpoint_path = models + "/stories260K/stories260K.bin";
    const std::string tokens_path = models + "/reference/tinystories_val_first200para.tok512.u16";
    const std::string text_path = models + "/text/tinystories_val.txt";
    for (const std::string& path : {checkpoint_path, tokens_path, text_path})
        if (!std::filesystem::exists(path)) {
            *missing = path;
            return std::nullopt;
        }
    Stories s;
    s.checkpoint = llama2::load_checkpoint(checkpoint_path);
    const llama2::Tokenizer tokenizer(models + "/stories260K/tok512.bin", s.checkpoint->config.vocab_size);
    std::ifstream in(text_path, std::ios::binary);
    const std::vector<std::string> paragraphs =
        llama2::split_paragraphs({std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
    EXPECT_GT(paragraphs.size(), 432u);

    // The encoder reproduces the reference tokens of all 200 evaluation paragraphs.
    const std::vector<uint16_t> reference = qjit_models::read_array_file<uint16_t>(tokens_path);
    std::vector<uint16_t> encoded;
    for (size_t p = 0; p < 200; ++p) {
        encoded.push_back(uint16_t(llama2::kBosToken));
        for (int token : tokenizer.encode(paragraphs[p])) encoded.push_back(uint16_t(token));
    }
    EXPECT_EQ(encoded, reference);

    for (size_t p = 400; p < std::min<size_t>(432, paragraphs.size()); ++p) {
        s.calibration.push_back({llama2::kBosToken});
        for (int token : tokenizer.encode(paragraphs[p])) s.calibration.back().push_back(token);
    }
    s.tokens = reference;
    int bos_seen = 0;
    for (size_t i = 0; i < s.tokens.size(); ++i)
        if (s.tokens[i] == llama2::kBosToken && ++bos_seen > 30) {
            s.tokens.resize(i);
            break;
        }
    qjit_context_options_init(&s.options);
    s.options.num_threads = 2;
    s.options.tuning_db_path = "";
    s.options.tuning_budget_ms = 0;
    return s;
}

// The real model, quantized layer by layer on its own activations (llama::quantize_with_calibration,
// what stories_runner --method gptq runs): GPTQ beats RTN at 3 bits on the first 30 evaluation
// sequences.
TEST(CApiCalibrationRealModel, GptqBeatsRtnOnStories260K) {
    namespace llama = qjit_models::llama;
    namespace llama2 = qjit_models::llama2;
    std::string missing;
    const std::optional<Stories> stories = load_stories(&missing);
    if (!stories) GTEST_SKIP() << missing << " is missing";
    llama::QuantizingMaker rtn_backend(llama::make_quant_config(3, 32, false), &stories->options);
    llama::Model rtn(stories->checkpoint, rtn_backend);
    qjit_quant_config config = llama::make_quant_config(3, 32, false);
    config.method = QJIT_QUANT_GPTQ;
    llama::QuantizingMaker gptq_backend(config, &stories->options);
    llama::DenseMaker dense;
    llama::Model gptq(stories->checkpoint, dense);  // fp32, quantized layer by layer
    const int64_t rows = llama::quantize_with_calibration(gptq, gptq_backend, stories->calibration, true).rows;
    EXPECT_GT(rows, 1000);
    for (const llama::Linear* linear : gptq.linears()) {
        qjit_linear_info info{};
        EXPECT_TRUE(linear->qjit_info(&info)) << "every matrix, the classifier too, is quantized";
        EXPECT_EQ(info.bits, 3);
    }
    const double rtn_nll = llama::evaluate_nll(rtn, llama2::split_at_bos(stories->tokens)).mean_nll;
    const double gptq_nll = llama::evaluate_nll(gptq, llama2::split_at_bos(stories->tokens)).mean_nll;
    std::printf("stories260K INT3 g32, 30 sequences, 32 calibration paragraphs (%lld tokens): NLL RTN %.4f, GPTQ %.4f\n",
                static_cast<long long>(rows), rtn_nll, gptq_nll);
    EXPECT_LT(gptq_nll, rtn_nll - 0.1);
}

// HQQ with a calibration, chosen per layer against the RTN layers the model starts from: the score
// (the model's NLL on the first calibration sequences) never rises, and it is the NLL evaluate_nll
// measures on those sequences, before and after.
TEST(CApiCalibrationRealModel, HqqChosenPerLayerIsNeverWorseThanRtn) {
    namespace llama = qjit_models::llama;
    std::string missing;
    const std::optional<Stories> stories = load_stories(&missing);
    if (!stories) GTEST_SKIP() << missing << " is missing";
    for (int bits : {2, 3}) {
        SCOPED_TRACE(testing::Message() << bits << " bits");
        llama::QuantizingMaker rtn_backend(llama::make_quant_config(bits, 32, false), &stories->options);
        llama::Model rtn(stories->checkpoint, rtn_backend);
        llama::Model chosen(stories->checkpoint, rtn_backend);
        qjit_quant_config config = llama::make_quant_config(bits, 32, false);
        config.method = QJIT_QUANT_HQQ;
        llama::QuantizingMaker hqq_backend(config, &stories->options);
        const llama::LayerChoice choice{.score_sequences = 12};
        const llama::CalibratedQuantization q =
            llama::quantize_with_calibration(chosen, hqq_backend, stories->calibration, true, &choice);
        EXPECT_EQ(q.layers_tried, stories->checkpoint->config.n_layers + 1);
        EXPECT_GE(q.layers_kept, 0);
        EXPECT_LE(q.layers_kept, q.layers_tried);
        EXPECT_LE(q.end_nll, q.start_nll);
        const std::vector<std::vector<int>> scored(stories->calibration.begin(), stories->calibration.begin() + 12);
        EXPECT_NEAR(llama::evaluate_nll(rtn, scored).mean_nll, q.start_nll, 1e-4);
        EXPECT_NEAR(llama::evaluate_nll(chosen, scored).mean_nll, q.end_nll, 1e-4);
        std::printf("stories260K INT%d g32: HQQ kept in %d of %d layers; score NLL %.4f -> %.4f\n", bits,
                    q.layers_kept, q.layers_tried, q.start_nll, q.end_nll);
    }
}

// The 2/4/16 budget shared by each matrix's measured effect on the loss: the whole budget is spent,
// each matrix between all-2 and all-4 bits, and the model quantized with the shares stores no more
// than the budget.
TEST(CApiCalibrationRealModel, MixedBudgetByLossSpendsItWhole) {
    namespace llama = qjit_models::llama;
    std::string missing;
    const std::optional<Stories> stories = load_stories(&missing);
    if (!stories) GTEST_SKIP() << missing << " is missing";
    qjit_quant_config config = llama::make_quant_config(4, 32, false);
    config.method = QJIT_QUANT_MIXED;
    const double budget = 3.6;  // this small model's matrices store 3.23 bits per weight all in 2 bits
    config.mixed_bits_per_weight = budget;
    llama::DenseMaker dense;
    llama::Model model(stories->checkpoint, dense);
    const auto shares = llama::share_mixed_budget_by_loss(model, stories->calibration, config, budget, true, 6);
    const std::vector<const llama::LoadedMatrix*> matrices = [&] {
        std::vector<const llama::LoadedMatrix*> out;
        for (const llama::ModelMatrix& m : llama::model_matrices(*stories->checkpoint, true)) out.push_back(m.source);
        return out;
    }();
    ASSERT_EQ(shares.size(), matrices.size());
    double weights = 0.0, spent = 0.0;
    int partial = 0, wide = 0;
    for (const llama::LoadedMatrix* m : matrices) {
        const double count = double(m->k()) * double(m->n());
        const double bits = shares.at(m) * count - 0.5;  // the share is half a bit over
        double narrowest = 0.0, widest = 0.0;
        ASSERT_EQ(qjit_mixed_stored_bits(&config, m->k(), m->n(), 0, &narrowest), QJIT_OK);
        ASSERT_EQ(qjit_mixed_stored_bits(&config, m->k(), m->n(), (m->k() + 31) / 32, &widest), QJIT_OK);
        EXPECT_GE(bits, narrowest - 1e-6);
        EXPECT_LE(bits, widest + 1e-6);
        partial += bits > narrowest + 1e-6 && bits < widest - 1e-6;
        wide += bits >= widest - 1e-6;
        weights += count;
        spent += bits;
    }
    EXPECT_GT(wide + partial, 0);
    EXPECT_NEAR(spent, budget * weights, 1e-6 * weights);

    llama::QuantizingMaker maker(config, &stories->options);
    maker.set_bits_per_weight(shares);
    llama::Model quantized(stories->checkpoint, dense);
    llama::quantize_with_calibration(quantized, maker, stories->calibration, true);
    const llama::QjitStorage storage = llama::qjit_storage(quantized);
    EXPECT_EQ(storage.weights, int64_t(weights));
    EXPECT_LE(storage.bits_per_weight(), budget);
    EXPECT_GT(storage.bits_per_weight(), budget - 0.1);
    std::printf("stories260K 2/4/16 within %.1f bits per weight by loss: %d matrices in 4 bits, %d partly; %.4f stored\n",
                budget, wide, partial, storage.bits_per_weight());
}

}  // namespace
