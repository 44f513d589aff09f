#include "base/huge_page_arena.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>

namespace qjit {

namespace {

// At the start of each chunk; buffers follow it.
struct ChunkHeader {
    size_t used;  // bytes from the chunk's start handed out (the header included)
    size_t live;  // buffers not yet freed
};
constexpr size_t kHeaderBytes = kHugePageBytes - kArenaEndBytes;  // keeps the buffers 64-byte aligned
static_assert(sizeof(ChunkHeader) <= kHeaderBytes && kHeaderBytes % 64 == 0);

struct Arena {
    std::mutex mutex;
    ChunkHeader* current = nullptr;  // where new buffers go
    size_t chunks = 0;
};

Arena& arena() {
    static Arena* instance = new Arena;  // never destroyed: buffers may be freed during exit
    return *instance;
}

ChunkHeader* chunk_of(void* buffer) {
    return reinterpret_cast<ChunkHeader*>(reinterpret_cast<uintptr_t>(buffer) & ~uintptr_t(kHugePageBytes - 1));
}

}  // namespace

void* allocate_huge_pages(size_t bytes) {
    const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* memory = std::aligned_alloc(kHugePageBytes, rounded);
    if (memory == nullptr) throw std::bad_alloc();
    madvise(memory, rounded, MADV_HUGEPAGE);
    return memory;
}

void* arena_allocate(size_t bytes) {
    if (!in_arena(bytes)) throw std::bad_alloc();
    const size_t rounded = (bytes + 63) / 64 * 64;
    Arena& a = arena();
    std::lock_guard<std::mutex> lock(a.mutex);
    if (a.current == nullptr || a.current->used + rounded > kHugePageBytes) {
        void* memory = allocate_huge_pages(kHugePageBytes);
        // The chunk being left holds a buffer (an empty one takes any): its last one frees it.
        a.current = ::new (memory) ChunkHeader{kHeaderBytes, 0};
        ++a.chunks;
    }
    void* buffer = reinterpret_cast<char*>(a.current) + a.current->used;
    a.current->used += rounded;
    ++a.current->live;
    return buffer;
}

void arena_free(void* buffer) {
    if (buffer == nullptr) return;
    Arena& a = arena();
    std::lock_guard<std::mutex> lock(a.mutex);
    ChunkHeader* chunk = chunk_of(buffer);
    if (--chunk->live > 0) return;
    if (chunk == a.current) {
        chunk->used = kHeaderBytes;  // empty: reused from its start
        return;
    }
    std::free(chunk);
    --a.chunks;
}

size_t arena_chunks() {
    Arena& a = arena();
    std::lock_guard<std::mutex> lock(a.mutex);
    return a.chunks;
}

}  // namespace qjit
