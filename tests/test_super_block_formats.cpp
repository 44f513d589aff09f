// Super-block scales (ggml's K-quant scales: integer scale and min codes under an fp16 super-scale
// and super-min per 256 rows) with every code width, on every kernel this machine runs, against the
// oracle; their tilings, their bad input, their accounting, their layer files and their panels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/panel_metadata.hpp"
#include "format/reference.hpp"
#include "io/layer_file.hpp"
#include "layer_internals.hpp"
#include "runtime/linear_layer.hpp"
#include "test_backends.hpp"
#include "test_support.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {
namespace {

// A super-block format: the GGUF K-quants' and IQ4_XS's, and two that no GGUF type has.
struct Case {
    const char* name;
    int bits;
    int group;
    bool offsets;  // float offsets (min codes); else symmetric
    int code_bits;
    bool codebook = false;  // codes index the IQ4_NL levels
};
constexpr Case kCases[] = {
    {"Q2_K", 2, 16, true, 4},          {"Q3_K", 3, 16, false, 6},          {"Q4_K", 4, 32, true, 6},
    {"Q5_K", 5, 32, true, 6},          {"Q6_K", 6, 16, false, 8},          {"q4g16_sym_sb4", 4, 16, false, 4},
    {"q8g32_sym_sb8", 8, 32, false, 8}, {"IQ4_XS", 4, 32, false, 6, true},
};

WeightFormat format_of(const Case& c, int64_t k, int64_t n) {
    return WeightFormat{.k = k,
                        .n = n,
                        .bits = c.bits,
                        .group_size = c.group,
                        .symmetric = !c.offsets,
                        .float_offsets = c.offsets,
                        .scale_type = ScaleType::SuperBlock,
                        .scale_code_bits = c.code_bits,
                        .codebook = c.codebook ? Codebook::Iq4Nl : Codebook::None};
}

// Random codes over their whole ranges (negative scale codes included when symmetric) and fp16
// super-scales of a few magnitudes, validated.
QuantizedMatrix random_matrix(const Case& c, int64_t k, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    QuantizedMatrix m;
    QuantParams& p = m.params;
    static_cast<WeightFormat&>(p) = format_of(c, k, n);
    const size_t groups = size_t(p.num_groups() * n), supers = size_t(k / kSuperBlockRows * n);
    const int code_range = 1 << c.code_bits, low = c.offsets ? 0 : -code_range / 2;
    std::uniform_real_distribution<float> magnitude(-12.0f, -4.0f);
    auto super_value = [&] { return float_to_half(std::exp2(magnitude(rng))); };
    for (size_t i = 0; i < groups; ++i) p.super_block.scale_codes.push_back(int8_t(low + int(rng() % code_range)));
    for (size_t i = 0; i < supers; ++i) p.super_block.scales.push_back(super_value());
    if (c.offsets) {
        for (size_t i = 0; i < groups; ++i) p.super_block.min_codes.push_back(uint8_t(rng() % code_range));
        for (size_t i = 0; i < supers; ++i) p.super_block.mins.push_back(super_value());
    } else {
        p.zeros.assign(groups, uint16_t(p.symmetric_zero()));
    }
    expand_super_block_scales(p);
    m.codes.resize(size_t(k * n));
    for (uint8_t& code : m.codes) code = uint8_t(rng() % (1u << c.bits));
    validate(m);
    return m;
}

void expect_matches_oracle(const qjit_linear& layer, const QuantizedMatrix& matrix, int64_t m, uint32_t seed) {
    const std::vector<float> x = test::random_floats(size_t(m * matrix.params.k), seed);
    std::vector<float> y(size_t(m * matrix.params.n)), expected(y.size());
    linear_forward(layer, x.data(), m, y.data());
    reference_forward(matrix, x.data(), m, expected.data());
    std::vector<double> bound = test::forward_error_bound(matrix, x.data(), m);
    if (const JitExecutor* jit = test::jit_of(layer); jit && jit->spec().path == jit::ActivationPath::Int8)
        test::add_int8_activation_error(bound, matrix, x.data(), m, jit->spec());
    test::expect_within(y, expected, bound);
}

class SuperBlockFormat : public ::testing::TestWithParam<Case> {};

// Odd N (1, 7, 33, 100), one to sixteen super-blocks, batches around the kernels' row tiles.
TEST_P(SuperBlockFormat, MatchesTheOracleOnEveryBackend) {
    const Case& c = GetParam();
    struct Shape {
        int64_t k, n;
    };
    for (const test::Backend backend : test::available_backends()) {
        SCOPED_TRACE(test::backend_name(backend));
        const test::ContextPtr context = test::make_test_context(2, backend.isa, backend.activations);
        uint32_t seed = uint32_t(c.bits * 100 + c.group);
        for (const Shape shape : {Shape{256, 1}, Shape{256, 7}, Shape{512, 33}, Shape{768, 64}, Shape{4096, 100}}) {
            const QuantizedMatrix matrix = random_matrix(c, shape.k, shape.n, seed++);
            const auto layer = make_linear(context.get(), matrix);
            ASSERT_EQ(test::jit_of(*layer) != nullptr, backend.isa != QJIT_ISA_PORTABLE) << layer->description;
            EXPECT_NE(layer->description.find(matrix.params.name()), std::string::npos) << layer->description;
            for (const int64_t m : {1, 2, 5, 16, 64}) {
                SCOPED_TRACE(testing::Message() << "m=" << m << " " << layer->description);
                expect_matches_oracle(*layer, matrix, m, seed++);
            }
        }
    }
}

// Column vectors, row tiles, prefetch and K-splits, whose parts start on super-blocks (six
// super-blocks in two or three parts, or split as evenly as whole super-blocks allow).
TEST_P(SuperBlockFormat, EveryTilingStaysCorrect) {
    const qjit_isa isa = best_isa_up_to(QJIT_ISA_AVX512_VNNI);
    if (isa < QJIT_ISA_AVX2) GTEST_SKIP() << "no AVX2 on this CPU";
    const Case& c = GetParam();
    const QuantizedMatrix matrix = random_matrix(c, 6 * kSuperBlockRows, 200, 7);
    const char* tilings[] = {"tu=1,mb=1,prefetch=0,ku=1,ksplit=1", "tu=2,mb=2,prefetch=4,ku=1,ksplit=1",
                             "tu=1,mb=2,prefetch=0,ku=1,ksplit=3", "tu=3,mb=1,prefetch=2,ku=1,ksplit=2",
                             "tu=2,mb=1,prefetch=0,ku=1,ksplit=4"};
    for (const qjit_activations path : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8})
        for (const char* tiling : tilings) {
            SCOPED_TRACE(tiling);
            const test::ContextPtr context = test::make_test_context(2, isa, path, tiling);
            const auto layer = make_linear(context.get(), matrix);
            ASSERT_TRUE(test::jit_of(*layer)) << layer->description;
            for (const Pass& pass : layer->cpu->passes())
                if (pass.kind == PassKind::Product)
                    EXPECT_EQ(pass.first_group % (kSuperBlockRows / c.group), 0) << layer->description;
            for (const int64_t m : {1, 4, 21}) expect_matches_oracle(*layer, matrix, m, uint32_t(m));
        }
}

