// The CUDA kernels on a device against the oracle: every variant of tests/cuda_variants.hpp, on
// shapes whose K and N are not multiples of the group, the tile or the vector width, with and
// without act-order, at batches 1 .. 64 (and beyond, for the GEMM's row blocks). Skipped cleanly
// where there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <numeric>
#include <random>
#include <thread>

#include "cuda_oracle.hpp"
#include "mixed_matrix.hpp"
#include "runtime/cuda/nvrtc_compiler.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/cuda_layer.hpp"
#include "base/error.hpp"
#include "base/half.hpp"
#include "format/cuda_weights.hpp"
#include "format/low_rank.hpp"
#include "format/reference.hpp"
#include "format/tp_shards.hpp"
#include "runtime/linear_layer.hpp"
#include "test_support.hpp"
#include "tp_mlp_fixtures.hpp"
#include "tuner/cuda_search.hpp"
#include "tuner/tuning_problem.hpp"
#include "quant/quantize_low_rank.hpp"

namespace qjit {
namespace {

using jit::cuda::ActivationType;
using jit::cuda::CudaKernelSpec;
using jit::cuda::KernelKind;
using test::expect_matches_oracle;
using test::random_matrix;

// The device, or a skip naming why there is none.
std::optional<GpuProperties> device_or_skip_reason(std::string& why) {
    try {
        cuda::Driver& driver = cuda::Driver::get();
        driver.make_current(0);
        return driver.properties(0);
    } catch (const Error& e) {
        why = e.what();
        return std::nullopt;
    }
}

#define REQUIRE_DEVICE(device)                                  \
    std::string why_no_device;                                  \
    const auto device = device_or_skip_reason(why_no_device);   \
    if (!device) GTEST_SKIP() << why_no_device


// Runs m rows through the executor's installed plan and compares with the oracle.
void run_and_check(cuda::CudaExecutor& executor, const QuantizedMatrix& matrix, int64_t m, ActivationType type,
                   const std::string& what, uint32_t seed) {
    const int64_t k = matrix.params.k, n = matrix.params.n;
    std::vector<float> x = test::random_floats(size_t(m * k), seed);
    const std::vector<uint16_t> x_bits = test::to_activation_bits(x, type);
    cuda::DeviceBuffer x_device(x_bits.data(), x_bits.size() * 2), y_device(size_t(m * n) * 2);
    executor.forward(x_device.get(), y_device.get(), m, type, nullptr);
    std::vector<uint16_t> y_bits(size_t(m * n));
    cuda::Driver::get().copy_to_host(y_bits.data(), y_device.get(), y_bits.size() * 2);
    expect_matches_oracle(matrix, x, m, test::from_activation_bits(y_bits, type), type, what + " m=" + std::to_string(m));
}

// A context on device 0 without a tuning database, whose CPU side is the exact fp32 path the
// device's results are compared with; null (a failure recorded) when it cannot be made.
test::ContextPtr cuda_context(double tuning_budget_ms = -1) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.cuda_device = 0;
    options.tuning_db_path = "";
    options.activations = QJIT_ACTIVATIONS_F32;
    if (tuning_budget_ms >= 0) options.tuning_budget_ms = tuning_budget_ms;
    qjit_context* raw = nullptr;
    EXPECT_EQ(qjit_context_create(&options, &raw), QJIT_OK) << qjit_last_error();
    return test::ContextPtr(raw);
}

// One forward of m rows through the C API on the device: x rounded to `dtype` in place (so that the
// CPU path sees the same activations), y back as floats.
std::vector<float> forward_on_device(qjit_linear* layer, std::vector<float>& x, int64_t m, qjit_dtype dtype) {
    const ActivationType type = dtype == QJIT_DTYPE_F16 ? ActivationType::F16 : ActivationType::BF16;
    const std::vector<uint16_t> x_bits = test::to_activation_bits(x, type);
    const int64_t n = layer->params.n;
    cuda::DeviceBuffer xd(x_bits.data(), x_bits.size() * 2), yd(size_t(m * n) * 2);
    EXPECT_EQ(qjit_linear_forward_cuda(layer, reinterpret_cast<const void*>(xd.get()), reinterpret_cast<void*>(yd.get()),
                                       m, dtype, nullptr),
              QJIT_OK)
        << qjit_last_error();
    std::vector<uint16_t> y_bits(size_t(m * n));
    cuda::Driver::get().copy_to_host(y_bits.data(), yd.get(), y_bits.size() * 2);
    return test::from_activation_bits(y_bits, type);
}

// Compiles the variants on every core first (the cubin cache keeps them), then runs them.
void precompile(const std::vector<CudaKernelSpec>& variants) {
    std::vector<std::future<void>> jobs;
    const size_t workers = std::max(1u, std::thread::hardware_concurrency());
    for (size_t w = 0; w < workers; ++w)
        jobs.push_back(std::async(std::launch::async, [&, w] {
            for (size_t i = w; i < variants.size(); i += workers) {
                const auto kernel = jit::cuda::generate_kernel(variants[i]);
                cuda::compile_cuda_cached(kernel.source, kernel.name, variants[i].arch, "");
            }
        }));
    for (auto& job : jobs) job.get();
}

class CudaDevice : public ::testing::TestWithParam<int> {};

// Every variant of every format of one bit width (super-block scales included), on two odd shapes,
// at the batches its kind serves.
TEST_P(CudaDevice, EveryVariantMatchesTheOracle) {
    REQUIRE_DEVICE(device);
    const int bits = GetParam();
    struct Shape { int64_t k, n; bool act_order; };
    const std::vector<Shape> group_shapes{{264, 77, false},   // K a multiple of 8 only: read in place
                                          {515, 300, true}};  // odd K and act-order: gathered, padded
    const std::vector<Shape> super_block_shapes{{512, 77, true},     // two super-blocks, gathered
                                                {256, 130, false}};  // one, odd N
    std::vector<test::CudaFormat> formats = test::every_cuda_format();
    for (const test::CudaFormat& format : test::every_super_block_cuda_format()) formats.push_back(format);
    for (const test::CudaFormat& format : formats) {
        if (format.bits != bits) continue;
        for (const Shape& shape : format.scale_code_bits > 0 ? super_block_shapes : group_shapes) {
            // fp16 scales (as GPTQ checkpoints) and fp32 scales that fp16 cannot hold exactly.
            const QuantizedMatrix matrices[2] = {random_matrix(format, shape.k, shape.n, shape.act_order, 11, true),
                                                 random_matrix(format, shape.k, shape.n, shape.act_order, 11, false)};
            cuda::CudaExecutor executors[2] = {{*device, [&] { return matrices[0]; }, "", ""},
                                         {*device, [&] { return matrices[1]; }, "", ""}};
            const auto variants = test::cuda_variants(format, shape.k, device->arch());
            precompile(variants);
            for (const CudaKernelSpec& spec : variants) {
                if (!jit::cuda::fits_device(spec, device->shared_memory_per_block_optin)) continue;
                const int which = spec.format.f16_scales() ? 0 : 1;
                cuda::CudaExecutor& executor = executors[which];
                const QuantizedMatrix& matrix = matrices[which];
                const std::string name = jit::cuda::kernel_name(spec) + " K=" + std::to_string(shape.k) +
                                         " N=" + std::to_string(shape.n);
                // GEMV and MMA: a partial and a full bucket of the rows compiled for (MMA at 64 also
                // m = 100, two row slices); GEMM: several row blocks, partial ones too.
                std::vector<int64_t> batches{17, 33, 64, 100};
                if (spec.tiling.block_m > 64) batches.push_back(300);  // a partial block of 128 or 256 rows
                if (spec.tiling.kind != KernelKind::Gemm) {
                    const int bucket = int(cuda_batch_bucket(spec.rows));
                    batches = {bucket / 2 + 1, bucket};
                    if (spec.tiling.kind == KernelKind::Mma && bucket == jit::cuda::kMaxMmaRows) batches.push_back(100);
                }
                for (int64_t m : batches) {
                    const int64_t bucket = cuda_batch_bucket(m);
                    executor.install(spec.activations, bucket, spec.tiling);
                    run_and_check(executor, matrix, m, spec.activations, name, uint32_t(m));
                }
                if (HasFailure()) return;  // one broken variant is enough to read
            }
        }
    }
}


INSTANTIATE_TEST_SUITE_P(Bits, CudaDevice, ::testing::Values(2, 3, 4, 5, 6, 8),
                         [](const auto& info) { return "q" + std::to_string(info.param); });

// Split-K and every batch 1 .. 64 through the tuner's model pick, fp16 and bf16.
TEST(CudaDevice, SplitKAndEveryBatch) {
    REQUIRE_DEVICE(device);
    const QuantizedMatrix matrix = random_matrix({4, 128, false}, 1024, 200, false, 3);
    cuda::CudaExecutor executor(*device, [&] { return matrix; }, "", "");
    for (ActivationType type : {ActivationType::F16, ActivationType::BF16}) {
        for (int split : {2, 4}) {
            jit::cuda::CudaTiling t = jit::cuda::parse_tiling("kernel=gemm,bm=32,bn=128,bk=128,warps=4,stages=3");
            t.split_k = split;
            executor.install(type, 32, t);
            run_and_check(executor, matrix, 20, type, "split_k=" + std::to_string(split), 5);
        }
        for (int64_t m = 1; m <= 64; ++m) {
            const int64_t bucket = cuda_batch_bucket(m);
            if (!executor.plan(type, bucket) || bucket == 32)
                executor.install(type, bucket, ranked_cuda_tilings(executor.format(type, bucket), 200, *device).front());
            run_and_check(executor, matrix, m, type, "model pick", uint32_t(m));
        }
    }
}

// The prefill tiles (128 and 256 rows, warps in a grid) at every width, symmetric per column and
// asymmetric in groups, fp16 and bf16, split-K too, on an odd act-order shape and a longer K, at
// one partial block to several; then the model's pick for each bucket past 64 rows.
TEST(CudaDevice, PrefillTilesMatchTheOracle) {
    REQUIRE_DEVICE(device);
    struct Shape { int64_t k, n; bool act_order; };
    const Shape shapes[] = {{515, 300, true}, {2048, 520, false}};
    int index = 0;
    for (int bits : {2, 3, 4, 5, 6, 8})
        for (const test::CudaFormat format : {test::CudaFormat{bits, 128, false}, test::CudaFormat{bits, 0, true}}) {
            const Shape& shape = shapes[index % 2];
            const QuantizedMatrix matrix = random_matrix(format, shape.k, shape.n, shape.act_order, 13);
            cuda::CudaExecutor executor(*device, [&] { return matrix; }, "", "");
            std::vector<CudaKernelSpec> tiles;
            for (const CudaKernelSpec& spec : test::cuda_variants(format, shape.k, device->arch()))
                if (spec.tiling.kind == KernelKind::Gemm && spec.tiling.warps_m > 1) tiles.push_back(spec);
            ASSERT_FALSE(tiles.empty()) << bits << "-bit";
            precompile(tiles);
            for (CudaKernelSpec spec : tiles) {
                spec.activations = index % 2 ? ActivationType::BF16 : ActivationType::F16;
                if (index % 3 == 2) spec.tiling.split_k = 2;
                const std::string name = jit::cuda::kernel_name(spec) + " split_k=" + std::to_string(spec.tiling.split_k) +
                                         " K=" + std::to_string(shape.k) + " N=" + std::to_string(shape.n);
                for (int64_t m : {17, 100, 300, 512}) {
                    executor.install(spec.activations, cuda_batch_bucket(m), spec.tiling);
                    run_and_check(executor, matrix, m, spec.activations, name, uint32_t(m + index));
                }
                ++index;
                if (HasFailure()) return;
            }
            for (int64_t m : {65, 200, 256, 700}) {
                const ActivationType type = m % 2 ? ActivationType::BF16 : ActivationType::F16;
                const int64_t bucket = cuda_batch_bucket(m);
                executor.install(type, bucket, ranked_cuda_tilings(executor.format(type, bucket), shape.n, *device).front());
                run_and_check(executor, matrix, m, type, "model pick", uint32_t(m));
            }
            if (HasFailure()) return;
        }
}

// Mixed widths, second-order scales and outliers through the executor: the mixed GEMV at every
// row count it is compiled for, and larger batches in slices of 8 rows, act-order and odd K.
TEST(CudaDevice, MixedFormatsMatchTheOracle) {
    REQUIRE_DEVICE(device);
    const test::Features combinations[] = {{true, true, true, true, false},
                                           {true, false, false, false, false},
                                           {false, true, false, false, false},
                                           {false, false, true, false, true}};
    for (const test::Features& features : combinations) {
        const QuantizedMatrix matrix = test::synthetic_matrix(515, 300, 64, features, 8);
        cuda::CudaExecutor executor(*device, [&] { return matrix; }, "", "");
        for (ActivationType type : {ActivationType::F16, ActivationType::BF16})
            for (int64_t m : {1, 3, 8, 13, 40}) {
                const int64_t bucket = cuda_batch_bucket(m);
                executor.install(type, bucket, ranked_cuda_tilings(executor.format(type, bucket), 300, *device).front());
                run_and_check(executor, matrix, m, type, test::features_name(features), uint32_t(m));
            }
        if (HasFailure()) return;
    }
}

// The two code layouts: each is uploaded with the first kernel that reads it, and a layout no
// installed kernel reads is dropped (then uploaded again when one needs it).
TEST(CudaDevice, CodesAreHeldOnceUnlessBothLayoutsServe) {
    REQUIRE_DEVICE(device);
    const QuantizedMatrix matrix = random_matrix({3, 128, false}, 520, 130, false, 4);
    const int64_t one_layout = pack_cuda_weights(matrix).code_bytes();
    cuda::CudaExecutor executor(*device, [&] { return matrix; }, "", "");
    EXPECT_EQ(executor.device_code_bytes(), 0);
    const ActivationType type = ActivationType::F16;
    const auto gemv = jit::cuda::parse_tiling("kernel=gemv,warps=2,cols=1,inflight=1");
    const auto mma = jit::cuda::parse_tiling("kernel=mma,warps=4,ntiles=2,inflight=2,splitk=1");
    const auto gemm = jit::cuda::parse_tiling("kernel=gemm,bm=16,bn=64,bk=128,warps=4,stages=3");
    executor.install(type, 1, gemv);
    EXPECT_EQ(executor.device_code_bytes(), one_layout);
    executor.install(type, 16, mma);
    executor.release_unused_codes();
    EXPECT_EQ(executor.device_code_bytes(), 2 * one_layout) << "both installed kernels read their own layout";
    run_and_check(executor, matrix, 1, type, "gemv beside mma", 1);
    run_and_check(executor, matrix, 16, type, "mma beside gemv", 16);

    executor.install(type, 16, gemm);
    executor.release_unused_codes();
    EXPECT_EQ(executor.device_code_bytes(), one_layout) << "no installed kernel reads fragment order";
    run_and_check(executor, matrix, 16, type, "gemm after the mma's layout was dropped", 17);
    executor.install(type, 1, mma);
    executor.install(type, 16, mma);
    executor.release_unused_codes();
    EXPECT_EQ(executor.device_code_bytes(), one_layout) << "no installed kernel reads column blocks";
    run_and_check(executor, matrix, 1, type, "mma after its layout came back", 18);
}

// The C API end to end: a CUDA context tunes at creation and forwards on device pointers.
TEST(CudaDevice, CApiForward) {
    REQUIRE_DEVICE(device);
    const test::ContextPtr context = cuda_context(2000);  // each candidate is compiled first: room for several
    ASSERT_NE(context, nullptr);
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    const int64_t k = 520, n = 130;
    const std::vector<float> w = test::random_floats(size_t(k * n), 9);
    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_create_from_f32(context.get(), &config, k, n, w.data(), QJIT_LAYOUT_K_BY_N, &raw), QJIT_OK)
        << qjit_last_error();
    test::LinearPtr layer(raw);
    // The search times kernels of both code layouts; the tuned layer keeps one.
    EXPECT_EQ(static_cast<const cuda::CudaLayer&>(*layer->gpu).executor().device_code_bytes(), pack_cuda_weights(unpack_linear(*layer)).code_bytes());
    qjit_linear_tuning tuning;
    ASSERT_EQ(qjit_linear_get_tuning_cuda(layer.get(), 1, QJIT_DTYPE_F16, &tuning), QJIT_OK) << qjit_last_error();
    EXPECT_EQ(tuning.source, QJIT_TILING_SEARCHED);
    EXPECT_GE(tuning.candidates_timed, 2);
    EXPECT_GT(tuning.measured_us, 0);

