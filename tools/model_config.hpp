// The linear-layer shapes of a model, as listed in configs/models/NAME.yaml:
//     name: llama-2-7b
//     layers: 32
//     linear:
//       - {name: q_proj, k: 4096, n: 4096}
// Used by qjit-tune to pick the shapes it times, whole or as one rank's tensor-parallel shard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qjit_tools {

struct LinearShape {
    std::string name;  // e.g. "q_proj", or "q_proj,k_proj" once merged with same-shaped layers
    int64_t k = 0;
    int64_t n = 0;
};

struct ModelConfig {
    std::string name;
    int layers = 0;
    std::vector<LinearShape> linear;
};

// Throws std::runtime_error naming the file and what is wrong.
ModelConfig load_model_config(const std::string& path);

// How a Megatron-style tensor-parallel split cuts a layer: column-parallel layers (the attention's
// q/k/v projections, the MLP's gate and up projections, the classifier) keep K and hold N / tp
// outputs on each rank; row-parallel layers (the attention's output projection, the MLP's down
// projection) hold K / tp inputs and keep N.
enum class TensorParallelSplit { column, row };

// The split of a layer by its name: a name in the table of tools/model_config.cpp (q_proj, up_proj,
// w1, ... column; o_proj, down_proj, w2, ... row), alone or after a prefix and '_'
// (expert_w1, dense_down_proj). Throws std::runtime_error naming a layer not in the table.
TensorParallelSplit tensor_parallel_split(const std::string& layer_name);

// The shapes one rank holds at tensor-parallel world size `tp` (1: the layers unchanged). Throws
// std::runtime_error naming the layer when tp does not divide the dimension its split cuts, or
// when a row-parallel shard would cut a group of `group_size` rows (group_size <= 0: one group
// per column, never cut).
std::vector<LinearShape> tensor_parallel_shards(const std::vector<LinearShape>& shapes, int tp, int group_size);

// The layer shapes with duplicates merged (names joined by commas), in first-seen order.
std::vector<LinearShape> distinct_shapes(const std::vector<LinearShape>& shapes);

}  // namespace qjit_tools
