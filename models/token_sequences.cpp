#include "models/token_sequences.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "models/binary_files.hpp"

namespace qjit_models {

TokenSequences read_token_sequences(const std::string& path) {
    const std::vector<uint32_t> values = read_array_file<uint32_t>(path);
    auto fail = [&](const std::string& what) -> std::runtime_error {
        return std::runtime_error("token sequence file '" + path + "': " + what);
    };
    if (values.empty()) throw fail("no sequence count (the file is empty)");
    const uint64_t count = values[0];
    if (count > values.size() - 1)
        throw fail("it declares " + std::to_string(count) + " sequences but holds only " +
                   std::to_string(values.size() - 1) + " values after the count");
    uint64_t tokens = 0;
    for (uint64_t s = 0; s < count; ++s) tokens += values[1 + s];
    if (tokens != values.size() - 1 - count)
        throw fail("its " + std::to_string(count) + " lengths add up to " + std::to_string(tokens) +
                   " tokens, but " + std::to_string(values.size() - 1 - count) + " follow them");
    TokenSequences sequences(count);
    size_t at = 1 + count;
    for (uint64_t s = 0; s < count; ++s) {
        sequences[s].reserve(values[1 + s]);
        for (uint32_t i = 0; i < values[1 + s]; ++i, ++at) {
            if (values[at] > uint32_t(std::numeric_limits<int>::max()))
                throw fail("token " + std::to_string(values[at]) + " of sequence " + std::to_string(s) +
                           " is not a valid token id");
            sequences[s].push_back(int(values[at]));
        }
    }
    return sequences;
}

void check_tokens_in_vocabulary(const TokenSequences& sequences, int vocab_size, const std::string& what) {
    for (size_t s = 0; s < sequences.size(); ++s)
        for (const int token : sequences[s])
            if (token < 0 || token >= vocab_size)
                throw std::runtime_error(what + ": token " + std::to_string(token) + " of sequence " +
                                         std::to_string(s) + " is outside the vocabulary of " +
                                         std::to_string(vocab_size) + " tokens");
}

std::vector<int> parse_token_list(const std::string& text) {
    std::vector<int> tokens;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        const std::string item = text.substr(at, comma - at);
        char* end = nullptr;
        const long long value = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || value < 0 || value > std::numeric_limits<int>::max())
            throw std::runtime_error("'" + text + "' is not a comma-separated list of token ids ('" + item + "')");
        tokens.push_back(int(value));
        at = comma + 1;
    }
    return tokens;
}

}  // namespace qjit_models
