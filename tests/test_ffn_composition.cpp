// The FFN composition (include/qjit/qjit_ffn.h, runtime/ffn/): the Dense strategy against the
// whole FFN by the oracle on odd shapes and every width; the Experts strategy against each expert's
// Dense output, weighted and summed; the Sharded strategy at world size 1 against Dense; and the
// C API's refusals.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <memory>
#include <vector>

#include "flash_test_files.hpp"
#include "qjit/qjit_ffn.h"
#include "qjit/qjit_flash.h"
#include "qjit/qjit_tp.h"
#include "runtime/linear_layer.hpp"
#include "runtime/tp_mlp.hpp"
#include "test_support.hpp"
#include "thread_world.hpp"
#include "tp_mlp_fixtures.hpp"

namespace qjit {
namespace {

using test::ContextPtr;
using test::LinearPtr;
using tp_test::Shapes;

struct FfnDeleter {
    void operator()(qjit_ffn* ffn) const { qjit_ffn_destroy(ffn); }
};
using FfnPtr = std::unique_ptr<qjit_ffn, FfnDeleter>;

// fp32 activations: the products are the oracle's up to fp32 rounding.
ContextPtr f32_context() { return test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32); }

// An MLP's matrices (tp_mlp_fixtures.hpp) as layers of `context`; no gate for GELU.
struct FfnLayers {
    LinearPtr gate, up, down;
};

FfnLayers make_layers(qjit_context* context, const MlpMatrices& mlp) {
    FfnLayers layers{nullptr, LinearPtr(make_linear(context, mlp.up).release()),
                     LinearPtr(make_linear(context, mlp.down).release())};
    if (mlp.kind == QJIT_MLP_SWIGLU) layers.gate.reset(make_linear(context, mlp.gate).release());
    return layers;
}

qjit_ffn_activation activation_of(qjit_mlp_kind kind) {
    return kind == QJIT_MLP_SWIGLU ? QJIT_FFN_SWIGLU : QJIT_FFN_GELU;
}

FfnPtr make_dense(qjit_context* context, const FfnLayers& layers, qjit_ffn_activation activation) {
    qjit_ffn* ffn = nullptr;
    EXPECT_EQ(qjit_ffn_create_dense(context, layers.gate.get(), layers.up.get(), layers.down.get(), activation, &ffn),
              QJIT_OK)
        << qjit_last_error();
    return FfnPtr(ffn);
}

std::vector<float> dense_forward(qjit_ffn* ffn, const std::vector<float>& x, int64_t m, int64_t n) {
    std::vector<float> y(size_t(m * n), 12345.0f);
    EXPECT_EQ(qjit_ffn_forward(ffn, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
    return y;
}

class DenseFfnBits : public ::testing::TestWithParam<int> {};

TEST_P(DenseFfnBits, MatchesTheOracleOnOddShapes) {
    const int bits = GetParam();
    const ContextPtr context = f32_context();
    // K, H and N not multiples of 32 nor of the group; the last group of each matrix partial.
    for (const Shapes shapes : {Shapes{72, 200, 44, 32}, Shapes{45, 77, 19, 16}})
        for (qjit_mlp_kind kind : {QJIT_MLP_SWIGLU, QJIT_MLP_GELU})
            for (bool act_order : {false, true}) {
                const MlpMatrices mlp =
                    tp_test::random_mlp(kind, shapes, bits, act_order, uint32_t(bits * 100 + kind * 10 + act_order));
                const FfnLayers layers = make_layers(context.get(), mlp);
                const FfnPtr ffn = make_dense(context.get(), layers, activation_of(kind));
                ASSERT_NE(ffn, nullptr);
                for (int64_t m : {1, 3, 17}) {
                    const std::vector<float> x = test::random_floats(size_t(m * shapes.k1), uint32_t(m), -2.0f, 2.0f);
                    tp_test::expect_close(dense_forward(ffn.get(), x, m, shapes.n2), tp_test::whole_mlp(mlp, x, m),
                                          concat("bits ", bits, kind == QJIT_MLP_SWIGLU ? " swiglu" : " gelu",
                                                 act_order ? " act-order" : "", " K ", shapes.k1, " m ", m));
                }
            }
}

INSTANTIATE_TEST_SUITE_P(Bits, DenseFfnBits, ::testing::Values(2, 3, 4, 8));

// ReLU has no oracle of its own in the fixtures: it is the layers' outputs with max(0, .) between.
TEST(FfnComposition, DenseReluIsTheLayersWithMaxBetween) {
    const ContextPtr context = f32_context();
    const Shapes shapes{72, 200, 44, 32};
    const MlpMatrices mlp = tp_test::random_mlp(QJIT_MLP_GELU, shapes, 4, false, 7);
    const FfnLayers layers = make_layers(context.get(), mlp);
    const FfnPtr ffn = make_dense(context.get(), layers, QJIT_FFN_RELU);
    const int64_t m = 5;
    const std::vector<float> x = test::random_floats(size_t(m * shapes.k1), 11, -2.0f, 2.0f);
    std::vector<float> hidden(size_t(m * shapes.n1)), expected(size_t(m * shapes.n2));
    ASSERT_EQ(qjit_linear_forward(layers.up.get(), x.data(), m, hidden.data()), QJIT_OK) << qjit_last_error();
    int negative = 0;
    for (float& v : hidden) {
        negative += v < 0;
        v = std::max(0.0f, v);
    }
    ASSERT_GT(negative, 0);  // the activation has something to do
    ASSERT_EQ(qjit_linear_forward(layers.down.get(), hidden.data(), m, expected.data()), QJIT_OK) << qjit_last_error();
    EXPECT_EQ(dense_forward(ffn.get(), x, m, shapes.n2), expected);
}

// Tensor parallelism on one rank is the Dense strategy over the same layers, bit for bit.
TEST(FfnComposition, ShardedOnOneRankEqualsDense) {
    const ContextPtr context = f32_context();
    const Shapes shapes{72, 192, 44, 32};
    for (qjit_mlp_kind kind : {QJIT_MLP_SWIGLU, QJIT_MLP_GELU}) {
        const MlpMatrices mlp = tp_test::random_mlp(kind, shapes, 4, /*act_order=*/false, 21 + kind);
        const FfnLayers layers = make_layers(context.get(), mlp);
        const FfnPtr dense = make_dense(context.get(), layers, activation_of(kind));
        const auto sharded = make_tp_mlp(context.get(), mlp, 0, 1, QJIT_TP_AWARE);
        test::ThreadWorld world(1);
        const qjit_communicator comm = world.communicator(0);
        for (int64_t m : {1, 6}) {
            const std::vector<float> x = test::random_floats(size_t(m * shapes.k1), uint32_t(m + 40), -2.0f, 2.0f);
            std::vector<float> y(size_t(m * shapes.n2));
            ASSERT_EQ(qjit_tp_mlp_forward(sharded.get(), &comm, x.data(), m, y.data(), nullptr), QJIT_OK)
                << qjit_last_error();
            EXPECT_EQ(y, dense_forward(dense.get(), x, m, shapes.n2)) << "m " << m;
        }
    }
}

// Three SwiGLU experts on five tokens: token 1 goes nowhere, token 2 to two experts, expert 2 gets
// no token.
TEST(FfnComposition, ExpertsAreTheWeightedSumOfEachExpertsDenseOutput) {
    const ContextPtr context = f32_context();
    const Shapes shapes{72, 200, 44, 32};
    std::vector<FfnLayers> layers;
    std::vector<FfnPtr> dense;
    std::vector<qjit_ffn_parts> parts;
    for (int e = 0; e < 3; ++e) {
        const MlpMatrices mlp = tp_test::random_mlp(QJIT_MLP_SWIGLU, shapes, 3 + e, e == 1, uint32_t(50 + 3 * e));
        layers.push_back(make_layers(context.get(), mlp));
        dense.push_back(make_dense(context.get(), layers.back(), QJIT_FFN_SWIGLU));
        parts.push_back({layers.back().gate.get(), layers.back().up.get(), layers.back().down.get()});
    }
    qjit_ffn* experts_raw = nullptr;
    ASSERT_EQ(qjit_ffn_create_experts(context.get(), parts.data(), 3, QJIT_FFN_SWIGLU, &experts_raw), QJIT_OK)
        << qjit_last_error();
    const FfnPtr experts(experts_raw);

    const int64_t m = 5, n = shapes.n2;
    const std::vector<float> x = test::random_floats(size_t(m * shapes.k1), 99, -2.0f, 2.0f);
    const std::vector<int32_t> rows0 = {3, 0, 2}, rows1 = {2, 4};
    const std::vector<float> weights0 = {0.5f, 1.25f, -0.75f};
    const qjit_ffn_route routes[] = {{rows0.data(), weights0.data(), 3}, {rows1.data(), nullptr, 2}, {nullptr, nullptr, 0}};
    std::vector<float> y(size_t(m * n), 12345.0f);  // overwritten, the token routed nowhere included
    ASSERT_EQ(qjit_ffn_forward_routed(experts.get(), routes, 3, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();

    std::vector<float> expected(size_t(m * n), 0.0f);
    std::vector<double> magnitude(expected.size(), 0.0);
    for (int e = 0; e < 2; ++e) {
        const std::vector<float> ye = dense_forward(dense[size_t(e)].get(), x, m, n);
        for (int64_t i = 0; i < routes[e].count; ++i) {
            const int64_t t = routes[e].rows[i];
            const float w = routes[e].weights ? routes[e].weights[i] : 1.0f;
            for (int64_t c = 0; c < n; ++c) {
                expected[size_t(t * n + c)] += w * ye[size_t(t * n + c)];
                magnitude[size_t(t * n + c)] += std::fabs(double(w) * ye[size_t(t * n + c)]);
            }
        }
    }
    for (int64_t c = 0; c < n; ++c) EXPECT_EQ(y[size_t(1 * n + c)], 0.0f) << "token 1, column " << c;
    // The same products on fewer rows; only the weighted sums may round differently (an FMA or not).
    std::vector<double> summation(magnitude.size());
    for (size_t i = 0; i < summation.size(); ++i) summation[i] = 4 * FLT_EPSILON * magnitude[i] + 1e-30;
    test::expect_within(y, expected, summation);

    // Every route empty: zeros.
    const qjit_ffn_route none[] = {{nullptr, nullptr, 0}, {nullptr, nullptr, 0}, {nullptr, nullptr, 0}};
    ASSERT_EQ(qjit_ffn_forward_routed(experts.get(), none, 3, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

// A flash FFN's layer as a handle runs what qjit_flash_ffn_forward runs on a flash FFN of the same
// file (two FFNs, so that neither sees the other's cache).
TEST(FfnComposition, FlashLayerIsTheFlashFfnsForward) {
    const ContextPtr context = f32_context();
    const test::FfnCase c{4, 32, false, FfnActivation::SwiGlu, true, 72, 96};
    const std::filesystem::path path = test::scratch_dir("ffn_composition_flash") / "ffn.qnf";
    test::write_random_file(path, test::header_of(c, 2), 5);
    qjit_flash_options options;
    qjit_flash_options_init(&options);
    options.dram_budget_bytes = int64_t(1) << 24;
    options.direct_io = 0;
    qjit_flash_ffn *direct = nullptr, *served = nullptr;
    ASSERT_EQ(qjit_flash_ffn_create(context.get(), path.c_str(), &options, &direct), QJIT_OK) << qjit_last_error();
    ASSERT_EQ(qjit_flash_ffn_create(context.get(), path.c_str(), &options, &served), QJIT_OK) << qjit_last_error();
    qjit_ffn* layer_raw = nullptr;
    EXPECT_STATUS(qjit_ffn_create_flash_layer(served, 2, &layer_raw), QJIT_ERROR_INVALID_ARGUMENT, "layer is 2");
    ASSERT_EQ(qjit_ffn_create_flash_layer(served, 1, &layer_raw), QJIT_OK) << qjit_last_error();
    const int64_t m = 3;
    const std::vector<float> x = test::random_floats(size_t(m * c.d_model), 8);
    std::vector<float> expected(x.size()), y(x.size(), 12345.0f);
    ASSERT_EQ(qjit_flash_ffn_forward(direct, 1, x.data(), m, expected.data(), nullptr, 0), QJIT_OK)
        << qjit_last_error();
    ASSERT_EQ(qjit_ffn_forward(layer_raw, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
    EXPECT_EQ(y, expected);
    EXPECT_NE(y, std::vector<float>(y.size(), 0.0f));
    qjit_ffn_destroy(layer_raw);  // before the flash FFN it borrows
    qjit_flash_ffn_destroy(direct);
    qjit_flash_ffn_destroy(served);
}

TEST(FfnComposition, BadArgumentsAreRefusedWithMessages) {
    const ContextPtr context = f32_context();
    const ContextPtr other = f32_context();
    const Shapes shapes{64, 96, 40, 32};
    const MlpMatrices mlp = tp_test::random_mlp(QJIT_MLP_SWIGLU, shapes, 4, false, 3);
    const FfnLayers l = make_layers(context.get(), mlp);
    const LinearPtr foreign_up(make_linear(other.get(), mlp.up).release());
    const LinearPtr wide_gate(make_linear(context.get(), tp_test::random_matrix(64, 128, 4, 32, false, 4)).release());
    qjit_context* c = context.get();
    qjit_ffn* ffn = nullptr;

    // Activations read as integers: out of range is refused before any use.
    for (int bad : {-1, 3, 99})
        EXPECT_STATUS(qjit_ffn_create_dense(c, l.gate.get(), l.up.get(), l.down.get(), qjit_ffn_activation(bad), &ffn),
                      QJIT_ERROR_INVALID_ARGUMENT, concat("activation is ", bad));
    EXPECT_EQ(ffn, nullptr);
    EXPECT_STATUS(qjit_ffn_create_dense(c, l.gate.get(), l.up.get(), l.down.get(), QJIT_FFN_SWIGLU, nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "ffn (the output pointer) is NULL");
    EXPECT_STATUS(qjit_ffn_create_dense(nullptr, l.gate.get(), l.up.get(), l.down.get(), QJIT_FFN_SWIGLU, &ffn),
                  QJIT_ERROR_INVALID_ARGUMENT, "context is NULL");
    EXPECT_STATUS(qjit_ffn_create_dense(c, nullptr, l.up.get(), l.down.get(), QJIT_FFN_SWIGLU, &ffn),
                  QJIT_ERROR_INVALID_ARGUMENT, "gate is NULL");
    EXPECT_STATUS(qjit_ffn_create_dense(c, l.gate.get(), nullptr, l.down.get(), QJIT_FFN_SWIGLU, &ffn),
                  QJIT_ERROR_INVALID_ARGUMENT, "up is NULL");
    EXPECT_STATUS(qjit_ffn_create_dense(c, l.gate.get(), l.up.get(), nullptr, QJIT_FFN_SWIGLU, &ffn),
                  QJIT_ERROR_INVALID_ARGUMENT, "down is NULL");
    EXPECT_STATUS(qjit_ffn_create_dense(c, l.gate.get(), l.up.get(), l.down.get(), QJIT_FFN_GELU, &ffn),
                  QJIT_ERROR_INVALID_ARGUMENT, "only a QJIT_FFN_SWIGLU FFN has a gate");
    EXPECT_STATUS(qjit_ffn_create_dense(c, l.gate.get(), foreign_up.get(), l.down.get(), QJIT_FFN_SWIGLU, &ffn),
                  QJIT_ERROR_INVALID_ARGUMENT, "up belongs to another context");
    EXPECT_STATUS(qjit_ffn_create_dense(c, wide_gate.get(), l.up.get(), l.down.get(), QJIT_FFN_SWIGLU, &ffn),
                  QJIT_ERROR_INVALID_ARGUMENT, "gate is K=64 N=128");
    // down takes up's outputs: here it is given up's inputs' width instead.
    EXPECT_STATUS(qjit_ffn_create_dense(c, nullptr, l.up.get(), l.up.get(), QJIT_FFN_GELU, &ffn),
                  QJIT_ERROR_INVALID_ARGUMENT, "down has K=64 inputs");
    EXPECT_EQ(ffn, nullptr);

    const qjit_ffn_parts good{l.gate.get(), l.up.get(), l.down.get()};
    const qjit_ffn_parts mismatched[] = {good, {wide_gate.get(), l.up.get(), l.down.get()}};
    EXPECT_STATUS(qjit_ffn_create_experts(c, mismatched, 2, QJIT_FFN_SWIGLU, &ffn), QJIT_ERROR_INVALID_ARGUMENT,
                  "experts[1].gate is K=64 N=128");
    EXPECT_STATUS(qjit_ffn_create_experts(c, &good, 0, QJIT_FFN_SWIGLU, &ffn), QJIT_ERROR_INVALID_ARGUMENT,
                  "num_experts is 0");
    EXPECT_STATUS(qjit_ffn_create_experts(c, nullptr, 1, QJIT_FFN_SWIGLU, &ffn), QJIT_ERROR_INVALID_ARGUMENT,
                  "experts is NULL");
    EXPECT_STATUS(qjit_ffn_create_experts(c, &good, 1, qjit_ffn_activation(-1), &ffn), QJIT_ERROR_INVALID_ARGUMENT,
                  "activation is -1");
    EXPECT_STATUS(qjit_ffn_create_flash_layer(nullptr, 0, &ffn), QJIT_ERROR_INVALID_ARGUMENT, "flash is NULL");

    // Forwards: shapes and routes.
    const FfnPtr dense = make_dense(c, l, QJIT_FFN_SWIGLU);
    qjit_ffn* experts_raw = nullptr;
    ASSERT_EQ(qjit_ffn_create_experts(c, &good, 1, QJIT_FFN_SWIGLU, &experts_raw), QJIT_OK) << qjit_last_error();
    const FfnPtr experts(experts_raw);
    const int64_t m = 4;
    const std::vector<float> x(size_t(m * 64), 0.5f);
    std::vector<float> y(size_t(m * 40));
    EXPECT_STATUS(qjit_ffn_forward(nullptr, x.data(), m, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "ffn is NULL");
    EXPECT_STATUS(qjit_ffn_forward(dense.get(), nullptr, m, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "x is NULL");
    EXPECT_STATUS(qjit_ffn_forward(dense.get(), x.data(), m, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "y is NULL");
    EXPECT_STATUS(qjit_ffn_forward(dense.get(), x.data(), 0, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "m is 0");
    std::vector<float> shared(size_t(m * 64 + m * 40));
    EXPECT_STATUS(qjit_ffn_forward(dense.get(), shared.data(), m, shared.data() + 10), QJIT_ERROR_INVALID_ARGUMENT,
                  "overlap");
    EXPECT_STATUS(qjit_ffn_forward(experts.get(), x.data(), m, y.data()), QJIT_ERROR_INVALID_ARGUMENT,
                  "qjit_ffn_forward_routed");
    const std::vector<int32_t> rows = {0, 2}, repeated = {1, 1}, too_big = {0, 4};
    const qjit_ffn_route route{rows.data(), nullptr, 2};
    EXPECT_STATUS(qjit_ffn_forward_routed(dense.get(), &route, 1, x.data(), m, y.data()), QJIT_ERROR_INVALID_ARGUMENT,
                  "not an experts FFN");
    EXPECT_STATUS(qjit_ffn_forward_routed(experts.get(), nullptr, 1, x.data(), m, y.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "routes is NULL");
    EXPECT_STATUS(qjit_ffn_forward_routed(experts.get(), &route, 2, x.data(), m, y.data()),
                  QJIT_ERROR_INVALID_ARGUMENT, "num_routes is 2");
    const qjit_ffn_route bad_routes[] = {{rows.data(), nullptr, -1}, {rows.data(), nullptr, m + 1},
                                         {nullptr, nullptr, 1},      {repeated.data(), nullptr, 2},
                                         {too_big.data(), nullptr, 2}};
    const char* messages[] = {"routes[0].count is -1", "routes[0].count is 5", "routes[0].rows is NULL",
                              "which the expert already has", "routes[0].rows[1] is 4"};
    for (int i = 0; i < 5; ++i)
        EXPECT_STATUS(qjit_ffn_forward_routed(experts.get(), &bad_routes[i], 1, x.data(), m, y.data()),
                      QJIT_ERROR_INVALID_ARGUMENT, messages[i]);
    EXPECT_EQ(qjit_ffn_forward_routed(experts.get(), &route, 1, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
    EXPECT_EQ(qjit_ffn_destroy(nullptr), QJIT_OK);
}

}  // namespace
}  // namespace qjit
