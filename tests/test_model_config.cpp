// The model configs qjit-tune reads: every shipped file loads, shapes merge, bad files are named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "tools/model_config.hpp"

namespace qjit_tools {
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

}  // namespace
}  // namespace qjit_tools
