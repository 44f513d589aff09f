// Reading integers from JSON that files on disk hold (layer file headers, checkpoint configs,
// safetensors headers). Only sources that already use nlohmann-json include this.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>

namespace qjit {

// `value` as an integer in [lo, hi], or nothing: for floats (even 4.0), other types and integers
// out of range alike. Asking nlohmann for an integer converts a float without a check, which is
// undefined behaviour when it is out of range; and non-negative literals are parsed as unsigned,
// so both kinds are compared here.
inline std::optional<int64_t> json_integer(const nlohmann::json& value, int64_t lo, int64_t hi) {
    if (value.is_number_unsigned()) {
        const uint64_t u = value.get<uint64_t>();
        if (hi < 0 || u > uint64_t(hi) || int64_t(u) < lo) return std::nullopt;
        return int64_t(u);
    }
    if (!value.is_number_integer()) return std::nullopt;
    const int64_t i = value.get<int64_t>();
    if (i < lo || i > hi) return std::nullopt;
    return i;
}

}  // namespace qjit
