#include "tools/model_config.hpp"

#include <yaml-cpp/yaml.h>

#include <stdexcept>

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
