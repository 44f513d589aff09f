#include "models/model_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#ifndef QJIT_MODEL_CONFIGS_DIR  // set by the build to the source tree's configs/models
#define QJIT_MODEL_CONFIGS_DIR "configs/models"
#endif

namespace qjit_models {

ModelConfig load_model_config(const std::string& path) {
    auto bad = [&](const std::string& why) { return std::runtime_error("model config '" + path + "': " + why); };
    YAML::Node root;
    try {
        root = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) {
        throw bad(e.what());
    }
    ModelConfig model;
    try {
        model.name = root["name"].as<std::string>();
        model.layers = root["layers"].as<int>();
        const YAML::Node linear = root["linear"];
        if (!linear || !linear.IsSequence() || linear.size() == 0) throw bad("'linear' must be a non-empty list");
        for (const YAML::Node& layer : linear) {
            LinearShape shape{layer["name"].as<std::string>(), layer["k"].as<int64_t>(), layer["n"].as<int64_t>()};
            if (shape.k < 1 || shape.n < 1) throw bad("layer '" + shape.name + "' has a non-positive k or n");
            model.linear.push_back(shape);
        }
    } catch (const YAML::Exception& e) {
        throw bad(std::string("a field is missing or has the wrong type: ") + e.what());
    }
    return model;
}

namespace {

// $QJIT_MODEL_CONFIGS_DIR, else the build's source tree, else (a build carried to a machine
// without that tree, run from a checkout's root) configs/models in the working folder.
std::string shipped_configs_dir() {
    if (const char* dir = std::getenv("QJIT_MODEL_CONFIGS_DIR"); dir && *dir) return dir;
    std::error_code ignored;
    if (std::filesystem::is_directory(QJIT_MODEL_CONFIGS_DIR, ignored)) return QJIT_MODEL_CONFIGS_DIR;
    return "configs/models";
}

}  // namespace

ModelConfig shipped_model_config(const std::string& name) {
    return load_model_config(shipped_configs_dir() + "/" + name + ".yaml");
}

ModelConfig llama2_7b_config() {
    return {"llama-2-7b",
            32,
            {{"q_proj", 4096, 4096},
             {"k_proj", 4096, 4096},
             {"v_proj", 4096, 4096},
             {"o_proj", 4096, 4096},
             {"gate_proj", 4096, 11008},
             {"up_proj", 4096, 11008},
             {"down_proj", 11008, 4096}}};
}

std::vector<LinearShape> tensor_parallel_shards(const std::vector<LinearShape>& shapes, int tp, int group_size) {
    if (tp < 1) throw std::runtime_error("tensor-parallel size " + std::to_string(tp) + " is not positive");
    if (tp == 1) return shapes;
    std::vector<LinearShape> shards;
    for (LinearShape shape : shapes) {
        const bool column = tensor_parallel_split(shape.name) == TensorParallelSplit::column;
        int64_t& cut = column ? shape.n : shape.k;
        const std::string where = "layer '" + shape.name + "' (" + (column ? "column" : "row") + "-parallel, " +
                                  (column ? "N = " : "K = ") + std::to_string(cut) + ")";
        if (cut % tp != 0) throw std::runtime_error(where + ": tensor-parallel size " + std::to_string(tp) + " does not divide it");
        cut /= tp;
        if (!column && group_size > 0 && cut % group_size != 0)
            throw std::runtime_error(where + ": a shard of " + std::to_string(cut) + " rows at tensor-parallel size " +
                                     std::to_string(tp) + " cuts a group of " + std::to_string(group_size));
        shards.push_back(shape);
    }
    return shards;
}

std::vector<LinearShape> distinct_shapes(const std::vector<LinearShape>& shapes) {
    std::vector<LinearShape> distinct;
    for (const LinearShape& shape : shapes) {
        bool merged = false;
        for (LinearShape& seen : distinct)
            if (seen.k == shape.k && seen.n == shape.n) {
                seen.name += "," + shape.name;
                merged = true;
                break;
            }
        if (!merged) distinct.push_back(shape);
    }
    return distinct;
}

}  // namespace qjit_models
