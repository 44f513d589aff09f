// One JSON object on one line, its keys in the order added: what the runners print with --json.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace qjit_models {

class JsonLine {
public:
    JsonLine& number(const char* key, double value, int decimals = 6) {
        char text[64];
        std::snprintf(text, sizeof text, "%.*f", decimals, value);
        return raw(key, text);
    }
    JsonLine& integer(const char* key, long long value) { return raw(key, std::to_string(value)); }
    JsonLine& boolean(const char* key, bool value) { return raw(key, value ? "true" : "false"); }
    JsonLine& text(const char* key, const std::string& value) { return raw(key, quoted(value)); }
    JsonLine& null(const char* key) { return raw(key, "null"); }
    JsonLine& numbers(const char* key, const std::vector<double>& values, int decimals = 6) {
        std::string list = "[";
        char text[64];
        for (size_t i = 0; i < values.size(); ++i) {
            std::snprintf(text, sizeof text, "%.*f", decimals, values[i]);
            list += (i > 0 ? ", " : "") + std::string(text);
        }
        return raw(key, list + "]");
    }
    JsonLine& integers(const char* key, const std::vector<int>& values) {
        std::string list = "[";
        for (size_t i = 0; i < values.size(); ++i) list += (i > 0 ? ", " : "") + std::to_string(values[i]);
        return raw(key, list + "]");
    }
    std::string str() const { return "{" + body_ + "}"; }

    // A JSON string: quotes, backslashes and control characters escaped, UTF-8 kept, and a byte that
    // does not belong to a valid UTF-8 character replaced by U+FFFD (generated text may end inside one).
    static std::string quoted(const std::string& value) {
        std::string out = "\"";
        for (size_t at = 0; at < value.size();) {
            const auto byte = static_cast<unsigned char>(value[at]);
            const size_t length = utf8_length(value, at);
            if (length == 0) {
                out += "\\ufffd";
                at += 1;
            } else if (byte == '"' || byte == '\\') {
                out += '\\';
                out += char(byte);
                at += 1;
            } else if (byte < 0x20) {
                char escape[8];
                std::snprintf(escape, sizeof escape, "\\u%04x", byte);
                out += escape;
                at += 1;
            } else {
                out.append(value, at, length);
                at += length;
            }
        }
        return out + "\"";
    }

private:
    JsonLine& raw(const char* key, const std::string& value) {
        body_ += (body_.empty() ? "\"" : ", \"") + std::string(key) + "\": " + value;
        return *this;
    }
    // Bytes of the valid UTF-8 character at value[at]; 0 when none starts there.
    static size_t utf8_length(const std::string& value, size_t at) {
        const auto byte = [&](size_t i) { return static_cast<unsigned char>(value[i]); };
        const unsigned char lead = byte(at);
        const size_t length = lead < 0x80 ? 1 : lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3
                              : lead >= 0xF0 && lead <= 0xF4                 ? 4
                                                                             : 0;
        if (length == 0 || at + length > value.size()) return 0;
        for (size_t i = 1; i < length; ++i)
            if ((byte(at + i) & 0xC0) != 0x80) return 0;
        return length;
    }

    std::string body_;
};

}  // namespace qjit_models
