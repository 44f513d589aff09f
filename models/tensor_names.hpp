// The names of a Llama model's tensors in every file qjit reads, in one table: GGUF (llama.cpp),
// Hugging Face / GPTQ checkpoints, llama2.c (whose checkpoints are positional: its names are the
// ones run.c gives the arrays, used in messages), and how tensor parallelism splits each matrix.
// The loaders (gguf_llama, llama2_checkpoint, flash_convert) and the model configs' split rules
// (model_config) read their names here.
#pragma once

#include <string>
#include <string_view>

namespace qjit_models {

// How a Megatron-style tensor-parallel split cuts a layer: column-parallel layers (the attention's
// q/k/v projections, the MLP's gate and up projections, the classifier) keep K and hold N / tp
// outputs on each rank; row-parallel layers (the attention's output projection, the MLP's down
// projection) hold K / tp inputs and keep N.
enum class TensorParallelSplit { column, row };

// The linear weights of one Llama block, in the order the model makes them.
enum class BlockMatrix { q, k, v, o, gate, down, up };
inline constexpr BlockMatrix kBlockMatrices[] = {BlockMatrix::q,    BlockMatrix::k,    BlockMatrix::v, BlockMatrix::o,
                                                 BlockMatrix::gate, BlockMatrix::down, BlockMatrix::up};

struct BlockMatrixNames {
    BlockMatrix matrix;
    const char* gguf;     // "attn_q": GGUF's blk.N.attn_q.weight
    const char* hf;       // "self_attn.q_proj": a checkpoint's model.layers.N.self_attn.q_proj
    const char* llama2c;  // "wq": run.c's array
    TensorParallelSplit split;
};
const BlockMatrixNames& names_of(BlockMatrix matrix);

// A block's norms, GGUF names; the per-head norms of q and k (Qwen3, Gemma 3); the norms of the
// attention's and the FFN's outputs before their residual adds (Gemma 3).
inline constexpr const char* kGgufAttentionNorm = "attn_norm";
inline constexpr const char* kGgufFfnNorm = "ffn_norm";
inline constexpr const char* kGgufQNorm = "attn_q_norm";
inline constexpr const char* kGgufKNorm = "attn_k_norm";
inline constexpr const char* kGgufPostAttentionNorm = "post_attention_norm";
inline constexpr const char* kGgufPostFfnNorm = "post_ffw_norm";

// GGUF: "blk.3.attn_q.weight" for (3, "attn_q"); the model-wide tensors.
std::string gguf_block_tensor(int layer, const char* part);
std::string gguf_block_tensor(int layer, BlockMatrix matrix);
// A matrix's bias (Qwen2's q, k and v): "blk.3.attn_q.bias".
std::string gguf_block_bias(int layer, BlockMatrix matrix);
inline constexpr const char* kGgufTokenEmbedding = "token_embd.weight";
inline constexpr const char* kGgufOutputNorm = "output_norm.weight";
inline constexpr const char* kGgufClassifier = "output.weight";

// Hugging Face / GPTQ: "model.layers.3.mlp.gate_proj", under the block's prefix "model.layers.3.".
std::string hf_block_prefix(int layer);
std::string hf_block_tensor(int layer, BlockMatrix matrix);

// llama2.c: "layer 3 wq" (how its loader names a matrix in messages).
std::string llama2c_block_tensor(int layer, BlockMatrix matrix);

// The split of a layer by its name in a model config (configs/models/*.yaml): a checkpoint's short
// name (q_proj, up_proj, ...), a llama2.c name (wq, w1, ...), a name of another architecture's
// config (mlp_up, mlp_down, classifier), alone or after a prefix and '_' (expert_w1,
// dense_down_proj). Throws std::runtime_error naming a layer not in the table.
TensorParallelSplit tensor_parallel_split(std::string_view layer_name);

}  // namespace qjit_models
