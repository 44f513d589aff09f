// Every weight format (bits x group x zero points x act-order) on every kernel this machine can run
// (the portable path; generated kernels for each available ISA and both activation paths)
// against the oracle, on odd shapes (K and N in {1, 7, 64, 172, 1000, 4096}) and batches
// 1, 2, 3, 5, 16 and 64.
#include <gtest/gtest.h>

#include <numeric>
#include <tuple>

#include "base/half.hpp"
#include "runtime/linear_layer.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/reference.hpp"
#include "test_backends.hpp"
#include "layer_internals.hpp"
#include "test_support.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {
namespace {

using test::ContextPtr;
using test::LinearPtr;

struct Shape {
    int64_t k, n;
};
constexpr Shape kShapes[] = {{1, 4096}, {7, 1000}, {64, 172}, {172, 64}, {1000, 7}, {4096, 1}, {300, 200}};
constexpr int64_t kBatches[] = {1, 2, 3, 5, 16, 64};

using test::Backend;
using test::available_backends;
using test::backend_name;

// A random permutation standing in for GPTQ's act-order row sort.
std::vector<int32_t> random_row_order(int64_t k, uint32_t seed) {
    std::vector<int32_t> order(static_cast<size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    return order;
}

// How a format stores its zero points.
enum class Zeros { Symmetric, Asymmetric, FloatOffsets };
const char* zeros_label(Zeros zeros) {
    switch (zeros) {
        case Zeros::Symmetric: return "_sym";
        case Zeros::Asymmetric: return "_asym";
        case Zeros::FloatOffsets: return "_off";
    }
    return "_?";
}

using Format = std::tuple<int /*bits*/, int /*group_size*/, Zeros, bool /*act_order*/, Backend>;

class FormatTest : public ::testing::TestWithParam<Format> {};

TEST_P(FormatTest, MatchesOracle) {
    const auto [bits, group_size, zeros, act_order, backend] = GetParam();
    ContextPtr context = test::make_test_context(2, backend.isa, backend.activations);
    uint32_t seed = 1;
    for (const Shape shape : kShapes) {
        SCOPED_TRACE(testing::Message() << "K=" << shape.k << " N=" << shape.n);
        const std::vector<float> weights = test::random_floats(size_t(shape.k * shape.n), seed++);
        const WeightFormat config{.bits = bits,
                                  .group_size = resolve_group_size(group_size, shape.k),
                                  .symmetric = zeros == Zeros::Symmetric,
                                  .float_offsets = zeros == Zeros::FloatOffsets,
                                  .scale_type = ScaleType::F16};
        QuantizedMatrix matrix = quantize_rtn(config, shape.k, shape.n, weights.data());
        if (act_order && shape.k > 1) {
            matrix.params.row_order = random_row_order(shape.k, seed++);
            matrix.params.act_order = true;
        }
        const std::unique_ptr<qjit_linear> layer = make_linear(context.get(), matrix);
        ASSERT_EQ(test::jit_of(*layer) != nullptr, backend.isa != QJIT_ISA_PORTABLE) << layer->description;
        if (test::jit_of(*layer)) EXPECT_EQ(test::jit_of(*layer)->spec().isa.level(), backend.isa) << layer->description;

        for (const int64_t m : kBatches) {
            SCOPED_TRACE(testing::Message() << "m=" << m << " " << layer->description);
            const std::vector<float> x = test::random_floats(size_t(m * shape.k), seed++);
            std::vector<float> y(size_t(m * shape.n)), expected(y.size());
            ASSERT_EQ(qjit_linear_forward(layer.get(), x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
            reference_forward(matrix, x.data(), m, expected.data());
            std::vector<double> bound = test::forward_error_bound(matrix, x.data(), m);
            if (test::jit_of(*layer) && test::jit_of(*layer)->spec().path == jit::ActivationPath::Int8)
                test::add_int8_activation_error(bound, matrix, x.data(), m, test::jit_of(*layer)->spec());
            test::expect_within(y, expected, bound);
        }
    }
}

std::string format_label(int bits, int group_size, Zeros zeros, bool act_order) {
    return "q" + std::to_string(bits) + (group_size < 0 ? "col" : "g" + std::to_string(group_size)) +
           zeros_label(zeros) + (act_order ? "_actorder" : "");
}

std::string format_test_name(const testing::TestParamInfo<Format>& info) {
    const auto [bits, group_size, zeros, act_order, backend] = info.param;
    return format_label(bits, group_size, zeros, act_order) + "_" + backend_name(backend);
}

const auto kAllBits = ::testing::Values(2, 3, 4, 5, 6, 8);
const auto kAllGroups = ::testing::Values(16, 32, 64, 128, 256, QJIT_GROUP_PER_COLUMN);
const auto kAllZeros = ::testing::Values(Zeros::Symmetric, Zeros::Asymmetric, Zeros::FloatOffsets);

INSTANTIATE_TEST_SUITE_P(AllFormats, FormatTest,
                         ::testing::Combine(kAllBits, kAllGroups, kAllZeros, ::testing::Bool(),
                                            ::testing::ValuesIn(available_backends())),
                         format_test_name);

// The public entry point quantizes exactly as quantize_rtn does, from either weight layout.
// (fp32 weights carry no act-order; the GPTQ import tests cover it through the C API.)
using RtnFormat = std::tuple<int /*bits*/, int /*group_size*/, Zeros>;
class CApiQuantizeTest : public ::testing::TestWithParam<RtnFormat> {};

TEST_P(CApiQuantizeTest, MatchesTheBaselineQuantizer) {
    const auto [bits, group_size, zeros] = GetParam();
    ContextPtr context = test::make_test_context();
    const int64_t k = 172, n = 33;
    const std::vector<float> weights = test::random_floats(size_t(k * n), 7);
    std::vector<float> transposed(weights.size());
    for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c) transposed[size_t(c * k + r)] = weights[size_t(r * n + c)];
    const QuantizedMatrix expected =
        quantize_rtn({.bits = bits,
                      .group_size = resolve_group_size(group_size, k),
                      .symmetric = zeros == Zeros::Symmetric,
                      .float_offsets = zeros == Zeros::FloatOffsets,
                      .scale_type = ScaleType::F32},
                     k, n, weights.data());

    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.bits = bits;
    config.group_size = group_size;
    config.symmetric = zeros == Zeros::Symmetric;
    config.float_offsets = zeros == Zeros::FloatOffsets;
    config.scale_dtype = QJIT_DTYPE_F32;
    for (const auto& [layout, source] : {std::pair{QJIT_LAYOUT_K_BY_N, &weights}, {QJIT_LAYOUT_N_BY_K, &transposed}}) {
        qjit_linear* raw = nullptr;
        ASSERT_EQ(qjit_linear_create_from_f32(context.get(), &config, k, n, source->data(), layout, &raw), QJIT_OK)
            << qjit_last_error();
        LinearPtr layer(raw);
        const QuantizedMatrix got = unpack_linear(*layer);
        EXPECT_EQ(got.codes, expected.codes);
        EXPECT_EQ(got.params.scales, expected.params.scales);
        EXPECT_EQ(got.params.zeros, expected.params.zeros);
        EXPECT_EQ(got.params.offsets, expected.params.offsets);
        std::vector<float> dense(size_t(k * n));
        ASSERT_EQ(qjit_linear_dequantize(layer.get(), dense.data()), QJIT_OK);
        EXPECT_EQ(dense, dequantize(expected));
    }
}

std::string rtn_test_name(const testing::TestParamInfo<RtnFormat>& info) {
    const auto [bits, group_size, zeros] = info.param;
    return format_label(bits, group_size, zeros, false);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, CApiQuantizeTest, ::testing::Combine(kAllBits, kAllGroups, kAllZeros),
                         rtn_test_name);

// Quantization error of the baseline quantizer stays within half a step of each group's scale.
TEST(RtnQuantizer, RoundTripErrorIsAtMostHalfAStep) {
    const int64_t k = 200, n = 9;
    const std::vector<float> weights = test::random_floats(size_t(k * n), 3, -2.0f, 0.5f);
    for (const int bits : {2, 3, 4, 8}) {
        for (const Zeros zeros : {Zeros::Symmetric, Zeros::Asymmetric, Zeros::FloatOffsets}) {
            const bool symmetric = zeros == Zeros::Symmetric;
            const QuantizedMatrix q = quantize_rtn({.bits = bits,
                                                    .group_size = 64,
                                                    .symmetric = symmetric,
                                                    .float_offsets = zeros == Zeros::FloatOffsets,
                                                    .scale_type = ScaleType::F32},
                                                   k, n, weights.data());
            const std::vector<float> dense = dequantize(q);
            for (int64_t r = 0; r < k; ++r)
                for (int64_t c = 0; c < n; ++c) {
                    const float step = q.params.scales[size_t((r / 64) * n + c)];
                    // Symmetric ranges give up the top half-step on the positive side (GPTQ's convention).
                    const float allowed = symmetric ? 1.0f * step : 0.5f * step * (1 + 1e-5f);
                    EXPECT_LE(std::fabs(dense[size_t(r * n + c)] - weights[size_t(r * n + c)]), allowed)
                        << "bits=" << bits << " r=" << r << " c=" << c;
                }
        }
    }
}

TEST(RtnQuantizer, AllZeroGroupAndF16ScalesStayFinite) {
    const std::vector<float> zeros(64 * 3, 0.0f);
    const QuantizedMatrix q =
        quantize_rtn({.bits = 4, .group_size = 32, .scale_type = ScaleType::F16}, 64, 3, zeros.data());
    for (float w : dequantize(q)) EXPECT_EQ(w, 0.0f);
    const std::vector<float> tiny(32, 1e-9f);
    const WeightFormat symmetric{.bits = 4, .group_size = 32, .symmetric = true, .scale_type = ScaleType::F16};
    const QuantizedMatrix t = quantize_rtn(symmetric, 32, 1, tiny.data());
    for (float s : t.params.scales) EXPECT_GT(s, 0.0f);
}

// With float offsets a group's range is its own: a constant group is its value (as stored), a group
// far from zero keeps every code for its span.
TEST(RtnQuantizer, FloatOffsetsFitEachGroupsOwnRange) {
    const WeightFormat format{.bits = 4, .group_size = 32, .float_offsets = true, .scale_type = ScaleType::F16};
    const std::vector<float> constant(32, 0.3f);
    for (float w : dequantize(quantize_rtn(format, 32, 1, constant.data()))) EXPECT_EQ(w, round_to_half(0.3f));
    std::vector<float> far(32);
    for (size_t i = 0; i < far.size(); ++i) far[i] = 10.0f + 0.01f * float(i);
    const QuantizedMatrix q = quantize_rtn(format, 32, 1, far.data());
    EXPECT_EQ(q.params.offsets[0], round_to_half(10.0f));
    EXPECT_EQ(*std::max_element(q.codes.begin(), q.codes.end()), 15);
    const std::vector<float> dense = dequantize(q);
    for (size_t i = 0; i < far.size(); ++i) EXPECT_NEAR(dense[i], far[i], 0.5f * q.params.scales[0] + 0.01f);
}

}  // namespace
}  // namespace qjit
