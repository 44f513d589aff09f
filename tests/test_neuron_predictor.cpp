// The activity predictor of "LLM in a flash" on synthetic FFN layers whose projection is nearly
// low-rank: recall on held-out tokens, the rank it picks, SwiGLU's magnitude score, batch union,
// bad arguments and the memory it reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "runtime/flash/neuron_predictor.hpp"

namespace qjit {
namespace {

constexpr int64_t kDModel = 256, kDFf = 1024, kCalibration = 512, kHeldOut = 256;

std::vector<float> gaussian(size_t count, std::mt19937& rng, float sigma = 1.0f) {
    std::normal_distribution<float> normal(0.0f, sigma);
    std::vector<float> out(count);
    for (float& v : out) v = normal(rng);
    return out;
}

// a [m][k] times b [k][n].
std::vector<float> product(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k,
                           int64_t n) {
    std::vector<float> out(size_t(m * n), 0.0f);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j) {
            const float aij = a[size_t(i * k + j)];
            const float* __restrict row = b.data() + j * n;
            float* __restrict o = out.data() + i * n;
            for (int64_t c = 0; c < n; ++c) o[c] += aij * row[c];
        }
    return out;
}

// w = L R + noise * N with L [d_model][8], R [8][d_ff].
std::vector<float> nearly_low_rank(std::mt19937& rng, float noise, int64_t d_model = kDModel, int64_t d_ff = kDFf) {
    const std::vector<float> l = gaussian(size_t(d_model * 8), rng), r = gaussian(size_t(8 * d_ff), rng);
    std::vector<float> w = product(l, r, d_model, 8, d_ff);
    const std::vector<float> n = gaussian(w.size(), rng, noise);
    for (size_t i = 0; i < w.size(); ++i) w[i] += n[i];
    return w;
}

// Correlated inputs: isotropic noise plus 16 shared directions, each channel times channel_scale[k].
std::vector<float> inputs(std::mt19937& rng, int64_t rows, const std::vector<float>& directions,
                          const std::vector<float>& channel_scale) {
    std::vector<float> x = product(gaussian(size_t(rows * 16), rng), directions, rows, 16, kDModel);
    const std::vector<float> z = gaussian(x.size(), rng);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t k = 0; k < kDModel; ++k) {
            float& v = x[size_t(i * kDModel + k)];
            v = (v + z[size_t(i * kDModel + k)]) * channel_scale[size_t(k)];
        }
    return x;
}

// Per column of values [rows][cols], its `q` quantile.
std::vector<float> column_quantiles(const std::vector<float>& values, int64_t rows, int64_t cols, double q) {
    std::vector<float> out(static_cast<size_t>(cols)), column(static_cast<size_t>(rows));
    for (int64_t c = 0; c < cols; ++c) {
        for (int64_t i = 0; i < rows; ++i) column[size_t(i)] = values[size_t(i * cols + c)];
        const auto at = column.begin() + ptrdiff_t(double(rows - 1) * q);
        std::nth_element(column.begin(), at, column.end());
        out[size_t(c)] = *at;
    }
    return out;
}

// A ReLU layer's deciding projection, bias and recorded activity on calibration and held-out tokens:
// the bias is minus each neuron's 95th percentile on the calibration tokens, so ~5 % are active.
struct ReluLayer {
    std::vector<float> w, bias, x, x_held;
    std::vector<uint8_t> active, active_held;
};

ReluLayer relu_layer(uint32_t seed, float noise, const std::vector<float>& channel_scale = {}) {
    std::mt19937 rng(seed);
    ReluLayer layer;
    layer.w = nearly_low_rank(rng, noise);
    const std::vector<float> directions = gaussian(size_t(16 * kDModel), rng, 0.5f);
    const std::vector<float> scale = channel_scale.empty() ? std::vector<float>(size_t(kDModel), 1.0f) : channel_scale;
    layer.x = inputs(rng, kCalibration, directions, scale);
    layer.x_held = inputs(rng, kHeldOut, directions, scale);
    const std::vector<float> pre = product(layer.x, layer.w, kCalibration, kDModel, kDFf);
    layer.bias = column_quantiles(pre, kCalibration, kDFf, 0.95);
    for (float& b : layer.bias) b = -b;
    const auto activity = [&](const std::vector<float>& x, int64_t rows) {
        const std::vector<float> s = product(x, layer.w, rows, kDModel, kDFf);
        std::vector<uint8_t> on(s.size());
        for (size_t i = 0; i < s.size(); ++i) on[i] = s[i] + layer.bias[i % size_t(kDFf)] > 0;
        return on;
    };
    layer.active = activity(layer.x, kCalibration);
    layer.active_held = activity(layer.x_held, kHeldOut);
    return layer;
}

// The layer most tests share, made once (its products dominate the tests' time under sanitizers).
const ReluLayer& shared_layer() {
    static const ReluLayer layer = relu_layer(1, 0.1f);
    return layer;
}

NeuronPredictor fit(const ReluLayer& layer, const PredictorOptions& options) {
    return NeuronPredictor::fit(layer.w.data(), layer.bias.data(), kDModel, kDFf, layer.x.data(), layer.active.data(),
                                kCalibration, options);
}

