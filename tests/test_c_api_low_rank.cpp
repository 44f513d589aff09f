// The quantization methods and low-rank compensators through the C API: qjit_quant_config's method,
// rank and low_rank_bits, qjit_linear_create_with_low_rank, qjit_assign_ranks, the storage the info
// reports, bad arguments, and MiLo against HQQ and RTN end to end on the stories260K model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "format/low_rank.hpp"
#include "models/binary_files.hpp"
#include "models/llama2_checkpoint.hpp"
#include "models/llama2_tokenizer.hpp"
#include "models/llama_eval.hpp"
#include "models/llama_model.hpp"
#include "test_support.hpp"
#include "tools/random_gptq.hpp"
#include "quant/quantize_low_rank.hpp"

namespace {

using qjit::test::ContextPtr;
using qjit::test::LinearPtr;

// An odd shape: K not a multiple of the group, N not a multiple of any kernel's tile.
constexpr int64_t kK = 200, kN = 75;
constexpr int kGroup = 64;

// Student-t weights (3 degrees of freedom): heavy tails, like trained weights' outliers, which a
// group's min-max range (RTN) fits worst.
std::vector<float> heavy_tailed_weights(int64_t k, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::student_t_distribution<double> student(3.0);
    std::vector<float> w(size_t(k * n));
    for (float& v : w) v = float(0.02 * student(rng));
    return w;
}

qjit_quant_config method_config(qjit_quant_method method, int rank = 0, int low_rank_bits = 8) {
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.bits = 3;
    config.group_size = kGroup;
    config.method = method;
    config.rank = rank;
    config.low_rank_bits = low_rank_bits;
    return config;
}

LinearPtr create_from_f32(qjit_context* context, const qjit_quant_config& config, const float* weights,
                          qjit_weight_layout layout) {
    qjit_linear* raw = nullptr;
    EXPECT_EQ(qjit_linear_create_from_f32(context, &config, kK, kN, weights, layout, &raw), QJIT_OK)
        << qjit_last_error();
    return LinearPtr(raw);
}

std::vector<float> dequantized(const qjit_linear* layer, int64_t k, int64_t n) {
    std::vector<float> w(size_t(k * n), std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(qjit_linear_dequantize(layer, w.data()), QJIT_OK) << qjit_last_error();
    return w;
}

qjit_linear_info info_of(const qjit_linear* layer) {
    qjit_linear_info info{};
    EXPECT_EQ(qjit_linear_get_info(layer, &info), QJIT_OK) << qjit_last_error();
    return info;
}

std::vector<float> forward(qjit_linear* layer, const std::vector<float>& x, int64_t m, int64_t n) {
    std::vector<float> y(size_t(m * n), std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(qjit_linear_forward(layer, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
    return y;
}

double frobenius_distance(const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0.0;
    for (size_t i = 0; i < a.size(); ++i) sum += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    return std::sqrt(sum);
}

// a (m x l) * b (l x n), both row-major, in double.
template <typename A, typename B>
std::vector<double> product(const std::vector<A>& a, const std::vector<B>& b, int64_t m, int64_t l, int64_t n) {
    std::vector<double> out(size_t(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < l; ++j)
            for (int64_t c = 0; c < n; ++c)
                out[size_t(i * n + c)] += double(a[size_t(i * l + j)]) * double(b[size_t(j * n + c)]);
    return out;
}

std::vector<float> absolute(std::vector<float> values) {
    for (float& v : values) v = std::fabs(v);
    return values;
}

// What format/quantized_matrix.cpp's stored_bytes counts for a layer of K x N asymmetric codes at
// `bits` in groups of `group` rows with fp16 scales: packed codes, one fp16 scale and one `bits`-wide
// zero point per group and column.
// Codes, an fp16 scale per group and an integer zero point (or an fp16 offset) per group.
int64_t expected_quantized_bytes(int64_t k, int64_t n, int bits, int64_t group, bool float_offsets = false) {
    const int64_t metadata = (k + group - 1) / group * n;
    return (k * n * bits + 7) / 8 + metadata * 2 + (float_offsets ? metadata * 2 : (metadata * bits + 7) / 8);
}

// What format/low_rank.cpp's low_rank_stored_bytes counts for U (K x rank) and V (rank x N, stored N x rank):
// packed codes plus one fp32 scale per rank component and factor, or fp16 values.
int64_t expected_low_rank_bytes(int64_t k, int64_t n, int rank, int bits) {
    if (bits == 16) return (k + n) * rank * 2;
    return (k * rank * bits + 7) / 8 + rank * 4 + (n * rank * bits + 7) / 8 + rank * 4;
}

TEST(CApiLowRank, QuantConfigInitIsRtnWithoutCompensator) {
    qjit_quant_config config;
    config.method = QJIT_QUANT_MILO;
    config.rank = 7;
    config.low_rank_bits = 3;
    qjit_quant_config_init(&config);
    EXPECT_EQ(config.method, QJIT_QUANT_RTN);
    EXPECT_EQ(config.rank, 0);
    EXPECT_EQ(config.low_rank_bits, 8);
}

struct MethodCase {
    const char* name;
    qjit_quant_method method;
    int rank;
    int low_rank_bits;
};

class CApiLowRankMethod : public ::testing::TestWithParam<MethodCase> {};

// Each method and factor width: both layouts give the same layer, the info accounts for its
// storage, and a forward on exact (fp32) activations is x times the dequantized matrix.
TEST_P(CApiLowRankMethod, LayoutsInfoAndForward) {
    const MethodCase& c = GetParam();
    const ContextPtr context = qjit::test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32);
    const std::vector<float> w = heavy_tailed_weights(kK, kN, 11);
    const std::vector<float> w_n_by_k = qjit::transposed(w.data(), kK, kN);
    const qjit_quant_config config = method_config(c.method, c.rank, c.low_rank_bits);
    const LinearPtr layer = create_from_f32(context.get(), config, w.data(), QJIT_LAYOUT_K_BY_N);
    const LinearPtr layer_n_by_k = create_from_f32(context.get(), config, w_n_by_k.data(), QJIT_LAYOUT_N_BY_K);
    ASSERT_TRUE(layer && layer_n_by_k);

    const std::vector<float> dense = dequantized(layer.get(), kK, kN);
    EXPECT_EQ(dense, dequantized(layer_n_by_k.get(), kK, kN));

    const qjit_linear_info info = info_of(layer.get());
    const bool milo = c.method == QJIT_QUANT_MILO;
    EXPECT_EQ(info.k, kK);
    EXPECT_EQ(info.n, kN);
    EXPECT_EQ(info.low_rank, milo ? c.rank : 0);
    EXPECT_EQ(info.low_rank_bits, milo ? c.low_rank_bits : 0);
    const int64_t low_rank_bytes = milo ? expected_low_rank_bytes(kK, kN, c.rank, c.low_rank_bits) : 0;
    EXPECT_EQ(info.low_rank_bytes, low_rank_bytes);
    // HQQ stores float offsets by default; RTN and MiLo (over HQQ) integer zero points.
    EXPECT_EQ(info.float_offsets, c.method == QJIT_QUANT_HQQ ? 1 : 0);
    EXPECT_EQ(info.stored_bytes, expected_quantized_bytes(kK, kN, 3, kGroup, info.float_offsets) + low_rank_bytes);
    const qjit_linear_info info_n_by_k = info_of(layer_n_by_k.get());
    EXPECT_EQ(info_n_by_k.stored_bytes, info.stored_bytes);
    EXPECT_EQ(info_n_by_k.low_rank_bytes, info.low_rank_bytes);

    // The forward against x W in double. The kernel sums, per output, K products x_k s q and x_k s z
    // (each at most |x_k| times the group's span s (2^bits - 1), within 2 max |W| of the column for
    // these quantizers) and, with a compensator, (x U) V, whose terms are of the residual's size,
    // below max |W|. Every term goes through fewer than K + 2 rank + 16 roundings of at most
    // FLT_EPSILON / 2 each (products, the group and cross-group sums, the two small products): that
    // times 5 max |W| sum_k |x_k|, doubled, bounds the error.
    const int64_t m = 3;
    const std::vector<float> x = qjit::test::random_floats(size_t(m * kK), 12);
    const std::vector<float> y = forward(layer.get(), x, m, kN);
    const std::vector<double> expected = product(x, dense, m, kK, kN);
    double worst_ratio = 0.0;
    for (int64_t c_out = 0; c_out < kN; ++c_out) {
        double column_max = 0.0;
        for (int64_t r = 0; r < kK; ++r)
            column_max = std::max(column_max, std::fabs(double(dense[size_t(r * kN + c_out)])));
        for (int64_t i = 0; i < m; ++i) {
            double x_sum = 0.0;
            for (int64_t r = 0; r < kK; ++r) x_sum += std::fabs(double(x[size_t(i * kK + r)]));
            const double bound = 2.0 * double(kK + 2 * c.rank + 16) * FLT_EPSILON / 2 * 5.0 * column_max * x_sum;
            const size_t at = size_t(i * kN + c_out);
            const double error = std::fabs(double(y[at]) - expected[at]);
            EXPECT_LE(error, bound) << "row " << i << " column " << c_out;
            worst_ratio = std::max(worst_ratio, error / bound);
        }
    }
    std::printf("%s: stored %lld bytes (compensator %lld), forward error at most %.3g of the bound\n", c.name,
                static_cast<long long>(info.stored_bytes), static_cast<long long>(info.low_rank_bytes), worst_ratio);
}

INSTANTIATE_TEST_SUITE_P(Methods, CApiLowRankMethod,
                         ::testing::Values(MethodCase{"Rtn", QJIT_QUANT_RTN, 0, 8},
                                           MethodCase{"Hqq", QJIT_QUANT_HQQ, 0, 8},
                                           MethodCase{"MiloInt8", QJIT_QUANT_MILO, 4, 8},
                                           MethodCase{"MiloInt3", QJIT_QUANT_MILO, 4, 3},
                                           MethodCase{"MiloFp16", QJIT_QUANT_MILO, 4, 16}),
                         [](const auto& info) { return std::string(info.param.name); });

// On heavy-tailed weights HQQ's refit scales beat RTN's min-max ranges, and MiLo's compensator
// (at every factor width) beats HQQ alone: the dequantized matrices' Frobenius distances to W.
TEST(CApiLowRank, MethodsImproveInOrderOnHeavyTailedWeights) {
    const ContextPtr context = qjit::test::make_test_context();
    const std::vector<float> w = heavy_tailed_weights(kK, kN, 21);
    auto error_of = [&](const qjit_quant_config& config) {
        const LinearPtr layer = create_from_f32(context.get(), config, w.data(), QJIT_LAYOUT_K_BY_N);
        return layer ? frobenius_distance(dequantized(layer.get(), kK, kN), w) : HUGE_VAL;
    };
    const double rtn = error_of(method_config(QJIT_QUANT_RTN));
    const double hqq = error_of(method_config(QJIT_QUANT_HQQ));
    std::printf("||W - Wq||_F: RTN %.5f, HQQ %.5f", rtn, hqq);
    EXPECT_LT(hqq, rtn);
    for (const int bits : {8, 3, 16}) {
        const double milo = error_of(method_config(QJIT_QUANT_MILO, 4, bits));
        std::printf(", MiLo r4 %d-bit %.5f", bits, milo);
        EXPECT_LT(milo, hqq) << bits << "-bit factors";
    }
    std::printf("\n");
}

// A GPTQ layer plus dense factors: the layer holds U and V as quantize_low_rank stores them (each
// within its storage's step of what was given), dequantizes to Wq + U V and computes
// x Wq + (x U) V, with Wq the same tensors' plain layer.
class CApiLowRankImport : public ::testing::TestWithParam<int> {};

TEST_P(CApiLowRankImport, ForwardIsQuantizedPlusCompensator) {
    const int bits = GetParam();
    const int rank = 5, weight_bits = 4;
    const ContextPtr context = qjit::test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32);
    qjit_tools::GptqTensors tensors;
    qjit_tools::random_gptq(kK, kN, weight_bits, kGroup, 31, &tensors);
    std::vector<float> u = qjit::test::random_floats(size_t(kK * rank), 32, -0.3f, 0.3f);
    std::vector<float> v = qjit::test::random_floats(size_t(rank * kN), 33, -0.3f, 0.3f);
    for (int64_t j = 0; j < rank; ++j)  // components of different sizes, as an SVD's
        for (int64_t c = 0; c < kN; ++c) v[size_t(j * kN + c)] /= float(1 + j);

    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_create_from_gptq(context.get(), kK, kN, &tensors.view, &raw), QJIT_OK) << qjit_last_error();
    const LinearPtr plain(raw);
    const qjit_low_rank low_rank{rank, bits, u.data(), v.data()};
    ASSERT_EQ(qjit_linear_create_with_low_rank(context.get(), kK, kN, &tensors.view, &low_rank, &raw), QJIT_OK)
        << qjit_last_error();
    const LinearPtr with(raw);

    // The factors as stored, checked against their storage's step: symmetric codes have the step
    // 2 max|component| / (2^bits - 1), so rounding is off by at most half of it (plus the fp32
    // rounding of the scale and of the dequantized value); fp16 by 2^-11 relative, or half of the
    // subnormal spacing 2^-24 for the smallest values.
    const qjit::LowRankFactors stored = qjit::quantize_low_rank(bits, kK, kN, rank, u.data(), v.data());
    const std::vector<float> stored_u = qjit::dense_u(stored), stored_v = qjit::dense_v(stored);
    auto allowed_error = [&](float value, double component_max) {
        if (bits == 16) return std::max(std::fabs(double(value)) * 0x1p-11, 0x1p-25);
        return component_max / ((1 << bits) - 1) + 2 * FLT_EPSILON * component_max;
    };
    for (int64_t j = 0; j < rank; ++j) {
        double u_max = 0.0, v_max = 0.0;
        for (int64_t r = 0; r < kK; ++r) u_max = std::max(u_max, std::fabs(double(u[size_t(r * rank + j)])));
        for (int64_t c = 0; c < kN; ++c) v_max = std::max(v_max, std::fabs(double(v[size_t(j * kN + c)])));
        for (int64_t r = 0; r < kK; ++r) {
            const size_t at = size_t(r * rank + j);
            EXPECT_LE(std::fabs(double(stored_u[at]) - u[at]), allowed_error(u[at], u_max))
                << "U[" << r << "][" << j << "]";
        }
        for (int64_t c = 0; c < kN; ++c) {
            const size_t at = size_t(j * kN + c);
            EXPECT_LE(std::fabs(double(stored_v[at]) - v[at]), allowed_error(v[at], v_max))
                << "V[" << j << "][" << c << "]";
        }
    }

    const qjit_linear_info plain_info = info_of(plain.get()), info = info_of(with.get());
    EXPECT_EQ(plain_info.low_rank, 0);
    EXPECT_EQ(plain_info.low_rank_bits, 0);
    EXPECT_EQ(plain_info.low_rank_bytes, 0);
    EXPECT_EQ(info.low_rank, rank);
    EXPECT_EQ(info.low_rank_bits, bits);
    EXPECT_EQ(info.low_rank_bytes, expected_low_rank_bytes(kK, kN, rank, bits));
    EXPECT_EQ(info.stored_bytes, plain_info.stored_bytes + info.low_rank_bytes);

    // Dequantized: Wq + U V, summed in fp32 over rank terms of at most max|Wq| + sum_j |U||V| each.
    const std::vector<float> wq = dequantized(plain.get(), kK, kN), w = dequantized(with.get(), kK, kN);
    const std::vector<double> uv = product(stored_u, stored_v, kK, rank, kN);
    const std::vector<double> uv_magnitude = product(absolute(stored_u), absolute(stored_v), kK, rank, kN);
    for (size_t i = 0; i < w.size(); ++i) {
        const double bound = (rank + 1) * FLT_EPSILON * (std::fabs(wq[i]) + uv_magnitude[i]);
        ASSERT_LE(std::fabs(double(w[i]) - (double(wq[i]) + uv[i])), bound) << "weight " << i;
    }

    // Forward: x Wq + (x U) V in double. The Wq part's terms are at most |x_k| s (q + z) with the
    // random scales below 0.02 and codes and zero points at most 2^bits - 1; the compensator's terms
    // |x_k| |U_kj| |V_jn|. Each goes through fewer than K + groups + rank + 8 roundings of at most
    // FLT_EPSILON / 2; the bound doubles that.
    const int64_t m = 4;
    const std::vector<float> x = qjit::test::random_floats(size_t(m * kK), 34);
    const std::vector<float> y_plain = forward(plain.get(), x, m, kN), y = forward(with.get(), x, m, kN);
    const std::vector<double> x_wq = product(x, wq, m, kK, kN);
    const std::vector<double> xuv = product(product(x, stored_u, m, kK, rank), stored_v, m, rank, kN);
    const std::vector<float> abs_x = absolute(x);
    const std::vector<double> compensator_magnitude = product(abs_x, uv_magnitude, m, kK, kN);
    const int64_t groups = (kK + kGroup - 1) / kGroup;
    const double span = 2 * 0.02 * ((1 << weight_bits) - 1);
    double worst_bound = 0.0, compensator_effect = 0.0;
    for (int64_t i = 0; i < m; ++i) {
        double x_sum = 0.0;
        for (int64_t r = 0; r < kK; ++r) x_sum += abs_x[size_t(i * kK + r)];
        for (int64_t c = 0; c < kN; ++c) {
            const size_t at = size_t(i * kN + c);
            const double terms = x_sum * span + compensator_magnitude[at];
            const double bound = 2.0 * double(kK + groups + rank + 8) * FLT_EPSILON / 2 * terms * 1.01;
            EXPECT_LE(std::fabs(double(y[at]) - (x_wq[at] + xuv[at])), bound) << "row " << i << " column " << c;
            worst_bound = std::max(worst_bound, bound);
            compensator_effect = std::max(compensator_effect, std::fabs(double(y[at]) - y_plain[at]));
        }
    }
    // The compensator changes the outputs by far more than rounding could.
    EXPECT_GT(compensator_effect, 100 * worst_bound);
}

INSTANTIATE_TEST_SUITE_P(FactorBits, CApiLowRankImport, ::testing::Values(8, 3, 16),
                         [](const auto& info) { return "Bits" + std::to_string(info.param); });

// Every bad argument is refused with INVALID_ARGUMENT, a message naming it, and no layer.
TEST(CApiLowRank, BadQuantConfigIsRefused) {
    const ContextPtr context = qjit::test::make_test_context();
    const std::vector<float> w = heavy_tailed_weights(kK, kN, 41);
    auto create = [&](const qjit_quant_config& config) {
        qjit_linear* raw = reinterpret_cast<qjit_linear*>(0x1);  // must be reset to NULL on failure
        const qjit_status status =
            qjit_linear_create_from_f32(context.get(), &config, kK, kN, w.data(), QJIT_LAYOUT_K_BY_N, &raw);
        if (status == QJIT_OK) qjit_linear_destroy(raw);
        else EXPECT_EQ(raw, nullptr);
        return status;
    };
    EXPECT_STATUS(create(method_config(static_cast<qjit_quant_method>(3))), QJIT_ERROR_INVALID_ARGUMENT, "method");
    EXPECT_STATUS(create(method_config(static_cast<qjit_quant_method>(-1))), QJIT_ERROR_INVALID_ARGUMENT, "method");
    EXPECT_STATUS(create(method_config(QJIT_QUANT_MILO, 0)), QJIT_ERROR_INVALID_ARGUMENT, "rank");
    EXPECT_STATUS(create(method_config(QJIT_QUANT_MILO, -2)), QJIT_ERROR_INVALID_ARGUMENT, "rank");
    EXPECT_STATUS(create(method_config(QJIT_QUANT_MILO, kN + 1)), QJIT_ERROR_INVALID_ARGUMENT, "min(K, N)");
    EXPECT_STATUS(create(method_config(QJIT_QUANT_MILO, 1025)), QJIT_ERROR_INVALID_ARGUMENT, "1024");
    EXPECT_STATUS(create(method_config(QJIT_QUANT_RTN, 2)), QJIT_ERROR_INVALID_ARGUMENT, "rank");
    EXPECT_STATUS(create(method_config(QJIT_QUANT_HQQ, 1)), QJIT_ERROR_INVALID_ARGUMENT, "rank");
    EXPECT_STATUS(create(method_config(QJIT_QUANT_MILO, 4, 4)), QJIT_ERROR_INVALID_ARGUMENT, "low-rank bits");
    // The largest rank a layer takes is accepted.
    EXPECT_EQ(create(method_config(QJIT_QUANT_MILO, int(kN))), QJIT_OK) << qjit_last_error();
}

TEST(CApiLowRank, BadLowRankImportIsRefused) {
    const ContextPtr context = qjit::test::make_test_context();
    qjit_tools::GptqTensors tensors;
    qjit_tools::random_gptq(kK, kN, 4, kGroup, 51, &tensors);
    const int rank = 3;
    std::vector<float> u = qjit::test::random_floats(size_t(kK * rank), 52);
    const std::vector<float> v = qjit::test::random_floats(size_t(rank * kN), 53);
    auto create = [&](const qjit_low_rank* low_rank) {
        qjit_linear* raw = reinterpret_cast<qjit_linear*>(0x1);
        const qjit_status status =
            qjit_linear_create_with_low_rank(context.get(), kK, kN, &tensors.view, low_rank, &raw);
        if (status == QJIT_OK) qjit_linear_destroy(raw);
        else EXPECT_EQ(raw, nullptr);
        return status;
    };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_STATUS(create(nullptr), QJIT_ERROR_INVALID_ARGUMENT, "low_rank");
    for (const int bits : {8, 3, 16}) {
        SCOPED_TRACE(std::to_string(bits) + "-bit factors");
        qjit_low_rank low_rank{rank, bits, u.data(), v.data()};
        EXPECT_EQ(create(&low_rank), QJIT_OK) << qjit_last_error();
        low_rank.u = nullptr;
        EXPECT_STATUS(create(&low_rank), QJIT_ERROR_INVALID_ARGUMENT, "U and V");
        low_rank.u = u.data();
        low_rank.v = nullptr;
        EXPECT_STATUS(create(&low_rank), QJIT_ERROR_INVALID_ARGUMENT, "U and V");
        low_rank.v = v.data();
        u[size_t(7 * rank + 1)] = nan;
        EXPECT_STATUS(create(&low_rank), QJIT_ERROR_INVALID_ARGUMENT, "not finite");
        u[size_t(7 * rank + 1)] = 0.5f;
        for (const int bad_rank : {0, -1, int(kN) + 1, 1025}) {
            low_rank.rank = bad_rank;
            EXPECT_STATUS(create(&low_rank), QJIT_ERROR_INVALID_ARGUMENT, "rank");
        }
    }
    qjit_low_rank four_bits{rank, 4, u.data(), v.data()};
    EXPECT_STATUS(create(&four_bits), QJIT_ERROR_INVALID_ARGUMENT, "low-rank bits");
}

// A mixed set: 4 attention matrices, 2 dense FFN matrices and 8 routed experts, with activation
// counts, and weights whose tails differ (for kurtosis-r).
struct RankSet {
    std::vector<std::vector<float>> weights;
    std::vector<qjit_rank_matrix> matrices;
};

RankSet mixed_rank_set() {
    RankSet set;
    const struct {
        int64_t k, n;
        qjit_matrix_role role;
        int count;
    } groups[] = {{128, 128, QJIT_ROLE_ATTENTION, 4}, {128, 344, QJIT_ROLE_DENSE, 2}, {128, 96, QJIT_ROLE_EXPERT, 8}};
    for (const auto& g : groups)
        for (int i = 0; i < g.count; ++i) {
            const uint32_t seed = uint32_t(set.weights.size()) + 61;
            set.weights.push_back(i % 2 ? heavy_tailed_weights(g.k, g.n, seed)
                                        : qjit::test::random_floats(size_t(g.k * g.n), seed));
            qjit_rank_matrix m{};
            m.k = g.k;
            m.n = g.n;
            m.role = g.role;
            m.weights = set.weights.back().data();
            m.activation_count = g.role == QJIT_ROLE_EXPERT ? double(100 * (i + 1) + (i % 3) * 7) : 0.0;
            set.matrices.push_back(m);
        }
    return set;
}

std::vector<int> assigned_ranks(qjit_rank_policy policy, double average,
                                const std::vector<qjit_rank_matrix>& matrices) {
    std::vector<int> ranks(matrices.size(), -1);
    EXPECT_EQ(qjit_assign_ranks(policy, average, matrices.data(), int64_t(matrices.size()), ranks.data()), QJIT_OK)
        << qjit_last_error();
    return ranks;
}

TEST(CApiLowRank, AssignRanksKeepsTheBudgetUnderEveryPolicy) {
    const RankSet set = mixed_rank_set();
    const std::vector<qjit_rank_matrix>& matrices = set.matrices;
    const double average = 8;
    double total_cost = 0.0;
    for (const qjit_rank_matrix& m : matrices) total_cost += double(m.k + m.n);

    for (const qjit_rank_policy policy :
         {QJIT_RANK_UNIFORM, QJIT_RANK_DENSE, QJIT_RANK_SPARSE, QJIT_RANK_KURTOSIS, QJIT_RANK_FREQUENCY}) {
        SCOPED_TRACE("policy " + std::to_string(int(policy)));
        const std::vector<int> ranks = assigned_ranks(policy, average, matrices);
        double spent = 0.0;
        for (size_t i = 0; i < ranks.size(); ++i) {
            EXPECT_GE(ranks[i], 0);
            EXPECT_LE(int64_t(ranks[i]), std::min(matrices[i].k, matrices[i].n));
            spent += double(ranks[i]) * double(matrices[i].k + matrices[i].n);
        }
        EXPECT_LE(spent, average * total_cost);
        // No cap binds here, so rounding down loses less than one unit of rank per matrix.
        EXPECT_GT(spent, average * total_cost - total_cost);
    }

    for (const int rank : assigned_ranks(QJIT_RANK_UNIFORM, average, matrices)) EXPECT_EQ(rank, 8);

    const std::vector<int> dense = assigned_ranks(QJIT_RANK_DENSE, average, matrices);
    const std::vector<int> sparse = assigned_ranks(QJIT_RANK_SPARSE, average, matrices);
    const std::vector<int> frequency = assigned_ranks(QJIT_RANK_FREQUENCY, average, matrices);
    const std::vector<int> kurtosis = assigned_ranks(QJIT_RANK_KURTOSIS, average, matrices);
    for (size_t a = 0; a < matrices.size(); ++a) {
        if (matrices[a].role != QJIT_ROLE_ATTENTION) continue;
        for (size_t e = 0; e < matrices.size(); ++e) {
            if (matrices[e].role != QJIT_ROLE_EXPERT) continue;
            EXPECT_GT(dense[a], dense[e]) << "attention " << a << ", expert " << e;
            EXPECT_LT(sparse[a], sparse[e]) << "attention " << a << ", expert " << e;
        }
    }
    // Frequency-r: the more often an expert is picked, the larger its rank.
    for (size_t a = 0; a < matrices.size(); ++a)
        for (size_t b = 0; b < matrices.size(); ++b)
            if (matrices[a].role == QJIT_ROLE_EXPERT && matrices[b].role == QJIT_ROLE_EXPERT &&
                matrices[a].activation_count < matrices[b].activation_count)
                EXPECT_LE(frequency[a], frequency[b]) << "experts " << a << " and " << b;
    const auto [least, most] = std::minmax_element(frequency.begin() + 6, frequency.end());
    EXPECT_LT(*least, *most);
    // Kurtosis-r: among same-shaped matrices, the heavy-tailed ones (odd positions) get more.
    EXPECT_GT(kurtosis[1], kurtosis[0]);
    EXPECT_GT(kurtosis[7], kurtosis[6]);
}

TEST(CApiLowRank, BadAssignRanksArgumentsAreRefused) {
    RankSet set = mixed_rank_set();
    std::vector<qjit_rank_matrix>& matrices = set.matrices;
    std::vector<int> ranks(matrices.size());
    const int64_t count = int64_t(matrices.size());
    EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_UNIFORM, 8, nullptr, count, ranks.data()), QJIT_ERROR_INVALID_ARGUMENT,
                  "matrices");
    EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_UNIFORM, 8, matrices.data(), count, nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "ranks");
    EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_UNIFORM, 8, matrices.data(), 0, ranks.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "count");
    EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_UNIFORM, -1, matrices.data(), count, ranks.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "average_rank");
    EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_UNIFORM, std::nan(""), matrices.data(), count, ranks.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "average_rank");
    EXPECT_STATUS(qjit_assign_ranks(static_cast<qjit_rank_policy>(5), 8, matrices.data(), count, ranks.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "policy");

    std::vector<qjit_rank_matrix> bad_role = matrices;
    bad_role[3].role = static_cast<qjit_matrix_role>(3);
    EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_UNIFORM, 8, bad_role.data(), count, ranks.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "matrices[3].role");

    std::vector<qjit_rank_matrix> no_weights = matrices;
    no_weights[5].weights = nullptr;
    EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_KURTOSIS, 8, no_weights.data(), count, ranks.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "kurtosis-r needs the weights");
    // Other policies do not read the weights.
    EXPECT_EQ(qjit_assign_ranks(QJIT_RANK_UNIFORM, 8, no_weights.data(), count, ranks.data()), QJIT_OK);

    std::vector<qjit_rank_matrix> no_counts = matrices;
    for (qjit_rank_matrix& m : no_counts) m.activation_count = 0;
    EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_FREQUENCY, 8, no_counts.data(), count, ranks.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "activation counts");
    no_counts = matrices;
    no_counts.back().activation_count = -3;
    EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_FREQUENCY, 8, no_counts.data(), count, ranks.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "activation_count");
}

