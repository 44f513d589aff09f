// Scratch buffers that only grow, so that steady-state calls do not allocate.
#pragma once

#include <cstddef>
#include <vector>

namespace qjit {

// `buffer`'s data with room for at least `count` values (resized only when it has fewer).
template <typename T>
T* grow(std::vector<T>& buffer, size_t count) {
    if (buffer.size() < count) buffer.resize(count);
    return buffer.data();
}

}  // namespace qjit
