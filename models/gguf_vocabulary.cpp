#include "models/gguf_vocabulary.hpp"

#include <stdexcept>
#include <unordered_map>

namespace qjit_models {

namespace {

// llama.cpp's token types (llama_token_type).
constexpr int64_t kControlToken = 3, kUnusedToken = 5, kByteToken = 6;

// The code point that starts at text[at] and its length in bytes; a malformed byte stands for itself.
std::pair<char32_t, size_t> next_code_point(const std::string& text, size_t at) {
    const auto byte = [&](size_t i) { return uint8_t(text[i]); };
    const uint8_t lead = byte(at);
    const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
    if (length <= 1 || at + length > text.size()) return {lead, 1};
    char32_t cp = lead & (0x7F >> length);
    for (size_t i = 1; i < length; ++i) {
        if ((byte(at + i) & 0xC0) != 0x80) return {lead, 1};
        cp = (cp << 6) | (byte(at + i) & 0x3F);
    }
    return {cp, length};
}

const std::unordered_map<char32_t, uint8_t>& unicode_to_byte() {
    static const std::unordered_map<char32_t, uint8_t> table = [] {
        std::unordered_map<char32_t, uint8_t> inverse;
        for (int b = 0; b < 256; ++b) inverse[byte_to_unicode(uint8_t(b))] = uint8_t(b);
        return inverse;
    }();
    return table;
}

}  // namespace

char32_t byte_to_unicode(uint8_t byte) {
    // Printable Latin-1 bytes stand for themselves; the others, in order, for 256, 257, ...
    const auto stands_for_itself = [](int b) {
        return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    if (stands_for_itself(byte)) return byte;
    char32_t next = 256;
    for (int b = 0; b < byte; ++b)
        if (!stands_for_itself(b)) ++next;
    return next;
}

GgufVocabulary::GgufVocabulary(const qjit::GgufFile& file) {
    if (!file.has("tokenizer.ggml.tokens"))
        throw std::runtime_error("'" + file.file_name() + "': metadata key tokenizer.ggml.tokens is missing");
    tokens_ = file.get_string_array("tokenizer.ggml.tokens");
    if (file.has("tokenizer.ggml.token_type")) {
        types_ = file.get_int_array("tokenizer.ggml.token_type");
        if (types_.size() != tokens_.size())
            throw std::runtime_error("'" + file.file_name() + "': tokenizer.ggml.token_type has " +
                                     std::to_string(types_.size()) + " entries for " +
                                     std::to_string(tokens_.size()) + " tokens");
    }
    const std::string model = file.has("tokenizer.ggml.model") ? file.get_string("tokenizer.ggml.model") : "";
    model_ = model == "gpt2" ? Model::byte_level : model == "llama" ? Model::sentencepiece : Model::plain;
    if (file.has("tokenizer.ggml.bos_token_id")) {
        const uint64_t bos = file.get_uint("tokenizer.ggml.bos_token_id");
        if (bos < tokens_.size()) bos_ = int(bos);
    }
}

std::string GgufVocabulary::piece(int token) const {
    if (token < 0 || token >= size())
        throw std::runtime_error("token " + std::to_string(token) + " is outside the vocabulary of " +
                                 std::to_string(size()));
    const int64_t type = types_.empty() ? 1 : types_[size_t(token)];
    if (type == kControlToken || type == kUnusedToken) return {};
    const std::string& text = tokens_[size_t(token)];
    if (model_ == Model::sentencepiece) {
        if (type == kByteToken && text.size() == 6 && text.starts_with("<0x"))
            return std::string(1, char(std::stoi(text.substr(3, 2), nullptr, 16)));
        std::string out;
        for (size_t at = 0; at < text.size();) {
            const auto [cp, length] = next_code_point(text, at);
            if (cp == 0x2581) out += ' ';
            else out.append(text, at, length);
            at += length;
        }
        return out;
    }
    if (model_ != Model::byte_level || type != 1) return text;
    std::string out;
    for (size_t at = 0; at < text.size();) {
        const auto [cp, length] = next_code_point(text, at);
        const auto found = unicode_to_byte().find(cp);
        if (found != unicode_to_byte().end()) out.push_back(char(found->second));
        else out.append(text, at, length);  // not a byte's character: kept as written
        at += length;
    }
    return out;
}

std::string GgufVocabulary::decode(std::span<const int> tokens) const {
    std::string text;
    for (const int token : tokens) text += piece(token);
    return text;
}

}  // namespace qjit_models
