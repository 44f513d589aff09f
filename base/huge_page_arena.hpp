// Medium buffers (64 KiB to 2 MiB: a small model's layers) packed together into 2 MiB chunks that
// are aligned to 2 MiB and offered to the kernel as transparent huge pages. Each such buffer on its
// own would sit on 4 KiB pages: decoding streams every layer once per token, and on a 2-core Zen 4
// VM SmolLM2-135M decoded 150-156 -> 201-205 tokens/s on 1 thread once its layers shared huge pages.
// A chunk is returned when its last buffer is freed; the tail of a chunk a buffer did not fit in
// stays unused (at most one buffer's size per chunk). Thread-safe.
#pragma once

#include <cstddef>

namespace qjit {

inline constexpr size_t kHugePageBytes = size_t(2) << 20;
// Buffers of kArenaMinBytes <= bytes < kArenaEndBytes come from the arena (a chunk keeps 64 bytes
// for its header).
inline constexpr size_t kArenaMinBytes = size_t(64) << 10;
inline constexpr size_t kArenaEndBytes = kHugePageBytes - 64;
inline bool in_arena(size_t bytes) { return bytes >= kArenaMinBytes && bytes < kArenaEndBytes; }

// `bytes` rounded up to whole huge pages, aligned to kHugePageBytes and offered to the kernel as
// transparent huge pages (a hint: where they are off, this is plain memory); free with std::free.
// Throws std::bad_alloc.
void* allocate_huge_pages(size_t bytes);

// `bytes` (in_arena(bytes)) aligned to 64 bytes; throws std::bad_alloc.
void* arena_allocate(size_t bytes);
// Frees a buffer arena_allocate returned.
void arena_free(void* buffer);
// Chunks the arena holds now (for tests).
size_t arena_chunks();

}  // namespace qjit
