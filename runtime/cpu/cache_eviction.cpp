#include "runtime/cpu/cache_eviction.hpp"

#include <cpuid.h>
#include <immintrin.h>

#include <cstdint>

namespace qjit {

namespace {

constexpr uintptr_t kLine = 64;

bool has_clflushopt() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & (1u << 23));
}

// clflushopt is weakly ordered, so flushes overlap: about 15x faster than clflush here, which
// waits for each line (1 ms against 13-30 ms for 22 MiB on a Xeon VM).
__attribute__((target("clflushopt"))) void flush_lines_overlapped(uintptr_t begin, uintptr_t end) {
    for (uintptr_t line = begin; line < end; line += kLine) _mm_clflushopt(reinterpret_cast<void*>(line));
    _mm_sfence();
}

void flush_lines(uintptr_t begin, uintptr_t end) {
    for (uintptr_t line = begin; line < end; line += kLine) _mm_clflush(reinterpret_cast<const void*>(line));
    _mm_mfence();
}

}  // namespace

void evict_from_caches(const void* data, size_t bytes) {
    static const bool overlapped = has_clflushopt();
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(kLine - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
    if (overlapped) flush_lines_overlapped(begin, end);
    else flush_lines(begin, end);
}

}  // namespace qjit
