// The model configs qjit-tune reads: every shipped file loads, shapes merge, bad files are named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "models/model_config.hpp"

namespace qjit_models {
namespace {

const std::filesystem::path kConfigs = std::filesystem::path(QJIT_SOURCE_DIR) / "configs" / "models";

TEST(ModelConfig, EveryShippedConfigLoads) {
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(kConfigs)) {
        SCOPED_TRACE(entry.path().string());
        const ModelConfig model = load_model_config(entry.path().string());
        EXPECT_EQ(model.name + ".yaml", entry.path().filename().string());
        EXPECT_GT(model.layers, 0);
        ASSERT_FALSE(model.linear.empty());
        for (const LinearShape& shape : model.linear) EXPECT_TRUE(shape.k > 0 && shape.n > 0) << shape.name;
        ++files;
    }
    EXPECT_EQ(files, 6);  // llama-2-7b, llama-2-70b, mixtral-8x7b, granite-20b, stories260K, deepseek-moe-16b
}

// Many small experts: the expert shapes qjit-tune times for a MoE model, merged with nothing else.
TEST(ModelConfig, DeepSeekMoeListsItsSmallExperts) {
    const ModelConfig model = load_model_config((kConfigs / "deepseek-moe-16b.yaml").string());
    EXPECT_EQ(model.layers, 28);
    const std::vector<LinearShape> shapes = distinct_shapes(model.linear);
    ASSERT_EQ(shapes.size(), 7u);
    EXPECT_EQ(shapes[5].name, "expert_gate_proj,expert_up_proj");
    EXPECT_EQ(shapes[5].k, 2048);
    EXPECT_EQ(shapes[5].n, 1408);
    EXPECT_EQ(shapes[6].name, "expert_down_proj");
    EXPECT_EQ(shapes[6].k, 1408);
    EXPECT_EQ(shapes[6].n, 2048);
}

TEST(ModelConfig, SameShapedLayersMerge) {
    const ModelConfig model = load_model_config((kConfigs / "llama-2-7b.yaml").string());
    const std::vector<LinearShape> shapes = distinct_shapes(model.linear);
    ASSERT_EQ(shapes.size(), 3u);
    EXPECT_EQ(shapes[0].name, "q_proj,k_proj,v_proj,o_proj");
    EXPECT_EQ(shapes[2].k, 11008);
    EXPECT_EQ(shapes[2].n, 4096);
}

// Every layer of every shipped config has a known split; Llama-2-70B's shards at 8 are Megatron's.
TEST(ModelConfig, TensorParallelShardsSplitColumnsAndRows) {
    for (const auto& entry : std::filesystem::directory_iterator(kConfigs))
        for (const LinearShape& shape : load_model_config(entry.path().string()).linear)
            EXPECT_NO_THROW(tensor_parallel_split(shape.name)) << entry.path() << ": " << shape.name;
    EXPECT_EQ(tensor_parallel_split("expert_w1"), TensorParallelSplit::column);
    EXPECT_EQ(tensor_parallel_split("dense_down_proj"), TensorParallelSplit::row);
    EXPECT_THROW(tensor_parallel_split("tw2"), std::runtime_error);  // a suffix counts only after '_'

    const ModelConfig model = load_model_config((kConfigs / "llama-2-70b.yaml").string());
    EXPECT_EQ(tensor_parallel_shards(model.linear, 1, 128).size(), model.linear.size());
    const std::vector<LinearShape> shards = tensor_parallel_shards(model.linear, 8, 128);
    ASSERT_EQ(shards.size(), 7u);
    EXPECT_EQ(shards[1].k, 8192);  // k_proj, column-parallel
    EXPECT_EQ(shards[1].n, 128);
    EXPECT_EQ(shards[3].k, 1024);  // o_proj, row-parallel
    EXPECT_EQ(shards[3].n, 8192);
    EXPECT_EQ(shards[6].k, 3584);  // down_proj: 28 groups of 128
    EXPECT_EQ(shards[6].n, 8192);
}

TEST(ModelConfig, TensorParallelSizesThatCutAreRefusedByLayer) {
    const ModelConfig model = load_model_config((kConfigs / "llama-2-70b.yaml").string());
    auto message = [&](int tp, int group) {
        try {
            tensor_parallel_shards(model.linear, tp, group);
        } catch (const std::runtime_error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(message(3, 128).find("'q_proj'"), std::string::npos);        // 8192 % 3
    EXPECT_NE(message(64, 128).find("'down_proj'"), std::string::npos);    // 448 rows: 3.5 groups
    EXPECT_NE(message(64, 128).find("cuts a group"), std::string::npos);
    EXPECT_EQ(message(64, -1), "accepted");                                // per-column groups are never cut
}

TEST(ModelConfig, BadFilesAreReportedByName) {
    const std::string path = ::testing::TempDir() + "qjit_bad_model.yaml";
    for (const char* text : {"name: x\nlayers: 1\nlinear: []\n", "name: x\nlayers: 1\nlinear:\n  - {name: a, k: 0, n: 3}\n",
                             "[unclosed", "just a string"}) {
        std::ofstream(path) << text;
        try {
            load_model_config(path);
            ADD_FAILURE() << "accepted: " << text;
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        }
    }
    EXPECT_THROW(load_model_config(path + ".missing"), std::runtime_error);
}

// qjit-tune's default model is the shipped Llama-2-7B config, layer for layer.
TEST(ModelConfig, EmbeddedLlama2_7bIsTheShippedConfig) {
    const ModelConfig shipped = load_model_config((kConfigs / "llama-2-7b.yaml").string());
    const ModelConfig embedded = llama2_7b_config();
    EXPECT_EQ(embedded.name, shipped.name);
    EXPECT_EQ(embedded.layers, shipped.layers);
    ASSERT_EQ(embedded.linear.size(), shipped.linear.size());
    for (size_t i = 0; i < shipped.linear.size(); ++i) {
        EXPECT_EQ(embedded.linear[i].name, shipped.linear[i].name);
        EXPECT_EQ(embedded.linear[i].k, shipped.linear[i].k);
        EXPECT_EQ(embedded.linear[i].n, shipped.linear[i].n);
    }
}

// One table names a block's matrices in every file kind, with their split.
TEST(TensorNames, OneTableForEveryFileKind) {
    EXPECT_EQ(gguf_block_tensor(3, BlockMatrix::q), "blk.3.attn_q.weight");
    EXPECT_EQ(gguf_block_tensor(0, kGgufFfnNorm), "blk.0.ffn_norm.weight");
    EXPECT_EQ(hf_block_tensor(2, BlockMatrix::down), "model.layers.2.mlp.down_proj");
    EXPECT_EQ(hf_block_tensor(0, BlockMatrix::o), "model.layers.0.self_attn.o_proj");
    EXPECT_EQ(llama2c_block_tensor(1, BlockMatrix::gate), "layer 1 w1");
    for (const BlockMatrix m : kBlockMatrices) {
        const std::string hf = names_of(m).hf;
        EXPECT_EQ(tensor_parallel_split(hf.substr(hf.find('.') + 1)), names_of(m).split) << hf;
        EXPECT_EQ(tensor_parallel_split(names_of(m).llama2c), names_of(m).split) << hf;
    }
}

}  // namespace
}  // namespace qjit_models
