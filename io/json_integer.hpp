// Reading integers from JSON that files on disk hold (layer file headers, checkpoint configs,
// safetensors headers). Only sources that already use nlohmann-json include this.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>

#include "base/error.hpp"

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

// object[key] as an integer in [lo, hi]; an invalid-argument Error naming the key otherwise (a
// missing key is nlohmann's out_of_range, as for other fields).
inline int64_t json_integer_field(const nlohmann::json& object, const char* key, int64_t lo, int64_t hi) {
    const std::optional<int64_t> value = json_integer(object.at(key), lo, hi);
    if (!value) fail(QJIT_ERROR_INVALID_ARGUMENT, "\"", key, "\" is not an integer in [", lo, ", ", hi, "]");
    return *value;
}

}  // namespace qjit
