// The stories260K model's text side: llama2.c's tokenizer (tok*.bin), the paragraphs of a text as
// the reference tokens were made, and the reference token streams (BOS-separated sequences).
//
// Errors (bad files) are reported by throwing std::runtime_error.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace qjit_models::llama2 {

inline constexpr int kBosToken = 1;

class Tokenizer {
public:
    Tokenizer(const std::string& path, int vocab_size);

    // The bytes run.c prints for `token` after `previous`: the leading space after BOS dropped,
    // <0xXX> mapped to its byte, unprintable single bytes suppressed.
    std::string piece(int previous, int token) const;
    // The text run.c prints for a generated sequence (tokens[0] is the prompt BOS); stops at a BOS.
    std::string decode(std::span<const int> tokens) const;
    // run.c's encode(): a dummy-prefix " " token, each UTF-8 character's token (its bytes + 3 when
    // the vocabulary lacks it), then the adjacent pair of highest score merged until none merges.
    // No BOS or EOS.
    std::vector<int> encode(const std::string& text) const;

private:
    int lookup(const std::string& piece) const;  // -1 when absent

    std::vector<std::string> vocab_;
    std::vector<float> scores_;
    std::vector<std::pair<std::string, int>> sorted_;  // (piece, id) sorted by piece, as run.c searches
};

// The text's paragraphs as the reference tokens were made: split at blank lines ("\n\n"),
// surrounding whitespace stripped, empty ones skipped.
std::vector<std::string> split_paragraphs(const std::string& text);

// A reference token stream cut into its sequences, each starting at a BOS (the stream must start
// with one).
std::vector<std::vector<int>> split_at_bos(std::span<const uint16_t> tokens);

}  // namespace qjit_models::llama2
