#include "models/text_generation.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "models/token_text_stream.hpp"

namespace qjit_models {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The generated text, released to the caller once no stop string can still begin in it.
class StopStringFilter {
public:
    StopStringFilter(const std::vector<std::string>& stops, const TextCallback& on_text)
        : stops_(stops), on_text_(on_text) {}

    // Adds text; true when a stop string is now complete (the text before it is all released).
    bool add(std::string_view piece) {
        pending_ += piece;
        size_t stop_at = std::string::npos;
        for (const std::string& stop : stops_)
            if (!stop.empty()) stop_at = std::min(stop_at, pending_.find(stop));
        if (stop_at != std::string::npos) {
            release(stop_at);
            return true;
        }
        release(pending_.size() - longest_stop_prefix_at_end());
        return false;
    }
    void finish() { release(pending_.size()); }
    const std::string& text() const { return text_; }

private:
    // The longest end of the pending text that a stop string starts with.
    size_t longest_stop_prefix_at_end() const {
        size_t longest = 0;
        for (const std::string& stop : stops_)
            for (size_t n = std::min(stop.size() - (stop.empty() ? 0 : 1), pending_.size()); n > longest; --n)
                if (pending_.compare(pending_.size() - n, n, stop, 0, n) == 0) {
                    longest = n;
                    break;
                }
        return longest;
    }
    void release(size_t bytes) {
        if (bytes == 0) return;
        const std::string_view ready = std::string_view(pending_).substr(0, bytes);
        text_ += ready;
        if (on_text_) on_text_(ready);
        pending_.erase(0, bytes);
    }

    const std::vector<std::string>& stops_;
    const TextCallback& on_text_;
    std::string pending_, text_;
};

}  // namespace

const char* stop_reason_name(StopReason reason) {
    switch (reason) {
        case StopReason::end_token: return "end_token";
        case StopReason::stop_string: return "stop_string";
        case StopReason::max_tokens: return "max_tokens";
        case StopReason::context_full: return "context_full";
    }
    return "unknown";
}

TextSession::TextSession(llama::Model& model, const GgufVocabulary& vocabulary)
    : model_(model), vocabulary_(vocabulary) {
    model_.reset();
}

void TextSession::reset() {
    model_.reset();
    cached_.clear();
}

std::span<const float> TextSession::run_context(std::span<const int> context, GeneratedText& result) {
    // Reuse the cache when it holds a beginning of the context, short of its last token (whose
    // logits are needed).
    const bool reusable = cached_.size() < context.size() && std::equal(cached_.begin(), cached_.end(), context.begin());
    if (!reusable) reset();
    const std::span<const int> fresh = context.subspan(cached_.size());
    result.prompt_tokens_run = int(fresh.size());
    // As llama::greedy_decode runs a prompt: all but its last token in one batch, then a step.
    const auto start = std::chrono::steady_clock::now();
    if (fresh.size() > 1) model_.forward(fresh.first(fresh.size() - 1), int(cached_.size()), llama::Model::Logits::Last);
    const std::span<const float> logits = model_.step(fresh.back());
    result.prompt_seconds = seconds_since(start);
    cached_.assign(context.begin(), context.end());
    return logits;
}

GeneratedText TextSession::generate(std::span<const int> context, const GenerationLimits& limits, Sampler& sampler,
                                    const TextCallback& on_text) {
    const int seq_len = model_.config().seq_len;
    if (context.empty()) throw std::invalid_argument("the prompt is empty: generation starts after at least one token");
    if (int64_t(context.size()) > seq_len)
        throw std::invalid_argument("the prompt's " + std::to_string(context.size()) +
                                    " tokens exceed the model's context of " + std::to_string(seq_len));
    if (limits.max_tokens < 0)
        throw std::invalid_argument("max_tokens is " + std::to_string(limits.max_tokens) + "; expected >= 0");
    for (const int token : context)
        if (token < 0 || token >= vocabulary_.size())
            throw std::invalid_argument("token " + std::to_string(token) + " of the prompt is outside the vocabulary of " +
                                        std::to_string(vocabulary_.size()));
    GeneratedText result;
    if (limits.max_tokens == 0) return result;

    std::span<const float> logits = run_context(context, result);
    TokenTextStream stream(vocabulary_);
    StopStringFilter filter(limits.stop_strings, on_text);
    while (true) {
        const int token = sampler.next(logits, cached_, [this](std::span<const float> row) { return model_.greedy_token(row); });
        result.tokens.push_back(token);
        if (limits.stop_at_end_token && vocabulary_.ends_generation(token)) {
            result.reason = StopReason::end_token;
            break;
        }
        if (filter.add(stream.push(token))) {
            result.reason = StopReason::stop_string;
            break;
        }
        if (int(result.tokens.size()) == limits.max_tokens) {
            result.reason = StopReason::max_tokens;
            break;
        }
        if (int64_t(cached_.size()) == seq_len) {
            result.reason = StopReason::context_full;
            break;
        }
        const auto start = std::chrono::steady_clock::now();
        logits = model_.step(token);
        result.step_seconds.push_back(seconds_since(start));
        cached_.push_back(token);
    }
    if (result.reason != StopReason::stop_string) {
        filter.add(stream.finish());
        filter.finish();
    }
    result.text = filter.text();
    return result;
}

}  // namespace qjit_models
