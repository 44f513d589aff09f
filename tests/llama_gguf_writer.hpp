// Llama GGUF files for the model tests: the metadata llama.cpp's converter writes for a model's
// config, and a tensor per matrix named as models/tensor_names.hpp names it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf_writer.hpp"
#include "models/llama_model.hpp"
#include "models/tensor_names.hpp"

namespace qjit::test {

// The <architecture>.* and tokenizer metadata of a model of config `c` (tokens "t0", "t1", ...); the
// head size is written when it is not the width over the heads.
inline void add_llama_metadata(GgufWriter& writer, const qjit_models::llama::Config& c,
                               const std::string& architecture = "llama") {
    std::vector<std::string> tokens;
    for (int i = 0; i < c.vocab_size; ++i) tokens.push_back("t" + std::to_string(i));
    const std::string arch = architecture + ".";
    writer.value("general.architecture", architecture)
        .value(arch + "block_count", uint32_t(c.n_layers))
        .value(arch + "embedding_length", uint32_t(c.dim))
        .value(arch + "feed_forward_length", uint32_t(c.hidden_dim))
        .value(arch + "attention.head_count", uint32_t(c.n_heads))
        .value(arch + "attention.head_count_kv", uint32_t(c.n_kv_heads))
        .value(arch + "rope.freq_base", c.rope_base)
        .value(arch + "attention.layer_norm_rms_epsilon", c.rms_eps)
        .value(arch + "context_length", uint32_t(c.seq_len))
        .value("tokenizer.ggml.model", "gpt2")
        .array("tokenizer.ggml.tokens", tokens);
    if (c.head_size * c.n_heads != c.dim) writer.value(arch + "attention.key_length", uint32_t(c.head_size));
}

// The K x N of a block's matrix in a model of config `c` (GGUF dims [K, N]).
inline std::vector<uint64_t> block_matrix_dims(const qjit_models::llama::Config& c, qjit_models::BlockMatrix m) {
    using qjit_models::BlockMatrix;
    switch (m) {
        case BlockMatrix::q: return {uint64_t(c.dim), uint64_t(c.q_dim())};
        case BlockMatrix::k:
        case BlockMatrix::v: return {uint64_t(c.dim), uint64_t(c.kv_dim())};
        case BlockMatrix::o: return {uint64_t(c.q_dim()), uint64_t(c.dim)};
        case BlockMatrix::gate:
        case BlockMatrix::up: return {uint64_t(c.dim), uint64_t(c.hidden_dim)};
        case BlockMatrix::down: return {uint64_t(c.hidden_dim), uint64_t(c.dim)};
    }
    return {};
}

}  // namespace qjit::test
