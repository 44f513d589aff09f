// Layers with a low-rank compensator (format/low_rank.hpp, runtime/low_rank_pass.hpp) against the
// oracle: INT3/INT4 weights x INT8/INT3/fp16 factors x ranks 1..64 x odd shapes x batch 1 and > 1,
// on both activation paths, with an error bound derived from how each stage computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "format/low_rank.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/reference.hpp"
#include "runtime/linear_layer.hpp"
#include "layer_internals.hpp"
#include "test_support.hpp"
#include "quant/quantize_low_rank.hpp"

namespace qjit {
namespace {

QuantizedMatrix quantized_weights(int bits, int64_t k, int64_t n, int64_t group_size, uint32_t seed) {
    const std::vector<float> w = test::random_floats(size_t(k * n), seed);
    return quantize_rtn({.bits = bits, .group_size = group_size, .scale_type = ScaleType::F16}, k, n, w.data());
}

LowRankFactors random_factors(int bits, int64_t k, int64_t n, int rank, uint32_t seed) {
    const std::vector<float> u = test::random_floats(size_t(k * rank), seed, -0.3f, 0.3f);
    std::vector<float> v = test::random_floats(size_t(rank * n), seed + 1, -0.3f, 0.3f);
    // Components of different sizes, as an SVD's: each has a scale of its own.
    for (int64_t j = 0; j < rank; ++j)
        for (int64_t c = 0; c < n; ++c) v[size_t(j * n + c)] /= float(1 + j);
    return quantize_low_rank(bits, k, n, rank, u.data(), v.data());
}

std::vector<float> absolute(const float* values, size_t count) {
    std::vector<float> out(values, values + count);
    for (float& v : out) v = std::fabs(v);
    return out;
}

// The bound of one product x (m x K) * matrix as `layer` computes it (test_support.hpp derives
// each part), for activations no larger in magnitude than x_magnitude.
std::vector<double> product_bound(const qjit_linear& layer, const QuantizedMatrix& matrix,
                                  const std::vector<float>& x_magnitude, int64_t m) {
    std::vector<double> bound = test::forward_error_bound(matrix, x_magnitude.data(), m);
    if (test::jit_of(layer) && test::jit_of(layer)->spec().path == jit::ActivationPath::Int8)
        test::add_int8_activation_error(bound, matrix, x_magnitude.data(), m, test::jit_of(layer)->spec());
    return bound;
}

// |a| |B| for a (m x l) and B (l x n) dense: what an fp32 loop's rounding scales with.
std::vector<double> absolute_product(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t l,
                                     int64_t n) {
    std::vector<double> out(size_t(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < l; ++j)
            for (int64_t c = 0; c < n; ++c)
                out[size_t(i * n + c)] += std::fabs(double(a[size_t(i * l + j)]) * double(b[size_t(j * n + c)]));
    return out;
}

// The compensator's bound, stage by stage. t = x U is computed with error e_t <= bound_t; with
// codes, t is then scaled by V's component scales s (one more rounding) and multiplied by V's
// unit-scaled codes Vc, so the second stage sees t s + e, is bounded at |t s| + |e|, and e reaches
// the output through |Vc|. fp16 factors run in plain fp32 loops: a sum of l products is off by at
// most (l + 1) eps/2 of the sum of their magnitudes (eps: FLT_EPSILON), doubled here as in
// test_support.hpp.
std::vector<double> compensator_bound(const qjit_linear& layer, const LowRankFactors& f, const std::vector<float>& x,
                                      int64_t m) {
    const int64_t k = layer.params.k, n = layer.params.n, r = f.rank;
    const std::vector<float> u = dense_u(f);
    std::vector<double> t(size_t(m * r), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t row = 0; row < k; ++row)
            for (int64_t j = 0; j < r; ++j) t[size_t(i * r + j)] += double(x[size_t(i * k + row)]) * u[size_t(row * r + j)];
    const std::vector<float> x_magnitude = absolute(x.data(), x.size());

    const bool codes = f.bits != 16;
    std::vector<double> bound_t;
    if (codes) {
        bound_t = product_bound(layer.cpu->low_rank()->u_layer(), f.u.codes, x_magnitude, m);
    } else {
        bound_t = absolute_product(x_magnitude, u, m, k, r);
        for (double& b : bound_t) b *= double(k + 1) * FLT_EPSILON;
    }
    // What the second stage multiplies: t s (codes) or t (fp16), off by `stage_error`.
    const std::vector<float> second_factor = codes ? dequantize(unpack_linear(layer.cpu->low_rank()->v_layer())) : dense_v(f);
    std::vector<float> input_magnitude(t.size()), stage_error(t.size());
    for (size_t i = 0; i < t.size(); ++i) {
        const double s = codes ? std::fabs(double(layer.cpu->low_rank()->v_scales()[i % size_t(r)])) : 1.0;
        const double error = bound_t[i] * s + (std::fabs(t[i]) + bound_t[i]) * s * FLT_EPSILON;
        stage_error[i] = float(error);
        input_magnitude[i] = float((std::fabs(t[i]) * s + error) * (1 + FLT_EPSILON));
    }
    std::vector<double> bound_second;
    if (codes) {
        bound_second = product_bound(layer.cpu->low_rank()->v_layer(), unpack_linear(layer.cpu->low_rank()->v_layer()),
                                     input_magnitude, m);
    } else {
        bound_second = absolute_product(input_magnitude, second_factor, m, r, n);
        for (double& b : bound_second) b *= double(r + 1) * FLT_EPSILON;
    }
    const std::vector<double> propagated =
        absolute_product(stage_error, absolute(second_factor.data(), second_factor.size()), m, r, n);
    std::vector<double> bound(size_t(m * n));
    for (size_t i = 0; i < bound.size(); ++i) bound[i] = bound_second[i] + propagated[i] * (1.0 + 1e-6);
    return bound;
}

void expect_matches_oracle(const qjit_linear& layer, const QuantizedMatrix& matrix, const LowRankFactors& factors,
                           int64_t m, uint32_t seed) {
    const int64_t k = matrix.params.k, n = matrix.params.n;
    const std::vector<float> x = test::random_floats(size_t(m * k), seed);
    std::vector<float> y(size_t(m * n)), expected(y.size()), main_only(y.size()), compensation(y.size());
    linear_forward(layer, x.data(), m, y.data());
    reference_forward(matrix, factors, x.data(), m, expected.data());
    reference_forward(matrix, x.data(), m, main_only.data());

    std::vector<double> bound = product_bound(layer, matrix, absolute(x.data(), x.size()), m);
    const std::vector<double> second = compensator_bound(layer, factors, x, m);
    for (size_t i = 0; i < bound.size(); ++i) {
        // The final y += (x U) V rounds once more.
        const double magnitude = std::fabs(double(main_only[i])) + std::fabs(double(expected[i] - main_only[i]));
        bound[i] += second[i] + (magnitude + bound[i] + second[i]) * FLT_EPSILON;
    }
    test::expect_within(y, expected, bound);
}

struct Shape {
    int64_t k, n, group;
};

// Odd shapes: K not a multiple of the group or of 32, N not a multiple of any panel width.
constexpr Shape kShapes[] = {{96, 40, 32}, {200, 75, 64}, {64, 130, 64}, {130, 33, 128}};

void sweep(qjit_activations activations, qjit_isa isa = QJIT_ISA_AUTO, const char* tiling = nullptr) {
    test::ContextPtr context = test::make_test_context(2, isa, activations, tiling);
    uint32_t seed = 1;
    for (const Shape& s : kShapes)
        for (int bits : {3, 4})
            for (int factor_bits : {8, 3, 16})
                for (int rank : {1, 7, 16, 64}) {
                    const int r = int(std::min<int64_t>({rank, s.k, s.n}));
                    SCOPED_TRACE(concat("K=", s.k, " N=", s.n, " group=", s.group, " bits=", bits, " factor bits=",
                                        factor_bits, " rank=", r));
                    const QuantizedMatrix matrix = quantized_weights(bits, s.k, s.n, s.group, ++seed);
                    const LowRankFactors factors = random_factors(factor_bits, s.k, s.n, r, ++seed);
                    const auto layer = make_linear(context.get(), matrix, factors);
                    for (int64_t m : {1, 5}) expect_matches_oracle(*layer, matrix, factors, m, ++seed);
                }
}

TEST(LowRankLayer, MatchesTheOracleOnTheF32Path) { sweep(QJIT_ACTIVATIONS_F32); }

TEST(LowRankLayer, MatchesTheOracleOnTheInt8Path) { sweep(QJIT_ACTIVATIONS_INT8); }

TEST(LowRankLayer, MatchesTheOracleOnThePortablePath) { sweep(QJIT_ACTIVATIONS_AUTO, QJIT_ISA_PORTABLE); }

TEST(LowRankLayer, MatchesTheOracleWithAKSplitAndBigBatches) {
    test::ContextPtr context = test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_AUTO, "ksplit=2");
    const QuantizedMatrix matrix = quantized_weights(3, 512, 200, 64, 7);
    for (int factor_bits : {8, 3, 16}) {
        const LowRankFactors factors = random_factors(factor_bits, 512, 200, 32, 8);
        const auto layer = make_linear(context.get(), matrix, factors);
        for (int64_t m : {1, 3, 16, 37}) expect_matches_oracle(*layer, matrix, factors, m, uint32_t(m));
    }
}

// U reads x in its original row order while the product gathers it into storage order.
TEST(LowRankLayer, ActOrderGathersOnlyForTheProduct) {
    test::ContextPtr context = test::make_test_context();
    QuantizedMatrix matrix = quantized_weights(4, 160, 48, 32, 9);
    matrix.params.act_order = true;
    for (int64_t r = 0; r < 160; ++r) matrix.params.row_order.push_back(int32_t((r * 37) % 160));
    const LowRankFactors factors = random_factors(8, 160, 48, 12, 10);
    const auto layer = make_linear(context.get(), matrix, factors);
    for (int64_t m : {1, 4}) expect_matches_oracle(*layer, matrix, factors, m, 11);
}

TEST(LowRankLayer, DescribesItsPassAndCountsItsBytes) {
    test::ContextPtr context = test::make_test_context();
    const QuantizedMatrix matrix = quantized_weights(3, 256, 96, 64, 12);
    const auto plain = make_linear(context.get(), matrix);
    const auto layer = make_linear(context.get(), matrix, random_factors(8, 256, 96, 16, 13));
    EXPECT_EQ(layer->params.name(), "q3g64_asym_r16q8");
    EXPECT_EQ(layer->params.kernel_name(), "q3g64_asym");
    EXPECT_NE(layer->description.find("low_rank[q8]"), std::string::npos) << layer->description;
    EXPECT_NE(layer->description.find("low_rank=r16q8"), std::string::npos) << layer->description;
    EXPECT_EQ(weight_bytes(*layer), weight_bytes(*plain) + layer->cpu->low_rank()->streamed_bytes());
    EXPECT_GE(layer->cpu->low_rank()->streamed_bytes(), (256 + 96) * 16);  // one byte per INT8 value at least
    const LowRankFactors back = unpack_low_rank(*layer);
    EXPECT_EQ(back.rank, 16);
    const LowRankFactors given = random_factors(8, 256, 96, 16, 13);
    EXPECT_EQ(back.u.codes.codes, given.u.codes.codes);
    EXPECT_EQ(back.vt.codes.codes, given.vt.codes.codes);
    EXPECT_EQ(back.vt.codes.params.scales, given.vt.codes.params.scales);
    EXPECT_EQ(unpack_low_rank(*plain).rank, 0);
}

TEST(LowRankFormat, NamesAndValidation) {
    WeightFormat f = f16_scaled_format();
    f.k = 4096;
    f.n = 14336;
    f.bits = 3;
    f.group_size = 64;
    f.low_rank = {32, 3};
    EXPECT_EQ(f.name(), "q3g64_asym_r32q3");
    f.low_rank = {8, 16};
    EXPECT_EQ(f.name(), "q3g64_asym_r8f16");
    EXPECT_NO_THROW(validate(f));
    for (LowRankTerms bad : {LowRankTerms{8, 4}, LowRankTerms{2000, 8}, LowRankTerms{0, 8}, LowRankTerms{-1, 0}}) {
        f.low_rank = bad;
        EXPECT_THROW(validate(f), Error) << bad.rank << " " << bad.bits;
    }
}

TEST(LowRankFactorsTest, StorageValidationAndBytes) {
    const std::vector<float> u = test::random_floats(100 * 4, 1), v = test::random_floats(4 * 30, 2);
    const LowRankFactors f = quantize_low_rank(3, 100, 30, 4, u.data(), v.data());
    EXPECT_NO_THROW(validate(f, 100, 30));
    // INT3 symmetric, a scale per rank component: code = round(7 w / (2 s)) + 4 with s the
    // component's max |w| (U's column 0, V's row 0).
    float su = 0, sv = 0;
    for (int64_t r = 0; r < 100; ++r) su = std::max(su, std::fabs(u[size_t(r * 4)]));
    for (int64_t c = 0; c < 30; ++c) sv = std::max(sv, std::fabs(v[size_t(c)]));
    EXPECT_FLOAT_EQ(f.u.codes.params.scales[0], 2 * su / 7);
    EXPECT_FLOAT_EQ(f.vt.codes.params.scales[0], 2 * sv / 7);
    EXPECT_EQ(f.u.codes.codes[0], uint8_t(std::clamp(std::nearbyint(7 * u[0] / (2 * su)) + 4, 0.0f, 7.0f)));
    EXPECT_EQ(f.vt.codes.codes[4], uint8_t(std::clamp(std::nearbyint(7 * v[1] / (2 * sv)) + 4, 0.0f, 7.0f)));
    const std::vector<float> v_back = dense_v(f);
    for (size_t i = 0; i < v.size(); ++i)  // within half a step of its own component's scale
        EXPECT_NEAR(v_back[i], v[i], f.vt.codes.params.scales[i / 30] / 2 + 1e-6) << i;
    EXPECT_EQ(low_rank_stored_bytes(4, 3, 100, 30), (100 * 4 * 3 + 7) / 8 + 4 * 4 + (30 * 4 * 3 + 7) / 8 + 4 * 4);
    EXPECT_EQ(low_rank_stored_bytes(4, 16, 100, 30), (100 * 4 + 4 * 30) * 2);

    EXPECT_THROW(validate(f, 101, 30), Error);  // U's shape does not match K
    EXPECT_THROW(quantize_low_rank(4, 100, 30, 4, u.data(), v.data()), Error);
    EXPECT_THROW(quantize_low_rank(8, 100, 30, 31, u.data(), v.data()), Error);  // rank above min(K, N)
    EXPECT_THROW(quantize_low_rank(8, 100, 30, 4, nullptr, v.data()), Error);
    std::vector<float> bad = u;
    bad[5] = NAN;
    EXPECT_THROW(quantize_low_rank(16, 100, 30, 4, bad.data(), v.data()), Error);
    EXPECT_THROW(quantize_low_rank(8, 100, 30, 4, bad.data(), v.data()), Error);
}

}  // namespace
}  // namespace qjit
