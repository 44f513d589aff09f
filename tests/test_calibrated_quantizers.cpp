// The quantizers at their calibrated best: HQQ with real offsets and an error weighted by the inputs'
// second moments or by the balanced rows (never worse than its RTN start by that error, per group), MiLo fitted to the layer's output
// error over an HQQ or GPTQ base, and the 2/4/16 format within a bits-per-weight budget.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/low_rank.hpp"
#include "format/reference.hpp"
#include "quant/quantize_gptq.hpp"
#include "quant/quantize_hqq.hpp"
#include "quant/quantize_milo.hpp"
#include "quant/quantize_mixed.hpp"
#include "quant/quantize_rtn.hpp"
#include "quantizer_fixtures.hpp"

namespace qjit {
namespace {

WeightFormat uniform_format(int bits, int64_t group, bool float_offsets, qjit_dtype scales = QJIT_DTYPE_F16) {
    return {.bits = bits, .group_size = group, .float_offsets = float_offsets, .scale_type = scale_type_of(scales)};
}

// HQQ's error over group g of column c: sum of row_weight[r] (|w| + the group's rms) (w - deq)^2.
double group_error(const std::vector<float>& w, const std::vector<float>& deq, const std::vector<float>& row_weight,
                   int64_t k, int64_t n, int64_t group, int64_t g, int64_t c) {
    const int64_t r0 = g * group, r1 = std::min(k, (g + 1) * group);
    double square_sum = 0.0;
    for (int64_t r = r0; r < r1; ++r) square_sum += double(w[size_t(r * n + c)]) * double(w[size_t(r * n + c)]);
    const double rms = std::sqrt(square_sum / double(r1 - r0));
    double sum = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
        const double x = double(w[size_t(r * n + c)]), e = x - double(deq[size_t(r * n + c)]);
        sum += double(row_weight[size_t(r)]) * (std::abs(x) + rms) * e * e;
    }
    return sum;
}

// Row weights like a calibration's diag(H): spread over two orders of magnitude, a few rows dead.
std::vector<float> row_weights(int64_t k) {
    std::vector<float> h(static_cast<size_t>(k));
    for (int64_t r = 0; r < k; ++r) h[size_t(r)] = r % 17 == 5 ? 0.0f : std::pow(10.0f, float((r * 37) % 23) / 11.0f);
    return h;
}

// ---- HQQ: float offsets and weighted errors ----

TEST(HqqCalibrated, NeverWorseThanItsRtnStartPerGroupByItsError) {
    // K not a multiple of the group, N odd; both zero kinds, calibrated row weights or the balanced
    // ones, fp16 and fp32 scales.
    const int64_t k = 150, n = 23;
    const std::vector<float> w = layer_weights(k, n, 21);
    for (bool offsets : {false, true})
        for (bool calibrated : {false, true})
            for (qjit_dtype scales : {QJIT_DTYPE_F16, QJIT_DTYPE_F32})
                for (int bits : {2, 3, 4})
                    for (int64_t group : {32, 64}) {
                        SCOPED_TRACE(testing::Message() << "offsets " << offsets << " calibrated " << calibrated
                                                        << " q" << bits << "g" << group << " scales " << int(scales));
                        HqqConfig config{uniform_format(bits, group, offsets, scales), {}, {}};
                        if (calibrated) config.row_weights = row_weights(k);
                        const QuantizedMatrix hqq = quantize_hqq(config, k, n, w.data());
                        ASSERT_NO_THROW(validate(hqq));
                        EXPECT_EQ(hqq.params.float_offsets, offsets);
                        const QuantizedMatrix start = hqq_start(config.format, k, n, w.data());
                        const std::vector<float> dh = dequantize(hqq), ds = dequantize(start);
                        const std::vector<float> rows =
                            calibrated ? config.row_weights : balanced_row_weights(k, n, w.data());
                        double total_hqq = 0.0, total_start = 0.0;
                        for (int64_t g = 0; g < (k + group - 1) / group; ++g)
                            for (int64_t c = 0; c < n; ++c) {
                                const double eh = group_error(w, dh, rows, k, n, group, g, c);
                                const double es = group_error(w, ds, rows, k, n, group, g, c);
                                EXPECT_LE(eh, es * (1.0 + 1e-5) + 1e-12) << "group " << g << " column " << c;
                                total_hqq += eh;
                                total_start += es;
                            }
                        EXPECT_LT(total_hqq, 0.99 * total_start);  // and it improves on it overall
                    }
}

TEST(HqqCalibrated, StartsFromRtnsIntegerGridWithZeroACode) {
    // Float offsets start at -zero * scale: RTN's integer grid, not its min..max one (K odd, 3 groups).
    const int64_t k = 77, n = 9;
    const std::vector<float> w = layer_weights(k, n, 5);
    for (qjit_dtype scales : {QJIT_DTYPE_F16, QJIT_DTYPE_F32}) {
        const QuantizedMatrix integer = quantize_rtn(uniform_format(3, 32, false, scales), k, n, w.data());
        const QuantizedMatrix start = hqq_start(uniform_format(3, 32, true, scales), k, n, w.data());
        ASSERT_NO_THROW(validate(start));
        EXPECT_EQ(start.codes, integer.codes);
        EXPECT_EQ(start.params.scales, integer.params.scales);
        for (size_t i = 0; i < start.params.offsets.size(); ++i) {
            const float exact = -float(integer.params.zeros[i]) * integer.params.scales[i];
            EXPECT_EQ(start.params.offsets[i], scales == QJIT_DTYPE_F16 ? round_to_half(exact) : exact);
        }
        if (scales != QJIT_DTYPE_F32) continue;
        const std::vector<float> a = dequantize(start), b = dequantize(integer);
        for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f * (1.0f + std::abs(b[i]))) << i;
    }
}

