// Every C API call with bad arguments returns the documented status and a message naming the
// argument, and never crashes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <cmath>
#include <limits>
#include <thread>

#include "test_support.hpp"

namespace {

using qjit::test::ContextPtr;
using qjit::test::LinearPtr;

class CApiTest : public ::testing::Test {
protected:
    void SetUp() override {
        context_ = qjit::test::make_test_context();
        qjit_quant_config_init(&config_);
        weights_ = qjit::test::random_floats(size_t(kK * kN), 1);
        qjit_linear* raw = nullptr;
        ASSERT_EQ(qjit_linear_create_from_f32(context_.get(), &config_, kK, kN, weights_.data(), QJIT_LAYOUT_K_BY_N,
                                              &raw),
                  QJIT_OK);
        layer_.reset(raw);
    }
    qjit_status create(const qjit_quant_config& config, int64_t k = kK, int64_t n = kN) {
        qjit_linear* raw = reinterpret_cast<qjit_linear*>(0x1);  // must be reset to NULL on failure
        const qjit_status status =
            qjit_linear_create_from_f32(context_.get(), &config, k, n, weights_.data(), QJIT_LAYOUT_K_BY_N, &raw);
        if (status == QJIT_OK) qjit_linear_destroy(raw);
        else EXPECT_EQ(raw, nullptr);
        return status;
    }

