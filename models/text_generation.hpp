// Text generation over a model's KV cache: a context of tokens in, tokens picked by a Sampler out,
// their text streamed as it completes, until an end-of-turn token, a stop string, the token limit
// or the model's context. A session keeps what its KV cache holds, so that a conversation's next
// turn, whose context starts with everything said so far, runs only its new tokens.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/gguf_vocabulary.hpp"
#include "models/llama_model.hpp"
#include "models/sampler.hpp"

namespace qjit_models {

struct GenerationLimits {
    int max_tokens = 128;
    std::vector<std::string> stop_strings;  // generation ends before the first of these in the text
    bool stop_at_end_token = true;          // EOS and end-of-turn tokens (GgufVocabulary::ends_generation)
};

enum class StopReason { end_token, stop_string, max_tokens, context_full };
const char* stop_reason_name(StopReason reason);  // "end_token", "stop_string", ...

struct GeneratedText {
    std::vector<int> tokens;  // every token picked, the end token included
    std::string text;         // their text, up to a stop string
    StopReason reason = StopReason::max_tokens;
    int prompt_tokens_run = 0;          // the context's tokens the KV cache did not hold yet
    double prompt_seconds = 0.0;        // their forward, the first token's logits included
    std::vector<double> step_seconds;   // one m = 1 step per later token
};

// Called with each piece of generated text as soon as it is final (complete characters, and no
// part of what may still become a stop string).
using TextCallback = std::function<void(std::string_view)>;

class TextSession {
public:
    // Keeps references to both; the model's KV cache is the session's from now on.
    TextSession(llama::Model& model, const GgufVocabulary& vocabulary);

    // Generates after `context` (at least one token, within the model's context). The KV cache's
    // tokens are reused when they begin `context`; otherwise it starts over.
    GeneratedText generate(std::span<const int> context, const GenerationLimits& limits, Sampler& sampler,
                           const TextCallback& on_text = {});

    void reset();
    std::span<const int> cached_tokens() const { return cached_; }

private:
    // Runs the tokens of `context` the cache lacks; returns the last position's logits.
    std::span<const float> run_context(std::span<const int> context, GeneratedText& result);

    llama::Model& model_;
    const GgufVocabulary& vocabulary_;
    std::vector<int> cached_;  // the tokens whose keys and values the cache holds, in order
};

}  // namespace qjit_models
