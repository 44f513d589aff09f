// The sampler (models/sampler.hpp): greedy picks, the repetition penalty's rule, the sets top-k,
// top-p and min-p keep, seeded draws and their frequencies, and refused options. Every draw comes
// from a fixed seed, so each check gives the same answer on every run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/sampler.hpp"
#include "qjit/qjit.h"
#include "qjit/qjit_ops.h"

namespace qjit_models {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// A row of logits in [-8, 8) from a seeded generator (its own conversion: no library distribution).
std::vector<float> random_row(size_t vocab, uint64_t seed) {
    std::mt19937_64 generator(seed);
    std::vector<float> row(vocab);
    for (float& logit : row) logit = float(double(generator() >> 11) * 0x1.0p-53 * 16.0 - 8.0);
    return row;
}

std::vector<float> log_probabilities(const std::vector<double>& probabilities) {
    std::vector<float> row;
    for (const double p : probabilities) row.push_back(float(std::log(p)));
    return row;
}

// The distinct tokens of `draws` picks from one row with no previous tokens.
std::set<int> drawn_tokens(const SamplingOptions& options, const std::vector<float>& row, int draws) {
    Sampler sampler(options);
    std::set<int> tokens;
    for (int i = 0; i < draws; ++i) tokens.insert(sampler.next(row, {}));
    return tokens;
}

// A temperature high enough that every token the filters keep is about equally likely, so that a
// few thousand draws show the kept set whole.
SamplingOptions flattening(SamplingOptions options) {
    options.temperature = 1e4f;
    return options;
}

TEST(Sampler, GreedyIsTheFirstArgmax) {
    Sampler sampler(SamplingOptions{});
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        const std::vector<float> row = random_row(1000, seed);
        const int expected = int(std::max_element(row.begin(), row.end()) - row.begin());
        EXPECT_EQ(sampler.next(row, {}), expected) << "row " << seed;
    }
    const std::vector<float> ties = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
    EXPECT_EQ(sampler.next(ties, {}), 1);
    const std::vector<float> mostly_impossible = {kMinusInf, kMinusInf, -7.0f, kMinusInf};
    EXPECT_EQ(sampler.next(mostly_impossible, {}), 2);
}

TEST(Sampler, PenaltyDividesAPositiveLogitOncePerDistinctToken) {
    SamplingOptions options;
    options.repeat_penalty = 2;
    Sampler sampler(options);
    // 4 / 2 = 2 > 1.9 keeps token 0 first; penalized once per occurrence (4 / 4 = 1) it would not be.
    const std::vector<float> row = {4.0f, 1.9f, -5.0f};
    EXPECT_EQ(sampler.next(row, std::vector<int>{0, 0}), 0);
    options.repeat_penalty = 2.5f;  // divided, 4 / 2.5 = 1.6 < 1.9; multiplied it would stay first
    EXPECT_EQ(Sampler(options).next(row, std::vector<int>{0}), 1);
}

TEST(Sampler, PenaltyMultipliesANegativeLogit) {
    SamplingOptions options;
    options.repeat_penalty = 2;
    // -1 x 2 = -2 < -1.9: token 1 wins; divided (-0.5) token 0 would still.
    const std::vector<float> row = {-1.0f, -1.9f, -5.0f};
    EXPECT_EQ(Sampler(options).next(row, std::vector<int>{0}), 1);
    EXPECT_EQ(Sampler(options).next(row, std::vector<int>{2}), 0);
}

TEST(Sampler, PenaltyCoversOnlyTheLastRepeatLastNTokens) {
    SamplingOptions options;
    options.repeat_penalty = 4;
    const std::vector<float> row = {4.0f, 1.9f, -5.0f};
    const std::vector<int> previous = {0, 2};
    options.repeat_last_n = 1;  // token 2 only
    EXPECT_EQ(Sampler(options).next(row, previous), 0);
    options.repeat_last_n = 2;  // token 0 too: 4 / 4 = 1 < 1.9
    EXPECT_EQ(Sampler(options).next(row, previous), 1);
    options.repeat_last_n = 0;
    EXPECT_EQ(Sampler(options).next(row, previous), 0);
}

TEST(Sampler, TopKOfOneIsGreedyAtAnyTemperature) {
    for (const float temperature : {0.1f, 1.0f, 5.0f, 1e4f}) {
        SamplingOptions options;
        options.temperature = temperature;
        options.top_k = 1;
        options.repeat_penalty = 1.3f;
        options.seed = 7;
        Sampler sampler(options);
        Sampler greedy(SamplingOptions{.repeat_penalty = 1.3f});
        std::vector<int> previous;
        for (uint64_t seed = 1; seed <= 30; ++seed) {
            const std::vector<float> row = random_row(5000, seed);
            const int token = sampler.next(row, previous);
            EXPECT_EQ(token, greedy.next(row, previous)) << "temperature " << temperature << ", row " << seed;
            previous.push_back(token);
        }
    }
}

