// The generated x86 kernels: the ISA cap and every tiling knob change the emitted code, every
// tiling still matches the oracle, the debug dump writes the code, and bad tilings are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "jit/x86/cpu_kernel.hpp"
#include "jit/x86/cpu_tiling.hpp"
#include "jit/x86/gemm_emitter.hpp"
#include "base/error.hpp"
#include "runtime/linear_layer.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/packed_codes.hpp"
#include "format/reference.hpp"
#include "layer_internals.hpp"
#include "runtime/cpu/jit_executor.hpp"
#include "test_backends.hpp"
#include "test_support.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {
namespace {

using test::ContextPtr;

ContextPtr make_context(qjit_isa isa, qjit_activations activations, const char* tiling = nullptr) {
    return test::make_test_context(2, isa, activations, tiling);
}

QuantizedMatrix test_matrix(int bits, int64_t k, int64_t n, int64_t group_size) {
    const std::vector<float> weights = test::random_floats(size_t(k * n), uint32_t(k * 31 + n));
    return quantize_rtn({.bits = bits, .group_size = group_size, .scale_type = ScaleType::F16}, k, n, weights.data());
}

std::vector<uint8_t> code_of(const qjit_linear& layer, int rows) {
    const auto bytes = test::jit_of(layer)->kernel(rows).code_bytes();
    return {bytes.begin(), bytes.end()};
}

void expect_matches_oracle(const qjit_linear& layer, const QuantizedMatrix& matrix, int64_t m) {
    const std::vector<float> x = test::random_floats(size_t(m * matrix.params.k), 99);
    std::vector<float> y(size_t(m * matrix.params.n)), expected(y.size());
    linear_forward(layer, x.data(), m, y.data());
    reference_forward(matrix, x.data(), m, expected.data());
    std::vector<double> bound = test::forward_error_bound(matrix, x.data(), m);
    if (test::jit_of(layer)->spec().path == jit::ActivationPath::Int8)
        test::add_int8_activation_error(bound, matrix, x.data(), m, test::jit_of(layer)->spec());
    test::expect_within(y, expected, bound);
}

// The mappings of this process that are writable and executable at once.
std::vector<std::string> writable_executable_mappings() {
    std::ifstream maps("/proc/self/maps");
    std::vector<std::string> found;
    for (std::string line; std::getline(maps, line);) {
        std::istringstream fields(line);
        std::string range, permissions;
        fields >> range >> permissions;
        if (permissions.size() >= 3 && permissions[1] == 'w' && permissions[2] == 'x') found.push_back(line);
    }
    return found;
}

// W^X: generated code is never writable and executable at once. Layers are made at every ISA
// level (each capped context uses the highest level the machine has up to its cap) and run.
TEST(JitKernels, GeneratedCodeIsNeverWritableAndExecutable) {
    std::vector<ContextPtr> contexts;
    std::vector<test::LinearPtr> layers;
    const std::vector<float> weights = test::random_floats(size_t(256 * 48), 4);
    for (const qjit_isa isa : {QJIT_ISA_AVX2, QJIT_ISA_AVX2_VNNI, QJIT_ISA_AVX512, QJIT_ISA_AVX512_VNNI})
        for (const qjit_activations path : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8}) {
            contexts.push_back(test::make_test_context(2, isa, path));
            qjit_quant_config config;
            qjit_quant_config_init(&config);
            qjit_linear* layer = nullptr;
            ASSERT_EQ(qjit_linear_create_from_f32(contexts.back().get(), &config, 256, 48, weights.data(),
                                                  QJIT_LAYOUT_K_BY_N, &layer),
                      QJIT_OK) << qjit_last_error();
            layers.emplace_back(layer);
            std::vector<float> x(2 * 256, 0.5f), y(2 * 48);
            ASSERT_EQ(qjit_linear_forward(layer, x.data(), 2, y.data()), QJIT_OK) << qjit_last_error();
        }
    const std::vector<std::string> rwx = writable_executable_mappings();
    EXPECT_TRUE(rwx.empty()) << rwx.size() << " writable and executable mappings, the first: " << rwx.front();
}

