// UTF-8 text as code points, and the Unicode classes tokenizers split text by: letters (\p{L}),
// numbers (\p{N}) and white space (\s, Unicode's White_Space property).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qjit_models {

struct CodePoint {
    char32_t value;
    size_t offset;  // of its first byte in the text
    size_t length;  // its bytes
};

// Where `text` stops being well-formed UTF-8 (overlong forms, surrogates and values past U+10FFFF
// included), as a message naming the byte offset; nullopt when the whole text is well-formed.
std::optional<std::string> utf8_problem(std::string_view text);

// The code points of well-formed UTF-8 `text` (check it with utf8_problem first).
std::vector<CodePoint> code_points(std::string_view text);

// The length of the UTF-8 sequence a lead byte announces: 1 for ASCII and for bytes that cannot
// lead (continuation bytes), 2, 3 or 4 otherwise.
size_t utf8_sequence_length(unsigned char lead);

// The bytes of `text` that end in a complete character: all of it, unless it ends inside a UTF-8
// sequence, whose bytes so far are left out (a streaming printer holds them for the next piece).
size_t complete_utf8_prefix(std::string_view text);

void append_utf8(std::string& out, char32_t code_point);

bool is_letter(char32_t code_point);      // general category L*
bool is_number(char32_t code_point);      // general category N*
bool is_white_space(char32_t code_point);  // the White_Space property

}  // namespace qjit_models
