#include "models/spm_encoder.hpp"

#include <cstdio>
#include <queue>
#include <stdexcept>

#include "models/unicode_text.hpp"

namespace qjit_models {

namespace {

struct Symbol {
    size_t begin = 0, length = 0;  // length 0: joined into the symbol on its left
    int prev = -1, next = -1;
};

struct Bigram {
    float score;
    int left, right;
    size_t length;  // the joined text's: a bigram whose symbols changed since is stale
    // std::priority_queue pops the largest: the highest score, then the leftmost.
    bool operator<(const Bigram& other) const {
        return score != other.score ? score < other.score : left > other.left;
    }
};

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
    std::vector<Symbol> symbols;
    for (size_t at = 0; at < text.size();) {
        const size_t length = std::min(utf8_sequence_length(uint8_t(text[at])), text.size() - at);
        symbols.push_back({at, length, int(symbols.size()) - 1, -1});
        if (symbols.size() > 1) symbols[symbols.size() - 2].next = int(symbols.size()) - 1;
        at += length;
    }
    std::priority_queue<Bigram> queue;
    const auto add_bigram = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const Symbol &a = symbols[size_t(left)], &b = symbols[size_t(right)];
        const std::optional<int> token = vocabulary.find(text.substr(a.begin, a.length + b.length));
        if (token) queue.push({vocabulary.score(*token), left, right, a.length + b.length});
    };
    for (size_t i = 1; i < symbols.size(); ++i) add_bigram(int(i) - 1, int(i));
    while (!queue.empty()) {
        const Bigram bigram = queue.top();
        queue.pop();
        Symbol &left = symbols[size_t(bigram.left)], &right = symbols[size_t(bigram.right)];
        if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) continue;
        left.length += right.length;
        right.length = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[size_t(right.next)].prev = bigram.left;
        add_bigram(left.prev, bigram.left);
        add_bigram(bigram.left, left.next);
    }
    for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) {
        const std::string_view symbol = text.substr(symbols[size_t(i)].begin, symbols[size_t(i)].length);
        if (const std::optional<int> token = vocabulary.find(symbol)) {
            out.push_back(*token);
            continue;
        }
        for (const char byte : symbol) out.push_back(byte_token(vocabulary, uint8_t(byte)));
    }
}

}  // namespace qjit_models
