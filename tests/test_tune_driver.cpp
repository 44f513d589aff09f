// qjit-tune's driver as a function (models/tune_driver.hpp): tuning a GGUF file's own layers
// (--gguf, read through the models' GGUF loader), and failures returned, never exits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_writer.hpp"
#include "llama_gguf_writer.hpp"
#include "models/gguf_llama.hpp"
#include "models/tensor_names.hpp"
#include "models/tune_driver.hpp"

namespace qjit_models {
namespace {

using qjit::test::GgufTensorSpec;
using qjit::test::GgufWriter;

constexpr uint32_t kGgmlF32 = 0;
constexpr uint32_t kGgmlQ8_0 = 8;
constexpr int kDim = 32, kHidden = 64, kVocab = 16;

// A [k, n] tensor of Q8_0 blocks (an fp16 scale and 32 int8 codes per 32 values), random codes.
std::string q8_0_bytes(int64_t k, int64_t n, std::mt19937& rng) {
    std::string bytes;
    for (int64_t block = 0; block < k / 32 * n; ++block) {
        bytes += std::string("\x00\x20", 2);  // fp16 2^-7
        for (int i = 0; i < 32; ++i) bytes.push_back(char(int(rng() % 64) - 32));
    }
    return bytes;
}

// A one-block Llama model of width 32, FFN 64, two heads and 16 tokens, its matrices Q8_0.
std::string tiny_q8_llama(const std::string& architecture = "llama") {
    std::mt19937 rng(3);
    const llama::Config c = {.dim = kDim, .hidden_dim = kHidden, .n_layers = 1, .n_heads = 2, .n_kv_heads = 2,
                             .head_size = kDim / 2, .vocab_size = kVocab, .seq_len = 64};
    GgufWriter writer;
    qjit::test::add_llama_metadata(writer, c, architecture);
    const std::string ones(kDim * sizeof(float), '\0');
    auto matrix = [&](const std::string& name, std::vector<uint64_t> dims) {
        const std::string bytes = q8_0_bytes(int64_t(dims[0]), int64_t(dims[1]), rng);
        writer.tensor(GgufTensorSpec{name, kGgmlQ8_0, std::move(dims), bytes, std::nullopt});
    };
    matrix(kGgufTokenEmbedding, {kDim, kVocab});
    for (const char* norm : {kGgufAttentionNorm, kGgufFfnNorm})
        writer.tensor(GgufTensorSpec{gguf_block_tensor(0, norm), kGgmlF32, {uint64_t(kDim)}, ones, std::nullopt});
    for (const BlockMatrix m : kBlockMatrices) matrix(gguf_block_tensor(0, m), qjit::test::block_matrix_dims(c, m));
    writer.tensor(GgufTensorSpec{kGgufOutputNorm, kGgmlF32, {uint64_t(kDim)}, ones, std::nullopt});
    matrix(kGgufClassifier, {kDim, kVocab});
    return writer.bytes();
}

class TuneDriver : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() / ("qjit_tune_driver_" + std::to_string(getpid()));
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    std::string write(const std::string& name, const std::string& bytes) const {
        const std::filesystem::path path = dir_ / name;
        std::ofstream(path, std::ios::binary) << bytes;
        return path.string();
    }

    // run_tune on `arguments` plus a quick, untimed run's flags, with the GGUF reader.
    TuneOutcome run(std::vector<std::string> arguments, bool with_gguf = true) {
        for (const char* flag : {"--batch", "1", "--budget", "0", "--repeats", "1", "--threads", "1", "--no-compare"})
            arguments.push_back(flag);
        arguments.insert(arguments.end(), {"--db", (dir_ / "db.yaml").string()});
        TuneIo io;
        io.out = [this](const std::string& text) { out_ += text; };
        io.err = [this](const std::string& text) { err_ += text; };
        if (with_gguf) io.gguf = llama::gguf_linear_weights;
        return run_tune(arguments, io);
    }

