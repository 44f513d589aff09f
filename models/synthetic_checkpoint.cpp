#include "models/synthetic_checkpoint.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "models/model_config.hpp"
#include "tools/checkpoint_writer.hpp"
#include "tools/random_gptq.hpp"

namespace qjit_models {

int synthetic_checkpoint_program(int argc, char** argv) {
    std::string model_path, directory, format = "v1";
    int bits = 4, group = 128, shards = 1, blocks = -1;
    bool act_order = false;
    CLI::App app{"qjit-synthetic-checkpoint: write a GPTQ checkpoint of random weights with a model's layer shapes"};
    app.add_option("--model", model_path, "model config, e.g. configs/models/llama-2-7b.yaml")
        ->required()
        ->check(CLI::ExistingFile);
    app.add_option("--bits", bits, "weight bits: 2, 3, 4 or 8")->check(CLI::IsMember({2, 3, 4, 8}));
    app.add_option("--group", group, "group size: 16, 32, 64, 128, 256 or -1")->check(CLI::IsMember({16, 32, 64, 128, 256, -1}));
    app.add_flag("--act-order", act_order, "give every layer a shuffled g_idx (desc_act)");
    app.add_option("--format", format, "checkpoint format: v1 (\"gptq\") or v2 (\"gptq_v2\")")->check(CLI::IsMember({"v1", "v2"}));
    app.add_option("--shards", shards, "number of safetensors files (> 1 writes an index)")->check(CLI::Range(1, 1000));
    app.add_option("--blocks", blocks, "transformer blocks to write (default: the model's)")->check(CLI::PositiveNumber);
    app.add_option("directory", directory, "where to write (created if missing)")->required();
    CLI11_PARSE(app, argc, argv);

    try {
        const ModelConfig model = load_model_config(model_path);
        if (blocks < 0) blocks = model.layers;
        std::filesystem::create_directories(directory);
        // One random layer per distinct shape, shared by every block.
        std::map<std::pair<int64_t, int64_t>, qjit_tools::GptqTensors> by_shape;
        std::map<int64_t, std::vector<int32_t>> g_idx_by_k;
        std::mt19937 rng(7);
        for (const LinearShape& shape : model.linear) {
            auto [where, fresh] = by_shape.try_emplace({shape.k, shape.n});
            if (fresh) qjit_tools::random_gptq(shape.k, shape.n, bits, group, uint64_t(shape.k * 31 + shape.n), &where->second);
            if (act_order && !g_idx_by_k.count(shape.k)) {
                std::vector<int32_t>& g_idx = g_idx_by_k[shape.k];
                const int64_t rows_per_group = group == -1 ? shape.k : group;
                for (int64_t row = 0; row < shape.k; ++row) g_idx.push_back(int32_t(row / rows_per_group));
                std::shuffle(g_idx.begin(), g_idx.end(), rng);
            }
        }
        std::vector<qjit_tools::CheckpointLayerTensors> layers;
        for (int block = 0; block < blocks; ++block)
            for (const LinearShape& shape : model.linear) {
                qjit_gptq_tensors tensors = by_shape.at({shape.k, shape.n}).view;
                if (act_order) tensors.g_idx = g_idx_by_k.at(shape.k).data();
                layers.push_back({hf_block_prefix(block) + shape.name, shape.k, shape.n, tensors});
            }
        qjit_tools::CheckpointOptions options;
        options.format = format == "v1" ? QJIT_GPTQ_V1 : QJIT_GPTQ_V2;
        options.shards = shards;
        options.desc_act = act_order;
        qjit_tools::write_gptq_checkpoint(directory, layers, options);
        std::printf("wrote %zu layers of %s (%d-bit, group %d%s, %s) to %s\n", layers.size(), model.name.c_str(), bits,
                    group, act_order ? ", act-order" : "", format.c_str(), directory.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qjit-synthetic-checkpoint: %s\n", e.what());
        return 1;
    }
    return 0;
}

}  // namespace qjit_models
