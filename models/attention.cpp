#include "models/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/float_vectors.hpp"
#include "base/simd_clones.hpp"
#include "models/fail.hpp"
#include "models/parallel_loop.hpp"

namespace qjit_models {

using qjit::exp16;
using qjit::Floats16;
using qjit::load16;
using qjit::splat16;
using qjit::store16;

namespace {

constexpr int kRows = 4;  // queries of one task: 2 x 4 score vectors and 4 x 4 output vectors in registers

struct QueryRows {
    const float* q[kRows] = {};
    float* out[kRows] = {};
    int pos[kRows] = {};
    int count = 0;
};

[[gnu::always_inline]] inline float lane_max(Floats16 v) {
    float m = v[0];
    for (int i = 1; i < 16; ++i) m = std::max(m, v[i]);
    return m;
}

[[gnu::always_inline]] inline float lane_sum(Floats16 v) {
    float s = 0.0f;
    for (int i = 0; i < 16; ++i) s += v[i];
    return s;
}

// acc[r][j .. j + 16 * V) += sum over the block's `valid` positions s of p[r][s] * values[s][j ..].
template <int V>
[[gnu::always_inline]] inline void add_weighted_values(float (*acc)[kMaxHeadSize], const float (*p)[kKeyBlock],
                                                       const float* values, size_t value_row, int valid, int j) {
    Floats16 sum[kRows][V];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) sum[r][v] = load16(acc[r] + j + 16 * v);
    for (int s = 0; s < valid; ++s) {
        const float* row = values + size_t(s) * value_row + size_t(j);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
            const Floats16 value = load16(row + 16 * v);
#pragma GCC unroll 4
            for (int r = 0; r < kRows; ++r) sum[r][v] += p[r][s] * value;
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) store16(acc[r] + j + 16 * v, sum[r][v]);
}

// The queries of `rows` (sharing one key/value head) over the cache positions 0 .. their last.
QJIT_SIMD_CLONES void attend_rows(const QueryRows& rows, const float* keys, size_t key_row, const float* values,
                                  size_t value_row, int head_size, float scale) {
    alignas(64) float q[kRows][kMaxHeadSize] = {};  // scaled; rows past rows.count stay zero
    alignas(64) float acc[kRows][kMaxHeadSize] = {};
    alignas(64) float p[kRows][kKeyBlock] = {};
    float running_max[kRows], running_sum[kRows];
    int last = 0;
    for (int r = 0; r < rows.count; ++r) {
        for (int i = 0; i < head_size; ++i) q[r][i] = rows.q[r][i] * scale;
        running_max[r] = -std::numeric_limits<float>::infinity();
        running_sum[r] = 0.0f;
        last = std::max(last, rows.pos[r]);
    }
    Floats16 offsets;
    for (int i = 0; i < 16; ++i) offsets[i] = float(i);
    const Floats16 minus_infinity = splat16(-std::numeric_limits<float>::infinity());

    for (int s0 = 0; s0 <= last; s0 += kKeyBlock) {
        Floats16 low[kRows] = {}, high[kRows] = {};
        for (int i = 0; i < head_size; ++i) {
            const float* key = keys + size_t(i) * key_row + size_t(s0);
            const Floats16 k_low = load16(key), k_high = load16(key + 16);
#pragma GCC unroll 4
            for (int r = 0; r < kRows; ++r) {
                low[r] += q[r][i] * k_low;
                high[r] += q[r][i] * k_high;
            }
        }
        const Floats16 at_low = offsets + float(s0), at_high = at_low + 16.0f;
        for (int r = 0; r < rows.count; ++r) {
            const Floats16 pos = splat16(float(rows.pos[r]));
            const Floats16 s_low = at_low <= pos ? low[r] : minus_infinity;
            const Floats16 s_high = at_high <= pos ? high[r] : minus_infinity;
            const float new_max = std::max(running_max[r], std::max(lane_max(s_low), lane_max(s_high)));
            const float rescale = std::exp(running_max[r] - new_max);  // 0 for the first block
            const Floats16 e_low = exp16(s_low - new_max), e_high = exp16(s_high - new_max);
            running_sum[r] = running_sum[r] * rescale + lane_sum(e_low + e_high);
            running_max[r] = new_max;
            store16(p[r], e_low);
            store16(p[r] + 16, e_high);
            if (rescale != 1.0f)
                for (int i = 0; i < head_size; ++i) acc[r][i] *= rescale;
        }
        const int valid = std::min(kKeyBlock, last - s0 + 1);
        const float* block_values = values + size_t(s0) * value_row;
        int j = 0;
        for (; j + 64 <= head_size; j += 64) add_weighted_values<4>(acc, p, block_values, value_row, valid, j);
        for (; j + 16 <= head_size; j += 16) add_weighted_values<1>(acc, p, block_values, value_row, valid, j);
        // The last head_size % 16 features. Positions in the outer loop: a loop over s inside would be a
        // reduction, which the vectoriser computes with separate multiplies and adds for some trip
        // counts, so a query's result would depend on the other queries of its task.
        for (int s = 0; s < valid && j < head_size; ++s) {
            const float* row = block_values + size_t(s) * value_row;
            for (int r = 0; r < rows.count; ++r)
                for (int i = j; i < head_size; ++i) acc[r][i] += p[r][s] * row[i];
        }
    }
    for (int r = 0; r < rows.count; ++r) {
        const float inverse = 1.0f / running_sum[r];
        for (int i = 0; i < head_size; ++i) rows.out[r][i] = acc[r][i] * inverse;
    }
}

}  // namespace

