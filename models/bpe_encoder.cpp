#include "models/bpe_encoder.hpp"

#include <queue>
#include <stdexcept>

#include "models/unicode_text.hpp"

namespace qjit_models {

namespace {

// A stretch of the piece, linked to its neighbours; merged-away symbols keep an empty text.
struct Symbol {
    size_t begin = 0, length = 0;
    int prev = -1, next = -1;
};

struct Bigram {
    int rank;
    int left, right;
    size_t length;  // the merged text's: a bigram whose symbols changed since is stale
    // std::priority_queue pops the largest: the lowest rank, then the leftmost.
    bool operator<(const Bigram& other) const {
        return rank != other.rank ? rank > other.rank : left > other.left;
    }
};

}  // namespace

BpeEncoder::BpeEncoder(const GgufVocabulary& vocabulary)
    : vocabulary_(vocabulary), pre_(pre_tokenizer_named(vocabulary.pre_tokenizer())),
      whole_piece_tokens_(pre_ == PreTokenizer::llama3) {
    const std::vector<std::string>& merges = vocabulary.merges();
    if (merges.empty())
        throw std::runtime_error("'" + vocabulary.file_name() + "': a byte-level BPE vocabulary without "
                                 "tokenizer.ggml.merges");
    ranks_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        if (merges[rank].find(' ', 1) == std::string::npos)
            throw std::runtime_error("'" + vocabulary.file_name() + "': tokenizer.ggml.merges entry " +
                                     std::to_string(rank) + " ('" + merges[rank] + "') is not two tokens' text");
        ranks_.emplace(merges[rank], int(rank));  // a repeated merge keeps its first rank
    }
    for (int b = 0; b < 256; ++b) append_utf8(byte_text_[b], byte_to_unicode(uint8_t(b)));
}

void BpeEncoder::encode(std::string_view text, std::vector<int>& out) const {
    std::string piece;
    for (const std::string_view raw : split_pieces(pre_, text)) {
        piece.clear();
        for (const char byte : raw) piece += byte_text_[uint8_t(byte)];
        encode_piece(piece, out);
    }
}

void BpeEncoder::encode_piece(const std::string& piece, std::vector<int>& out) const {
    if (whole_piece_tokens_) {
        if (const std::optional<int> whole = vocabulary_.find(piece)) {
            out.push_back(*whole);
            return;
        }
    }
    std::vector<Symbol> symbols;
    for (size_t at = 0; at < piece.size();) {
        const size_t length = std::min(utf8_sequence_length(uint8_t(piece[at])), piece.size() - at);
        symbols.push_back({at, length, int(symbols.size()) - 1, -1});
        if (symbols.size() > 1) symbols[symbols.size() - 2].next = int(symbols.size()) - 1;
        at += length;
    }
    std::priority_queue<Bigram> queue;
    std::string key;
    const auto add_bigram = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const Symbol &a = symbols[size_t(left)], &b = symbols[size_t(right)];
        key.assign(piece, a.begin, a.length).append(" ").append(piece, b.begin, b.length);
        const auto found = ranks_.find(key);
        if (found != ranks_.end()) queue.push({found->second, left, right, a.length + b.length});
    };
    for (size_t i = 1; i < symbols.size(); ++i) add_bigram(int(i) - 1, int(i));
    while (!queue.empty()) {
        const Bigram bigram = queue.top();
        queue.pop();
        Symbol &left = symbols[size_t(bigram.left)], &right = symbols[size_t(bigram.right)];
        if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length ||
            left.next != bigram.right)
            continue;
        left.length += right.length;
        right.length = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[size_t(right.next)].prev = bigram.left;
        add_bigram(left.prev, bigram.left);
        add_bigram(bigram.left, left.next);
    }
    for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) {
        const std::string_view text = std::string_view(piece).substr(symbols[size_t(i)].begin, symbols[size_t(i)].length);
        if (const std::optional<int> token = vocabulary_.find(text)) {
            out.push_back(*token);
            continue;
        }
        for (const char byte : text)  // as llama.cpp: each byte alone when it is a token
            if (const std::optional<int> token = vocabulary_.find(std::string_view(&byte, 1))) out.push_back(*token);
    }
}

}  // namespace qjit_models
