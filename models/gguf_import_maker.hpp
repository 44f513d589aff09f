// The exact GGUF import: one qjit layer per matrix with exactly the weights of its ggml tensor
// (qjit_linear_create_from_gguf), ggml's own dequantization of the tensor bit for bit, run by qjit's
// kernels for the tensor's block format. A matrix without a ggml tensor is refused, naming it.
#pragma once

#include <memory>
#include <string>

#include "models/llama_linear.hpp"
#include "qjit/qjit.h"

namespace qjit_models::llama {

class GgufImportMaker final : public LayerMaker {
public:
    explicit GgufImportMaker(const qjit_context_options* options = nullptr);  // NULL: qjit's defaults
    std::unique_ptr<Linear> make_linear(const LoadedMatrix& matrix) override;
    std::string name() const override { return "qjit exact GGUF import"; }
    std::shared_ptr<qjit_context> context() const override { return context_; }

private:
    SharedContext context_;
};

}  // namespace qjit_models::llama
