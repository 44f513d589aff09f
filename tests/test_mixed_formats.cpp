// The 2/4/16 formats' parts, alone and together: K-groups of mixed width (2 and 4 bits),
// second-order scales (on 3-bit codes too, whose int8 kernels merge two bit planes) and sparse fp16
// outliers, with and without act-order, on every kernel this machine runs (the portable path,
// generated kernels for each available ISA and both activation paths) against the oracle. Shapes
// are odd: K not a multiple of the group, N not a multiple of 16 or of the vector width; batches
// 1, 5 and 17. Then the formats' validation, names and byte accounting.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/packed_codes.hpp"
#include "format/reference.hpp"
#include "runtime/cpu/candidate_bench.hpp"
#include "runtime/cpu/portable_kernel.hpp"
#include "runtime/linear_layer.hpp"
#include "mixed_matrix.hpp"
#include "test_backends.hpp"
#include "layer_internals.hpp"
#include "test_support.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {
namespace {

using test::Features;
using test::features_name;
using test::synthetic_matrix;

// The fp32 rounding of the outlier term (summed apart, then added) on top of forward_error_bound.
void add_outlier_rounding(std::vector<double>& bound, const QuantizedMatrix& m, const float* x, int64_t rows) {
    const QuantParams& p = m.params;
    if (p.outliers == 0) return;
    const std::vector<float> w = dequantize(m);
    for (int64_t c = 0; c < p.n; ++c)
        for (int64_t e = p.outliers_data.column_start[size_t(c)]; e < p.outliers_data.column_start[size_t(c + 1)]; ++e) {
            const int64_t r = p.outliers_data.rows[size_t(e)], original = p.act_order ? p.row_order[size_t(r)] : r;
            const double terms = std::fabs(double(half_to_float(p.outliers_data.values[size_t(e)]))) +
                                 std::fabs(double(w[size_t(original * p.n + c)]));
            for (int64_t i = 0; i < rows; ++i)
                bound[size_t(i * p.n + c)] += std::fabs(double(x[i * p.k + original])) * terms * double(p.k + 8) * FLT_EPSILON;
        }
}

using test::Backend;
using test::available_backends;
using test::backend_name;

// Runs `layer` on batches 1, 5 and 17 against the oracle of `matrix`.
void expect_matches_oracle(const qjit_linear& layer, const QuantizedMatrix& matrix, uint32_t seed) {
    for (const int64_t m : {1, 5, 17}) {
        SCOPED_TRACE(testing::Message() << "m=" << m << " " << layer.description);
        const std::vector<float> x = test::random_floats(size_t(m * matrix.params.k), seed++);
        std::vector<float> y(size_t(m * matrix.params.n)), expected(y.size());
        linear_forward(layer, x.data(), m, y.data());
        reference_forward(matrix, x.data(), m, expected.data());
        std::vector<double> bound = test::forward_error_bound(matrix, x.data(), m);
        add_outlier_rounding(bound, matrix, x.data(), m);
        if (test::jit_of(layer) && test::jit_of(layer)->spec().path == jit::ActivationPath::Int8)
            test::add_int8_activation_error(bound, matrix, x.data(), m, test::jit_of(layer)->spec());
        test::expect_within(y, expected, bound);
    }
}

struct Shape {
    int64_t k, n, group_size;
};
// K with a short last group, N off every vector width; one 16-column second-order group, and a
// last partial one.
constexpr Shape kShapes[] = {{200, 37, 32}, {515, 77, 64}, {1000, 130, 128}, {96, 16, 32}, {300, 250, 256}};

using Case = std::tuple<int /*feature bits*/, Backend>;

Features features_of(int bits) { return {(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0, (bits & 8) != 0}; }

class MixedFormatTest : public ::testing::TestWithParam<Case> {};

TEST_P(MixedFormatTest, MatchesOracle) {
    const auto [feature_bits, backend] = GetParam();
    const Features features = features_of(feature_bits);
    test::ContextPtr context = test::make_test_context(2, backend.isa, backend.activations);
    uint32_t seed = 11;
    for (const Shape& shape : kShapes) {
        SCOPED_TRACE(testing::Message() << "K=" << shape.k << " N=" << shape.n << " g" << shape.group_size);
        const QuantizedMatrix matrix = synthetic_matrix(shape.k, shape.n, shape.group_size, features, seed++);
        const std::unique_ptr<qjit_linear> layer = make_linear(context.get(), matrix);
        ASSERT_EQ(test::jit_of(*layer) != nullptr, backend.isa != QJIT_ISA_PORTABLE) << layer->description;
        EXPECT_EQ(layer->params.name(), matrix.params.name());
        expect_matches_oracle(*layer, matrix, seed);
        seed += 3;
    }
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
    return features_name(features_of(std::get<0>(info.param))) + "_" + backend_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllFeatures, MixedFormatTest,
                         ::testing::Combine(::testing::Range(1, 16), ::testing::ValuesIn(available_backends())),
                         case_name);

// Forced tilings: K-splits (the outliers belong to the first part only), k-unroll inside groups of
// either width, one row per kernel, prefetching; each tiling fits AVX2 (16 vector registers,
// panels of whole 16-column groups).
TEST(MixedFormat, EveryTilingMatchesTheOracle) {
    const Features all{true, true, true, true};
    const QuantizedMatrix matrix = synthetic_matrix(1100, 93, 64, all, 7);
    for (const char* tiling : {"tu=2,mb=3,ksplit=3,ku=2", "tu=2,mb=1,prefetch=2", "tu=4,mb=1,ksplit=2",
                               "tu=2,mb=3,ksplit=8"}) {
        for (const qjit_activations activations : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8}) {
            test::ContextPtr context = test::make_test_context(2, QJIT_ISA_AUTO, activations, tiling);
            if (context->isa < QJIT_ISA_AVX2) GTEST_SKIP() << "no generated kernels on this CPU";
            const std::unique_ptr<qjit_linear> layer = make_linear(context.get(), matrix);
            ASSERT_TRUE(test::jit_of(*layer));
            EXPECT_NE(layer->description.find("outliers"), std::string::npos) << layer->description;
            expect_matches_oracle(*layer, matrix, 40);
        }
    }
}

// A 16-column second-order group cannot straddle two panels: AVX2 panels of an odd number of
// 8-column vectors are refused by name, and never enumerated by the tuner.
TEST(MixedFormat, SecondOrderPanelsHoldWhole16ColumnGroups) {
    if (!cpu_supports(QJIT_ISA_AVX2)) GTEST_SKIP() << "no AVX2";
    const QuantizedMatrix matrix = synthetic_matrix(256, 64, 32, {false, true, false, false}, 3);
    test::ContextPtr context = test::make_test_context(2, QJIT_ISA_AVX2, QJIT_ACTIVATIONS_F32, "tu=3,mb=2");
    try {
        make_linear(context.get(), matrix);
        ADD_FAILURE() << "an AVX2 panel of 24 columns was accepted for second-order scales";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("16-column"), std::string::npos) << e.what();
    }
    test::ContextPtr tuned = test::make_test_context(2, QJIT_ISA_AVX2, QJIT_ACTIVATIONS_F32);
    const std::unique_ptr<qjit_linear> layer = make_linear(tuned.get(), matrix);
    EXPECT_EQ(test::jit_of(*layer)->spec().panel_columns() % 16, 0) << layer->description;
}

