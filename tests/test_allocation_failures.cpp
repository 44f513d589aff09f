// Allocation failure at each allocation of a call (context creation, layer creation from GPTQ
// tensors, fp32 weights and a checkpoint, forward, loading a layer file, opening a GPTQ checkpoint
// and a GGUF file): the call returns QJIT_ERROR_OUT_OF_MEMORY and
// leaves nothing behind (no half-made handle; the sanitizer build's leak checker sees every
// allocation freed), and the same call succeeds once allocations do.
//
// This executable replaces the global operator new with one that can be told to fail the Nth
// throwing allocation made on the calling thread (and only that one). Pool workers' allocations
// are not failed; a failure on the calling thread inside a pool job takes the pool's exception
// path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "gguf_writer.hpp"
#include "qjit/qjit.h"
#include "tools/checkpoint_writer.hpp"
#include "tools/random_gptq.hpp"

namespace {

thread_local long t_allocations_until_failure = -1;  // < 0: never fail

void* allocate(std::size_t size, std::size_t alignment) {
    if (t_allocations_until_failure >= 0 && t_allocations_until_failure-- == 0) throw std::bad_alloc();
    if (size == 0) size = 1;
    void* p = alignment <= alignof(std::max_align_t) ? std::malloc(size)
                                                      : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}

}  // namespace

void* operator new(std::size_t size) { return allocate(size, 0); }
void* operator new[](std::size_t size) { return allocate(size, 0); }
void* operator new(std::size_t size, std::align_val_t alignment) { return allocate(size, std::size_t(alignment)); }
void* operator new[](std::size_t size, std::align_val_t alignment) { return allocate(size, std::size_t(alignment)); }
// Never failed on purpose: callers of the nothrow form (std::stable_sort's scratch buffer) fall
// back on their own, which is not what this test checks.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return std::malloc(size == 0 ? 1 : size); }
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

// Calls `call` with the 0th, 1st, 2nd, ... allocation failing until it succeeds; every failure
// must be QJIT_ERROR_OUT_OF_MEMORY. Returns how many allocations the successful call made room for.
template <typename Call>
long fail_each_allocation(Call call) {
    for (long failing = 0; failing < 200000; ++failing) {
        t_allocations_until_failure = failing;
        const qjit_status status = call();
        const bool failed_one = t_allocations_until_failure < 0;
        t_allocations_until_failure = -1;
        if (status == QJIT_OK) {
            EXPECT_FALSE(failed_one) << "allocation " << failing << " failed, yet the call succeeded";
            return failing;
        }
        EXPECT_EQ(status, QJIT_ERROR_OUT_OF_MEMORY) << "allocation " << failing << ": " << qjit_last_error();
    }
    ADD_FAILURE() << "the call never succeeded";
    return -1;
}

qjit_context* make_context(int threads) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = threads;
    options.tuning_db_path = "";
    options.tuning_budget_ms = 0;
    qjit_context* context = nullptr;
    EXPECT_EQ(qjit_context_create(&options, &context), QJIT_OK);
    return context;
}

TEST(AllocationFailures, ContextCreation) {
    qjit_context* context = nullptr;
    const long allocations = fail_each_allocation([&] {
        qjit_context_options options;
        qjit_context_options_init(&options);
        options.num_threads = 2;
        options.tuning_db_path = "";
        return qjit_context_create(&options, &context);
    });
    EXPECT_GT(allocations, 0);
    qjit_context_destroy(context);
}

TEST(AllocationFailures, LayerCreationFromGptqAndF32AndForward) {
    for (int threads : {1, 2}) {
        qjit_context* context = make_context(threads);
        qjit_tools::GptqTensors tensors;
        qjit_tools::random_gptq(256, 72, 4, 32, 5, &tensors);
        std::vector<int32_t> g_idx(256);
        for (int row = 0; row < 256; ++row) g_idx[size_t(row)] = (row * 37 % 256) / 32;
        tensors.view.g_idx = g_idx.data();  // act-order: the gather path too
        qjit_linear* layer = nullptr;
        EXPECT_GT(fail_each_allocation([&] { return qjit_linear_create_from_gptq(context, 256, 72, &tensors.view, &layer); }), 10);
        std::vector<float> x(3 * 256, 0.25f), y(3 * 72);
        fail_each_allocation([&] { return qjit_linear_forward(layer, x.data(), 3, y.data()); });
        qjit_linear_destroy(layer);

        const std::vector<float> weights(size_t(96 * 40), 0.5f);
        qjit_quant_config config;
        qjit_quant_config_init(&config);
        EXPECT_GT(fail_each_allocation([&] {
                      return qjit_linear_create_from_f32(context, &config, 96, 40, weights.data(), QJIT_LAYOUT_N_BY_K, &layer);
                  }),
                  10);
        qjit_linear_destroy(layer);
        qjit_context_destroy(context);
    }
}