TEST(JitKernels, IsaCapChangesTheEmittedCode) {
    if (!cpu_supports(QJIT_ISA_AVX2)) GTEST_SKIP() << "no AVX2 on this CPU: only the portable path runs";
    const QuantizedMatrix matrix = test_matrix(4, 256, 64, 128);
    std::vector<std::vector<uint8_t>> codes;
    for (const qjit_isa isa : {QJIT_ISA_AVX2, QJIT_ISA_AVX2_VNNI, QJIT_ISA_AVX512, QJIT_ISA_AVX512_VNNI}) {
        if (!cpu_supports(isa)) continue;
        ContextPtr context = make_context(isa, QJIT_ACTIVATIONS_INT8);
        const auto layer = make_linear(context.get(), matrix);
        ASSERT_TRUE(test::jit_of(*layer));
        EXPECT_NE(layer->description.find(std::string("isa=") + isa_name(isa) + " "), std::string::npos)
            << layer->description;
        codes.push_back(code_of(*layer, 1));
        for (size_t i = 0; i + 1 < codes.size(); ++i) EXPECT_NE(codes[i], codes.back()) << isa_name(isa);
        expect_matches_oracle(*layer, matrix, 3);
    }
    ContextPtr portable = make_context(QJIT_ISA_PORTABLE, QJIT_ACTIVATIONS_AUTO);
    const auto layer = make_linear(portable.get(), matrix);
    EXPECT_FALSE(test::jit_of(*layer));
    EXPECT_NE(layer->description.find("isa=portable"), std::string::npos) << layer->description;
}

TEST(JitKernels, EveryTilingKnobChangesTheCodeOrScheduleAndStaysCorrect) {
    const qjit_isa isa = best_isa_up_to(QJIT_ISA_AVX512_VNNI);
    if (isa < QJIT_ISA_AVX2) GTEST_SKIP() << "no AVX2 on this CPU";
    const QuantizedMatrix matrix = test_matrix(3, 1000, 200, 64);  // groups of 2 blocks; K leaves a short one
    // Every knob named (each tiling fits AVX2's 16 vector registers): the ones left out come from
    // the model's pick.
    const char* tilings[] = {"tu=1,mb=1,prefetch=0,ku=1,ksplit=1", "tu=2,mb=2,prefetch=0,ku=1,ksplit=1",
                             "tu=2,mb=2,prefetch=4,ku=1,ksplit=1", "tu=1,mb=2,prefetch=0,ku=1,ksplit=3",
                             "tu=1,mb=1,prefetch=0,ku=2,ksplit=1"};
    std::vector<std::string> descriptions;
    std::vector<std::vector<uint8_t>> codes;
    for (const qjit_activations path : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8})
        for (const char* tiling : tilings) {
            SCOPED_TRACE(tiling);
            ContextPtr context = make_context(isa, path, tiling);
            const auto layer = make_linear(context.get(), matrix);
            ASSERT_TRUE(test::jit_of(*layer));
            for (const int64_t m : {1, 5}) expect_matches_oracle(*layer, matrix, m);
            codes.push_back(code_of(*layer, 1));
            descriptions.push_back(layer->description);
        }
    for (size_t i = 0; i < descriptions.size(); ++i)
        for (size_t j = i + 1; j < descriptions.size(); ++j) EXPECT_NE(descriptions[i], descriptions[j]);
    // tu, prefetch and k-unroll change the code of a one-row kernel; ksplit only the schedule.
    EXPECT_NE(codes[0], codes[1]);
    EXPECT_NE(codes[1], codes[2]);
    EXPECT_EQ(codes[0], codes[3]);
    EXPECT_NE(codes[0], codes[4]);
}

