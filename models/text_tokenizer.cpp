#include "models/text_tokenizer.hpp"

#include <algorithm>
#include <stdexcept>

#include "models/bpe_encoder.hpp"
#include "models/spm_encoder.hpp"
#include "models/unicode_text.hpp"

namespace qjit_models {

namespace {

// A stretch of the text, or a special token cut out of it.
struct Fragment {
    std::string_view text;  // empty for a token
    int token = -1;
};

void replace_spaces(std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text) out += c == ' ' ? "\xE2\x96\x81" : std::string_view(&c, 1);
    text = std::move(out);
}

}  // namespace

TextTokenizer::TextTokenizer(const GgufVocabulary& vocabulary) : vocabulary_(vocabulary) {
    switch (vocabulary.model()) {
        case GgufVocabulary::Model::byte_level: bpe_ = std::make_unique<BpeEncoder>(vocabulary); break;
        case GgufVocabulary::Model::sentencepiece: break;
        case GgufVocabulary::Model::plain:
            throw std::runtime_error("'" + vocabulary.file_name() + "': the tokenizer '" + vocabulary.model_name() +
                                     "' (tokenizer.ggml.model) is not one qjit implements: gpt2 (byte-level BPE) "
                                     "and llama (SentencePiece) are");
    }
    for (int token = 0; token < vocabulary.size(); ++token) {
        const TokenType type = vocabulary.type(token);
        if ((type == TokenType::control || type == TokenType::unknown || type == TokenType::user_defined) &&
            !vocabulary.text(token).empty())
            special_tokens_.push_back(token);
    }
    std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int a, int b) {
        return vocabulary.text(a).size() > vocabulary.text(b).size();
    });
}

TextTokenizer::~TextTokenizer() = default;

std::vector<int> TextTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
    if (const std::optional<std::string> problem = utf8_problem(text)) throw std::invalid_argument(*problem);

    // Cut each special token out of the stretches of text left, the longest tokens first.
    std::vector<Fragment> fragments;
    if (!text.empty()) fragments.push_back({text});
    std::vector<Fragment> cut;
    for (const int token : special_tokens_) {
        const TokenType type = vocabulary_.type(token);
        if (!parse_special && type != TokenType::user_defined) continue;
        const std::string& special = vocabulary_.text(token);
        cut.clear();
        for (const Fragment& fragment : fragments) {
            if (fragment.token >= 0) {
                cut.push_back(fragment);
                continue;
            }
            std::string_view rest = fragment.text;
            for (size_t at; (at = rest.find(special)) != std::string_view::npos;) {
                if (at > 0) cut.push_back({rest.substr(0, at)});
                cut.push_back({{}, token});
                rest.remove_prefix(at + special.size());
            }
            if (!rest.empty()) cut.push_back({rest});
        }
        fragments.swap(cut);
    }

    std::vector<int> tokens;
    if (add_special && vocabulary_.adds_bos()) tokens.push_back(*vocabulary_.bos());
    bool after_special = true;  // SentencePiece's space prefix goes before the text that starts or follows one
    for (const Fragment& fragment : fragments) {
        if (fragment.token >= 0) {
            tokens.push_back(fragment.token);
            after_special = true;
        } else {
            encode_text(fragment.text, after_special, tokens);
            after_special = false;
        }
    }
    if (add_special && vocabulary_.adds_eos()) tokens.push_back(*vocabulary_.eos());
    return tokens;
}

void TextTokenizer::encode_text(std::string_view text, bool after_special, std::vector<int>& out) const {
    if (bpe_) {
        bpe_->encode(text, out);
        return;
    }
    std::string escaped = vocabulary_.adds_space_prefix() && after_special ? " " : "";
    escaped += text;
    replace_spaces(escaped);
    spm_encode(vocabulary_, escaped, out);
}

}  // namespace qjit_models