// The tuner's count of the bytes a forward streams (what it times candidates by) is the layer's
// own, with fp16 and with second-order scales (one code byte per column and group, and a 4-byte
// scale and zero pair per 16 columns).
TEST(MixedFormat, TheTunersByteCountIsTheLayers) {
    if (!cpu_supports(QJIT_ISA_AVX2)) GTEST_SKIP() << "no AVX2";
    for (bool second_order : {false, true}) {
        const QuantizedMatrix matrix = synthetic_matrix(256, 96, 32, {false, second_order, false, false}, 4);
        test::ContextPtr context = test::make_test_context(2, QJIT_ISA_AVX2, QJIT_ACTIVATIONS_F32);
        const std::unique_ptr<qjit_linear> layer = make_linear(context.get(), matrix);
        ASSERT_TRUE(test::jit_of(*layer)) << layer->description;
        EXPECT_EQ(forward_weight_bytes(test::jit_of(*layer)->spec(), matrix.params.n), weight_bytes(*layer)) << layer->description;
    }
}

// A plan of several products (a K split) over every feature at once runs on every CPU backend:
// the generated kernels split K as a forced tiling asks, the portable path runs any plan it is
// made for, its products adding up in order.
TEST(MixedFormat, AMultiProductPlanRunsOnEveryBackend) {
    const QuantizedMatrix matrix = synthetic_matrix(1100, 93, 64, {true, true, true, true}, 9);
    const std::string products = "gather,product[0:6)qmixed,product[6:12)qmixed,product[12:18)qmixed,outliers";
    for (const Backend& backend : available_backends()) {
        SCOPED_TRACE(backend_name(backend));
        const bool portable = backend.isa == QJIT_ISA_PORTABLE;
        test::ContextPtr context = test::make_test_context(2, backend.isa, backend.activations,
                                                           portable ? nullptr : "tu=2,mb=3,ksplit=3");
        const std::unique_ptr<qjit_linear> layer = make_linear(context.get(), matrix);
        if (portable) {
            PackedCodes codes = layer->cpu->codes();
            layer->cpu = std::make_unique<PortableLayer>(plan_forward(layer->params, layer->params.num_groups(), 3),
                                                         layer->params, std::move(codes), nullptr, *context->pool);
        }
        EXPECT_EQ(passes_text(layer->cpu->passes()), products);
        EXPECT_EQ(layer->cpu->kind(), portable ? BackendKind::Portable : BackendKind::X86Jit);
        expect_matches_oracle(*layer, matrix, 60);
    }
}

