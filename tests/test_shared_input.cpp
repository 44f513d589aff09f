// qjit_linear_forward_shared_input: layers that read the same inputs in one call. Each output equals
// the layer's own forward, bit for bit, whatever runs it: x86 JIT layers in one dispatch, with
// act-order and a K split (layers of one format sharing one activation prologue), portable layers
// and layers with outliers one after another; f32 and int8 activations; one row and many. Bad
// arguments are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qjit/qjit.h"
#include "runtime/linear_layer.hpp"
#include "test_support.hpp"
#include "tools/random_gptq.hpp"

namespace qjit {
namespace {

using test::ContextPtr;
using test::LinearPtr;

LinearPtr make_layer(qjit_context* context, qjit_quant_method method, int bits, int group, int64_t k, int64_t n,
                     uint32_t seed) {
    const std::vector<float> weights = test::random_floats(size_t(k * n), seed);
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.method = method;
    config.bits = bits;
    config.group_size = group;
    if (method == QJIT_QUANT_MIXED) config.outlier_fraction = 0.005;
    qjit_linear* layer = nullptr;
    EXPECT_EQ(qjit_linear_create_from_f32(context, &config, k, n, weights.data(), QJIT_LAYOUT_K_BY_N, &layer), QJIT_OK)
        << qjit_last_error();
    return LinearPtr(layer);
}

LinearPtr make_act_order_layer(qjit_context* context, int64_t k, int64_t n, uint32_t seed) {
    qjit_tools::GptqTensors tensors;
    qjit_tools::random_gptq(k, n, 4, 32, seed, &tensors);
    std::vector<int32_t> g_idx(static_cast<size_t>(k));
    for (int64_t r = 0; r < k; ++r) g_idx[size_t(r)] = int32_t(r / 32);
    std::shuffle(g_idx.begin(), g_idx.end(), std::mt19937(seed));  // GPTQ's desc_act order
    tensors.view.g_idx = g_idx.data();
    qjit_linear* layer = nullptr;
    EXPECT_EQ(qjit_linear_create_from_gptq(context, k, n, &tensors.view, &layer), QJIT_OK) << qjit_last_error();
    return LinearPtr(layer);
}

void expect_same_as_separate_calls(const std::vector<qjit_linear*>& layers, int64_t m, const std::string& what) {
    const int64_t k = layers[0]->params.k;
    const std::vector<float> x = test::random_floats(size_t(m * k), uint32_t(m));
    std::vector<std::vector<float>> shared(layers.size()), separate(layers.size());
    std::vector<float*> ys;
    for (size_t i = 0; i < layers.size(); ++i) {
        shared[i].assign(size_t(m * layers[i]->params.n), -1.0f);
        separate[i].resize(shared[i].size());
        ys.push_back(shared[i].data());
        ASSERT_EQ(qjit_linear_forward(layers[i], x.data(), m, separate[i].data()), QJIT_OK) << qjit_last_error();
    }
    ASSERT_EQ(qjit_linear_forward_shared_input(layers.data(), int(layers.size()), x.data(), m, ys.data()), QJIT_OK)
        << qjit_last_error();
    for (size_t i = 0; i < layers.size(); ++i)
        EXPECT_EQ(std::memcmp(shared[i].data(), separate[i].data(), shared[i].size() * sizeof(float)), 0)
            << what << ", layer " << i << ", m " << m;
}

TEST(SharedInput, EveryOutputIsTheLayersOwnForward) {
    for (qjit_isa isa : {QJIT_ISA_AUTO, QJIT_ISA_PORTABLE})
        for (qjit_activations activations : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8}) {
            const ContextPtr context = test::make_test_context(2, isa, activations);
            const int64_t k = 300;  // not a multiple of a group or a panel
            LinearPtr q = make_layer(context.get(), QJIT_QUANT_RTN, 4, 32, k, 200, 1);
            LinearPtr kv = make_layer(context.get(), QJIT_QUANT_RTN, 3, 128, k, 72, 2);
            LinearPtr v = make_act_order_layer(context.get(), k, 72, 3);
            LinearPtr outliers = make_layer(context.get(), QJIT_QUANT_MIXED, 4, 64, k, 40, 4);
            // q's format at another width: one activation prologue serves both (after kv's own).
            LinearPtr q_twin = make_layer(context.get(), QJIT_QUANT_RTN, 4, 32, k, 56, 5);
            const std::string what = std::string(isa == QJIT_ISA_AUTO ? "auto" : "portable") + " ISA, " +
                                     (activations == QJIT_ACTIVATIONS_F32 ? "f32" : "int8") + " activations";
            for (int64_t m : {1, 5, 33}) {
                expect_same_as_separate_calls({q.get(), kv.get(), v.get()}, m, what);
                expect_same_as_separate_calls({outliers.get(), q.get()}, m, what + ", outliers first");
                expect_same_as_separate_calls({q.get(), kv.get(), q_twin.get()}, m, what + ", a shared prologue");
            }
        }
}

TEST(SharedInput, BadArgumentsAreNamed) {
    const ContextPtr context = test::make_test_context(2), other = test::make_test_context(1);
    LinearPtr a = make_layer(context.get(), QJIT_QUANT_RTN, 4, 32, 64, 16, 5);
    LinearPtr b = make_layer(context.get(), QJIT_QUANT_RTN, 4, 32, 96, 16, 6);
    LinearPtr c = make_layer(other.get(), QJIT_QUANT_RTN, 4, 32, 64, 16, 7);
    std::vector<float> x(64), y0(16), y1(16);
    float* ys[] = {y0.data(), y1.data()};
    float* same[] = {y0.data(), y0.data()};
    auto refused = [&](std::vector<qjit_linear*> layers, float* const* outputs, int count, const char* named) {
        EXPECT_EQ(qjit_linear_forward_shared_input(layers.empty() ? nullptr : layers.data(), count, x.data(), 1, outputs),
                  QJIT_ERROR_INVALID_ARGUMENT)
            << named;
        EXPECT_NE(std::string(qjit_last_error()).find(named), std::string::npos) << qjit_last_error();
    };
    refused({}, ys, 1, "layers is NULL");
    refused({a.get(), a.get()}, nullptr, 2, "ys is NULL");
    refused({a.get()}, ys, 0, "count is 0");
    refused({a.get(), b.get()}, ys, 2, "layers[1] has K = 96");
    refused({a.get(), c.get()}, ys, 2, "another context");
    refused({a.get(), nullptr}, ys, 2, "layers[1] is NULL");
    refused({a.get(), a.get()}, same, 2, "ys[0] and ys[1] overlap");
    float* into_x[] = {y0.data(), x.data()};
    refused({a.get(), a.get()}, into_x, 2, "x and y overlap");
}

}  // namespace
}  // namespace qjit