    for (int64_t m : {1, 5, 16, 40}) {
        std::vector<float> x = test::random_floats(size_t(m * k), uint32_t(m));
        const std::vector<float> y = forward_on_device(layer.get(), x, m, QJIT_DTYPE_F16);
        std::vector<float> expected(y.size());
        ASSERT_EQ(qjit_linear_forward(layer.get(), x.data(), m, expected.data()), QJIT_OK);  // the CPU path
        for (size_t i = 0; i < y.size(); ++i)
            ASSERT_NEAR(y[i], expected[i], 0.02 * (1 + std::fabs(expected[i]))) << "m=" << m << " i=" << i;
    }
    double us = 0;
    EXPECT_EQ(qjit_linear_benchmark_cuda(layer.get(), 1, QJIT_DTYPE_F16, 5, &us), QJIT_OK) << qjit_last_error();
    EXPECT_GT(us, 0);
}

// A tensor-parallel shard (columns cut from the matrix in a shuffled order, output j = original
// column order[j]) on the device equals the unsharded layer's columns, on every kernel kind.
TEST(CudaDevice, ShardColumnsEqualTheUnshardedLayers) {
    REQUIRE_DEVICE(device);
    const int64_t k = 515, n = 300;
    const QuantizedMatrix matrix = random_matrix({4, 128, false}, k, n, true, 31);
    std::vector<int32_t> columns(n);
    std::iota(columns.begin(), columns.end(), 0);
    std::shuffle(columns.begin(), columns.end(), std::mt19937(32));
    columns.resize(size_t(n / 2 + 7));  // not a multiple of a tile
    const QuantizedMatrix shard = select_columns(matrix, columns);
    ASSERT_TRUE(shard.params.permuted_columns);
    cuda::CudaExecutor whole(*device, [&] { return matrix; }, "", ""), part(*device, [&] { return shard; }, "", "");
    const ActivationType type = ActivationType::F16;
    const int64_t shard_n = int64_t(columns.size());
    for (const char* tiling : {"kernel=gemv,warps=4,cols=2,inflight=2",
                               "kernel=mma,warps=4,ntiles=2,inflight=2,splitk=1",
                               "kernel=gemm,bm=32,bn=128,bk=128,warps=4,stages=3"}) {
        const auto t = jit::cuda::parse_tiling(tiling);
        const int64_t m = t.kind == KernelKind::Gemv ? 3 : 20;
        whole.install(type, cuda_batch_bucket(m), t);
        part.install(type, cuda_batch_bucket(m), t);
        std::vector<float> x = test::random_floats(size_t(m * k), 33);
        const std::vector<uint16_t> x_bits = test::to_activation_bits(x, type);
        cuda::DeviceBuffer xd(x_bits.data(), x_bits.size() * 2), yw(size_t(m * n) * 2), yp(size_t(m * shard_n) * 2);
        whole.forward(xd.get(), yw.get(), m, type, nullptr);
        part.forward(xd.get(), yp.get(), m, type, nullptr);
        std::vector<uint16_t> whole_bits(size_t(m * n)), part_bits(size_t(m * shard_n));
        cuda::Driver::get().copy_to_host(whole_bits.data(), yw.get(), whole_bits.size() * 2);
        cuda::Driver::get().copy_to_host(part_bits.data(), yp.get(), part_bits.size() * 2);
        const std::vector<float> y_whole = test::from_activation_bits(whole_bits, type);
        const std::vector<float> y_part = test::from_activation_bits(part_bits, type);
        expect_matches_oracle(shard, x, m, y_part, type, std::string("shard, ") + tiling);
        for (int64_t r = 0; r < m; ++r)
            for (int64_t j = 0; j < shard_n; ++j) {
                const float expected = y_whole[size_t(r * n + columns[size_t(j)])];
                ASSERT_NEAR(y_part[size_t(r * shard_n + j)], expected, 0.01 * (1 + std::fabs(expected)))
                    << tiling << " row " << r << " shard column " << j;
            }
    }
}

