// GGUF tensors imported as qjit layers (io/gguf_import.hpp, qjit_linear_create_from_gguf): for
// every imported type, random blocks (random bytes; fp16 scale fields of both signs from zero and
// subnormals to 65504) on odd shapes dequantize to ggml's values bit for bit (io/gguf_dequantize,
// itself checked against the gguf package), directly, through the C API on the portable and JIT
// paths, and after a save and load; forwards on every backend stay within the oracle's error bound;
// other types, shapes, byte counts and NULLs are refused by name. A GGUF file opens as a checkpoint
// whose layers are its tensors of these types.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "base/error.hpp"
#include "io/gguf_dequantize.hpp"
#include "io/gguf_import.hpp"
#include "format/reference.hpp"
#include "runtime/layer_backend.hpp"
#include "runtime/linear_layer.hpp"
#include "test_backends.hpp"
#include "layer_internals.hpp"
#include "test_support.hpp"
#include "gguf_writer.hpp"
#include "tools/random_gguf.hpp"
#include "qjit/qjit_tp.h"

namespace qjit {
namespace {

using test::ContextPtr;
using test::LinearPtr;

// How each type is stored, and its bits per weight in qjit (stored_bytes) and in the file.
struct ImportedType {
    GgmlType type;
    const char* stored_as;
    double qjit_bits, gguf_bits;
};
const ImportedType kTypes[] = {
    {GgmlType::Q4_0, "Q4_0 as q4g32_sym (scale d, zero 8)", 4.5, 4.5},
    {GgmlType::Q4_1, "Q4_1 as q4g32_off (scale d, offset m)", 5.0, 5.0},
    {GgmlType::Q5_0, "Q5_0 as q5g32_sym (scale d, zero 16)", 5.5, 5.5},
    {GgmlType::Q5_1, "Q5_1 as q5g32_off (scale d, offset m)", 6.0, 6.0},
    {GgmlType::Q8_0, "Q8_0 as q8g32_sym (int8 codes plus 128, scale d, zero 128)", 8.5, 8.5},
    {GgmlType::Q2_K, "Q2_K as q2g16_off_sb4 (scale d * sc, offset -(dmin * m))", 2.625, 2.625},
    {GgmlType::Q3_K, "Q3_K as q3g16_sym_sb6 (scale d * (sc - 32), zero 4)", 3.4375, 3.4375},
    {GgmlType::Q4_K, "Q4_K as q4g32_off_sb6 (scale d * sc, offset -(dmin * m))", 4.5, 4.5},
    {GgmlType::Q5_K, "Q5_K as q5g32_off_sb6 (scale d * sc, offset -(dmin * m))", 5.5, 5.5},
    {GgmlType::Q6_K, "Q6_K as q6g16_sym_sb8 (scale d * sc, zero 32)", 6.5625, 6.5625},
    {GgmlType::IQ4_NL, "IQ4_NL as q4g32_sym_iq4nl (scale d, IQ4_NL levels plus 128, zero 128)", 4.5, 4.5},
    {GgmlType::IQ4_XS, "IQ4_XS as q4g32_sym_sb6_iq4nl (scale d * (sc - 32), IQ4_NL levels plus 128, zero 128)", 4.25,
     4.25},
};

GgmlBlock block_of(GgmlType type) {
    GgmlBlock block;
    EXPECT_TRUE(ggml_block_of(type, &block));
    return block;
}

// A finite fp16 bit pattern: zero, subnormal, small, large or any normal, of either sign.
uint16_t random_half(std::mt19937& rng) {
    const uint32_t sign = rng() & 1, kind = rng() % 8, mantissa = rng() & 0x3ff;
    uint32_t exponent = 1 + rng() % 30;  // any normal
    if (kind == 0) return uint16_t(sign << 15);                                // +-0: a zero scale or min
    if (kind == 1) return uint16_t(sign << 15 | (mantissa == 0 ? 1 : mantissa));  // subnormal
    if (kind == 2) exponent = 1 + rng() % 4;                                   // 2^-14 .. 2^-10
    if (kind == 3) exponent = 27 + rng() % 4;                                  // 4096 .. 65504
    return uint16_t(sign << 15 | exponent << 10 | mantissa);
}

// n rows of k values of `type`: random bytes with random finite fp16 scale fields.
std::vector<uint8_t> random_tensor(const ImportedType& t, int64_t k, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> bytes =
        qjit_tools::random_gguf_tensor(qjit_ggml_type(t.type), k, n, seed, [&] { return random_half(rng); });
    EXPECT_EQ(bytes.size(), size_t(n * (k / block_of(t.type).values) * block_of(t.type).bytes));
    return bytes;
}

// ggml's values of the tensor, [n][k].
std::vector<float> ggml_values(GgmlType type, const std::vector<uint8_t>& bytes, int64_t k, int64_t n) {
    return dequantize_gguf(GgufTensor{"w", type, {k, n}, bytes.data(), bytes.size()});
}

// k_by_n (K x N) is the transpose of n_by_k (N x K), bit for bit (signed zeros included).
void expect_transposed_bits(const std::vector<float>& k_by_n, const std::vector<float>& n_by_k, int64_t k,
                            int64_t n) {
    ASSERT_EQ(k_by_n.size(), size_t(k * n));
    ASSERT_EQ(n_by_k.size(), size_t(k * n));
    int reported = 0;
    for (int64_t r = 0; r < k && reported < 5; ++r)
        for (int64_t c = 0; c < n && reported < 5; ++c) {
            const float got = k_by_n[size_t(r * n + c)], want = n_by_k[size_t(c * k + r)];
            if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want)) {
                ADD_FAILURE() << "W[" << r << "][" << c << "] is " << got << " (0x" << std::hex
                              << std::bit_cast<uint32_t>(got) << "), ggml gives " << want << " (0x"
                              << std::bit_cast<uint32_t>(want) << std::dec << ")";
                ++reported;
            }
        }
}

