// Filling a packed layout on the thread pool: tasks are ranges of whole panels, so no two tasks
// write the same word and each task's writes are contiguous.
#pragma once

#include <algorithm>
#include <cstdint>

#include "format/packed_codes.hpp"
#include "runtime/cpu/thread_pool.hpp"

namespace qjit {

// Calls fill(first_panel, end_panel) over all panels of `target`, in tasks of about
// `columns_per_task` columns (at least one panel), spread over the pool. What `fill` throws reaches
// the caller (ThreadPool::parallel_for).
template <typename Fill>
void fill_panels_in_parallel(ThreadPool& pool, const PackedCodes& target, int64_t columns_per_task, Fill&& fill) {
    const int64_t panels = target.num_panels();
    const int64_t panels_per_task = std::max<int64_t>(1, columns_per_task / target.panel_columns);
    auto task = [&](int64_t t) { fill(t * panels_per_task, std::min(panels, (t + 1) * panels_per_task)); };
    pool.parallel_for((panels + panels_per_task - 1) / panels_per_task, task);
}

}  // namespace qjit