void causal_attention(qjit_context* threads, const AttentionHeads& heads, const KeyValueCache& cache, const float* q,
                      int pos0, int count, float* out) {
    const int head_size = heads.head_size;
    if (head_size < 1 || head_size > kMaxHeadSize)
        fail("attention: heads of ", head_size, " values; expected 1 to ", kMaxHeadSize);
    if (heads.n_kv_heads < 1 || heads.n_heads % heads.n_kv_heads != 0)
        fail("attention: ", heads.n_heads, " query heads do not share ", heads.n_kv_heads, " key/value heads evenly");
    if (cache.key_row % kKeyBlock != 0 || cache.key_row < size_t(pos0 + count))
        fail("attention: a key row of ", cache.key_row, " positions for ", pos0 + count,
             " (it must be a multiple of ", kKeyBlock, ")");
    const int kv_mul = heads.n_heads / heads.n_kv_heads;
    const size_t q_dim = size_t(heads.n_heads) * size_t(head_size), kv_dim = size_t(heads.n_kv_heads) * size_t(head_size);
    const int64_t queries = int64_t(count) * kv_mul;  // of one key/value head
    const int64_t groups = (queries + kRows - 1) / kRows;
    const float scale = 1.0f / std::sqrt(float(head_size));

    // Task j: key/value head j % n_kv_heads; its query groups taken from both ends in turn (0, last,
    // 1, last - 1, ...), so that the contiguous ranges of tasks the threads take cost about the same
    // although later positions attend to more of the cache.
    const int64_t tasks = groups * heads.n_kv_heads;
    const int64_t task_work = int64_t(kRows) * (pos0 + count) * head_size * 2;
    parallel_loop(threads, tasks, std::max<int64_t>(1, kParallelGrainWork / task_work), [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
            const int kv_head = int(task % heads.n_kv_heads);
            const int64_t k = task / heads.n_kv_heads;
            const int64_t group = k % 2 == 0 ? k / 2 : groups - 1 - k / 2;
            QueryRows rows;
            for (int64_t query = group * kRows; query < std::min(queries, (group + 1) * kRows); ++query) {
                const int64_t t = query / kv_mul, h = int64_t(kv_head) * kv_mul + query % kv_mul;
                const size_t at = size_t(t) * q_dim + size_t(h) * size_t(head_size);
                rows.q[rows.count] = q + at;
                rows.out[rows.count] = out + at;
                rows.pos[rows.count] = pos0 + int(t);
                ++rows.count;
            }
            const size_t offset = size_t(kv_head) * size_t(head_size);
            attend_rows(rows, cache.keys + offset * cache.key_row, cache.key_row, cache.values + offset, kv_dim,
                        head_size, scale);
        }
    });
}

}  // namespace qjit_models