// ||y - expected|| / ||expected|| over a whole output.
double relative_error(const std::vector<float>& y, const std::vector<double>& expected) {
    double difference = 0, norm = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        difference += (y[i] - expected[i]) * (y[i] - expected[i]);
        norm += expected[i] * expected[i];
    }
    return std::sqrt(difference / norm);
}

// A tensor-parallel MLP's device forward (qjit_tp_mlp_forward_cuda) against the whole MLP by the
// oracle: one rank, and two ranks whose partial outputs are summed here (their communicator's
// all-reduce leaves each rank its own part); SwiGLU and GELU, act-order, fp16 and bf16. A failing
// all-reduce is reported by name and leaves NaN.
TEST(CudaDevice, TensorParallelMlpMatchesTheWholeMlp) {
    REQUIRE_DEVICE(device);
    const test::ContextPtr context = cuda_context();
    ASSERT_NE(context, nullptr);
    const auto own_part = [](void*, void*, int64_t, qjit_dtype, void*) { return 0; };
    for (qjit_mlp_kind kind : {QJIT_MLP_SWIGLU, QJIT_MLP_GELU}) {
        const MlpMatrices mlp = tp_test::random_mlp(kind, {200, 256, 72, 64}, 4, true, 40);
        for (int world : {1, 2}) {
            std::vector<std::unique_ptr<qjit_tp_mlp>> ranks;
            for (int r = 0; r < world; ++r) ranks.push_back(make_tp_mlp(context.get(), mlp, r, world, QJIT_TP_AWARE));
            for (qjit_dtype dtype : {QJIT_DTYPE_F16, QJIT_DTYPE_BF16})
                for (int64_t m : {1, 5, 20}) {
                    const ActivationType type = dtype == QJIT_DTYPE_F16 ? ActivationType::F16 : ActivationType::BF16;
                    std::vector<float> x = test::random_floats(size_t(m * 200), uint32_t(m + world));
                    const std::vector<uint16_t> x_bits = test::to_activation_bits(x, type);  // x rounded in place
                    cuda::DeviceBuffer xd(x_bits.data(), x_bits.size() * 2), yd(size_t(m * 72) * 2);
                    std::vector<float> y(size_t(m * 72), 0.0f);
                    for (int r = 0; r < world; ++r) {
                        const qjit_device_communicator comm{r, world, nullptr, own_part, nullptr};
                        const void* x_in = reinterpret_cast<const void*>(xd.get());
                        void* y_out = reinterpret_cast<void*>(yd.get());
                        ASSERT_EQ(qjit_tp_mlp_forward_cuda(ranks[size_t(r)].get(), &comm, x_in, m, dtype, y_out, nullptr),
                                  QJIT_OK)
                            << qjit_last_error();
                        std::vector<uint16_t> y_bits(y.size());
                        cuda::Driver::get().copy_to_host(y_bits.data(), yd.get(), y_bits.size() * 2);
                        const std::vector<float> part = test::from_activation_bits(y_bits, type);
                        for (size_t i = 0; i < y.size(); ++i) y[i] += part[i];
                    }
                    const double error = relative_error(y, tp_test::whole_mlp(mlp, x, m).y);
                    EXPECT_LT(error, dtype == QJIT_DTYPE_F16 ? 1e-2 : 3e-2)
                        << (kind == QJIT_MLP_SWIGLU ? "SwiGLU" : "GELU") << ", world " << world << ", m " << m
                        << (dtype == QJIT_DTYPE_F16 ? ", f16" : ", bf16");
                }
        }
    }
    const MlpMatrices mlp = tp_test::random_mlp(QJIT_MLP_SWIGLU, {200, 256, 72, 64}, 4, true, 41);
    const auto rank0 = make_tp_mlp(context.get(), mlp, 0, 2, QJIT_TP_AWARE);
    const qjit_device_communicator failing{0, 2, nullptr, [](void*, void*, int64_t, qjit_dtype, void*) { return 5; },
                                           [](void*, int) { return "the peer left"; }};
    const std::vector<uint16_t> x_bits(200, 0x3c00);  // 1.0 in fp16
    cuda::DeviceBuffer xd(x_bits.data(), x_bits.size() * 2), yd(72 * 2);
    EXPECT_EQ(qjit_tp_mlp_forward_cuda(rank0.get(), &failing, reinterpret_cast<const void*>(xd.get()), 1,
                                       QJIT_DTYPE_F16, reinterpret_cast<void*>(yd.get()), nullptr),
              QJIT_ERROR_COMMUNICATION);
    EXPECT_NE(std::string(qjit_last_error()).find("all_reduce_sum failed on rank 0 of 2: error 5 (the peer left)"),
              std::string::npos)
        << qjit_last_error();
    std::vector<uint16_t> y_bits(72);
    cuda::Driver::get().copy_to_host(y_bits.data(), yd.get(), y_bits.size() * 2);
    const std::vector<float> y = test::from_activation_bits(y_bits, ActivationType::F16);
    EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return std::isnan(v); }));
}