    static constexpr int64_t kK = 200, kN = 24;
    ContextPtr context_;
    qjit_quant_config config_;
    std::vector<float> weights_;
    LinearPtr layer_;
};

TEST(CApiLibrary, VersionAndStatusStrings) {
    EXPECT_STREQ(qjit_version(), "0.1.0");
    EXPECT_STREQ(qjit_status_string(QJIT_OK), "ok");
    EXPECT_STREQ(qjit_status_string(QJIT_ERROR_CORRUPT_DATA), "corrupt data");
    EXPECT_STREQ(qjit_status_string(static_cast<qjit_status>(99)), "unknown status");
}

TEST(CApiContext, BadOptions) {
    EXPECT_STATUS(qjit_context_create(nullptr, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "context");
    qjit_context_options options;
    qjit_context_options_init(&options);
    qjit_context* context = nullptr;
    options.num_threads = -1;
    EXPECT_STATUS(qjit_context_create(&options, &context), QJIT_ERROR_INVALID_ARGUMENT, "num_threads");
    EXPECT_EQ(context, nullptr);
    qjit_context_options_init(&options);
    options.max_isa = static_cast<qjit_isa>(42);
    EXPECT_STATUS(qjit_context_create(&options, &context), QJIT_ERROR_INVALID_ARGUMENT, "max_isa");
    EXPECT_STATUS(qjit_context_num_threads(nullptr, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "context");
    EXPECT_EQ(qjit_context_destroy(nullptr), QJIT_OK);
}

TEST(CApiContext, MaxIsaEnvironmentVariableIsChecked) {
    setenv("QJIT_MAX_ISA", "avx9000", 1);
    qjit_context* context = nullptr;
    EXPECT_STATUS(qjit_context_create(nullptr, &context), QJIT_ERROR_INVALID_ARGUMENT, "QJIT_MAX_ISA");
    setenv("QJIT_MAX_ISA", "avx2", 1);
    EXPECT_EQ(qjit_context_create(nullptr, &context), QJIT_OK) << qjit_last_error();
    qjit_context_destroy(context);
    unsetenv("QJIT_MAX_ISA");
}

TEST(CApiContext, DefaultsToEveryCoreAndSucceedsQuietly) {
    std::thread([] {  // a thread of its own: no earlier failure on it
        qjit_context* context = nullptr;
        ASSERT_EQ(qjit_context_create(nullptr, &context), QJIT_OK);
        EXPECT_STREQ(qjit_last_error(), "");
        int threads = 0;
        EXPECT_EQ(qjit_context_num_threads(context, &threads), QJIT_OK);
        EXPECT_GE(threads, 1);
        qjit_context_destroy(context);
    }).join();
}

// The header promises the thread's last failure: a later successful call does not clear it.
TEST(CApiContext, LastErrorSurvivesLaterSuccessfulCalls) {
    std::thread([] {
        EXPECT_EQ(qjit_linear_forward(nullptr, nullptr, 1, nullptr), QJIT_ERROR_INVALID_ARGUMENT);
        const std::string failure = qjit_last_error();
        EXPECT_NE(failure, "");
        qjit_context* context = nullptr;
        ASSERT_EQ(qjit_context_create(nullptr, &context), QJIT_OK);
        qjit_context_destroy(context);
        EXPECT_EQ(std::string(qjit_last_error()), failure);
    }).join();
}

TEST_F(CApiTest, CreateFromF32RejectsBadArguments) {
    qjit_linear* raw = nullptr;
    EXPECT_STATUS(qjit_linear_create_from_f32(nullptr, &config_, kK, kN, weights_.data(), QJIT_LAYOUT_K_BY_N, &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "context");
    EXPECT_STATUS(qjit_linear_create_from_f32(context_.get(), nullptr, kK, kN, weights_.data(), QJIT_LAYOUT_K_BY_N,
                                              &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "config");
    EXPECT_STATUS(qjit_linear_create_from_f32(context_.get(), &config_, kK, kN, nullptr, QJIT_LAYOUT_K_BY_N, &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "weights");
    EXPECT_STATUS(qjit_linear_create_from_f32(context_.get(), &config_, kK, kN, weights_.data(), QJIT_LAYOUT_K_BY_N,
                                              nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "layer");
    EXPECT_STATUS(qjit_linear_create_from_f32(context_.get(), &config_, kK, kN, weights_.data(),
                                              static_cast<qjit_weight_layout>(7), &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "layout");

    qjit_quant_config bad = config_;
    bad.bits = 7;
    EXPECT_STATUS(create(bad), QJIT_ERROR_INVALID_ARGUMENT, "bits");
    bad = config_;
    bad.group_size = 0;
    EXPECT_STATUS(create(bad), QJIT_ERROR_INVALID_ARGUMENT, "group_size");
    bad.group_size = 100;
    EXPECT_STATUS(create(bad), QJIT_ERROR_INVALID_ARGUMENT, "group_size");
    bad = config_;
    bad.scale_dtype = static_cast<qjit_dtype>(3);
    EXPECT_STATUS(create(bad), QJIT_ERROR_INVALID_ARGUMENT, "scale_dtype");
    EXPECT_STATUS(create(config_, 0, kN), QJIT_ERROR_INVALID_ARGUMENT, "k");
    EXPECT_STATUS(create(config_, kK, -3), QJIT_ERROR_INVALID_ARGUMENT, "n");
    EXPECT_STATUS(create(config_, int64_t(1) << 40, kN), QJIT_ERROR_INVALID_ARGUMENT, "k");
}

TEST_F(CApiTest, CreateFromF32RejectsNonFiniteWeights) {
    weights_[5 * kN + 3] = std::nanf("");
    EXPECT_STATUS(create(config_), QJIT_ERROR_INVALID_ARGUMENT, "weights[5][3]");
}

TEST_F(CApiTest, ForwardRejectsBadArguments) {
    std::vector<float> x(3 * kK, 1.0f), y(3 * kN);
    EXPECT_STATUS(qjit_linear_forward(nullptr, x.data(), 3, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "layer");
    EXPECT_STATUS(qjit_linear_forward(layer_.get(), nullptr, 3, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "x");
    EXPECT_STATUS(qjit_linear_forward(layer_.get(), x.data(), 3, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "y");
    EXPECT_STATUS(qjit_linear_forward(layer_.get(), x.data(), 0, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "m");
    EXPECT_STATUS(qjit_linear_forward(layer_.get(), x.data(), -1, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "m");
    EXPECT_STATUS(qjit_linear_forward(layer_.get(), x.data(), 1, x.data() + 10), QJIT_ERROR_INVALID_ARGUMENT,
                  "overlap");
    // Row counts past the documented limits are named as such (m = 2^40 used to read as an overlap).
    EXPECT_STATUS(qjit_linear_forward(layer_.get(), x.data(), int64_t(1) << 40, y.data()), QJIT_ERROR_INVALID_ARGUMENT,
                  "2^31 - 1");
    const std::vector<float> wide_weights = qjit::test::random_floats(1024 * 8, 2);
    qjit_linear* wide = nullptr;  // K = 1024: 2^31 - 1 rows are more than 2^40 activations
    ASSERT_EQ(qjit_linear_create_from_f32(context_.get(), &config_, 1024, 8, wide_weights.data(), QJIT_LAYOUT_K_BY_N,
                                          &wide),
              QJIT_OK);
    qjit::test::LinearPtr wide_layer(wide);
    EXPECT_STATUS(qjit_linear_forward(wide, x.data(), (int64_t(1) << 31) - 1, y.data()), QJIT_ERROR_INVALID_ARGUMENT,
                  "2^40 activations");
    EXPECT_EQ(qjit_linear_forward(layer_.get(), x.data(), 3, y.data()), QJIT_OK);
}

// The device-neutral forward: on the CPU it is qjit_linear_forward, bit for bit; a device the layer
// has no copy on, an unknown device and a dtype the device does not take are named.
TEST_F(CApiTest, ForwardOnADeviceMatchesTheDevicesOwnCall) {
    const std::vector<float> x = qjit::test::random_floats(size_t(3 * kK), 4);
    std::vector<float> y_plain(3 * kN), y_on(3 * kN, -1.0f);
    ASSERT_EQ(qjit_linear_forward(layer_.get(), x.data(), 3, y_plain.data()), QJIT_OK);
    ASSERT_EQ(qjit_linear_forward_on(layer_.get(), QJIT_DEVICE_CPU, x.data(), y_on.data(), 3, QJIT_DTYPE_F32, nullptr),
              QJIT_OK)
        << qjit_last_error();
    EXPECT_EQ(y_on, y_plain);
    EXPECT_STATUS(qjit_linear_forward_on(layer_.get(), QJIT_DEVICE_CUDA, x.data(), y_on.data(), 3, QJIT_DTYPE_F16,
                                         nullptr),
                  QJIT_ERROR_NO_DEVICE, "no CUDA weights");
    EXPECT_STATUS(qjit_linear_forward_on(layer_.get(), qjit_device(7), x.data(), y_on.data(), 3, QJIT_DTYPE_F32,
                                         nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "device is 7");
    EXPECT_STATUS(qjit_linear_forward_on(layer_.get(), QJIT_DEVICE_CPU, x.data(), y_on.data(), 3, QJIT_DTYPE_F16,
                                         nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "QJIT_DTYPE_F32");
    EXPECT_STATUS(qjit_linear_forward_on(layer_.get(), QJIT_DEVICE_CPU, x.data(), y_on.data(), 0, QJIT_DTYPE_F32,
                                         nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "m");
    EXPECT_STATUS(qjit_linear_forward_on(nullptr, QJIT_DEVICE_CPU, x.data(), y_on.data(), 3, QJIT_DTYPE_F32, nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "layer");
}

// Shapes past the documented limits are refused before anything is allocated for them (K = N =
// 2^31 - 1 used to attempt a multi-petabyte allocation). The weight pointers are never read.
TEST_F(CApiTest, HugeShapesAreRefusedUpFront) {
    const int64_t huge = (int64_t(1) << 31) - 1;
    qjit_linear* raw = nullptr;
    EXPECT_STATUS(qjit_linear_create_from_f32(context_.get(), &config_, huge, huge, weights_.data(), QJIT_LAYOUT_K_BY_N,
                                              &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "2^36 weights");
    EXPECT_STATUS(qjit_linear_create_from_f32(context_.get(), &config_, int64_t(1) << 20, int64_t(1) << 17,
                                              weights_.data(), QJIT_LAYOUT_N_BY_K, &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "2^36 weights");
    const int32_t word = 0;
    const uint16_t scale = 0x3c00;
    qjit_gptq_tensors tensors{};
    tensors.bits = 4;
    tensors.group_size = 128;
    tensors.qweight = &word;
    tensors.qzeros = &word;
    tensors.scales = &scale;
    tensors.scale_dtype = QJIT_DTYPE_F16;
    tensors.checkpoint_format = QJIT_GPTQ_V2;
    EXPECT_STATUS(qjit_linear_create_from_gptq(context_.get(), huge, huge, &tensors, &raw), QJIT_ERROR_INVALID_ARGUMENT,
                  "2^36 weights");
    EXPECT_STATUS(qjit_linear_create_from_f32(context_.get(), &config_, huge + 1, 1, weights_.data(), QJIT_LAYOUT_K_BY_N,
                                              &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "2^31 - 1");
    EXPECT_EQ(raw, nullptr);
}

// Non-finite activations reach the outputs they feed, on every path (docs/reliability.md, "Non-finite
// values"): a row with a NaN gives NaN in every output; a row with an infinity gives non-finite
// outputs (the exact paths: +-Inf or NaN by IEEE rules; the int8 path: NaN). Other rows of the
// same call are unaffected. K = 300 is not a multiple of the group or the vector width.
TEST(CApiNonFinite, ActivationsPropagateOnEveryPath) {
    constexpr int64_t k = 300, n = 37, m = 5;
    const std::vector<float> weights = qjit::test::random_floats(size_t(k * n), 8);
    std::vector<float> x = qjit::test::random_floats(size_t(m * k), 9);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    x[1 * k + 7] = nan;                                        // row 1: one NaN
    x[2 * k + 299] = inf;                                      // row 2: one +Inf, in the last, partial group
    std::fill(x.begin() + 3 * k, x.begin() + 4 * k, nan);      // row 3: all NaN
    x[4 * k + 0] = -inf;                                       // row 4: -Inf and +Inf
    x[4 * k + 150] = inf;
    for (const qjit_isa isa : {QJIT_ISA_PORTABLE, QJIT_ISA_AVX2, QJIT_ISA_AVX512_VNNI})
        for (const qjit_activations path : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8}) {
            SCOPED_TRACE(testing::Message() << "isa cap " << int(isa) << ", activations " << int(path));
            qjit::test::ContextPtr context = qjit::test::make_test_context(2, isa, path);
            qjit_quant_config config;
            qjit_quant_config_init(&config);
            qjit_linear* raw = nullptr;
            ASSERT_EQ(qjit_linear_create_from_f32(context.get(), &config, k, n, weights.data(), QJIT_LAYOUT_K_BY_N, &raw),
                      QJIT_OK);
            qjit::test::LinearPtr layer(raw);
            std::vector<float> y(static_cast<size_t>(m * n)), clean(static_cast<size_t>(n));
            ASSERT_EQ(qjit_linear_forward(raw, x.data(), m, y.data()), QJIT_OK);
            ASSERT_EQ(qjit_linear_forward(raw, x.data(), 1, clean.data()), QJIT_OK);
            for (int64_t c = 0; c < n; ++c) {
                EXPECT_EQ(y[size_t(c)], clean[size_t(c)]) << "clean row, column " << c;
                EXPECT_TRUE(std::isfinite(y[size_t(c)])) << "column " << c;
                EXPECT_TRUE(std::isnan(y[size_t(1 * n + c)])) << "row 1, column " << c << ": " << y[size_t(1 * n + c)];
                EXPECT_FALSE(std::isfinite(y[size_t(2 * n + c)])) << "row 2, column " << c << ": " << y[size_t(2 * n + c)];
                EXPECT_TRUE(std::isnan(y[size_t(3 * n + c)])) << "row 3, column " << c << ": " << y[size_t(3 * n + c)];
                EXPECT_FALSE(std::isfinite(y[size_t(4 * n + c)])) << "row 4, column " << c << ": " << y[size_t(4 * n + c)];
            }
        }
}

TEST_F(CApiTest, QueriesRejectNullAndReportTheLayer) {
    qjit_linear_info info;
    const char* description = nullptr;
    EXPECT_STATUS(qjit_linear_get_info(nullptr, &info), QJIT_ERROR_INVALID_ARGUMENT, "layer");
    EXPECT_STATUS(qjit_linear_get_info(layer_.get(), nullptr), QJIT_ERROR_INVALID_ARGUMENT, "info");
    EXPECT_STATUS(qjit_linear_describe(nullptr, &description), QJIT_ERROR_INVALID_ARGUMENT, "layer");
    EXPECT_STATUS(qjit_linear_describe(layer_.get(), nullptr), QJIT_ERROR_INVALID_ARGUMENT, "description");
    EXPECT_STATUS(qjit_linear_dequantize(nullptr, weights_.data()), QJIT_ERROR_INVALID_ARGUMENT, "layer");
    EXPECT_STATUS(qjit_linear_dequantize(layer_.get(), nullptr), QJIT_ERROR_INVALID_ARGUMENT, "weights");
    EXPECT_EQ(qjit_linear_destroy(nullptr), QJIT_OK);

    ASSERT_EQ(qjit_linear_get_info(layer_.get(), &info), QJIT_OK);
    EXPECT_EQ(info.k, kK);
    EXPECT_EQ(info.n, kN);
    EXPECT_EQ(info.bits, 4);
    EXPECT_EQ(info.group_size, 128);
    EXPECT_EQ(info.symmetric, 0);
    EXPECT_EQ(info.act_order, 0);
    ASSERT_EQ(qjit_linear_describe(layer_.get(), &description), QJIT_OK);
    // The kernel name first, starting with the format's name, as the kernel key does.
    EXPECT_EQ(std::string(description).rfind("q4g128_asym_gemm_", 0), 0u) << description;
    EXPECT_NE(std::string(description).find(" format=q4g128_asym "), std::string::npos) << description;
    EXPECT_NE(std::string(description).find(" K=200 N=24 "), std::string::npos) << description;
    qjit_linear_tuning tuning{};
    ASSERT_EQ(qjit_linear_get_tuning(layer_.get(), &tuning), QJIT_OK);
    if (tuning.source != QJIT_TILING_PORTABLE)
        EXPECT_EQ(std::string(tuning.kernel_key).rfind("q4g128_asym_gemm_", 0), 0u) << tuning.kernel_key;
}

TEST_F(CApiTest, PortableLayerReportsItsBytes) {
    ContextPtr context = qjit::test::make_test_context(2, QJIT_ISA_PORTABLE);
    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_create_from_f32(context.get(), &config_, kK, kN, weights_.data(), QJIT_LAYOUT_K_BY_N, &raw),
              QJIT_OK);
    LinearPtr layer(raw);
    qjit_linear_info info;
    ASSERT_EQ(qjit_linear_get_info(layer.get(), &info), QJIT_OK);
    // 200 rows -> 7 blocks of 32 rows x 4 words x one panel of 64 columns; 2 groups of 24 f32
    // scales and u16 zeros.
    EXPECT_EQ(info.weight_bytes, 7 * 4 * 64 * 4 + 2 * 24 * (4 + 2));
    const char* description = nullptr;
    ASSERT_EQ(qjit_linear_describe(layer.get(), &description), QJIT_OK);
    EXPECT_EQ(std::string(description).rfind("q4g128_asym_gemm_f32_portable", 0), 0u) << description;
}

TEST_F(CApiTest, SaveAndLoadRejectBadArguments) {
    qjit_linear* raw = nullptr;
    EXPECT_STATUS(qjit_linear_save(nullptr, "x.qjit"), QJIT_ERROR_INVALID_ARGUMENT, "layer");
    EXPECT_STATUS(qjit_linear_save(layer_.get(), nullptr), QJIT_ERROR_INVALID_ARGUMENT, "path");
    EXPECT_STATUS(qjit_linear_save(layer_.get(), ""), QJIT_ERROR_INVALID_ARGUMENT, "path");
    EXPECT_STATUS(qjit_linear_save(layer_.get(), "/nonexistent-dir/x.qjit"), QJIT_ERROR_IO, "/nonexistent-dir");
    EXPECT_STATUS(qjit_linear_load(nullptr, "x.qjit", &raw), QJIT_ERROR_INVALID_ARGUMENT, "context");
    EXPECT_STATUS(qjit_linear_load(context_.get(), nullptr, &raw), QJIT_ERROR_INVALID_ARGUMENT, "path");
    EXPECT_STATUS(qjit_linear_load(context_.get(), "x.qjit", nullptr), QJIT_ERROR_INVALID_ARGUMENT, "layer");
    EXPECT_STATUS(qjit_linear_load(context_.get(), "/nonexistent-dir/x.qjit", &raw), QJIT_ERROR_IO,
                  "/nonexistent-dir");
    EXPECT_EQ(raw, nullptr);
}

TEST_F(CApiTest, GptqCreateRejectsNullTensors) {
    qjit_linear* raw = nullptr;
    EXPECT_STATUS(qjit_linear_create_from_gptq(context_.get(), kK, kN, nullptr, &raw), QJIT_ERROR_INVALID_ARGUMENT,
                  "tensors");
    qjit_gptq_tensors tensors{};
    EXPECT_STATUS(qjit_linear_create_from_gptq(nullptr, kK, kN, &tensors, &raw), QJIT_ERROR_INVALID_ARGUMENT,
                  "context");
    EXPECT_STATUS(qjit_linear_create_from_gptq(context_.get(), 0, kN, &tensors, &raw), QJIT_ERROR_INVALID_ARGUMENT,
                  "k");
}

TEST_F(CApiTest, LastErrorIsPerThread) {
    EXPECT_NE(qjit_linear_forward(nullptr, nullptr, 1, nullptr), QJIT_OK);
    std::string other_thread_message = "unset";
    std::thread([&] { other_thread_message = qjit_last_error(); }).join();
    EXPECT_EQ(other_thread_message, "");
    EXPECT_NE(std::string(qjit_last_error()), "");
}

TEST_F(CApiTest, ConcurrentForwardsOnOneLayerAgree) {
    // Large enough that each forward goes through the thread pool, which the callers then contend for.
    const int64_t k = 512, n = 256, m = 5;
    const std::vector<float> weights = qjit::test::random_floats(size_t(k * n), 8);
    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_create_from_f32(context_.get(), &config_, k, n, weights.data(), QJIT_LAYOUT_K_BY_N, &raw),
              QJIT_OK);
    LinearPtr layer(raw);
    const std::vector<float> x = qjit::test::random_floats(size_t(m * k), 9);
    std::vector<float> expected(size_t(m * n));
    ASSERT_EQ(qjit_linear_forward(layer.get(), x.data(), m, expected.data()), QJIT_OK);
    std::vector<std::vector<float>> results(4, std::vector<float>(size_t(m * n)));
    std::vector<std::thread> threads;
    for (auto& result : results)
        threads.emplace_back([&] {
            for (int i = 0; i < 20; ++i) qjit_linear_forward(layer.get(), x.data(), m, result.data());
        });
    for (auto& t : threads) t.join();
    for (const auto& result : results) EXPECT_EQ(result, expected);
}

}  // namespace
