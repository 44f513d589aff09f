// The NCCL adapter on a device (libqjit_nccl over the real NCCL, one rank: ncclCommInitAll on GPU
// 0): a tensor-parallel MLP's device forward through it against the same shards' CPU forward, and
// the all-reduce of one rank leaving its buffer as it was. Skipped where qjit sees no CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "qjit/qjit_tp_nccl.h"

namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call
#define QJIT_OK_(call) ASSERT_EQ((call), QJIT_OK) << #call << ": " << qjit_last_error()

// fp16 bits of a float (round to nearest even; normal numbers of the test's range only).
uint16_t to_f16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    const uint32_t sign = (bits >> 16) & 0x8000u;
    const int exponent = int((bits >> 23) & 0xff) - 127 + 15;
    if (exponent <= 0) return uint16_t(sign);
    uint32_t mantissa = bits & 0x7fffffu;
    uint32_t half = sign | (uint32_t(exponent) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
    return uint16_t(half);
}

float from_f16(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const int exponent = (h >> 10) & 0x1f;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0) return std::ldexp(float(mantissa), -24) * (sign ? -1.0f : 1.0f);
    if (exponent == 31) return mantissa ? NAN : (sign ? -INFINITY : INFINITY);
    const uint32_t bits = sign | (uint32_t(exponent - 15 + 127) << 23) | (mantissa << 13);
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
}

// The CPU forward's communicator of one rank: no collective is ever called.
qjit_communicator cpu_alone() { return qjit_communicator{0, 1, nullptr, nullptr, nullptr, nullptr}; }

TEST(NcclDevice, OneRankMlpMatchesItsCpuForward) {
    int devices = 0;
    if (qjit_cuda_device_count(&devices) != QJIT_OK || devices < 1) GTEST_SKIP() << qjit_last_error();
    ncclComm_t nccl = nullptr;
    const int device = 0;
    ASSERT_EQ(ncclCommInitAll(&nccl, 1, &device), ncclSuccess);
    qjit_device_communicator comm;
    QJIT_OK_(qjit_nccl_communicator_create(nccl, &comm));
    EXPECT_EQ(comm.rank, 0);
    EXPECT_EQ(comm.world_size, 1);

    qjit_context_options options;
    qjit_context_options_init(&options);
    options.cuda_device = 0;
    options.tuning_db_path = "";
    options.activations = QJIT_ACTIVATIONS_F32;
    qjit_context* context = nullptr;
    QJIT_OK_(qjit_context_create(&options, &context));
    const int64_t k1 = 256, n1 = 512, n2 = 192, m = 7;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> weight(-0.05f, 0.05f), activation(-1.0f, 1.0f);
    std::vector<float> up(size_t(n1 * k1)), gate(up.size()), down(size_t(n2 * n1)), x(size_t(m * k1));
    for (auto* values : {&up, &gate, &down})
        for (float& v : *values) v = weight(rng);
    std::vector<uint16_t> x_bits(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = from_f16(x_bits[i] = to_f16(activation(rng)));
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    qjit_tp_mlp* mlp = nullptr;
    QJIT_OK_(qjit_tp_mlp_create_from_f32(context, &config, QJIT_MLP_SWIGLU, k1, n1, n2, up.data(), gate.data(),
                                         down.data(), 0, 1, QJIT_TP_AWARE, &mlp));

    void *xd = nullptr, *yd = nullptr;
    CUDA_OK(cudaMalloc(&xd, x_bits.size() * 2));
    CUDA_OK(cudaMalloc(&yd, size_t(m * n2) * 2));
    CUDA_OK(cudaMemcpy(xd, x_bits.data(), x_bits.size() * 2, cudaMemcpyHostToDevice));
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaStreamCreate(&stream));
    QJIT_OK_(qjit_tp_mlp_forward_cuda(mlp, &comm, xd, m, QJIT_DTYPE_F16, yd, stream));
    // One rank's all-reduce through NCCL leaves the buffer as it was.
    std::vector<uint16_t> before(size_t(m * n2)), after(before.size());
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(before.data(), yd, before.size() * 2, cudaMemcpyDeviceToHost));
    ASSERT_EQ(comm.all_reduce_sum(comm.user, yd, m * n2, QJIT_DTYPE_F16, stream), 0);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(after.data(), yd, after.size() * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(before, after);

    std::vector<float> expected(size_t(m * n2));
    const qjit_communicator alone = cpu_alone();
    QJIT_OK_(qjit_tp_mlp_forward(mlp, &alone, x.data(), m, expected.data(), nullptr));
    double difference = 0, norm = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
        const double y = from_f16(after[i]);
        difference += (y - expected[i]) * (y - expected[i]);
        norm += double(expected[i]) * expected[i];
    }
    EXPECT_LT(std::sqrt(difference / norm), 1e-2) << "||y - cpu|| / ||cpu||";

    cudaStreamDestroy(stream);
    cudaFree(xd);
    cudaFree(yd);
    qjit_tp_mlp_destroy(mlp);
    qjit_context_destroy(context);
    ncclCommDestroy(nccl);
}

}  // namespace
