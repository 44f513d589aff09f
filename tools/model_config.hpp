// The linear-layer shapes of a model, as listed in configs/models/NAME.yaml:
//     name: llama-2-7b
//     layers: 32
//     linear:
//       - {name: q_proj, k: 4096, n: 4096}
// Used by qjit-tune to pick the shapes it times.
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

// The layer shapes with duplicates merged (names joined by commas), in first-seen order.
std::vector<LinearShape> distinct_shapes(const std::vector<LinearShape>& shapes);

}  // namespace qjit_tools