TEST(Sampler, TopKKeepsTheKMostLikelyTheLowerTokenFirstOnTies) {
    const std::vector<float> row = {1.0f, 3.0f, 3.0f, 2.0f, 0.0f, 3.0f};
    EXPECT_EQ(drawn_tokens(flattening({.top_k = 2}), row, 2000), (std::set<int>{1, 2}));
    EXPECT_EQ(drawn_tokens(flattening({.top_k = 4}), row, 2000), (std::set<int>{1, 2, 3, 5}));
    EXPECT_EQ(drawn_tokens(flattening({.top_k = 100}), row, 4000), (std::set<int>{0, 1, 2, 3, 4, 5}));
}

TEST(Sampler, TopPKeepsTheSmallestSetThatReachesP) {
    // Probabilities 0.05, 0.5, 0.15, 0.3 by token: sorted 0.5, 0.3, 0.15, 0.05.
    const std::vector<float> row = log_probabilities({0.05, 0.5, 0.15, 0.3});
    EXPECT_EQ(drawn_tokens(flattening({.top_p = 0.4f}), row, 2000), (std::set<int>{1}));
    EXPECT_EQ(drawn_tokens(flattening({.top_p = 0.75f}), row, 2000), (std::set<int>{1, 3}));
    EXPECT_EQ(drawn_tokens(flattening({.top_p = 0.9f}), row, 2000), (std::set<int>{1, 2, 3}));
    EXPECT_EQ(drawn_tokens(flattening({.top_p = 0.99f}), row, 2000), (std::set<int>{0, 1, 2, 3}));
}

// Past the first sorted block of 256: 5000 tokens of distinct logits in a scrambled order, a p
// halfway between two cumulative sums so that the set is not decided by rounding.
TEST(Sampler, TopPOnALargeVocabularyKeepsTheExpectedPrefix) {
    const int vocab = 5000;
    std::vector<float> row(vocab);
    for (int token = 0; token < vocab; ++token) row[size_t(token)] = -0.002f * float((token * 7919) % vocab);
    std::vector<int> by_likelihood(vocab);
    for (int token = 0; token < vocab; ++token) by_likelihood[size_t(token)] = token;
    std::sort(by_likelihood.begin(), by_likelihood.end(), [&](int a, int b) { return row[size_t(a)] > row[size_t(b)]; });
    double total = 0;
    for (const float logit : row) total += std::exp(double(logit) - double(row[size_t(by_likelihood[0])]));
    std::vector<double> cumulative;
    double sum = 0;
    for (const int token : by_likelihood) {
        sum += std::exp(double(row[size_t(token)]) - double(row[size_t(by_likelihood[0])]));
        cumulative.push_back(sum / total);
    }
    const size_t kept = 400;
    const float top_p = float((cumulative[kept - 2] + cumulative[kept - 1]) / 2);  // reached at the 400th token
    const std::set<int> expected(by_likelihood.begin(), by_likelihood.begin() + kept);
    EXPECT_EQ(drawn_tokens(flattening({.top_p = top_p, .seed = 3}), row, 10000), expected);
}

TEST(Sampler, MinPKeepsTokensWithinAFractionOfTheLikeliest) {
    // Probabilities 0.2, 0.4, 0.1, 0.3: min_p 0.6 keeps p >= 0.24, 0.4 keeps p >= 0.16.
    const std::vector<float> row = log_probabilities({0.2, 0.4, 0.1, 0.3});
    EXPECT_EQ(drawn_tokens(flattening({.min_p = 0.9f}), row, 2000), (std::set<int>{1}));
    EXPECT_EQ(drawn_tokens(flattening({.min_p = 0.6f}), row, 2000), (std::set<int>{1, 3}));
    EXPECT_EQ(drawn_tokens(flattening({.min_p = 0.4f}), row, 2000), (std::set<int>{0, 1, 3}));
    EXPECT_EQ(drawn_tokens(flattening({.min_p = 0.1f}), row, 2000), (std::set<int>{0, 1, 2, 3}));
}

// llama.cpp's order: top-p on the probabilities after top-k, then min-p. In the other order top-p
// would see 0.6 / 0.9 = 0.67 >= 0.65 and keep token 0 alone.
TEST(Sampler, TopPComesBeforeMinP) {
    const std::vector<float> row = log_probabilities({0.6, 0.3, 0.1});
    EXPECT_EQ(drawn_tokens(flattening({.top_p = 0.65f, .min_p = 0.45f}), row, 2000), (std::set<int>{0, 1}));
    // top-k renormalizes first: of 0.6 and 0.3 alone, 0.6 is 0.67 of the mass.
    EXPECT_EQ(drawn_tokens(flattening({.top_k = 2, .top_p = 0.65f}), row, 2000), (std::set<int>{0}));
}