LinearPtr create_from_gguf(qjit_context* context, GgmlType type, const std::vector<uint8_t>& bytes, int64_t k,
                           int64_t n) {
    qjit_linear* raw = nullptr;
    EXPECT_EQ(qjit_linear_create_from_gguf(context, uint32_t(type), bytes.data(), bytes.size(), k, n, &raw), QJIT_OK)
        << qjit_last_error();
    return LinearPtr(raw);
}

std::vector<float> dequantized(const qjit_linear* layer, int64_t k, int64_t n) {
    std::vector<float> w(size_t(k * n));
    EXPECT_EQ(qjit_linear_dequantize(layer, w.data()), QJIT_OK) << qjit_last_error();
    return w;
}

struct Shape {
    int64_t blocks, n;
};
constexpr Shape kShapes[] = {{1, 1}, {1, 7}, {1, 33}, {3, 1}, {3, 7}, {3, 33}};

class GgufImport : public ::testing::TestWithParam<ImportedType> {};

std::string type_label(const testing::TestParamInfo<ImportedType>& info) { return ggml_type_name(info.param.type); }

INSTANTIATE_TEST_SUITE_P(Gguf, GgufImport, ::testing::ValuesIn(kTypes), type_label);

TEST_P(GgufImport, DequantizesAsGgmlBitForBit) {
    const ImportedType& t = GetParam();
    uint32_t seed = uint32_t(t.type) * 100;
    for (const Shape shape : kShapes) {
        const int64_t k = shape.blocks * block_of(t.type).values, n = shape.n;
        SCOPED_TRACE(testing::Message() << "K=" << k << " N=" << n);
        const std::vector<uint8_t> bytes = random_tensor(t, k, n, seed++);
        const QuantizedMatrix matrix = import_gguf_matrix(t.type, bytes.data(), bytes.size(), k, n);
        EXPECT_EQ(matrix.params.format(), gguf_import_format(t.type, k, n));
        expect_transposed_bits(dequantize(matrix), ggml_values(t.type, bytes, k, n), k, n);
    }
}

