#include "models/bpe_encoder.hpp"

#include <stdexcept>

#include "models/pair_merges.hpp"
#include "models/unicode_text.hpp"

namespace qjit_models {

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
    std::string key;
    const PairPriority by_rank = [&](std::string_view left, std::string_view right) -> std::optional<double> {
        key.assign(left).append(" ").append(right);
        const auto found = ranks_.find(key);
        if (found == ranks_.end()) return std::nullopt;
        return -double(found->second);  // the lowest rank first
    };
    for (const std::string_view text : merge_pairs(piece, by_rank)) {
        if (const std::optional<int> token = vocabulary_.find(text)) {
            out.push_back(*token);
            continue;
        }
        for (const char byte : text)  // as llama.cpp: each byte alone when it is a token
            if (const std::optional<int> token = vocabulary_.find(std::string_view(&byte, 1))) out.push_back(*token);
    }
}

}  // namespace qjit_models
