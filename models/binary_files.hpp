// Whole files read into memory: bytes, or arrays of little-endian values of one type.
// Errors (a missing or unreadable file, a size that is not whole values) throw std::runtime_error
// naming the file.
#pragma once

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace qjit_models {

std::vector<char> read_file_bytes(const std::string& path);

template <typename T>
std::vector<T> read_array_file(const std::string& path) {
    static_assert(std::is_trivially_copyable_v<T> && std::endian::native == std::endian::little);
    const std::vector<char> bytes = read_file_bytes(path);
    if (bytes.size() % sizeof(T) != 0) {
        throw std::runtime_error("'" + path + "' is " + std::to_string(bytes.size()) +
                                 " bytes, not a whole number of " + std::to_string(sizeof(T)) + "-byte values");
    }
    std::vector<T> values(bytes.size() / sizeof(T));
    if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
}

}  // namespace qjit_models