// The integer sums' extremes: every code and scale code at its largest magnitude, every activation
// at the int8 limit, both signs. Kernels that add int16 pair sums over several quads or whole
// super-blocks in int32 (integer sub-block scales) reach their bounds here and must not wrap.
TEST_P(SuperBlockFormat, ExtremeCodesAndActivationsDoNotOverflow) {
    const Case& c = GetParam();
    QuantizedMatrix matrix = random_matrix(c, 2 * kSuperBlockRows, 40, 11);
    QuantParams& p = matrix.params;
    const int code_range = 1 << c.code_bits;
    for (int8_t& code : p.super_block.scale_codes) code = int8_t(c.offsets ? code_range - 1 : -code_range / 2);
    for (uint8_t& code : p.super_block.min_codes) code = uint8_t(code_range - 1);
    int largest = (1 << c.bits) - 1;
    if (c.codebook)
        for (int code = 0; code < 16; ++code)
            if (p.value_of(code) > p.value_of(largest)) largest = code;
    std::fill(matrix.codes.begin(), matrix.codes.end(), uint8_t(largest));
    expand_super_block_scales(p);
    validate(matrix);
    for (const test::Backend backend : test::available_backends()) {
        SCOPED_TRACE(test::backend_name(backend));
        const test::ContextPtr context = test::make_test_context(2, backend.isa, backend.activations);
        const auto layer = make_linear(context.get(), matrix);
        for (const float sign : {1.0f, -1.0f})
            for (const int64_t m : {1, 5}) {
                SCOPED_TRACE(testing::Message() << "m=" << m << " sign " << sign);
                const std::vector<float> x(size_t(m * p.k), sign);
                std::vector<float> y(size_t(m * p.n)), expected(y.size());
                linear_forward(*layer, x.data(), m, y.data());
                reference_forward(matrix, x.data(), m, expected.data());
                std::vector<double> bound = test::forward_error_bound(matrix, x.data(), m);
                if (const JitExecutor* jit = test::jit_of(*layer); jit && jit->spec().path == jit::ActivationPath::Int8)
                    test::add_int8_activation_error(bound, matrix, x.data(), m, jit->spec());
                test::expect_within(y, expected, bound);
            }
    }
}