// Layers with a low-rank compensator (INT8, INT3 and fp16 factors) against their own CPU path, which
// tests/test_low_rank.cpp checks against the oracle: K odd and act-order (the product gathers, the
// compensator reads x as given), a rank that is not a multiple of 8, batches on each kernel kind.
TEST(CudaDevice, CompensatedLayersMatchTheirCpuPath) {
    REQUIRE_DEVICE(device);
    const test::ContextPtr context = cuda_context();
    ASSERT_NE(context, nullptr);
    const int64_t k = 515, n = 300;
    const int rank = 12;
    const QuantizedMatrix matrix = random_matrix({3, 128, false}, k, n, true, 21);
    // Factors large enough that a pass left out or added twice is far outside the bound below.
    std::vector<float> u = test::random_floats(size_t(k * rank), 22), v = test::random_floats(size_t(rank * n), 23);
    for (float& value : u) value *= 0.2f;
    for (int bits : {8, 3, 16}) {
        const auto layer =
            make_linear(context.get(), matrix, quantize_low_rank(bits, k, n, rank, u.data(), v.data()));
        ASSERT_NE(static_cast<const cuda::CudaLayer&>(*layer->gpu).low_rank(), nullptr);
        for (qjit_dtype dtype : {QJIT_DTYPE_F16, QJIT_DTYPE_BF16})
            for (int64_t m : {1, 3, 20}) {
                const bool f16 = dtype == QJIT_DTYPE_F16;
                std::vector<float> x = test::random_floats(size_t(m * k), uint32_t(m + bits));
                const std::vector<float> y = forward_on_device(layer.get(), x, m, dtype);
                std::vector<float> expected(y.size());
                ASSERT_EQ(qjit_linear_forward(layer.get(), x.data(), m, expected.data()), QJIT_OK);
                const double tolerance = f16 ? 0.02 : 0.08;  // bf16 rounds x U and y to 8 bits
                for (size_t i = 0; i < y.size(); ++i) {
                    ASSERT_NEAR(y[i], expected[i], tolerance * (1 + std::fabs(expected[i])))
                        << "bits=" << bits << " dtype=" << (f16 ? "f16" : "bf16") << " m=" << m << " i=" << i;
                }
            }
        double us = 0;
        EXPECT_EQ(qjit_linear_benchmark_cuda(layer.get(), 1, QJIT_DTYPE_F16, 5, &us), QJIT_OK) << qjit_last_error();
        EXPECT_GT(us, 0);
    }
}

}  // namespace
}  // namespace qjit
