// Loops of the ops (and of qjit_parallel_for) over a context's thread pool, in ranges.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/context.hpp"

namespace qjit::ops {

// The work (multiply-adds or element operations) below which an op runs on the calling thread: a
// dispatch to the pool costs about a microsecond.
inline constexpr int64_t kOpGrainWork = int64_t(1) << 14;

// body(begin, end) over [0, count) in ranges of at least `grain` items, spread over the context's
// pool; a loop of one grain or less runs on the calling thread.
template <typename Body>
void parallel_ranges(qjit_context& context, int64_t count, int64_t grain, const Body& body) {
    if (count <= 0) return;
    // A few ranges per thread, so that a thread delayed by the OS leaves its share to the others.
    const int64_t most = int64_t(context.num_threads) * 4;
    const int64_t ranges = std::clamp<int64_t>(count / std::max<int64_t>(1, grain), 1, most);
    const int64_t size = (count + ranges - 1) / ranges;  // whole grains per range
    auto range = [&](int64_t i) { body(i * size, std::min(count, (i + 1) * size)); };
    context.pool->parallel_for((count + size - 1) / size, range, ranges > 1);
}

}  // namespace qjit::ops
