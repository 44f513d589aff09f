// Every enum a caller hands the C API (an options field or an argument) is checked before it is
// used: -1, INT32_MIN, INT32_MAX and the first value past the named ones are refused with
// QJIT_ERROR_INVALID_ARGUMENT and a message naming the field, and no handle is made. The
// *_MIN_ENUM / *_MAX_ENUM members make every int a valid value of each enum, so these calls are
// defined in C++ too (the clang UBSan build checks each load of an enum, -fsanitize=enum).
#include <gtest/gtest.h>

#include <climits>
#include <vector>

#include "test_support.hpp"
#include "tools/random_gptq.hpp"

namespace {

using qjit::test::ContextPtr;
using qjit::test::LinearPtr;

// Values that name nothing, for an enum whose named values end at `last`.
std::vector<int> unnamed_values(int last) { return {-1, INT_MIN, INT_MAX, last + 1}; }

template <typename Enum>
Enum as(int value) {
    return static_cast<Enum>(value);
}

TEST(CApiEnums, ContextOptions) {
    struct Field {
        const char* name;
        int last;
        void (*set)(qjit_context_options&, int);
    };
    const Field fields[] = {
        {"max_isa", QJIT_ISA_AVX512_VNNI, [](qjit_context_options& o, int v) { o.max_isa = as<qjit_isa>(v); }},
        {"activations", QJIT_ACTIVATIONS_INT8,
         [](qjit_context_options& o, int v) { o.activations = as<qjit_activations>(v); }},
        {"tuning_mode", QJIT_TUNING_EXHAUSTIVE,
         [](qjit_context_options& o, int v) { o.tuning_mode = as<qjit_tuning_mode>(v); }},
        {"cuda_dtype", QJIT_DTYPE_BF16, [](qjit_context_options& o, int v) { o.cuda_dtype = as<qjit_dtype>(v); }},
    };
    for (const Field& field : fields)
        for (const int value : unnamed_values(field.last)) {
            SCOPED_TRACE(std::string(field.name) + " = " + std::to_string(value));
            qjit_context_options options;
            qjit_context_options_init(&options);
            options.tuning_db_path = "";
            field.set(options, value);
            qjit_context* context = reinterpret_cast<qjit_context*>(0x1);
            EXPECT_STATUS(qjit_context_create(&options, &context), QJIT_ERROR_INVALID_ARGUMENT, field.name);
            EXPECT_EQ(context, nullptr);
        }
}

TEST(CApiEnums, QuantConfigAndLayout) {
    const ContextPtr context = qjit::test::make_test_context(1);
    const std::vector<float> weights = qjit::test::random_floats(64 * 8, 3);
    const auto create = [&](const qjit_quant_config& config, qjit_weight_layout layout) {
        qjit_linear* layer = reinterpret_cast<qjit_linear*>(0x1);
        const qjit_status status =
            qjit_linear_create_from_f32(context.get(), &config, 64, 8, weights.data(), layout, &layer);
        if (status == QJIT_OK) qjit_linear_destroy(layer);
        else EXPECT_EQ(layer, nullptr);
        return status;
    };
    for (const int value : unnamed_values(QJIT_QUANT_MIXED)) {
        qjit_quant_config config;
        qjit_quant_config_init(&config);
        config.method = as<qjit_quant_method>(value);
        EXPECT_STATUS(create(config, QJIT_LAYOUT_K_BY_N), QJIT_ERROR_INVALID_ARGUMENT, "method");
    }
    for (const int value : unnamed_values(QJIT_DTYPE_BF16)) {
        qjit_quant_config config;
        qjit_quant_config_init(&config);
        config.scale_dtype = as<qjit_dtype>(value);
        EXPECT_STATUS(create(config, QJIT_LAYOUT_K_BY_N), QJIT_ERROR_INVALID_ARGUMENT, "scale_dtype");
    }
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    for (const int value : unnamed_values(QJIT_LAYOUT_N_BY_K))
        EXPECT_STATUS(create(config, as<qjit_weight_layout>(value)), QJIT_ERROR_INVALID_ARGUMENT, "layout");
}

TEST(CApiEnums, GptqTensors) {
    const ContextPtr context = qjit::test::make_test_context(1);
    qjit_tools::GptqTensors tensors;
    qjit_tools::random_gptq(64, 8, 4, 32, 7, &tensors);
    const auto create = [&](const qjit_gptq_tensors& view) {
        qjit_linear* layer = reinterpret_cast<qjit_linear*>(0x1);
        const qjit_status status = qjit_linear_create_from_gptq(context.get(), 64, 8, &view, &layer);
        if (status == QJIT_OK) qjit_linear_destroy(layer);
        else EXPECT_EQ(layer, nullptr);
        return status;
    };
    for (const int value : unnamed_values(QJIT_DTYPE_BF16)) {
        qjit_gptq_tensors view = tensors.view;
        view.scale_dtype = as<qjit_dtype>(value);
        EXPECT_STATUS(create(view), QJIT_ERROR_INVALID_ARGUMENT, "scale_dtype");
    }
    for (const int value : unnamed_values(QJIT_GGUF_BLOCKS)) {
        qjit_gptq_tensors view = tensors.view;
        view.checkpoint_format = as<qjit_gptq_format>(value);
        EXPECT_STATUS(create(view), QJIT_ERROR_INVALID_ARGUMENT, "checkpoint_format");
    }
}

TEST(CApiEnums, ForwardOnDeviceAndDtype) {
    const ContextPtr context = qjit::test::make_test_context(1);
    const std::vector<float> weights = qjit::test::random_floats(64 * 8, 5);
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_create_from_f32(context.get(), &config, 64, 8, weights.data(), QJIT_LAYOUT_K_BY_N, &raw),
              QJIT_OK);
    const LinearPtr layer(raw);
    std::vector<float> x(64, 0.5f), y(8);
    for (const int value : unnamed_values(QJIT_DEVICE_CUDA))
        EXPECT_STATUS(qjit_linear_forward_on(layer.get(), as<qjit_device>(value), x.data(), y.data(), 1,
                                             QJIT_DTYPE_F32, nullptr),
                      QJIT_ERROR_INVALID_ARGUMENT, "device");
    for (const int value : unnamed_values(QJIT_DTYPE_BF16))
        EXPECT_STATUS(qjit_linear_forward_on(layer.get(), QJIT_DEVICE_CPU, x.data(), y.data(), 1, as<qjit_dtype>(value),
                                             nullptr),
                      QJIT_ERROR_INVALID_ARGUMENT, "dtype");
}

TEST(CApiEnums, RankPolicyAndRole) {
    const std::vector<float> weights = qjit::test::random_floats(32 * 16, 9);
    qjit_rank_matrix matrix{32, 16, QJIT_ROLE_DENSE, weights.data(), 1.0};
    int rank = -1;
    for (const int value : unnamed_values(QJIT_RANK_FREQUENCY))
        EXPECT_STATUS(qjit_assign_ranks(as<qjit_rank_policy>(value), 4.0, &matrix, 1, &rank), QJIT_ERROR_INVALID_ARGUMENT,
                      "policy");
    for (const int value : unnamed_values(QJIT_ROLE_EXPERT)) {
        matrix.role = as<qjit_matrix_role>(value);
        EXPECT_STATUS(qjit_assign_ranks(QJIT_RANK_DENSE, 4.0, &matrix, 1, &rank), QJIT_ERROR_INVALID_ARGUMENT, "role");
    }
}

TEST(CApiEnums, StatusStrings) {
    for (const int value : unnamed_values(QJIT_ERROR_STALE))
        EXPECT_STREQ(qjit_status_string(as<qjit_status>(value)), "unknown status");
}

}  // namespace