TEST(Sampler, MinusInfinityIsNeverDrawn) {
    const std::vector<float> row = {kMinusInf, 0.0f, kMinusInf, 0.5f};
    EXPECT_EQ(drawn_tokens(flattening({}), row, 2000), (std::set<int>{1, 3}));
}

TEST(Sampler, TheSameSeedRepeatsItsDrawsAndAnotherDiffers) {
    const auto draws = [](uint64_t seed) {
        Sampler sampler({.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.02f, .repeat_penalty = 1.1f,
                         .seed = seed});
        std::vector<int> tokens;
        for (uint64_t row_seed = 1; row_seed <= 200; ++row_seed) {
            std::vector<float> row = random_row(2000, row_seed % 7);  // some rows repeat, so the penalty acts
            tokens.push_back(sampler.next(row, tokens));
        }
        return tokens;
    };
    const std::vector<int> first = draws(1234);
    EXPECT_EQ(draws(1234), first);
    EXPECT_NE(draws(1235), first);
}

// The draw is specified, not left to the standard library: one output of std::mt19937_64(seed) per
// token, u = its top 53 bits / 2^53, the first token (in token order when no filter sorted them)
// whose cumulative probability exceeds u. Recomputed here independently.
TEST(Sampler, EachDrawIsTheTop53BitsOfOneMt19937_64Output) {
    const std::vector<double> probabilities = {0.25, 0.5, 0.25};
    Sampler sampler({.temperature = 1, .seed = 99});
    std::mt19937_64 generator(99);
    for (int i = 0; i < 500; ++i) {
        const double u = double(generator() >> 11) * 0x1.0p-53;
        const int expected = u < 0.25 ? 0 : u < 0.75 ? 1 : 2;
        ASSERT_EQ(sampler.next(log_probabilities(probabilities), {}), expected) << "draw " << i << ", u " << u;
    }
}

// Frequencies over a known distribution: 30000 draws put each within 0.015 of its probability (the
// standard deviation is at most 0.003, so the bound is five of them; the seed makes the run fixed).
TEST(Sampler, DrawFrequenciesFollowTheProbabilities) {
    const std::vector<double> probabilities = {0.2, 0.5, 0.3};
    const std::vector<float> row = log_probabilities(probabilities);
    Sampler sampler({.temperature = 1, .seed = 2024});
    std::vector<int> counts(3, 0);
    const int draws = 30000;
    for (int i = 0; i < draws; ++i) ++counts[size_t(sampler.next(row, {}))];
    for (size_t token = 0; token < 3; ++token)
        EXPECT_NEAR(double(counts[token]) / draws, probabilities[token], 0.015) << "token " << token;
    // Temperature 2 flattens to softmax(log p / 2) = sqrt(p) normalized.
    Sampler warm({.temperature = 2, .seed = 2025});
    std::vector<int> warm_counts(3, 0);
    for (int i = 0; i < draws; ++i) ++warm_counts[size_t(warm.next(row, {}))];
    double norm = 0;
    for (const double p : probabilities) norm += std::sqrt(p);
    for (size_t token = 0; token < 3; ++token)
        EXPECT_NEAR(double(warm_counts[token]) / draws, std::sqrt(probabilities[token]) / norm, 0.015) << "token " << token;
}

void expect_refused(const SamplingOptions& options, const std::string& expected_message) {
    const std::optional<std::string> problem = sampling_problem(options);
    ASSERT_TRUE(problem.has_value()) << expected_message;
    EXPECT_EQ(*problem, expected_message);
    try {
        Sampler sampler(options);
        ADD_FAILURE() << "accepted: " << expected_message;
    } catch (const std::invalid_argument& error) {
        EXPECT_EQ(std::string(error.what()), expected_message);
    }
}

TEST(Sampler, EachInvalidOptionIsRefusedByName) {
    EXPECT_FALSE(sampling_problem(SamplingOptions{}).has_value());
    EXPECT_FALSE(sampling_problem({.temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .min_p = 0.05f,
                                   .repeat_penalty = 1.1f, .repeat_last_n = 0})
                     .has_value());
    expect_refused({.temperature = -0.5f}, "temperature -0.5 is outside [0, inf)");
    expect_refused({.temperature = std::numeric_limits<float>::infinity()}, "temperature inf is outside [0, inf)");
    expect_refused({.temperature = std::nanf("")}, "temperature nan is outside [0, inf)");
    expect_refused({.top_k = -1}, "top_k -1 is outside [0, inf)");
    expect_refused({.top_p = 1.5f}, "top_p 1.5 is outside (0, 1]");
    expect_refused({.top_p = 0}, "top_p 0 is outside (0, 1]");
    expect_refused({.min_p = 1}, "min_p 1 is outside [0, 1)");
    expect_refused({.min_p = -0.25f}, "min_p -0.25 is outside [0, 1)");
    expect_refused({.repeat_penalty = 0}, "repeat_penalty 0 is outside (0, inf)");
    expect_refused({.repeat_penalty = std::numeric_limits<float>::infinity()}, "repeat_penalty inf is outside (0, inf)");
    expect_refused({.repeat_last_n = -1}, "repeat_last_n -1 is outside [0, inf)");
}

