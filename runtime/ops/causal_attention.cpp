#include "runtime/ops/causal_attention.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "runtime/context.hpp"
#include "runtime/ops/attention_kernels.hpp"
#include "runtime/ops/op_loops.hpp"

namespace qjit::ops {

namespace {

void check(const qjit_attention_shape& shape, const qjit_kv_cache& cache, int pos0, int count) {
    require(shape.head_size >= 1 && shape.head_size <= kMaxHeadSize, "attention: heads of ", shape.head_size,
            " values; expected 1 to ", kMaxHeadSize);
    require(shape.n_kv_heads >= 1 && shape.n_heads >= 1 && shape.n_heads % shape.n_kv_heads == 0, "attention: ",
            shape.n_heads, " query heads do not share ", shape.n_kv_heads, " key/value heads evenly");
    require(pos0 >= 0 && count >= 0, "attention: positions from ", pos0, ", ", count, " of them");
    require(cache.capacity % kKeyBlock == 0 && cache.capacity >= int64_t(pos0) + count, "attention: a cache of ",
            cache.capacity, " positions for ", int64_t(pos0) + count, " (it must be a multiple of ", kKeyBlock, ")");
    require(count == 0 || (cache.keys && cache.values), "attention: the cache's keys or values are NULL");
}

// Floats from one block of the cache to the next (keys and values alike).
size_t block_stride(const qjit_attention_shape& shape) {
    return size_t(shape.n_kv_heads) * size_t(shape.head_size) * kKeyBlock;
}

}  // namespace

void store_keys_and_values(const qjit_attention_shape& shape, const qjit_kv_cache& cache, const float* k,
                           const float* v, int pos0, int count) {
    check(shape, cache, pos0, count);
    require(count == 0 || (k && v), "kv_cache_store: k or v is NULL");
    const size_t head_size = size_t(shape.head_size), kv_dim = size_t(shape.n_kv_heads) * head_size;
    for (int t = 0; t < count; ++t) {
        const int s = pos0 + t;
        const size_t block = size_t(s / kKeyBlock) * block_stride(shape), j = size_t(s % kKeyBlock);
        for (int h = 0; h < shape.n_kv_heads; ++h) {
            const size_t head = block + size_t(h) * head_size * kKeyBlock;
            const float* k_row = k + size_t(t) * kv_dim + size_t(h) * head_size;
            const float* v_row = v + size_t(t) * kv_dim + size_t(h) * head_size;
            for (size_t i = 0; i < head_size; ++i) cache.keys[head + i * kKeyBlock + j] = k_row[i];
            std::copy(v_row, v_row + head_size, cache.values + head + j * head_size);
        }
    }
}

void causal_attention(qjit_context& context, const qjit_attention_shape& shape, const qjit_kv_cache& cache,
                      const float* q, int pos0, int count, float* out) {
    check(shape, cache, pos0, count);
    require(count == 0 || (q && out), "attention: q or out is NULL");
    if (count == 0) return;
    const int head_size = shape.head_size;
    const int kv_mul = shape.n_heads / shape.n_kv_heads;
    const size_t q_dim = size_t(shape.n_heads) * size_t(head_size);
    // A task: up to `rows` queries of one key/value head (its heads of one position, then the
    // next positions'). Fewer rows than the most only when there are fewer queries.
    const int64_t queries = int64_t(count) * kv_mul;  // of one key/value head
    const int rows = int(std::min<int64_t>(kMaxAttentionRows, queries));
    const AttentionKernel kernel = attention_kernel(context.isa, rows);
    const int64_t groups = (queries + rows - 1) / rows;
    const float scale = 1.0f / std::sqrt(float(head_size));

    // Task t: key/value head t / groups, so that a thread's contiguous range of tasks reuses one
    // head's keys and values from its cache; within a head the query groups are taken from both
    // ends in turn (0, last, 1, last - 1, ...), so that ranges cost about the same although later
    // positions attend to more of the cache.
    const int64_t tasks = groups * shape.n_kv_heads;
    const int64_t task_work = int64_t(rows) * (pos0 + count) * head_size * 2;
    parallel_ranges(context, tasks, std::max<int64_t>(1, kOpGrainWork / task_work), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int kv_head = int(t / groups);
            const int64_t k = t % groups;
            const int64_t group = k % 2 == 0 ? k / 2 : groups - 1 - k / 2;
            const size_t head = size_t(kv_head) * size_t(head_size) * kKeyBlock;
            AttentionTask task;
            task.keys = cache.keys + head;
            task.values = cache.values + head;
            task.block_stride = block_stride(shape);
            task.head_size = head_size;
            task.scale = scale;
            for (int64_t query = group * rows; query < std::min(queries, (group + 1) * rows); ++query) {
                const int64_t position = query / kv_mul, q_head = int64_t(kv_head) * kv_mul + query % kv_mul;
                const size_t at = size_t(position) * q_dim + size_t(q_head) * size_t(head_size);
                task.q[task.count] = q + at;
                task.out[task.count] = out + at;
                task.pos[task.count] = pos0 + int(position);
                ++task.count;
            }
            kernel(task);
        }
    });
}

}  // namespace qjit::ops
