#include "models/gguf_vocabulary.hpp"

#include <algorithm>
#include <stdexcept>

#include "models/unicode_text.hpp"

namespace qjit_models {

namespace {

const std::unordered_map<char32_t, uint8_t>& unicode_to_byte() {
    static const std::unordered_map<char32_t, uint8_t> table = [] {
        std::unordered_map<char32_t, uint8_t> inverse;
        for (int b = 0; b < 256; ++b) inverse[byte_to_unicode(uint8_t(b))] = uint8_t(b);
        return inverse;
    }();
    return table;
}

// Control tokens that end a turn in the chat formats of the common model families.
constexpr const char* kEndOfTurnTexts[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>",
                                           "<|end|>",    "<|endoftext|>", "<|end_of_text|>", "</s>"};

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

GgufVocabulary::GgufVocabulary(const qjit::GgufFile& file) : file_name_(file.file_name()) {
    const auto fail = [&](const std::string& what) { throw std::runtime_error("'" + file_name_ + "': " + what); };
    if (!file.has("tokenizer.ggml.tokens")) fail("metadata key tokenizer.ggml.tokens is missing");
    tokens_ = file.get_string_array("tokenizer.ggml.tokens");
    const auto per_token = [&](const char* key, size_t entries) {
        if (entries != tokens_.size())
            fail(std::string(key) + " has " + std::to_string(entries) + " entries for " +
                 std::to_string(tokens_.size()) + " tokens");
    };
    if (file.has("tokenizer.ggml.token_type")) {
        const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
        per_token("tokenizer.ggml.token_type", types.size());
        types_.reserve(types.size());
        for (const int64_t type : types)  // llama.cpp reads an undefined type as no attribute: normal here
            types_.push_back(type >= 1 && type <= 6 ? TokenType(type) : TokenType::normal);
    }
    if (file.has("tokenizer.ggml.scores")) {
        scores_ = file.get_float_array("tokenizer.ggml.scores");
        per_token("tokenizer.ggml.scores", scores_.size());
    }
    if (file.has("tokenizer.ggml.merges")) merges_ = file.get_string_array("tokenizer.ggml.merges");
    model_name_ = file.has("tokenizer.ggml.model") ? file.get_string("tokenizer.ggml.model") : "";
    model_ = model_name_ == "gpt2" ? Model::byte_level : model_name_ == "llama" ? Model::sentencepiece : Model::plain;
    pre_ = file.has("tokenizer.ggml.pre") ? file.get_string("tokenizer.ggml.pre") : "default";

    const auto token_id = [&](const char* key) -> std::optional<int> {
        if (!file.has(key)) return std::nullopt;
        const uint64_t id = file.get_uint(key);
        if (id >= tokens_.size())
            fail(std::string(key) + " is " + std::to_string(id) + ", outside the vocabulary of " +
                 std::to_string(tokens_.size()));
        return int(id);
    };
    bos_ = token_id("tokenizer.ggml.bos_token_id");
    eos_ = token_id("tokenizer.ggml.eos_token_id");
    for (const std::optional<int> end : {eos_, token_id("tokenizer.ggml.eot_token_id")})
        if (end) end_tokens_.push_back(*end);
    for (int token = 0; token < size(); ++token)
        if (type(token) == TokenType::control &&
            std::find(std::begin(kEndOfTurnTexts), std::end(kEndOfTurnTexts), text(token)) != std::end(kEndOfTurnTexts))
            end_tokens_.push_back(token);

    adds_bos_ = model_ == Model::sentencepiece;
    adds_space_prefix_ = model_ == Model::sentencepiece;
    if (file.has("tokenizer.ggml.add_bos_token")) adds_bos_ = file.get_bool("tokenizer.ggml.add_bos_token");
    if (file.has("tokenizer.ggml.add_eos_token")) adds_eos_ = file.get_bool("tokenizer.ggml.add_eos_token");
    if (file.has("tokenizer.ggml.add_space_prefix"))
        adds_space_prefix_ = file.get_bool("tokenizer.ggml.add_space_prefix");
    if (adds_bos_ && !bos_) fail("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing");
    if (adds_eos_ && !eos_) fail("tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is missing");
}

std::optional<int> GgufVocabulary::find(std::string_view text) const {
    std::call_once(ids_built_, [this] {
        ids_.reserve(tokens_.size());
        for (size_t i = 0; i < tokens_.size(); ++i) ids_[tokens_[i]] = int(i);  // a repeated text: the last id
    });
    const auto found = ids_.find(text);
    if (found == ids_.end()) return std::nullopt;
    return found->second;
}

bool GgufVocabulary::ends_generation(int token) const {
    return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
}

std::string GgufVocabulary::piece(int token) const {
    if (token < 0 || token >= size())
        throw std::runtime_error("token " + std::to_string(token) + " is outside the vocabulary of " +
                                 std::to_string(size()));
    const TokenType kind = type(token);
    if (kind == TokenType::control || kind == TokenType::unused) return {};
    const std::string& text = tokens_[size_t(token)];
    if (model_ == Model::sentencepiece) {
        if (kind == TokenType::byte && text.size() == 6 && text.starts_with("<0x"))
            return std::string(1, char(std::stoi(text.substr(3, 2), nullptr, 16)));
        std::string out;
        for (const CodePoint& cp : code_points(text)) {
            if (cp.value == 0x2581) out += ' ';
            else out.append(text, cp.offset, cp.length);
        }
        return out;
    }
    if (model_ != Model::byte_level || kind != TokenType::normal) return text;
    std::string out;
    for (const CodePoint& cp : code_points(text)) {
        const auto found = unicode_to_byte().find(cp.value);
        if (found != unicode_to_byte().end()) out.push_back(char(found->second));
        else out.append(text, cp.offset, cp.length);  // not a byte's character: kept as written
    }
    return out;
}

std::string GgufVocabulary::decode(std::span<const int> tokens) const {
    std::string text;
    for (const int token : tokens) text += piece(token);
    return text;
}

}  // namespace qjit_models
