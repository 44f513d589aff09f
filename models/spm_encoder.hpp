// SentencePiece's BPE as GGUF files store it (tokenizer.ggml.model "llama": Llama 2, Gemma): the
// text, spaces written as U+2581, starts as one symbol per character; the adjacent pair whose joined
// text is the token of highest score (tokenizer.ggml.scores) is joined, the leftmost first among
// equals, until no joined pair is a token (models/pair_merges.hpp). A character that is no token
// is written as its bytes' <0xXX> tokens (byte fallback).
#pragma once

#include <string_view>
#include <vector>

#include "models/gguf_vocabulary.hpp"

namespace qjit_models {

// Appends the tokens of `text` (spaces already written as U+2581) to `out`. Throws
// std::runtime_error naming the byte when a character needs byte fallback and the vocabulary has
// no token for one of its bytes.
void spm_encode(const GgufVocabulary& vocabulary, std::string_view text, std::vector<int>& out);

}  // namespace qjit_models