// Kernels with registers to spare hold the zero point and the output tile in registers
// (jit::spare_register_use); kernels of many rows keep the tile in memory. The arithmetic is the
// same, so m rows through one-row kernels and through a kernel of m rows agree bit for bit: every
// width, symmetric and not (fp16 scales), both paths, every ISA this CPU runs.
TEST(JitKernels, OutputTilesInRegistersChangeNoBit) {
    const int64_t k = 544, n = 72;  // K leaves a short group; N a partial panel
    std::vector<QuantizedMatrix> matrices;
    for (const int bits : {2, 3, 4, 5, 6, 8})
        for (const bool symmetric : {true, false}) {
            const std::vector<float> weights = test::random_floats(size_t(k * n), uint32_t(bits * 7 + symmetric));
            matrices.push_back(quantize_rtn({.bits = bits, .group_size = bits == 6 ? 16 : 32,
                                             .symmetric = symmetric, .scale_type = ScaleType::F16},
                                            k, n, weights.data()));
        }
    for (const test::Backend backend : test::available_backends()) {
        if (backend.isa == QJIT_ISA_PORTABLE) continue;
        for (const QuantizedMatrix& matrix : matrices) {
            SCOPED_TRACE(testing::Message() << test::backend_name(backend) << " " << matrix.params.bits << " bits"
                                            << (matrix.params.symmetric ? " symmetric" : ""));
            const ContextPtr one_row = make_context(backend.isa, backend.activations, "tu=2,mb=1,prefetch=0,ku=1,ksplit=1");
            const auto narrow = make_linear(one_row.get(), matrix);
            ASSERT_TRUE(test::jit_of(*narrow));
            jit::CpuKernelSpec spec = test::jit_of(*narrow)->spec();
            ASSERT_TRUE(jit::spare_register_use(spec).output_tile);
            // The most rows two column vectors take: their tile leaves no registers for the output.
            int rows = 16;
            for (spec.rows = rows; vector_registers_needed(spec) > vector_registers_available(spec.isa);) spec.rows = --rows;
            ASSERT_FALSE(jit::spare_register_use(spec).output_tile) << rows << " rows";
            const std::string tall_tiling = concat("tu=2,mb=", rows, ",prefetch=0,ku=1,ksplit=1");
            const ContextPtr many_rows = make_context(backend.isa, backend.activations, tall_tiling.c_str());
            const auto tall = make_linear(many_rows.get(), matrix);
            const std::vector<float> x = test::random_floats(size_t(rows * k), 5);
            std::vector<float> y(size_t(rows * n)), expected(y.size());
            for (int i = 0; i < rows; ++i) linear_forward(*narrow, x.data() + i * k, 1, y.data() + i * n);
            linear_forward(*tall, x.data(), rows, expected.data());
            EXPECT_EQ(y, expected);
        }
    }
}

