// One JSON object on one line, its keys in the order added: what the runners print with --json.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace qjit_tools {

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
    std::string str() const { return "{" + body_ + "}"; }

    // A JSON string: quotes, backslashes and control characters escaped; other bytes (UTF-8) kept.
    static std::string quoted(const std::string& value) {
        std::string out = "\"";
        for (const char ch : value) {
            const auto byte = static_cast<unsigned char>(ch);
            if (ch == '"' || ch == '\\') {
                out += '\\';
                out += ch;
            } else if (byte < 0x20) {
                char escape[8];
                std::snprintf(escape, sizeof escape, "\\u%04x", byte);
                out += escape;
            } else {
                out += ch;
            }
        }
        return out + "\"";
    }

private:
    JsonLine& raw(const char* key, const std::string& value) {
        body_ += (body_.empty() ? "\"" : ", \"") + std::string(key) + "\": " + value;
        return *this;
    }
    std::string body_;
};

}  // namespace qjit_tools
