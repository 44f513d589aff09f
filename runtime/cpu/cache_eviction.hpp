// Flushing a buffer out of every cache level, so that the next read of it comes from memory: how
// the tuner and qjit_linear_benchmark time a layer as LLM decoding sees it (each layer's weights
// cold, since the whole model does not fit the caches) without a rotation of copies.
#pragma once

#include <cstddef>
#include <vector>

namespace qjit {

// clflush on every cache line of [data, data + bytes), then a fence.
void evict_from_caches(const void* data, size_t bytes);

// Any contiguous container of values (std::vector, PageBuffer).
template <typename Values>
void evict_from_caches(const Values& values) {
    evict_from_caches(values.data(), values.size() * sizeof(values[0]));
}

}  // namespace qjit