TEST(MixedFormat, PlansOneProductOverBothWidthsThenTheOutliers) {
    const QuantizedMatrix matrix = synthetic_matrix(512, 64, 64, {true, false, true, false}, 5);
    test::ContextPtr portable = test::make_test_context(2, QJIT_ISA_PORTABLE);
    EXPECT_EQ(passes_text(make_linear(portable.get(), matrix)->cpu->passes()), "product[0:8)qmixed,outliers");
}

// What validate() refuses, by name.
TEST(MixedFormat, InvalidFormatsAreRefusedByName) {
    auto refusal = [](const WeightFormat& f) {
        try {
            validate(f);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    WeightFormat f;
    f.k = 256;
    f.n = 64;
    f.group_size = 32;
    f.bits = 4;
    f.group_bits = {2, 4, 2, 4, 2, 4, 2, 4};
    EXPECT_EQ(refusal(f), "accepted");
    WeightFormat bad = f;
    bad.group_bits[3] = 3;
    EXPECT_NE(refusal(bad).find("2 or 4 bits"), std::string::npos) << refusal(bad);
    bad = f;
    bad.group_bits.pop_back();
    EXPECT_NE(refusal(bad).find("one per group"), std::string::npos) << refusal(bad);
    bad = f;
    bad.group_size = 16;
    bad.group_bits.resize(16, 2);
    EXPECT_NE(refusal(bad).find("multiple of 32"), std::string::npos) << refusal(bad);
    bad = f;
    bad.group_size = 48;
    bad.group_bits.resize(6, 2);
    EXPECT_NE(refusal(bad).find("multiple of 32"), std::string::npos) << refusal(bad);
    bad = f;
    bad.symmetric = true;
    EXPECT_NE(refusal(bad).find("asymmetric"), std::string::npos) << refusal(bad);
    bad = f;
    bad.bits = 8;
    EXPECT_NE(refusal(bad).find("widest"), std::string::npos) << refusal(bad);
    bad = WeightFormat{};
    bad.k = 256;
    bad.n = 64;
    bad.bits = 8;
    bad.scale_type = ScaleType::SecondOrder;
    EXPECT_NE(refusal(bad).find("4 bits or fewer"), std::string::npos) << refusal(bad);
    bad = f;
    bad.outliers = max_outliers(256, 64) + 1;
    EXPECT_NE(refusal(bad).find("outliers is"), std::string::npos) << refusal(bad);
}

TEST(MixedFormat, DataThatDisagreesWithItsFormatIsRefused) {
    QuantizedMatrix m = synthetic_matrix(256, 40, 32, {true, true, true, false}, 9);
    QuantizedMatrix bad = m;
    bad.params.scales[3] *= 1.5f;  // no longer what its second-order code gives
    EXPECT_THROW(validate(bad), Error);
    bad = m;
    const size_t in_two_bit_group = size_t(std::find(m.params.group_bits.begin(), m.params.group_bits.end(), 2) -
                                           m.params.group_bits.begin()) * 32 * 40;
    bad.codes[in_two_bit_group + 17] = 7;  // beyond its 2-bit group, in column 17
    try {
        validate(bad);
        ADD_FAILURE() << "a 3-bit code in a 2-bit group was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("code 7 at row " + std::to_string(in_two_bit_group / 40) +
                                             " exceeds its group's 2 bits"),
                  std::string::npos)
            << e.what();
    }
    bad = m;
    bad.params.outliers_data.rows[0] = 256;  // outside K
    EXPECT_THROW(validate(bad), Error);
    bad = m;
    bad.params.outliers -= 1;
    EXPECT_THROW(validate(bad), Error);
    EXPECT_THROW(make_sparse_outliers(4, 4, {{1, 1, 1.0f}, {1, 1, 2.0f}}), Error);
}