TEST(HqqBalancedRows, InverseMeanSquareCappedAndZeroRowsBounded) {
    // 200 rows of mean square 1 and one of 4, a row of 0.01s (1e4) and a row of zeros: 1 / mean square,
    // the last two capped at kMaxBalancedRowWeight times the mean of the finite ones.
    const int64_t k = 203, n = 2;
    std::vector<float> w(size_t(k * n), 1.0f);
    w[0] = -1.0f;
    w[2] = w[3] = 2.0f;
    w[201 * 2] = w[201 * 2 + 1] = 0.01f;
    w[202 * 2] = w[202 * 2 + 1] = 0.0f;
    const std::vector<float> h = balanced_row_weights(k, n, w.data());
    ASSERT_EQ(h.size(), size_t(k));
    EXPECT_FLOAT_EQ(h[0], 1.0f);
    EXPECT_FLOAT_EQ(h[1], 0.25f);
    EXPECT_FLOAT_EQ(h[200], 1.0f);
    const double finite_mean = (200.0 + 0.25 + 1e4) / 202.0;
    EXPECT_FLOAT_EQ(h[201], float(kMaxBalancedRowWeight * finite_mean));
    EXPECT_FLOAT_EQ(h[202], float(kMaxBalancedRowWeight * finite_mean));
}

TEST(HqqBalancedRows, ProtectTheSmallWeightRowsTheyWeigh) {
    // A row whose weights are 100x smaller than the rest (a channel fed by large inputs, in a trained
    // layer) keeps a smaller relative error with the balanced rows than with none.
    const int64_t k = 64, n = 48;
    std::vector<float> w = layer_weights(k, n, 13);
    for (int64_t c = 0; c < n; ++c) w[size_t(7 * n + c)] *= 0.1f;
    HqqConfig balanced{uniform_format(3, 64, true), {}, {}};
    HqqConfig plain = balanced;
    plain.options.balance_rows = false;
    const std::vector<float> db = dequantize(quantize_hqq(balanced, k, n, w.data()));
    const std::vector<float> dp = dequantize(quantize_hqq(plain, k, n, w.data()));
    double eb = 0.0, ep = 0.0;
    for (int64_t c = 0; c < n; ++c) {
        const size_t i = size_t(7 * n + c);
        eb += (double(w[i]) - db[i]) * (double(w[i]) - db[i]);
        ep += (double(w[i]) - dp[i]) * (double(w[i]) - dp[i]);
    }
    EXPECT_LT(eb, ep);
}

TEST(HqqCalibrated, OffsetsAreStoredAtTheScalesType) {
    const int64_t k = 96, n = 11;
    const std::vector<float> w = layer_weights(k, n, 4);
    const QuantizedMatrix q = quantize_hqq({uniform_format(3, 32, true), {}, row_weights(k)}, k, n, w.data());
    EXPECT_TRUE(q.params.zeros.empty());
    ASSERT_EQ(q.params.offsets.size(), size_t(3 * n));
    for (float o : q.params.offsets) EXPECT_EQ(round_to_half(o), o);
    for (float s : q.params.scales) EXPECT_EQ(round_to_half(s), s);
}