PredictorOptions relu_options() {
    PredictorOptions options;
    options.target_recall = 0.95;
    options.ranks = {2, 4, 8, 16, 32, 64};
    return options;
}

// The shared layer's predictor with those options, fitted once.
const NeuronPredictor& shared_predictor() {
    static const NeuronPredictor predictor = fit(shared_layer(), relu_options());
    return predictor;
}

TEST(NeuronPredictor, ReluRecallOnHeldOutTokens) {
    const ReluLayer& layer = shared_layer();
    const NeuronPredictor& p = shared_predictor();
    const PredictorQuality calibration = p.calibration_quality();
    const PredictorQuality held = p.evaluate(layer.x_held.data(), layer.active_held.data(), kHeldOut);
    std::printf("rank %d: calibration recall %.3f precision %.3f fraction %.3f; held-out recall %.3f precision %.3f "
                "fraction %.3f\n",
                p.rank(), calibration.recall, calibration.precision, calibration.predicted_fraction, held.recall,
                held.precision, held.predicted_fraction);
    EXPECT_GE(p.rank(), 8);
    EXPECT_GE(calibration.recall, 0.95);
    EXPECT_LE(calibration.predicted_fraction, 0.25);
    EXPECT_GE(held.recall, 0.9);
    EXPECT_LT(held.predicted_fraction, 0.2);
    EXPECT_GT(held.precision, 0.2);
}

// Channels of very different scale (as real activations have), and noise a third the size of w's
// low-rank entries so that rank 8 is far from exact: weighting the SVD by the channels' RMS predicts
// clearly fewer neurons at equal rank and recall.
TEST(NeuronPredictor, CalibrationWeightingOnUnevenChannels) {
    std::mt19937 rng(7);
    std::vector<float> scale(static_cast<size_t>(kDModel));
    for (float& s : scale) s = std::exp(std::normal_distribution<float>(0.0f, 1.0f)(rng));
    const ReluLayer layer = relu_layer(2, 1.0f, scale);
    PredictorOptions options = relu_options();
    options.ranks = {8};
    const NeuronPredictor weighted = fit(layer, options);
    options.calibration_weighted = false;
    const NeuronPredictor plain = fit(layer, options);
    std::printf("rank 8: plain fraction %.3f precision %.3f; weighted fraction %.3f precision %.3f\n",
                plain.calibration_quality().predicted_fraction, plain.calibration_quality().precision,
                weighted.calibration_quality().predicted_fraction, weighted.calibration_quality().precision);
    EXPECT_LT(weighted.calibration_quality().predicted_fraction,
              0.85 * plain.calibration_quality().predicted_fraction);
    EXPECT_GE(weighted.calibration_quality().recall, 0.95);
}

TEST(NeuronPredictor, ExactlyLowRankGivesNearPerfectPrecision) {
    const ReluLayer layer = relu_layer(3, 0.0f);
    PredictorOptions options = relu_options();
    options.target_recall = 0.99;
    options.ranks = {8};
    const NeuronPredictor p = fit(layer, options);
    const PredictorQuality held = p.evaluate(layer.x_held.data(), layer.active_held.data(), kHeldOut);
    std::printf("exact rank 8: calibration precision %.3f; held-out recall %.3f precision %.3f\n",
                p.calibration_quality().precision, held.recall, held.precision);
    EXPECT_GE(p.calibration_quality().precision, 0.95);
    EXPECT_GE(held.recall, 0.97);
    EXPECT_GE(held.precision, 0.95);
}

// SwiGLU: a = silu(x gate) * (x up); "active" when |a| is in each neuron's top 10 %.
TEST(NeuronPredictor, SiluMagnitudeReachesTargetOnCalibration) {
    std::mt19937 rng(4);
    const std::vector<float> gate = nearly_low_rank(rng, 0.1f);
    const std::vector<float> up = gaussian(size_t(kDModel * kDFf), rng, 0.3f);
    const std::vector<float> x = inputs(rng, kCalibration, gaussian(size_t(16 * kDModel), rng, 0.5f),
                                        std::vector<float>(size_t(kDModel), 0.05f));
    const std::vector<float> g = product(x, gate, kCalibration, kDModel, kDFf);
    std::vector<float> a = product(x, up, kCalibration, kDModel, kDFf);
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::fabs(g[i] / (1.0f + std::exp(-g[i])) * a[i]);
    const std::vector<float> cut = column_quantiles(a, kCalibration, kDFf, 0.9);
    std::vector<uint8_t> active(a.size());
    for (size_t i = 0; i < a.size(); ++i) active[i] = a[i] > cut[i % size_t(kDFf)];

    PredictorOptions options;
    options.score = PredictorScore::SiluMagnitude;
    options.target_recall = 0.9;
    options.ranks = {8, 16};
    options.max_predicted_fraction = 0.5;
    const NeuronPredictor p =
        NeuronPredictor::fit(gate.data(), nullptr, kDModel, kDFf, x.data(), active.data(), kCalibration, options);
    const PredictorQuality q = p.calibration_quality();
    std::printf("silu rank %d: recall %.3f precision %.3f fraction %.3f\n", p.rank(), q.recall, q.precision,
                q.predicted_fraction);
    EXPECT_GE(q.recall, 0.9);
    EXPECT_LT(q.predicted_fraction, 0.6);
    EXPECT_GT(p.threshold(), 0.0f);
}

