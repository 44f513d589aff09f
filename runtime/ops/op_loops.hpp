// Loops of the ops (and of qjit_parallel_for) over a context's thread pool, in ranges.
#pragma once

#include <cstdint>

#include "runtime/context.hpp"

namespace qjit::ops {

// The work (multiply-adds or element operations) below which an op runs on the calling thread: a
// dispatch to the pool costs about a microsecond.
inline constexpr int64_t kOpGrainWork = int64_t(1) << 14;

// body(begin, end) over [0, count) in ranges of at least `grain` items, a few per thread of the
// context's pool (ThreadPool::parallel_ranges); a loop of one grain or less runs on the calling
// thread.
template <typename Body>
void parallel_ranges(qjit_context& context, int64_t count, int64_t grain, const Body& body) {
    constexpr int64_t kRangesPerThread = 4;
    context.pool->parallel_ranges(count, grain, kRangesPerThread, body);
}

}  // namespace qjit::ops
