#include "models/spm_encoder.hpp"

#include <cstdio>
#include <stdexcept>

#include "models/pair_merges.hpp"

namespace qjit_models {

namespace {

int byte_token(const GgufVocabulary& vocabulary, unsigned char byte) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", byte);
    if (const std::optional<int> token = vocabulary.find(name)) return *token;
    if (const std::optional<int> token = vocabulary.find(std::string_view(reinterpret_cast<const char*>(&byte), 1)))
        return *token;
    throw std::runtime_error("'" + vocabulary.file_name() + "': the vocabulary has no token for byte " + name +
                             ", which a character of the text needs");
}

}  // namespace

void spm_encode(const GgufVocabulary& vocabulary, std::string_view text, std::vector<int>& out) {
    const PairPriority by_score = [&](std::string_view left, std::string_view right) -> std::optional<double> {
        const std::optional<int> token = vocabulary.find(std::string_view(left.data(), left.size() + right.size()));
        if (!token) return std::nullopt;
        return vocabulary.score(*token);
    };
    for (const std::string_view symbol : merge_pairs(text, by_score)) {
        if (const std::optional<int> token = vocabulary.find(symbol)) {
            out.push_back(*token);
            continue;
        }
        for (const char byte : symbol) out.push_back(byte_token(vocabulary, uint8_t(byte)));
    }
}

}  // namespace qjit_models
