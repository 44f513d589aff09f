#include "models/sampler.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace qjit_models {

namespace {

// The shortest text that reads back as the same float ("1.5", "-0.25", "inf", "nan").
std::string number_text(float value) {
    char text[32];
    const auto result = std::to_chars(text, text + sizeof(text), value);
    return std::string(text, result.ptr);
}

std::string outside(const char* name, const std::string& value, const char* range) {
    return std::string(name) + " " + value + " is outside " + range;
}

// llama.cpp's repetition penalty: a logit moves towards "less likely" whatever its sign.
float penalized(float logit, float penalty) { return logit <= 0 ? logit * penalty : logit / penalty; }

// A strict total order, so that which tokens a cut keeps and the order they end in do not depend on
// the standard library's heap, nth_element or sort: the larger logit first, then the lower token.
bool more_likely(float logit_a, int token_a, float logit_b, int token_b) {
    return logit_a > logit_b || (logit_a == logit_b && token_a < token_b);
}

}  // namespace

std::optional<std::string> sampling_problem(const SamplingOptions& options) {
    if (!(options.temperature >= 0) || !std::isfinite(options.temperature))
        return outside("temperature", number_text(options.temperature), "[0, inf)");
    if (options.top_k < 0) return outside("top_k", std::to_string(options.top_k), "[0, inf)");
    if (!(options.top_p > 0 && options.top_p <= 1)) return outside("top_p", number_text(options.top_p), "(0, 1]");
    if (!(options.min_p >= 0 && options.min_p < 1)) return outside("min_p", number_text(options.min_p), "[0, 1)");
    if (!(options.repeat_penalty > 0) || !std::isfinite(options.repeat_penalty))
        return outside("repeat_penalty", number_text(options.repeat_penalty), "(0, inf)");
    if (options.repeat_last_n < 0)
        return outside("repeat_last_n", std::to_string(options.repeat_last_n), "[0, inf)");
    return std::nullopt;
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), generator_(options.seed) {
    if (const std::optional<std::string> problem = sampling_problem(options)) throw std::invalid_argument(*problem);
}

void Sampler::check_logits(std::span<const float> logits) const {
    if (logits.empty()) throw std::invalid_argument("sampler: the logit row is empty");
    if (logits.size() > size_t(std::numeric_limits<int>::max()))
        throw std::invalid_argument("sampler: a row of " + std::to_string(logits.size()) + " logits is too long");
    for (size_t token = 0; token < logits.size(); ++token) {
        const float logit = logits[token];
        if (std::isnan(logit)) throw std::invalid_argument("sampler: the logit of token " + std::to_string(token) + " is NaN");
        if (logit == std::numeric_limits<float>::infinity())
            throw std::invalid_argument("sampler: the logit of token " + std::to_string(token) + " is +inf");
    }
}

void Sampler::penalize(std::span<const float> logits, std::span<const int> previous_tokens) {
    penalized_tokens_.clear();
    penalized_logits_.clear();
    if (options_.repeat_penalty == 1 || options_.repeat_last_n == 0) return;
    const size_t window = std::min(previous_tokens.size(), size_t(options_.repeat_last_n));
    for (const int token : previous_tokens.last(window)) {
        if (token < 0 || size_t(token) >= logits.size())
            throw std::invalid_argument("sampler: previous token " + std::to_string(token) +
                                        " is outside the vocabulary of " + std::to_string(logits.size()));
        penalized_tokens_.push_back(token);
    }
    // Once per distinct token, however often it occurs in the window.
    std::sort(penalized_tokens_.begin(), penalized_tokens_.end());
    penalized_tokens_.erase(std::unique(penalized_tokens_.begin(), penalized_tokens_.end()), penalized_tokens_.end());
    for (const int token : penalized_tokens_)
        penalized_logits_.push_back(penalized(logits[size_t(token)], options_.repeat_penalty));
}

int Sampler::greedy(std::span<const float> logits) const {
    int best = -1;
    float best_logit = -std::numeric_limits<float>::infinity();
    size_t next_penalized = 0;
    for (size_t token = 0; token < logits.size(); ++token) {
        float logit = logits[token];
        if (next_penalized < penalized_tokens_.size() && size_t(penalized_tokens_[next_penalized]) == token)
            logit = penalized_logits_[next_penalized++];
        if (logit > best_logit) {  // strictly: the lowest token wins a tie
            best = int(token);
            best_logit = logit;
        }
    }
    if (best < 0) throw std::invalid_argument("sampler: every logit is -inf");
    return best;
}

int Sampler::next(std::span<const float> logits, std::span<const int> previous_tokens, const Argmax& argmax) {
    const bool penalty_off = options_.repeat_penalty == 1 || options_.repeat_last_n == 0;
    if (options_.temperature == 0 && penalty_off && argmax && !logits.empty()) {
        // The first largest logit is greedy()'s token whenever it is finite; a NaN, an infinite
        // largest logit or an empty row go the checked way below.
        if (const std::optional<int> token = argmax(logits);
            token && *token >= 0 && size_t(*token) < logits.size() && std::isfinite(logits[size_t(*token)]))
            return *token;
    }
    check_logits(logits);
    penalize(logits, previous_tokens);
    if (options_.temperature == 0) return greedy(logits);
    collect_candidates(logits);
    keep_top_p();
    keep_min_p();
    return draw();
}

