#include "tools/model_config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string_view>

namespace qjit_tools {

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

// Layer names of the shipped configs (Hugging Face Llama/Mixtral/DeepSeek, GPTBigCode as
// Granite's config names it, llama2.c) by the dimension tensor parallelism splits.
constexpr std::string_view kColumnParallel[] = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "mlp_up",
                                                "wq",     "wk",     "wv",     "w1",        "w3",      "classifier"};
constexpr std::string_view kRowParallel[] = {"o_proj", "down_proj", "mlp_down", "wo", "w2"};

// `name` is `entry` or ends in "_" + entry.
template <size_t count>
bool names_one_of(std::string_view name, const std::string_view (&entries)[count]) {
    return std::any_of(std::begin(entries), std::end(entries), [&](std::string_view entry) {
        return name == entry || (name.size() > entry.size() && name.ends_with(entry) &&
                                 name[name.size() - entry.size() - 1] == '_');
    });
}

}  // namespace

TensorParallelSplit tensor_parallel_split(const std::string& layer_name) {
    if (names_one_of(layer_name, kColumnParallel)) return TensorParallelSplit::column;
    if (names_one_of(layer_name, kRowParallel)) return TensorParallelSplit::row;
    throw std::runtime_error("layer '" + layer_name +
                             "': no tensor-parallel split is known for this name (tools/model_config.cpp lists them)");
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

}  // namespace qjit_tools
