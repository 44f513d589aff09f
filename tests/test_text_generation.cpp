// TextSession (models/text_generation.hpp) on SmolLM2's real file (skipped where
// scripts/fetch_model.sh has not fetched it): a conversation's next context runs only the tokens
// the KV cache lacks, a context that does not continue the cache starts it over, stop strings end
// the text before them while the streamed pieces add up to it, and bad calls are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/gguf_file.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_vocabulary.hpp"
#include "models/method_model.hpp"
#include "models/sampler.hpp"
#include "models/text_generation.hpp"
#include "models/text_tokenizer.hpp"
#include "model_files.hpp"

namespace {

using qjit_models::GeneratedText;
using qjit_models::GenerationLimits;
using qjit_models::StopReason;

class SmolLM2Session : public ::testing::Test {
protected:
    void SetUp() override {
        const std::filesystem::path path = qjit::test::smollm2_model_path();
        if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (scripts/fetch_model.sh)";
        file_ = qjit::GgufFile::open(path.string());
        vocabulary_ = std::make_unique<qjit_models::GgufVocabulary>(*file_);
        tokenizer_ = std::make_unique<qjit_models::TextTokenizer>(*vocabulary_);
        qjit_models::MethodOptions exact;
        exact.method = "exact";
        qjit_context_options context;
        qjit_context_options_init(&context);
        context.num_threads = 1;
        built_ = qjit_models::llama::build_method_model(qjit_models::llama::load_gguf_llama(file_), exact, context,
                                                        nullptr, false);
    }

    std::vector<int> tokens(const std::string& text) const { return tokenizer_->encode(text); }

    std::shared_ptr<const qjit::GgufFile> file_;
    std::unique_ptr<qjit_models::GgufVocabulary> vocabulary_;
    std::unique_ptr<qjit_models::TextTokenizer> tokenizer_;
    qjit_models::llama::MethodModel built_;
};

TEST_F(SmolLM2Session, AContinuedContextRunsOnlyItsNewTokens) {
    qjit_models::TextSession session(*built_.model, *vocabulary_);
    qjit_models::Sampler greedy({});
    const GenerationLimits eight{.max_tokens = 8, .stop_strings = {}, .stop_at_end_token = false};
    std::vector<int> context = tokens("Once upon a time");
    const GeneratedText first = session.generate(context, eight, greedy);
    EXPECT_EQ(first.prompt_tokens_run, int(context.size()));
    ASSERT_EQ(first.tokens.size(), 8u);
    EXPECT_EQ(first.reason, StopReason::max_tokens);
    // The cache holds the context and every generated token but the last (never fed).
    std::vector<int> held = context;
    held.insert(held.end(), first.tokens.begin(), first.tokens.end() - 1);
    EXPECT_EQ(std::vector<int>(session.cached_tokens().begin(), session.cached_tokens().end()), held);

    context.insert(context.end(), first.tokens.begin(), first.tokens.end());
    const std::vector<int> more = tokenizer_->encode(" The end.", false);
    context.insert(context.end(), more.begin(), more.end());
    const GeneratedText second = session.generate(context, eight, greedy);
    EXPECT_EQ(second.prompt_tokens_run, int(1 + more.size()));

    // Another beginning: the cache starts over.
    const GeneratedText other = session.generate(tokens("The dog"), eight, greedy);
    EXPECT_EQ(other.prompt_tokens_run, int(tokens("The dog").size()));
}

TEST_F(SmolLM2Session, StopStringsEndTheTextAndTheStreamAddsUpToIt) {
    qjit_models::TextSession session(*built_.model, *vocabulary_);
    qjit_models::Sampler greedy({});
    const std::vector<int> context = tokens("Once upon a time");
    const GeneratedText whole = session.generate(context, {.max_tokens = 48}, greedy);
    const size_t comma = whole.text.find(',');
    ASSERT_NE(comma, std::string::npos) << whole.text;

    std::string streamed;
    const GeneratedText stopped = session.generate(context, {.max_tokens = 48, .stop_strings = {", "}}, greedy,
                                                   [&](std::string_view piece) { streamed += piece; });
    EXPECT_EQ(stopped.reason, StopReason::stop_string);
    EXPECT_EQ(stopped.text, whole.text.substr(0, comma));
    EXPECT_EQ(streamed, stopped.text);
}

TEST_F(SmolLM2Session, BadCallsAreRefusedByName) {
    qjit_models::TextSession session(*built_.model, *vocabulary_);
    qjit_models::Sampler greedy({});
    const auto refused = [&](std::vector<int> context, int max_tokens, const std::string& expected) {
        try {
            session.generate(context, {.max_tokens = max_tokens}, greedy);
            ADD_FAILURE() << "no exception for " << expected;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
        }
    };
    refused({}, 4, "the prompt is empty");
    refused({1, 49152}, 4, "token 49152 of the prompt is outside the vocabulary of 49152");
    refused(std::vector<int>(8193, 1), 4, "8193 tokens exceed the model's context of 8192");
    refused({1}, -1, "max_tokens is -1");
    EXPECT_TRUE(session.generate(std::vector<int>{1}, {.max_tokens = 0}, greedy).tokens.empty());
}

}  // namespace