TEST(CApiQuantConfig, FloatOffsetsResolveByMethod) {
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    EXPECT_EQ(config.float_offsets, QJIT_FLOAT_OFFSETS_BY_METHOD);
    struct Case {
        qjit_quant_method method;
        int milo_base, symmetric, float_offsets, expected;
    };
    const Case cases[] = {
        {QJIT_QUANT_RTN, QJIT_QUANT_HQQ, 0, QJIT_FLOAT_OFFSETS_BY_METHOD, 0},
        {QJIT_QUANT_HQQ, QJIT_QUANT_HQQ, 0, QJIT_FLOAT_OFFSETS_BY_METHOD, 1},
        {QJIT_QUANT_HQQ, QJIT_QUANT_HQQ, 1, QJIT_FLOAT_OFFSETS_BY_METHOD, 0},
        {QJIT_QUANT_HQQ, QJIT_QUANT_HQQ, 0, 0, 0},
        {QJIT_QUANT_RTN, QJIT_QUANT_HQQ, 0, 1, 1},
        {QJIT_QUANT_MILO, QJIT_QUANT_HQQ, 0, QJIT_FLOAT_OFFSETS_BY_METHOD, 0},
        {QJIT_QUANT_MILO, QJIT_QUANT_HQQ, 0, 1, 1},
        {QJIT_QUANT_MILO, QJIT_QUANT_RTN, 0, QJIT_FLOAT_OFFSETS_BY_METHOD, 0},
        {QJIT_QUANT_MILO, QJIT_QUANT_GPTQ, 0, QJIT_FLOAT_OFFSETS_BY_METHOD, 0},
        {QJIT_QUANT_GPTQ, QJIT_QUANT_HQQ, 0, QJIT_FLOAT_OFFSETS_BY_METHOD, 0},
        {QJIT_QUANT_MIXED, QJIT_QUANT_HQQ, 0, QJIT_FLOAT_OFFSETS_BY_METHOD, 0},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(testing::Message() << "method " << int(c.method) << " base " << c.milo_base << " symmetric "
                                        << c.symmetric << " float_offsets " << c.float_offsets);
        config.method = c.method;
        config.milo_base = c.milo_base;
        config.symmetric = c.symmetric;
        config.float_offsets = c.float_offsets;
        int uses = -1;
        ASSERT_EQ(qjit_quant_config_float_offsets(&config, &uses), QJIT_OK) << qjit_last_error();
        EXPECT_EQ(uses, c.expected);
    }
    config = method_config(QJIT_QUANT_HQQ);
    config.float_offsets = -2;
    int uses = 0;
    EXPECT_EQ(qjit_quant_config_float_offsets(&config, &uses), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("float_offsets is -2"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(qjit_quant_config_float_offsets(nullptr, &uses), QJIT_ERROR_INVALID_ARGUMENT);

    // The layers made say the same.
    const ContextPtr context = qjit::test::make_test_context();
    const std::vector<float> w = heavy_tailed_weights(kK, kN, 3);
    for (auto [method, expected] : {std::pair{QJIT_QUANT_RTN, 0}, std::pair{QJIT_QUANT_HQQ, 1}}) {
        const LinearPtr layer = create_from_f32(context.get(), method_config(method), w.data(), QJIT_LAYOUT_K_BY_N);
        qjit_linear_info info{};
        ASSERT_EQ(qjit_linear_get_info(layer.get(), &info), QJIT_OK);
        EXPECT_EQ(info.float_offsets, expected) << "method " << int(method);
    }
    qjit_linear* raw = nullptr;
    config = method_config(QJIT_QUANT_HQQ);
    config.float_offsets = -3;
    EXPECT_EQ(qjit_linear_create_from_f32(context.get(), &config, kK, kN, w.data(), QJIT_LAYOUT_K_BY_N, &raw),
              QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(raw, nullptr);
}

// End to end on stories260K, every linear layer (the classifier too) INT3 g64, each method in its
// default form: MiLo (rank 4, INT3 factors) predicts the text better than HQQ, which predicts it
// better than RTN, at about HQQ's memory; the first 30 paragraphs keep the order by wide margins.
TEST(CApiLowRankRealModel, MiloBeatsHqqBeatsRtnOnStories260K) {
    const std::string models = QJIT_SHARED_MODELS_DIR;
    const std::string checkpoint_path = models + "/stories260K/stories260K.bin";
    const std::string tokens_path = models + "/reference/tinystories_val_first200para.tok512.u16";
    if (!std::filesystem::exists(checkpoint_path) || !std::filesystem::exists(tokens_path))
        GTEST_SKIP() << "the stories260K model or its reference tokens are missing under " << models;
    const auto checkpoint = qjit_models::llama2::load_checkpoint(checkpoint_path);
    std::vector<uint16_t> tokens = qjit_models::read_array_file<uint16_t>(tokens_path);
    ASSERT_FALSE(tokens.empty());
    ASSERT_EQ(tokens[0], qjit_models::llama2::kBosToken);
    const int sequences = 30;
    int bos_seen = 0;
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] == qjit_models::llama2::kBosToken && ++bos_seen > sequences) {
            tokens.resize(i);
            break;
        }

    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = 2;
    options.tuning_db_path = "";
    options.tuning_budget_ms = 0;
    struct Result {
        double nll, bits_per_weight;
    };
    auto evaluate = [&](qjit_quant_method method, int rank) {
        qjit_quant_config config = qjit_models::llama::make_quant_config(3, 64, false);
        config.method = method;
        config.rank = rank;
        config.low_rank_bits = 3;
        qjit_models::llama::QuantizingMaker backend(config, &options);
        qjit_models::llama::Model model(checkpoint, backend);
        const qjit_models::llama::NllResult nll =
            qjit_models::llama::evaluate_nll(model, qjit_models::llama2::split_at_bos(tokens));
        EXPECT_EQ(nll.sequence_nll.size(), size_t(sequences));
        return Result{nll.mean_nll, double(model.linear_stored_bytes()) * 8.0 / double(model.linear_weight_count())};
    };
    const Result rtn = evaluate(QJIT_QUANT_RTN, 0);
    const Result hqq = evaluate(QJIT_QUANT_HQQ, 0);
    const Result milo = evaluate(QJIT_QUANT_MILO, 4);
    std::printf("stories260K INT3 g64, %d sequences: NLL RTN %.4f, HQQ %.4f, MiLo r4 INT3 %.4f; bits per weight "
                "%.3f, %.3f, %.3f\n",
                sequences, rtn.nll, hqq.nll, milo.nll, rtn.bits_per_weight, hqq.bits_per_weight, milo.bits_per_weight);
    EXPECT_LT(hqq.nll, rtn.nll);
    EXPECT_LT(milo.nll, hqq.nll);
    // HQQ's default form stores an fp16 offset per group of 64 in place of a 3-bit zero point.
    EXPECT_NEAR(hqq.bits_per_weight, rtn.bits_per_weight + (16.0 - 3.0) / 64.0, 0.02);
    EXPECT_GT(milo.bits_per_weight, hqq.bits_per_weight);
    EXPECT_LE(milo.bits_per_weight, 1.12 * hqq.bits_per_weight);
}

}  // namespace