// Bits per weight as the file holds them: codes at their width, scale and min codes at theirs, fp16
// super-values per 256 rows.
TEST_P(SuperBlockFormat, StoredBytesCountEachCodeAtItsWidth) {
    const Case& c = GetParam();
    const QuantizedMatrix matrix = random_matrix(c, 512, 3, 1);
    const int per_group = c.offsets ? 2 : 1;
    const double bits = c.bits + double(per_group * c.code_bits) / c.group + double(per_group * 16) / 256;
    EXPECT_DOUBLE_EQ(double(stored_bytes(matrix.params)) * 8 / (512.0 * 3), bits);
}

// A layer file holds the codes and super-values and gives back the same matrix; the panels' metadata
// reads back exactly at any panel width.
TEST_P(SuperBlockFormat, LayerFilesAndPanelsReadBackExactly) {
    const Case& c = GetParam();
    const QuantizedMatrix matrix = random_matrix(c, 768, 37, 3);
    const PackedCodes codes = pack_codes(matrix.codes.data(), c.bits, 768, 37, 16);
    const LayerImage image = deserialize_layer(serialize_layer(matrix.params, codes, {}));
    EXPECT_EQ(image.params.super_block, matrix.params.super_block);
    EXPECT_EQ(image.params.format(), matrix.params.format());
    EXPECT_EQ(std::memcmp(image.params.scales.data(), matrix.params.scales.data(), matrix.params.scales.size() * 4), 0);
    EXPECT_EQ(image.params.offsets, matrix.params.offsets);
    EXPECT_EQ(image.codes.words, codes.words);
    for (const int64_t panel : {16, 48, 64}) {
        const PanelMetadataLayout layout{matrix.params, panel, matrix.params.num_groups()};
        ASSERT_TRUE(panel_metadata_is_exact(matrix.params, layout));
        PanelMetadata metadata = allocate_panel_metadata(matrix.params, layout);
        // Per padded column, the panels hold the file's bits of metadata: 6- and 8-bit codes at their
        // width, 4-bit ones a byte (a scale and a min code share it); 6-bit streams end in padding.
        const int64_t padded_n = (37 + panel - 1) / panel * panel, per_group = c.offsets ? 2 : 1;
        const int64_t group_bits = c.code_bits == 4 ? 8 : per_group * c.code_bits;
        const int64_t padding = c.code_bits == 6 ? per_group * PanelMetadataLayout::kSixBitReadPadding : 0;
        EXPECT_EQ(int64_t(metadata.scales.size() + metadata.zeros.size()),
                  padded_n * (768 / 256 * per_group * 2 + matrix.params.num_groups() * group_bits / 8) + padding)
            << "panel " << panel;
        for (int64_t p = 0; p < (37 + panel - 1) / panel; ++p) pack_panel_metadata(matrix.params, layout, p, metadata);
        QuantParams back;
        static_cast<WeightFormat&>(back) = matrix.params.format();
        unpack_panel_metadata(metadata, layout, back);
        EXPECT_EQ(back.super_block, matrix.params.super_block) << "panel " << panel;
        EXPECT_EQ(back.scales, matrix.params.scales) << "panel " << panel;
        EXPECT_EQ(back.offsets, matrix.params.offsets) << "panel " << panel;
        EXPECT_EQ(back.zeros, matrix.params.zeros) << "panel " << panel;
    }
}

