// Generated tokens as text while they come: a token can end inside a UTF-8 character (byte
// tokens, or BPE tokens of part of a character), so the bytes of an unfinished character are held
// until the token that completes it.
#pragma once

#include <string>
#include <utility>

#include "models/gguf_vocabulary.hpp"
#include "models/unicode_text.hpp"

namespace qjit_models {

class TokenTextStream {
public:
    explicit TokenTextStream(const GgufVocabulary& vocabulary) : vocabulary_(vocabulary) {}

    // The text that `token` completes (possibly empty).
    std::string push(int token) {
        held_ += vocabulary_.piece(token);
        const size_t complete = complete_utf8_prefix(held_);
        std::string ready = held_.substr(0, complete);
        held_.erase(0, complete);
        return ready;
    }
    // The bytes still held at the end of generation (an unfinished character, as it is).
    std::string finish() { return std::exchange(held_, std::string()); }

private:
    const GgufVocabulary& vocabulary_;
    std::string held_;
};

}  // namespace qjit_models
