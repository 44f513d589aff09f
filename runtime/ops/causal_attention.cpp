#include "runtime/ops/causal_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "base/error.hpp"
#include "base/half.hpp"
#include "runtime/context.hpp"
#include "runtime/ops/attention_kernels.hpp"
#include "runtime/ops/op_loops.hpp"

namespace qjit::ops {

size_t kv_element_bytes(qjit_kv_type type) {
    switch (type) {
        case QJIT_KV_F32: return sizeof(float);
        case QJIT_KV_F16: return sizeof(uint16_t);
        case QJIT_KV_INT8: return sizeof(int8_t);
        default: return 0;
    }
}

namespace {

// Bytes of one key/value head's block of the cache: its elements, and for int8 its positions' steps.
size_t head_block_bytes(const qjit_attention_shape& shape, qjit_kv_type type) {
    const size_t steps = type == QJIT_KV_INT8 ? kKeyBlock * sizeof(float) : 0;
    return size_t(shape.head_size) * kKeyBlock * kv_element_bytes(type) + steps;
}

// Bytes from one block of the cache to the next (keys and values alike).
size_t block_bytes(const qjit_attention_shape& shape, qjit_kv_type type) {
    return size_t(shape.n_kv_heads) * head_block_bytes(shape, type);
}

}  // namespace

size_t kv_cache_bytes(const qjit_attention_shape& shape, int64_t capacity, qjit_kv_type type) {
    if (kv_element_bytes(type) == 0 || shape.head_size < 1 || shape.head_size > kMaxHeadSize ||
        shape.n_kv_heads < 1 || capacity < 0 || capacity % kKeyBlock != 0)
        return 0;
    return size_t(capacity / kKeyBlock) * block_bytes(shape, type);
}

void check_shape(const qjit_attention_shape& shape) {
    require(shape.head_size >= 1 && shape.head_size <= kMaxHeadSize, "attention: heads of ", shape.head_size,
            " values; expected 1 to ", kMaxHeadSize);
    require(shape.n_kv_heads >= 1 && shape.n_heads >= 1 && shape.n_heads % shape.n_kv_heads == 0, "attention: ",
            shape.n_heads, " query heads do not share ", shape.n_kv_heads, " key/value heads evenly");
}

void check_kv_type(qjit_kv_type type) {
    require(kv_element_bytes(type) != 0, "attention: the cache's type is ", int(type),
            "; expected QJIT_KV_F32 (0), QJIT_KV_F16 (1) or QJIT_KV_INT8 (2)");
}

namespace {

void check(const qjit_attention_shape& shape, const qjit_kv_cache& cache, int pos0, int count) {
    check_shape(shape);
    require(pos0 >= 0 && count >= 0, "attention: positions from ", pos0, ", ", count, " of them");
    require(cache.capacity % kKeyBlock == 0 && cache.capacity >= int64_t(pos0) + count, "attention: a cache of ",
            cache.capacity, " positions for ", int64_t(pos0) + count, " (it must be a multiple of ", kKeyBlock, ")");
    require(count == 0 || (cache.keys && cache.values), "attention: the cache's keys or values are NULL");
    check_kv_type(cache.type);
}

// One head's row of head_size keys or values as int8 codes (qjit_kv_type), written `stride`
// codes apart; returns its step.
float store_int8_row(const float* row, size_t head_size, int8_t* codes, size_t stride) {
    float amax = 0.0f;
    bool finite = true;
    for (size_t i = 0; i < head_size; ++i) {
        finite = finite && std::isfinite(row[i]);
        amax = std::max(amax, std::fabs(row[i]));
    }
    if (!finite) {
        for (size_t i = 0; i < head_size; ++i) codes[i * stride] = 0;
        return std::numeric_limits<float>::quiet_NaN();
    }
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (size_t i = 0; i < head_size; ++i) codes[i * stride] = int8_t(std::nearbyint(row[i] * inverse));
    return amax / 127.0f;
}

// Writes rows of keys and values into a cache of Element: float, uint16_t for binary16, or int8_t
// for int8 codes with their steps after each head's block.
template <typename Element>
void store_rows(const qjit_attention_shape& shape, const qjit_kv_cache& cache, const float* k, const float* v,
                int pos0, int count) {
    auto convert = [](float x) {
        if constexpr (std::is_same_v<Element, float>) return x;
        else return float_to_half(x);
    };
    const size_t head_size = size_t(shape.head_size), kv_dim = size_t(shape.n_kv_heads) * head_size;
    const size_t block_size = block_bytes(shape, cache.type), head_block = head_block_bytes(shape, cache.type);
    for (int t = 0; t < count; ++t) {
        const int s = pos0 + t;
        const size_t j = size_t(s % kKeyBlock);
        for (int h = 0; h < shape.n_kv_heads; ++h) {
            const size_t head = size_t(s / kKeyBlock) * block_size + size_t(h) * head_block;
            auto* const keys = reinterpret_cast<Element*>(static_cast<char*>(cache.keys) + head);
            auto* const values = reinterpret_cast<Element*>(static_cast<char*>(cache.values) + head);
            const float* k_row = k + size_t(t) * kv_dim + size_t(h) * head_size;
            const float* v_row = v + size_t(t) * kv_dim + size_t(h) * head_size;
            if constexpr (std::is_same_v<Element, int8_t>) {
                float* const key_steps = reinterpret_cast<float*>(keys + head_size * kKeyBlock);
                float* const value_steps = reinterpret_cast<float*>(values + head_size * kKeyBlock);
                key_steps[j] = store_int8_row(k_row, head_size, keys + j, kKeyBlock);
                value_steps[j] = store_int8_row(v_row, head_size, values + j * head_size, 1);
            } else {
                for (size_t i = 0; i < head_size; ++i) keys[i * kKeyBlock + j] = convert(k_row[i]);
                for (size_t i = 0; i < head_size; ++i) values[j * head_size + i] = convert(v_row[i]);
            }
        }
    }
}

}  // namespace

void store_keys_and_values(const qjit_attention_shape& shape, const qjit_kv_cache& cache, const float* k,
                           const float* v, int pos0, int count) {
    check(shape, cache, pos0, count);
    require(count == 0 || (k && v), "kv_cache_store: k or v is NULL");
    switch (cache.type) {
        case QJIT_KV_F32: return store_rows<float>(shape, cache, k, v, pos0, count);
        case QJIT_KV_F16: return store_rows<uint16_t>(shape, cache, k, v, pos0, count);
        default: return store_rows<int8_t>(shape, cache, k, v, pos0, count);
    }
}

namespace {

// Attention with a plan, for arguments the entry points below checked.
void attend_checked(qjit_context& context, const AttentionPlan& plan, const qjit_attention_shape& shape,
                    const qjit_kv_cache& cache, const float* q, int pos0, int count, float* out, int window) {
    const int head_size = shape.head_size;
    const int kv_mul = shape.n_heads / shape.n_kv_heads;
    const size_t q_dim = size_t(shape.n_heads) * size_t(head_size);
    // A task: up to `rows` queries of one key/value head (its heads of one position, then the
    // next positions'). Fewer rows than the most only when there are fewer queries.
    const int64_t queries = int64_t(count) * kv_mul;  // of one key/value head
    const int rows = int(std::min<int64_t>(plan.rows, queries));
    const AttentionKernel kernel = attention_kernel(plan.family, cache.type, rows);
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
            const size_t head = size_t(kv_head) * head_block_bytes(shape, cache.type);
            AttentionTask task;
            task.keys = static_cast<const char*>(cache.keys) + head;
            task.values = static_cast<const char*>(cache.values) + head;
            task.block_bytes = block_bytes(shape, cache.type);
            task.head_size = head_size;
            task.scale = scale;
            task.window = window;
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

// The checks of both entry points but the plan's.
void check_call(const qjit_attention_shape& shape, const qjit_kv_cache& cache, const float* q, int pos0, int count,
                const float* out, int window) {
    check(shape, cache, pos0, count);
    require(window >= 0, "attention: a window of ", window, " positions; expected 0 (none) or more");
    require(count == 0 || (q && out), "attention: q or out is NULL");
}

}  // namespace

void causal_attention(qjit_context& context, const qjit_attention_shape& shape, const qjit_kv_cache& cache,
                      const float* q, int pos0, int count, float* out, int window) {
    check_call(shape, cache, q, pos0, count, out, window);
    if (count == 0) return;
    attend_checked(context, attention_plan(context, shape, cache.type), shape, cache, q, pos0, count, out, window);
}

void causal_attention(qjit_context& context, const AttentionPlan& plan, const qjit_attention_shape& shape,
                      const qjit_kv_cache& cache, const float* q, int pos0, int count, float* out, int window) {
    check_call(shape, cache, q, pos0, count, out, window);
    require(plan.family <= simd_family(context.isa), "attention: a plan of the ", simd_family_name(plan.family),
            " family above the context's cap");
    if (count == 0) return;
    attend_checked(context, plan, shape, cache, q, pos0, count, out, window);
}

}  // namespace qjit::ops