std::string case_name(const testing::TestParamInfo<Case>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(SuperBlocks, SuperBlockFormat, ::testing::ValuesIn(kCases), case_name);

void expect_invalid(const QuantParams& p, const std::string& words) {
    try {
        validate(p);
        ADD_FAILURE() << "accepted; expected an error naming " << words;
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
}

// Codes out of range, non-finite super-values, shapes that are no whole super-blocks and codes that
// do not give the scales are refused by name.
TEST(SuperBlockScales, BadFieldsAreNamed) {
    const Case& q4k = kCases[2];
    const Case& q6k = kCases[4];
    const QuantizedMatrix good = random_matrix(q4k, 256, 4, 9);
    const QuantizedMatrix good_sym = random_matrix(q6k, 256, 4, 9);
    {
        QuantParams p = good.params;
        p.super_block.scale_codes[3] = 64;  // a 6-bit code
        expand_super_block_scales(p);
        expect_invalid(p, "super-block scale code 3 is 64");
    }
    {
        QuantParams p = good.params;
        p.super_block.min_codes[5] = 200;
        expand_super_block_scales(p);
        expect_invalid(p, "super-block min code 5 is 200");
    }
    {
        QuantParams p = good_sym.params;
        p.scale_code_bits = 6;  // its 8-bit codes are out of a 6-bit range
        expect_invalid(p, "scale code");
    }
    {
        QuantParams p = good.params;
        p.super_block.scales[1] = 0x7c00;  // +inf
        expand_super_block_scales(p);
        expect_invalid(p, "not finite");
    }
    {
        QuantParams p = good.params;
        p.scales[2] *= 2.0f;
        expect_invalid(p, "not what its super-block code gives");
    }
    {
        QuantParams p = good.params;
        p.offsets[2] = 1.0f;
        expect_invalid(p, "not what its super-block code gives");
    }
    WeightFormat f = format_of(q4k, 300, 4);
    EXPECT_THROW(validate(f), Error);
    try {
        validate(f);
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not a whole number of 256-row super-blocks"), std::string::npos) << e.what();
    }
    f = format_of(q4k, 512, 4);
    f.group_size = 64;
    expect_invalid(QuantParams{f}, "groups of 16 or 32");
    f = format_of(q4k, 512, 4);
    f.scale_code_bits = 5;
    expect_invalid(QuantParams{f}, "scale_code_bits is 5");
    f = format_of(q4k, 512, 4);
    f.float_offsets = false;  // integer zero points
    expect_invalid(QuantParams{f}, "symmetric codes or float offsets");
    f = format_of(q4k, 512, 4);
    f.scale_type = ScaleType::F16;  // code bits without super-block scales
    expect_invalid(QuantParams{f}, "scale_code_bits is 6 on a format without super-block scales");
}

// A layer file whose codes are out of range is refused as the format's validation refuses them.
TEST(SuperBlockScales, ADamagedLayerFileIsRefused) {
    QuantizedMatrix matrix = random_matrix(kCases[2], 256, 3, 4);
    const PackedCodes codes = pack_codes(matrix.codes.data(), 4, 256, 3, 16);
    QuantParams damaged = matrix.params;
    damaged.super_block.scale_codes[0] = 100;
    expand_super_block_scales(damaged);
    const std::string image = serialize_layer(damaged, codes, {});
    EXPECT_THROW(deserialize_layer(image), Error);
}

// Writes the fuzz corpus's version 6 seeds: layer8 (Q4_K's format: 4-bit codes, 6-bit scale and min
// codes) and layer9 (Q6_K's: 6-bit codes, signed 8-bit scale codes), small layers in panels of 8
// columns; the checksummed target's copies lack the CRC its fuzzer appends.
//   QJIT_FUZZ_SEED_DIR=tests/fuzz/seeds qjit_tests --gtest_also_run_disabled_tests --gtest_filter='*WritesSuperBlockFuzzSeeds'
TEST(SuperBlockScales, DISABLED_WritesSuperBlockFuzzSeeds) {
    const char* dir = std::getenv("QJIT_FUZZ_SEED_DIR");
    if (!dir) GTEST_SKIP() << "set QJIT_FUZZ_SEED_DIR to the corpus folder";
    for (const auto& [name, c] : {std::pair<const char*, Case>{"layer8", kCases[2]}, {"layer9", kCases[4]}}) {
        const QuantizedMatrix m = random_matrix(c, 256, 5, 11);
        const PackedCodes codes = pack_codes(m.codes.data(), c.bits, 256, 5, 8);
        const std::string image = serialize_layer(m.params, codes, {});
        ASSERT_EQ(deserialize_layer(image).params.format(), m.params.format());
        test::write_file(concat(dir, "/fuzz_layer_file/", name), image);
        test::write_file(concat(dir, "/fuzz_layer_file_checksummed/", name), image.substr(0, image.size() - 4));
    }
}

}  // namespace
}  // namespace qjit