// The import straight into panels (what the C API's layers use) gives import_gguf_matrix's params
// and pack_codes of its codes word for word: panel widths that divide N, that do not, and wider
// than N, filled in one call and panel by panel.
TEST_P(GgufImport, PanelsEqualTheMatrixPacked) {
    const ImportedType& t = GetParam();
    uint32_t seed = uint32_t(t.type) * 10 + 3;
    for (const Shape shape : kShapes)
        for (const int panel : {16, 32, 48, 64}) {
            const int64_t k = shape.blocks * block_of(t.type).values, n = shape.n;
            SCOPED_TRACE(testing::Message() << "K=" << k << " N=" << n << " panel=" << panel);
            const std::vector<uint8_t> bytes = random_tensor(t, k, n, seed++);
            const QuantizedMatrix matrix = import_gguf_matrix(t.type, bytes.data(), bytes.size(), k, n);
            const PackedCodes expected = pack_codes(matrix.codes.data(), matrix.params.bits, k, n, panel);
            QuantParams params = import_gguf_params_shell(t.type, bytes.data(), bytes.size(), k, n);
            PackedCodes codes = unwritten_packed_codes(params.bits, k, n, panel);
            std::fill(codes.words.begin(), codes.words.end(), 0xdeadbeefu);  // every word must be written
            if (seed % 2 == 0) {
                import_gguf_panels(t.type, bytes.data(), 0, codes.num_panels(), params, codes);
            } else {
                for (int64_t p = codes.num_panels() - 1; p >= 0; --p)
                    import_gguf_panels(t.type, bytes.data(), p, p + 1, params, codes);
            }
            EXPECT_EQ(codes.words, expected.words);
            EXPECT_EQ(std::memcmp(params.scales.data(), matrix.params.scales.data(),
                                  params.scales.size() * sizeof(float)), 0);
            EXPECT_EQ(params.scales.size(), matrix.params.scales.size());
            EXPECT_EQ(params.offsets, matrix.params.offsets);
            EXPECT_EQ(params.zeros, matrix.params.zeros);
            EXPECT_EQ(params.format(), matrix.params.format());
        }
}

// The C API's layer, on the portable path and on the JIT, dequantizes as ggml does, names its
// source, and counts the bits per weight the docs give.
TEST_P(GgufImport, CApiLayerDequantizesAsGgml) {
    const ImportedType& t = GetParam();
    EXPECT_EQ(gguf_import_name(t.type), t.stored_as);
    for (const qjit_isa isa : {QJIT_ISA_PORTABLE, QJIT_ISA_AUTO}) {
        const ContextPtr context = test::make_test_context(2, isa);
        uint32_t seed = uint32_t(t.type) * 100 + 50;
        for (const Shape shape : kShapes) {
            const int64_t k = shape.blocks * block_of(t.type).values, n = shape.n;
            SCOPED_TRACE(testing::Message() << "K=" << k << " N=" << n << " isa=" << int(isa));
            const std::vector<uint8_t> bytes = random_tensor(t, k, n, seed++);
            const LinearPtr layer = create_from_gguf(context.get(), t.type, bytes, k, n);
            ASSERT_TRUE(layer);
            expect_transposed_bits(dequantized(layer.get(), k, n), ggml_values(t.type, bytes, k, n), k, n);
            const char* description = nullptr;
            ASSERT_EQ(qjit_linear_describe(layer.get(), &description), QJIT_OK);
            EXPECT_NE(std::string(description).find(std::string("source=\"GGUF ") + t.stored_as + "\""),
                      std::string::npos)
                << description;
            if (shape.blocks > 1) {  // not one group per column
                qjit_linear_info info;
                ASSERT_EQ(qjit_linear_get_info(layer.get(), &info), QJIT_OK);
                EXPECT_EQ(double(info.stored_bytes) * 8 / double(k * n), t.qjit_bits);
                EXPECT_EQ(double(bytes.size()) * 8 / double(k * n), t.gguf_bits);
                EXPECT_EQ(info.scale_code_bits, gguf_import_format(t.type).scale_code_bits);
            }
        }
    }
}

