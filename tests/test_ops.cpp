// The forward's ops (qjit/qjit_ops.h) in every instruction-set family this CPU runs, each under a
// context capped to it: attention, RMSNorm, RoPE, SwiGLU and argmax against double-precision references on
// odd sizes, the promises of attention (a prompt, its tokens one by one and two threads agree bit
// for bit), the kernel names within the cap, and bad input refused by name.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/float_vectors.hpp"
#include "base/half.hpp"
#include "base/simd_family.hpp"
#include "qjit/qjit_ops.h"
#include "tests/attention_problem.hpp"
#include "tests/test_support.hpp"
#include "tuner/cpu_isa.hpp"

namespace {

using qjit::test::family_caps;
using qjit::test::kCacheTypes;
using qjit::test::family_of;
using qjit::test::make_test_context;
using qjit::test::Problem;

struct Shape {
    int head_size, n_heads, n_kv_heads, positions;
};

class Attention : public ::testing::TestWithParam<Shape> {};

// Head sizes 64, 80, 128 and 256 (the models'), and odd ones through every tail of the value sums;
// grouped queries 1, 3 and 8 heads a key/value head (and 4); prompts that end inside a key block,
// on its edge, a single position, and 600 positions.
INSTANTIATE_TEST_SUITE_P(Shapes, Attention,
                         ::testing::Values(Shape{8, 8, 8, 45}, Shape{64, 9, 3, 70}, Shape{100, 4, 1, 33},
                                           Shape{80, 8, 2, 64}, Shape{128, 2, 2, 1}, Shape{17, 3, 3, 96},
                                           Shape{128, 8, 1, 41}, Shape{64, 3, 1, 600}, Shape{6, 2, 1, 5},
                                           Shape{256, 4, 1, 75}));

const char* type_name(qjit_kv_type type) {
    return type == QJIT_KV_F16 ? "f16 cache" : type == QJIT_KV_INT8 ? "int8 cache" : "f32 cache";
}

// How far the outputs of these problems (keys, values and queries ~ N(0, 1.5^2)) may move from
// the formula over the keys and values as given: the cache's rounding, its stated error. fp16:
// within 2^-11 relative per key and value (measured at most 3.4e-3). int8: half a step, amax / 254
// of each head's row (about 0.02 here), in every score's terms and every value (measured at most
// 0.082, head size 80).
double rounding_bound(qjit_kv_type type) {
    switch (type) {
        case QJIT_KV_F16: return 1e-2;
        case QJIT_KV_INT8: return 0.15;
        default: return 2e-5;
    }
}

// Against the formula over the cache's own keys and values, in every family and cache type, and
// within the cache's rounding of the formula over the keys and values as given.
TEST_P(Attention, MatchesTheTextbookFormulaInEveryFamily) {
    const Shape shape = GetParam();
    for (const qjit_kv_type type : kCacheTypes) {
        const Problem p({shape.head_size, shape.n_heads, shape.n_kv_heads}, shape.positions, 7, type);
        std::vector<std::vector<double>> expected, given;
        for (int t = 0; t < shape.positions; ++t) {
            expected.push_back(p.reference(t));
            given.push_back(p.reference(t, false));
        }
        for (qjit_isa cap : family_caps()) {
            const auto context = make_test_context(1, cap);
            const std::vector<float> out = p.attend(context.get(), 0, shape.positions);
            double worst = 0.0, worst_given = 0.0;
            for (int t = 0; t < shape.positions; ++t)
                for (size_t i = 0; i < expected[size_t(t)].size(); ++i) {
                    const double o = out[size_t(t) * p.q_dim() + i];
                    worst = std::max(worst, std::fabs(o - expected[size_t(t)][i]));
                    worst_given = std::max(worst_given, std::fabs(o - given[size_t(t)][i]));
                }
            EXPECT_LT(worst, 2e-5) << family_of(cap) << ", " << type_name(type) << ": head " << shape.head_size
                                   << ", " << shape.positions << " positions";
            EXPECT_LT(worst_given, rounding_bound(type)) << family_of(cap) << ", " << type_name(type);
        }
    }
}

// A prompt in one call, the same queries one position at a time (as decoding makes them), the
// prompt in two uneven pieces and on two threads give the same outputs bit for bit.
TEST_P(Attention, BatchingAndThreadsChangeNoBit) {
    const Shape shape = GetParam();
    for (const qjit_kv_type type : kCacheTypes) {
        const Problem p({shape.head_size, shape.n_heads, shape.n_kv_heads}, shape.positions, 11, type);
        for (qjit_isa cap : family_caps()) {
            const auto one = make_test_context(1, cap), two = make_test_context(2, cap);
            const std::vector<float> whole = p.attend(one.get(), 0, shape.positions);
            std::vector<float> stepped, pieces;
            for (int t = 0; t < shape.positions; ++t) {
                const std::vector<float> step = p.attend(one.get(), t, 1);
                stepped.insert(stepped.end(), step.begin(), step.end());
            }
            const int cut = shape.positions / 3;
            for (const auto& [pos0, count] : {std::pair{0, cut}, {cut, shape.positions - cut}}) {
                if (count == 0) continue;
                const std::vector<float> piece = p.attend(two.get(), pos0, count);
                pieces.insert(pieces.end(), piece.begin(), piece.end());
            }
            const std::vector<float> threaded = p.attend(two.get(), 0, shape.positions);
            const size_t bytes = whole.size() * sizeof(float);
            EXPECT_EQ(std::memcmp(whole.data(), stepped.data(), bytes), 0) << family_of(cap) << ", " << type_name(type);
            EXPECT_EQ(std::memcmp(whole.data(), pieces.data(), bytes), 0) << family_of(cap) << ", " << type_name(type);
            EXPECT_EQ(std::memcmp(whole.data(), threaded.data(), bytes), 0) << family_of(cap) << ", " << type_name(type);
        }
    }
}

// Windows of one position, fewer than a key block, a block and one more, and most of the prompt
// (Gemma's local layers: a query sees itself and the window - 1 positions before it): against the
// formula over the window in every family and cache type, and a prompt, its tokens one by one and
// two threads agree bit for bit.
TEST_P(Attention, SlidingWindowMatchesTheFormulaAndChangesNoBitWithBatching) {
    const Shape shape = GetParam();
    for (const qjit_kv_type type : kCacheTypes) {
        const Problem p({shape.head_size, shape.n_heads, shape.n_kv_heads}, shape.positions, 5, type);
        for (const int window : {1, 5, 33, std::max(2, shape.positions * 2 / 3)}) {
            for (qjit_isa cap : family_caps()) {
                const auto one = make_test_context(1, cap), two = make_test_context(2, cap);
                const std::vector<float> whole = p.attend(one.get(), 0, shape.positions, window);
                double worst = 0.0;
                for (int t = 0; t < shape.positions; ++t) {
                    const std::vector<double> expected = p.reference(t, true, window);
                    for (size_t i = 0; i < expected.size(); ++i)
                        worst = std::max(worst, std::fabs(whole[size_t(t) * p.q_dim() + i] - expected[i]));
                }
                EXPECT_LT(worst, 2e-5) << family_of(cap) << ", " << type_name(type) << ", window " << window;
                std::vector<float> stepped;
                for (int t = 0; t < shape.positions; ++t) {
                    const std::vector<float> step = p.attend(one.get(), t, 1, window);
                    stepped.insert(stepped.end(), step.begin(), step.end());
                }
                const std::vector<float> threaded = p.attend(two.get(), 0, shape.positions, window);
                const size_t bytes = whole.size() * sizeof(float);
                EXPECT_EQ(std::memcmp(whole.data(), stepped.data(), bytes), 0) << family_of(cap) << ", window " << window;
                EXPECT_EQ(std::memcmp(whole.data(), threaded.data(), bytes), 0) << family_of(cap) << ", window " << window;
            }
        }
    }
}

// A window as long as the prompt or longer is plain causal attention, bit for bit.
TEST(AttentionWindow, AWindowOverTheWholePromptIsCausalAttention) {
    const Problem p({64, 4, 2}, 70, 3);
    for (qjit_isa cap : family_caps()) {
        const auto context = make_test_context(1, cap);
        const std::vector<float> causal = p.attend(context.get(), 0, 70);
        for (const int window : {70, 1000}) {
            const std::vector<float> windowed = p.attend(context.get(), 0, 70, window);
            EXPECT_EQ(std::memcmp(causal.data(), windowed.data(), causal.size() * sizeof(float)), 0)
                << family_of(cap) << ", window " << window;
        }
        std::vector<float> out(p.q.size());
        const qjit_kv_cache cache = p.cache();
        EXPECT_EQ(qjit_attention_causal_window(context.get(), &p.shape, &cache, p.q.data(), 0, 1, -1, out.data()),
                  QJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(qjit_last_error()).find("window of -1"), std::string::npos) << qjit_last_error();
    }
}

// The fp16 cache's store rounds to nearest even, and its loads convert all 65536 halves exactly
// (zeros, subnormals, infinities and NaNs) at every vector width.
TEST(HalfLoads, EveryHalfConvertsExactlyAtEveryWidth) {
    std::vector<uint16_t> halves(65536 + 16);
    for (size_t i = 0; i < halves.size(); ++i) halves[i] = uint16_t(i);
    auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
    for (size_t i = 0; i < 65536; i += 16) {
        const qjit::Floats4 four = qjit::load_halves<qjit::Floats4>(halves.data() + i);
        const qjit::Floats8 eight = qjit::load_halves<qjit::Floats8>(halves.data() + i);
        const qjit::Floats16 sixteen = qjit::load_halves<qjit::Floats16>(halves.data() + i);
        for (size_t j = 0; j < 16; ++j) {
            const uint32_t expected = bits(qjit::half_to_float(halves[i + j]));
            ASSERT_EQ(bits(sixteen[j]), expected) << "half 0x" << std::hex << i + j;
            if (j < 8) ASSERT_EQ(bits(eight[j]), expected) << "half 0x" << std::hex << i + j;
            if (j < 4) ASSERT_EQ(bits(four[j]), expected) << "half 0x" << std::hex << i + j;
        }
    }
}

// The families' own loads, called from functions of their targets as the kernels call them.
template <typename Element>
QJIT_TARGET_AVX2 void load_eight(const Element* p, float (&out)[8]) {
    if constexpr (sizeof(Element) == 2) qjit::family_load_halves(p, out);
    else qjit::family_load_bytes(p, out);
}
template <typename Element>
QJIT_TARGET_AVX512 void load_sixteen(const Element* p, float (&out)[16]) {
    if constexpr (sizeof(Element) == 2) qjit::family_load_halves(p, out);
    else qjit::family_load_bytes(p, out);
}

// The F16C loads of the AVX2 and AVX-512 kernels, where the CPU runs them: every half but a NaN
// converts to the exact software conversion's float, and every NaN to a NaN of its sign.
TEST(HalfLoads, F16cLoadsMatchTheExactConversion) {
    std::vector<uint16_t> halves(65536 + 16);
    for (size_t i = 0; i < halves.size(); ++i) halves[i] = uint16_t(i);
    auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
    auto check = [&](size_t at, float loaded) {
        const float expected = qjit::half_to_float(halves[at]);
        if (std::isnan(expected)) {
            ASSERT_TRUE(std::isnan(loaded)) << "half 0x" << std::hex << at << " read as 0x" << bits(loaded);
            ASSERT_EQ(std::signbit(loaded), std::signbit(expected)) << "half 0x" << std::hex << at;
        } else {
            ASSERT_EQ(bits(loaded), bits(expected)) << "half 0x" << std::hex << at;
        }
    };
    const bool avx2 = qjit::cpu_supports(QJIT_ISA_AVX2), avx512 = qjit::cpu_supports(QJIT_ISA_AVX512);
    if (!avx2) GTEST_SKIP() << "the CPU runs neither F16C family";
    float eight[8], sixteen[16];
    for (size_t i = 0; i < 65536; i += 16) {
        load_eight(halves.data() + i, eight);
        for (size_t j = 0; j < 8; ++j) check(i + j, eight[j]);
        if (!avx512) continue;
        load_sixteen(halves.data() + i, sixteen);
        for (size_t j = 0; j < 16; ++j) check(i + j, sixteen[j]);
    }
}

// The families' own int8 loads give load_bytes' floats for every byte, at every lane.
TEST(ByteLoads, FamilyLoadsMatchThePortableOnes) {
    if (!qjit::cpu_supports(QJIT_ISA_AVX2)) GTEST_SKIP() << "the CPU runs neither family";
    std::vector<int8_t> bytes(256 + 16);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = int8_t(i * 37 + 11);  // every value, at every lane
    float eight[8], sixteen[16];
    for (size_t i = 0; i < 256; ++i) {
        const qjit::Floats4 four = qjit::load_bytes<qjit::Floats4>(bytes.data() + i);
        load_eight(bytes.data() + i, eight);
        for (size_t j = 0; j < 8; ++j) ASSERT_EQ(eight[j], float(bytes[i + j])) << i << "+" << j;
        for (size_t j = 0; j < 4; ++j) ASSERT_EQ(four[j], float(bytes[i + j])) << i << "+" << j;
        if (!qjit::cpu_supports(QJIT_ISA_AVX512)) continue;
        load_sixteen(bytes.data() + i, sixteen);
        for (size_t j = 0; j < 16; ++j) ASSERT_EQ(sixteen[j], float(bytes[i + j])) << i << "+" << j;
    }
}

// An int8 cache stores a head's row holding an infinity or a NaN as NaNs (it has no step): a query
// that attends to it gets NaNs, and one before it (alone in its call) does not.
TEST(Int8Cache, ANonFiniteRowIsStoredAsNaNs) {
    Problem p({8, 2, 1}, 3, 9, QJIT_KV_INT8);
    p.k[1 * 8 + 3] = std::numeric_limits<float>::infinity();
    const qjit_kv_cache view = p.cache();
    ASSERT_EQ(qjit_kv_cache_store(&p.shape, &view, p.k.data(), p.v.data(), 0, 3), QJIT_OK) << qjit_last_error();
    const auto context = make_test_context(1);
    for (const float o : p.attend(context.get(), 0, 1)) EXPECT_TRUE(std::isfinite(o));
    for (const float o : p.attend(context.get(), 2, 1)) EXPECT_TRUE(std::isnan(o));
}

// The int8 cache's loads convert all 256 codes exactly at every vector width.
TEST(ByteLoads, EveryInt8ConvertsExactlyAtEveryWidth) {
    std::vector<int8_t> codes(256 + 16);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = int8_t(uint8_t(i));
    for (size_t i = 0; i < 256; i += 4) {
        const qjit::Floats4 four = qjit::load_bytes<qjit::Floats4>(codes.data() + i);
        const qjit::Floats8 eight = qjit::load_bytes<qjit::Floats8>(codes.data() + i);
        const qjit::Floats16 sixteen = qjit::load_bytes<qjit::Floats16>(codes.data() + i);
        for (size_t j = 0; j < 16; ++j) {
            const float expected = float(codes[i + j]);
            ASSERT_EQ(sixteen[j], expected) << "code at " << i + j;
            if (j < 8) ASSERT_EQ(eight[j], expected) << "code at " << i + j;
            if (j < 4) ASSERT_EQ(four[j], expected) << "code at " << i + j;
        }
    }
}

TEST(AttentionInput, ShapesItCannotRunAreRefusedByName) {
    const auto context = make_test_context(1);
    const Problem p({8, 4, 4}, 10, 1);
    std::vector<float> out(p.q.size());
    const qjit_kv_cache cache = p.cache();
    auto status = [&](qjit_attention_shape shape, qjit_kv_cache view, int pos0, int count) {
        return qjit_attention_causal(context.get(), &shape, &view, p.q.data(), pos0, count, out.data());
    };
    EXPECT_EQ(status({8, 4, 3}, cache, 0, 1), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("key/value heads"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(status({300, 1, 1}, cache, 0, 1), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("heads of 300"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(status(p.shape, {cache.keys, cache.values, 31}, 0, 1), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("cache of 31"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(status(p.shape, cache, 30, 5), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(status(p.shape, cache, -1, 1), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(status(p.shape, {nullptr, cache.values, 32}, 0, 1), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(status(p.shape, {cache.keys, cache.values, 32, qjit_kv_type(7)}, 0, 1), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("cache's type is 7"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(qjit_kv_element_bytes(qjit_kv_type(7)), 0u);
    const qjit_attention_shape shape{80, 8, 2};  // blocks of 32 positions x 2 heads x 80 features
    EXPECT_EQ(qjit_kv_cache_bytes(&shape, 64, QJIT_KV_F32), 64u * 2 * 80 * 4);
    EXPECT_EQ(qjit_kv_cache_bytes(&shape, 64, QJIT_KV_F16), 64u * 2 * 80 * 2);
    EXPECT_EQ(qjit_kv_cache_bytes(&shape, 64, QJIT_KV_INT8), 64u * 2 * (80 + 4));  // a float step per position and head
    EXPECT_EQ(qjit_kv_element_bytes(QJIT_KV_INT8), 1u);
    EXPECT_EQ(qjit_kv_cache_bytes(&shape, 63, QJIT_KV_F32), 0u);  // not whole blocks
    EXPECT_EQ(qjit_kv_cache_bytes(&shape, 64, qjit_kv_type(7)), 0u);
    EXPECT_EQ(qjit_kv_cache_bytes(nullptr, 64, QJIT_KV_F32), 0u);
    EXPECT_EQ(qjit_attention_causal(nullptr, &p.shape, &cache, p.q.data(), 0, 1, out.data()),
              QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_kv_cache_store(&p.shape, &cache, p.k.data(), nullptr, 0, 1), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_kv_cache_store(&p.shape, &cache, p.k.data(), p.v.data(), 20, 13), QJIT_ERROR_INVALID_ARGUMENT);
}

// rows x size values, every row its own scale.
std::vector<float> random_rows(int64_t rows, int64_t size, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(size_t(rows * size));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < size; ++i) v[size_t(r * size + i)] = normal(rng) * float(r + 1);
    return v;
}

TEST(RmsNorm, MatchesDoublesInEveryFamilyOnOddSizes) {
    for (const int64_t size : {1, 7, 64, 100, 576, 1003}) {
        const int64_t rows = 5;
        const std::vector<float> x = random_rows(rows, size, 3), weight = random_rows(1, size, 4);
        for (qjit_isa cap : family_caps()) {
            const auto context = make_test_context(2, cap);
            std::vector<float> out(x.size()), in_place = x;
            ASSERT_EQ(qjit_rms_norm(context.get(), x.data(), weight.data(), rows, size, 1e-5f, out.data()), QJIT_OK);
            ASSERT_EQ(qjit_rms_norm(context.get(), in_place.data(), weight.data(), rows, size, 1e-5f, in_place.data()),
                      QJIT_OK);
            EXPECT_EQ(out, in_place);
            for (int64_t r = 0; r < rows; ++r) {
                double squares = 0.0;
                for (int64_t i = 0; i < size; ++i) squares += double(x[size_t(r * size + i)]) * x[size_t(r * size + i)];
                const double inverse = 1.0 / std::sqrt(squares / double(size) + 1e-5);
                for (int64_t i = 0; i < size; ++i) {
                    const double expected = double(weight[size_t(i)]) * x[size_t(r * size + i)] * inverse;
                    EXPECT_NEAR(out[size_t(r * size + i)], expected, 1e-5 * (std::fabs(expected) + 1e-3))
                        << family_of(cap) << " size " << size << " row " << r << " value " << i;
                }
            }
        }
    }
}

TEST(Rope, MatchesDoublesInEveryFamilyForBothPairings) {
    for (const int head_size : {2, 6, 64, 80, 128}) {
        const int heads = 3, rows = 4;
        const int64_t row_size = int64_t(heads) * head_size;
        const std::vector<float> x = random_rows(rows, row_size, 5);
        std::vector<float> rotations(size_t(rows * head_size));
        for (int r = 0; r < rows; ++r)
            for (int i = 0; i < head_size / 2; ++i) {
                const double angle = (r + 3) * std::pow(10000.0, -2.0 * i / head_size);
                rotations[size_t(r * head_size + 2 * i)] = float(std::cos(angle));
                rotations[size_t(r * head_size + 2 * i + 1)] = float(std::sin(angle));
            }
        for (qjit_rope_pairs pairs : {QJIT_ROPE_ADJACENT, QJIT_ROPE_HALVES})
            for (qjit_isa cap : family_caps()) {
                const auto context = make_test_context(2, cap);
                std::vector<float> out = x;
                ASSERT_EQ(qjit_rope(context.get(), out.data(), rows, row_size, head_size, rotations.data(), pairs),
                          QJIT_OK);
                for (int r = 0; r < rows; ++r)
                    for (int h = 0; h < heads; ++h)
                        for (int i = 0; i < head_size / 2; ++i) {
                            const size_t base = size_t(r * row_size + h * head_size);
                            const size_t a = base + size_t(pairs == QJIT_ROPE_ADJACENT ? 2 * i : i);
                            const size_t b = a + size_t(pairs == QJIT_ROPE_ADJACENT ? 1 : head_size / 2);
                            const double c = rotations[size_t(r * head_size + 2 * i)];
                            const double s = rotations[size_t(r * head_size + 2 * i + 1)];
                            EXPECT_NEAR(out[a], x[a] * c - x[b] * s, 2e-6 * (r + 1) * 4) << family_of(cap);
                            EXPECT_NEAR(out[b], x[a] * s + x[b] * c, 2e-6 * (r + 1) * 4) << family_of(cap);
                        }
            }
    }
}

TEST(Swiglu, MatchesDoublesAndIsTheSameInEveryFamily) {
    for (const int64_t count : {1, 15, 16, 17, 1000, 40000}) {
        const std::vector<float> gate = random_rows(1, count, 6), up = random_rows(1, count, 7);
        std::vector<float> first;
        for (qjit_isa cap : family_caps()) {
            const auto context = make_test_context(2, cap);
            std::vector<float> out = up;
            ASSERT_EQ(qjit_swiglu(context.get(), out.data(), gate.data(), count), QJIT_OK);
            for (int64_t i = 0; i < count; ++i) {
                const double g = gate[size_t(i)], expected = g / (1.0 + std::exp(-g)) * up[size_t(i)];
                ASSERT_NEAR(out[size_t(i)], expected, 1e-6 * (std::fabs(expected) + 1e-6)) << family_of(cap) << " " << i;
            }
            if (first.empty()) first = out;
            EXPECT_EQ(out, first) << family_of(cap) << " differs from the portable family";
        }
    }
}

// GELU's tanh form through 1 / (1 + e^(-2u)), against std::tanh in doubles.
TEST(Geglu, MatchesDoublesAndIsTheSameInEveryFamily) {
    for (const int64_t count : {1, 15, 16, 17, 1000, 40000}) {
        std::vector<float> gate = random_rows(1, count, 8);
        const std::vector<float> up = random_rows(1, count, 9);
        if (count > 2) gate[0] = -60.0f, gate[1] = 60.0f;  // where e^(-2u) under- and overflows
        std::vector<float> first;
        for (qjit_isa cap : family_caps()) {
            const auto context = make_test_context(2, cap);
            std::vector<float> out = up;
            ASSERT_EQ(qjit_geglu(context.get(), out.data(), gate.data(), count), QJIT_OK) << qjit_last_error();
            for (int64_t i = 0; i < count; ++i) {
                const double g = gate[size_t(i)];
                const double expected =
                    0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * up[size_t(i)];
                ASSERT_NEAR(out[size_t(i)], expected, 2e-6 * (std::fabs(expected) + 1e-6)) << family_of(cap) << " " << i;
            }
            if (first.empty()) first = out;
            EXPECT_EQ(out, first) << family_of(cap) << " differs from the portable family";
        }
    }
    const auto context = make_test_context(1);
    std::vector<float> x(4, 1.0f);
    EXPECT_EQ(qjit_geglu(context.get(), x.data(), nullptr, 4), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_geglu(context.get(), x.data(), x.data(), -1), QJIT_ERROR_INVALID_ARGUMENT);
}

// The reference: the first index of the largest value, one value at a time (NaN-free rows).
int64_t first_maximum(const float* row, int64_t size) {
    int64_t best = 0;
    for (int64_t i = 1; i < size; ++i)
        if (row[i] > row[best]) best = i;
    return best;
}

// Ties placed where a lane, a vector or a thread's chunk of a split row would decide them wrongly:
// the maximum repeated in the last lane of one vector and the first of the next, near the row's
// end and in its scalar tail.
TEST(Argmax, FindsTheFirstMaximumInEveryFamilyOnOddSizes) {
    for (const int64_t size : {1, 3, 15, 16, 17, 33, 1000, 8191, 49152, 49159, 151936}) {
        for (const int64_t rows : {1, 3}) {
            std::vector<float> x = random_rows(rows, size, uint32_t(size));
            std::vector<int64_t> expected(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) {
                float* row = x.data() + r * size;
                for (int64_t at : {size - 1, size / 2 + 1, size / 2, int64_t(15), int64_t(16), int64_t(31)})
                    if (at < size && (r + at) % 2 == 0) row[at] = 1e6f;  // ties in some rows, a single maximum in others
                expected[size_t(r)] = first_maximum(row, size);
            }
            for (qjit_isa cap : family_caps())
                for (int threads : {1, 2, 3}) {
                    const auto context = make_test_context(threads, cap);
                    std::vector<int64_t> indices(size_t(rows), -7);
                    ASSERT_EQ(qjit_argmax(context.get(), x.data(), rows, size, indices.data()), QJIT_OK)
                        << qjit_last_error();
                    EXPECT_EQ(indices, expected) << family_of(cap) << " size " << size << " threads " << threads;
                }
        }
    }
}

TEST(Argmax, InfinitiesAreValuesAndNaNsAreRefusedByName) {
    const int64_t size = 20000;
    for (qjit_isa cap : family_caps()) {
        const auto context = make_test_context(2, cap);
        std::vector<float> x(size_t(size), -std::numeric_limits<float>::infinity());
        int64_t index = -1;
        ASSERT_EQ(qjit_argmax(context.get(), x.data(), 1, size, &index), QJIT_OK);
        EXPECT_EQ(index, 0) << family_of(cap) << ": a row of -inf alone";
        x[12345] = std::numeric_limits<float>::infinity();
        x[17000] = std::numeric_limits<float>::infinity();
        ASSERT_EQ(qjit_argmax(context.get(), x.data(), 1, size, &index), QJIT_OK);
        EXPECT_EQ(index, 12345) << family_of(cap);
        x[19999] = std::numeric_limits<float>::quiet_NaN();
        EXPECT_EQ(qjit_argmax(context.get(), x.data(), 1, size, &index), QJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(qjit_last_error()).find("values[0][19999] is NaN"), std::string::npos) << qjit_last_error();
        std::vector<float> two(2 * 7, 1.0f);
        two[7 + 3] = std::numeric_limits<float>::quiet_NaN();
        int64_t indices[2];
        EXPECT_EQ(qjit_argmax(context.get(), two.data(), 2, 7, indices), QJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(qjit_last_error()).find("values[1][3] is NaN"), std::string::npos) << qjit_last_error();
    }
    const auto context = make_test_context(1);
    float v = 1.0f;
    int64_t index = 0;
    EXPECT_EQ(qjit_argmax(nullptr, &v, 1, 1, &index), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_argmax(context.get(), &v, 1, 0, &index), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_argmax(context.get(), &v, -1, 1, &index), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_argmax(context.get(), nullptr, 1, 1, &index), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_argmax(context.get(), &v, 1, 1, nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_argmax(context.get(), nullptr, 0, 1, nullptr), QJIT_OK);
}

TEST(OpKernels, NamesAreOfTheCappedFamily) {
    for (qjit_isa cap : family_caps()) {
        const auto context = make_test_context(1, cap);
        for (qjit_op op : {QJIT_OP_ATTENTION, QJIT_OP_RMS_NORM, QJIT_OP_ROPE, QJIT_OP_SWIGLU, QJIT_OP_ARGMAX}) {
            const char* name = nullptr;
            ASSERT_EQ(qjit_op_kernel_name(context.get(), op, &name), QJIT_OK);
            const std::string text(name);
            EXPECT_EQ(text.substr(text.rfind('_') + 1), family_of(cap)) << text;
        }
    }
    const auto context = make_test_context(1);
    const char* name = nullptr;
    EXPECT_EQ(qjit_op_kernel_name(context.get(), qjit_op(9), &name), QJIT_ERROR_INVALID_ARGUMENT);
}

TEST(RowOpsInput, BadArgumentsAreRefusedByName) {
    const auto context = make_test_context(1);
    std::vector<float> x(64, 1.0f), w(64, 1.0f), rot(64, 0.5f);
    EXPECT_EQ(qjit_rms_norm(context.get(), x.data(), w.data(), 1, 0, 1e-5f, x.data()), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_rms_norm(context.get(), x.data(), w.data(), 1, 64, -1.0f, x.data()), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("eps"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(qjit_rms_norm(context.get(), nullptr, w.data(), 1, 64, 1e-5f, x.data()), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_rope(context.get(), x.data(), 1, 64, 5, rot.data(), QJIT_ROPE_HALVES), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_rope(context.get(), x.data(), 1, 60, 16, rot.data(), QJIT_ROPE_HALVES), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_rope(context.get(), x.data(), 1, 64, 16, rot.data(), qjit_rope_pairs(7)), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("pairs"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(qjit_swiglu(context.get(), x.data(), nullptr, 4), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_swiglu(context.get(), x.data(), w.data(), -1), QJIT_ERROR_INVALID_ARGUMENT);
}

template <typename V>
void check_exp_lanes() {
    constexpr int kWidth = qjit::kLanes<V>;
    double worst = 0.0;
    for (float x0 = -87.0f; x0 < 88.0f; x0 += 0.37f) {
        V x;
        for (int i = 0; i < kWidth; ++i) x[i] = x0 + 0.0213f * float(i);
        const V y = qjit::exp_lanes(x);
        for (int i = 0; i < kWidth; ++i) {
            const double expected = std::exp(double(x[i]));
            worst = std::max(worst, std::fabs(double(y[i]) - expected) / expected);
        }
    }
    EXPECT_LT(worst, 3e-7);  // within 2.5 ulp
    V limits = {};
    limits[0] = -std::numeric_limits<float>::infinity();
    limits[1] = -100.0f;
    limits[2] = 100.0f;
    limits[3] = 0.0f;
    const V y = qjit::exp_lanes(limits);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_EQ(y[2], std::numeric_limits<float>::infinity());
    EXPECT_EQ(y[3], 1.0f);
}

TEST(ExpLanes, MatchesStdExpAndItsLimitsAtEveryWidth) {
    check_exp_lanes<qjit::Floats4>();
    check_exp_lanes<qjit::Floats8>();
    check_exp_lanes<qjit::Floats16>();
}

}  // namespace