std::string refusal(Sampler& sampler, const std::vector<float>& row, const std::vector<int>& previous,
                    const Sampler::Argmax& argmax = {}) {
    try {
        sampler.next(row, previous, argmax);
    } catch (const std::invalid_argument& error) {
        return error.what();
    }
    return "(accepted)";
}

// The library's argmax on a context of two threads, as a text session hands the sampler its model's,
// counting its calls.
struct LibraryArgmax {
    qjit_context* context = nullptr;
    int calls = 0;
    LibraryArgmax() {
        qjit_context_options options;
        qjit_context_options_init(&options);
        options.num_threads = 2;
        options.tuning_db_path = "";
        EXPECT_EQ(qjit_context_create(&options, &context), QJIT_OK) << qjit_last_error();
    }
    ~LibraryArgmax() { qjit_context_destroy(context); }
    Sampler::Argmax function() {
        return [this](std::span<const float> row) -> std::optional<int> {
            ++calls;
            int64_t token = 0;
            if (qjit_argmax(context, row.data(), 1, int64_t(row.size()), &token) != QJIT_OK) return std::nullopt;
            return int(token);
        };
    }
};

// Greedy without a penalty, the argmax picks the token: the one the sampler picks alone, on rows
// long enough to be split among threads and with ties. A penalty or a temperature leaves it out;
// rows it refuses or whose largest logit is infinite are refused with the sampler's own message.
TEST(Sampler, AnArgmaxServesPlainGreedyAndTheRefusalsStayTheSamplers) {
    LibraryArgmax library;
    Sampler greedy(SamplingOptions{});
    for (uint64_t seed = 1; seed <= 10; ++seed) {
        std::vector<float> row = random_row(49152 + seed, seed);
        row[20000] = row[40000] = 9.0f;  // a tie for the largest, across the threads' halves
        EXPECT_EQ(greedy.next(row, {}, library.function()), greedy.next(row, {})) << "row " << seed;
        EXPECT_EQ(greedy.next(row, {}, library.function()), 20000);
    }
    EXPECT_EQ(library.calls, 20);
    Sampler penalized({.repeat_penalty = 1.3f});
    Sampler warm({.temperature = 0.7f, .seed = 3});
    const std::vector<float> row = random_row(1000, 5);
    const std::vector<int> previous = {1, 2, 3};
    penalized.next(row, previous, library.function());
    warm.next(row, {}, library.function());
    EXPECT_EQ(library.calls, 20) << "the argmax ran where a penalty or a temperature decides";
    EXPECT_EQ(refusal(greedy, {0.0f, 1.0f, std::nanf(""), 2.0f}, {}, library.function()),
              "sampler: the logit of token 2 is NaN");
    EXPECT_EQ(refusal(greedy, {1.0f, std::numeric_limits<float>::infinity(), 1.0f}, {}, library.function()),
              "sampler: the logit of token 1 is +inf");
    EXPECT_EQ(refusal(greedy, {kMinusInf, kMinusInf}, {}, library.function()), "sampler: every logit is -inf");
    EXPECT_EQ(refusal(greedy, {}, {}, library.function()), "sampler: the logit row is empty");
}

TEST(Sampler, BadLogitsAndPreviousTokensAreRefusedByIndex) {
    for (const float temperature : {0.0f, 1.0f}) {
        Sampler sampler({.temperature = temperature, .repeat_penalty = 1.1f});
        EXPECT_EQ(refusal(sampler, {0.0f, 1.0f, std::nanf(""), 2.0f}, {}), "sampler: the logit of token 2 is NaN");
        EXPECT_EQ(refusal(sampler, {std::numeric_limits<float>::infinity(), 1.0f}, {}), "sampler: the logit of token 0 is +inf");
        EXPECT_EQ(refusal(sampler, {kMinusInf, kMinusInf}, {}), "sampler: every logit is -inf");
        EXPECT_EQ(refusal(sampler, {0.0f, 1.0f}, {1, 2}), "sampler: previous token 2 is outside the vocabulary of 2");
        EXPECT_EQ(refusal(sampler, {}, {}), "sampler: the logit row is empty");
    }
}

}  // namespace
}  // namespace qjit_models