TEST(HqqCalibrated, WeightsMoveTheErrorToLightRows) {
    // Rows that weigh 100x are fitted closer than with plain L2, at the light rows' expense.
    const int64_t k = 128, n = 40;
    const std::vector<float> w = layer_weights(k, n, 9);
    std::vector<float> weight(static_cast<size_t>(k), 1.0f);
    for (int64_t r = 0; r < k; r += 4) weight[size_t(r)] = 100.0f;
    const WeightFormat format = uniform_format(3, 64, true);
    const std::vector<float> plain = dequantize(quantize_hqq({format, {}, {}}, k, n, w.data()));
    const std::vector<float> heavy = dequantize(quantize_hqq({format, {}, weight}, k, n, w.data()));
    double plain_heavy_rows = 0.0, weighted_heavy_rows = 0.0;
    for (int64_t r = 0; r < k; r += 4)
        for (int64_t c = 0; c < n; ++c) {
            const size_t i = size_t(r * n + c);
            plain_heavy_rows += (double(w[i]) - plain[i]) * (double(w[i]) - plain[i]);
            weighted_heavy_rows += (double(w[i]) - heavy[i]) * (double(w[i]) - heavy[i]);
        }
    EXPECT_LT(weighted_heavy_rows, 0.9 * plain_heavy_rows);
}

TEST(HqqCalibrated, AllRowsWeighingZeroKeepRtn) {
    const int64_t k = 64, n = 7;
    const std::vector<float> w = layer_weights(k, n, 2);
    const WeightFormat format = uniform_format(4, 32, false);
    const QuantizedMatrix hqq = quantize_hqq({format, {}, std::vector<float>(size_t(k), 0.0f)}, k, n, w.data());
    const QuantizedMatrix rtn = quantize_rtn(format, k, n, w.data());
    EXPECT_EQ(hqq.codes, rtn.codes);
    EXPECT_EQ(hqq.params.scales, rtn.params.scales);
    EXPECT_EQ(hqq.params.zeros, rtn.params.zeros);
}

TEST(HqqCalibrated, RefusesBadRowWeights) {
    const std::vector<float> w = layer_weights(8, 8, 1);
    expect_invalid([&] { quantize_hqq({uniform_format(3, 4, false), {}, std::vector<float>(7, 1.0f)}, 8, 8, w.data()); },
                   "row_weights");
    std::vector<float> bad(8, 1.0f);
    bad[3] = -1.0f;
    expect_invalid([&] { quantize_hqq({uniform_format(3, 4, false), {}, bad}, 8, 8, w.data()); }, "row_weights[3]");
    bad[3] = NAN;
    expect_invalid([&] { quantize_hqq({uniform_format(3, 4, false), {}, bad}, 8, 8, w.data()); }, "row_weights[3]");
}

// ---- MiLo on the output error ----

MiloConfig milo_config(BaseQuantizer base, int rank, int low_rank_bits = 16) {
    MiloConfig c;
    c.format = uniform_format(3, 32, false);
    c.format.low_rank = {rank, low_rank_bits};
    c.base = base;
    c.max_iterations = 6;
    return c;
}

// W deq(Wq) + deq(U) deq(V) as one dense matrix.
std::vector<float> milo_weights(const MiloResult& r) {
    std::vector<float> w = dequantize(r.weights);
    const std::vector<float> u = dense_u(r.compensator), v = dense_v(r.compensator);
    const int64_t k = r.weights.params.k, n = r.weights.params.n, rank = r.compensator.rank;
    for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < rank; ++j)
            for (int64_t c = 0; c < n; ++c) w[size_t(i * n + c)] += u[size_t(i * rank + j)] * v[size_t(j * n + c)];
    return w;
}