TEST(AllocationFailures, CheckpointLayerCreation) {
    const std::string dir = "/tmp/qjit_allocation_failures_" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    qjit_tools::GptqTensors tensors;
    qjit_tools::random_gptq(128, 24, 3, 32, 9, &tensors);
    qjit_tools::CheckpointOptions options;
    options.format = QJIT_GPTQ_V1;
    options.shards = 2;
    qjit_tools::write_gptq_checkpoint(dir, {{"model.layers.0.a", 128, 24, tensors.view}, {"model.layers.1.b", 128, 24, tensors.view}},
                                      options);
    qjit_context* context = make_context(2);
    // Opening reads config.json, the shard index and each shard's header: JSON that is freed while
    // the failure unwinds (io/json_document.hpp).
    qjit_checkpoint* checkpoint = nullptr;
    EXPECT_GT(fail_each_allocation([&] { return qjit_checkpoint_open(context, dir.c_str(), &checkpoint); }), 10);
    ASSERT_NE(checkpoint, nullptr);
    qjit_linear* layer = nullptr;
    EXPECT_GT(fail_each_allocation([&] { return qjit_checkpoint_create_layer(checkpoint, "model.layers.1.b", &layer); }), 10);
    qjit_linear_destroy(layer);
    qjit_checkpoint_close(checkpoint);
    qjit_context_destroy(context);
    std::filesystem::remove_all(dir);
}

TEST(AllocationFailures, LayerFileLoad) {
    const std::string path = "/tmp/qjit_allocation_failures_" + std::to_string(getpid()) + ".qjit";
    qjit_context* context = make_context(2);
    qjit_tools::GptqTensors tensors;
    qjit_tools::random_gptq(192, 40, 3, 64, 11, &tensors);
    qjit_linear* layer = nullptr;
    ASSERT_EQ(qjit_linear_create_from_gptq(context, 192, 40, &tensors.view, &layer), QJIT_OK) << qjit_last_error();
    ASSERT_EQ(qjit_linear_save(layer, path.c_str()), QJIT_OK) << qjit_last_error();
    qjit_linear_destroy(layer);
    layer = nullptr;
    EXPECT_GT(fail_each_allocation([&] { return qjit_linear_load(context, path.c_str(), &layer); }), 10);
    qjit_linear_destroy(layer);
    qjit_context_destroy(context);
    std::filesystem::remove(path);
}

TEST(AllocationFailures, GgufOpen) {
    // Metadata of each kind the reader keeps (a string, an array of strings, numbers) and two
    // quantized tensors; Q4_0 blocks whose fp16 scales are 1.0.
    std::string q4_0;
    for (int block = 0; block < 2 * 6; ++block) q4_0 += std::string("\x00\x3c", 2) + std::string(16, char(0x5a + block));
    qjit::test::GgufWriter writer;
    writer.value("general.architecture", std::string("llama"))
        .value("llama.block_count", uint32_t(1))
        .array("tokenizer.ggml.tokens", std::vector<std::string>{"<s>", "a", "b"})
        .tensor({"blk.0.ffn_up.weight", QJIT_GGML_Q4_0, {64, 6}, q4_0, std::nullopt})
        .tensor({"blk.0.ffn_down.weight", QJIT_GGML_Q4_0, {64, 6}, q4_0, std::nullopt});
    const std::string path = "/tmp/qjit_allocation_failures_" + std::to_string(getpid()) + ".gguf";
    {
        const std::string bytes = writer.bytes();
        FILE* file = std::fopen(path.c_str(), "wb");
        ASSERT_NE(file, nullptr);
        ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
        std::fclose(file);
    }
    qjit_context* context = make_context(2);
    qjit_checkpoint* checkpoint = nullptr;
    EXPECT_GT(fail_each_allocation([&] { return qjit_checkpoint_open(context, path.c_str(), &checkpoint); }), 5);
    ASSERT_NE(checkpoint, nullptr) << qjit_last_error();
    qjit_linear* layer = nullptr;
    EXPECT_GT(fail_each_allocation([&] { return qjit_checkpoint_create_layer(checkpoint, "blk.0.ffn_down.weight", &layer); }), 5);
    qjit_linear_destroy(layer);
    qjit_checkpoint_close(checkpoint);
    qjit_context_destroy(context);
    std::filesystem::remove(path);
}

}  // namespace
