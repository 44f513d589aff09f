#include "models/pre_tokenizer.hpp"

#include <stdexcept>

#include "models/unicode_text.hpp"

namespace qjit_models {

namespace {

struct NamedPreTokenizer {
    const char* name;
    PreTokenizer pre;
};

// tokenizer.ggml.pre names, as llama.cpp's converter writes them, of the expressions above.
constexpr NamedPreTokenizer kNames[] = {
    {"default", PreTokenizer::gpt2},  {"gpt2", PreTokenizer::gpt2},        {"smollm", PreTokenizer::smollm},
    {"starcoder", PreTokenizer::smollm}, {"llama-bpe", PreTokenizer::llama3}, {"llama3", PreTokenizer::llama3},
    {"smaug-bpe", PreTokenizer::llama3}, {"dbrx", PreTokenizer::llama3},   {"qwen2", PreTokenizer::qwen2},
    {"stablelm2", PreTokenizer::qwen2},  {"deepseek-r1-qwen", PreTokenizer::qwen2},
};

// One stretch of code points and the scanner's view of them.
class Scanner {
public:
    Scanner(const std::vector<CodePoint>& cps, size_t begin, size_t end) : cps_(cps), begin_(begin), end_(end) {}

    // The end of the match that starts at `at` (> at).
    size_t gpt2_match(size_t at) const;
    size_t llama3_match(size_t at, size_t max_digits) const;

private:
    bool inside(size_t i) const { return i >= begin_ && i < end_; }
    char32_t cp(size_t i) const { return inside(i) ? cps_[i].value : 0; }
    bool letter(size_t i) const { return inside(i) && is_letter(cps_[i].value); }
    bool number(size_t i) const { return inside(i) && is_number(cps_[i].value); }
    bool space(size_t i) const { return inside(i) && is_white_space(cps_[i].value); }
    bool other(size_t i) const { return inside(i) && !letter(i) && !number(i) && !space(i); }
    bool newline(size_t i) const { return inside(i) && (cps_[i].value == '\r' || cps_[i].value == '\n'); }
    size_t contraction(size_t at, bool any_case) const;
    size_t white_space_run(size_t at) const;

    const std::vector<CodePoint>& cps_;
    size_t begin_, end_;
};

// The end of 's, 't, 're, 've, 'm, 'll or 'd at `at`; `at` when there is none.
size_t Scanner::contraction(size_t at, bool any_case) const {
    if (cp(at) != '\'') return at;
    const auto lower = [&](size_t i) { return any_case && cp(i) < 0x80 ? char32_t(cp(i) | 0x20) : cp(i); };
    const char32_t a = inside(at + 1) ? lower(at + 1) : 0, b = inside(at + 2) ? lower(at + 2) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return at + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return at + 3;
    return at;
}

// \s+(?!\S)|\s+ at `at`, which is white space: the run, less its last character when more than one
// and something follows (that character then starts the next piece, " word" or " 42").
size_t Scanner::white_space_run(size_t at) const {
    size_t end = at;
    while (space(end)) ++end;
    return end - at > 1 && inside(end) ? end - 1 : end;
}

size_t Scanner::gpt2_match(size_t at) const {
    if (const size_t end = contraction(at, false); end != at) return end;
    const size_t body = cp(at) == ' ' && inside(at + 1) && !space(at + 1) ? at + 1 : at;  // " ?"
    size_t end = body;
    if (letter(body)) {
        while (letter(end)) ++end;
    } else if (number(body)) {
        while (number(end)) ++end;
    } else if (other(body)) {
        while (other(end)) ++end;
    } else {
        return white_space_run(at);
    }
    return end;
}

size_t Scanner::llama3_match(size_t at, size_t max_digits) const {
    if (const size_t end = contraction(at, true); end != at) return end;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!newline(at) && !number(at) && (letter(at) || letter(at + 1))) {
        size_t end = at + 1;
        while (letter(end)) ++end;
        return end;
    }
    if (number(at)) {  // \p{N}{1,max}
        size_t end = at;
        while (number(end) && end - at < max_digits) ++end;
        return end;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    const size_t body = cp(at) == ' ' && other(at + 1) ? at + 1 : at;
    if (other(body)) {
        size_t end = body;
        while (other(end)) ++end;
        while (newline(end)) ++end;
        return end;
    }
    // \s*[\r\n]+: the white space up to its last line break, when it holds one
    size_t end = at, after_newline = at;
    for (; space(end); ++end)
        if (newline(end)) after_newline = end + 1;
    if (after_newline != at) return after_newline;
    return white_space_run(at);
}

void split_stretch(PreTokenizer pre, std::string_view text, const std::vector<CodePoint>& cps, size_t begin,
                   size_t end, std::vector<std::string_view>& pieces) {
    const Scanner scanner(cps, begin, end);
    for (size_t at = begin; at < end;) {
        const size_t next = pre == PreTokenizer::llama3  ? scanner.llama3_match(at, 3)
                            : pre == PreTokenizer::qwen2 ? scanner.llama3_match(at, 1)
                                                         : scanner.gpt2_match(at);
        const size_t first_byte = cps[at].offset;
        const size_t end_byte = next < cps.size() ? cps[next].offset : text.size();
        pieces.push_back(text.substr(first_byte, end_byte - first_byte));
        at = next;
    }
}

}  // namespace

PreTokenizer pre_tokenizer_named(std::string_view name) {
    for (const NamedPreTokenizer& known : kNames)
        if (name == known.name) return known.pre;
    std::string names;
    for (const NamedPreTokenizer& known : kNames) names += std::string(names.empty() ? "" : ", ") + known.name;
    throw std::runtime_error("the pre-tokenizer '" + std::string(name) + "' (tokenizer.ggml.pre) is not one qjit "
                             "implements: " + names);
}

std::vector<std::string_view> split_pieces(PreTokenizer pre, std::string_view text) {
    const std::vector<CodePoint> cps = code_points(text);
    std::vector<std::string_view> pieces;
    if (pre != PreTokenizer::smollm) {
        split_stretch(pre, text, cps, 0, cps.size(), pieces);
        return pieces;
    }
    // Each number character alone, and gpt2's pieces within the stretches between them.
    size_t stretch = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
        if (i < cps.size() && !is_number(cps[i].value)) continue;
        split_stretch(PreTokenizer::gpt2, text, cps, stretch, i, pieces);
        if (i < cps.size()) pieces.push_back(text.substr(cps[i].offset, cps[i].length));
        stretch = i + 1;
    }
    return pieces;
}

}  // namespace qjit_models