TEST(MiloCalibrated, FitsTheOutputErrorBetterThanTheWeightsError) {
    // K = 100 (not a multiple of the group), N = 45.
    const int64_t k = 100, n = 45, rank = 6;
    const std::vector<float> w = layer_weights(k, n, 13);
    const Hessian h = hessian_of(correlated_inputs(600, k, 14), k);
    for (int low_rank_bits : {16, 8, 3}) {
        SCOPED_TRACE(testing::Message() << "factors at " << low_rank_bits << " bits");
        MiloConfig config = milo_config(BaseQuantizer::Hqq, rank, low_rank_bits);
        config.max_iterations = 20;
        const MiloResult plain = quantize_milo(config, k, n, w.data());
        const MiloResult fitted = quantize_milo(config, k, n, w.data(), &h);
        ASSERT_NO_THROW(validate(fitted.weights));
        ASSERT_NO_THROW(validate(fitted.compensator, k, n));
        const double plain_error = output_error(h, w, milo_weights(plain));
        const double fitted_error = output_error(h, w, milo_weights(fitted));
        // Measured 0.70 (fp16 factors), 0.71 (INT8), 0.91 (INT3: the rounding of U takes much of the gain).
        EXPECT_LT(fitted_error, (low_rank_bits == 3 ? 0.95 : 0.8) * plain_error) << plain_error;
        // The reported relative error is the output error's: ||L^T E|| / ||L^T W||, L^T L = H + damp.
        EXPECT_GT(fitted.relative_error, 0.0);
        EXPECT_LT(fitted.relative_error, 1.0);
    }
}

TEST(MiloCalibrated, AGptqBaseBeatsGptqAlone) {
    const int64_t k = 96, n = 50, rank = 8;
    const std::vector<float> w = layer_weights(k, n, 31);
    const Hessian h = hessian_of(correlated_inputs(500, k, 32), k);
    GptqConfig gptq;
    gptq.format = uniform_format(3, 32, false);
    const double gptq_error = output_error(h, w, quantize_gptq(gptq, h, k, n, w.data()));
    const MiloResult milo = quantize_milo(milo_config(BaseQuantizer::Gptq, rank, 8), k, n, w.data(), &h);
    ASSERT_NO_THROW(validate(milo.weights));
    EXPECT_LT(output_error(h, w, milo_weights(milo)), 0.8 * gptq_error);
    // And better than the compensator over HQQ, fitted to the same error.
    const MiloResult over_hqq = quantize_milo(milo_config(BaseQuantizer::Hqq, rank, 8), k, n, w.data(), &h);
    EXPECT_LT(output_error(h, w, milo_weights(milo)), output_error(h, w, milo_weights(over_hqq)));
}

TEST(MiloCalibrated, FloatOffsetsUnderTheCompensator) {
    const int64_t k = 64, n = 30;
    const std::vector<float> w = layer_weights(k, n, 17);
    const Hessian h = hessian_of(correlated_inputs(300, k, 18), k);
    MiloConfig config = milo_config(BaseQuantizer::Hqq, 4, 8);
    config.format.float_offsets = true;
    const MiloResult r = quantize_milo(config, k, n, w.data(), &h);
    EXPECT_TRUE(r.weights.params.float_offsets);
    ASSERT_NO_THROW(validate(r.weights));
    const QuantizedMatrix rtn = quantize_rtn(uniform_format(3, 32, true), k, n, w.data());
    EXPECT_LT(output_error(h, w, milo_weights(r)), 0.8 * output_error(h, w, rtn));
}

TEST(MiloCalibrated, RefusesWhatItCannotFit) {
    const int64_t k = 64, n = 8;
    const std::vector<float> w = layer_weights(k, n, 1);
    expect_invalid([&] { quantize_milo(milo_config(BaseQuantizer::Gptq, 2), k, n, w.data()); }, "GPTQ base");
    const Hessian h = hessian_of(correlated_inputs(100, k, 2), k);
    MiloConfig offsets = milo_config(BaseQuantizer::Gptq, 2);
    offsets.format.float_offsets = true;
    expect_invalid([&] { quantize_milo(offsets, k, n, w.data(), &h); }, "float offsets");
    const Hessian other = hessian_of(correlated_inputs(100, 32, 3), 32);
    expect_invalid([&] { quantize_milo(milo_config(BaseQuantizer::Hqq, 2), k, n, w.data(), &other); }, "Hessian");
    MiloConfig damp = milo_config(BaseQuantizer::Hqq, 2);
    damp.damp = 2.0;
    expect_invalid([&] { quantize_milo(damp, k, n, w.data(), &h); }, "damp");
}

// ---- 2/4/16 within a bits-per-weight budget ----