// The int8 dot products keep vpmaddubsw's pair sums in int16 for a while (a whole 4-bit group
// without VNNI: jit::group_sums_in_int16; runs of quads with integer sub-block scales), where a
// bound set too loose wraps around. Random data stays far from it, so here every code is its
// width's largest or smallest and every activation is +max or -max: every width, groups of 16 and
// 32, K leaving a short group, one row and three, every int8 backend this CPU runs.
TEST(JitKernels, LargestCodesAndActivationsStayClearOfInt16Overflow) {
    const int64_t k = 544, n = 24;
    for (const test::Backend backend : test::available_backends()) {
        if (backend.activations != QJIT_ACTIVATIONS_INT8) continue;
        const ContextPtr context = make_context(backend.isa, backend.activations);
        for (const int bits : {2, 3, 4, 5, 6, 8})
            for (const int64_t group : {16, 32})
                for (const float weight : {1.0f, -1.0f}) {
                    SCOPED_TRACE(testing::Message() << test::backend_name(backend) << " " << bits << " bits, group "
                                                    << group << ", weights " << weight);
                    const std::vector<float> weights(size_t(k * n), weight);
                    const QuantizedMatrix matrix = quantize_rtn(
                        {.bits = bits, .group_size = group, .symmetric = true, .scale_type = ScaleType::F16}, k, n,
                        weights.data());
                    const auto [lowest, highest] = std::minmax_element(matrix.codes.begin(), matrix.codes.end());
                    ASSERT_EQ(*lowest, *highest) << "one code everywhere";
                    ASSERT_TRUE(*highest == 0 || *highest == (1 << bits) - 1) << "an extreme code: " << int(*highest);
                    const auto layer = make_linear(context.get(), matrix);
                    ASSERT_EQ(test::jit_of(*layer)->spec().path, jit::ActivationPath::Int8);
                    for (const int64_t m : {1, 3})
                        for (const float sign : {1.0f, -1.0f}) {
                            const std::vector<float> x(size_t(m * k), sign);
                            std::vector<float> y(size_t(m * n)), expected(y.size());
                            linear_forward(*layer, x.data(), m, y.data());
                            reference_forward(matrix, x.data(), m, expected.data());
                            std::vector<double> bound = test::forward_error_bound(matrix, x.data(), m);
                            test::add_int8_activation_error(bound, matrix, x.data(), m, test::jit_of(*layer)->spec());
                            test::expect_within(y, expected, bound);
                        }
                }
    }
}

// A wide panel of one row tuned for decoding: a prompt runs taller tiles on parts of the panel
// (jit::prompt_tile), then its last rows short of a tile on the layer's own kernels; kernels with
// embedded broadcasts keep their own tiles. Every width,
// both paths, every ISA this CPU runs, K leaving a short group, N leaving a partial panel.
// The tuner's executors generate only the kernels a forward of their one batch meets (prompt
// tiles, then the rows left short of a tile in the tiling's steps): for every batch up to
// `most_rows`, such an executor runs and gives the bits of an executor holding every kernel.
void expect_single_batch_executors_agree(const jit::CpuKernelSpec& spec, const QuantizedMatrix& matrix,
                                         int64_t most_rows) {
    const QuantParams& p = matrix.params;
    const PackedCodes codes =
        kernel_codes(spec, p, pack_codes(matrix.codes.data(), p.bits, p.k, p.n, int(spec.panel_columns())));
    const std::vector<Pass> plan = jit_forward_plan(spec, p);
    const JitExecutor every(spec, p, plan, "");
    ThreadPool pool(2);
    for (int64_t m = 1; m <= most_rows; ++m) {
        SCOPED_TRACE(testing::Message() << "batch " << m);
        const JitExecutor single(spec, p, plan, "", nullptr, m);
        const std::vector<float> x = test::random_floats(size_t(m * p.k), uint32_t(m));
        std::vector<float> y(size_t(m * p.n)), expected(y.size());
        single.forward(p, codes, x.data(), m, y.data(), pool);
        every.forward(p, codes, x.data(), m, expected.data(), pool);
        EXPECT_EQ(y, expected);
    }
}

