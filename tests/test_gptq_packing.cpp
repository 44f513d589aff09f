// Tests of the direct GPTQ packer (format/gptq_packing.hpp) and the layers made with it
// (runtime/gptq_layer.hpp): word for word what the oracle path packs (import_gptq, then
// pack_codes of its [k][n] codes), on odd shapes, every bit width and panel width in use, with
// and without act-order, on 1 and 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/gptq_import.hpp"
#include "format/gptq_packing.hpp"
#include "format/inline_metadata.hpp"
#include "format/packed_codes.hpp"
#include "format/reference.hpp"
#include "qjit/qjit.h"
#include "runtime/cpu/panel_tasks.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "runtime/gptq_layer.hpp"
#include "test_support.hpp"

namespace {

struct Case {
    int bits;
    int64_t k, n;
    int group_size;  // 16..256 or QJIT_GROUP_PER_COLUMN
    bool act_order;
    qjit_gptq_format format;
    qjit_dtype scale_dtype = QJIT_DTYPE_F16;
};

std::string describe(const Case& c) {
    return qjit::concat("bits ", c.bits, ", k ", c.k, ", n ", c.n, ", group ", c.group_size,
                        c.act_order ? ", act-order" : "", c.format == QJIT_GPTQ_V1 ? ", v1" : ", v2",
                        c.scale_dtype == QJIT_DTYPE_F16 ? ", f16" : c.scale_dtype == QJIT_DTYPE_BF16 ? ", bf16" : ", f32");
}

// GPTQ tensors with every word random: qweight's codes, and its padding bits past row K-1, which
// the packers must ignore; qzeros' zero points (any field is a valid v1 or v2 zero point).
struct RandomCheckpoint {
    Case shape;
    std::vector<int32_t> qweight, qzeros, g_idx;
    std::vector<uint16_t> scales16;
    std::vector<float> scales32;

    qjit_gptq_tensors tensors() const {
        qjit_gptq_tensors t{};
        t.bits = shape.bits;
        t.group_size = shape.group_size;
        t.qweight = qweight.data();
        t.qzeros = qzeros.data();
        t.scale_dtype = shape.scale_dtype;
        t.scales = shape.scale_dtype == QJIT_DTYPE_F32 ? static_cast<const void*>(scales32.data()) : scales16.data();
        t.g_idx = g_idx.empty() ? nullptr : g_idx.data();
        t.checkpoint_format = shape.format;
        return t;
    }
};

RandomCheckpoint random_checkpoint(const Case& c, std::mt19937& rng) {
    RandomCheckpoint checkpoint;
    checkpoint.shape = c;
    const int64_t rows_per_group = c.group_size == QJIT_GROUP_PER_COLUMN ? c.k : c.group_size;
    const int64_t groups = (c.k + rows_per_group - 1) / rows_per_group;
    checkpoint.qweight.resize(size_t((c.k * c.bits + 31) / 32 * c.n));
    checkpoint.qzeros.resize(size_t(groups * ((c.n * c.bits + 31) / 32)));
    for (int32_t& word : checkpoint.qweight) word = int32_t(rng());
    for (int32_t& word : checkpoint.qzeros) word = int32_t(rng());
    std::uniform_real_distribution<float> scale(0.01f, 0.02f);
    for (int64_t i = 0; i < groups * c.n; ++i) {
        const float s = scale(rng);
        checkpoint.scales16.push_back(c.scale_dtype == QJIT_DTYPE_BF16 ? qjit::float_to_bf16(s) : qjit::float_to_half(s));
        checkpoint.scales32.push_back(s);
    }
    // g_idx as checkpoints hold it: row / group (not act-order), or a shuffle of that.
    checkpoint.g_idx.resize(size_t(c.k));
    for (int64_t row = 0; row < c.k; ++row) checkpoint.g_idx[size_t(row)] = int32_t(row / rows_per_group);
    if (c.act_order) std::shuffle(checkpoint.g_idx.begin(), checkpoint.g_idx.end(), rng);
    return checkpoint;
}

// The oracle path's packed words.
qjit::PackedCodes oracle_packing(const RandomCheckpoint& checkpoint, int panel_columns) {
    const qjit::QuantizedMatrix matrix = qjit::import_gptq(checkpoint.shape.k, checkpoint.shape.n, checkpoint.tensors());
    return qjit::pack_codes(matrix.codes.data(), checkpoint.shape.bits, checkpoint.shape.k, checkpoint.shape.n,
                            panel_columns);
}

void expect_same_params(const qjit::QuantParams& got, const qjit::QuantParams& expected) {
    EXPECT_EQ(got.name(), expected.name());
    EXPECT_EQ(got.symmetric, expected.symmetric);
    EXPECT_EQ(got.act_order, expected.act_order);
    EXPECT_EQ(got.scales, expected.scales);
    EXPECT_EQ(got.zeros, expected.zeros);
    EXPECT_EQ(got.row_order, expected.row_order);
}

// Odd shapes: K not a multiple of 32 or of the group, N not a multiple of any panel, N = 1.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{32, 1},  {64, 7},    {100, 33},  {257, 130},
                                                          {1000, 1}, {256, 64}, {129, 200}, {31, 17}};
