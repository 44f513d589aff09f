// The text of a GGUF model's tokens (tokenizer.ggml.tokens), for printing generated tokens as
// llama.cpp does. With tokenizer.ggml.model "gpt2" (byte-level BPE) each character of a token
// stands for one byte through GPT-2's bytes_to_unicode table, which is inverted here; with "llama"
// (SentencePiece) U+2581 stands for a space and <0xXX> tokens for their byte; other models' tokens
// are taken as they are. Control and unused tokens (tokenizer.ggml.token_type 3 and 5: BOS, EOS,
// chat markers) print as nothing; user-defined ones print as written.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/gguf_file.hpp"

namespace qjit_models {

class GgufVocabulary {
public:
    // Throws std::runtime_error naming the file when tokenizer.ggml.tokens is missing, or when
    // tokenizer.ggml.token_type does not list one type per token.
    explicit GgufVocabulary(const qjit::GgufFile& file);

    int size() const { return int(tokens_.size()); }
    std::optional<int> bos() const { return bos_; }  // tokenizer.ggml.bos_token_id
    // The bytes token `token` stands for; throws std::runtime_error outside the vocabulary.
    std::string piece(int token) const;
    std::string decode(std::span<const int> tokens) const;

private:
    enum class Model { byte_level, sentencepiece, plain };
    Model model_ = Model::plain;
    std::vector<std::string> tokens_;
    std::vector<int64_t> types_;  // empty: every token normal
    std::optional<int> bos_;
};

// GPT-2's bytes_to_unicode: the code point that stands for each byte in a byte-level BPE vocabulary.
char32_t byte_to_unicode(uint8_t byte);

}  // namespace qjit_models
