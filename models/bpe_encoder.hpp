// Byte-level BPE (tokenizer.ggml.model "gpt2"): the text is cut into pieces by the vocabulary's
// pre-tokenizer, each piece's bytes are written as GPT-2's byte characters, and within a piece the
// adjacent pair of lowest merge rank (tokenizer.ggml.merges' order) is merged, the leftmost first
// among equals, until no pair of the merges is left (models/pair_merges.hpp). Llama 3's
// vocabularies take a piece that is a token whole, without merging (llama.cpp's ignore_merges).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/gguf_vocabulary.hpp"
#include "models/pre_tokenizer.hpp"

namespace qjit_models {

class BpeEncoder {
public:
    // Throws std::runtime_error naming the file when the pre-tokenizer is unknown or a merge is not
    // two tokens' text.
    explicit BpeEncoder(const GgufVocabulary& vocabulary);

    // Appends the tokens of well-formed UTF-8 `text` (no special tokens in it) to `out`.
    void encode(std::string_view text, std::vector<int>& out) const;

private:
    void encode_piece(const std::string& piece, std::vector<int>& out) const;

    const GgufVocabulary& vocabulary_;
    PreTokenizer pre_;
    bool whole_piece_tokens_;                       // ignore_merges
    std::unordered_map<std::string, int> ranks_;    // "left right" -> its rank
    std::string byte_text_[256];                    // the UTF-8 of each byte's character
};

}  // namespace qjit_models
