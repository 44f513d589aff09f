// An allocator for large buffers that a parallel writer fills: elements are left uninitialized
// (default-initialized), so no serial zero-fill runs before the writers, whose first touch of
// each page then happens on their own threads. Buffers of 2 MiB and more are aligned to 2 MiB and
// offered to the kernel as transparent huge pages (512 times fewer page faults, fewer TLB misses
// for the kernels that stream them); from 64 KiB they share huge pages in the arena
// (base/huge_page_arena.hpp); smaller ones come from malloc.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <type_traits>
#include <utility>

#include "base/huge_page_arena.hpp"

namespace qjit {

template <typename T>
class PageAllocator {
public:
    static_assert(std::is_trivially_default_constructible_v<T>, "elements are left uninitialized");
    using value_type = T;

    PageAllocator() = default;
    template <typename U>
    PageAllocator(const PageAllocator<U>&) {}

    T* allocate(size_t count) {
        const size_t bytes = count * sizeof(T);
        if (bytes < kArenaMinBytes) {
            if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return static_cast<T*>(p);
            throw std::bad_alloc();
        }
        if (in_arena(bytes)) return static_cast<T*>(arena_allocate(bytes));
        return static_cast<T*>(allocate_huge_pages(bytes));
    }
    void deallocate(T* p, size_t count) {
        if (in_arena(count * sizeof(T))) arena_free(p);
        else std::free(p);
    }

    // Default-initialization: a trivial T is left as the memory holds it.
    template <typename U>
    void construct(U* p) noexcept {
        ::new (static_cast<void*>(p)) U;
    }
    template <typename U, typename... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }

    template <typename U>
    bool operator==(const PageAllocator<U>&) const { return true; }
};

}  // namespace qjit