TEST(NeuronPredictor, BatchPredictsTheUnionOfRows) {
    const ReluLayer& layer = shared_layer();
    const NeuronPredictor& p = shared_predictor();
    std::vector<int32_t> one, batch;
    std::set<int32_t> expected;
    for (int64_t i = 0; i < 3; ++i) {
        p.predict(layer.x_held.data() + i * kDModel, 1, one);
        EXPECT_TRUE(std::is_sorted(one.begin(), one.end()));
        expected.insert(one.begin(), one.end());
    }
    p.predict(layer.x_held.data(), 3, batch);
    EXPECT_EQ(batch, std::vector<int32_t>(expected.begin(), expected.end()));
    EXPECT_GT(batch.size(), one.size());
    // The output's capacity is reused: a smaller prediction into it does not reallocate.
    const int32_t* storage = batch.data();
    p.predict(layer.x_held.data() + 2 * kDModel, 1, batch);
    EXPECT_EQ(batch, one);
    EXPECT_EQ(batch.data(), storage);
}

TEST(NeuronPredictor, MemoryBytesCountsFactorsScalesAndBias) {
    const ReluLayer& layer = shared_layer();
    PredictorOptions options = relu_options();
    options.ranks = {16};
    options.calibration_weighted = false;
    const NeuronPredictor with_bias = fit(layer, options);
    EXPECT_EQ(with_bias.rank(), 16);
    EXPECT_EQ(with_bias.memory_bytes(), kDModel * 16 + 16 * kDFf + 4 * (16 + kDFf) + 4 * kDFf);
    const NeuronPredictor without = NeuronPredictor::fit(layer.w.data(), nullptr, kDModel, kDFf, layer.x.data(),
                                                         layer.active.data(), kCalibration, options);
    EXPECT_EQ(without.memory_bytes(), kDModel * 16 + 16 * kDFf + 4 * (16 + kDFf));
}

TEST(NeuronPredictor, RejectsBadArguments) {
    const int64_t d_model = 8, d_ff = 16, n = 4;
    const std::vector<float> w(size_t(d_model * d_ff), 1.0f), x(size_t(n * d_model), 1.0f);
    const std::vector<uint8_t> active(size_t(n * d_ff), 1);
    const auto expect_invalid = [&](const std::string& name, auto&& call) {
        try {
            call();
            ADD_FAILURE() << name << ": no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT) << name;
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        }
    };
    PredictorOptions options;
    options.ranks = {2};
    const auto fit_with = [&](const float* wp, const float* xp, const uint8_t* ap, int64_t dm, int64_t df, int64_t rows,
                              const PredictorOptions& o) {
        return NeuronPredictor::fit(wp, nullptr, dm, df, xp, ap, rows, o);
    };
    expect_invalid("w", [&] { fit_with(nullptr, x.data(), active.data(), d_model, d_ff, n, options); });
    expect_invalid("x", [&] { fit_with(w.data(), nullptr, active.data(), d_model, d_ff, n, options); });
    expect_invalid("active", [&] { fit_with(w.data(), x.data(), nullptr, d_model, d_ff, n, options); });
    expect_invalid("d_model", [&] { fit_with(w.data(), x.data(), active.data(), 0, d_ff, n, options); });
    expect_invalid("d_ff", [&] { fit_with(w.data(), x.data(), active.data(), d_model, 0, n, options); });
    expect_invalid("n", [&] { fit_with(w.data(), x.data(), active.data(), d_model, d_ff, 0, options); });
    for (double recall : {0.0, -0.5, 1.5, std::nan("")}) {
        PredictorOptions bad = options;
        bad.target_recall = recall;
        expect_invalid("target_recall", [&] { fit_with(w.data(), x.data(), active.data(), d_model, d_ff, n, bad); });
    }
    PredictorOptions bad = options;
    bad.ranks.clear();
    expect_invalid("ranks", [&] { fit_with(w.data(), x.data(), active.data(), d_model, d_ff, n, bad); });
    bad.ranks = {8, 16};  // none below min(d_model, d_ff)
    expect_invalid("ranks", [&] { fit_with(w.data(), x.data(), active.data(), d_model, d_ff, n, bad); });

    const NeuronPredictor p = fit_with(w.data(), x.data(), active.data(), d_model, d_ff, n, options);
    std::vector<int32_t> out;
    expect_invalid("x", [&] { p.predict(nullptr, 1, out); });
    expect_invalid("m", [&] { p.predict(x.data(), 0, out); });
    expect_invalid("n", [&] { p.evaluate(x.data(), active.data(), 0); });
    expect_invalid("fitted", [&] { NeuronPredictor().predict(x.data(), 1, out); });
}

}  // namespace
}  // namespace qjit