TEST(MixedFormat, NamesSayWhatIsStored) {
    const QuantizedMatrix all = synthetic_matrix(256, 40, 32, {true, true, true, true}, 2);
    EXPECT_EQ(all.params.name(), "q2or4g32_asym_sq4_sp_act");
    EXPECT_EQ(all.params.kernel_name(), "q2or4g32_asym_sq4_sp");
    EXPECT_EQ(synthetic_matrix(256, 40, 64, {false, true, false, false}, 2).params.name(), "q3g64_asym_sq4");
}

// The accounting behind bits per weight: codes at their group's width, zero points likewise,
// 4-bit scale codes plus two fp16 values per 16 columns, and 6 bytes per outlier plus the column
// starts.
TEST(MixedFormat, StoredBytesFollowTheFormat) {
    const QuantizedMatrix m = synthetic_matrix(256, 40, 32, {true, true, true, false}, 4);
    const QuantParams& p = m.params;
    int64_t bits = 0;
    for (uint8_t w : p.group_bits) bits += int64_t(w) * (32 * 40 + 40);  // codes and zero points
    const int64_t scale_bytes = 8 * 40 / 2 + 8 * 3 * 4;                   // 8 groups x 40 codes; 3 column groups
    const int64_t outlier_bytes = p.outliers * 6 + 41 * 8;
    EXPECT_EQ(stored_bytes(p), bits / 8 + scale_bytes + outlier_bytes);
}

// Scales nearly equal over 16 columns (untrained embedding columns) keep a finite fp16 zero, and
// scales of very different sizes still come back within a code step.
TEST(MixedFormat, SecondOrderScalesOfTinyOrWideRanges) {
    std::vector<float> scales(2 * 20);
    for (int c = 0; c < 20; ++c) {
        scales[size_t(c)] = 0.0123f + 1e-9f * float(c);   // a range of 2e-8 on values of 0.01
        scales[size_t(20 + c)] = std::ldexp(1.0f, c % 8 - 6);  // 1/64 .. 2
    }
    const SecondOrderScales s = quantize_second_order(2, 20, scales);
    const std::vector<float> back = dequantize_second_order(s, 2, 20);
    for (size_t i = 0; i < scales.size(); ++i) {
        ASSERT_TRUE(std::isfinite(back[i])) << i;
        const size_t pair = i / 20 * 2 + i % 20 / 16;
        EXPECT_LE(std::fabs(back[i] - scales[i]), half_to_float(s.scales[pair]) * 0.51f + 1e-6f * scales[i]) << i;
    }
}

// The packed layout stores each block at its group's width, and unpacks to the same codes.
TEST(MixedFormat, PackedCodesRoundTrip) {
    const QuantizedMatrix m = synthetic_matrix(200, 37, 64, {true, false, false, false}, 6);
    const PackedCodes packed = pack_codes(m.codes.data(), 4, 200, 37, 16, block_widths(m.params));
    EXPECT_EQ(unpack_codes(packed), m.codes);
    EXPECT_EQ(packed.words.size(), packed_word_count(m.params, 37, 16));
    int64_t words_per_column = 0;
    for (int64_t b = 0; b < 7; ++b) words_per_column += m.params.group_width(b * 32 / 64);
    EXPECT_EQ(packed.column_words(), words_per_column);
}

}  // namespace
}  // namespace qjit
