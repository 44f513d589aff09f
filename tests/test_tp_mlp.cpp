// Tensor-parallel MLPs (include/qjit/qjit_tp.h): every rank's shards, run as threads of this process
// through a shared-memory communicator (thread_world.hpp), against the whole MLP computed by the
// oracle; both algorithms, act-order, every width, SwiGLU and GELU, several batches and worlds;
// shard files; bad arguments and a failing communicator. tests/tp_mpi runs the same over MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "base/error.hpp"
#include "format/gptq_import.hpp"
#include "format/reference.hpp"
#include "format/tp_shards.hpp"
#include "runtime/tp_mlp.hpp"
#include "runtime/tp_mlp_file.hpp"
#include "test_support.hpp"
#include "thread_world.hpp"
#include "tp_mlp_fixtures.hpp"
#include "tools/checkpoint_writer.hpp"
#include "tools/random_gptq.hpp"

namespace qjit {
namespace {

using test::ContextPtr;
using test::ThreadWorld;

using tp_test::expect_close;
using tp_test::Expected;
using tp_test::random_matrix;
using tp_test::random_mlp;
using tp_test::Shapes;
using tp_test::whole_mlp;

ContextPtr rank_context() { return test::make_test_context(1, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32); }

// Every rank's y for one MLP, world and algorithm.
std::vector<std::vector<float>> run_world(const MlpMatrices& mlp, int world_size, qjit_tp_algorithm algorithm,
                                          const std::vector<float>& x, int64_t m) {
    ThreadWorld world(world_size);
    std::vector<std::vector<float>> y(size_t(world_size), std::vector<float>(size_t(m * mlp.down.params.n)));
    world.run([&](int rank) {
        const ContextPtr context = rank_context();
        const auto shards = make_tp_mlp(context.get(), mlp, rank, world_size, algorithm);
        const qjit_communicator comm = world.communicator(rank);
        EXPECT_EQ(qjit_tp_mlp_forward(shards.get(), &comm, x.data(), m, y[size_t(rank)].data(), nullptr), QJIT_OK)
            << qjit_last_error();
    });
    return y;
}

class TpMlpShapes : public ::testing::TestWithParam<int> {};

TEST_P(TpMlpShapes, EveryRankGetsTheWholeMlp) {
    const int bits = GetParam();
    const Shapes shapes{72, 256, 40, 32};  // K1 and N2 not multiples of the vector width; 64 rows a rank at 4
    for (qjit_mlp_kind kind : {QJIT_MLP_SWIGLU, QJIT_MLP_GELU}) {
        const MlpMatrices mlp = random_mlp(kind, shapes, bits, /*act_order=*/true, uint32_t(bits * 10 + kind));
        for (int64_t m : {1, 5}) {
            const std::vector<float> x = test::random_floats(size_t(m * shapes.k1), uint32_t(m), -2.0f, 2.0f);
            const Expected expected = whole_mlp(mlp, x, m);
            for (int world : {1, 2, 4})
                for (qjit_tp_algorithm algorithm : {QJIT_TP_NAIVE, QJIT_TP_AWARE}) {
                    const std::vector<std::vector<float>> y = run_world(mlp, world, algorithm, x, m);
                    for (int rank = 0; rank < world; ++rank)
                        expect_close(y[size_t(rank)], expected,
                                     concat("bits ", bits, kind == QJIT_MLP_SWIGLU ? " swiglu" : " gelu",
                                                       " m ", m, " world ", world, algorithm == QJIT_TP_AWARE ? " aware" : " naive",
                                                       " rank ", rank));
                }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Bits, TpMlpShapes, ::testing::Values(2, 3, 4, 8),
                         [](const auto& info) { return "q" + std::to_string(info.param); });

TEST(TpMlp, PlainRowOrderAndPerColumnGroups) {
    for (int64_t group : {int64_t(32), int64_t(256)}) {  // 256: one group per column of W_down
        const MlpMatrices mlp = random_mlp(QJIT_MLP_SWIGLU, {64, 256, 24, group}, 4, /*act_order=*/false, 5);
        const std::vector<float> x = test::random_floats(size_t(3 * 64), 9);
        const Expected expected = whole_mlp(mlp, x, 3);
        for (qjit_tp_algorithm algorithm : {QJIT_TP_NAIVE, QJIT_TP_AWARE})
            for (const std::vector<float>& y : run_world(mlp, 4, algorithm, x, 3)) expect_close(y, expected, "plain");
    }
}

// TP-aware: rank r's up and gate columns are W_down's rows P2[r c .. (r + 1) c), recorded in the
// shard; naive: the original columns in order.
TEST(TpMlp, ShardsRecordTheirColumns) {
    const MlpMatrices mlp = random_mlp(QJIT_MLP_SWIGLU, {64, 128, 16, 32}, 4, true, 11);
    const std::vector<int32_t> p2 = mlp.down.params.row_order;
    const ContextPtr context = rank_context();
    for (qjit_tp_algorithm algorithm : {QJIT_TP_NAIVE, QJIT_TP_AWARE}) {
        const auto shards = make_tp_mlp(context.get(), mlp, 1, 2, algorithm);
        std::vector<int32_t> order(64);
        for (qjit_mlp_part part : {QJIT_MLP_UP, QJIT_MLP_GATE}) {
            qjit_linear* layer = nullptr;
            ASSERT_EQ(qjit_tp_mlp_get_layer(shards.get(), part, &layer), QJIT_OK) << qjit_last_error();
            ASSERT_EQ(qjit_linear_get_column_order(layer, order.data()), QJIT_OK);
            for (int j = 0; j < 64; ++j)
                EXPECT_EQ(order[size_t(j)], algorithm == QJIT_TP_AWARE ? p2[size_t(64 + j)] : 64 + j);
        }
        qjit_tp_mlp_info info;
        ASSERT_EQ(qjit_tp_mlp_get_info(shards.get(), &info), QJIT_OK);
        EXPECT_EQ(info.shard_n1, 64);
        EXPECT_TRUE(info.act_order);
    }
}

TEST(TpMlp, TpAwareMovesOneAllReduceOnly) {
    const MlpMatrices mlp = random_mlp(QJIT_MLP_GELU, {64, 128, 48, 32}, 4, true, 3);
    const ContextPtr context = rank_context();
    for (qjit_tp_algorithm algorithm : {QJIT_TP_NAIVE, QJIT_TP_AWARE}) {
        const auto shards = make_tp_mlp(context.get(), mlp, 0, 4, algorithm);
        qjit_tp_traffic t;
        ASSERT_EQ(qjit_tp_mlp_traffic(shards.get(), 3, &t), QJIT_OK);
        EXPECT_EQ(t.all_reduces, 1);
        EXPECT_EQ(t.all_reduce_bytes, 3 * 48 * 4);
        EXPECT_EQ(t.all_gathers, algorithm == QJIT_TP_NAIVE ? 1 : 0);
        EXPECT_EQ(t.all_gather_bytes, algorithm == QJIT_TP_NAIVE ? 3 * 128 * 4 : 0);
        EXPECT_EQ(t.bytes_sent, (algorithm == QJIT_TP_NAIVE ? 3 * 128 * 4 * 3 / 4 : 0) + 2 * 3 * 3 * 48 * 4 / 4);
    }
}

TEST(TpMlp, ShardFilesRoundTrip) {
    const MlpMatrices mlp = random_mlp(QJIT_MLP_SWIGLU, {72, 256, 40, 32}, 3, true, 21);
    const std::vector<float> x = test::random_floats(size_t(2 * 72), 4);
    const Expected expected = whole_mlp(mlp, x, 2);
    const std::string dir = ::testing::TempDir();
    ThreadWorld world(2);
    world.run([&](int rank) {
        const ContextPtr context = rank_context();
        const auto made = make_tp_mlp(context.get(), mlp, rank, 2, QJIT_TP_AWARE);
        const std::string path = concat(dir, "qjit_tp_rank", rank, ".qjit");
        ASSERT_EQ(qjit_tp_mlp_save(made.get(), path.c_str()), QJIT_OK) << qjit_last_error();
        qjit_tp_mlp* loaded = nullptr;
        ASSERT_EQ(qjit_tp_mlp_load(context.get(), path.c_str(), &loaded), QJIT_OK) << qjit_last_error();
        std::vector<int32_t> made_order(128), loaded_order(128);
        qjit_linear *made_up = nullptr, *loaded_up = nullptr;
        qjit_tp_mlp_get_layer(made.get(), QJIT_MLP_UP, &made_up);
        qjit_tp_mlp_get_layer(loaded, QJIT_MLP_UP, &loaded_up);
        qjit_linear_get_column_order(made_up, made_order.data());
        qjit_linear_get_column_order(loaded_up, loaded_order.data());
        EXPECT_EQ(loaded_order, made_order);
        const qjit_communicator comm = world.communicator(rank);
        std::vector<float> y(size_t(2 * 40));
        EXPECT_EQ(qjit_tp_mlp_forward(loaded, &comm, x.data(), 2, y.data(), nullptr), QJIT_OK) << qjit_last_error();
        expect_close(y, expected, "loaded");
        qjit_tp_mlp_destroy(loaded);
    });
}

TEST(TpMlp, DamagedShardFilesAreRefused) {
    const MlpMatrices mlp = random_mlp(QJIT_MLP_GELU, {64, 128, 16, 32}, 4, true, 8);
    const ContextPtr context = rank_context();
    const auto made = make_tp_mlp(context.get(), mlp, 0, 2, QJIT_TP_AWARE);
    const std::string path = ::testing::TempDir() + "qjit_tp_damaged.qjit";
    ASSERT_EQ(qjit_tp_mlp_save(made.get(), path.c_str()), QJIT_OK);
    const std::string image = test::read_file(path);
    qjit_tp_mlp* loaded = nullptr;
    test::write_file(path, image.substr(0, image.size() / 2));
    EXPECT_EQ(qjit_tp_mlp_load(context.get(), path.c_str(), &loaded), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_NE(std::string(qjit_last_error()).find("qjit_tp_damaged.qjit"), std::string::npos) << qjit_last_error();
    std::string flipped = image;
    flipped[image.size() / 3] ^= 0x10;
    test::write_file(path, flipped);
    EXPECT_EQ(qjit_tp_mlp_load(context.get(), path.c_str(), &loaded), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_EQ(loaded, nullptr);
}

// Writes the fuzz corpus's seeds of tests/fuzz/fuzz_tp_mlp_file.cpp (which appends the checksum
// itself): a SwiGLU rank of two, TP-aware and act-order, and a GELU world of one, naive.
//   QJIT_FUZZ_SEED_DIR=tests/fuzz/seeds qjit_tests --gtest_also_run_disabled_tests --gtest_filter='*TpMlpFuzzSeeds'
TEST(TpMlp, DISABLED_WritesTpMlpFuzzSeeds) {
    const char* dir = std::getenv("QJIT_FUZZ_SEED_DIR");
    if (!dir) GTEST_SKIP() << "set QJIT_FUZZ_SEED_DIR to the corpus folder";
    const ContextPtr context = test::make_test_context(1, QJIT_ISA_PORTABLE, QJIT_ACTIVATIONS_F32);
    const auto swiglu = make_tp_mlp(context.get(), random_mlp(QJIT_MLP_SWIGLU, {16, 64, 8, 16}, 3, true, 1), 1, 2,
                                    QJIT_TP_AWARE);
    const auto gelu = make_tp_mlp(context.get(), random_mlp(QJIT_MLP_GELU, {16, 32, 8, 16}, 4, false, 2), 0, 1,
                                  QJIT_TP_NAIVE);
    for (const auto& [name, mlp] : {std::pair<const char*, const qjit_tp_mlp*>{"swiglu_aware", swiglu.get()},
                                    {"gelu_naive", gelu.get()}}) {
        const std::string image = serialize_tp_mlp(*mlp);
        test::write_file(concat(dir, "/fuzz_tp_mlp_file/", name), image.substr(0, image.size() - 4));
    }
}

TEST(TpMlp, WorldSizesThatCutGroupsAreRefusedByName) {
    const MlpMatrices mlp = random_mlp(QJIT_MLP_SWIGLU, {64, 192, 16, 32}, 4, true, 2);
    const ContextPtr context = rank_context();
    const auto refused = [&](int rank, int world, const char* needle) {
        try {
            make_tp_mlp(context.get(), mlp, rank, world, QJIT_TP_AWARE);
            ADD_FAILURE() << "world " << world << " rank " << rank << " was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT);
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    refused(0, 5, "N1 = 192 does not split into 5");
    refused(0, 4, "48 rows of W_down are not whole groups of 32");
    refused(2, 2, "rank is 2");
    refused(-1, 2, "rank is -1");
    EXPECT_NO_THROW(make_tp_mlp(context.get(), mlp, 1, 3, QJIT_TP_AWARE));  // 64 rows: two groups
}

TEST(TpMlp, MismatchedShardsAndCommunicatorsAreRefused) {
    const MlpMatrices mlp = random_mlp(QJIT_MLP_SWIGLU, {64, 128, 16, 32}, 4, true, 4);
    MlpMatrices wrong_gate = mlp;
    wrong_gate.gate = random_matrix(64, 96, 4, 32, true, 6);
    const ContextPtr context = rank_context();
    EXPECT_THROW(make_tp_mlp(context.get(), wrong_gate, 0, 2, QJIT_TP_AWARE), Error);
    MlpMatrices wrong_down = mlp;
    wrong_down.down = random_matrix(96, 16, 4, 32, true, 7);
    EXPECT_THROW(make_tp_mlp(context.get(), wrong_down, 0, 2, QJIT_TP_AWARE), Error);

    const auto shards = make_tp_mlp(context.get(), mlp, 1, 2, QJIT_TP_NAIVE);
    ThreadWorld world(2);
    const qjit_communicator rank0 = world.communicator(0);
    std::vector<float> x(64, 1.0f), y(16);
    EXPECT_EQ(qjit_tp_mlp_forward(shards.get(), &rank0, x.data(), 1, y.data(), nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("rank 1 of 2"), std::string::npos) << qjit_last_error();
    qjit_communicator no_gather = world.communicator(1);
    no_gather.all_gather_f32 = nullptr;
    EXPECT_EQ(qjit_tp_mlp_forward(shards.get(), &no_gather, x.data(), 1, y.data(), nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("all_gather_f32"), std::string::npos) << qjit_last_error();
}

// A collective that fails reaches the caller by name, with its code and text, and y holds NaN
// rather than a partial sum.
TEST(TpMlp, AFailingCollectiveIsReportedAndLeavesNoPartialResult) {
    const MlpMatrices mlp = random_mlp(QJIT_MLP_GELU, {64, 128, 16, 32}, 4, true, 12);
    const ContextPtr context = rank_context();
    const auto shards = make_tp_mlp(context.get(), mlp, 0, 2, QJIT_TP_AWARE);
    qjit_communicator failing{0, 2, nullptr, [](void*, float*, int64_t) { return 7; }, nullptr,
                              [](void*, int code) { return code == 7 ? "the link went down" : "?"; }};
    std::vector<float> x(2 * 64, 0.5f), y(2 * 16, 1.0f);
    qjit_tp_timing timing{};
    EXPECT_EQ(qjit_tp_mlp_forward(shards.get(), &failing, x.data(), 2, y.data(), &timing), QJIT_ERROR_COMMUNICATION);
    const std::string message = qjit_last_error();
    EXPECT_NE(message.find("all_reduce_sum_f32 failed on rank 0 of 2: error 7 (the link went down)"),
              std::string::npos) << message;
    EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return std::isnan(v); }));
}

// The device forward's refusals, checked before any device is needed: each names what is wrong.
// Shards made without a CUDA device are refused last, as QJIT_ERROR_NO_DEVICE.
TEST(TpMlp, TheDeviceForwardRefusesWhatItCannotRun) {
    const MlpMatrices mlp = random_mlp(QJIT_MLP_SWIGLU, {64, 128, 16, 32}, 4, true, 14);
    const ContextPtr context = rank_context();
    const auto aware = make_tp_mlp(context.get(), mlp, 1, 2, QJIT_TP_AWARE);
    const auto naive = make_tp_mlp(context.get(), mlp, 0, 1, QJIT_TP_NAIVE);  // act-order: needs the all-gather
    const qjit_device_communicator rank1{1, 2, nullptr, [](void*, void*, int64_t, qjit_dtype, void*) { return 0; },
                                         nullptr};
    const void* x = reinterpret_cast<const void*>(uintptr_t(0x1000));  // never read: every call is refused
    void* y = reinterpret_cast<void*>(uintptr_t(0x2000));
    auto refused = [&](qjit_tp_mlp* shards, const qjit_device_communicator* comm, int64_t m, qjit_dtype dtype,
                       const void* x_in, void* y_out, qjit_status status, const char* named) {
        EXPECT_EQ(qjit_tp_mlp_forward_cuda(shards, comm, x_in, m, dtype, y_out, nullptr), status) << named;
        EXPECT_NE(std::string(qjit_last_error()).find(named), std::string::npos) << qjit_last_error();
    };
    refused(nullptr, &rank1, 1, QJIT_DTYPE_F16, x, y, QJIT_ERROR_INVALID_ARGUMENT, "mlp is NULL");
    refused(aware.get(), nullptr, 1, QJIT_DTYPE_F16, x, y, QJIT_ERROR_INVALID_ARGUMENT, "comm is NULL");
    const qjit_device_communicator rank0{0, 2, nullptr, rank1.all_reduce_sum, nullptr};
    refused(aware.get(), &rank0, 1, QJIT_DTYPE_F16, x, y, QJIT_ERROR_INVALID_ARGUMENT, "rank 1 of 2");
    const qjit_device_communicator no_reduce{1, 2, nullptr, nullptr, nullptr};
    refused(aware.get(), &no_reduce, 1, QJIT_DTYPE_F16, x, y, QJIT_ERROR_INVALID_ARGUMENT, "all_reduce_sum");
    const qjit_device_communicator alone{0, 1, nullptr, nullptr, nullptr};
    refused(naive.get(), &alone, 1, QJIT_DTYPE_F16, x, y, QJIT_ERROR_UNSUPPORTED, "QJIT_TP_AWARE");
    refused(aware.get(), &rank1, 1, QJIT_DTYPE_F32, x, y, QJIT_ERROR_INVALID_ARGUMENT, "QJIT_DTYPE_BF16");
    refused(aware.get(), &rank1, 0, QJIT_DTYPE_F16, x, y, QJIT_ERROR_INVALID_ARGUMENT, "m is 0");
    refused(aware.get(), &rank1, 1, QJIT_DTYPE_BF16, nullptr, y, QJIT_ERROR_INVALID_ARGUMENT, "x is NULL");
    refused(aware.get(), &rank1, 1, QJIT_DTYPE_BF16, x, nullptr, QJIT_ERROR_INVALID_ARGUMENT, "y is NULL");
    refused(aware.get(), &rank1, 1, QJIT_DTYPE_BF16, x, y, QJIT_ERROR_NO_DEVICE, "options.cuda_device");
}

TEST(TpMlp, TimingAccountsForTheForward) {
    const MlpMatrices mlp = random_mlp(QJIT_MLP_SWIGLU, {64, 128, 16, 32}, 4, true, 13);
    ThreadWorld world(2);
    world.run([&](int rank) {
        const ContextPtr context = rank_context();
        const auto shards = make_tp_mlp(context.get(), mlp, rank, 2, QJIT_TP_NAIVE);
        const qjit_communicator comm = world.communicator(rank);
        std::vector<float> x(3 * 64, 0.25f), y(3 * 16);
        qjit_tp_timing t{};
        ASSERT_EQ(qjit_tp_mlp_forward(shards.get(), &comm, x.data(), 3, y.data(), &t), QJIT_OK) << qjit_last_error();
        EXPECT_GT(t.total_us, 0);
        EXPECT_GT(t.communicate_us, 0);
        EXPECT_GE(t.permute_us, 0);
        EXPECT_NEAR(t.compute_us + t.communicate_us + t.permute_us, t.total_us, 1e-6 * t.total_us + 1e-9);
    });
}

TEST(TpMlp, FromFp32WeightsThroughTheCApi) {
    const int64_t k1 = 64, n1 = 128, n2 = 24;
    const std::vector<float> up = test::random_floats(size_t(n1 * k1), 1), gate = test::random_floats(size_t(n1 * k1), 2),
                             down = test::random_floats(size_t(n2 * n1), 3), x = test::random_floats(size_t(2 * k1), 4);
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.group_size = 32;
    const ContextPtr context = rank_context();
    std::vector<float> whole(size_t(2 * n2));
    {
        qjit_tp_mlp* one = nullptr;
        ASSERT_EQ(qjit_tp_mlp_create_from_f32(context.get(), &config, QJIT_MLP_SWIGLU, k1, n1, n2, up.data(), gate.data(),
                                              down.data(), 0, 1, QJIT_TP_AWARE, &one), QJIT_OK) << qjit_last_error();
        ThreadWorld solo(1);
        const qjit_communicator comm = solo.communicator(0);
        ASSERT_EQ(qjit_tp_mlp_forward(one, &comm, x.data(), 2, whole.data(), nullptr), QJIT_OK);
        qjit_tp_mlp_destroy(one);
    }
    ThreadWorld world(2);
    world.run([&](int rank) {
        const ContextPtr rank_ctx = rank_context();
        qjit_tp_mlp* shards = nullptr;
        ASSERT_EQ(qjit_tp_mlp_create_from_f32(rank_ctx.get(), &config, QJIT_MLP_SWIGLU, k1, n1, n2, up.data(), gate.data(),
                                              down.data(), rank, 2, QJIT_TP_NAIVE, &shards), QJIT_OK) << qjit_last_error();
        const qjit_communicator comm = world.communicator(rank);
        std::vector<float> y(size_t(2 * n2));
        ASSERT_EQ(qjit_tp_mlp_forward(shards, &comm, x.data(), 2, y.data(), nullptr), QJIT_OK);
        for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], whole[i], 1e-4f * (1 + std::fabs(whole[i])));
        qjit_tp_mlp_destroy(shards);
    });
    config.method = QJIT_QUANT_MILO;
    config.rank = 4;
    qjit_tp_mlp* refused = nullptr;
    EXPECT_EQ(qjit_tp_mlp_create_from_f32(context.get(), &config, QJIT_MLP_SWIGLU, k1, n1, n2, up.data(), gate.data(),
                                          down.data(), 0, 2, QJIT_TP_AWARE, &refused), QJIT_ERROR_UNSUPPORTED);
    EXPECT_EQ(refused, nullptr);
}

// Random GPTQ tensors whose g_idx puts the rows in shuffled groups (act-order), as checkpoints hold them.
struct ActOrderTensors {
    qjit_tools::GptqTensors tensors;
    std::vector<int32_t> g_idx;
};

void random_act_order_gptq(int64_t k, int64_t n, int bits, int group, uint32_t seed, ActOrderTensors* out) {
    qjit_tools::random_gptq(k, n, bits, group, seed, &out->tensors);
    out->g_idx.resize(size_t(k));
    for (int64_t r = 0; r < k; ++r) out->g_idx[size_t(r)] = int32_t(r / group);
    std::shuffle(out->g_idx.begin(), out->g_idx.end(), std::mt19937(seed));
    out->tensors.view.g_idx = out->g_idx.data();
}

class TpMlpFromGptq : public ::testing::Test {
protected:
    static constexpr int64_t kK1 = 72, kN1 = 256, kN2 = 40;
    void SetUp() override {
        random_act_order_gptq(kK1, kN1, 4, 32, 1, &up_);
        random_act_order_gptq(kK1, kN1, 4, 32, 2, &gate_);
        random_act_order_gptq(kN1, kN2, 4, 32, 3, &down_);
        whole_ = {QJIT_MLP_SWIGLU, import_gptq(kK1, kN1, up_.tensors.view), import_gptq(kK1, kN1, gate_.tensors.view),
                  import_gptq(kN1, kN2, down_.tensors.view)};
        x_ = test::random_floats(size_t(3 * kK1), 5, -2.0f, 2.0f);
        expected_ = whole_mlp(whole_, x_, 3);
    }
    // Every rank of a world of 2 made by `create` (rank, context) and run against the oracle.
    void expect_world_matches(const std::function<qjit_tp_mlp*(int, qjit_context*)>& create) {
        ThreadWorld world(2);
        world.run([&](int rank) {
            const ContextPtr context = rank_context();
            qjit_tp_mlp* shards = create(rank, context.get());
            ASSERT_NE(shards, nullptr) << qjit_last_error();
            const qjit_communicator comm = world.communicator(rank);
            std::vector<float> y(size_t(3 * kN2));
            ASSERT_EQ(qjit_tp_mlp_forward(shards, &comm, x_.data(), 3, y.data(), nullptr), QJIT_OK) << qjit_last_error();
            expect_close(y, expected_, concat("rank ", rank));
            qjit_tp_mlp_destroy(shards);
        });
    }
    ActOrderTensors up_, gate_, down_;
    MlpMatrices whole_;
    std::vector<float> x_;
    Expected expected_;
};

TEST_F(TpMlpFromGptq, TensorsThroughTheCApi) {
    const qjit_mlp_gptq mlp{QJIT_MLP_SWIGLU, kK1, kN1, kN2, up_.tensors.view, gate_.tensors.view, down_.tensors.view};
    EXPECT_FALSE(whole_.down.params.row_order.empty());  // W_down's rows are stored permuted
    expect_world_matches([&](int rank, qjit_context* context) {
        qjit_tp_mlp* shards = nullptr;
        qjit_tp_mlp_create_from_gptq(context, &mlp, rank, 2, QJIT_TP_AWARE, &shards);
        return shards;
    });
}

TEST_F(TpMlpFromGptq, ACheckpointsLayersByName) {
    const std::string dir = ::testing::TempDir() + "qjit_tp_checkpoint";
    std::filesystem::create_directories(dir);
    qjit_tools::write_gptq_checkpoint(dir,
                                      {{"model.layers.0.mlp.up_proj", kK1, kN1, up_.tensors.view},
                                       {"model.layers.0.mlp.gate_proj", kK1, kN1, gate_.tensors.view},
                                       {"model.layers.0.mlp.down_proj", kN1, kN2, down_.tensors.view}},
                                      {.format = QJIT_GPTQ_V2, .desc_act = true});
    expect_world_matches([&](int rank, qjit_context* context) {
        qjit_checkpoint* checkpoint = nullptr;
        EXPECT_EQ(qjit_checkpoint_open(context, dir.c_str(), &checkpoint), QJIT_OK) << qjit_last_error();
        qjit_tp_mlp* shards = nullptr;
        qjit_tp_mlp_create_from_checkpoint(checkpoint, QJIT_MLP_SWIGLU, "model.layers.0.mlp.up_proj",
                                           "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj", rank, 2,
                                           QJIT_TP_NAIVE, &shards);
        qjit_checkpoint_close(checkpoint);  // the shards stay valid
        return shards;
    });
    qjit_checkpoint* checkpoint = nullptr;
    const ContextPtr context = rank_context();
    ASSERT_EQ(qjit_checkpoint_open(context.get(), dir.c_str(), &checkpoint), QJIT_OK);
    qjit_tp_mlp* missing = nullptr;
    EXPECT_EQ(qjit_tp_mlp_create_from_checkpoint(checkpoint, QJIT_MLP_GELU, "model.layers.0.mlp.fc1", nullptr,
                                                 "model.layers.0.mlp.down_proj", 0, 2, QJIT_TP_AWARE, &missing),
              QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("model.layers.0.mlp.fc1"), std::string::npos) << qjit_last_error();
    qjit_checkpoint_close(checkpoint);
}

}  // namespace
}  // namespace qjit