// Forwards at batch 1 and 5 on every kernel family this machine runs, against the oracle on the
// imported matrix.
TEST_P(GgufImport, ForwardsWithinTheOracleBound) {
    const ImportedType& t = GetParam();
    for (const test::Backend backend : test::available_backends()) {
        SCOPED_TRACE(test::backend_name(backend));
        const ContextPtr context = test::make_test_context(2, backend.isa, backend.activations);
        uint32_t seed = uint32_t(t.type) * 1000;
        for (const Shape shape : kShapes) {
            const int64_t k = shape.blocks * block_of(t.type).values, n = shape.n;
            const std::vector<uint8_t> bytes = random_tensor(t, k, n, seed++);
            const QuantizedMatrix matrix = import_gguf_matrix(t.type, bytes.data(), bytes.size(), k, n);
            const LinearPtr layer = create_from_gguf(context.get(), t.type, bytes, k, n);
            ASSERT_TRUE(layer);
            ASSERT_EQ(test::jit_of(*layer) != nullptr, backend.isa != QJIT_ISA_PORTABLE) << layer->description;
            for (const int64_t m : {1, 5}) {
                SCOPED_TRACE(testing::Message() << "m=" << m << " " << layer->description);
                const std::vector<float> x = test::random_floats(size_t(m * k), seed++);
                std::vector<float> y(size_t(m * n)), expected(y.size());
                ASSERT_EQ(qjit_linear_forward(layer.get(), x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
                reference_forward(matrix, x.data(), m, expected.data());
                std::vector<double> bound = test::forward_error_bound(matrix, x.data(), m);
                if (test::jit_of(*layer) && test::jit_of(*layer)->spec().path == jit::ActivationPath::Int8)
                    test::add_int8_activation_error(bound, matrix, x.data(), m, test::jit_of(*layer)->spec());
                test::expect_within(y, expected, bound);
            }
        }
    }
}

// The default activation path (docs/cpu-kernels.md): int8 for codes of up to 6 bits, as the
// K-quants' own CPU kernels run them; exact fp32 for 8-bit codes.
TEST_P(GgufImport, DefaultPathIsInt8UpToSixBits) {
    const ImportedType& t = GetParam();
    if (!cpu_supports(QJIT_ISA_AVX2)) GTEST_SKIP() << "no generated kernels without AVX2";
    const ContextPtr context = test::make_test_context(1, QJIT_ISA_AVX2, QJIT_ACTIVATIONS_AUTO);
    const int64_t k = 2 * block_of(t.type).values, n = 8;
    const LinearPtr layer = create_from_gguf(context.get(), t.type, random_tensor(t, k, n, 7), k, n);
    ASSERT_TRUE(layer);
    const JitExecutor* jit = test::jit_of(*layer);
    ASSERT_NE(jit, nullptr) << layer->description;
    const int bits = gguf_import_format(t.type).bits;
    EXPECT_EQ(jit->spec().path, bits <= 6 ? jit::ActivationPath::Int8 : jit::ActivationPath::F32)
        << bits << "-bit codes, " << layer->description;
}

TEST_P(GgufImport, SavedLayerLoadsIdentical) {
    const ImportedType& t = GetParam();
    const ContextPtr context = test::make_test_context();
    const int64_t k = 3 * block_of(t.type).values, n = 7;
    const std::vector<uint8_t> bytes = random_tensor(t, k, n, uint32_t(t.type));
    const LinearPtr layer = create_from_gguf(context.get(), t.type, bytes, k, n);
    ASSERT_TRUE(layer);
    const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                       ("qjit_gguf_import_" + std::to_string(::getpid()) + ".qjit");
    ASSERT_EQ(qjit_linear_save(layer.get(), path.c_str()), QJIT_OK) << qjit_last_error();
    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_load(context.get(), path.c_str(), &raw), QJIT_OK) << qjit_last_error();
    const LinearPtr loaded(raw);
    std::filesystem::remove(path);
    expect_transposed_bits(dequantized(loaded.get(), k, n), ggml_values(t.type, bytes, k, n), k, n);
}

// A block whose fp16 scale field is infinite or NaN gives ggml non-finite weights: refused, naming
// the row and block.
TEST_P(GgufImport, RefusesNonFiniteScales) {
    const ImportedType& t = GetParam();
    const ContextPtr context = test::make_test_context();
    const int64_t k = 2 * block_of(t.type).values, n = 3;
    for (const int field : qjit_tools::ggml_block_shape(qjit_ggml_type(t.type)).half_fields)
        for (const uint16_t half : {uint16_t(0x7c00), uint16_t(0xfc00), uint16_t(0x7e00)}) {
            std::vector<uint8_t> bytes = random_tensor(t, k, n, 7);
            const size_t at = size_t(2 * 1 + 1) * size_t(block_of(t.type).bytes) + size_t(field);  // row 1, block 1
            bytes[at] = uint8_t(half);
            bytes[at + 1] = uint8_t(half >> 8);
            qjit_linear* raw = nullptr;
            EXPECT_STATUS(
                qjit_linear_create_from_gguf(context.get(), uint32_t(t.type), bytes.data(), bytes.size(), k, n, &raw),
                QJIT_ERROR_INVALID_ARGUMENT, "row 1, block 1: an fp16 scale field (d, m or dmin) is infinite or NaN");
            EXPECT_EQ(raw, nullptr);
        }
}

TEST(GgufImportRefusals, OtherTypesByName) {
    const ContextPtr context = test::make_test_context();
    const std::vector<uint8_t> bytes(1 << 16);
    for (const GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_1, GgmlType::Q8_K,
                                GgmlType::IQ2_XXS, GgmlType::IQ3_S, GgmlType::TQ1_0,
                                GgmlType::TQ2_0, GgmlType::MXFP4, GgmlType::I8, GgmlType::F64, GgmlType(31),
                                GgmlType(1000)}) {
        const std::string name = ggml_type_name(type);
        SCOPED_TRACE(name);
        EXPECT_FALSE(gguf_import_supported(type));
        qjit_linear* raw = nullptr;
        EXPECT_STATUS(qjit_linear_create_from_gguf(context.get(), uint32_t(type), bytes.data(), 256, 256, 1, &raw),
                      QJIT_ERROR_UNSUPPORTED, "importing ggml " + name + " tensors is not supported");
        EXPECT_NE(std::string(qjit_last_error()).find("qjit imports Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, "
                                                      "Q5_K, Q6_K, IQ4_NL and IQ4_XS"),
                  std::string::npos)
            << qjit_last_error();
        EXPECT_EQ(raw, nullptr);
    }
    qjit_linear* raw = nullptr;
    EXPECT_STATUS(qjit_linear_create_from_gguf(context.get(), QJIT_GGML_Q4_0 - 1, bytes.data(), 1024, 256, 1, &raw),
                  QJIT_ERROR_UNSUPPORTED, "F16 tensors is not supported (they are not quantized");
}

