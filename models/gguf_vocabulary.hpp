// A GGUF model's vocabulary (the tokenizer.ggml.* metadata): its tokens with their types and
// scores, the BPE merges, the special tokens and the rules for adding them, and the text each
// token stands for. With tokenizer.ggml.model "gpt2" (byte-level BPE) each character of a token
// stands for one byte through GPT-2's bytes_to_unicode table, which is inverted here; with "llama"
// (SentencePiece) U+2581 stands for a space and <0xXX> tokens for their byte; other models' tokens
// are taken as they are. Control and unused tokens (BOS, EOS, chat markers) print as nothing;
// user-defined ones print as written. TextTokenizer (models/text_tokenizer.hpp) encodes text with it.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/gguf_file.hpp"

namespace qjit_models {

// tokenizer.ggml.token_type's values (llama.cpp's llama_token_type).
enum class TokenType : uint8_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

class GgufVocabulary {
public:
    enum class Model { byte_level, sentencepiece, plain };

    // Throws std::runtime_error naming the file when tokenizer.ggml.tokens is missing, or when the
    // token types or scores do not list one entry per token.
    explicit GgufVocabulary(const qjit::GgufFile& file);
    // The token lookup holds views of the tokens' text: neither copyable nor movable.
    GgufVocabulary(const GgufVocabulary&) = delete;
    GgufVocabulary& operator=(const GgufVocabulary&) = delete;

    int size() const { return int(tokens_.size()); }
    Model model() const { return model_; }
    const std::string& model_name() const { return model_name_; }  // tokenizer.ggml.model as written
    const std::string& pre_tokenizer() const { return pre_; }      // tokenizer.ggml.pre; "default" when absent
    const std::string& file_name() const { return file_name_; }

    const std::string& text(int token) const { return tokens_.at(size_t(token)); }  // as stored
    TokenType type(int token) const { return types_.empty() ? TokenType::normal : types_.at(size_t(token)); }
    float score(int token) const { return scores_.empty() ? 0.0f : scores_.at(size_t(token)); }
    // The token whose stored text this is. The lookup is built at the first call (tens of ms for a
    // 262,144-token vocabulary), so that runs that only score or print tokens never pay for it.
    std::optional<int> find(std::string_view text) const;
    const std::vector<std::string>& merges() const { return merges_; }  // tokenizer.ggml.merges

    std::optional<int> bos() const { return bos_; }  // tokenizer.ggml.bos_token_id
    std::optional<int> eos() const { return eos_; }  // tokenizer.ggml.eos_token_id
    // Whether encoding with special tokens adds BOS first / EOS last (tokenizer.ggml.add_bos_token,
    // add_eos_token; by default BOS for SentencePiece, nothing for BPE, as llama.cpp does), and
    // whether SentencePiece text gets a space in front (tokenizer.ggml.add_space_prefix).
    bool adds_bos() const { return adds_bos_; }
    bool adds_eos() const { return adds_eos_; }
    bool adds_space_prefix() const { return adds_space_prefix_; }
    // Whether generation stops at `token`: EOS, EOT, or a control token that ends a turn
    // ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", ...).
    bool ends_generation(int token) const;

    // The bytes token `token` stands for; throws std::runtime_error outside the vocabulary.
    std::string piece(int token) const;
    std::string decode(std::span<const int> tokens) const;

private:
    std::string file_name_, model_name_, pre_;
    Model model_ = Model::plain;
    std::vector<std::string> tokens_;
    std::vector<TokenType> types_;  // empty: every token normal
    std::vector<float> scores_;     // empty: every score 0
    std::vector<std::string> merges_;
    mutable std::once_flag ids_built_;
    mutable std::unordered_map<std::string_view, int> ids_;
    std::optional<int> bos_, eos_;
    std::vector<int> end_tokens_;
    bool adds_bos_ = false, adds_eos_ = false, adds_space_prefix_ = false;
};

// GPT-2's bytes_to_unicode: the code point that stands for each byte in a byte-level BPE vocabulary.
char32_t byte_to_unicode(uint8_t byte);

}  // namespace qjit_models
