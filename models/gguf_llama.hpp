// A GGUF file of a Llama-architecture model (llama.cpp's model files) read as the shared model's
// weights (models/llama_model.hpp). general.architecture names one of the architectures the forward
// runs: "llama"; "qwen2" (biases on q, k and v: blk.N.attn_{q,k,v}.bias) and "qwen3" (per-head
// RMSNorms of q and k: blk.N.attn_{q,k}_norm.weight), both rotating the halves' pairs in RoPE as
// llama.cpp does for them; "gemma3" (Qwen3's q and k norms, the embedding times sqrt(dim), norms of
// the attention's and FFN's outputs: blk.N.{post_attention_norm, post_ffw_norm}, GELU-gated FFNs,
// and with attention.sliding_window local layers: every sliding_window_pattern-th layer (default 6)
// global, the others within the window and rotated with rope.freq_base_swa (default 10000)). The
// architecture's table is in gguf_llama.cpp.
//
// The config comes from the <architecture>.* metadata: block_count, embedding_length,
// feed_forward_length, attention.head_count, attention.head_count_kv (default: head_count),
// rope.freq_base (default 10000), attention.layer_norm_rms_epsilon, context_length, and the
// vocabulary's size from tokenizer.ggml.tokens. The tensors are token_embd, blk.N.{attn_norm, attn_q,
// attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm and output (absent:
// the classifier is token_embd, tied), each checked against the shape the metadata implies. The
// matrices stay in the file's mapping as ggml sources (dequantized only when a maker asks for fp32);
// norms and biases are read as fp32. For "llama", RoPE rotates adjacent pairs: llama.cpp's converter
// permuted the q and k rows of Hugging Face checkpoints so that this is so, as in llama2.c's run.c.
//
// Whatever is wrong (another architecture, a key missing or out of range, a tensor missing or of the
// wrong shape, a feature the model does not run) throws std::runtime_error naming the file and what
// is wrong; the file itself is checked by qjit::GgufFile.
#pragma once

#include <memory>
#include <string>

#include "io/gguf_file.hpp"
#include "models/llama_model.hpp"
#include "models/tune_driver.hpp"

namespace qjit_models::llama {

std::shared_ptr<const Weights> load_gguf_llama(std::shared_ptr<const qjit::GgufFile> file);

// The linear weights of the Llama GGUF file at `path` (loaded as above), in the order the model
// makes them, the classifier last: what qjit-tune --gguf tunes (models/tune_driver.hpp).
GgmlLinears gguf_linear_weights(const std::string& path);

}  // namespace qjit_models::llama