    std::filesystem::path dir_;
    std::string out_, err_;
};

TEST_F(TuneDriver, TunesEachDistinctFormatAndShapeOfAGgufFile) {
    const std::string model = write("tiny.gguf", tiny_q8_llama());
    const std::string report = (dir_ / "run.json").string();
    const TuneOutcome outcome = run({"--gguf", model, "--json", report});
    ASSERT_EQ(outcome.status, QJIT_OK) << failure_text(outcome) << err_;
    EXPECT_EQ(outcome.exit_code, 0);
    const nlohmann::json json = nlohmann::json::parse(std::ifstream(report));
    std::set<std::tuple<int64_t, int64_t, std::string>> rows;
    for (const auto& row : json["rows"])
        rows.insert({row["k"].get<int64_t>(), row["n"].get<int64_t>(), row["layer"].get<std::string>()});
    const std::set<std::tuple<int64_t, int64_t, std::string>> expected = {
        {kDim, kDim, "blk.0.attn_q.weight (+3) Q8_0"},
        {kDim, kHidden, "blk.0.ffn_gate.weight (+1) Q8_0"},
        {kHidden, kDim, "blk.0.ffn_down.weight Q8_0"},
        {kDim, kVocab, "output.weight Q8_0"}};
    EXPECT_EQ(rows, expected);
    EXPECT_NE(out_.find("GGUF " + model + ": 8 linear weights"), std::string::npos) << out_;
    EXPECT_NE(out_.find("| layer | K x N |"), std::string::npos);
}

TEST_F(TuneDriver, GgufFileOfAnotherArchitectureIsAnInvalidArgument) {
    const std::string model = write("gpt2.gguf", tiny_q8_llama("gpt2"));
    const TuneOutcome outcome = run({"--gguf", model});
    EXPECT_EQ(outcome.status, QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(outcome.exit_code, 1);
    EXPECT_EQ(outcome.what, "reading " + model);
    EXPECT_NE(outcome.message.find("general.architecture is 'gpt2'"), std::string::npos) << outcome.message;
    EXPECT_NE(err_.find("qjit-tune: " + failure_text(outcome)), std::string::npos) << err_;
}

TEST_F(TuneDriver, GgufNeedsAReaderAndExcludesAModel) {
    const std::string model = write("tiny.gguf", tiny_q8_llama());
    EXPECT_EQ(run({"--gguf", model}, /*with_gguf=*/false).status, QJIT_ERROR_UNSUPPORTED);
    const std::string config = std::string(QJIT_SOURCE_DIR) + "/configs/models/stories260K.yaml";
    const TuneOutcome both = run({"--gguf", model, "--model", config});
    EXPECT_EQ(both.status, QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(both.exit_code, 0);
    EXPECT_NE(err_.find("excludes"), std::string::npos) << err_;
}

// --isa caps the tuned kernels as $QJIT_MAX_ISA does: under portable every layer runs the portable
// path, no generated kernel; an unknown level is refused by name.
TEST_F(TuneDriver, IsaCapsTheTunedKernels) {
    const std::string model = write("tiny.gguf", tiny_q8_llama());
    const std::string report = (dir_ / "run.json").string();
    const TuneOutcome outcome = run({"--gguf", model, "--isa", "portable", "--json", report});
    ASSERT_EQ(outcome.status, QJIT_OK) << failure_text(outcome) << err_;
    const nlohmann::json json = nlohmann::json::parse(std::ifstream(report));
    ASSERT_FALSE(json["rows"].empty());
    for (const auto& row : json["rows"]) {
        EXPECT_EQ(row["source"].get<std::string>(), "portable") << row.dump();
        EXPECT_EQ(row["kernel"].get<std::string>().find("avx"), std::string::npos) << row.dump();
    }
    const TuneOutcome bad = run({"--gguf", model, "--isa", "avx9000"});
    EXPECT_EQ(bad.status, QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(err_.find("--isa"), std::string::npos) << err_;
}

TEST_F(TuneDriver, HelpIsNoFailure) {
    const TuneOutcome outcome = run({"--help"});
    EXPECT_EQ(outcome.status, QJIT_OK);
    EXPECT_EQ(outcome.exit_code, 0);
    EXPECT_NE(out_.find("--gguf"), std::string::npos);
}

}  // namespace
}  // namespace qjit_models
