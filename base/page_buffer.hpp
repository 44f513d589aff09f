// A buffer of plain values that either owns its pages (PageAllocator: left unwritten until a
// parallel writer fills them, huge pages when large) or borrows them read-only from a file mapping
// it keeps alive: a layer's packed weights built at run time, or mapped from a pack file instead of
// rebuilt (runtime/layer_pack.hpp). Readers see the same contiguous values either way; only an
// owned buffer may be resized or written.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <vector>

#include "base/page_allocator.hpp"

namespace qjit {

template <typename T>
class PageBuffer {
public:
    using value_type = T;

    PageBuffer() = default;
    explicit PageBuffer(size_t count) : owned_(count) {}  // the values unwritten
    PageBuffer(size_t count, T value) : owned_(count, value) {}
    // `count` values at `data`, valid while `keeper` lives (a mapped file's handle).
    static PageBuffer borrow(const T* data, size_t count, std::shared_ptr<const void> keeper) {
        PageBuffer buffer;
        buffer.borrowed_ = data;
        buffer.borrowed_count_ = count;
        buffer.keeper_ = std::move(keeper);
        return buffer;
    }

    bool borrowed() const { return keeper_ != nullptr; }
    size_t size() const { return borrowed() ? borrowed_count_ : owned_.size(); }
    bool empty() const { return size() == 0; }

    const T* data() const { return borrowed() ? borrowed_ : owned_.data(); }
    const T& operator[](size_t i) const { return data()[i]; }
    const T* begin() const { return data(); }
    const T* end() const { return data() + size(); }

    // Writing: owned buffers only.
    T* data() { return owned().data(); }
    T& operator[](size_t i) { return owned()[i]; }
    T* begin() { return owned().data(); }
    T* end() { return owned().data() + owned_.size(); }
    // New values are left unwritten (PageAllocator), as std::vector's resize with that allocator.
    void resize(size_t count) { owned().resize(count); }
    void assign(size_t count, T value) { owned().assign(count, value); }
    template <typename Iterator>
    void assign(Iterator first, Iterator last) {
        owned().assign(first, last);
    }

    bool operator==(const PageBuffer& other) const { return std::equal(begin(), end(), other.begin(), other.end()); }

private:
    std::vector<T, PageAllocator<T>>& owned() {
        if (borrowed()) throw std::logic_error("a borrowed PageBuffer is read-only");
        return owned_;
    }

    std::vector<T, PageAllocator<T>> owned_;
    const T* borrowed_ = nullptr;
    size_t borrowed_count_ = 0;
    std::shared_ptr<const void> keeper_;  // null: owned
};

}  // namespace qjit