TEST(GgufImportRefusals, ShapesByteCountsAndNulls) {
    const ContextPtr context = test::make_test_context();
    const std::vector<uint8_t> bytes(1 << 16);
    qjit_linear* raw = nullptr;
    auto create = [&](uint32_t type, size_t size, int64_t k, int64_t n) {
        return qjit_linear_create_from_gguf(context.get(), type, bytes.data(), size, k, n, &raw);
    };
    EXPECT_STATUS(create(QJIT_GGML_Q4_0, 18, 16, 1), QJIT_ERROR_INVALID_ARGUMENT,
                  "k = 16 is not a whole number of Q4_0 blocks (32 values each)");
    EXPECT_STATUS(create(QJIT_GGML_Q4_K, 144, 128, 1), QJIT_ERROR_INVALID_ARGUMENT,
                  "k = 128 is not a whole number of Q4_K blocks (256 values each)");
    EXPECT_STATUS(create(QJIT_GGML_Q6_K, 210, 288, 1), QJIT_ERROR_INVALID_ARGUMENT, "Q6_K blocks");
    for (const size_t size : {size_t(0), size_t(18 * 6 - 1), size_t(18 * 6 + 1), size_t(18 * 3)})
        EXPECT_STATUS(create(QJIT_GGML_Q4_0, size, 64, 3), QJIT_ERROR_INVALID_ARGUMENT,
                      "a 64 x 3 Q4_0 tensor holds N * (K / 32) * 18 = 108 bytes; " + std::to_string(size) +
                          " were given");
    EXPECT_STATUS(create(QJIT_GGML_Q6_K, 210 * 2, 256, 1), QJIT_ERROR_INVALID_ARGUMENT, "= 210 bytes; 420 were given");
    EXPECT_STATUS(create(QJIT_GGML_Q4_0, 0, 0, 1), QJIT_ERROR_INVALID_ARGUMENT, "k is 0");
    EXPECT_STATUS(create(QJIT_GGML_Q4_0, 0, -32, 1), QJIT_ERROR_INVALID_ARGUMENT, "k is -32");
    EXPECT_STATUS(create(QJIT_GGML_Q4_0, 0, 32, 0), QJIT_ERROR_INVALID_ARGUMENT, "n is 0");
    EXPECT_STATUS(create(QJIT_GGML_Q4_0, 18, int64_t(1) << 32, 1), QJIT_ERROR_INVALID_ARGUMENT, "k is");
    EXPECT_EQ(raw, nullptr);

    EXPECT_STATUS(qjit_linear_create_from_gguf(nullptr, QJIT_GGML_Q4_0, bytes.data(), 18, 32, 1, &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "context is NULL");
    EXPECT_STATUS(qjit_linear_create_from_gguf(context.get(), QJIT_GGML_Q4_0, nullptr, 18, 32, 1, &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "data is NULL");
    EXPECT_STATUS(qjit_linear_create_from_gguf(context.get(), QJIT_GGML_Q4_0, bytes.data(), 18, 32, 1, nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "layer (the output pointer) is NULL");
    EXPECT_EQ(raw, nullptr);
    EXPECT_THROW(import_gguf_matrix(GgmlType::Q4_0, nullptr, 18, 32, 1), Error);
}

// The CUDA backend's answer for each imported format (no device needed): the types it would refuse
// are named by why, as a CUDA context's qjit_linear_create_from_gguf reports them.
TEST(GgufImportCuda, RefusedFormatsNameTheReason) {
    const std::string groups_of_16 = "CUDA kernels need groups of a multiple of 32 rows (or one per column), not 16";
    const std::string codebook = "CUDA kernels do not read codebooks (IQ4_NL levels)";
    auto expected = [&](GgmlType type) -> std::string {
        switch (type) {
            case GgmlType::Q4_0:
            case GgmlType::Q5_0:  // 5-bit codes, zero 16
            case GgmlType::Q8_0:
            case GgmlType::Q4_1:  // float offsets
            case GgmlType::Q5_1:
            case GgmlType::Q4_K:  // super-block scales, groups of 32
            case GgmlType::Q5_K: return "";
            case GgmlType::Q2_K:
            case GgmlType::Q3_K:
            case GgmlType::Q6_K: return groups_of_16;
            case GgmlType::IQ4_NL:
            case GgmlType::IQ4_XS: return codebook;
            default: ADD_FAILURE() << "no expected CUDA answer for GGML type " << int(type); return "?";
        }
    };
    for (const ImportedType& t : kTypes) {
        SCOPED_TRACE(t.stored_as);
        EXPECT_EQ(unsupported_reason(BackendKind::Cuda, gguf_import_format(t.type, 4096, 4096)), expected(t.type));
    }
}

// A GGUF file as a checkpoint: its 2-dimensional tensors of imported types are its layers, in natural
// order of their names (F32 and F16 tensors are not), described as qjit imports them, and each
// created by name holds the same weights as qjit_linear_create_from_gguf makes of its bytes.
TEST(GgufCheckpoint, TensorsOfImportedTypesAreLayersByName) {
    const ContextPtr context = test::make_test_context();
    struct Tensor {
        const char* name;
        const ImportedType& type;
        int64_t k, n;
        std::vector<uint8_t> bytes;
    };
    std::vector<Tensor> tensors;
    tensors.push_back({"blk.10.ffn_down.weight", kTypes[7], 256, 5, {}});  // Q4_K
    tensors.push_back({"blk.2.attn_q.weight", kTypes[4], 64, 3, {}});     // Q8_0
    tensors.push_back({"token_embd.weight", kTypes[0], 96, 7, {}});       // Q4_0
    test::GgufWriter writer;
    writer.value("general.architecture", std::string("llama"));
    uint32_t seed = 40;
    for (Tensor& t : tensors) {
        t.bytes = random_tensor(t.type, t.k, t.n, seed++);
        writer.tensor({t.name, uint32_t(t.type.type), {uint64_t(t.k), uint64_t(t.n)},
                       std::string(t.bytes.begin(), t.bytes.end()), std::nullopt});
    }
    writer.tensor({"output_norm.weight", 0, {64}, std::string(64 * 4, '\0'), std::nullopt});        // F32, 1-D
    writer.tensor({"blk.0.attn_k.weight", 1, {64, 2}, std::string(64 * 2 * 2, '\0'), std::nullopt});  // F16
    const std::string path =
        (std::filesystem::temp_directory_path() / ("qjit_gguf_checkpoint_" + std::to_string(getpid()) + ".gguf")).string();
    {
        const std::string bytes = writer.bytes();
        FILE* file = std::fopen(path.c_str(), "wb");
        ASSERT_NE(file, nullptr);
        ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
        std::fclose(file);
    }
    qjit_checkpoint* checkpoint = nullptr;
    ASSERT_EQ(qjit_checkpoint_open(context.get(), path.c_str(), &checkpoint), QJIT_OK) << qjit_last_error();
    int64_t count = 0;
    ASSERT_EQ(qjit_checkpoint_num_layers(checkpoint, &count), QJIT_OK);
    ASSERT_EQ(count, 3);
    const size_t natural_order[] = {1, 0, 2};  // blk.2 before blk.10
    for (int64_t i = 0; i < count; ++i) {
        const Tensor& t = tensors[natural_order[i]];
        SCOPED_TRACE(t.name);
        qjit_checkpoint_layer info;
        ASSERT_EQ(qjit_checkpoint_get_layer(checkpoint, i, &info), QJIT_OK) << qjit_last_error();
        const WeightFormat format = gguf_import_format(t.type.type, t.k, t.n);
        EXPECT_STREQ(info.name, t.name);
        EXPECT_EQ(info.k, t.k);
        EXPECT_EQ(info.n, t.n);
        EXPECT_EQ(info.bits, format.bits);
        EXPECT_EQ(info.group_size, format.group_size);
        EXPECT_EQ(bool(info.symmetric), format.symmetric);
        EXPECT_EQ(std::string(info.format), format.name());
        EXPECT_EQ(info.checkpoint_format, QJIT_GGUF_BLOCKS);
        EXPECT_EQ(info.ggml_type, int(t.type.type));
        EXPECT_EQ(info.checkpoint_bytes, int64_t(t.bytes.size()));
        qjit_linear* raw = nullptr;
        ASSERT_EQ(qjit_checkpoint_create_layer(checkpoint, t.name, &raw), QJIT_OK) << qjit_last_error();
        const LinearPtr layer(raw);
        const LinearPtr direct = create_from_gguf(context.get(), t.type.type, t.bytes, t.k, t.n);
        const std::vector<float> got = dequantized(layer.get(), t.k, t.n), want = dequantized(direct.get(), t.k, t.n);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
    }
    qjit_linear* raw = nullptr;
    EXPECT_EQ(qjit_checkpoint_create_layer(checkpoint, "output_norm.weight", &raw), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("has no layer 'output_norm.weight'"), std::string::npos);
    EXPECT_EQ(raw, nullptr);
    // What needs GPTQ tensors refuses a GGUF checkpoint by name.
    qjit_tp_mlp* mlp = nullptr;
    EXPECT_EQ(qjit_tp_mlp_create_from_checkpoint(checkpoint, QJIT_MLP_GELU, "blk.2.attn_q.weight", nullptr,
                                                 "token_embd.weight", 0, 1, QJIT_TP_NAIVE, &mlp),
              QJIT_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(qjit_last_error()).find("is a GGUF file"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(qjit_checkpoint_close(checkpoint), QJIT_OK);

    // A damaged file is refused whole.
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
    EXPECT_EQ(qjit_checkpoint_open(context.get(), path.c_str(), &checkpoint), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_EQ(checkpoint, nullptr);
    std::filesystem::remove(path);
}

}  // namespace
}  // namespace qjit