MixedConfig budget_config(double bits_per_weight, int64_t group, double outliers) {
    MixedConfig c;
    c.format.group_size = group;
    c.bits_per_weight = bits_per_weight;
    c.outlier_fraction = outliers;
    return c;
}

double bits_per_weight(const QuantizedMatrix& q) {
    return double(stored_bytes(q.params)) * 8.0 / double(q.params.k * q.params.n);
}

TEST(MixedBudget, MeetsTheBudgetExactly) {
    // K = 300 (a short last group of 44 rows), K = 256; with and without outliers and act-order (whose
    // row order costs 32 / N bits per weight); budgets from just above every group in 2 bits.
    struct Shape {
        int64_t k, n;
    };
    for (Shape shape : {Shape{300, 40}, Shape{256, 33}})
        for (double outliers : {0.0, 0.002})
            for (bool act_order : {false, true}) {
                const std::vector<float> w = layer_weights(shape.k, shape.n, 5);
                const Hessian h = hessian_of(correlated_inputs(400, shape.k, 6), shape.k);
                MixedConfig narrow = budget_config(0.0, 64, outliers);
                narrow.alpha = 0.0;
                narrow.format.act_order = act_order;
                const double floor_bits = bits_per_weight(quantize_mixed(narrow, &h, shape.k, shape.n, w.data()));
                for (double above : {0.05, 0.4, 0.9, 1.4}) {
                    SCOPED_TRACE(testing::Message() << shape.k << "x" << shape.n << " outliers " << outliers
                                                    << " act-order " << act_order << " budget " << floor_bits + above);
                    MixedConfig config = narrow;
                    config.bits_per_weight = floor_bits + above;
                    const QuantizedMatrix q = quantize_mixed(config, &h, shape.k, shape.n, w.data());
                    ASSERT_NO_THROW(validate(q));
                    EXPECT_LE(bits_per_weight(q), config.bits_per_weight);
                    // No 2-bit group could have been widened within the budget: it is used, not merely kept.
                    QuantParams wider = q.params;
                    if (wider.uniform_bits()) wider.group_bits.assign(size_t(wider.num_groups()), uint8_t(wider.bits));
                    wider.bits = 4;
                    for (int64_t g = 0; g < wider.num_groups(); ++g) {
                        if (wider.group_bits[size_t(g)] == 4) continue;
                        wider.group_bits[size_t(g)] = 4;
                        EXPECT_GT(double(stored_bytes(wider)) * 8.0 / double(shape.k * shape.n),
                                  config.bits_per_weight)
                            << "group " << g << " would have fit in 4 bits";
                        wider.group_bits[size_t(g)] = 2;
                    }
                }
            }
}

TEST(MixedBudget, AWiderBudgetStoresMoreFourBitGroupsAndErrsLess) {
    const int64_t k = 512, n = 48;
    const std::vector<float> w = layer_weights(k, n, 8);
    const Hessian h = hessian_of(correlated_inputs(800, k, 9), k);
    double last_error = INFINITY;
    int64_t last_wide = -1;
    for (double budget : {2.4, 2.8, 3.2, 3.6, 4.0}) {
        const QuantizedMatrix q = quantize_mixed(budget_config(budget, 32, 0.0), &h, k, n, w.data());
        int64_t wide = 0;
        for (int64_t g = 0; g < q.params.num_groups(); ++g) wide += q.params.group_width(g) == 4;
        const double error = output_error(h, w, q);
        EXPECT_GT(wide, last_wide) << "budget " << budget;
        EXPECT_LT(error, last_error) << "budget " << budget;
        last_wide = wide;
        last_error = error;
    }
}

TEST(MixedBudget, RefusesABudgetBelowTwoBits) {
    const int64_t k = 128, n = 16;
    const std::vector<float> w = layer_weights(k, n, 3);
    expect_invalid([&] { quantize_mixed(budget_config(2.0, 32, 0.0), nullptr, k, n, w.data()); },
                   "below this 128 x 16 layer's smallest");
    expect_invalid([&] { quantize_mixed(budget_config(-1.0, 32, 0.0), nullptr, k, n, w.data()); }, "bits_per_weight");
    expect_invalid([&] { quantize_mixed(budget_config(NAN, 32, 0.0), nullptr, k, n, w.data()); }, "bits_per_weight");
}

}  // namespace
}  // namespace qjit
