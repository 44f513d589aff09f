// The runners' method options: the calibrated methods' new options parse into the quantization
// config they name, and combinations that do not go together are refused before any work.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "models/runner_options.hpp"

namespace qjit_models {
namespace {

constexpr std::array<const char*, 6> kMethods = {"exact", "rtn", "hqq", "milo", "gptq", "mixed"};

// Parses argv-style words as a runner does; nullopt when a parser or the final check refuses.
std::optional<MethodOptions> parse(std::vector<std::string> words) {
    words.insert(words.begin(), "runner");
    std::vector<char*> argv;
    for (std::string& word : words) argv.push_back(word.data());
    ArgumentReader args(int(argv.size()), argv.data());
    MethodOptions options;
    while (args.next())
        if (parse_method_option(args, options) != OptionParse::taken) return std::nullopt;
    if (!check_method_options(options, kMethods)) return std::nullopt;
    return options;
}

TEST(RunnerOptions, CalibratedMethodOptionsReachTheConfig) {
    const auto milo = parse({"--method", "milo", "--milo-base", "gptq", "--rank-budget", "0.1", "--bits", "3"});
    ASSERT_TRUE(milo);
    EXPECT_TRUE(milo->needs_calibration());
    EXPECT_EQ(milo->quant_config().milo_base, QJIT_QUANT_GPTQ);
    EXPECT_EQ(milo->rank_budget, 0.1);

    const auto hqq = parse({"--method", "hqq", "--float-offsets"});
    ASSERT_TRUE(hqq);
    EXPECT_FALSE(hqq->needs_calibration());
    EXPECT_TRUE(hqq->takes_calibration());
    EXPECT_FALSE(hqq->calibrated());
    MethodOptions with_tokens = *hqq;
    with_tokens.with_calibration = true;
    EXPECT_TRUE(with_tokens.calibrated());
    EXPECT_EQ(hqq->quant_config().float_offsets, 1);
    EXPECT_EQ(hqq->quant_config().method, QJIT_QUANT_HQQ);

    const auto mixed = parse({"--method", "mixed", "--bits-per-weight", "2.5"});
    ASSERT_TRUE(mixed);
    EXPECT_EQ(mixed->quant_config().mixed_bits_per_weight, 2.5);
    EXPECT_FALSE(parse({"--method", "rtn"})->takes_calibration());
}

TEST(RunnerOptions, OptionsThatDoNotGoTogetherAreRefused) {
    EXPECT_FALSE(parse({"--method", "milo"}));  // no rank, policy or budget
    EXPECT_FALSE(parse({"--method", "milo", "--rank", "4", "--rank-budget", "0.1"}));
    EXPECT_FALSE(parse({"--method", "gptq", "--rank-budget", "0.1"}));
    EXPECT_FALSE(parse({"--method", "milo", "--rank", "4", "--milo-base", "awq"}));
    EXPECT_FALSE(parse({"--method", "milo", "--rank", "4", "--milo-base", "gptq", "--float-offsets"}));
    EXPECT_FALSE(parse({"--method", "gptq", "--float-offsets"}));
    EXPECT_FALSE(parse({"--method", "gptq", "--bits-per-weight", "3"}));
    EXPECT_FALSE(parse({"--method", "mixed", "--bits-per-weight", "-1"}));
    EXPECT_FALSE(parse({"--method", "mixed", "--bits-per-weight", "17"}));
    EXPECT_FALSE(parse({"--method", "mixed", "--share-budget"}));  // no budget to share
    EXPECT_FALSE(parse({"--method", "mixed", "--no-calibration", "--bits-per-weight", "3", "--share-budget"}));
    EXPECT_TRUE(parse({"--method", "mixed", "--bits-per-weight", "3", "--share-budget"}));
    EXPECT_TRUE(parse({"--method", "milo", "--rank", "4", "--milo-base", "rtn", "--float-offsets"}));
}

}  // namespace
}  // namespace qjit_models
