// Text to tokens with a GGUF model's own vocabulary, as llama.cpp's llama_tokenize does:
// user-defined tokens written in the text are cut out first and taken whole (control tokens too
// when parse_special is set); the text between them goes through the vocabulary's encoder
// (byte-level BPE, models/bpe_encoder.hpp, or SentencePiece, models/spm_encoder.hpp); with
// add_special, BOS and EOS are added as the vocabulary's add_bos_token and add_eos_token say.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "models/gguf_vocabulary.hpp"

namespace qjit_models {

class BpeEncoder;

class TextTokenizer {
public:
    // Keeps a reference to `vocabulary`. Throws std::runtime_error naming the file and the
    // tokenizer when its model (tokenizer.ggml.model) or pre-tokenizer is not one qjit implements.
    explicit TextTokenizer(const GgufVocabulary& vocabulary);
    ~TextTokenizer();

    // Throws std::invalid_argument naming the byte offset when `text` is not well-formed UTF-8.
    std::vector<int> encode(std::string_view text, bool add_special = true, bool parse_special = false) const;

    const GgufVocabulary& vocabulary() const { return vocabulary_; }

private:
    void encode_text(std::string_view text, bool after_special, std::vector<int>& out) const;

    const GgufVocabulary& vocabulary_;
    std::unique_ptr<BpeEncoder> bpe_;    // byte-level BPE vocabularies
    std::vector<int> special_tokens_;    // control, unknown and user-defined, longest text first
};

}  // namespace qjit_models
