#include "runtime/cache_eviction.hpp"

#include <emmintrin.h>

#include <cstdint>

namespace qjit {

void evict_from_caches(const void* data, size_t bytes) {
    constexpr uintptr_t kLine = 64;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(kLine - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
    for (uintptr_t line = begin; line < end; line += kLine) _mm_clflush(reinterpret_cast<const void*>(line));
    _mm_mfence();
}

}  // namespace qjit
