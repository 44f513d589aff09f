// A layer's forward as passes (runtime/layer_passes.hpp): the plans for act-order, K-split,
// groups of 16, mixed widths and outliers, and layers whose plans differ computing what the oracle does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/reference.hpp"
#include "runtime/layer_passes.hpp"
#include "runtime/linear_layer.hpp"
#include "test_support.hpp"

namespace qjit {
namespace {

WeightFormat format_of(int64_t k, int64_t group_size, bool act_order = false) {
    WeightFormat f;
    f.k = k;
    f.n = 64;
    f.group_size = group_size;
    f.act_order = act_order;
    return f;
}

// The product passes cover [0, groups) in order, without gaps or overlaps.
void expect_tiles(const std::vector<Pass>& passes, int64_t groups) {
    int64_t next = 0;
    for (const Pass& p : passes) {
        if (p.kind != PassKind::Product) continue;
        EXPECT_EQ(p.first_group, next) << passes_text(passes);
        EXPECT_LT(p.first_group, p.end_group) << passes_text(passes);
        next = p.end_group;
    }
    EXPECT_EQ(next, groups) << passes_text(passes);
}

TEST(LayerPasses, OneProductOrAGatherFirst) {
    EXPECT_EQ(passes_text(plan_forward(format_of(4096, 128), 32, 1)), "product[0:32)q4");
    EXPECT_EQ(passes_text(plan_forward(format_of(4096, 128, true), 32, 1)), "gather,product[0:32)q4");
}

TEST(LayerPasses, KSplitIsProductsOverGroupRanges) {
    const std::vector<Pass> passes = plan_forward(format_of(4096, 128), 32, 4);
    EXPECT_EQ(passes_text(passes), "product[0:8)q4,product[8:16)q4,product[16:24)q4,product[24:32)q4");
    for (int splits : {2, 3, 5, 7, 8}) expect_tiles(plan_forward(format_of(4096, 128), 32, splits), 32);
    // More splits than groups: one product per group, none empty.
    const std::vector<Pass> few = plan_forward(format_of(300, 128), 3, 8);
    EXPECT_EQ(few.size(), 3u);
    expect_tiles(few, 3);
}

TEST(LayerPasses, GroupsOf16SplitInPairs) {
    for (int splits : {2, 3, 4}) {
        const std::vector<Pass> passes = plan_forward(format_of(320, 16), 20, splits, 2);
        expect_tiles(passes, 20);
        for (const Pass& p : passes) EXPECT_EQ(p.first_group % 2, 0) << passes_text(passes);
    }
}

TEST(LayerPasses, MixedWidthsRunAsOneProductSplitOnlyForK) {
    WeightFormat f = format_of(512, 64);
    f.group_bits = {2, 2, 4, 4, 4, 2, 2, 2};
    EXPECT_EQ(passes_text(plan_forward(f, 8, 1)), "product[0:8)qmixed");
    const std::vector<Pass> split = plan_forward(f, 8, 2);
    expect_tiles(split, 8);
    EXPECT_EQ(passes_text(split), "product[0:4)qmixed,product[4:8)qmixed");
    f.outliers = 3;
    EXPECT_EQ(passes_text(plan_forward(f, 8, 1)), "product[0:8)qmixed,outliers");
}

TEST(LayerPasses, BadPlansAreRefused) {
    EXPECT_THROW(plan_forward(format_of(64, 32), 0, 1), Error);
    EXPECT_THROW(plan_forward(format_of(64, 32), 2, 0), Error);
}

// The same layer planned with K-splits (forced tilings), with act-order, on the generated kernels
// and the portable path: every plan computes the oracle's product.
TEST(LayerPasses, EveryPlanMatchesTheOracle) {
    const int64_t k = 515, n = 77;
    const std::vector<float> w = test::random_floats(size_t(k * n), 3);
    QuantizedMatrix matrix = quantize_rtn({.bits = 4, .group_size = 32, .scale_type = ScaleType::F16}, k, n, w.data());
    matrix.params.act_order = true;
    for (int64_t r = 0; r < k; ++r) matrix.params.row_order.push_back(int32_t((r * 11 + 5) % k));
    const int64_t m = 3;
    const std::vector<float> x = test::random_floats(size_t(m * k), 4);
    std::vector<float> expected(size_t(m * n));
    reference_forward(matrix, x.data(), m, expected.data());
    const std::vector<double> bound = test::forward_error_bound(matrix, x.data(), m);
    struct Case {
        qjit_isa isa;
        const char* tiling;
        const char* passes;
    };
    for (const Case& c : {Case{QJIT_ISA_PORTABLE, nullptr, "gather,product[0:17)q4"},
                          Case{QJIT_ISA_AUTO, "tu=1,mb=2,ksplit=1", "gather,product[0:17)q4"},
                          Case{QJIT_ISA_AUTO, "tu=1,mb=2,ksplit=3", "gather,product[0:5)q4,product[5:11)q4,product[11:17)q4"}}) {
        test::ContextPtr context = test::make_test_context(2, c.isa, QJIT_ACTIVATIONS_F32, c.tiling);
        if (c.isa != QJIT_ISA_PORTABLE && context->isa < QJIT_ISA_AVX2) continue;  // no generated kernels here
        std::unique_ptr<qjit_linear> layer = make_linear(context.get(), matrix);
        EXPECT_EQ(passes_text(layer->cpu->passes()), c.passes);
        EXPECT_NE(layer->description.find(std::string("passes=") + c.passes), std::string::npos) << layer->description;
        std::vector<float> y(size_t(m * n));
        linear_forward(*layer, x.data(), m, y.data());
        test::expect_within(y, expected, bound);
    }
}

}  // namespace
}  // namespace qjit