// Kernels that read each group's metadata from a slot after its codes (the layers' default where
// the format allows) give the bits of the same kernels reading it from streams of their own: for
// every metadata kind (fp16 and fp32 scales, byte zero points, float offsets, one group per column), both paths, every ISA this CPU runs, K leaving a short last group, N a partial
// panel, a K split, and batches from 1 to past the prompt tile.
TEST(JitKernels, InlineMetadataGivesTheBitsOfSeparateStreams) {
    struct Case {
        const char* name;
        WeightFormat format;
    };
    const std::vector<Case> cases = {
        {"q4g32 sym f16", {.bits = 4, .group_size = 32, .symmetric = true, .scale_type = ScaleType::F16}},
        {"q3g64 asym f16", {.bits = 3, .group_size = 64, .scale_type = ScaleType::F16}},
        {"q4g128 asym f32", {.bits = 4, .group_size = 128, .scale_type = ScaleType::F32}},
        {"q5g32 offsets", {.bits = 5, .group_size = 32, .float_offsets = true, .scale_type = ScaleType::F16}},
        {"q8 per column", {.bits = 8, .group_size = 1000, .symmetric = true, .scale_type = ScaleType::F16}},
        {"q2g32 asym", {.bits = 2, .group_size = 32, .scale_type = ScaleType::F16}},
    };
    const int64_t k = 1000, n = 150;
    ThreadPool pool(2);
    for (const test::Backend backend : test::available_backends()) {
        if (backend.isa == QJIT_ISA_PORTABLE) continue;
        for (const Case& c : cases)
            for (const char* tiling : {"tu=3,mb=2,prefetch=0,ku=1,ksplit=2", "tu=2,mb=3,prefetch=4,ku=1,ksplit=1",
                                        "tu=1,mb=2,prefetch=2,ku=1,ksplit=3"}) {
                SCOPED_TRACE(testing::Message() << test::backend_name(backend) << " " << c.name << " " << tiling);
                const std::vector<float> weights = test::random_floats(size_t(k * n), 7);
                const QuantizedMatrix matrix = quantize_rtn(c.format, k, n, weights.data());
                const QuantParams& p = matrix.params;
                std::optional<jit::CpuKernelSpec> made = jit::cpu_kernel_format(backend.isa, backend.activations, p);
                ASSERT_TRUE(made);
                jit::CpuKernelSpec inline_spec = *made;
                inline_spec.tiling = jit::parse_tiling(tiling);
                inline_spec.rows = inline_spec.tiling.mb;
                if (jit::vector_registers_needed(inline_spec) > jit::vector_registers_available(inline_spec.isa))
                    continue;  // a tiling this format's kernels cannot hold in this ISA's registers
                ASSERT_TRUE(inline_spec.inline_metadata) << "the layers' kernels read this format's metadata inline";
                jit::CpuKernelSpec separate_spec = inline_spec;
                separate_spec.inline_metadata = false;
                EXPECT_NE(jit::kernel_family_name(inline_spec), jit::kernel_family_name(separate_spec));
                const PackedCodes plain =
                    pack_codes(matrix.codes.data(), p.bits, p.k, p.n, int(inline_spec.panel_columns()));
                const PackedCodes slotted = kernel_codes(inline_spec, p, plain);
                ASSERT_TRUE(slotted.has_slots());
                const JitExecutor with_slots(inline_spec, p, jit_forward_plan(inline_spec, p), "");
                const JitExecutor beside(separate_spec, p, jit_forward_plan(separate_spec, p), "");
                EXPECT_EQ(with_slots.metadata_bytes(), 0) << "no metadata beside the codes";
                for (const int64_t m : {1, 3, 17}) {
                    SCOPED_TRACE(testing::Message() << "batch " << m);
                    const std::vector<float> x = test::random_floats(size_t(m * k), uint32_t(m));
                    std::vector<float> y(size_t(m * n)), expected(y.size());
                    with_slots.forward(p, slotted, x.data(), m, y.data(), pool);
                    beside.forward(p, plain, x.data(), m, expected.data(), pool);
                    ASSERT_EQ(y, expected);
                }
            }
    }
}