// The possible tokens (-inf is impossible) after the penalty: all of them in token order, or with
// top-k the k most likely, sorted most likely first. Top-k keeps a heap of the k best so far while
// it scans (its least likely on top), so a 262144-token row costs one pass and a few hundred heap
// steps rather than a copy and a selection of the whole row.
void Sampler::collect_candidates(std::span<const float> logits) {
    const auto order = [](const Candidate& a, const Candidate& b) { return more_likely(a.logit, a.token, b.logit, b.token); };
    const size_t k = size_t(options_.top_k);
    candidates_.clear();
    size_t next_penalized = 0;
    for (size_t token = 0; token < logits.size(); ++token) {
        float logit = logits[token];
        if (next_penalized < penalized_tokens_.size() && size_t(penalized_tokens_[next_penalized]) == token)
            logit = penalized_logits_[next_penalized++];
        if (!(logit > -std::numeric_limits<float>::infinity())) continue;
        const Candidate candidate{int(token), logit};
        if (k == 0) {
            candidates_.push_back(candidate);
        } else if (candidates_.size() < k) {
            candidates_.push_back(candidate);
            std::push_heap(candidates_.begin(), candidates_.end(), order);
        } else if (order(candidate, candidates_.front())) {
            std::pop_heap(candidates_.begin(), candidates_.end(), order);
            candidates_.back() = candidate;
            std::push_heap(candidates_.begin(), candidates_.end(), order);
        }
    }
    if (candidates_.empty()) throw std::invalid_argument("sampler: every logit is -inf");
    if (k != 0) std::sort_heap(candidates_.begin(), candidates_.end(), order);
}

// The smallest set of the most likely tokens whose probability (softmax over the candidates left
// by top-k) reaches top_p. The candidates are sorted a growing block at a time (256, then 4x), so
// that a full 262144-token vocabulary is sorted only when the mass is that spread out.
void Sampler::keep_top_p() {
    if (options_.top_p >= 1 || candidates_.size() <= 1) return;
    const auto order = [](const Candidate& a, const Candidate& b) { return more_likely(a.logit, a.token, b.logit, b.token); };
    const auto max_candidate = std::min_element(candidates_.begin(), candidates_.end(), order);
    const double max_logit = max_candidate->logit;
    double total = 0;
    for (const Candidate& candidate : candidates_) total += std::exp(double(candidate.logit) - max_logit);

    const double target = double(options_.top_p) * total;
    double cumulative = 0;
    size_t sorted = 0;
    size_t block_end = std::min(candidates_.size(), size_t(256));
    for (;;) {
        const auto first = candidates_.begin() + std::ptrdiff_t(sorted);
        const auto last = candidates_.begin() + std::ptrdiff_t(block_end);
        std::nth_element(first, last, candidates_.end(), order);  // [sorted, block_end): the next most likely
        std::sort(first, last, order);
        for (size_t i = sorted; i < block_end; ++i) {
            cumulative += std::exp(double(candidates_[i].logit) - max_logit);
            if (cumulative >= target) {
                candidates_.resize(i + 1);
                return;
            }
        }
        if (block_end == candidates_.size()) return;  // rounding left the sum short of the target: keep all
        sorted = block_end;
        block_end = std::min(candidates_.size(), block_end * 4);
    }
}

// Tokens of probability >= min_p x the largest: logit >= max logit + log(min_p). Keeps the order.
void Sampler::keep_min_p() {
    if (options_.min_p <= 0 || candidates_.size() <= 1) return;
    float max_logit = -std::numeric_limits<float>::infinity();
    for (const Candidate& candidate : candidates_) max_logit = std::max(max_logit, candidate.logit);
    const double threshold = double(max_logit) + std::log(double(options_.min_p));
    std::erase_if(candidates_, [threshold](const Candidate& candidate) { return double(candidate.logit) < threshold; });
}

// softmax(logit / temperature) over the candidates in their current order, and one draw: u in
// [0, 1) from the generator's top 53 bits, the first candidate whose cumulative weight exceeds u x
// the total.
int Sampler::draw() {
    float max_logit = -std::numeric_limits<float>::infinity();
    for (const Candidate& candidate : candidates_) max_logit = std::max(max_logit, candidate.logit);
    weights_.clear();
    double total = 0;
    for (const Candidate& candidate : candidates_) {
        const double weight = std::exp((double(candidate.logit) - double(max_logit)) / double(options_.temperature));
        weights_.push_back(weight);
        total += weight;
    }
    const double u = double(generator_() >> 11) * 0x1.0p-53;
    const double target = u * total;
    double cumulative = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
        cumulative += weights_[i];
        if (cumulative > target) return candidates_[i].token;
    }
    // Rounding can leave the sum at or below target when u is within an ulp of 1: the last token
    // of any weight.
    for (size_t i = candidates_.size(); i-- > 0;)
        if (weights_[i] > 0) return candidates_[i].token;
    return candidates_.front().token;
}

}  // namespace qjit_models
