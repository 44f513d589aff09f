// The linear-layer shapes of a model, as listed in configs/models/NAME.yaml:
//     name: llama-2-7b
//     layers: 32
//     linear:
//       - {name: q_proj, k: 4096, n: 4096}
// Used by qjit-tune to pick the shapes it times, whole or as one rank's tensor-parallel shard
// (models/tensor_names.hpp says which layers split which way).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/tensor_names.hpp"

namespace qjit_models {

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

// The shipped configs/models/NAME.yaml (the benchmarks' model shapes): in $QJIT_MODEL_CONFIGS_DIR
// when set, else in the source tree qjit was built from, else, where that tree is absent (a build
// carried to a GPU machine), under the working folder. Throws as load_model_config does.
ModelConfig shipped_model_config(const std::string& name);

// Llama-2-7B's layers (as configs/models/llama-2-7b.yaml): hidden 4096, MLP 11008. qjit-tune's
// default.
ModelConfig llama2_7b_config();

// The shapes one rank holds at tensor-parallel world size `tp` (1: the layers unchanged). Throws
// std::runtime_error naming the layer when tp does not divide the dimension its split cuts, or
// when a row-parallel shard would cut a group of `group_size` rows (group_size <= 0: one group
// per column, never cut).
std::vector<LinearShape> tensor_parallel_shards(const std::vector<LinearShape>& shapes, int tp, int group_size);

// The layer shapes with duplicates merged (names joined by commas), in first-seen order.
std::vector<LinearShape> distinct_shapes(const std::vector<LinearShape>& shapes);

}  // namespace qjit_models