TEST(JitKernels, PromptTilesRunPartsOfAWidePanel) {
    // A tiling of one row with a K split, and one of two rows, whose rows left short of a tile
    // take both counts.
    for (const char* tiling : {"tu=3,mb=1,prefetch=0,ku=1,ksplit=2", "tu=2,mb=2,prefetch=0,ku=1,ksplit=1"})
        for (const test::Backend backend : test::available_backends()) {
            if (backend.isa == QJIT_ISA_PORTABLE) continue;
            SCOPED_TRACE(testing::Message() << test::backend_name(backend) << " " << tiling);
            const ContextPtr context = make_context(backend.isa, backend.activations, tiling);
            for (const int bits : {2, 3, 4, 5, 8}) {
                SCOPED_TRACE(testing::Message() << bits << " bits");
                const QuantizedMatrix matrix = test_matrix(bits, 1000, 150, 64);
                const auto layer = make_linear(context.get(), matrix);
                const JitExecutor* executor = test::jit_of(*layer);
                ASSERT_TRUE(executor);
                const int64_t tile = executor->prompt_rows();
                if (jit::embedded_broadcast(executor->spec())) {  // no taller tiles there
                    EXPECT_EQ(tile, 0);
                    EXPECT_FALSE(jit::prompt_tile(executor->spec()));
                    continue;
                }
                const std::optional<jit::CpuKernelSpec> part = jit::prompt_tile(executor->spec());
                ASSERT_TRUE(part);
                EXPECT_GT(tile, executor->spec().tiling.mb);
                EXPECT_EQ(tile, part->rows);
                EXPECT_EQ(executor->spec().tiling.tu % part->vectors, 0);
                for (const int64_t m : {tile, 2 * tile + 1}) expect_matches_oracle(*layer, matrix, m);
                expect_single_batch_executors_agree(executor->spec(), matrix, 2 * tile + 1);
            }
        }
}

TEST(JitKernels, BadTilingIsRefusedWithAMessage) {
    const qjit_isa isa = best_isa_up_to(QJIT_ISA_AVX512_VNNI);
    if (isa < QJIT_ISA_AVX2) GTEST_SKIP() << "no AVX2 on this CPU";
    const QuantizedMatrix matrix = test_matrix(4, 64, 64, 32);
    for (const char* tiling : {"tu=9,mb=9", "tu=0", "tu=x", "speed=11", "ksplit=0", "tu", "ku=3"}) {
        ContextPtr context = make_context(isa, QJIT_ACTIVATIONS_INT8, tiling);
        try {
            make_linear(context.get(), matrix);
            ADD_FAILURE() << "tiling '" << tiling << "' was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT);
            EXPECT_NE(std::string(e.what()).find("tiling"), std::string::npos) << e.what();
        }
    }
}

TEST(JitKernels, RegisterBudgetMatchesTheIsa) {
    jit::CpuKernelSpec spec;
    spec.format.k = 128;
    spec.isa = jit::IsaFeatures::of(QJIT_ISA_AVX512_VNNI);
    spec.tiling = {4, 4, 0, 1};
    spec.rows = 4;
    EXPECT_LE(jit::vector_registers_needed(spec), jit::vector_registers_available(spec.isa));
    spec.isa = jit::IsaFeatures::of(QJIT_ISA_AVX2);  // 16 registers: 4 x 4 accumulators alone fill them
    EXPECT_GT(jit::vector_registers_needed(spec), jit::vector_registers_available(spec.isa));
    EXPECT_THROW(jit::check_spec(spec), Error);
}

TEST(JitKernels, DumpSwitchWritesTheCode) {
    const qjit_isa isa = best_isa_up_to(QJIT_ISA_AVX512_VNNI);
    if (isa < QJIT_ISA_AVX2) GTEST_SKIP() << "no AVX2 on this CPU";
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("qjit_dump_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    setenv("QJIT_DUMP_DIR", dir.c_str(), 1);
    ContextPtr context = make_context(isa, QJIT_ACTIVATIONS_INT8, "tu=1,mb=2");
    unsetenv("QJIT_DUMP_DIR");
    const auto layer = make_linear(context.get(), test_matrix(4, 64, 16, 32));
    for (int rows = 1; rows <= 2; ++rows) {
        const std::filesystem::path file = dir / (test::jit_of(*layer)->kernel(rows).name() + ".bin");
        ASSERT_TRUE(std::filesystem::exists(file)) << file;
        EXPECT_EQ(std::filesystem::file_size(file), test::jit_of(*layer)->kernel(rows).code_bytes().size());
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qjit
