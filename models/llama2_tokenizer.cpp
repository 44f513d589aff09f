#include "models/llama2_tokenizer.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "models/binary_files.hpp"
#include "models/fail.hpp"

namespace qjit_models::llama2 {

namespace {

using qjit_models::fail;

}  // namespace

Tokenizer::Tokenizer(const std::string& path, int vocab_size) {
    const std::vector<char> bytes = qjit_models::read_file_bytes(path);
    size_t offset = 0;
    auto take = [&](void* dest, size_t size) {
        if (bytes.size() - offset < size) fail("tokenizer '", path, "' is truncated at byte ", offset);
        std::memcpy(dest, bytes.data() + offset, size);
        offset += size;
    };
    int32_t max_token_length = 0;
    take(&max_token_length, sizeof max_token_length);
    if (max_token_length < 1) fail("tokenizer '", path, "': max_token_length ", max_token_length, " is invalid");
    vocab_.resize(size_t(vocab_size));
    scores_.resize(size_t(vocab_size));
    for (size_t id = 0; id < vocab_.size(); ++id) {
        std::string& piece = vocab_[id];
        float& score = scores_[id];
        int32_t length = 0;
        take(&score, sizeof score);
        take(&length, sizeof length);
        if (length < 0 || length > max_token_length) {
            fail("tokenizer '", path, "': token length ", length, " at byte ", offset, " is outside [0, ",
                 max_token_length, "]");
        }
        piece.resize(size_t(length));
        take(piece.data(), piece.size());
        sorted_.emplace_back(piece, int(id));
    }
    std::stable_sort(sorted_.begin(), sorted_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
}

int Tokenizer::lookup(const std::string& piece) const {
    const auto it = std::lower_bound(sorted_.begin(), sorted_.end(), piece,
                                     [](const auto& entry, const std::string& key) { return entry.first < key; });
    return it != sorted_.end() && it->first == piece ? it->second : -1;
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
    std::vector<int> tokens;
    if (text.empty()) return tokens;
    const int space = lookup(" ");
    if (space < 0) fail("Tokenizer::encode: the vocabulary has no \" \" token for the dummy prefix");
    tokens.push_back(space);
    // One token per UTF-8 character (a lead byte and at most 3 continuation bytes), else its bytes.
    for (size_t at = 0; at < text.size();) {
        size_t end = at + 1;
        while (end < text.size() && end - at < 4 && (uint8_t(text[end]) & 0xC0) == 0x80) ++end;
        const int id = lookup(text.substr(at, end - at));
        if (id >= 0) {
            tokens.push_back(id);
        } else {
            for (size_t i = at; i < end; ++i) tokens.push_back(int(uint8_t(text[i])) + 3);
        }
        at = end;
    }
    // Merge the adjacent pair whose concatenation scores highest (the first of equals) until none does.
    for (;;) {
        float best_score = -1e10f;
        int best_id = -1;
        size_t best_at = 0;
        for (size_t i = 0; i + 1 < tokens.size(); ++i) {
            const int id = lookup(vocab_[size_t(tokens[i])] + vocab_[size_t(tokens[i + 1])]);
            if (id >= 0 && scores_[size_t(id)] > best_score) {
                best_score = scores_[size_t(id)];
                best_id = id;
                best_at = i;
            }
        }
        if (best_id < 0) break;
        tokens[best_at] = best_id;
        tokens.erase(tokens.begin() + std::ptrdiff_t(best_at) + 1);
    }
    return tokens;
}

std::vector<std::string> split_paragraphs(const std::string& text) {
    std::vector<std::string> paragraphs;
    auto is_space = [](char ch) { return std::isspace(uint8_t(ch)) != 0; };
    for (size_t begin = 0; begin <= text.size();) {
        size_t end = text.find("\n\n", begin);
        if (end == std::string::npos) end = text.size();
        size_t first = begin, last = end;
        while (first < last && is_space(text[first])) ++first;
        while (last > first && is_space(text[last - 1])) --last;
        if (last > first) paragraphs.push_back(text.substr(first, last - first));
        begin = end + 2;
    }
    return paragraphs;
}

std::string Tokenizer::piece(int previous, int token) const {
    if (token < 0 || token >= int(vocab_.size())) fail("Tokenizer: token ", token, " is outside the vocabulary");
    std::string text = vocab_[size_t(token)];
    if (previous == kBosToken && !text.empty() && text[0] == ' ') text.erase(0, 1);
    // Byte fallback tokens are spelled <0xXX>.
    if (text.size() == 6 && text.starts_with("<0x") && text[5] == '>' && std::isxdigit(uint8_t(text[3])) &&
        std::isxdigit(uint8_t(text[4]))) {
        text = std::string(1, char(std::stoi(text.substr(3, 2), nullptr, 16)));
    }
    // run.c's safe_printf: a lone byte that is neither printable nor whitespace is not printed.
    if (text.size() == 1 && !std::isprint(uint8_t(text[0])) && !std::isspace(uint8_t(text[0]))) return {};
    return text;
}

std::string Tokenizer::decode(std::span<const int> tokens) const {
    std::string text;
    for (size_t i = 1; i < tokens.size(); ++i) {
        if (tokens[i] == kBosToken) break;  // run.c stops generating at BOS
        text += piece(tokens[i - 1], tokens[i]);
    }
    return text;
}

std::vector<std::vector<int>> split_at_bos(std::span<const uint16_t> tokens) {
    if (tokens.empty() || tokens[0] != kBosToken) fail("split_at_bos: the token stream must start with BOS");
    std::vector<std::vector<int>> sequences;
    for (const uint16_t token : tokens) {
        if (token == kBosToken) sequences.emplace_back();
        sequences.back().push_back(token);
    }
    return sequences;
}

}  // namespace qjit_models::llama2
