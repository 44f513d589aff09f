// A model's weight matrix as its loader holds it: dense fp32 values, or a ggml-quantized tensor of a
// GGUF file. Either way the matrix has n rows (outputs) of k values (inputs), [n][k] row-major, as
// llama2.c, PyTorch and GGUF store a linear layer's weight.
//
// A layer maker asks the loaded matrix for what it builds from: the dense fp32 weights (any maker can,
// a ggml tensor is dequantized on request) or the ggml bytes themselves (only a ggml source has
// them; the exact GGUF import needs them). The model reads its token embedding a row at a time.
// Loaded matrices are cheap to copy: copies share the weights. (Not runtime/cuda's
// CudaExecutor::MatrixSource, which makes a layer's quantized matrix on demand.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace qjit_models::llama {

// A matrix in ggml's block format, as qjit_linear_create_from_gguf takes it: n rows of k values,
// each row a whole number of blocks of the ggml type (GGUF's type numbers: 2 Q4_0, 8 Q8_0, ...).
struct GgmlMatrix {
    uint32_t type = 0;
    const void* data = nullptr;
    size_t bytes = 0;
};

class LoadedMatrix {
public:
    // Writes row `row` (k values) as fp32 to `out`.
    using RowDecoder = std::function<void(int64_t row, float* out)>;

    LoadedMatrix() = default;
    // Dense fp32 weights, n_by_k.size() == n * k.
    static LoadedMatrix dense(std::string name, int64_t n, int64_t k, std::vector<float> n_by_k);
    // ggml weights whose rows `decode_row` dequantizes; `owner` keeps ggml.data alive. `release`
    // (may be empty) drops the bytes from memory until they are read again (a file mapping's pages).
    static LoadedMatrix ggml(std::string name, int64_t n, int64_t k, GgmlMatrix ggml, RowDecoder decode_row,
                             std::shared_ptr<const void> owner, std::function<void()> release = {});

    const std::string& name() const { return name_; }  // for messages: "layer 3 wq", "blk.3.attn_q.weight"
    int64_t n() const { return n_; }
    int64_t k() const { return k_; }

    void read_row(int64_t row, float* out) const;
    // All n x k values as fp32: a view of dense weights, or the ggml weights dequantized into
    // `scratch`. Valid while this source and `scratch` are.
    std::span<const float> dense_values(std::vector<float>& scratch) const;
    // The ggml bytes, or nullptr for dense weights.
    const GgmlMatrix* ggml() const { return ggml_ ? &*ggml_ : nullptr; }
    // For a maker that has read the ggml bytes once into a layer: they need not stay in memory.
    void release_source() const {
        if (release_) release_();
    }

private:
    std::string name_;
    int64_t n_ = 0, k_ = 0;
    std::shared_ptr<const std::vector<float>> dense_;  // null for a ggml source
    std::shared_ptr<const GgmlMatrix> ggml_;           // null for a dense source
    RowDecoder decode_row_;
    std::shared_ptr<const void> owner_;
    std::function<void()> release_;
};

}  // namespace qjit_models::llama
