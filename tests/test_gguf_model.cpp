// The GGUF reader, dequantizers and importer on a real model: SmolLM2-135M-Instruct with Q4_1 linear
// weights (scripts/fetch_model.sh puts it in $QJIT_MODEL_DIR, default ~/.cache/qjit/models). Skipped
// when the file is absent.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "base/crc32.hpp"
#include "io/gguf_dequantize.hpp"
#include "io/gguf_file.hpp"
#include "io/gguf_import.hpp"
#include "format/reference.hpp"
#include "model_files.hpp"
#include "test_support.hpp"

namespace qjit {
namespace {

std::filesystem::path model_path() { return test::smollm2_model_path(); }

class GgufModel : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(model_path()))
            GTEST_SKIP() << model_path().string() << " is absent: run scripts/fetch_model.sh";
        file_ = GgufFile::open(model_path().string());
    }
    std::shared_ptr<const GgufFile> file_;
};

// The 7 linear weights of each of the 30 blocks.
std::set<std::string> linear_weight_names() {
    std::set<std::string> names;
    for (int block = 0; block < 30; ++block)
        for (const char* linear : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
            names.insert("blk." + std::to_string(block) + "." + linear + ".weight");
    return names;
}

TEST_F(GgufModel, ReadsTheSmolLM2File) {
    EXPECT_EQ(file_->version(), 3u);
    EXPECT_EQ(file_->tensors().size(), 272u);
    EXPECT_EQ(file_->get_string("general.architecture"), "llama");
    EXPECT_EQ(file_->get_uint("llama.block_count"), 30u);
    EXPECT_EQ(file_->get_uint("llama.embedding_length"), 576u);
    EXPECT_EQ(file_->get_string_array("tokenizer.ggml.tokens").size(), 49152u);

    const std::set<std::string> linear = linear_weight_names();
    ASSERT_EQ(linear.size(), 210u);
    for (const std::string& name : linear) EXPECT_EQ(file_->tensor(name).type, GgmlType::Q4_1) << name;
    int q4_1 = 0;
    for (const GgufTensor& tensor : file_->tensors()) q4_1 += tensor.type == GgmlType::Q4_1;
    EXPECT_EQ(q4_1, 210);
    const GgufTensor& embedding = file_->tensor("token_embd.weight");
    EXPECT_EQ(embedding.type, GgmlType::Q8_0);
    EXPECT_EQ(embedding.dims, (std::vector<int64_t>{576, 49152}));
    EXPECT_EQ(file_->tensor("blk.0.ffn_down.weight").dims, (std::vector<int64_t>{1536, 576}));
}

TEST_F(GgufModel, EveryQ4_1TensorDequantizesToFiniteValues) {
    int tensors = 0;
    for (const GgufTensor& tensor : file_->tensors()) {
        if (tensor.type != GgmlType::Q4_1) continue;
        const std::vector<float> values = dequantize_gguf(tensor);
        ASSERT_EQ(values.size(), size_t(tensor.elements())) << tensor.name;
        size_t finite = 0;
        for (const float value : values) finite += std::isfinite(value);
        EXPECT_EQ(finite, values.size()) << tensor.name;
        ++tensors;
    }
    EXPECT_EQ(tensors, 210);
}

// Bit for bit what the gguf package's numpy dequantizers give for these tensors (CRC-32 of the
// fp32 values, computed with gguf 0.19).
TEST_F(GgufModel, DequantizesAsGgufPyDoes) {
    const struct {
        const char* name;
        uint32_t crc;
    } expected[] = {{"token_embd.weight", 0x39786908u},
                    {"blk.0.attn_k.weight", 0xd35b933bu},
                    {"blk.29.ffn_down.weight", 0x975c5ef1u}};
    for (const auto& tensor : expected) {
        const std::vector<float> values = dequantize_gguf(file_->tensor(tensor.name));
        EXPECT_EQ(crc32(values.data(), values.size() * sizeof(float)), tensor.crc) << tensor.name;
    }
}

// Whether the K x N matrix `k_by_n` is the transpose of ggml's [N][K] values, bit for bit.
bool transposed_bits_equal(const std::vector<float>& k_by_n, const std::vector<float>& n_by_k, int64_t k, int64_t n) {
    if (k_by_n.size() != size_t(k * n) || n_by_k.size() != size_t(k * n)) return false;
    for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c)
            if (std::bit_cast<uint32_t>(k_by_n[size_t(r * n + c)]) != std::bit_cast<uint32_t>(n_by_k[size_t(c * k + r)]))
                return false;
    return true;
}

// Every 2-D quantized tensor (the 210 Q4_1 linear weights and the Q8_0 embedding) imports exactly.
TEST_F(GgufModel, ImportsEveryQuantizedMatrixExactly) {
    int imported = 0;
    for (const GgufTensor& tensor : file_->tensors()) {
        if (!gguf_import_supported(tensor.type) || tensor.dims.size() != 2) continue;
        const int64_t k = tensor.dims[0], n = tensor.dims[1];
        const QuantizedMatrix matrix = import_gguf_matrix(tensor.type, tensor.data, tensor.bytes, k, n);
        EXPECT_TRUE(transposed_bits_equal(dequantize(matrix), dequantize_gguf(tensor), k, n)) << tensor.name;
        ++imported;
    }
    EXPECT_EQ(imported, 211);
}

// Through the C API, on the portable path and the JIT: ffn_up (K 576, N 1536, Q4_1) and the
// embedding (K 576, N 49152, Q8_0) as layers dequantize to ggml's values.
TEST_F(GgufModel, CApiLayersDequantizeAsGgml) {
    for (const qjit_isa isa : {QJIT_ISA_PORTABLE, QJIT_ISA_AUTO}) {
        const test::ContextPtr context = test::make_test_context(2, isa);
        for (const char* name : {"blk.0.ffn_up.weight", "token_embd.weight"}) {
            const GgufTensor& tensor = file_->tensor(name);
            const int64_t k = tensor.dims[0], n = tensor.dims[1];
            qjit_linear* raw = nullptr;
            ASSERT_EQ(qjit_linear_create_from_gguf(context.get(), uint32_t(tensor.type), tensor.data, tensor.bytes, k,
                                                   n, &raw),
                      QJIT_OK)
                << qjit_last_error();
            const test::LinearPtr layer(raw);
            std::vector<float> w(size_t(k * n));
            ASSERT_EQ(qjit_linear_dequantize(layer.get(), w.data()), QJIT_OK) << qjit_last_error();
            EXPECT_TRUE(transposed_bits_equal(w, dequantize_gguf(tensor), k, n)) << name << " isa=" << int(isa);
        }
    }
}

}  // namespace
}  // namespace qjit
