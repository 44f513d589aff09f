#include "models/unicode_text.hpp"

#include <algorithm>
#include <iterator>

namespace qjit_models {

namespace {

struct CodePointRange {
    char32_t first, last;
};

#include "models/unicode_categories.inc"

template <size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], char32_t code_point) {
    const auto after = std::upper_bound(std::begin(ranges), std::end(ranges), code_point,
                                        [](char32_t cp, const CodePointRange& r) { return cp < r.first; });
    return after != std::begin(ranges) && code_point <= std::prev(after)->last;
}

// The code point of the well-formed sequence at text[at], or nullopt with `why` set.
std::optional<CodePoint> decode_at(std::string_view text, size_t at, const char** why) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = byte(at);
    if (lead < 0x80) return CodePoint{lead, at, 1};
    const size_t length = utf8_sequence_length(lead);
    if (length == 1 || lead > 0xF4) {
        *why = lead < 0xC0 ? "a continuation byte where a character starts" : "a byte that starts no character";
        return std::nullopt;
    }
    if (at + length > text.size()) {
        *why = "a character cut off by the end of the text";
        return std::nullopt;
    }
    char32_t value = lead & (0x7F >> length);
    for (size_t i = 1; i < length; ++i) {
        if ((byte(at + i) & 0xC0) != 0x80) {
            *why = "a character whose continuation bytes are missing";
            return std::nullopt;
        }
        value = (value << 6) | (byte(at + i) & 0x3F);
    }
    static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (value < kSmallest[length]) *why = "an overlong encoding";
    else if (value >= 0xD800 && value <= 0xDFFF) *why = "an encoded surrogate";
    else if (value > 0x10FFFF) *why = "a value past U+10FFFF";
    else return CodePoint{value, at, length};
    return std::nullopt;
}

}  // namespace

size_t utf8_sequence_length(unsigned char lead) {
    if (lead < 0xC0) return 1;
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    return 4;
}

std::optional<std::string> utf8_problem(std::string_view text) {
    for (size_t at = 0; at < text.size();) {
        const char* why = "";
        const std::optional<CodePoint> cp = decode_at(text, at, &why);
        if (!cp) return "invalid UTF-8 at byte " + std::to_string(at) + ": " + why;
        at += cp->length;
    }
    return std::nullopt;
}

std::vector<CodePoint> code_points(std::string_view text) {
    std::vector<CodePoint> out;
    out.reserve(text.size());
    for (size_t at = 0; at < text.size();) {
        const char* why = "";
        const std::optional<CodePoint> cp = decode_at(text, at, &why);
        out.push_back(cp ? *cp : CodePoint{0xFFFD, at, 1});  // malformed: one byte, U+FFFD
        at += out.back().length;
    }
    return out;
}

size_t complete_utf8_prefix(std::string_view text) {
    // Only the last three bytes can belong to an unfinished sequence.
    for (size_t back = 1; back <= std::min<size_t>(3, text.size()); ++back) {
        const auto byte = static_cast<unsigned char>(text[text.size() - back]);
        if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        const size_t length = utf8_sequence_length(byte);
        return length > back ? text.size() - back : text.size();
    }
    return text.size();
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(char(cp));
    } else if (cp < 0x800) {
        out.push_back(char(0xC0 | (cp >> 6)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(char(0xE0 | (cp >> 12)));
        out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(char(0xF0 | (cp >> 18)));
        out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    }
}

bool is_letter(char32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return in_ranges(kLetterRanges, cp);
}

bool is_number(char32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return in_ranges(kNumberRanges, cp);
}

bool is_white_space(char32_t cp) {
    switch (cp) {
        case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0: case 0x1680:
        case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
            return true;
        default:
            return cp >= 0x2000 && cp <= 0x200A;
    }
}

}  // namespace qjit_models
