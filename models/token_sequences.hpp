// Token sequence files (*.seq.u32): little-endian uint32 values, the number of sequences S, then the
// S sequence lengths, then all tokens of all sequences in order.
#pragma once

#include <string>
#include <vector>

namespace qjit_models {

using TokenSequences = std::vector<std::vector<int>>;

// Throws std::runtime_error naming the file when it is not exactly such a file: too short for its
// header, lengths that do not add up to the tokens that follow, or a token above INT32_MAX.
TokenSequences read_token_sequences(const std::string& path);

// Throws std::runtime_error naming `what`, the sequence and the token when a token is outside
// [0, vocab_size).
void check_tokens_in_vocabulary(const TokenSequences& sequences, int vocab_size, const std::string& what);

// "1,2,3" as tokens; throws std::runtime_error on anything but a comma-separated list of integers
// in [0, INT32_MAX].
std::vector<int> parse_token_list(const std::string& text);

}  // namespace qjit_models