const std::vector<int> kPanelWidths = {8, 16, 24, 48, 64, 128};  // tu x 8 or 16 lanes; the portable 64

TEST(GptqPacking, MatchesImportThenPackWordForWord) {
    std::mt19937 rng(2024);
    qjit::ThreadPool one_thread(1), two_threads(2);
    for (int bits : {2, 3, 4, 8})
        for (auto [k, n] : kShapes)
            for (int group_size : {32, 128, int(QJIT_GROUP_PER_COLUMN)})
                for (bool act_order : {false, true})
                    for (qjit_gptq_format format : {QJIT_GPTQ_V1, QJIT_GPTQ_V2}) {
                        const Case c{bits, k, n, group_size, act_order, format};
                        SCOPED_TRACE(describe(c));
                        const RandomCheckpoint checkpoint = random_checkpoint(c, rng);
                        const qjit::QuantParams params = qjit::import_gptq_params(k, n, checkpoint.tensors());
                        expect_same_params(params, qjit::import_gptq(k, n, checkpoint.tensors()).params);
                        for (int panel_columns : kPanelWidths)
                            for (qjit::ThreadPool* pool : {&one_thread, &two_threads}) {
                                SCOPED_TRACE(qjit::concat("panel ", panel_columns, ", threads ", pool->size()));
                                qjit::PackedCodes packed = qjit::unwritten_packed_codes(bits, k, n, panel_columns);
                                std::fill(packed.words.begin(), packed.words.end(), 0xdeadbeefu);  // every word must be written
                                // One panel per task: as many tasks as there can be, in any order.
                                qjit::fill_panels_in_parallel(*pool, packed, panel_columns, [&](int64_t first, int64_t end) {
                                    qjit::pack_gptq_panels(checkpoint.qweight.data(), params.row_order, first, end, packed);
                                });
                                ASSERT_EQ(packed.words, oracle_packing(checkpoint, panel_columns).words);
                            }
                    }
}

TEST(GptqPacking, PanelsOfAnotherWidthCopyTheSameCodes) {
    std::mt19937 rng(7);
    qjit::ThreadPool pool(2);
    for (int bits : {2, 3, 4, 8})
        for (auto [k, n] : kShapes) {
            const Case c{bits, k, n, 32, false, QJIT_GPTQ_V2};
            SCOPED_TRACE(describe(c));
            const RandomCheckpoint checkpoint = random_checkpoint(c, rng);
            for (int from_width : {16, 64})
                for (int to_width : kPanelWidths) {
                    SCOPED_TRACE(qjit::concat("panels of ", from_width, " to ", to_width));
                    const qjit::PackedCodes from = oracle_packing(checkpoint, from_width);
                    qjit::PackedCodes to = qjit::zeroed_packed_codes(bits, k, n, to_width);
                    qjit::fill_panels_in_parallel(pool, to, to_width, [&](int64_t first, int64_t end) {
                        qjit::copy_panels(from, first, end, to);
                    });
                    ASSERT_EQ(to.words, oracle_packing(checkpoint, to_width).words);
                }
        }
}

