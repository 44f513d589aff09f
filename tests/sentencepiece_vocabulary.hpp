// Small SentencePiece vocabularies as GGUF files, for the tokenizer's tests and fuzz target: <unk>,
// <s> and </s>, the 256 byte tokens <0x00>..<0xFF> (ids 3..258), then the pieces given (ids from 259).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/gguf_writer.hpp"

namespace qjit::test {

struct SentencePiece {
    std::string text;
    float score = 0;
    int32_t type = 1;  // llama.cpp's token types: 1 normal, 3 control, 4 user-defined, ...
};

constexpr int kFirstSentencePiece = 3 + 256;

inline int byte_piece_id(uint8_t byte) { return 3 + byte; }

inline std::string sentencepiece_vocabulary(const std::vector<SentencePiece>& pieces, bool space_prefix) {
    std::vector<std::string> texts = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        texts.push_back(name);
        scores.push_back(0);
        types.push_back(6);
    }
    for (const SentencePiece& piece : pieces) {
        texts.push_back(piece.text);
        scores.push_back(piece.score);
        types.push_back(piece.type);
    }
    GgufWriter writer;
    writer.value("general.architecture", "llama")
        .value("tokenizer.ggml.model", "llama")
        .array("tokenizer.ggml.tokens", texts)
        .array("tokenizer.ggml.scores", scores)
        .array("tokenizer.ggml.token_type", types)
        .value("tokenizer.ggml.bos_token_id", uint32_t(1))
        .value("tokenizer.ggml.eos_token_id", uint32_t(2))
        .value("tokenizer.ggml.add_space_prefix", space_prefix);
    return writer.bytes();
}

}  // namespace qjit::test
