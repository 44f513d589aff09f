#include "models/llama_eval.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "qjit/qjit.h"

namespace qjit_models::llama {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// -log softmax(row)[target].
double token_nll(const float* row, int vocab, int target) {
    if (target < 0 || target >= vocab)
        throw std::runtime_error("evaluate_nll: token " + std::to_string(target) + " is outside the vocabulary");
    const double max_logit = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (int i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - max_logit);
    return max_logit + std::log(sum) - double(row[target]);
}

}  // namespace

double sequence_nll(std::span<const float> logits, int vocab, const std::vector<int>& tokens) {
    if (tokens.size() < 2) return 0.0;
    if (logits.size() < (tokens.size() - 1) * size_t(vocab))
        throw std::runtime_error("sequence_nll: logits for " + std::to_string(logits.size() / size_t(vocab)) +
                                 " positions; a sequence of " + std::to_string(tokens.size()) + " needs one less");
    double sum = 0.0;
    for (size_t t = 0; t + 1 < tokens.size(); ++t) sum += token_nll(logits.data() + t * size_t(vocab), vocab, tokens[t + 1]);
    return sum;
}

NllResult evaluate_nll(Model& model, const std::vector<std::vector<int>>& sequences, bool token_by_token) {
    const int vocab = model.config().vocab_size;
    NllResult result;
    double total = 0.0;
    for (const std::vector<int>& sequence : sequences) {
        double sequence_nll = 0.0;
        if (sequence.size() >= 2) {
            // Positions 0..n-2 predict tokens 1..n-1; the last token's logits are not needed.
            const std::span<const int> inputs(sequence.data(), sequence.size() - 1);
            if (token_by_token) {
                model.reset();
                for (size_t t = 0; t < inputs.size(); ++t)
                    sequence_nll += token_nll(model.step(inputs[t]).data(), vocab, sequence[t + 1]);
            } else {
                sequence_nll += llama::sequence_nll(model.forward_sequence(inputs), vocab, sequence);
            }
            result.tokens += int64_t(inputs.size());
        }
        result.sequence_nll.push_back(sequence_nll);
        total += sequence_nll;
    }
    result.mean_nll = result.tokens > 0 ? total / double(result.tokens) : 0.0;
    return result;
}

Generation greedy_decode(Model& model, std::span<const int> prompt, int steps, StepProfile* profile) {
    const int seq_len = model.config().seq_len;
    if (prompt.empty()) throw std::runtime_error("greedy_decode: the prompt is empty");
    // The positions fed: the prompt's and every generated token's but the last.
    if (steps < 0 || int64_t(prompt.size()) - 1 + steps > seq_len) {
        throw std::runtime_error("greedy_decode: steps " + std::to_string(steps) + " after a prompt of " +
                                 std::to_string(prompt.size()) + " tokens is outside [0, seq_len " +
                                 std::to_string(seq_len) + "]");
    }
    Generation generation;
    generation.tokens.assign(prompt.begin(), prompt.end());
    model.reset();
    if (prompt.size() > 1) {
        const auto start = std::chrono::steady_clock::now();
        model.forward(prompt.first(prompt.size() - 1), 0, Model::Logits::Last);
        generation.prompt_seconds = seconds_since(start);
    }
    model.set_step_profile(profile);
    for (int i = 0; i < steps; ++i) {
        const auto start = std::chrono::steady_clock::now();
        const std::optional<int> next = model.greedy_token(model.step(generation.tokens.back()));
        if (!next) throw std::runtime_error(std::string("greedy_decode: ") + qjit_last_error());
        generation.step_seconds.push_back(seconds_since(start));
        generation.tokens.push_back(*next);
    }
    model.set_step_profile(nullptr);
    return generation;
}

std::vector<double> time_prompts(Model& model, std::span<const int> prompt, int repeats) {
    if (prompt.empty() || int64_t(prompt.size()) > model.config().seq_len)
        throw std::runtime_error("time_prompts: a prompt of " + std::to_string(prompt.size()) +
                                 " tokens is outside [1, seq_len " + std::to_string(model.config().seq_len) + "]");
    // As llama-bench does: an untimed warm-up forward of a few tokens (the layers' scratch, the
    // pool's threads awake) and the buffers and KV cache for the whole prompt allocated first.
    model.reset();
    model.forward(prompt.first(std::min<size_t>(prompt.size(), 32)), 0, Model::Logits::Last);
    model.reserve(int(prompt.size()));
    std::vector<double> seconds;
    for (int i = 0; i < repeats; ++i) {
        model.reset();
        const auto start = std::chrono::steady_clock::now();
        model.forward(prompt, 0, Model::Logits::Last);
        seconds.push_back(seconds_since(start));
    }
    model.reset();
    return seconds;
}

}  // namespace qjit_models::llama