// The layer make_linear_from_gptq makes on 1 and 2 threads, for the kernel the context picks
// (and forced narrow and wide panels, and the portable path): the oracle's params and codes.
TEST(GptqLayer, HoldsTheOracleParamsAndCodes) {
    std::mt19937 rng(99);
    const char* tilings[] = {nullptr, "tu=1,mb=1", "tu=3,mb=1"};
    for (int threads : {1, 2})
        for (const char* tiling : tilings)
            for (qjit_isa isa : {QJIT_ISA_AUTO, QJIT_ISA_PORTABLE}) {
                if (isa == QJIT_ISA_PORTABLE && tiling != nullptr) continue;  // the portable path has no tiling
                const qjit::test::ContextPtr context = qjit::test::make_test_context(threads, isa, QJIT_ACTIVATIONS_AUTO, tiling);
                ASSERT_NE(context, nullptr);
                for (int bits : {2, 3, 4, 8})
                    for (auto [k, n] : {std::pair<int64_t, int64_t>{100, 33}, {257, 130}, {64, 1}})
                        for (bool act_order : {false, true}) {
                            const Case c{bits, k, n, 32, act_order, QJIT_GPTQ_V1};
                            SCOPED_TRACE(describe(c) + qjit::concat(", threads ", threads, ", tiling ",
                                                                    tiling ? tiling : "(model)", ", isa ", int(isa)));
                            const RandomCheckpoint checkpoint = random_checkpoint(c, rng);
                            const std::unique_ptr<qjit_linear> layer =
                                qjit::make_linear_from_gptq(context.get(), k, n, checkpoint.tensors());
                            expect_same_params(qjit::layer_params(*layer), qjit::import_gptq(k, n, checkpoint.tensors()).params);
                            // The codes as packed (an x86 JIT layer's kernels may hold them with
                            // their metadata in slots between the groups).
                            const qjit::PackedCodes& held = layer->cpu->codes();
                            const qjit::PackedCodes packed = held.has_slots() ? qjit::without_metadata_slots(held) : held;
                            ASSERT_EQ(packed.words, oracle_packing(checkpoint, held.panel_columns).words);
                        }
            }
}

// Through the C API: the layer dequantizes to exactly what the oracle dequantizes the imported
// matrix to, for every scale type (bf16 as a memory-mapped checkpoint may hand it over).
TEST(GptqLayer, CApiLayerDequantizesToTheOracle) {
    std::mt19937 rng(5);
    for (int threads : {1, 2}) {
        const qjit::test::ContextPtr context = qjit::test::make_test_context(threads);
        for (int bits : {2, 3, 4, 8})
            for (qjit_dtype scale_dtype : {QJIT_DTYPE_F16, QJIT_DTYPE_BF16, QJIT_DTYPE_F32})
                for (bool act_order : {false, true}) {
                    const Case c{bits, 300, 45, 128, act_order, QJIT_GPTQ_V2, scale_dtype};
                    SCOPED_TRACE(describe(c) + qjit::concat(", threads ", threads));
                    const RandomCheckpoint checkpoint = random_checkpoint(c, rng);
                    const qjit_gptq_tensors tensors = checkpoint.tensors();
                    qjit_linear* raw = nullptr;
                    ASSERT_EQ(qjit_linear_create_from_gptq(context.get(), c.k, c.n, &tensors, &raw), QJIT_OK)
                        << qjit_last_error();
                    const qjit::test::LinearPtr layer(raw);
                    std::vector<float> dequantized(size_t(c.k * c.n));
                    ASSERT_EQ(qjit_linear_dequantize(layer.get(), dequantized.data()), QJIT_OK) << qjit_last_error();
                    EXPECT_EQ(dequantized, qjit::dequantize(qjit::import_gptq(c.k, c.n, tensors)));
                }
    }
}

}  // namespace
