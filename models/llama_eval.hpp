// What the runners measure with a Llama model (models/llama_model.hpp): the NLL of token sequences
// and greedy decoding, timed per token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/llama_model.hpp"

namespace qjit_models::llama {

struct NllResult {
    double mean_nll = 0.0;             // nats per predicted token
    int64_t tokens = 0;                // predicted tokens (every token but each sequence's first)
    std::vector<double> sequence_nll;  // NLL sum of each sequence
};

// Each sequence from an empty KV cache in one batched forward: the logits of position t predict token
// t + 1, -log softmax(logits[t])[token t + 1] is taken in double and summed in double over
// t = 0 .. n - 2. A sequence of fewer than 2 tokens predicts nothing.
// token_by_token: one m = 1 step per position instead (as decoding runs; what a flash FFN's
// per-token neuron choice needs), the same NLL up to rounding for a dense model.
// The NLL sum of a sequence from the logits of its positions (T x vocab, T >= its length - 1):
// positions 0..n-2 predict tokens 1..n-1.
double sequence_nll(std::span<const float> logits, int vocab, const std::vector<int>& tokens);

NllResult evaluate_nll(Model& model, const std::vector<std::vector<int>>& sequences, bool token_by_token = false);

struct Generation {
    std::vector<int> tokens;           // the prompt, then the generated tokens
    double prompt_seconds = 0.0;       // the forward of prompt[0 .. P-2] (0 for a one-token prompt)
    std::vector<double> step_seconds;  // one m = 1 step per generated token, argmax included
};

// Greedy decoding of `steps` tokens after `prompt` (at least one token), from an empty KV cache: the
// prompt but its last token runs in one batched forward, then each step feeds the last token and
// appends the argmax of its logits. Every generated token costs one step. With a `profile`, the
// steps' forwards (not the prompt's) add their time per forward step to it.
Generation greedy_decode(Model& model, std::span<const int> prompt, int steps, StepProfile* profile = nullptr);

// The seconds of `repeats` forwards of the whole prompt from an empty cache, each computing the last
// position's logits only, after an untimed warm-up of up to 32 tokens and with the cache allocated
// for the prompt (as llama-bench's prompt test does); the cache is left empty.
std::vector<double> time_prompts(Model& model, std::span<const int> prompt, int repeats);

}  // namespace qjit_models::llama
