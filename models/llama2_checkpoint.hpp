// llama2.c "legacy" v0 checkpoints (karpathy's run.c format), read into the shared Llama model's
// weights (models/llama_model.hpp): RoPE base 10000, RMSNorm eps 1e-5, head size dim / n_heads, and a
// classifier that shares the token embedding unless the header's vocab_size is negative.
//
// Errors (bad files) are reported by throwing std::runtime_error.
#pragma once

#include <memory>
#include <string>

#include "models/llama_model.hpp"

namespace qjit_models::llama2 {

// Reads and validates a legacy v0 checkpoint (header values, exact file size, finite weights).
std::shared_ptr<const qjit_models::llama::Weights> load_checkpoint(const std::string& path);

}  // namespace qjit_models::llama2
