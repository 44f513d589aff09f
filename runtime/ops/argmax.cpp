#include "runtime/ops/argmax.hpp"

#include <algorithm>
#include <vector>

#include "base/error.hpp"
#include "runtime/ops/op_loops.hpp"
#include "runtime/ops/row_kernels.hpp"

namespace qjit::ops {

namespace {

// A row shorter than this is one task: splitting it would cost more in the dispatch than it saves.
constexpr int64_t kMinChunk = int64_t(1) << 13;

[[noreturn]] void refuse_nan(const float* row, int64_t r, int64_t size) {
    const int64_t at = std::find_if(row, row + size, [](float v) { return v != v; }) - row;
    fail(QJIT_ERROR_INVALID_ARGUMENT, "argmax: values[", r, "][", at, "] is NaN");
}

}  // namespace

void argmax_rows(qjit_context& context, const float* values, int64_t rows, int64_t size, int64_t* indices) {
    const ArgmaxRange kernel = kArgmaxRange[simd_family(context.isa)];
    // A long row in as many chunks as the pool has threads (each under the kernels' lane limit),
    // then the chunks' maxima merged in order, so the lowest index wins a tie wherever the chunks
    // fall.
    const int64_t threads = context.pool->size();
    const int64_t chunks = std::max(std::clamp<int64_t>(size / kMinChunk, 1, threads),
                                    (size + kArgmaxRangeLimit - 1) / kArgmaxRangeLimit);
    const int64_t chunk = (size + chunks - 1) / chunks;
    thread_local std::vector<RangeMaximum> maxima;
    maxima.resize(size_t(rows * chunks));
    RangeMaximum* const found = maxima.data();
    parallel_ranges(context, rows * chunks, std::max<int64_t>(1, kOpGrainWork / chunk), [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
            const int64_t first = task % chunks * chunk;
            found[task] = kernel(values + task / chunks * size + first, std::min(chunk, size - first));
            if (found[task].index >= 0) found[task].index += first;
        }
    });
    for (int64_t r = 0; r < rows; ++r) {
        RangeMaximum best{-__builtin_inff(), 0, false};
        for (int64_t c = 0; c < chunks; ++c) {
            const RangeMaximum& part = found[r * chunks + c];
            if (part.has_nan) refuse_nan(values + r * size, r, size);
            if (part.index >= 0 && part.value > best.value) best = part;
        }
        indices[r] = best.index;
    }
}

}  // namespace qjit::ops
