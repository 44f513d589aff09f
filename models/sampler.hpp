// The next token from a row of logits: greedy, or a seeded draw after llama.cpp's default chain of
// filters (repetition penalty, top-k, top-p, min-p, temperature). docs/models.md#sampling-and-chat.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace qjit_models {

struct SamplingOptions {
    float temperature = 0;      // 0: greedy (the argmax after the penalty); top_k, top_p, min_p then unused
    int top_k = 0;              // keep the k most likely tokens (0: off)
    float top_p = 1;            // keep the smallest set whose probability reaches top_p (1: off)
    float min_p = 0;            // keep tokens of probability >= min_p x the largest (0: off)
    float repeat_penalty = 1;   // over the last repeat_last_n previous tokens (1: off)
    int repeat_last_n = 64;     // 0: no previous token is penalized
    uint64_t seed = 0;          // the draws' std::mt19937_64 seed
};

// nullopt when every option is in its range; else a message naming the first one that is not and
// its range, e.g. "top_p 1.5 is outside (0, 1]".
std::optional<std::string> sampling_problem(const SamplingOptions& options);

// Picks tokens one at a time. The same options (seed included) and the same logits give the same
// tokens on any machine: the draws come from std::mt19937_64, whose output the C++ standard fixes,
// turned into numbers in [0, 1) here rather than by the library's (implementation-defined)
// distributions. Each call with temperature > 0 takes exactly one number from the generator.
class Sampler {
public:
    // Throws std::invalid_argument with sampling_problem's message.
    explicit Sampler(const SamplingOptions& options);

    // A search for the first largest logit of a row (the model's qjit_argmax, on its threads):
    // the token, or nullopt where it refuses the row.
    using Argmax = std::function<std::optional<int>(std::span<const float>)>;

    // The next token for `logits` (one per vocabulary entry) after `previous_tokens` (the context so
    // far, prompt included; only its last repeat_last_n are penalized). A logit of -inf is a token
    // that cannot be picked. Throws std::invalid_argument naming the token for a NaN or +inf logit or
    // a previous token outside the vocabulary, and when every logit is -inf. Greedy without a
    // penalty, `argmax` (when given) finds the token; a row it refuses, or whose largest logit is
    // not finite, takes the checked path, which names the problem.
    int next(std::span<const float> logits, std::span<const int> previous_tokens, const Argmax& argmax = {});

    const SamplingOptions& options() const { return options_; }

private:
    struct Candidate {
        int token;
        float logit;  // after the penalty
    };

    void check_logits(std::span<const float> logits) const;
    void penalize(std::span<const float> logits, std::span<const int> previous_tokens);
    int greedy(std::span<const float> logits) const;
    void collect_candidates(std::span<const float> logits);
    void keep_min_p();
    void keep_top_p();
    int draw();

    SamplingOptions options_;
    std::mt19937_64 generator_;
    // Scratch kept between calls so that a call allocates nothing once the vocabulary has been seen.
    std::vector<int> penalized_tokens_;    // distinct tokens of the penalty window, sorted
    std::vector<float> penalized_logits_;  // their logits after the penalty
    std::vector<Candidate> candidates_;    // the tokens still possible
    std::vector<double> weights_;          // their unnormalized probabilities at the temperature
};

}  // namespace qjit_models
