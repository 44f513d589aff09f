// The huge-page arena (base/huge_page_arena.hpp) that PageAllocator puts medium buffers in: its
// buffers are aligned, disjoint and keep what is written to them, several share a 2 MiB chunk, a
// chunk is returned with its last buffer, and threads may allocate and free at once. A
// PageAllocator vector keeps its values as it grows from malloc's range through the arena's to
// its own huge pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "base/huge_page_arena.hpp"
#include "base/page_allocator.hpp"

namespace qjit {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(HugePageArena, BuffersAreAlignedDisjointAndShareChunks) {
    const size_t sizes[] = {kArenaMinBytes, 100000, 300001, 700000, 65600};
    std::vector<std::pair<char*, size_t>> buffers;
    for (size_t size : sizes) buffers.push_back({static_cast<char*>(arena_allocate(size)), size});
    for (size_t i = 0; i < buffers.size(); ++i) {
        EXPECT_EQ(address(buffers[i].first) % 64, 0u);
        std::memset(buffers[i].first, int(i + 1), buffers[i].second);
    }
    for (size_t i = 0; i < buffers.size(); ++i) {
        const auto& [p, size] = buffers[i];
        EXPECT_TRUE(std::all_of(p, p + size, [&](char c) { return c == char(i + 1); })) << "buffer " << i;
        // Within one chunk, past its header.
        EXPECT_EQ(address(p) / kHugePageBytes, (address(p) + size - 1) / kHugePageBytes);
        EXPECT_GE(address(p) % kHugePageBytes, 64u);
    }
    for (const auto& [p, size] : buffers) arena_free(p);
    // Ten of 100 kB (1 MB) lie in at most two chunks, whatever the arena held before.
    std::vector<void*> small;
    for (int i = 0; i < 10; ++i) small.push_back(arena_allocate(100000));
    std::vector<uintptr_t> chunks;
    for (void* p : small) chunks.push_back(address(p) / kHugePageBytes);
    std::sort(chunks.begin(), chunks.end());
    EXPECT_LE(std::unique(chunks.begin(), chunks.end()) - chunks.begin(), 2);
    for (void* p : small) arena_free(p);
}

TEST(HugePageArena, AChunkGoesBackWithItsLastBuffer) {
    const size_t before = arena_chunks();
    std::vector<void*> big;
    for (int i = 0; i < 6; ++i) big.push_back(arena_allocate(size_t(1200) << 10));  // one a chunk
    EXPECT_GE(arena_chunks(), before + 5);
    for (void* p : big) arena_free(p);
    EXPECT_LE(arena_chunks(), before + 1);  // the current chunk stays, emptied
    EXPECT_THROW(arena_allocate(kArenaMinBytes - 1), std::bad_alloc);
    EXPECT_THROW(arena_allocate(kHugePageBytes), std::bad_alloc);
}

TEST(HugePageArena, ThreadsAllocateAndFreeAtOnce) {
    auto churn = [](int seed) {
        std::vector<uint32_t*> held;
        for (int i = 0; i < 200; ++i) {
            const size_t count = (kArenaMinBytes + size_t((seed * 7919 + i * 104729) % 500000)) / 4;
            auto* p = static_cast<uint32_t*>(arena_allocate(count * 4));
            p[0] = uint32_t(i);
            p[count - 1] = uint32_t(i);
            held.push_back(p);
            if (held.size() > 8) {
                arena_free(held.front());
                held.erase(held.begin());
            }
        }
        for (uint32_t* p : held) arena_free(p);
    };
    std::thread a(churn, 1), b(churn, 2);
    churn(3);
    a.join();
    b.join();
}

TEST(PageAllocator, AVectorKeepsItsValuesAcrossEveryRange) {
    std::vector<uint32_t, PageAllocator<uint32_t>> values;
    for (const size_t count : {size_t(1000), size_t(40000), size_t(300000), size_t(1200000)}) {
        const size_t old = values.size();
        values.resize(count);
        for (size_t i = old; i < count; ++i) values[i] = uint32_t(i * 2654435761u);
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(values[i], uint32_t(i * 2654435761u)) << count;
    }
}

}  // namespace
}  // namespace qjit
